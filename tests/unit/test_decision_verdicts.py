"""The verdict rules (simulate/verdicts.py) on small synthetic numbers, from the module's decision rule: looseness and
its word at the threshold, TOST equivalence, t-intervals, paired comparisons, Holm, rates and their power, the
combination across parts and instances, slopes, interval/bound/exact verdicts (issue 55)."""
import math

import numpy as np
import pytest
from scipy import stats

from simulate import verdicts as vd

H, R, I, O = vd.HOLDS, vd.REFUTED, vd.INCONCLUSIVE, vd.OUT_OF_SCOPE


# --- bounds ---------------------------------------------------------------------------------------------------------

def test_looseness_is_the_bound_over_the_upper_three_se_limit():
    assert vd.looseness(1.0, 0.1, 2.6) == pytest.approx(2.0)
    assert vd.looseness(1.0, 0.1, 2.6, z=1.0) == pytest.approx(2.6 / 1.1)
    assert vd.looseness(1.0, None, 3.0) == 3.0 and vd.looseness(1.0, math.nan, 3.0) == 3.0  # no s.e.: 0
    assert vd.looseness(0.0, 0.5, 3.0) == 2.0                                             # finite at measured 0
    for args in ((None, 0.1, 1.0), (1.0, 0.1, None), (-1.0, 0.1, 1.0), (1.0, 0.0, 0.0), (1.0, 0.0, -1.0),
                 (-0.4, 0.1, 1.0), (math.inf, 0.0, 1.0), (1.0, 0.0, math.inf)):
        assert vd.looseness(*args) is None, args
    assert vd.looseness(-0.3, 0.2, 1.0) == pytest.approx(1 / 0.3)


def test_loose_word_only_above_two():
    assert vd.LOOSE_MIN == 2.0 and vd.Z_REFUTE == 3.0
    assert vd.loose_word(3) == "holds, bound loose ×3" and vd.loose_word(4.02) == "holds, bound loose ×4.02"
    assert vd.loose_word(2.0) == H and vd.loose_word(2.0001) == "holds, bound loose ×2"
    assert vd.loose_word(1.0) == H and vd.loose_word(None) == H and vd.loose_word(1234.5) == "holds, bound loose ×1.23e+03"


def test_bound_verdict_zones():
    assert vd.bound_verdict(1.0, 1.5, 0.4) == R                     # lower side 0.5 > 0.4
    assert vd.bound_verdict(1.0, 1.5, 0.5) == I                     # lower side equal: not refuted
    assert vd.bound_verdict(1.0, 1.5, 1.5) == "holds, bound loose ×1.5"   # upper ≤ bound
    assert vd.bound_verdict(1.0, 1.5, 1.49) == I
    assert vd.bound_verdict(0.0, 0.5, 1.0) == "holds, bound loose ×∞"
    assert vd.bound_verdict(-1.0, 0.5, 1.0) == "holds, bound loose ×∞"
    with pytest.raises(ValueError, match=r"upper \(0.5\) must be >= measured \(1.0\)"):
        vd.bound_verdict(1.0, 0.5, 2.0)
    vd.bound_verdict(1.0, 1.0, 2.0)
    with pytest.raises(ValueError, match="measured, upper and bound must be finite"):
        vd.bound_verdict(1.0, math.inf, 2.0)


def test_exact_verdict_within_z_se():
    assert vd.exact_verdict(1.3, 0.1, 1.0) == vd.EXACT                # exactly 3 s.e.: holds
    assert vd.exact_verdict(1.31, 0.1, 1.0) == R and vd.exact_verdict(0.69, 0.1, 1.0) == R
    assert vd.exact_verdict(1.15, 0.1, 1.0, z=1.0) == R and vd.exact_verdict(1.0, 0.0, 1.0) == vd.EXACT
    for bad in ((math.nan, 0.1, 1.0), (1.0, -0.1, 1.0), (1.0, 0.1, math.inf)):
        with pytest.raises(ValueError, match="se >= 0"):
            vd.exact_verdict(*bad)


