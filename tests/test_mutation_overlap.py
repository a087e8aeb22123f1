"""C6's chain (simulate.training.overlap) on hand-made runs whose right answer is known (issue 39).

Every quantity here is built by hand, not by training: a run is a record with the fields the chain reads
(``delays``, ``chi2``, ``logratio_max``, ``dtheta_norm``, ``gpar_norm2``, ``theta``, ``config.eta``,
``config.theta_max``), and the expected values come from the definitions in docs/THEORY.md §C6 and the
contract of the module (its docstring): the premise ``‖Δw_k‖ ≤ η d_k M`` with ``M = max(M̂, √M̂₂)``,
``M̂ = max_{k: d_k ≥ 1} ‖Δw_k‖/(η d_k)`` (0 when no step is stale), ``M̂₂`` the mean of ``‖ĝ_k‖²``; link (2)
``L ≤ κ‖Δw‖`` with the absolute round-off slack ``atol_L = 8·T·eps·(θ_max + log V)``; ``σ² ≤ SIGMA2_FLOOR``
is 0. Each threshold is probed at, just below and just above its value.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.training import overlap as ov

EPS = np.finfo(np.float64).eps
T_, S_, V_ = 4, 5, 3  # theta's shape (T, S, V): three different sizes, so an axis mix-up shows


def fake_run(delays, dw, L=None, chi2=None, g=None, *, eta=0.5, theta_max=1e3, estimator="gmc", seed=0,
             theta_shape=(T_, S_, V_)):
    """A run record with exactly the fields the C6 chain reads; unset diagnostics default to harmless values
    (σ² = 0, L = 0, ‖ĝ‖² = 0)."""
    n = len(delays)
    arr = lambda x, fill: np.full(n, fill, dtype=np.float64) if x is None else np.asarray(x, dtype=np.float64)  # noqa: E731
    return SimpleNamespace(
        config=SimpleNamespace(eta=eta, theta_max=theta_max, estimator=estimator, seed=seed),
        delays=np.asarray(delays, dtype=np.int64), chi2=arr(chi2, 0.0), logratio_max=arr(L, 0.0),
        dtheta_norm=np.asarray(dw, dtype=np.float64), gpar_norm2=arr(g, 0.0), theta=np.zeros(theta_shape))


def atol_formula(T, V, theta_max):
    """``L_ULPS·T·eps·(θ_max + log V)`` (module docstring of overlap: 8 ulp per token of a log-softmax value)."""
    return 8.0 * T * EPS * (theta_max + math.log(V))


# ----------------------------------------------------------------------------- missing diagnostics
@pytest.mark.parametrize("missing", ["logratio_max", "dtheta_norm", "both"])
def test_a_run_without_c6_diagnostics_is_refused(missing):
    r = fake_run([1, 1], [0.1, 0.2], L=[0.05, 0.1])
    for f in (("logratio_max", "dtheta_norm") if missing == "both" else (missing,)):
        setattr(r, f, None)
    with pytest.raises(ValueError, match="C6 diagnostics"):
        ov.run_steps(r, kappa=1.0)
    with pytest.raises(ValueError, match="C6 diagnostics"):
        ov.overlap_table([r], kappa=1.0)


# ----------------------------------------------------------------------------- run_M
def test_run_M_with_no_stale_step_has_M_hat_zero():
    """Every d_k = 0: the premise has no step, so M̂ = max over an empty set of non-negative ratios = 0."""
    m = ov.run_M(fake_run([0, 0, 0], [0.0, 0.0, 0.0], g=[4.0, 4.0, 4.0]))
    assert m["M_hat"] == 0.0 and m["sqrt_M2"] == 2.0 and m["M"] == 2.0 and m["binding"] == "sqrt_M2"


def test_run_M_is_the_largest_ratio_over_stale_finite_steps():
    # d = (0, 1, 2, 3, 2), ‖Δw‖/(η d) = (−, 0.6, 1.5, 0.4, NaN) at η = 0.5; ‖ĝ‖²: NaN left out, mean 10/4
    r = fake_run([0, 1, 2, 3, 2], [9.0, 0.3, 1.5, 0.6, np.nan], g=[1.0, 4.0, 4.0, np.nan, 1.0], eta=0.5)
    m = ov.run_M(r)
    assert m["M_hat"] == pytest.approx(1.5, rel=4 * EPS)
    assert m["sqrt_M2"] == pytest.approx(math.sqrt(10.0 / 4.0), rel=4 * EPS)
    assert m["M"] == pytest.approx(1.58113883008419, rel=1e-12) and m["binding"] == "sqrt_M2"
    # raise the gradients' scale below M̂: M̂ binds
    m = ov.run_M(fake_run([1, 2], [0.5, 3.0], g=[0.25, 0.25], eta=0.5))
    assert m["M_hat"] == pytest.approx(3.0, rel=4 * EPS) and m["M"] == m["M_hat"] and m["binding"] == "M_hat"


def test_run_M_without_any_finite_gradient_falls_back_to_M_hat():
    m = ov.run_M(fake_run([1, 1], [0.2, 0.4], g=[np.nan, np.nan], eta=1.0))
    assert math.isnan(m["sqrt_M2"]) and m["M"] == pytest.approx(0.4, rel=4 * EPS) and m["binding"] == "M_hat"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), eta=st.sampled_from([0.01, 0.5, 3.0]))
def test_run_M_meets_the_premise_on_every_step_and_is_the_smallest_such(seed, n, eta):
    """M = max(M̂, √M̂₂) meets ‖Δw_k‖ ≤ ηd_kM on every stale step (with the RTOL_LOG slack) and M² ≥ M̂₂;
    any M' below M̂ by more than the slack misses the premise somewhere (M̂ is attained)."""
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 4, n)
    dw = rng.exponential(1.0, n) * (d > 0)
    g = rng.exponential(1.0, n)
    r = fake_run(d, dw, g=g, eta=eta)
    m = ov.run_M(r)
    assert m["M"] == max(m["M_hat"], m["sqrt_M2"]) and m["M"] ** 2 >= np.mean(g) * (1 - 1e-12)
    df = ov.run_steps(r, kappa=1.0)
    assert df.premise.all() and len(df) == int(np.sum(d >= 1))
    if m["M_hat"] > 0:
        assert not ov.run_steps(r, kappa=1.0, M=m["M_hat"] * (1 - 1e-6)).premise.all()


