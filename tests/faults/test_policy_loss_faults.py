"""Issue 14 faults of ``policy_loss`` and of the torch backend, each injected (docs/losses.md, "Faults").

- a row whose mask is all False on the trajectory path: zero contribution, finite gradient, the row
  leaves its group's ``ρ̄`` (it gave NaN gradients with ``length_normalize`` and shifted gmc/snis weights);
- NaN/inf in ``logp_new``, ``logp_old`` (on real tokens) or ``adv``: ``ValueError`` naming the tensor;
- float16/bfloat16 weights: computed wide and cast toward zero, so the gmc group mean stays ``≤ 1+ε``
  (round-to-nearest gave 1.2005 > 1.2) and ``w_i ≤ ρ_i`` for the in-class maps;
- non-boolean masks and non-integer ``group_size``: ``ValueError``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo import estimators as est
from asyncgrpo.estimators import token_level as tl
from asyncgrpo.estimators import torch_backend as tb

TRAJ = ["onpolicy", "is", "tis", "tic", "gmc", "snis"]


def batch(seed=0, N=8, T=5):
    rng = np.random.default_rng(seed)
    logp_old = torch.tensor(rng.normal(-2, 0.5, (N, T)))
    ell = torch.tensor(rng.normal(0, 0.3, (N, T)))
    adv = torch.tensor(rng.normal(size=N))
    mask = torch.tensor(rng.random((N, T)) < 0.8)
    mask[:, 0] = True
    return logp_old, ell, adv, mask


def grad_of(name, logp_old, ell, adv, mask, **kw):
    lp = (logp_old + ell).clone().requires_grad_(True)
    loss = tl.policy_loss(name, lp, logp_old, adv, mask, **kw)
    loss.backward()
    return loss.detach(), lp.grad


@pytest.mark.parametrize("name", TRAJ + list(tl.TOKEN_ESTIMATORS))
@pytest.mark.parametrize("length_normalize", [False, True])
def test_empty_row_contributes_nothing_and_leaves_its_group(name, length_normalize):
    G = 4
    logp_old, ell, adv, mask = batch()
    mask[1] = False  # row 1 of group 0 has no real token
    loss, g = grad_of(name, logp_old, ell, adv, mask, group_size=G, length_normalize=length_normalize)
    assert torch.isfinite(loss) and torch.isfinite(g).all()
    assert torch.all(g[1] == 0)
    if name in tl.TOKEN_CODES:
        return
    # the other rows of group 0 get the weights of a 3-trajectory group (the empty row is not a ρ = 1 member)
    ell_i = (ell * mask).sum(1).numpy()
    keep = [0, 2, 3]
    w3 = est.get(name, 0.2)(ell_i[keep])
    T_i = mask.sum(1).double().numpy()
    scale = T_i[keep] if length_normalize else 1.0
    # THEORY's ĝ divides by every row (N = 8); length_normalize is verl's seq-mean-token-mean: non-empty rows only
    N = int(mask.any(1).sum()) if length_normalize else mask.shape[0]
    want = -(adv.numpy()[keep] * w3 / scale)[:, None] * mask.numpy()[keep] / N
    np.testing.assert_allclose(g.numpy()[keep], want, rtol=1e-12, atol=1e-15)


def test_whole_empty_group_is_skipped():
    logp_old, ell, adv, mask = batch()
    mask[4:] = False  # the second group of four has no token at all
    loss, g = grad_of("gmc", logp_old, ell, adv, mask, group_size=4, length_normalize=True)
    assert torch.isfinite(g).all() and torch.all(g[4:] == 0)
    with pytest.raises(ValueError, match="mask has no real token"):
        grad_of("gmc", logp_old, ell, adv, torch.zeros_like(mask), group_size=4)


@pytest.mark.parametrize("tensor", ["logp_new", "logp_old", "adv"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", ["gmc", "grpo"])
def test_non_finite_inputs_are_named(tensor, bad, name):
    logp_old, ell, adv, mask = batch()
    lp = logp_old + ell
    if tensor == "logp_new":
        lp[2, 0] = bad
    elif tensor == "logp_old":
        logp_old = logp_old.clone()
        logp_old[2, 0] = bad
    else:
        adv = adv.clone()
        adv[2] = bad
    with pytest.raises(ValueError, match=rf"^{tensor} must be finite"):
        tl.policy_loss(name, lp.requires_grad_(True), logp_old, adv, mask, group_size=4)


def test_non_finite_padding_is_ignored_with_finite_gradient():
    logp_old, ell, adv, mask = batch()
    mask[3, 2:] = False
    lp = (logp_old + ell).clone()
    lp[3, 3] = -math.inf  # padding positions may hold anything
    logp_old = logp_old.clone()
    logp_old[3, 4] = math.nan
    lp.requires_grad_(True)
    loss, metrics = tl.policy_loss("gmc", lp, logp_old, adv, mask, group_size=4, return_metrics=True)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))


def test_bad_mask_and_group_size_are_rejected():
    logp_old, ell, adv, mask = batch()
    with pytest.raises(ValueError, match="mask must hold booleans or exactly 0/1"):
        tl.policy_loss("gmc", logp_old + ell, logp_old, adv, mask.double() * 0.5, group_size=4)
    with pytest.raises(ValueError, match="group_size must be >= 1 and divide"):
        tl.policy_loss("gmc", logp_old + ell, logp_old, adv, mask, group_size=2.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["gmc", "tis", "tic"])
def test_half_precision_weights_keep_the_class_bounds(dtype, name):
    """``(1/G)Σ w_i ≤ 1+ε`` and ``w_i ≤ ρ_i`` hold for the returned half-precision weights, read in float64."""
    eps = 0.2
    g = torch.Generator().manual_seed(0)
    ell = torch.randn(2000, 8, generator=g).to(dtype)
    w = est.get(name, eps).torch(ell)
    assert w.dtype == dtype
    wd, rho = w.double(), torch.exp(ell.double())
    assert float(wd.mean(1).max()) <= 1 + eps
    assert bool((wd <= rho).all())
    if name == "gmc":
        # the injected fault: the same log-weights exponentiated in half precision, rounded to nearest
        naive = torch.exp(tb.log_weights(name, ell, eps, torch.ones_like(ell, dtype=torch.bool))).double()
        assert float(naive.mean(1).max()) > 1 + eps
        # and the returned weights are the float64 weights of the same input, cast down: within one ulp below
        exact = est.get(name, eps).torch(ell.double())
        ulp = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
        assert bool((wd <= exact).all())
        assert float(((exact - wd) / exact).max()) <= ulp


def test_half_precision_policy_loss_is_finite_and_close_to_float64():
    logp_old, ell, adv, mask = batch(3, N=16, T=6)
    ref, g64 = grad_of("gmc", logp_old, ell, adv, mask, group_size=4)
    lp = (logp_old + ell).to(torch.bfloat16).clone().requires_grad_(True)
    loss = tl.policy_loss("gmc", lp, logp_old.to(torch.bfloat16), adv.to(torch.bfloat16), mask, group_size=4)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(lp.grad).all()
    # bf16 inputs carry ~3 significant digits; the loss must agree with float64 to that order
    assert float(loss.detach()) == pytest.approx(float(ref), rel=0.05, abs=0.05)


def test_cast_down_never_rounds_up():
    """Rounding toward zero exactly: the result is the largest value of the dtype ≤ w (its next value up
    exceeds w), from subnormals to the largest finite weights (fixed seed)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.cat([torch.rand(10_000, dtype=torch.float64, generator=gen) * 3,
                   torch.rand(1_000, dtype=torch.float64, generator=gen) * 1e-6,  # float16 subnormals
                   torch.tensor([0.0, 1.0, 1.2, 5e-8, 6e4], dtype=torch.float64)])
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        out = tb.cast_down(w, dt)
        assert out.dtype == dt and bool((out.double() <= w).all())
        up = torch.nextafter(out, torch.full_like(out, float("inf")))
        assert bool((up.double() > w).all())


def test_numpy_token_coefficients_refuse_a_fractional_mask():
    """The NumPy token-level path checks its mask like every other entry point (0.5 is not a boolean)."""
    import numpy as np

    from asyncgrpo.estimators.token_level import token_coefficients

    ell = np.zeros((2, 3))
    with pytest.raises(ValueError, match="mask"):
        token_coefficients("grpo", ell, np.full((2, 3), 0.5), np.array([1.0, -1.0]))