# --- equivalence (TOST) ---------------------------------------------------------------------------------------------

def test_equivalence_tost():
    v, p, lo, hi = vd.equivalence(0.0, 0.1, 0.5)
    assert v == H and p == pytest.approx(stats.norm.sf(5.0)) and (lo, hi) == pytest.approx((-0.1645, 0.1645), abs=1e-4)
    v, p, lo, hi = vd.equivalence(0.3, 0.1, 0.5, alpha=0.1)
    assert v == H and p == pytest.approx(stats.norm.cdf(-2.0))
    assert hi == pytest.approx(0.3 + stats.norm.ppf(0.9) * 0.1)
    v, p, lo, hi = vd.equivalence(2.0, 0.1, 0.5)
    assert v == R and lo > 0.5 and p == pytest.approx(stats.norm.cdf(15.0))
    assert vd.equivalence(-2.0, 0.1, 0.5)[0] == R
    assert vd.equivalence(0.45, 0.1, 0.5)[0] == I                       # p = cdf(−0.5) > α, interval straddles
    assert vd.equivalence(0.0, 0.0, 0.5) == (H, 0.0, 0.0, 0.0)
    assert vd.equivalence(0.5, 0.0, 0.5) == (R, 1.0, 0.5, 0.5)          # on the margin: not inside
    assert vd.equivalence(-0.7, 0.0, 0.5) == (R, 1.0, -0.7, -0.7)
    for est, se in ((math.nan, 0.1), (0.0, math.nan), (0.0, -0.1), (math.inf, 0.1)):
        with pytest.raises(ValueError, match="estimate and se must be finite with se >= 0"):
            vd.equivalence(est, se, 0.5)
    for m in (-0.1, math.inf, True, "1"):
        with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
            vd.equivalence(0.0, 0.1, m)
    for a in (0.0, 0.5, True, None):
        with pytest.raises(ValueError, match=r"alpha must be a number in \(0, 0.5\)"):
            vd.equivalence(0.0, 0.1, 0.5, alpha=a)
    assert vd.equivalence(0.0, 0.1, 0.0)[0] == I                        # margin 0: never inside
    assert vd.equivalence(0.0, 0.1, 0.5, alpha=0.49)[0] == H


# --- t intervals and paired comparisons -----------------------------------------------------------------------------

