"""simulate/verdicts: the decision rule on synthetic inputs whose answer is known, against scipy directly."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simulate import verdicts as vd

RNG = np.random.default_rng(20261203)


def paired(delta, n=24, sd=0.01, seed=0):
    r = np.random.default_rng(seed)
    b = r.uniform(0.4, 0.6, n)
    noise = r.normal(0, sd, n)
    noise -= noise.mean()  # the sample mean of the difference is exactly delta
    return b + delta + noise, b


@pytest.mark.parametrize("delta, kind, want", [
    (0.10, "superiority", "holds"),          # clear win, far beyond +δ
    (0.00, "superiority", "refuted"),        # no effect, confidently below +δ
    (0.02, "superiority", "inconclusive"),   # interval straddles the margin
    (0.00, "noninferiority", "holds"),       # tie: not worse by more than δ
    (-0.10, "noninferiority", "refuted"),    # clear loss
    (-0.02, "noninferiority", "inconclusive"),
])
def test_paired_comparison_three_zones(delta, kind, want):
    a, b = paired(delta)
    c = vd.paired_comparison(a, b, kind=kind, margin=0.02)
    assert c.verdict == want
    # the verdict agrees with the interval printed beside it
    assert (c.verdict == "holds") == (c.lo > c.threshold)
    assert (c.verdict == "refuted") == (c.hi < c.threshold)


def test_interval_and_pvalues_match_scipy():
    a, b = paired(0.03, sd=0.05, seed=3)
    c = vd.paired_comparison(a, b, kind="superiority", margin=0.02, alpha=0.05)
    t = stats.ttest_1samp(a - b, 0.02, alternative="greater")
    assert c.p_holds == pytest.approx(t.pvalue, rel=1e-12)
    ci = stats.ttest_1samp(a - b, 0.0).confidence_interval(0.90)
    assert (c.lo, c.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_t_interval_matches_scipy_and_handles_degenerate_samples():
    x = RNG.normal(1.0, 2.0, 7)
    m, lo, hi = vd.t_interval(x, 0.95)
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-12) and m == pytest.approx(x.mean())
    assert vd.t_interval([2.0]) == (2.0, 2.0, 2.0)
    assert vd.t_interval([3.0, 3.0, 3.0]) == (3.0, 3.0, 3.0)
    with pytest.raises(ValueError, match="finite"):
        vd.t_interval([1.0, np.nan])


def test_holm_matches_the_step_down_definition():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    rej, lev = vd.holm(p, 0.05)
    # sorted: 0.005 ≤ .05/4, 0.01 ≤ .05/3, 0.03 > .05/2 → stop: the last two are not rejected
    assert rej.tolist() == [True, False, False, True]
    assert lev.tolist() == pytest.approx([0.05 / 3, 0.05, 0.05 / 2, 0.05 / 4])
    with pytest.raises(ValueError, match="pvalues"):
        vd.holm([0.5, 1.5])


def test_holm_family_can_turn_a_single_win_into_inconclusive():
    a, b = paired(0.035, sd=0.04, seed=5)
    single = vd.paired_comparison(a, b, kind="superiority", margin=0.02)
    raw = [vd.Comparison("x", "superiority", 0.02, 0.02, single.n, single.estimate, single.se, single.p_holds,
                         single.p_refutes)]
    weak = [vd.Comparison(f"y{i}", "superiority", 0.02, 0.02, 24, 0.02, 0.01, 0.5, 0.5) for i in range(5)]
    fam = vd.decide(raw + weak)
    assert single.verdict == "holds" and 0.05 / 6 < single.p_holds < 0.05  # p = 0.024: a win alone …
    assert fam[0].verdict == "inconclusive"  # … but not after Holm over six comparisons
    assert fam[0].lo <= 0.02 <= fam[0].hi     # and its interval (at the Holm level) says so


@pytest.mark.parametrize("k, n, direction, want", [
    (10, 24, "above", "holds"), (0, 48, "above", "refuted"), (3, 24, "above", "inconclusive"),
    (0, 48, "below", "holds"), (12, 24, "below", "refuted"),
])
def test_rate_check_clopper_pearson(k, n, direction, want):
    r = vd.rate_check(k, n, p0=0.1, direction=direction)
    ci = stats.binomtest(k, n).proportion_ci(0.90, method="exact")
    assert (r.lo, r.hi) == pytest.approx((ci.low, ci.high)) and r.verdict == want


@pytest.mark.parametrize("vs, want", [
    (["holds", "holds", "holds", "inconclusive"], "holds"),          # 3 of 4, none refuted
    (["holds", "holds", "inconclusive", "inconclusive"], "inconclusive"),
    (["holds", "holds", "holds", "refuted"], "inconclusive"),         # one refutation blocks "holds"
    (["refuted", "refuted", "holds"], "refuted"),                     # strict majority
    (["refuted", "holds"], "inconclusive"),
    (["out of scope", "out of scope"], "out of scope"),
    (["out of scope", "holds", "holds", "holds"], "holds"),           # judged on the in-scope ones
])
def test_aggregate_rule(vs, want):
    assert vd.aggregate(vs) == want


def test_combine_and_vocabulary_guard():
    assert vd.combine(["holds", "holds, bound loose ×3"]) == "holds"
    assert vd.combine(["holds", "refuted"]) == "refuted"
    assert vd.combine(["out of scope", "out of scope"]) == "out of scope"
    assert vd.combine(["holds", "inconclusive"]) == "inconclusive"
    with pytest.raises(ValueError, match="vocabulary"):
        vd.combine(["violated"])
    with pytest.raises(ValueError, match="vocabulary"):
        vd.aggregate(["holds", "maybe"])


def test_bootstrap_slope_recovers_a_known_slope():
    x = np.log2([4, 8, 32])
    Y = -0.1 * x + np.random.default_rng(1).normal(0, 0.01, (24, 3))
    s, lo, hi = vd.bootstrap_slope(x, Y, seed=0)
    assert lo < -0.1 < hi and hi - lo < 0.05
    assert vd.bootstrap_slope(x, Y, seed=0) == (s, lo, hi)  # seeded: reproducible
    with pytest.raises(ValueError, match="rows"):
        vd.bootstrap_slope(x, Y[:1])


def test_bound_and_interval_verdicts():
    assert vd.bound_verdict(1.0, 1.1, 5.0) == "holds, bound loose ×5"
    assert vd.bound_verdict(2.0, 2.1, 1.0) == "refuted"
    assert vd.bound_verdict(1.0, 1.5, 1.2) == "inconclusive"
    assert vd.interval_verdict(-0.5, -0.2, -0.1, above=False) == "holds"
    assert vd.interval_verdict(0.0, 0.3, -0.1, above=False) == "refuted"
    assert vd.interval_verdict(-0.3, 0.3, -0.1, above=False) == "inconclusive"


@pytest.mark.parametrize("kw, match", [
    (dict(kind="bigger", margin=0.02), "kind"), (dict(kind="superiority", margin=-1.0), "margin"),
    (dict(kind="superiority", margin=0.02, alpha=0.7), "alpha"),
])
def test_bad_input_names_the_parameter(kw, match):
    a, b = paired(0.0)
    with pytest.raises(ValueError, match=match):
        vd.paired_comparison(a, b, **kw)
    with pytest.raises(ValueError, match="paired"):
        vd.paired_comparison(a, b[:-1], kind="superiority", margin=0.0)
    with pytest.raises(ValueError, match="finite"):
        vd.paired_comparison(np.append(a[:-1], math.nan), b, kind="superiority", margin=0.0)


def test_slope_weights_give_the_least_squares_slope():
    """``y @ slope_weights(x)`` is scipy's least-squares slope, row by row."""
    from scipy import stats as sps

    rng = np.random.default_rng(4)
    x = np.log([4.0, 8.0, 16.0, 64.0])
    Y = rng.normal(size=(5, 4)) + 0.3 * x
    w = vd.slope_weights(x)
    for y in Y:
        assert y @ w == pytest.approx(sps.linregress(x, y).slope, rel=1e-12)
    with pytest.raises(ValueError, match="two distinct"):
        vd.slope_weights([1.0, 1.0])


