"""Group functionals: no NaN at extreme log-ratios (log space), and exact values for every branch.

References are computed with mpmath at 60 significant digits from the same ``ℓ`` and ``log w``,
so ``e^{±1e4}`` is represented exactly enough; float64 results must agree to ~1e-12 relative
(or be ``±inf`` exactly when the true value exceeds the float64 range).
"""
from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncgrpo import estimators as est
from asyncgrpo.functionals import advantages, bias_functional, ess, group_mass, log_bias_functional, removed_mass

mp.mp.dps = 60
FLOAT_MAX = mp.mpf(np.finfo(np.float64).max)


def _reference(ell, logw):
    """(removed mass, 𝔅, Σ|ρ_i − w_i|/G) in mpmath from the float64 inputs."""
    G = len(ell)
    rho = [mp.e ** mp.mpf(x) for x in ell]
    # ρ − w = w·expm1(ℓ − log w): exact even when ρ and w agree to more than 60 digits.
    gaps = [r if lw == -np.inf else mp.e ** mp.mpf(lw) * mp.expm1(mp.mpf(x) - mp.mpf(lw))
            for r, x, lw in zip(rho, ell, logw, strict=True)]
    return (mp.fsum(gaps) / G, mp.fsum(g * g / r for g, r in zip(gaps, rho, strict=True)) / G,
            mp.fsum(abs(g) for g in gaps) / G)


def _assert_close(got: float, want, scale, what: str):
    assert not math.isnan(got), f"{what} is NaN"
    if abs(want) > FLOAT_MAX:
        assert got == (math.inf if want > 0 else -math.inf), f"{what}: {got!r}, true value {mp.nstr(want, 8)}"
        return
    # Relative to the sum of |terms|: a removed mass can cancel to ~0 from large terms.
    tol = 1e-12 * float(max(scale, mp.mpf(1e-300))) + 1e-300
    assert abs(got - float(want)) <= tol, f"{what}: {got!r} vs {mp.nstr(want, 17)}"


EXTREME = [-1e4, -800.0, -745.5, 709.0, 800.0, 1e4]


@pytest.mark.parametrize("name", est.ESTIMATORS)
@pytest.mark.parametrize("ell0", EXTREME)
def test_no_nan_and_exact_at_extreme_log_ratios(name, ell0):
    ell = np.array([ell0, 0.1, -0.5, 2.0])
    logw = est.get(name, 0.2).log_weights(ell)
    removed, bias, scale = _reference(ell, logw)
    _assert_close(removed_mass(ell, logw), removed, scale, f"removed_mass[{name}, ℓ={ell0}]")
    _assert_close(bias_functional(ell, logw), bias, bias, f"𝔅[{name}, ℓ={ell0}]")
    lb = log_bias_functional(ell, logw)
    if bias == 0:
        assert lb == -math.inf
    else:
        assert abs(lb - float(mp.log(bias))) <= 1e-12 * max(1.0, abs(lb)), (lb, mp.nstr(mp.log(bias), 17))


@pytest.mark.parametrize("name", est.ESTIMATORS)
@pytest.mark.parametrize("ell", [[-1e4, -1e4 + 1.0], [1e4, 1e4 - 3.0, -1e4], [-800.0] * 3])
def test_whole_group_at_the_edge_of_the_range(name, ell):
    ell = np.array(ell)
    logw = est.get(name, 0.2).log_weights(ell)
    removed, bias, scale = _reference(ell, logw)
    _assert_close(removed_mass(ell, logw), removed, scale, f"removed_mass[{name}]")
    _assert_close(bias_functional(ell, logw), bias, bias, f"𝔅[{name}]")
    assert not math.isnan(group_mass(ell))


@given(
    st.lists(st.floats(-1e4, 1e4), min_size=1, max_size=6),
    st.sampled_from(est.ESTIMATORS),
    st.floats(0.01, 2.0),
)
def test_functionals_match_high_precision_everywhere_in_range(ell, name, eps):
    ell = np.array(ell)
    logw = est.get(name, eps).log_weights(ell)
    removed, bias, scale = _reference(ell, logw)
    _assert_close(removed_mass(ell, logw), removed, scale, "removed_mass")
    _assert_close(bias_functional(ell, logw), bias, bias, "𝔅")


# ----------------------------------------------------------------------------- exact values
def test_advantages_centred():
    R = np.array([1.0, 0.0, 0.5, 2.5])
    np.testing.assert_array_equal(advantages(R), R - R.mean())
    assert advantages([3.0]).tolist() == [0.0]  # G = 1: A_1 = 0


@pytest.mark.parametrize("delta", [1e-6, 0.5])
def test_advantages_normalised_use_population_std_plus_delta(delta):
    R = np.array([1.0, 0.0, 0.5, 2.5])
    want = (R - R.mean()) / (math.sqrt(np.mean((R - R.mean()) ** 2)) + delta)  # ddof = 0
    np.testing.assert_allclose(advantages(R, normalize=True, delta=delta), want, rtol=1e-15)


def test_advantages_constant_rewards_normalised_are_zero_not_nan():
    assert advantages([0.5, 0.5, 0.5], normalize=True).tolist() == [0.0, 0.0, 0.0]
    # 0.7 is not a float: the mean is off by an ulp, which 1/δ turns into ~1e-10, never NaN.
    np.testing.assert_allclose(advantages([0.7, 0.7, 0.7], normalize=True), 0.0, atol=1e-9)


@pytest.mark.parametrize("delta", [0.0, -1e-6, float("nan")])
def test_advantages_delta_guard(delta):
    with pytest.raises(ValueError, match="delta must be a finite number > 0"):
        advantages([0.0, 1.0], normalize=True, delta=delta)


@pytest.mark.parametrize("R, pattern", [([[0.0, 1.0]], "1-D"), ([], "non-empty"), ([0.0, float("nan")], "finite")])
def test_advantages_shape_and_value_guard(R, pattern):
    with pytest.raises(ValueError, match=pattern):
        advantages(R)


def test_ess_on_unequal_weights():
    w = np.array([1.0, 2.0, 3.0, 0.0])
    with np.errstate(divide="ignore"):
        logw = np.log(w)
    assert ess(logw) == pytest.approx(36.0 / 14.0, rel=1e-15)  # (Σw)²/Σw²
    assert ess(logw + 5000.0) == pytest.approx(36.0 / 14.0, rel=1e-12)  # scale-free, no overflow
    assert ess([0.0]) == 1.0 and ess([-np.inf, -np.inf]) == 0.0