# ----------------------------------------------------------------------------- the premise, link 2, atol_L
def test_a_run_whose_parameter_never_moves_meets_the_premise():
    """‖Δw_k‖ = 0 on every step and ĝ = 0: M = 0 and 0 ≤ ηd·0 holds (equality, not a violation)."""
    r = fake_run([1, 2, 3], [0.0, 0.0, 0.0], g=[0.0, 0.0, 0.0])
    df = ov.run_steps(r, kappa=2.0)
    assert df.attrs["M"] == 0.0
    assert df.premise.all() and df.link3.all() and df.link1.all() and df.link2.all() and df.holds.all()
    assert df.kappa_hat.isna().all()  # L/‖Δw‖ is undefined where ‖Δw‖ = 0
    sm = ov.summary(ov.overlap_table([r], kappa=2.0))
    assert sm["frac_link3"] == 1.0 and sm["frac_premise_sqrt_M2"] == 1.0 and math.isnan(sm["kappa_hat"])


def test_kappa_hat_is_undefined_where_the_parameter_did_not_move_whatever_L():
    """κ̂ = L/‖Δw‖ only where ‖Δw‖ > 0: a step with ‖Δw‖ = 0 and a round-off L > 0 (a behaviour log-prob
    recomputed on another path) gets NaN, not +inf, which would dominate a run's largest κ̂."""
    r = fake_run([1, 1, 1], [0.0, 0.5, 0.0], L=[1e-15, 0.2, 0.0])
    df = ov.run_steps(r, kappa=1.0)
    assert math.isnan(df.kappa_hat.iloc[0]) and math.isnan(df.kappa_hat.iloc[2])
    assert df.kappa_hat.iloc[1] == pytest.approx(0.4, rel=2 * EPS, abs=0)
    assert np.isfinite(ov.summary(ov.overlap_table([r], kappa=1.0))["kappa_hat"])