def test_t_interval():
    x = np.array([1.0, 2.0, 3.0, 6.0])
    m, lo, hi = vd.t_interval(x)
    se = np.std(x, ddof=1) / 2
    q = stats.t.ppf(0.975, 3)
    assert (m, lo, hi) == pytest.approx((3.0, 3.0 - q * se, 3.0 + q * se))
    assert vd.t_interval(x, 0.5)[2] == pytest.approx(3.0 + stats.t.ppf(0.75, 3) * se)
    assert vd.t_interval([2.0]) == (2.0, 2.0, 2.0) and vd.t_interval([2.0, 2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="x must hold at least one value"):
        vd.t_interval([])
    with pytest.raises(ValueError, match="x must be finite"):
        vd.t_interval([1.0, math.nan])
    for level in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
            vd.t_interval(x, level)


def test_paired_comparison_superiority_and_noninferiority():
    a = np.array([1.0, 1.1, 1.2, 1.3])
    b = np.zeros(4)
    c = vd.paired_comparison(a, b, kind="superiority", margin=0.1, name="x")
    d = a - b
    se = np.std(d, ddof=1) / 2
    t = (d.mean() - 0.1) / se
    assert (c.name, c.kind, c.margin, c.threshold, c.n) == ("x", "superiority", 0.1, 0.1, 4)
    assert c.estimate == pytest.approx(1.15) and c.se == pytest.approx(se)
    assert c.p_holds == pytest.approx(stats.t.sf(t, 3)) and c.p_refutes == pytest.approx(stats.t.cdf(t, 3))
    assert c.verdict == H and c.alpha_level == 0.05 and c.lo > 0.1
    assert c.lo == pytest.approx(1.15 - stats.t.ppf(0.95, 3) * se)
    c = vd.paired_comparison(b, a, kind="noninferiority", margin=0.1)
    assert c.threshold == -0.1 and c.verdict == R and c.hi < -0.1
    c = vd.paired_comparison(a - 1.15, b, kind="noninferiority", margin=0.01)
    assert c.verdict == I
    # no spread: the sign of m − c decides with certainty
    c = vd.paired_comparison([1.0, 1.0], [0.5, 0.5], kind="superiority", margin=0.5)
    assert (c.p_holds, c.p_refutes, c.verdict, c.lo, c.hi) == (1.0, 1.0, I, 0.5, 0.5)
    c = vd.paired_comparison([1.0, 1.0], [0.4, 0.4], kind="superiority", margin=0.5)
    assert (c.p_holds, c.p_refutes, c.verdict) == (0.0, 1.0, H)
    c = vd.paired_comparison([1.0, 1.0], [0.6, 0.6], kind="superiority", margin=0.5)
    assert (c.p_holds, c.p_refutes, c.verdict) == (1.0, 0.0, R)
    assert c.as_dict()["name"] == "" and c.as_dict()["verdict"] == R
    for kw, match in ((dict(kind="better"), "kind must be one of superiority, noninferiority, got 'better'"),
                      (dict(margin=-1.0), "margin must be")):
        with pytest.raises(ValueError, match=match):
            vd.paired_comparison(a, b, **{**dict(kind="superiority", margin=0.1), **kw})
    with pytest.raises(ValueError, match="a needs at least 2 values, got 1"):
        vd.paired_comparison([1.0], [1.0], kind="superiority", margin=0.1)
    with pytest.raises(ValueError, match=r"b must be finite \(no NaN/inf\); got 1 non-finite values"):
        vd.paired_comparison([1.0, 2.0], [1.0, math.nan], kind="superiority", margin=0.1)
    with pytest.raises(ValueError, match="a and b must be paired \\(same length\\), got 3 and 2"):
        vd.paired_comparison([1.0, 2.0, 3.0], [1.0, 2.0], kind="superiority", margin=0.1)
    c1 = vd.one_sample_comparison(a, kind="superiority", margin=0.1, name="y")
    assert c1.estimate == pytest.approx(1.15) and c1.name == "y" and c1.verdict == H
    with pytest.raises(ValueError, match="x needs at least 2 values"):
        vd.one_sample_comparison([1.0], kind="superiority", margin=0.1)


def test_holm_step_down():
    rej, lev = vd.holm([0.01, 0.04, 0.03, 0.5])
    assert list(lev) == pytest.approx([0.05 / 4, 0.05 / 2, 0.05 / 3, 0.05 / 1])  # α/(m − rank), rank by p
    assert list(rej) == [True, False, False, False]                       # 0.03 > 0.05/3 stops the descent
    rej, lev = vd.holm([0.012, 0.02, 0.04])
    assert list(rej) == [True, True, True] and list(lev) == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])
    rej, _ = vd.holm([0.0125, 0.9, 0.02, 0.001])                           # equal to its level: rejected
    assert list(rej) == [True, False, True, True]
    rej, lev = vd.holm([0.2, 0.01], alpha=0.25)
    assert list(rej) == [True, True] and list(lev) == [0.25, 0.125]
    for bad in ([0.1, 1.1], [-0.1], [math.nan]):
        with pytest.raises(ValueError, match=r"pvalues must lie in \[0, 1\]"):
            vd.holm(bad)
    assert vd.holm([])[0].size == 0


