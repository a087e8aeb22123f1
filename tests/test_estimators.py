"""Contract tests of the trajectory-level estimator registry (THEORY.md §2–§3, C1, C2).

One table of estimators; every property runs over the whole table (STYLE §4).
Targets with exact answers (the C2 minimum, the minimal removed mass) come from
independent scipy solvers, not from the code under test.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit
from scipy.optimize import linprog, minimize

from asyncgrpo import estimators as est
from asyncgrpo.estimators import kernels
from asyncgrpo.functionals import bias_functional, removed_mass

ALL = est.ESTIMATORS
IN_CLASS = sorted(est.IN_CLASS)

log_ratio_vectors = st.lists(
    st.floats(min_value=-20.0, max_value=20.0, allow_nan=False), min_size=1, max_size=32
).map(np.array)
eps_values = st.floats(min_value=1e-3, max_value=2.0)
EXTREME = np.array([1e4, -1e4, 0.0, 709.0, 710.0, -745.0, 3.0, -1e4 + 1.0])


def in_class(w: np.ndarray, ell: np.ndarray, eps: float) -> bool:
    """Membership in 𝒲_ε(ρ), with float slack relative to the compared sizes."""
    rho = np.exp(ell)
    return bool(np.all(w >= 0) and np.all(w <= rho * (1 + 1e-12)) and w.mean() <= (1 + eps) * (1 + 1e-12))


# ----------------------------------------------------------------------------- contract table
@pytest.mark.parametrize("name", ALL)
@given(ell=log_ratio_vectors, eps=eps_values)
@settings(max_examples=100)
def test_weights_finite_nonnegative_right_shape(name, ell, eps):
    w = est.get(name, eps)(ell)
    assert w.shape == ell.shape
    assert np.all(np.isfinite(w)) and np.all(w >= 0)


@pytest.mark.parametrize("name", IN_CLASS)
@given(ell=log_ratio_vectors, eps=eps_values)
@settings(max_examples=150)
def test_in_class_estimators_lie_in_W_eps(name, ell, eps):
    assert in_class(est.get(name, eps)(ell), ell, eps)


def test_is_and_snis_leave_the_class():
    # The membership check can fail: plain IS and SNIS violate 𝒲_ε on these groups.
    ell, eps = np.array([2.0, 0.0]), 0.2
    assert not in_class(est.get("is", eps)(ell), ell, eps)  # mean weight ρ̄ > 1+ε
    assert not in_class(est.get("snis", eps)(np.array([-2.0, -2.0])), np.array([-2.0, -2.0]), eps)  # w_i > ρ_i


@given(ell=log_ratio_vectors, eps=eps_values)
def test_gmc_is_identity_below_cap_and_scaled_snis_above(ell, eps):
    w = est.gmc(eps)(ell)
    rho_bar = np.exp(ell).mean()
    if rho_bar <= (1 + eps) * (1 - 1e-12):
        np.testing.assert_allclose(w, np.exp(ell), rtol=1e-12)
    elif rho_bar > (1 + eps) * (1 + 1e-12):
        np.testing.assert_allclose(w, (1 + eps) * est.snis()(ell), rtol=1e-12)
        assert math.isclose(w.mean(), 1 + eps, rel_tol=1e-12)


def test_tic_threshold_is_inclusive_and_up_only():
    eps = 0.25
    cap = math.log1p(eps)
    w = est.tic(eps)(np.array([cap, np.nextafter(cap, 10), -5.0]))
    assert w[0] == pytest.approx(1 + eps, rel=1e-15) and w[1] == 0.0 and w[2] == pytest.approx(math.exp(-5.0))


# ----------------------------------------------------------------------------- C1
@pytest.mark.parametrize("name", IN_CLASS)
@given(
    data=st.data(),
    eps=eps_values,
    G=st.integers(1, 16),
    dim=st.integers(1, 4),
)
@settings(max_examples=150)
def test_C1_second_moment_guarantee(name, data, eps, G, dim):
    """‖(1/G)Σ w_i v_i‖² ≤ (1+ε)·(1/G)Σ ρ_i‖v_i‖² for every w ∈ 𝒲_ε."""
    ell = np.array(data.draw(st.lists(st.floats(-6, 6), min_size=G, max_size=G)))
    v = np.array(data.draw(st.lists(st.floats(-10, 10), min_size=G * dim, max_size=G * dim))).reshape(G, dim)
    w = est.get(name, eps)(ell)
    lhs = float(np.sum(((w[:, None] * v).mean(axis=0)) ** 2))
    rhs = (1 + eps) * float(np.mean(np.exp(ell) * np.sum(v * v, axis=1)))
    assert lhs <= rhs * (1 + 1e-10) + 1e-300


def test_C1_fails_for_plain_is():
    # Equal vectors, ρ̄ > 1+ε: ‖ρ̄ v‖² = ρ̄²‖v‖² exceeds (1+ε)ρ̄‖v‖²; the inequality is not vacuous.
    ell, eps, v = np.array([1.5, 1.0, 0.5]), 0.2, np.ones((3, 2))
    w = est.is_()(ell)
    lhs = float(np.sum(((w[:, None] * v).mean(axis=0)) ** 2))
    rhs = (1 + eps) * float(np.mean(np.exp(ell) * np.sum(v * v, axis=1)))
    assert lhs > rhs


# ----------------------------------------------------------------------------- C2
def solve_min_bias_functional(rho: np.ndarray, eps: float) -> float:
    """min over 𝒲_ε(ρ) of 𝔅(w;ρ) = (1/G)Σ(ρ_i−w_i)²/ρ_i, by SLSQP (independent of gmc)."""
    G = rho.size

    def f(w):
        return float(np.mean((rho - w) ** 2 / rho))

    def grad(w):
        return -2.0 * (rho - w) / rho / G

    cons = [{"type": "ineq", "fun": lambda w: (1 + eps) - w.mean(), "jac": lambda w: -np.ones(G) / G}]
    best = math.inf
    # Two feasible starts (0 and the clipped ratios scaled into the class) guard against a poor local stop.
    starts = [np.zeros(G), np.minimum(rho, 1 + eps) * min(1.0, (1 + eps) / np.minimum(rho, 1 + eps).mean())]
    for x0 in starts:
        res = minimize(f, x0, jac=grad, bounds=[(0.0, r) for r in rho], constraints=cons, method="SLSQP",
                       options={"ftol": 1e-14, "maxiter": 500})
        assert res.success, res.message
        assert np.all(res.x >= -1e-9) and np.all(res.x <= rho + 1e-9) and res.x.mean() <= 1 + eps + 1e-9
        best = min(best, res.fun)
    return best


def min_removed_mass(rho: np.ndarray, eps: float) -> float:
    """min over 𝒲_ε(ρ) of (1/G)Σ(ρ_i − w_i), by linear programming (scipy.optimize.linprog)."""
    G = rho.size
    res = linprog(c=-np.ones(G) / G, A_ub=np.ones((1, G)) / G, b_ub=[1 + eps], bounds=list(zip(np.zeros(G), rho)),
                  method="highs")
    assert res.status == 0
    return float(rho.mean() + res.fun)


@given(
    ell=st.lists(st.floats(min_value=-3.0, max_value=3.0), min_size=1, max_size=10).map(np.array),
    eps=st.floats(min_value=0.01, max_value=1.0),
)
@settings(max_examples=60)
def test_C2_gmc_attains_the_minimum_of_the_bias_functional(ell, eps):
    rho = np.exp(ell)
    rho_bar = rho.mean()
    closed = max(rho_bar - 1 - eps, 0.0) ** 2 / rho_bar
    solver = solve_min_bias_functional(rho, eps)
    values = {n: bias_functional(ell, est.get(n, eps).log_weights(ell)) for n in IN_CLASS}
    tol = 1e-7 * (1 + closed)
    assert values["gmc"] == pytest.approx(closed, rel=1e-10, abs=1e-14)
    assert solver >= closed - tol, "solver found a point of the class below the claimed minimum"
    assert values["gmc"] <= solver + tol
    for n in ("tis", "tic"):
        assert values[n] >= values["gmc"] - 1e-12 * (1 + values["gmc"])

    removed = {n: removed_mass(ell, est.get(n, eps).log_weights(ell)) for n in IN_CLASS}
    lp = min_removed_mass(rho, eps)
    assert removed["gmc"] == pytest.approx(max(rho_bar - 1 - eps, 0.0), rel=1e-10, abs=1e-12)
    assert removed["gmc"] == pytest.approx(lp, rel=1e-8, abs=1e-10)
    for n in ("tis", "tic"):
        assert removed[n] >= removed["gmc"] - 1e-12 * (1 + rho_bar)


def test_C2_check_can_fail_for_a_non_minimiser():
    # tis on a group with one large ratio removes more 𝔅 than the optimum: the comparison is strict here.
    ell, eps = np.array([2.0, -1.0, -1.0]), 0.2
    rho = np.exp(ell)
    b_tis = bias_functional(ell, est.tis(eps).log_weights(ell))
    assert b_tis > solve_min_bias_functional(rho, eps) + 1e-3


# ----------------------------------------------------------------------------- backends
def _all_backends(name, ell, eps):
    wm = est.get(name, eps)
    return wm(ell), wm.numba(ell), wm.torch(torch.tensor(ell, dtype=torch.float64)).numpy()


@pytest.mark.parametrize("name", ALL)
@given(ell=log_ratio_vectors, eps=eps_values)
@settings(max_examples=80)
def test_three_backends_agree(name, ell, eps):
    ref, nb, th = _all_backends(name, ell, eps)
    np.testing.assert_allclose(nb, ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(th, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("eps", [1e-3, 0.2, 5.0])
def test_three_backends_agree_on_extreme_log_ratios(name, eps):
    ref, nb, th = _all_backends(name, EXTREME, eps)
    np.testing.assert_allclose(nb, ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(th, ref, rtol=1e-12, atol=0)
    if name != "is":  # is = ρ itself, which float64 cannot hold beyond ℓ ≈ 709.78
        assert np.all(np.isfinite(ref))
    else:
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(ref, np.exp(EXTREME))  # exactly ρ, overflow to inf included


def test_extreme_values_are_correct_not_just_finite():
    eps = 0.2
    ell = np.array([1e4, 0.0])  # ρ̄ = (e^{1e4} + 1)/2, far beyond float64
    np.testing.assert_allclose(est.gmc(eps)(ell), [2 * (1 + eps), 0.0], rtol=1e-14, atol=0)
    np.testing.assert_allclose(est.snis()(ell), [2.0, 0.0], rtol=1e-14, atol=0)
    np.testing.assert_allclose(est.tis(eps)(np.array([1e4, -1e4])), [1 + eps, 0.0], rtol=1e-15)
    np.testing.assert_array_equal(est.tic(eps)(np.array([1e4, -1e4])), [0.0, 0.0])
    w = est.gmc(eps)(np.array([-1e4, -1e4 + math.log(2)]))  # tiny ρ̄: gmc is the identity, no rescaling
    assert np.all(w == np.exp(np.array([-1e4, -1e4 + math.log(2)])))
    assert est.is_()(np.array([1e4]))[0] == math.inf


def test_numba_kernel_callable_inside_another_kernel():
    @njit
    def mean_gmc_weight(ell, eps):
        out = np.empty_like(ell)
        kernels.weights_nb(4, ell, eps, out)
        return out.mean()

    ell = np.array([0.5, 2.0, -1.0])
    assert mean_gmc_weight(ell, 0.1) == pytest.approx(est.gmc(0.1)(ell).mean(), rel=1e-14)


def test_numba_batch_and_group_functionals_match_reference():
    rng = np.random.default_rng(3)
    ell = rng.normal(0, 1.5, size=(5, 7))
    for name in ALL:
        wm = est.get(name, 0.3)
        out = kernels.weights_batch_nb(wm.code, ell, 0.3, np.empty_like(ell))
        np.testing.assert_allclose(out, np.stack([wm(row) for row in ell]), rtol=1e-12)
        for row in ell:
            logw = wm.log_weights(row)
            rb, B, rem, mw = kernels.group_functionals_nb(row, logw)
            assert rb == pytest.approx(np.exp(row).mean(), rel=1e-12)
            assert B == pytest.approx(bias_functional(row, logw), rel=1e-12, abs=1e-300)
            assert rem == pytest.approx(removed_mass(row, logw), rel=1e-12, abs=1e-14)
            assert mw == pytest.approx(wm(row).mean(), rel=1e-12)


# ----------------------------------------------------------------------------- torch specifics
@pytest.mark.parametrize("name", ALL)
def test_torch_mask_pads_groups_without_changing_them(name):
    rng = np.random.default_rng(0)
    groups = [rng.normal(0, 1, size=G) for G in (3, 5, 1)]
    ell = torch.zeros(3, 5, dtype=torch.float64)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    for g, row in enumerate(groups):
        ell[g, : row.size] = torch.tensor(row)
        mask[g, : row.size] = True
    ell[~mask] = float("nan")  # padding content must never leak into ρ̄ or the weights
    w = est.get(name, 0.2).torch(ell, mask)
    for g, row in enumerate(groups):
        np.testing.assert_allclose(w[g, : row.size].numpy(), est.get(name, 0.2)(row), rtol=1e-12)
    assert torch.all(w[~mask] == 0)


def test_torch_weights_are_stop_gradient():
    ell = torch.tensor([[0.3, -0.2, 1.0]], dtype=torch.float64, requires_grad=True)
    w = est.gmc(0.1).torch(ell)
    assert not w.requires_grad


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("eps", [0.0, -0.1, float("nan"), float("inf"), "x"])
def test_bad_eps_is_rejected_with_its_name(eps):
    with pytest.raises(ValueError, match=r"eps must be a finite number > 0"):
        est.get("gmc", eps)


@pytest.mark.parametrize(
    "ell, pattern",
    [
        ([], r"empty group: G must be >= 1"),
        ([0.1, float("nan")], r"log_ratios must be finite.*index 1"),
        ([float("inf")], r"log_ratios must be finite"),
        ([[0.1, 0.2]], r"log_ratios must be a 1-D array"),
    ],
)
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_bad_log_ratios_are_rejected(ell, pattern, backend):
    wm = est.gmc(0.2)
    with pytest.raises(ValueError, match=pattern):
        wm(ell) if backend == "numpy" else wm.numba(ell)


def test_unknown_estimator_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown estimator 'ppo'; known estimators: onpolicy, is, tis, tic, gmc, snis"):
        est.get("ppo", 0.2)


def test_torch_bad_inputs():
    wm = est.gmc(0.2)
    with pytest.raises(ValueError, match=r"mask and log_ratios must have the same shape"):
        wm.torch(torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"group 1 empty"):
        wm.torch(torch.zeros(2, 3), torch.tensor([[True, True, False], [False, False, False]]))
    with pytest.raises(ValueError, match=r"log_ratios must be finite"):
        wm.torch(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match=r"empty group"):
        wm.torch(torch.zeros(2, 0))


@pytest.mark.parametrize("G", [0, -3, 2.5, True])
def test_group_size_validation(G):
    from asyncgrpo.validation import check_group_size

    with pytest.raises(ValueError, match=r"G must be an integer >= 1"):
        check_group_size(G)


@pytest.mark.parametrize("name", ALL)
def test_theory_exact_weights_agree_with_the_registry(name):
    # theory/weights.py holds exact-arithmetic versions for enumeration; they must be the same maps.
    from theory import weights as exact

    rng = np.random.default_rng(11)
    for G in (1, 2, 5, 9):
        ell = rng.normal(0, 1.2, size=G)
        np.testing.assert_allclose(exact.weights(name, list(np.exp(ell)), 0.3), est.get(name, 0.3)(ell), rtol=1e-12)


def test_weightmap_built_directly_is_validated():
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        est.WeightMap("gmc", -2.0)
    with pytest.raises(ValueError, match="unknown estimator 'ppo'"):
        est.WeightMap("ppo", 0.2)


def test_functionals_reject_bad_log_weights():
    from asyncgrpo.functionals import ess

    ell = np.array([0.1, 0.2])
    with pytest.raises(ValueError, match=r"log_w must have the shape of the log-ratios \(2,\)"):
        bias_functional(ell, [0.0])
    with pytest.raises(ValueError, match="log_w must be finite or -inf"):
        removed_mass(ell, [0.0, np.nan])
    with pytest.raises(ValueError, match="log_w must be finite or -inf"):
        bias_functional(ell, [0.0, np.inf])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        ess([])
    assert ess([-np.inf, -np.inf]) == 0.0  # every weight zero: no effective sample
    assert ess([0.0, 0.0, 0.0]) == pytest.approx(3.0)


@pytest.mark.parametrize("G", [None, "a", float("nan"), float("inf")])
def test_group_size_validation_names_G_for_non_numbers(G):
    from asyncgrpo.validation import check_group_size

    with pytest.raises(ValueError, match=r"G must be an integer >= 1"):
        check_group_size(G)
