"""Issue 56 items 3 and 6: the count engine's E‖ĝ‖² for ``is`` at extreme μ against an mpmath reference, and
``asyncgrpo.functionals.signed_exp_sum`` on NaN, ±inf, a sign's magnitude and near-cancellation."""
from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from asyncgrpo.functionals import signed_exp_sum
from simulate.instances import bandit
from simulate.montecarlo.exact import exact_expectations

R = (1.0, 0.0)


def _reference_sq(x: float, G: int) -> mp.mpf:
    """E‖ĝ_is‖² on the 2-arm bandit, π uniform, μ = softmax([−x, 0]), summed over the G+1 count vectors in mpmath."""
    mp.mp.dps = 60
    pi = [mp.mpf(1) / 2, mp.mpf(1) / 2]
    z = mp.exp(-x) + 1
    mu = [mp.exp(-x) / z, 1 / z]
    rho = [pi[k] / mu[k] for k in range(2)]
    score = [[(1 if j == k else 0) - pi[j] for j in range(2)] for k in range(2)]
    gram = [[sum(score[k][j] * score[l][j] for j in range(2)) for l in range(2)] for k in range(2)]
    total = mp.mpf(0)
    for n0 in range(G + 1):
        n = (n0, G - n0)
        P = mp.binomial(G, n0) * mu[0] ** n[0] * mu[1] ** n[1]
        rbar = (n[0] * R[0] + n[1] * R[1]) / mp.mpf(G)
        c = [n[k] * rho[k] * (R[k] - rbar) / G for k in range(2)]
        total += P * sum(c[k] * c[l] * gram[k][l] for k in range(2) for l in range(2))
    return total


@pytest.mark.parametrize("x", [5.0, 200.0, 350.0, 600.0, 705.0, 750.0])
@pytest.mark.parametrize("G", [2, 4])
def test_is_second_moment_at_extreme_mu_matches_mpmath(x, G):
    mdp = bandit(2, rewards=list(R))
    theta, theta_mu = np.zeros(mdp.theta_shape), np.zeros(mdp.theta_shape)
    theta_mu.reshape(-1)[0] = -x  # μ(arm 0) = e^−x / (1 + e^−x)
    got = exact_expectations(mdp, theta, theta_mu, "is", 0.2, G)["sq_norm"]
    want = _reference_sq(x, G)
    if want > mp.mpf(np.finfo(np.float64).max):
        assert got == math.inf  # the true value overflows float64: inf, never 0.0 or NaN
    else:
        assert math.isfinite(got) and got == pytest.approx(float(want), rel=1e-9)


def test_signed_exp_sum_never_drops_a_nan_and_never_invents_a_number():
    assert math.isnan(signed_exp_sum([math.nan, 0.0], [1, 1]))  # was 1.0: the NaN term dropped
    assert math.isnan(signed_exp_sum([0.0, 0.0], [math.nan, 1]))
    assert math.isnan(signed_exp_sum([math.inf, math.inf], [1, -1]))  # inf − inf, was 0.0
    assert signed_exp_sum([math.inf, 5.0], [1, -1]) == math.inf
    assert signed_exp_sum([math.inf, 5.0], [-1, 1]) == -math.inf
    assert signed_exp_sum([math.nan, 1.0], [0, 1]) == pytest.approx(math.e)  # sign 0: the caller left it out
    assert signed_exp_sum([800.0, 800.0], [1, -1]) == 0.0 and signed_exp_sum([800.0], [1]) == math.inf
    assert signed_exp_sum([], []) == 0.0
    with pytest.raises(ValueError, match="same number of elements"):
        signed_exp_sum([0.0, 1.0], [1])


def test_signed_exp_sum_uses_the_signs_magnitude():
    assert signed_exp_sum([0.0], [2]) == 2.0  # was 1.0
    assert signed_exp_sum([0.0, 0.0], [2.5, -0.5]) == pytest.approx(2.0, rel=1e-15)
    assert signed_exp_sum([1.0, 1.0], [3, -3]) == 0.0


@pytest.mark.parametrize("t", [1e-12, 1e-15, 3e-9, 1e-300])
def test_signed_exp_sum_is_exact_near_cancellation(t):
    want = -math.expm1(-t)  # 1 − e^(−t), exact
    assert signed_exp_sum([0.0, -t], [1, -1]) == pytest.approx(want, rel=1e-14, abs=0)
    assert signed_exp_sum([-t, 0.0], [1, -1]) == pytest.approx(-want, rel=1e-14, abs=0)