def test_decide_holm_levels_and_intervals():
    mk = lambda name, est, ph, pr: vd.Comparison(name, "superiority", 0.0, 0.0, 5, est, 0.1, ph, pr)  # noqa: E731
    out = vd.decide([mk("a", 1.0, 0.001, 0.99), mk("b", -1.0, 0.99, 0.01), mk("c", 0.0, 0.3, 0.3)])
    assert [c.verdict for c in out] == [H, R, I]
    assert out[0].alpha_level == pytest.approx(0.05 / 3) and out[1].alpha_level == pytest.approx(0.05 / 3)
    assert out[2].alpha_level == pytest.approx(0.05 / 2)                   # inconclusive: the smaller of its levels
    q = stats.t.ppf(1 - 0.05 / 3, 4)
    assert (out[0].lo, out[0].hi) == pytest.approx((1.0 - q * 0.1, 1.0 + q * 0.1))
    z = vd.decide([vd.Comparison("z", "superiority", 0.0, 0.0, 1, 0.7, 0.0, 0.0, 1.0)])[0]
    assert (z.lo, z.hi, z.verdict) == (0.7, 0.7, H)
    assert vd.decide([]) == []
    assert vd.decide([mk("a", 1.0, 0.04, 0.9)], alpha=0.01)[0].verdict == I


# --- failure rates --------------------------------------------------------------------------------------------------

def test_rate_check_three_zones():
    r = vd.rate_check(9, 10, p0=0.25, direction="above", name="x")
    ci = stats.binomtest(9, 10).proportion_ci(confidence_level=0.9, method="exact")
    assert (r.name, r.direction, r.p0, r.failures, r.n, r.rate) == ("x", "above", 0.25, 9, 10, 0.9)
    assert (r.lo, r.hi) == pytest.approx((ci.low, ci.high)) and r.verdict == H
    assert vd.rate_check(0, 20, p0=0.25, direction="above").verdict == R  # 90 % CP upper 0.139
    assert vd.rate_check(0, 10, p0=0.25, direction="above").verdict == I  # upper 0.259
    assert vd.rate_check(3, 10, p0=0.25, direction="above").verdict == I
    assert vd.rate_check(0, 20, p0=0.25, direction="below").verdict == H
    assert vd.rate_check(0, 10, p0=0.25, direction="below").verdict == I
    assert vd.rate_check(9, 10, p0=0.25, direction="below").verdict == R
    assert vd.rate_check(0, 20, p0=0.25, direction="below", alpha=0.001).verdict == I
    assert vd.rate_check(np.int64(1), np.int64(2), p0=0.5, direction="below").as_dict()["rate"] == 0.5
    for kw, match in ((dict(direction="up"), "direction must be 'above' or 'below', got 'up'"),
                      (dict(n=0), "n must be an integer >= 1, got 0"), (dict(n=2.0), "n must be an integer"),
                      (dict(failures=11), r"failures must be an integer in \[0, n\] = \[0, 10\], got 11"),
                      (dict(failures=-1), "failures must be"), (dict(failures=1.0), "failures must be"),
                      (dict(p0=0.0), r"p0 must be in \(0, 1\), got 0.0"), (dict(p0=1.0), "p0 must be"),
                      (dict(alpha=0.5), "alpha must be")):
        with pytest.raises(ValueError, match=match):
            vd.rate_check(**{**dict(failures=1, n=10, p0=0.25, direction="above"), **kw})


def test_rate_power_is_the_smaller_of_the_two_sides():
    n, p0 = 20, 0.25
    ks = np.arange(n + 1)
    v = [vd.rate_check(int(k), n, p0=p0, direction="above").verdict for k in ks]
    p_h = sum(stats.binom.pmf(k, n, 0.5) for k in ks if v[k] == H)
    p_r = sum(stats.binom.pmf(k, n, p0 / 4) for k in ks if v[k] == R)
    assert vd.rate_power(n, p0, "above") == pytest.approx(min(p_h, p_r))
    v = [vd.rate_check(int(k), n, p0=p0, direction="below").verdict for k in ks]
    p_h = sum(stats.binom.pmf(k, n, p0 / 4) for k in ks if v[k] == H)
    p_r = sum(stats.binom.pmf(k, n, 0.5) for k in ks if v[k] == R)
    assert vd.rate_power(n, p0, "below") == pytest.approx(min(p_h, p_r))
    assert 0 < vd.rate_power(40, 0.6, "above") <= 1                      # 2·p0 capped at 1
    assert vd.rate_power(40, 0.6, "above", alpha=0.2) >= vd.rate_power(40, 0.6, "above")
    for kw, match in ((dict(direction="x"), "direction must be"), (dict(n=0), "n must be an integer >= 1"),
                      (dict(alpha=0.0), "alpha must be")):
        with pytest.raises(ValueError, match=match):
            vd.rate_power(**{**dict(n=10, p0=0.25, direction="above"), **kw})


