"""Issue 27 item 6: ``policy_loss`` never returns NaN from finite inputs.

Injected: a trajectory with ``ℓ = 1e4`` (its ``is`` weight overflows every dtype) and advantage 0
gave ``inf × 0 = NaN`` in the loss and the gradients, in every dtype. Now a zero-advantage row
contributes exactly 0, the trajectory-level coefficient ``ν A w`` is formed in log space (finite
whenever the product is, even when ``w`` alone overflows), and a coefficient that truly overflows
gives a loss of ``+inf`` with ``±inf`` gradient on its own tokens only, never NaN.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo.estimators import token_level as tl

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
ALL = ["onpolicy", "is", "tis", "tic", "gmc", "snis", *tl.TOKEN_ESTIMATORS]


def overflow_batch(dtype, adv0=0.0, N=8, T=4, seed=0):
    """Valid log-probs; row 0 has ``ℓ_0 ≈ 1e4`` (μ gave it probability e^-1e4) and advantage ``adv0``."""
    rng = np.random.default_rng(seed)
    logp_new = torch.tensor(rng.uniform(-3.0, -0.5, (N, T)))
    logp_old = logp_new + torch.tensor(rng.normal(0, 0.2, (N, T)))
    logp_old[0] = logp_new[0] - 2500.0  # ℓ_0 = 4 × 2500 = 1e4
    adv = torch.tensor(rng.normal(size=N))
    adv[0] = adv0
    mask = torch.ones(N, T, dtype=torch.bool)
    return logp_new.to(dtype), logp_old.to(dtype), adv.to(dtype), mask


def loss_and_grad(name, lp, lo, adv, mask, **kw):
    lp = lp.clone().requires_grad_(True)
    loss = tl.policy_loss(name, lp, lo, adv, mask, group_size=4, **kw)
    loss.backward()
    return loss.detach(), lp.grad


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_zero_advantage_row_with_huge_log_ratio_contributes_exactly_zero(name, dtype):
    lp, lo, adv, mask = overflow_batch(dtype)
    loss, g = loss_and_grad(name, lp, lo, adv, mask)
    assert torch.isfinite(loss), f"{name} {dtype}: loss {loss}"
    assert torch.isfinite(g).all(), f"{name} {dtype}: gradient not finite"
    assert bool((g[0] == 0).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_is_loss_equals_the_loss_without_the_zero_advantage_row(dtype):
    """For ``is`` (one weight per row) the row's ℓ must not matter at all when its advantage is 0."""
    lp, lo, adv, mask = overflow_batch(dtype)
    loss, g = loss_and_grad("is", lp, lo, adv, mask)
    lo_tame = lo.clone()
    lo_tame[0] = lp[0]
    loss_ref, g_ref = loss_and_grad("is", lp, lo_tame, adv, mask)
    assert float(loss) == float(loss_ref)
    assert torch.equal(g, g_ref)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_true_overflow_is_plus_inf_never_nan(dtype):
    """Two ``is`` rows past the range with advantages of opposite signs (+inf − inf) and a token with
    log-prob exactly 0 (inf × 0): the loss is +inf, the gradient ±inf on those rows, exact elsewhere."""
    lp, lo, adv, mask = overflow_batch(dtype, adv0=1.0)
    lo[5] = lp[5] - 2500.0
    adv[5] = -1.0
    lp[0, 0] = 0.0
    loss, g = loss_and_grad("is", lp, lo, adv, mask)
    assert float(loss) == math.inf
    assert not torch.isnan(g).any()
    assert bool(torch.isinf(g[0]).all()) and bool((g[0] < 0).all())  # loss −Σ c log π: ∂/∂logπ = −c
    assert bool(torch.isinf(g[5]).all()) and bool((g[5] > 0).all())
    rest = [1, 2, 3, 4, 6, 7]
    lo_tame = lo.clone()
    lo_tame[[0, 5]] = lp[[0, 5]]
    _, g_ref = loss_and_grad("is", lp, lo_tame, adv, mask)
    assert torch.equal(g[rest], g_ref[rest])


def test_coefficient_is_formed_in_log_space():
    """``ℓ = 710`` overflows ``exp`` in float64, but ``ν·A·ρ = e^710·0.5/8`` does not; in float32,
    ``ρ = e^60`` times ``A = 1e-30`` is ``1.4e-4``: exact, not built from a saturated weight."""
    N, T = 8, 2
    lp = torch.full((N, T), -1.0, dtype=torch.float64)
    lo = lp.clone()
    lo[0] = lp[0] - 355.0
    adv = torch.zeros(N, dtype=torch.float64)
    adv[0] = 0.5
    mask = torch.ones(N, T, dtype=torch.bool)
    _, g = loss_and_grad("is", lp, lo, adv, mask)
    want = -math.exp(710.0 + math.log(0.5 / N))
    assert math.isfinite(want)
    np.testing.assert_allclose(g[0].numpy(), [want, want], rtol=1e-12)

    lo32 = lp.clone()
    lo32[0] = lp[0] - 60.0
    adv32 = adv.clone()
    adv32[0] = 1e-30
    _, g32 = loss_and_grad("is", lp.float(), lo32.float(), adv32.float(), mask)
    want32 = -math.exp(120.0) * 1e-30 / N
    np.testing.assert_allclose(g32[0].double().numpy(), [want32, want32], rtol=1e-5)