def test_premise_at_below_and_above_eta_d_M():
    eta, M = 0.5, 2.0
    at = eta * 2 * M  # = 2.0 exactly
    df = ov.run_steps(fake_run([2, 2, 2, 2], [at, at * (1 - 1e-6), at * (1 + 3 * ov.RTOL_LOG), at * (1 + 1e-6)],
                               eta=eta), kappa=1.0, M=M)
    assert df.premise.tolist() == [True, True, False, False]
    assert df.link3.tolist() == df.premise.tolist()


@pytest.mark.parametrize("T,V,theta_max", [(4, 3, 1e3), (12, 7, 50.0), (1, 2, 1e3)])
def test_atol_L_is_its_formula(T, V, theta_max):
    r = fake_run([1], [0.0], L=[0.0], theta_max=theta_max, theta_shape=(T, 5, V))
    got = ov.run_steps(r, kappa=1.0).attrs["atol_L"]
    # abs=0: pytest.approx's default absolute slack (1e-12) is larger than atol_L itself (~1e-11 or less)
    assert got == pytest.approx(atol_formula(T, V, theta_max), rel=8 * EPS, abs=0)


def _atol_L():
    """The slack the module uses for the default record (checked against its formula above)."""
    return ov.run_steps(fake_run([1], [0.0]), kappa=1.0).attrs["atol_L"]


def test_link2_slack_is_atol_L_where_the_parameter_does_not_move():
    """‖Δw‖ = 0: link 2 reads L ≤ atol_L; exactly at atol_L and below it holds, 1 % above it fails."""
    a = _atol_L()
    assert a == pytest.approx(atol_formula(T_, V_, 1e3), rel=8 * EPS, abs=0)
    df = ov.run_steps(fake_run([1] * 5, [0.0] * 5, L=[0.0, a, a * (1 - 1e-9), a * 1.01, 2 * a]), kappa=3.0)
    assert df.link2.tolist() == [True, True, True, False, False]


def test_link2_at_below_and_above_kappa_times_dtheta():
    kappa, dw = 2.0, 0.75  # κ‖Δw‖ = 1.5 exactly; RTOL_LOG·1.5 = 1.5e-9 ≫ atol_L ≈ 7e-12
    L = [1.5, 1.5 * (1 - 1e-6), 1.5 * (1 + 1e-6), 1.5 * (1 + 5e-10)]
    df = ov.run_steps(fake_run([1] * 4, [dw] * 4, L=L), kappa=kappa)
    assert df.link2.tolist() == [True, True, False, True]
    np.testing.assert_allclose(df.kappa_hat, np.asarray(L) / dw, rtol=2 * EPS)


def test_resolved_means_L_above_a_thousand_times_its_round_off():
    a = _atol_L()
    L = [1000 * a, 999.5 * a, 1000.5 * a, 2e4 * a]
    df = ov.run_steps(fake_run([1] * 4, [1.0] * 4, L=L), kappa=1.0)
    assert df.resolved.tolist() == [False, False, True, True]


# ----------------------------------------------------------------------------- link 1, holds, σ² floor
def test_sigma2_floor_at_below_and_above():
    f = ov.SIGMA2_FLOOR
    df = ov.run_steps(fake_run([1, 1, 1], [0.0] * 3, chi2=[f, f / 2, 2 * f]), kappa=1.0)
    assert df.log_sigma2.tolist()[:2] == [-np.inf, -np.inf]
    assert df.log_sigma2.iloc[2] == pytest.approx(math.log(2 * f), rel=4 * EPS)
    # σ² = 2e−12 with L = 0 and ‖Δw‖ = 0 violates link 1 and the whole inequality: the floor is not a slack
    assert df.link1.tolist() == [True, True, False] and df.holds.tolist() == [True, True, False]