def test_comparison_and_interval_power():
    n, sd, m, lv = 10, 0.2, 0.1, 0.05
    want = stats.nct.sf(stats.t.ppf(1 - lv, n - 1), n - 1, m * math.sqrt(n) / sd)
    assert vd.comparison_power(n, sd, m, lv) == pytest.approx(want)
    assert vd.comparison_power(2, 0.0, 0.1, lv) == 1.0 and vd.comparison_power(2, 0.0, 0.0, lv) == 0.0
    for args, match in (((1, 0.1, 0.1, lv), "n must be an integer >= 2, got 1"), ((2.0, 0.1, 0.1, lv), "n must be"),
                        ((5, -0.1, 0.1, lv), "sd must be a finite number >= 0"), ((5, math.nan, 0.1, lv), "sd must"),
                        ((5, 0.1, -0.1, lv), "margin must"), ((5, 0.1, 0.1, 0.5), r"level must be in \(0, 0.5\)"),
                        ((5, 0.1, 0.1, 0.0), "level must be")):
        with pytest.raises(ValueError, match=match):
            vd.comparison_power(*args)
    assert vd.interval_power(0.4, 0.1) == pytest.approx(stats.norm.cdf(2.0 - stats.norm.ppf(0.95)))
    assert vd.interval_power(-0.4, 0.1, alpha=0.1) == pytest.approx(stats.norm.cdf(2.0 - stats.norm.ppf(0.9)))
    assert vd.interval_power(0.4, 0.0) == 1.0 and vd.interval_power(0.0, 0.0) == 0.0
    for e, se in ((math.nan, 0.1), (0.1, -1.0), (0.1, math.inf)):
        with pytest.raises(ValueError, match="effect and se must be finite with se >= 0"):
            vd.interval_power(e, se)


# --- words across parts and instances ------------------------------------------------------------------------------

def test_combine_parts_of_one_claim():
    assert vd.combine([H, R, I]) == R and vd.combine([O, O]) == O and vd.combine([H, O]) == H
    assert vd.combine([H, "holds, bound loose ×3"]) == H and vd.combine([H, I]) == I and vd.combine([O, I]) == I
    assert vd.combine(iter([H])) == H
    with pytest.raises(ValueError, match="verdicts must not be empty"):
        vd.combine([])
    with pytest.raises(ValueError, match="unknown verdict 'maybe'; the vocabulary is holds"):
        vd.combine([H, "maybe"])


def test_aggregate_across_instances():
    assert vd.aggregate([H, H, H, I]) == H                               # 3 of 4 = ¾
    assert vd.aggregate([H, H, I, I]) == I and vd.aggregate([H, H, H, R]) == I   # a refuted one blocks holds
    assert vd.aggregate([R, R, H]) == R and vd.aggregate([R, H]) == I    # a strict majority refutes
    assert vd.aggregate([O, O]) == O and vd.aggregate([]) == O and vd.aggregate([H, O, O]) == H
    assert vd.aggregate([H, H, I], min_fraction=0.6) == H and vd.aggregate([H, H, I], min_fraction=0.7) == I
    assert vd.aggregate(["holds, bound loose ×3", H, H, H]) == H
    with pytest.raises(ValueError, match="unknown verdict"):
        vd.aggregate([H, "nope"])


