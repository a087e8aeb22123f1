"""Token-level baselines (THEORY.md §2): backend agreement, clip semantics, and policy_loss's gradient."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncgrpo import estimators as est
from asyncgrpo.estimators import token_level as tl


def batch(seed, N=8, T=6, scale=0.4):
    rng = np.random.default_rng(seed)
    ell = rng.normal(0, scale, (N, T))
    mask = rng.random((N, T)) < 0.8
    mask[:, 0] = True
    adv = rng.normal(size=N)
    return ell, mask, adv


# (name, clip options): every clip variant of docs/losses.md
VARIANTS = [(n, {}) for n in tl.TOKEN_ESTIMATORS] + [
    ("grpo", {"clip_ratio_c": 3.0}), ("gspo", {"clip_ratio_c": 1.5}),
    ("cispo", {"cispo_clamp": "two-sided"}), ("cispo", {"cispo_clamp": "absolute", "eps_high": 5.0})]


@pytest.mark.parametrize("name,opts", VARIANTS, ids=[f"{n}-{o}" for n, o in VARIANTS])
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([0.05, 0.5, 3.0]))
@settings(max_examples=40)
def test_three_backends_agree(name, opts, seed, scale):
    ell, mask, adv = batch(seed, scale=scale)
    ref = tl.token_coefficients(name, ell, mask, adv, **opts)
    nb = tl.token_coefficients_numba(name, ell, mask, adv, **opts)
    th = tl.token_coefficients_torch(name, torch.tensor(ell), torch.tensor(mask), torch.tensor(adv), **opts).numpy()
    np.testing.assert_allclose(nb, ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(th, ref, rtol=1e-12, atol=0)
    assert np.all(ref[~mask] == 0) and np.all(ref >= 0)


def _three(name, ell, mask, adv, **opts):
    ref = tl.token_coefficients(name, ell, mask, adv, **opts)
    nb = tl.token_coefficients_numba(name, ell, mask, adv, **opts)
    th = tl.token_coefficients_torch(name, torch.tensor(ell), torch.tensor(mask), torch.tensor(adv), **opts).numpy()
    # the clip decisions agree exactly; values to round-off (libm exp may differ by an ulp between backends)
    assert np.array_equal(nb == 0, ref == 0) and np.array_equal(th == 0, ref == 0), (ref, nb, th)
    np.testing.assert_allclose(nb, ref, rtol=1e-14, atol=0)
    np.testing.assert_allclose(th, ref, rtol=1e-14, atol=0)
    return ref


def test_ratio_exactly_on_a_clip_boundary_is_unclipped_in_every_backend():
    """Issue 19: ``ℓ = log(1+ε_high)``, ``log(1−ε_low)``, ``log c`` (the same doubles the code compares with)
    keep the gradient ``r/T_i`` in NumPy, Numba and torch alike; one ulp beyond, the clip binds."""
    el, eh, c = 0.2, 0.28, 3.0
    hi, lo, lc = math.log1p(eh), math.log1p(-el), math.log(c)
    ell = np.array([[hi, np.nextafter(hi, 1.0)], [lo, np.nextafter(lo, -1.0)], [lc, np.nextafter(lc, 5.0)]])
    mask = np.ones_like(ell, dtype=bool)
    adv = np.array([1.0, -1.0, -1.0])
    got = _three("grpo", ell, mask, adv, eps_low=el, eps_high=eh, clip_ratio_c=c)
    np.testing.assert_allclose(got, [[np.exp(hi) / 2, 0.0], [np.exp(lo) / 2, 0.0], [np.exp(lc) / 2, 0.0]],
                               rtol=1e-14, atol=0)
    # gspo: the sequence ratio on the boundary (one token per row so that ℓ_i/T_i is the same double)
    seq = np.array([[hi], [np.nextafter(hi, 1.0)], [lo], [np.nextafter(lo, -1.0)]])
    got = _three("gspo", seq, np.ones_like(seq, dtype=bool), np.array([1.0, 1.0, -1.0, -1.0]), eps_low=el, eps_high=eh)
    np.testing.assert_allclose(got[:, 0], [np.exp(hi), 0.0, np.exp(lo), 0.0], rtol=1e-14, atol=0)
    # cispo: on the boundary the clamp is the identity; beyond it the weight is the bound itself
    got = _three("cispo", ell[:2], mask[:2], adv[:2], eps_low=el, eps_high=eh, cispo_clamp="two-sided")
    np.testing.assert_allclose(got * 2, np.exp([[hi, hi], [lo, lo]]), rtol=1e-14, atol=0)


def test_zero_advantage_rows_agree_and_carry_no_gradient():
    """Issue 19: A = 0 takes the A ≥ 0 clip rule in all backends, has zero gradient and is never counted clipped."""
    ell, mask, adv = batch(4, N=6, T=5, scale=1.0)
    adv[[1, 4]] = 0.0
    for name, opts in VARIANTS:
        _three(name, ell, mask, adv, **opts)
        lp = torch.tensor(ell).clone().requires_grad_(True)
        loss, m = tl.policy_loss(name, lp, torch.zeros_like(lp), torch.tensor(adv), torch.tensor(mask),
                                 return_metrics=True, **opts)
        loss.backward()
        assert torch.all(lp.grad[[1, 4]] == 0)
        only_zero = adv.copy()
        only_zero[:] = 0.0
        _, m0 = tl.policy_loss(name, lp.detach(), torch.zeros_like(lp), torch.tensor(only_zero), torch.tensor(mask),
                               return_metrics=True, **opts)
        assert m0["clipfrac"] == 0.0 and m0["pg_loss"] == 0.0 and m0["surrogate_loss"] == 0.0


def test_grpo_clip_is_two_sided_and_sign_dependent():
    eh, el = 0.28, 0.2
    ell = np.log(np.array([[1.5, 1.0, 0.5]] * 2))
    mask = np.ones_like(ell, dtype=bool)
    c = tl.token_coefficients("grpo", ell, mask, np.array([1.0, -1.0]), eps_low=el, eps_high=eh)
    # A>0: the high ratio is clipped; A<0: the low ratio is clipped; T_i = 3.
    np.testing.assert_allclose(c, [[0.0, 1 / 3, 0.5 / 3], [1.5 / 3, 1 / 3, 0.0]], rtol=1e-14)


def test_cispo_truncates_and_m2po_meets_its_second_moment_budget():
    ell, mask, adv = batch(1, N=16, T=10, scale=0.5)
    c = tl.token_coefficients("cispo", ell, mask, adv, eps_high=0.2)
    T_i = mask.sum(1, keepdims=True)
    assert np.all(c * T_i <= 1.2 * (1 + 1e-15))
    tau = 0.04
    c = tl.token_coefficients("m2po", ell, mask, adv, tau_m2=tau)
    kept = (c > 0) & mask
    assert 0 < kept.sum() < mask.sum()
    assert np.mean(ell[kept] ** 2) <= tau
    # Minimal: putting back the smallest dropped token breaks the budget.
    dropped = mask & ~kept
    j = np.unravel_index(np.argmin(np.where(dropped, ell**2, np.inf)), ell.shape)
    kept2 = kept.copy()
    kept2[j] = True
    assert np.mean(ell[kept2] ** 2) > tau


@pytest.mark.parametrize("name", est.ESTIMATORS + tl.TOKEN_ESTIMATORS)
def test_policy_loss_gradient_equals_estimator(name):
    """∇ of the surrogate is −ĝ with ĝ = (1/(n_groups·G)) Σ_i A_i Σ_t c_{i,t} ∇log π(a_t|s_t)."""
    G, n_groups, T = 4, 3, 5
    N = G * n_groups
    ell, mask, adv = batch(7, N=N, T=T, scale=0.3)
    rng = np.random.default_rng(8)
    logp_old = torch.tensor(rng.normal(-2, 0.5, (N, T)))
    # Parameterise log π directly: ∇_{logp} of the loss is then the coefficient matrix itself.
    logp_new = (logp_old + torch.tensor(ell)).clone().requires_grad_(True)
    mode = "seq-mean-token-mean" if name in tl.TOKEN_ESTIMATORS else None  # token_coefficients' ν (gpg's default is token-mean)
    loss = tl.policy_loss(name, logp_new, logp_old, torch.tensor(adv), torch.tensor(mask), eps=0.2, group_size=G,
                          loss_agg_mode=mode)
    loss.backward()
    if name in tl.TOKEN_CODES:
        c = tl.token_coefficients(name, ell, mask, adv)
    else:
        w = np.concatenate([est.get(name, 0.2)(np.where(mask, ell, 0).sum(1)[g * G:(g + 1) * G]) for g in range(n_groups)])
        c = np.where(mask, w[:, None], 0.0)
    expected = -(adv[:, None] * c) / N
    np.testing.assert_allclose(logp_new.grad.numpy(), expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["is", "tis", "tic", "gmc", "snis", "cispo", "m2po"])
def test_zero_staleness_gives_the_onpolicy_gradient(name):
    # d = 0: every ratio is 1, so IS-type corrections vanish (cispo/m2po up to their 1/T_i normalisation).
    N, T, G = 8, 4, 4
    rng = np.random.default_rng(2)
    logp = torch.tensor(rng.normal(-1, 0.3, (N, T)))
    mask = torch.ones(N, T, dtype=torch.bool)
    adv = torch.tensor(rng.normal(size=N))
    grads = {}
    for n in (name, "onpolicy"):
        lp = logp.clone().requires_grad_(True)
        tl.policy_loss(n, lp, logp, adv, mask, group_size=G).backward()
        grads[n] = lp.grad
    scale = T if name in tl.TOKEN_CODES else 1.0
    torch.testing.assert_close(grads[name] * scale, grads["onpolicy"], rtol=0, atol=0)


def test_bad_inputs_are_named():
    ell, mask, adv = batch(0)
    with pytest.raises(ValueError, match="unknown token-level estimator 'ppo'"):
        tl.token_coefficients("ppo", ell, mask, adv)
    with pytest.raises(ValueError, match="eps_low must be in"):
        tl.token_coefficients("grpo", ell, mask, adv, eps_low=1.5)
    with pytest.raises(ValueError, match="tau_m2 must be a finite number > 0"):
        tl.token_coefficients("m2po", ell, mask, adv, tau_m2=0.0)
    with pytest.raises(ValueError, match="adv must have shape"):
        tl.token_coefficients("grpo", ell, mask, adv[:-1])
    bad = ell.copy()
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match="tok_ell must be finite"):
        tl.token_coefficients_numba("grpo", bad, mask, adv)
    empty = mask.copy()
    empty[2] = False
    with pytest.raises(ValueError, match="trajectory 2 with no tokens"):
        tl.token_coefficients("gspo", ell, empty, adv)
    bad_adv = torch.tensor(adv).clone()
    bad_adv[1] = math.nan
    with pytest.raises(ValueError, match="adv must be finite"):
        tl.policy_loss("grpo", torch.tensor(ell), torch.zeros_like(torch.tensor(ell)), bad_adv, torch.tensor(mask))
    with pytest.raises(ValueError, match="group_size must be >= 1 and divide"):
        tl.policy_loss("gmc", torch.zeros(6, 2), torch.zeros(6, 2), torch.zeros(6), torch.ones(6, 2, dtype=torch.bool),
                       group_size=4)


def test_clip_options_are_validated():
    ell, mask, adv = batch(0)
    with pytest.raises(ValueError, match="clip_ratio_c must be a finite number > 1"):
        tl.token_coefficients("grpo", ell, mask, adv, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="clip_ratio_c .dual clip. applies to grpo and gspo only"):
        tl.token_coefficients("cispo", ell, mask, adv, clip_ratio_c=3.0)
    with pytest.raises(ValueError, match="cispo_clamp must be one of"):
        tl.token_coefficients("cispo", ell, mask, adv, cispo_clamp="verl")
    with pytest.raises(ValueError, match="cispo_clamp applies to cispo only"):
        tl.token_coefficients("grpo", ell, mask, adv, cispo_clamp="two-sided")
    t = (torch.tensor(ell), torch.zeros(ell.shape, dtype=torch.float64), torch.tensor(adv), torch.tensor(mask))
    with pytest.raises(ValueError, match="loss_agg_mode must be one of"):
        tl.policy_loss("grpo", *t, loss_agg_mode="seq-mean")
    with pytest.raises(ValueError, match="loss_scale_factor has no effect"):
        tl.policy_loss("grpo", *t, loss_agg_mode="token-mean", loss_scale_factor=512)
    with pytest.raises(ValueError, match="batch_num_tokens must be a finite number > 0"):
        tl.policy_loss("grpo", *t, loss_agg_mode="dapo", batch_num_tokens=0)


def test_global_counts_split_a_batch_into_micro_batches():
    """verl's batch_num_tokens / global_batch_size (TRL's num_items_in_batch): micro-batch losses sum to the batch's."""
    ell, mask, adv = batch(9, N=8, T=6)
    t = lambda a: torch.tensor(a)  # noqa: E731
    n_tok = int(mask.sum())
    cases = (("token-mean", {"batch_num_tokens": n_tok}), ("dapo", {"batch_num_tokens": n_tok}),
             ("seq-mean-token-mean", {"global_batch_size": 8}), ("seq-mean-token-sum", {"global_batch_size": 8}),
             ("seq-mean-token-sum-norm", {"loss_scale_factor": 6, "global_batch_size": 8}))
    for mode, kw in cases:
        zeros = torch.zeros(8, 6, dtype=torch.float64)
        whole = tl.policy_loss("grpo", t(ell), zeros, t(adv), t(mask), loss_agg_mode=mode)
        parts = sum(tl.policy_loss("grpo", t(ell[s]), zeros[s], t(adv[s]), t(mask[s]), loss_agg_mode=mode, **kw)
                    for s in (slice(0, 4), slice(4, 8)))
        assert float(parts) == pytest.approx(float(whole), rel=1e-12), mode


def test_length_normalize_divides_trajectory_coefficients_by_T_i():
    N, T, G = 4, 5, 2
    ell, mask, adv = batch(5, N=N, T=T)
    logp_old = torch.zeros(N, T, dtype=torch.float64)
    grads = []
    for flag in (False, True):
        lp = torch.tensor(ell).clone().requires_grad_(True)
        tl.policy_loss("gmc", lp, logp_old, torch.tensor(adv), torch.tensor(mask), group_size=G,
                       length_normalize=flag).backward()
        grads.append(lp.grad.numpy())
    T_i = mask.sum(1, keepdims=True)
    np.testing.assert_allclose(grads[1], grads[0] / T_i, rtol=1e-12, atol=1e-15)