# ----------------------------------------------------------------------------- calibration of the power formulas
def test_comparison_power_matches_simulation_on_both_sides():
    """The power printed beside every protocol comparison is what the decision rule actually achieves: data
    simulated one margin above the threshold give `holds`, one margin below give `refuted`, at that rate
    (600 simulated studies, fixed seed; tolerance 4 binomial s.e.)."""
    from simulate import verdicts as vd

    rng = np.random.default_rng(0)
    n, sd, margin, reps = 24, 0.03, 0.02, 600
    power = vd.comparison_power(n, sd, margin, vd.ALPHA)
    tol = 4 * np.sqrt(power * (1 - power) / reps)
    for kind, c in (("superiority", margin), ("noninferiority", -margin)):
        for shift, want in ((+margin, vd.HOLDS), (-margin, vd.REFUTED)):
            d = rng.normal(c + shift, sd, size=(reps, n))
            got = np.mean([vd.one_sample_comparison(x, kind=kind, margin=margin).verdict == want for x in d])
            assert abs(got - power) <= tol, (kind, want, got, power)


def test_rate_power_is_exact_and_interval_power_matches_simulation():
    from scipy import stats as st

    from simulate import verdicts as vd

    rng = np.random.default_rng(1)
    n, p0, reps = 48, 0.25, 600
    k = rng.binomial(n, p0 / 4, reps)
    p_h = np.mean([vd.rate_check(int(x), n, p0=p0, direction="below").verdict == vd.HOLDS for x in k])
    k = rng.binomial(n, 2 * p0, reps)
    p_r = np.mean([vd.rate_check(int(x), n, p0=p0, direction="below").verdict == vd.REFUTED for x in k])
    power = vd.rate_power(n, p0, "below")
    assert abs(min(p_h, p_r) - power) <= 4 * np.sqrt(power * (1 - power) / reps)
    # interval test with the threshold halfway between prediction (effect) and 0: normal estimate, one-sided z
    effect, se = -0.1, 0.03
    est = rng.normal(effect, se, reps)
    got = np.mean(est + st.norm.ppf(1 - vd.ALPHA) * se < effect / 2)
    power = vd.interval_power(effect, se)
    assert abs(got - power) <= 4 * np.sqrt(power * (1 - power) / reps)