def test_interval_verdict_zones():
    assert vd.interval_verdict(0.1, 0.3, 0.0) == H and vd.interval_verdict(-0.3, -0.1, 0.0) == R
    assert vd.interval_verdict(0.0, 0.3, 0.0) == I and vd.interval_verdict(-0.3, 0.0, 0.0) == I
    assert vd.interval_verdict(-0.3, -0.1, 0.0, above=False) == H and vd.interval_verdict(0.1, 0.3, 0.0, above=False) == R
    assert vd.interval_verdict(-0.1, 0.1, 0.0, above=False) == I
    for lo, hi in ((0.3, 0.1), (math.nan, 0.1), (0.0, math.inf)):
        with pytest.raises(ValueError, match="need a finite interval lo <= hi"):
            vd.interval_verdict(lo, hi, 0.0)


# --- slopes -----------------------------------------------------------------------------------------------------------

def test_slope_weights_and_bootstrap_slope():
    x = np.array([1.0, 2.0, 4.0])
    y = np.array([0.5, 1.0, 3.0])
    assert float(y @ vd.slope_weights(x)) == pytest.approx(stats.linregress(x, y).slope)
    for bad in ([1.0], [2.0, 2.0]):
        with pytest.raises(ValueError, match="x needs at least two distinct values"):
            vd.slope_weights(bad)
    Y = np.array([[0.0, 1.0, 3.0], [0.2, 1.0, 2.8], [0.1, 1.3, 3.1]])
    est, lo, hi = vd.bootstrap_slope(x, Y, n_resamples=200, seed=1)
    assert est == pytest.approx(stats.linregress(x, Y.mean(axis=0)).slope) and lo <= est <= hi and lo < hi
    assert vd.bootstrap_slope(x, Y, n_resamples=200, seed=1) == (est, lo, hi)
    same = np.tile(y, (3, 1))
    s = vd.bootstrap_slope(x, same)
    assert s[0] == s[1] == s[2] == pytest.approx(stats.linregress(x, y).slope)
    for bad, match in ((Y[:, :2], r"Y must have shape \(n_seeds, 3\)"), (Y[:1], "Y needs at least 2 rows"),
                       (np.where(Y > 3, np.nan, Y), "x and Y must be finite")):
        with pytest.raises(ValueError, match=match):
            vd.bootstrap_slope(x, bad)
    _, lo80, hi80 = vd.bootstrap_slope(x, Y, n_resamples=400, level=0.5, seed=2)
    _, lo99, hi99 = vd.bootstrap_slope(x, Y, n_resamples=400, level=0.99, seed=2)
    assert lo99 <= lo80 and hi80 <= hi99


# --- issue 55, second round: the rule's edges that mutants showed untested ------------------------------------------

VOCAB = ", ".join(vd.VERDICTS)


def test_messages_are_the_documented_ones_in_full():
    import re
    full = lambda s: "^" + re.escape(s) + "$"  # noqa: E731
    with pytest.raises(ValueError, match=full(f"unknown verdict 'maybe'; the vocabulary is {VOCAB}")):
        vd.combine([H, "maybe"])
    with pytest.raises(ValueError, match=full(f"unknown verdict 'nope'; the vocabulary is {VOCAB}")):
        vd.aggregate([H, "nope"])
    with pytest.raises(ValueError, match=full("verdicts must not be empty")):
        vd.combine([])
    with pytest.raises(ValueError, match=full("measured, upper and bound must be finite")):
        vd.bound_verdict(1.0, math.inf, 2.0)
    with pytest.raises(ValueError, match=full("measured, se and predicted must be finite, se >= 0")):
        vd.exact_verdict(1.0, -0.1, 1.0)
    with pytest.raises(ValueError, match=full("pvalues must lie in [0, 1]")):
        vd.holm([0.1, 1.1])
    with pytest.raises(ValueError, match=full("x needs at least two distinct values")):
        vd.slope_weights([2.0, 2.0])
    with pytest.raises(ValueError, match=full("x must hold at least one value")):
        vd.t_interval([])
    with pytest.raises(ValueError, match=full("x must be finite (no NaN/inf)")):
        vd.t_interval([1.0, math.inf])
    Y = np.array([[0.0, 1.0, 3.0], [0.2, 1.0, math.nan]])
    with pytest.raises(ValueError, match=full("x and Y must be finite")):
        vd.bootstrap_slope([1.0, 2.0, 4.0], Y)