def test_zero_sigma2_is_below_any_bound_even_an_undefined_one():
    """σ² = 0 (log −inf) satisfies σ² ≤ b for every b, NaN included (module contract of the log-space
    comparison); a positive σ² against an undefined bound (M = NaN) does not."""
    df = ov.run_steps(fake_run([1, 1], [0.1, 0.2], L=[0.1, 0.1], chi2=[0.0, 1e-3]), kappa=1.0, M=math.nan)
    assert np.isnan(df.log_b_theory).all()
    assert df.holds.tolist() == [True, False]
    assert not df.premise.any()  # ‖Δw‖ ≤ NaN is not met


def test_link1_at_below_and_above_its_bound():
    """σ² against (e^L − 1)²: equal (round-off apart) holds; 1e−6 above fails; below holds."""
    L = np.array([0.3, 0.3, 0.3, 40.0, 40.0])
    b = np.expm1(L) ** 2
    sig = b * np.array([1.0, 1 - 1e-6, 1 + 1e-6, 1.0, 1 + 1e-6])
    df = ov.run_steps(fake_run([1] * 5, [1.0] * 5, L=L, chi2=sig), kappa=100.0)
    assert df.link1.tolist() == [True, True, False, True, False]
    np.testing.assert_allclose(df.log_b_ratio, 2 * np.log(np.expm1(L)), rtol=1e-14)


def test_holds_compares_sigma2_with_the_theory_bound():
    """σ² ≤ (e^{κηdM} − 1)² with κ = 1, η = 0.5, d = 2, M = 1: the bound is expm1(1)²."""
    b = math.expm1(1.0) ** 2
    df = ov.run_steps(fake_run([2, 2, 2], [0.5] * 3, L=[0.1] * 3, chi2=[b, b * (1 - 1e-6), b * (1 + 1e-6)], eta=0.5),
                      kappa=1.0, M=1.0)
    assert df.holds.tolist() == [True, True, False]
    np.testing.assert_allclose(df.log_b_theory, 2 * math.log(math.expm1(1.0)), rtol=1e-14)
    np.testing.assert_allclose(df.log_b_dtheta, 2 * math.log(math.expm1(0.5)), rtol=1e-14)


def test_steps_kept_dropped_and_counted():
    """d_k = 0 steps are left out (not counted as dropped); a NaN step is left out and counted."""
    r = fake_run([0, 1, 2, 1, 3], [0.0, 0.1, 0.2, np.nan, 0.3], L=[0.0, 0.05, 0.1, 0.1, np.nan], g=[1.0] * 5)
    df = ov.run_steps(r, kappa=1.0)
    assert df.k.tolist() == [1, 2] and df.d.tolist() == [1, 2] and df.attrs["n_dropped"] == 2
    assert df.attrs["eta"] == 0.5 and df.attrs["kappa"] == 1.0


# ----------------------------------------------------------------------------- log (e^x − 1)²
def test_log_sq_expm1_across_its_switch_at_30():
    x = np.array([0.0, 1e-300, 1e-8, 0.5, 29.0, 29.5, 29.999, 30.0, 30.001, 30.5, 31.0, 100.0, 700.0])
    with np.errstate(divide="ignore"):
        direct = 2 * np.log(np.expm1(x))  # finite up to x ≈ 709
    got = ov.log_sq_expm1(x)
    assert got[0] == -np.inf
    np.testing.assert_allclose(got[1:], direct[1:], rtol=16 * EPS)  # log∘expm1: a few roundings
    assert ov.log_sq_expm1(1e4) == pytest.approx(2e4, rel=EPS) and math.isnan(ov.log_sq_expm1(np.nan))


# ----------------------------------------------------------------------------- overlap_table and summary
def _two_runs():
    a = fake_run([0, 1, 2], [0.0, 0.4, 0.6], L=[0.0, 0.2, 0.3], g=[1.0, 1.0, 1.0], eta=0.5, estimator="gmc", seed=3)
    b = fake_run([1, 1], [0.2, 0.3], L=[0.1, 0.1], g=[0.25, 0.25], eta=0.5, estimator="tis", seed=7)
    return a, b