# ----------------------------------------------------------------------------- vocabulary (issue 34)
def test_every_verdict_word_is_defined_once_and_qualifiers_are_not_verdicts():
    assert set(vd.DEFINITIONS) == {*vd.VERDICTS, vd.LOOSE_PREFIX + "k", *vd.NON_TEST, "<word>, <R>" + vd.REGIME_SUFFIX}
    for word in ("holds (exact)", "derived ✓", "inconclusive (underpowered)", "out of scope (underpowered)",
                 "holds, bound loose ×", "violated", "true by construction", "holds, regime only",
                 "fine, delay-dominated regime only"):
        assert not vd.is_verdict(word), word
    assert vd.is_verdict("holds, bound loose ×5.5") and vd.exact_verdict(1.0, 0.1, 1.2) == vd.HOLDS
    assert all(not vd.is_verdict(n) for n in vd.NOTES)


def test_looseness_is_bound_over_the_upper_three_se_limit():
    assert vd.looseness(0.1, 0.01, 1.0) == pytest.approx(1.0 / 0.13)
    assert vd.looseness(9.3e-7, 5.5e-7, 1.7e-3) == pytest.approx(1.7e-3 / (9.3e-7 + 3 * 5.5e-7))  # finite near 0
    assert vd.looseness(-1.0, 0.1, 1.0) is None and vd.looseness(1.0, None, 0.0) is None
    assert vd.loose_word(1.9) == vd.HOLDS and vd.loose_word(5.55) == "holds, bound loose ×5.55"


@pytest.mark.parametrize("est, se, margin, want", [
    (0.0, 0.01, 0.05, "holds"),         # well inside ±margin
    (0.045, 0.01, 0.05, "inconclusive"),  # the interval crosses +margin
    (0.2, 0.01, 0.05, "refuted"),       # entirely outside: not constant
    (-0.2, 0.01, 0.05, "refuted"),      # falling counts as much as rising (two-sided)
])
def test_equivalence_tost_three_zones(est, se, margin, want):
    v, p, lo, hi = vd.equivalence(est, se, margin)
    assert v == want
    z = stats.norm.ppf(0.95)
    assert lo == pytest.approx(est - z * se) and hi == pytest.approx(est + z * se)
    assert p == pytest.approx(max(stats.norm.sf((est + margin) / se), stats.norm.cdf((est - margin) / se)))


def test_equivalence_size_at_the_margin_is_alpha():
    """At a true effect exactly on the margin TOST says `holds` with probability ≤ α (fixed seed; the tolerance is
    3 binomial s.e. of the rejection rate)."""
    rng = np.random.default_rng(7)
    n, se = 20_000, 0.01
    hits = sum(vd.equivalence(float(x), se, 0.03)[0] == "holds" for x in rng.normal(0.03, se, n))
    assert hits / n <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / n)