def test_a_missing_value_none_is_refused_as_non_finite():
    """Inputs are read as float64: a None becomes NaN and is refused with the module's own message."""
    with pytest.raises(ValueError, match=r"a must be finite \(no NaN/inf\); got 1 non-finite values"):
        vd.paired_comparison([1.0, None, 2.0], [0.0, 0.0, 0.0], kind="superiority", margin=0.1)
    with pytest.raises(ValueError, match="x must be finite"):
        vd.t_interval([1.0, None])
    with pytest.raises(ValueError, match=r"pvalues must lie in \[0, 1\]"):
        vd.holm([0.01, None])
    Y = [[0.0, 1.0, 3.0], [0.2, None, 2.8]]
    with pytest.raises(ValueError, match="x and Y must be finite"):
        vd.bootstrap_slope([1.0, 2.0, 4.0], Y)
    with pytest.raises(ValueError, match="x and Y must be finite"):
        vd.bootstrap_slope([1.0, None, 4.0], [[0.0, 1.0, 3.0], [0.2, 1.0, 2.8]])


def test_unsigned_and_boolean_samples_are_differenced_as_real_numbers():
    """Δ = a − b on the values, not in the inputs' integer type: uint8 0 − 1 is −1 (not 255), booleans subtract."""
    a = np.array([0, 0, 1, 0], dtype=np.uint8)
    b = np.array([1, 1, 1, 2], dtype=np.uint8)
    c = vd.paired_comparison(a, b, kind="superiority", margin=0.0)
    assert c.estimate == pytest.approx(-1.0) and c.verdict == R
    c = vd.paired_comparison(np.array([True, True, True, False]), np.array([False, False, False, False]),
                             kind="noninferiority", margin=0.0)
    assert c.estimate == pytest.approx(0.75)


def test_float32_inputs_are_computed_in_float64():
    x32 = np.array([0.1, 0.2, 0.7, 1.3], dtype=np.float32)
    assert np.array_equal(vd.slope_weights(x32), vd.slope_weights(x32.astype(np.float64)))
    Y32 = np.array([[0.1, 0.3, 0.2, 0.9], [0.2, 0.35, 0.1, 1.1], [0.15, 0.2, 0.3, 0.7]], dtype=np.float32)
    assert vd.bootstrap_slope(x32, Y32, n_resamples=100) == vd.bootstrap_slope(
        x32.astype(np.float64), Y32.astype(np.float64), n_resamples=100)
    assert vd.t_interval(x32) == vd.t_interval(x32.astype(np.float64))


def test_bootstrap_slope_with_identical_seeds_is_the_point_estimate_exactly():
    rng = np.random.default_rng(5)
    for _ in range(20):
        x = rng.normal(size=4)
        y = rng.normal(size=4) * 1e-3
        est, lo, hi = vd.bootstrap_slope(x, np.tile(y, (3, 1)), n_resamples=50)
        assert lo == est == hi


def test_looseness_of_a_zero_upper_limit_is_none():
    assert vd.looseness(0.0, 0.0, 1.0) is None and vd.looseness(0.0, None, 1.0) is None


