"""Contracts of the core that no other test pinned (issue 19: mutants that survived the suite).

Each test here was written against a mutant that the rest of the suite let through (``make mutate``,
``mutation/README.md``): a moved boundary, a changed default, an unchecked branch. Values are exact
(no tolerance) unless stated; statistical checks use fixed seeds and ``z = 4``.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from simulate import delays as dl

# --------------------------------------------------------------------------------------------------
# simulate/delays.py (docs/THEORY.md §1, "Staleness")


def test_delay_spec_defaults_are_pinned():
    # The defaults are part of the interface: result tables and CLIs build specs from them.
    s = dl.DelaySpec()
    assert (s.kind, s.d, s.D, s.p, s.n_actors, s.gen_dist, s.gen_sigma) == ("fixed", 0, 0, 0.5, 1, "lognormal", 1.0)
    assert dl.geometric(0.3).D == 0 and dl.geometric(0.3).max_delay is None
    q = dl.queue(3)
    assert (q.gen_dist, q.gen_sigma) == ("lognormal", 1.0)
    np.testing.assert_array_equal(s.sample(20), 0)
    u = dl.uniform(5)
    assert u.sample(60).tolist() == u.sample(60, seed=0).tolist() != u.sample(60, seed=1).tolist()  # default seed 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.d = 3  # frozen: a spec used as a result-table key cannot change under it


@pytest.mark.parametrize("p", [1.0 + 1e-12, 1.5, 2.0, 3.0, -0.5, 0.0])
def test_geometric_p_outside_0_1_is_rejected(p):
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\]"):
        dl.geometric(p)


def test_geometric_p_one_is_accepted_and_gives_no_delay():
    d = dl.geometric(1.0).sample(50, seed=4)
    np.testing.assert_array_equal(d, 0)
    # p only matters for the geometric kind: another kind ignores it
    assert dl.DelaySpec("fixed", d=2, p=7.0).sample(4).tolist() == [0, 1, 2, 2]


@pytest.mark.parametrize("spec, want", [
    (dl.fixed(4), 4), (dl.fixed(0), 0), (dl.uniform(3), 3), (dl.geometric(0.3), None),
    (dl.geometric(0.3, D=2), 2), (dl.geometric(0.3, D=1), 1), (dl.queue(4), None), (dl.queue(1, "constant"), None),
])
def test_max_delay(spec, want):
    assert spec.max_delay == want


@pytest.mark.parametrize("spec, want", [
    (dl.fixed(4), "fixed(d=4)"), (dl.uniform(3), "uniform(D=3)"), (dl.geometric(0.25), "geometric(p=0.25)"),
    (dl.geometric(0.25, D=5), "geometric(p=0.25,D=5)"), (dl.queue(4), "queue(n=4,lognormal,s=1)"),
    (dl.queue(2, "lognormal", 1.5), "queue(n=2,lognormal,s=1.5)"), (dl.queue(3, "exponential"), "queue(n=3,exponential)"),
    (dl.queue(3, "constant", 2.0), "queue(n=3,constant)"),
])
def test_label(spec, want):
    assert spec.label == want


def test_integer_parameters_lower_bounds_and_types():
    assert dl.DelaySpec("queue", n_actors=1).sample(3).tolist() == [0, 0, 0]  # n_actors = 1 is allowed
    assert dl.fixed(2.0).sample(4).tolist() == [0, 1, 2, 2]                   # 2.0 is an integer
    assert dl.fixed(1).sample(1).tolist() == [0]                                # K = 1 is allowed
    for bad in (dict(d=True), dict(d=0.5), dict(D=-1), dict(n_actors=0)):
        with pytest.raises(ValueError, match="must be an integer >= "):
            dl.DelaySpec(**bad)
    with pytest.raises(ValueError, match="K must be an integer >= 1"):
        dl.fixed(1).sample(-1)


@pytest.mark.parametrize("sigma, ok", [(0.0, True), (1e-9, True), (-1e-9, False), (math.inf, False), (math.nan, False)])
def test_gen_sigma_range(sigma, ok):
    if ok:
        d = dl.queue(3, "lognormal", sigma).sample(30)
        assert d.min() >= 0
    else:
        with pytest.raises(ValueError, match="gen_sigma must be a finite number >= 0"):
            dl.queue(3, "lognormal", sigma)


def test_uniform_D_zero_and_geometric_truncation_at_D():
    np.testing.assert_array_equal(dl.uniform(0).sample(30, seed=1), 0)
    # truncation at D = 1: every delay in {0, 1}, and both values occur (p = 0.1 gives P(d >= 1) = 0.9)
    d = dl.geometric(0.1, D=1).sample(200, seed=2)[1:]
    assert set(d.tolist()) == {0, 1}
    # the uniform draw reaches D itself (inclusive upper end) and the clip at k binds at step 0
    u = dl.uniform(2).sample(300, seed=3)
    assert u[0] == 0 and u.max() == 2 and np.all(u <= np.minimum(np.arange(300), 2))


def test_queue_lognormal_with_sigma_zero_is_the_constant_queue():
    # σ = 0: every generation time is exactly 1, so the queue is the constant one (d_k = n − 1 after warm-up)
    n = 3
    np.testing.assert_array_equal(dl.queue(n, "lognormal", 0.0).sample(40), np.minimum(np.arange(40), n - 1))


# --------------------------------------------------------------------------------------------------
# asyncgrpo/estimators/reference.py and kernels.py (docs/THEORY.md §2): every map against its
# defining formula, written out with scipy's logsumexp, and the Numba kernels against the reference.

from scipy.special import logsumexp  # noqa: E402

from asyncgrpo.estimators import kernels, reference  # noqa: E402

NAMES = list(reference.CODES)
EPS = 0.25  # log1p(0.25) is the same float in NumPy and in math (not so for 0.2: see the xfail below)
CAP = math.log1p(EPS)
# a group below the cap (ρ̄ < 1+ε), one above it, one with the maximum not in first position, and
# one with ℓ_i exactly on log(1+ε) (the clip boundary of tis/tic)
GROUPS = [
    np.array([-0.7, 0.05, -1.3, 0.1]),
    np.array([0.2, 1.5, -0.4, 0.9, 0.3]),
    np.array([-2.0, 0.4, 3.0, -0.5]),
    np.array([CAP, CAP - 0.3, CAP + 0.3, -1.0]),
]


def _definition(name, ell, eps):
    cap = math.log1p(eps)
    lrb = logsumexp(ell) - math.log(ell.size)  # log ρ̄
    return {
        "onpolicy": np.zeros_like(ell), "is": ell.copy(), "tis": np.minimum(ell, cap),
        "tic": np.where(ell <= cap, ell, -np.inf), "gmc": ell + min(0.0, cap - lrb), "snis": ell - lrb,
    }[name]


def test_numpy_and_math_log1p_agree_on_the_boundary():
    # the boundary tests below need ℓ = log(1+ε) to be the same float in NumPy and in the kernels
    assert np.log1p(EPS) == CAP


@pytest.mark.parametrize("x", [np.log1p(0.2), math.log1p(0.2)])
def test_tic_backends_agree_exactly_on_the_boundary_for_eps_0_2(x):
    """NumPy's log1p(0.2) is 1 ulp above math.log1p(0.2); every backend uses the same cap, so at ℓ exactly
    on either float the three backends keep or remove the weight alike (found by mutation testing)."""
    import torch

    from asyncgrpo.estimators import torch_backend

    ell = np.array([x, 0.0])
    ref = reference.log_weights("tic", ell, 0.2)
    np.testing.assert_array_equal(kernels.log_weights_nb(3, ell, 0.2, np.empty(2)), ref)
    lw_t = torch_backend.log_weights("tic", torch.tensor(ell), 0.2, torch.ones(2, dtype=torch.bool)).numpy()
    np.testing.assert_array_equal(lw_t, ref)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("gi", range(len(GROUPS)))
def test_reference_log_weights_match_the_definition(name, gi):
    ell = GROUPS[gi]
    got = reference.log_weights(name, ell, EPS)
    np.testing.assert_allclose(got, _definition(name, ell, EPS), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(reference.weights(name, ell, EPS), np.exp(_definition(name, ell, EPS)), rtol=1e-13)
    # log_group_mass is log ρ̄ = logsumexp(ℓ) − log G, a float for one group
    lg = reference.log_group_mass(ell)
    assert isinstance(lg, float) and lg == pytest.approx(logsumexp(ell) - math.log(ell.size), rel=1e-14, abs=1e-15)


def test_clip_boundary_is_inclusive_for_tic_and_tis():
    ell = GROUPS[3]  # ℓ_0 = log(1+ε) exactly
    assert reference.log_weights("tic", ell, EPS)[0] == CAP          # kept: ℓ ≤ log(1+ε)
    assert reference.log_weights("tic", ell, EPS)[2] == -np.inf      # just above: removed
    assert reference.log_weights("tis", ell, EPS)[0] == CAP
    out = np.empty_like(ell)
    assert kernels.log_weights_nb(3, ell, EPS, out)[0] == CAP and out[2] == -np.inf
    assert kernels.log_weights_nb(2, ell, EPS, out)[0] == CAP and out[2] == CAP


def test_reference_batches_along_leading_axes():
    batch = np.stack([GROUPS[0][:4], GROUPS[1][:4], GROUPS[2]])
    lg = reference.log_group_mass(batch)
    assert lg.shape == (3,)
    np.testing.assert_allclose(lg, [reference.log_group_mass(r) for r in batch], rtol=1e-15)
    for name in NAMES:
        got = reference.log_weights(name, batch, EPS)
        np.testing.assert_allclose(got, np.stack([_definition(name, r, EPS) for r in batch]), rtol=1e-13, atol=1e-15)


def test_reference_weights_do_not_mutate_input_and_unknown_name_raises():
    ell = GROUPS[1].copy()
    w = reference.log_weights("is", ell, EPS)
    w[0] = 99.0  # `is` returns a copy: writing to it must not change the caller's ℓ
    assert ell[0] == GROUPS[1][0]
    with pytest.raises(KeyError):
        reference.log_weights("nope", ell, EPS)
    with np.errstate(over="raise"):
        assert reference.weights("is", np.array([800.0, 0.0]), EPS)[0] == math.inf  # overflow is silent, +inf


def test_gmc_caps_the_group_mass_exactly_at_one_plus_eps():
    ell = GROUPS[1]  # ρ̄ > 1+ε: after gmc the mean weight is exactly 1+ε
    assert reference.weights("gmc", ell, EPS).mean() == pytest.approx(1 + EPS, rel=1e-14)
    # an all-equal group sitting exactly on the cap: no rescaling either way
    flat = np.full(4, CAP)
    np.testing.assert_allclose(reference.log_weights("gmc", flat, EPS), flat, rtol=1e-15)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("gi", range(len(GROUPS)))
def test_kernels_equal_the_reference(name, gi):
    ell = GROUPS[gi]
    code = reference.CODES[name]
    ref = reference.log_weights(name, ell, EPS)
    out = np.full_like(ell, np.nan)
    got = kernels.log_weights_nb(code, ell, EPS, out)
    assert got is out
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(kernels.weights_nb(code, ell, EPS, np.empty_like(ell)), np.exp(ref), rtol=1e-14)
    m, r = kernels.lse_parts_nb(ell)
    assert m == ell.max()
    assert m + r == pytest.approx(reference.log_group_mass(ell), rel=1e-14, abs=1e-15)
    assert kernels.log_group_mass_nb(ell) == pytest.approx(reference.log_group_mass(ell), rel=1e-14, abs=1e-15)


def test_kernel_shift_is_the_maximum_wherever_it_sits():
    # m = max ℓ keeps exp(ℓ − m) ≤ 1: with the maximum first, last or inside, and at |ℓ| = 1e4
    for ell in ([2.0, -1.0, 0.5], [-1.0, 0.5, 2.0], [0.5, 2.0, -1.0]):
        assert kernels.lse_parts_nb(np.array(ell))[0] == 2.0
    ell = np.array([1e4, -1e4, 0.0])
    assert kernels.log_group_mass_nb(ell) == pytest.approx(1e4 - math.log(3.0), rel=1e-15)


def test_kernel_batch_and_unknown_code():
    batch = np.stack([GROUPS[0][:4], GROUPS[2], GROUPS[3]])
    for name, code in reference.CODES.items():
        out = kernels.weights_batch_nb(code, batch, EPS, np.empty_like(batch))
        np.testing.assert_allclose(out, reference.weights(name, batch, EPS), rtol=1e-14)
    with pytest.raises(ValueError, match="unknown estimator code"):
        kernels.log_weights_nb(6, GROUPS[0], EPS, np.empty(4))


@pytest.mark.parametrize("name", NAMES)
def test_kernel_group_functionals_against_direct_sums(name):
    # ρ̄, 𝔅 = (1/G)Σ(ρ−w)²/ρ, removed = (1/G)Σ(ρ−w), Σw/G written out directly (moderate ℓ: no overflow).
    # The last group has ρ̄ = 1/2, so snis gives w_i = 2ρ_i: 1 − w/ρ = −1 exactly, a term that must count.
    for ell in GROUPS + [np.full(3, -math.log(2.0))]:
        logw = reference.log_weights(name, ell, EPS)
        rho, w = np.exp(ell), np.exp(logw)
        rb, B, rem, mw = kernels.group_functionals_nb(ell, logw)
        assert rb == pytest.approx(rho.mean(), rel=1e-13)
        assert B == pytest.approx(np.mean((rho - w) ** 2 / rho), rel=1e-12, abs=1e-15)
        assert rem == pytest.approx(np.mean(rho - w), rel=1e-12, abs=1e-15)
        assert mw == pytest.approx(w.mean(), rel=1e-13)


# --------------------------------------------------------------------------------------------------
# simulate/verdicts.py (docs/THEORY.md §4): the decision rule at its boundaries, against scipy.

from scipy import stats  # noqa: E402

from simulate import verdicts as vd  # noqa: E402


def test_vocabulary():
    assert all(vd.is_verdict(v) for v in ("holds", "refuted", "inconclusive", "out of scope", "holds, bound loose ×2"))
    assert not any(vd.is_verdict(v) for v in ("violated", "holds, bound", "Holds", ""))


@pytest.mark.parametrize("alpha, ok", [(0.05, True), (1e-9, True), (0.4999, True), (0.0, False), (0.5, False),
                                       (-0.1, False), (True, False), ("0.05", False), (1, False)])
def test_alpha_range(alpha, ok):
    if ok:
        assert vd.holm([0.01], alpha)[1][0] == pytest.approx(alpha)
    else:
        with pytest.raises(ValueError, match=r"alpha must be a number in \(0, 0.5\)"):
            vd.holm([0.01], alpha)


@pytest.mark.parametrize("margin, ok", [(0.0, True), (0, True), (2.5, True), (-1e-12, False), (math.inf, False),
                                        (math.nan, False), (True, False), ("0.1", False)])
def test_margin_range(margin, ok):
    x = [0.1, 0.3, 0.2]
    if ok:
        assert vd.one_sample_comparison(x, kind="superiority", margin=margin).threshold == float(margin)
    else:
        with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
            vd.one_sample_comparison(x, kind="superiority", margin=margin)


def test_sample_guards():
    with pytest.raises(ValueError, match="x needs at least 2 values, got 1"):
        vd.one_sample_comparison([0.1], kind="superiority", margin=0.0)
    with pytest.raises(ValueError, match="got 2 non-finite values"):
        vd.one_sample_comparison([0.1, math.inf, math.nan], kind="superiority", margin=0.0)
    with pytest.raises(ValueError, match="at least one value"):
        vd.t_interval([])
    for level in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="level"):
            vd.t_interval([1.0, 2.0], level)


def test_t_interval_level_and_n_two():
    x = [1.0, 3.0]
    m, lo, hi = vd.t_interval(x, 0.5)
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.5)
    assert (m, lo, hi) == pytest.approx((2.0, ci.low, ci.high), rel=1e-12)


@pytest.mark.parametrize("kind", vd.KINDS)
def test_both_p_values_and_threshold_match_scipy(kind):
    r = np.random.default_rng(8)
    a, b = r.normal(0.03, 0.05, 9), r.normal(0.0, 0.05, 9)
    c = vd.paired_comparison(a, b, kind=kind, margin=0.02, name="x")
    thr = 0.02 if kind == "superiority" else -0.02
    assert c.threshold == thr and c.kind == kind and c.name == "x" and c.n == 9 and c.margin == 0.02
    d = a - b
    assert c.estimate == pytest.approx(d.mean(), rel=1e-14) and c.se == pytest.approx(stats.sem(d), rel=1e-14)
    assert c.p_holds == pytest.approx(stats.ttest_1samp(d, thr, alternative="greater").pvalue, rel=1e-12)
    assert c.p_refutes == pytest.approx(stats.ttest_1samp(d, thr, alternative="less").pvalue, rel=1e-12)
    # a family of one: the interval is the two-sided 1 − 2α one at α = 0.05
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.90)
    assert c.alpha_level == 0.05 and (c.lo, c.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert vd.one_sample_comparison(d, kind=kind, margin=0.02, name="x") == c


def test_two_samples_are_enough():
    c = vd.one_sample_comparison([0.5, 0.7], kind="superiority", margin=0.0)
    assert c.se == pytest.approx(0.1) and 0 < c.p_holds < 0.5
    assert c.p_holds == pytest.approx(stats.ttest_1samp([0.5, 0.7], 0.0, alternative="greater").pvalue, rel=1e-12)


@pytest.mark.parametrize("value, want, ph, pr", [
    (0.05, "holds", 0.0, 1.0), (0.02, "inconclusive", 1.0, 1.0), (-0.01, "refuted", 1.0, 0.0),
])
def test_no_spread_decides_by_the_sign_of_m_minus_c(value, want, ph, pr):
    c = vd.one_sample_comparison([value] * 4, kind="superiority", margin=0.02)
    assert (c.verdict, c.p_holds, c.p_refutes, c.se) == (want, ph, pr, 0.0)
    assert c.lo == c.hi == c.estimate == value


def test_holm_boundary_ties_and_range():
    rej, lev = vd.holm([0.025, 0.05], 0.05)  # p equal to its level is rejected (≤)
    assert rej.tolist() == [True, True] and lev.tolist() == [0.025, 0.05]
    rej, lev = vd.holm([0.01, 0.01], 0.05)   # ties: stable order, the first gets the stricter level
    assert lev.tolist() == [0.025, 0.05] and rej.tolist() == [True, True]
    assert vd.holm([0.0, 1.0])[0].tolist() == [True, False]
    rej, lev = vd.holm([0.3, 0.001], 0.05)   # stop at the first non-rejected, later ones stay unrejected
    assert rej.tolist() == [False, True]
    for bad in ([-0.01], [1.01], [math.nan]):
        with pytest.raises(ValueError, match="pvalues"):
            vd.holm(bad)


def test_decide_levels_and_intervals_in_a_family():
    mk = lambda name, ph, pr, n=10, se=0.1: vd.Comparison(name, "superiority", 0.0, 0.0, n, 0.3, se, ph, pr)  # noqa: E731
    assert vd.decide([]) == []
    out = vd.decide([mk("a", 0.001, 0.999), mk("b", 0.5, 0.5), mk("c", 0.999, 0.001)])
    assert [c.verdict for c in out] == ["holds", "inconclusive", "refuted"]
    # holds: its p_holds rank 0 of 3 → α/3; refuted: its p_refutes rank 0 → α/3;
    # inconclusive: min of its two Holm levels (rank 1 in both lists → α/2)
    assert [c.alpha_level for c in out] == pytest.approx([0.05 / 3, 0.05 / 2, 0.05 / 3])
    for c in out:
        q = stats.t.ppf(1 - c.alpha_level, 9)
        assert (c.lo, c.hi) == pytest.approx((0.3 - q * 0.1, 0.3 + q * 0.1), rel=1e-12)
    one = vd.decide([mk("d", 0.001, 0.999, n=1, se=0.1)])[0]  # n = 1: no t quantile, a point interval
    assert one.lo == one.hi == 0.3
    assert vd.decide([mk("e", 0.001, 0.999)], alpha=0.1)[0].alpha_level == pytest.approx(0.1)


@pytest.mark.parametrize("k, n, p0, direction, want", [
    (3, 24, 0.1, "below", "inconclusive"), (0, 1, 0.5, "above", "inconclusive"), (24, 24, 0.5, "above", "holds"),
    (24, 24, 0.5, "below", "refuted"), (0, 60, 0.1, "below", "holds"),
])
def test_rate_check_zones_and_edges(k, n, p0, direction, want):
    r = vd.rate_check(k, n, p0=p0, direction=direction, name="r")
    ci = stats.binomtest(k, n).proportion_ci(0.90, method="exact")
    assert (r.lo, r.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert (r.verdict, r.rate, r.failures, r.n, r.p0, r.direction, r.name) == (want, k / n, k, n, p0, direction, "r")


@pytest.mark.parametrize("direction", ["above", "below"])
def test_rate_check_interval_touching_p0_is_inconclusive(direction):
    # p0 set to an end of the interval itself: "beyond p0" is strict on both sides
    r = vd.rate_check(5, 20, p0=0.5, direction=direction)
    for p0 in (r.lo, r.hi):
        assert vd.rate_check(5, 20, p0=p0, direction=direction).verdict == "inconclusive"


def test_rate_check_level_follows_alpha_and_guards():
    r = vd.rate_check(5, 40, p0=0.2, direction="below", alpha=0.1)
    ci = stats.binomtest(5, 40).proportion_ci(0.80, method="exact")
    assert (r.lo, r.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)
    for kw, word in [(dict(failures=1, n=0), "n must"), (dict(failures=1, n=2.0), "n must"),
                     (dict(failures=-1, n=5), "failures must"), (dict(failures=6, n=5), "failures must"),
                     (dict(failures=1.0, n=5), "failures must"), (dict(failures=1, n=5, p0=0.0), "p0"),
                     (dict(failures=1, n=5, p0=1.0), "p0"), (dict(failures=1, n=5, direction="up"), "direction"),
                     (dict(failures=1, n=5, alpha=0.5), "alpha")]:
        kw = {"p0": 0.1, "direction": "above", **kw}
        with pytest.raises(ValueError, match=word):
            vd.rate_check(**kw)


@pytest.mark.parametrize("vs, want", [
    (["out of scope", "holds"], "holds"), (["holds, bound loose ×2", "holds"], "holds"),
    (["inconclusive", "out of scope"], "inconclusive"), (["refuted", "out of scope"], "refuted"),
    (["out of scope"], "out of scope"), (["holds"], "holds"), (["refuted", "holds", "holds"], "refuted"),
])
def test_combine_rule(vs, want):
    assert vd.combine(vs) == want


def test_combine_and_aggregate_guards():
    with pytest.raises(ValueError, match="must not be empty"):
        vd.combine([])
    assert vd.aggregate([]) == "out of scope"
    with pytest.raises(ValueError, match="vocabulary"):
        vd.aggregate(["holds", "violated"])


@pytest.mark.parametrize("vs, frac, want", [
    (["holds, bound loose ×3"] * 3 + ["inconclusive"], 0.75, "holds"),  # a loose bound counts as holds
    (["holds", "inconclusive"], 0.5, "holds"), (["holds", "inconclusive"], 0.75, "inconclusive"),
    (["holds"] * 4, 1.0, "holds"), (["holds"] * 3 + ["inconclusive"], 1.0, "inconclusive"),
    (["refuted", "refuted", "holds", "holds"], 0.75, "inconclusive"),  # 2 of 4 is no strict majority
    (["refuted", "refuted", "holds", "out of scope"], 0.75, "refuted"),
])
def test_aggregate_min_fraction(vs, frac, want):
    assert vd.aggregate(vs, min_fraction=frac) == want


def test_bootstrap_slope_point_estimate_level_and_guards():
    x = np.array([0.0, 1.0, 3.0])
    Y = 0.5 * x + np.random.default_rng(2).normal(0, 0.2, (12, 3))
    s, lo, hi = vd.bootstrap_slope(x, Y, n_resamples=500, seed=1)
    assert s == pytest.approx(np.polyfit(x, Y.mean(axis=0), 1)[0], rel=1e-12)
    s2, lo2, hi2 = vd.bootstrap_slope(x, Y, n_resamples=500, level=0.5, seed=1)
    assert s2 == s and lo < lo2 < s < hi2 < hi  # a lower level gives a narrower interval around the estimate
    assert vd.bootstrap_slope(x, np.tile(0.5 * x, (3, 1))) == pytest.approx((0.5, 0.5, 0.5), rel=1e-12)
    for xx, YY, word in [(x, Y[:, :2], "shape"), (x[:1], Y[:, :1], "two distinct"), (np.zeros(3), Y, "two distinct"),
                         (x, np.where(Y > 1, np.nan, Y), "finite"), (x, Y[0], "shape")]:
        with pytest.raises(ValueError, match=word):
            vd.bootstrap_slope(xx, YY)


@pytest.mark.parametrize("lo, hi, thr, above, want", [
    (0.2, 0.5, 0.1, True, "holds"), (-0.5, -0.2, 0.1, True, "refuted"), (0.0, 0.3, 0.1, True, "inconclusive"),
    (0.1, 0.3, 0.1, True, "inconclusive"), (-0.1, 0.1, 0.1, True, "inconclusive"),  # touching is not beyond
    (-0.3, 0.1, 0.1, False, "inconclusive"), (0.1, 0.3, 0.1, False, "inconclusive"), (0.2, 0.2, 0.1, True, "holds"),
])
def test_interval_verdict_above_and_boundaries(lo, hi, thr, above, want):
    assert vd.interval_verdict(lo, hi, thr, above=above) == want


def test_interval_verdict_guards():
    for lo, hi in [(0.3, 0.2), (math.nan, 0.2), (0.0, math.inf)]:
        with pytest.raises(ValueError, match="finite interval"):
            vd.interval_verdict(lo, hi, 0.0)


def test_bound_verdict_edges():
    assert vd.bound_verdict(1.0, 1.2, 1.2) == "holds, bound loose ×1.2"     # upper == bound still holds
    assert vd.bound_verdict(0.0, 0.1, 1.0) == "holds, bound loose ×∞"
    assert vd.bound_verdict(3.0, 3.0, 1.234567) == "refuted"
    assert vd.bound_verdict(2.0, 3.0, 1.0) == "inconclusive"                 # lower side exactly on the bound
    assert vd.bound_verdict(1.0, 1.0, 3.14159) == "holds, bound loose ×3.14"
    with pytest.raises(ValueError, match="finite"):
        vd.bound_verdict(1.0, math.inf, 2.0)
    with pytest.raises(ValueError, match="must be >= measured"):
        vd.bound_verdict(1.0, 0.9, 2.0)


# --------------------------------------------------------------------------------------------------
# asyncgrpo/validation.py: accepted edges, the names and ranges in the messages.

from asyncgrpo import validation as va  # noqa: E402


def test_scalars_accept_0d_arrays_and_edges():
    assert va.check_real(np.array(2.5), "x") == 2.5 and type(va.check_real(np.int64(3), "x")) is float
    assert va.check_eps(np.array(0.3)) == 0.3 and va.check_eps(1e-300) == 1e-300 and va.check_eps(7) == 7.0
    assert va.check_group_size(np.array(4)) == 4 and va.check_group_size(8.0) == 8 and va.check_group_size(1) == 1
    assert va.check_group_size(va.INT_MAX) == 2**63 - 1
    assert type(va.check_group_size(np.int32(5))) is int and type(va.check_group_size(5.0)) is int
    for bad in (np.array([0.3]), -0.0, 0.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"clip must be a finite number > 0 \(valid range: 0 < clip < inf\)"):
            va.check_eps(bad, "clip")
    for bad in (va.INT_MAX + 1, 0, -1, 0.5, math.nan, np.array([2])):
        with pytest.raises(ValueError, match=r"K must be an integer >= 1 \(valid range: 1 <= K <= 2\*\*63 - 1\)"):
            va.check_group_size(bad, "K")
    with pytest.raises(ValueError, match=r"lr must be a finite real number, got nan"):
        va.check_real(math.nan, "lr")


def test_long_values_are_cut_at_60_characters():
    assert va._show("x" * 58) == repr("x" * 58)                      # 60 characters: shown whole
    assert va._show("x" * 59) == repr("x" * 59)[:40] + "…(61 chars)"  # 61: cut to 40 + the length
    with pytest.raises(ValueError, match=r"lr must be a finite real number, got str 'y{58}'$"):
        va.check_real("y" * 58, "lr")


def test_real_array_conversions():
    a = np.array([0.5, -1.0])
    assert va.check_real_array(a, "x") is a  # float64 in, no copy (large batches are not duplicated)
    out = va.check_real_array([1, 2], "x")
    assert out.dtype == np.float64 and out.tolist() == [1.0, 2.0]
    obj = va.check_real_array(np.array([1, 2.5, np.float32(3)], dtype=object), "x")
    assert obj.dtype == np.float64 and obj.tolist() == [1.0, 2.5, 3.0]
    for bad, word in [(np.array([True, 1], dtype=object), "got object values"), (np.array(["1"]), "got <U1 values"),
                      ([1 + 0j], "got complex values"), ([False], "got booleans")]:
        with pytest.raises(ValueError, match=f"x must be real numbers, {word}"):
            va.check_real_array(bad, "x")


def test_log_ratio_and_log_weight_messages():
    with pytest.raises(ValueError, match=r"ell must be a 1-D array of one group's log-ratios, got shape \(1, 2\)"):
        va.check_log_ratios([[0.0, 1.0]], "ell")
    with pytest.raises(ValueError, match="ell is an empty group: G must be >= 1"):
        va.check_log_ratios([], "ell")
    with pytest.raises(ValueError, match=r"ell must be finite \(no NaN or inf\); found inf at index 2$"):
        va.check_log_ratios([0.0, 1.0, math.inf, math.nan], "ell")
    with pytest.raises(ValueError, match=r"R must be finite .*found nan at index \(1, 0\)$"):
        va.check_finite(np.array([[0.0, 1.0], [math.nan, 2.0]]), "R")
    assert va.check_log_ratios([0.5], "ell").tolist() == [0.5]  # G = 1
    lw = va.check_log_weights([-math.inf, 0.0], (2,))  # −inf is a zero weight: allowed
    assert lw.tolist() == [-math.inf, 0.0]
    with pytest.raises(ValueError, match=r"log_w must have the shape of the log-ratios \(3,\), got \(2,\)"):
        va.check_log_weights([0.0, 0.0], (3,))
    for bad, idx in [([0.0, math.inf], 1), ([math.nan, 0.0, math.inf], 0), ([[0.0, 0.0], [0.0, math.nan]], 3)]:
        shape = np.shape(bad)
        with pytest.raises(ValueError, match=rf"log_w must be finite or -inf \(a zero weight\); found \w+ at index {idx}$"):
            va.check_log_weights(bad, shape)


def test_mask_paths():
    b = np.array([True, False])
    assert va.check_mask(b) is b and va.check_mask(b, shape=(2,)) is b
    np.testing.assert_array_equal(va.check_mask([[0, 1]]), [[False, True]])
    with pytest.raises(ValueError, match="m must hold booleans or 0/1, got dtype <U1"):
        va.check_mask(np.array(["1", "0"]), name="m")
    with pytest.raises(ValueError, match=r"m must hold booleans or exactly 0/1; found 2 at index \(0, 1\)"):
        va.check_mask([[1, 2], [0, 3]], name="m")
    with pytest.raises(ValueError, match=r"m must have shape \(1, 2\), got \(2,\)"):
        va.check_mask([1, 0], shape=(1, 2), name="m")


# --------------------------------------------------------------------------------------------------
# asyncgrpo/functionals.py

from asyncgrpo.functionals import ess  # noqa: E402


@pytest.mark.parametrize("bad", [[[0.0, 0.0]], [], [[0.0], [1.0]]])
def test_ess_takes_one_group(bad):
    # a batch must not be silently flattened into one group, nor an empty group reach np.max
    with pytest.raises(ValueError, match=r"log_w must be a non-empty 1-D array \(one group, G >= 1\)"):
        ess(bad)


def test_advantages_default_delta_is_1e_minus_6():
    from asyncgrpo.functionals import advantages

    R = np.array([0.0, 1.0, 3.0])
    want = (R - R.mean()) / (R.std() + 1e-6)
    np.testing.assert_array_equal(advantages(R, normalize=True), want)
    np.testing.assert_array_equal(advantages(R), R - R.mean())  # normalize defaults to False


def test_torch_mask_error_names_the_first_bad_entry():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"mask must hold booleans or exactly 0/1; found 0.5 at index \(0, 0\)"):
        va.check_mask(torch.tensor([[0.5, 1.0, 2.0]]))


def test_bootstrap_slope_signature_defaults_and_rows():
    x = np.array([0.0, 1.0, 2.0])
    r = np.random.default_rng(4)
    Y = np.vstack([np.tile([0.0, 0.5, 1.0], (3, 1)), 0.5 * x + r.normal(0, 0.3, (9, 3))])
    # defaults pinned: 2000 resamples, seed 0; x and Y may be named, the options are keyword-only
    assert vd.bootstrap_slope(x=x, Y=Y) == vd.bootstrap_slope(x, Y, n_resamples=2000, level=0.95, seed=0)
    with pytest.raises(TypeError):
        vd.bootstrap_slope(x, Y, 2000)
    # resampling is over the 12 rows (seeds): the first three rows are identical, so an interval
    # drawn from them alone would have zero width
    s, lo, hi = vd.bootstrap_slope(x, Y, n_resamples=400)
    assert lo < s < hi and hi - lo > 0.05


def test_bound_verdict_looseness_is_bound_over_measured():
    assert vd.bound_verdict(2.0, 2.1, 5.0) == "holds, bound loose ×2.5"


def test_comparison_options_are_keyword_only_and_rows_frozen():
    a, b = [0.3, 0.5, 0.4], [0.1, 0.2, 0.2]
    c = vd.paired_comparison(a=a, b=b, kind="superiority", margin=0.0)  # a and b may be named
    with pytest.raises(TypeError):
        vd.paired_comparison(a, b, "superiority", 0.0)
    with pytest.raises(TypeError):
        vd.one_sample_comparison(a, "superiority", 0.0)
    with pytest.raises(TypeError):
        vd.rate_check(1, 10, 0.1, "above")
    r = vd.rate_check(1, 10, p0=0.1, direction="above")
    for row, field in ((c, "verdict"), (r, "verdict")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(row, field, "holds")  # a verdict row cannot be edited after the rule decided it
    assert c.as_dict()["verdict"] == c.verdict and r.as_dict()["n"] == 10


def test_bootstrap_slope_matches_scipy_bootstrap_of_the_polyfit_slope():
    # oracle: the same percentile bootstrap over rows, with the slope written independently (polyfit)
    x = np.array([0.0, 1.0, 3.0])
    Y = 0.5 * x + np.random.default_rng(6).normal(0, 0.2, (10, 3))
    s, lo, hi = vd.bootstrap_slope(x, Y, n_resamples=300, level=0.9, seed=3)
    res = stats.bootstrap((np.arange(10),), lambda idx: np.polyfit(x, Y[idx].mean(axis=0), 1)[0], n_resamples=300,
                          confidence_level=0.9, method="percentile", vectorized=False, rng=np.random.default_rng(3))
    assert (lo, hi) == pytest.approx((res.confidence_interval.low, res.confidence_interval.high), rel=1e-10)


def test_bootstrap_slope_smallest_inputs_and_messages():
    s, lo, hi = vd.bootstrap_slope([0.0, 2.0], [[0.0, 1.0], [0.0, 1.2]], n_resamples=100)  # 2 points, 2 rows
    assert s == pytest.approx(0.55) and lo <= s <= hi
    with pytest.raises(ValueError, match=r"Y needs at least 2 rows \(seeds\), got 1$"):
        vd.bootstrap_slope([0.0, 1.0, 2.0], [[0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match="x needs at least two distinct values"):
        vd.bootstrap_slope([1.0], [[0.0], [1.0]])


def test_interval_verdict_defaults_to_above_and_decide_uses_t_quantile_at_n_2():
    assert vd.interval_verdict(0.2, 0.5, 0.1) == "holds"
    c = vd.decide([vd.Comparison("n2", "superiority", 0.0, 0.0, 2, 0.3, 0.1, 0.2, 0.8)])[0]
    q = stats.t.ppf(1 - c.alpha_level, 1)  # df = n − 1 = 1
    assert c.verdict == "inconclusive" and (c.lo, c.hi) == pytest.approx((0.3 - q * 0.1, 0.3 + q * 0.1), rel=1e-12)