def test_overlap_table_of_two_runs_has_a_unique_index_and_per_run_columns():
    a, b = _two_runs()
    df = ov.overlap_table([a, b], kappa=1.0)
    assert len(df) == 2 + 2 and df.index.is_unique
    pd.testing.assert_index_equal(df.index, pd.RangeIndex(4))
    assert df.run.tolist() == [0, 0, 1, 1] and df.estimator.tolist() == ["gmc", "gmc", "tis", "tis"]
    assert df.seed.tolist() == [3, 3, 7, 7] and df.attrs["kappa"] == 1.0
    ma, mb = ov.run_M(a), ov.run_M(b)
    assert df.M.tolist() == [ma["M"]] * 2 + [mb["M"]] * 2
    assert df.sqrt_M2.tolist() == [1.0, 1.0, 0.5, 0.5]
    # selecting by index (what a figure does) returns one row per step
    assert df.loc[2].run == 1 and df.loc[2].k == 0


def test_summary_fraction_of_the_premise_with_sqrt_M2_alone():
    """√M̂₂ = 2 (‖ĝ‖² = 4), η = 0.5: the bound ηd√M̂₂ is 1 (d = 1) and 2 (d = 2). Steps: exactly on it (counted),
    3·RTOL_LOG above it (not), half of it (counted), 1e-6 above (not): 2 of 4."""
    r = fake_run([1, 2, 2, 1], [1.0, 2.0 * (1 + 3 * ov.RTOL_LOG), 1.0, 1.0 + 1e-6], g=[4.0] * 4, eta=0.5)
    sm = ov.summary(ov.overlap_table([r], kappa=1.0))
    assert sm["frac_premise_sqrt_M2"] == 0.5
    assert sm["frac_link3"] == 1.0  # with M = max(M̂, √M̂₂) the premise holds everywhere, by construction
    # a second run with √M̂₂ = 1/2 and all its steps above ηd√M̂₂ = 0.25: 2 of 6 overall
    r2 = fake_run([1, 1], [0.3, 0.5], g=[0.25, 0.25], eta=0.5)
    assert ov.summary(ov.overlap_table([r, r2], kappa=1.0))["frac_premise_sqrt_M2"] == pytest.approx(2 / 6)


def test_summary_of_run_steps_has_no_sqrt_M2_fraction_and_an_empty_table_gives_nan():
    r = fake_run([1, 1], [0.5, 0.5], L=[0.1, 0.2], chi2=[0.01, 0.02], g=[1.0, 1.0])
    sm = ov.summary(ov.run_steps(r, kappa=1.0))
    assert "frac_premise_sqrt_M2" not in sm and sm["n_steps"] == 2 and sm["n_positive"] == 2
    empty = ov.summary(ov.run_steps(fake_run([0, 0], [0.0, 0.0]), kappa=1.0))
    assert empty["n_steps"] == 0 and math.isnan(empty["frac_holds"]) and math.isnan(empty["kappa_hat"])


def test_summary_kappa_hat_and_looseness():
    """κ̂ = max L/‖Δw‖ over the resolved steps only; looseness log10(bound/σ²) over σ² > floor: median, min, max."""
    a = _atol_L()
    L = [0.2, 0.4, 0.1, 0.5 * a]  # the last is round-off (not resolved) with a huge ratio L/‖Δw‖
    dw = [1.0, 1.0, 0.25, 1e-20]
    sig = [0.0, np.expm1(0.4) ** 2 / 10, np.expm1(0.1) ** 2 / 1000, 1e-13]
    df = ov.run_steps(fake_run([1] * 4, dw, L=L, chi2=sig), kappa=1.0, M=10.0)
    sm = ov.summary(df)
    assert sm["kappa_hat"] == pytest.approx(0.4, rel=4 * EPS)
    assert sm["n_positive"] == 2
    assert sm["log10_loose_ratio_min"] == pytest.approx(1.0, rel=1e-12)
    assert sm["log10_loose_ratio_max"] == pytest.approx(3.0, rel=1e-12)
    assert sm["log10_loose_ratio_median"] == pytest.approx(2.0, rel=1e-12)
    assert sm["frac_link1"] == 1.0 and sm["frac_link2"] == 1.0