def test_equivalence_boundaries_p_equal_alpha_and_touching_intervals():
    x, se, m = 0.3, 0.1, 0.5
    p = max(float(stats.norm.sf((x + m) / se)), float(stats.norm.cdf((x - m) / se)))
    assert vd.equivalence(x, se, m, alpha=p)[0] == I                    # holds iff p < α, strictly
    q = float(stats.norm.ppf(0.95))
    v, _, lo, hi = vd.equivalence(q, 1.0, 0.0)
    assert lo == 0.0 and v == I                                        # touching +margin is not outside it
    v, _, lo, hi = vd.equivalence(-q, 1.0, 0.0)
    assert hi == 0.0 and v == I                                        # touching −margin neither
    v, p, lo, hi = vd.equivalence(-0.45, 0.1, 0.5)                    # mirror of 0.45: straddles −margin
    assert v == I and hi < 0.5 and lo < -0.5 < hi


def test_decide_reports_the_level_of_the_side_that_decided():
    mk = lambda name, ph, pr: vd.Comparison(name, "superiority", 0.0, 0.0, 5, 0.0, 0.1, ph, pr)  # noqa: E731
    # A holds at the second holds-rank (level α), while its refutes-rank is the first (α/2): its level is α.
    a, b = vd.decide([mk("A", 0.02, 0.98), mk("B", 0.001, 0.999)])
    assert (a.verdict, b.verdict) == (H, H) and a.alpha_level == pytest.approx(0.05)
    # mirror: A refuted at the second refutes-rank
    a, b = vd.decide([mk("A", 0.98, 0.02), mk("B", 0.999, 0.001)])
    assert (a.verdict, b.verdict) == (R, R) and a.alpha_level == pytest.approx(0.05)
    # the family's α reaches both Holm corrections
    out = vd.decide([mk("A", 0.9, 0.08), mk("B", 0.9, 0.09)], alpha=0.2)
    assert [c.verdict for c in out] == [R, R]
    assert [c.alpha_level for c in out] == pytest.approx([0.1, 0.2])


def test_holm_levels_of_tied_pvalues_follow_the_input_order_and_rejected_is_a_mask():
    p = np.full(100, 0.5)
    p[::3] = 0.2
    rej, lev = vd.holm(p)
    order = np.concatenate([np.flatnonzero(p == 0.2), np.flatnonzero(p == 0.5)])
    assert list(lev[order]) == pytest.approx([0.05 / (100 - r) for r in range(100)])
    rej, _ = vd.holm([0.001, 0.9, 0.002])
    assert list(np.array([0.001, 0.9, 0.002])[rej]) == [0.001, 0.002]  # usable as a boolean mask


def test_one_sample_comparison_and_rate_check_defaults_and_alpha():
    x = np.array([0.3, 0.1, 0.25, 0.2])
    assert vd.one_sample_comparison(x, kind="superiority", margin=0.0).name == ""
    c = vd.one_sample_comparison(x, kind="superiority", margin=0.15, alpha=0.3)
    assert c.alpha_level == 0.3 and c == vd.paired_comparison(x, np.zeros(4), kind="superiority", margin=0.15,
                                                              alpha=0.3)
    assert vd.rate_check(1, 10, p0=0.25, direction="above").name == ""


def test_rate_power_formula_over_a_grid_and_its_n():
    for n, alphas in ((20, (0.05, 0.2)), (40, (0.05,))):
        for p0 in (0.1, 0.25):
            for direction in ("above", "below"):
                for alpha in alphas:
                    ks = np.arange(n + 1)
                    v = np.array([vd.rate_check(int(k), n, p0=p0, direction=direction, alpha=alpha).verdict
                                  for k in ks])
                    claim, neg = (2 * p0, p0 / 4) if direction == "above" else (p0 / 4, 2 * p0)
                    want = min(stats.binom.pmf(ks, n, claim)[v == H].sum(), stats.binom.pmf(ks, n, neg)[v == R].sum())
                    assert vd.rate_power(n, p0, direction, alpha=alpha) == pytest.approx(want), (n, p0, direction)
    assert vd.rate_power(1, 0.25, "above") == 0.0                       # one run is allowed (and has no power)
    for n in (10.0, 2.5):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            vd.rate_power(n, 0.25, "above")
