"""The peers' token-level losses in the registry (issue 28 item 7, stretch): ``sapo`` (verl and TRL) and ``gpg``
(verl) and ``luspo`` (TRL), against transcriptions of the peers' code (verl ``core_algos.compute_policy_loss_sapo``/``_gpg`` with
``agg_loss``; TRL 1.16.0 ``GRPOTrainer._compute_loss`` at ``loss_type="sapo"``), never imported and never from
the toolkit's implementation. ``old_log_prob`` is the behaviour policy, as for the toolkit's grpo. Float64;
the same sums in another order: 1e-12 relative."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo import estimators as est
from asyncgrpo.estimators import token_level as tl

from _tol import approx

TOL = dict(rtol=1e-12, atol=1e-14)


def batch(seed, scale=1.0, empty_rows=False):
    rng = np.random.default_rng(seed)
    N, T = int(rng.integers(3, 13)), int(rng.integers(1, 30))
    lengths = rng.integers(1, T + 1, N)
    mask = np.arange(T)[None, :] < lengths[:, None]
    mask &= rng.random((N, T)) > 0.15
    mask[np.arange(N), rng.integers(0, lengths)] = True
    if empty_rows:
        mask[rng.random(N) < 0.3] = False
        mask[0, 0] = True
    ell = np.clip(rng.normal(0.0, scale, (N, T)), -19.0, 19.0)
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.15] = 0.0
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    return t(rng.normal(-2, 0.7, (N, T))), t(np.where(mask, ell, 0.0)), t(adv), torch.tensor(mask)


def toolkit(name, old, ell, adv, mask, mode):
    lp = (old + ell).clone().requires_grad_(True)
    loss, m = tl.policy_loss(name, lp, old, adv, mask, loss_agg_mode=mode, return_metrics=True)
    loss.backward()
    return m, lp.grad.clone()


def verl_agg(loss_mat, mask, mode):
    m = mask.double()
    if mode == "token-mean":
        return (loss_mat * m).sum() / m.sum()
    seq_mask = m.sum(-1)
    seq_losses = (loss_mat * m).sum(-1) / (seq_mask + 1e-8)
    keep = (seq_mask > 0).double()
    return (seq_losses * keep).sum() / keep.sum()


def verl_sapo(old, ell, adv, mask, tau_pos=1.0, tau_neg=1.05):
    log_prob = (old + ell).clone().requires_grad_(True)
    A = adv[:, None].expand_as(log_prob)
    nakl = torch.clamp(log_prob - old, min=-20.0, max=20.0)
    ratio = torch.exp(nakl)
    taus = torch.where(A > 0, torch.tensor(tau_pos, dtype=A.dtype), torch.tensor(tau_neg, dtype=A.dtype))
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    loss = verl_agg(-gates * A, mask, "seq-mean-token-mean")
    loss.backward()
    # the same sum of absolute terms bounds verl's +1e-8 effect on the value: |Δ| ≤ 1e-8·Σ|terms|
    scale = float(verl_agg((gates * A).abs().detach(), mask, "seq-mean-token-mean"))
    return float(loss.detach()), log_prob.grad.clone(), scale


def trl_sapo(old, ell, adv, mask, pos=1.0, neg=1.05):
    per_token_logps = (old + ell).clone().requires_grad_(True)
    m = mask.double()
    advantages = adv.unsqueeze(1)
    coef_1 = torch.exp(per_token_logps - old)
    # TRL writes torch.where(advantages > 0, pos, neg) on Python floats, which yields float32 temperatures
    # (1.05 → 1.0499999523): TRL's rounding, not its formula; float64 here
    temperatures = torch.where(advantages > 0, torch.tensor(pos, dtype=torch.float64), torch.tensor(neg, dtype=torch.float64))
    soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures
    per_token_loss = -soft_coef_1 * advantages
    loss = ((per_token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    loss.backward()
    return float(loss.detach()), per_token_logps.grad.clone()


def trl_luspo(old, ell, adv, mask, eps_low=0.2, eps_high=0.2):
    """TRL ``_compute_loss`` at ``loss_type="luspo"``, ``importance_sampling_level="sequence"``, no KL, one process."""
    per_token_logps = (old + ell).clone().requires_grad_(True)
    m = mask.double()
    advantages = adv.unsqueeze(1)
    log_ratio = per_token_logps - old
    log_importance_weights = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    loss = (per_token_loss * m).sum(-1).mean()
    loss.backward()
    is_low = (coef_1 < 1 - eps_low) & (advantages < 0)
    is_high = (coef_1 > 1 + eps_high) & (advantages > 0)
    return float(loss.detach()), per_token_logps.grad.clone(), {
        "clipfrac_seq_low": float(is_low.double().mean()), "clipfrac_seq_high": float(is_high.double().mean())}


def verl_gpg(old, ell, adv, mask, mode="token-mean"):
    log_prob = (old + ell).clone().requires_grad_(True)
    loss = verl_agg(-log_prob * adv[:, None], mask, mode)
    loss.backward()
    scale = float(verl_agg((log_prob * adv[:, None]).abs().detach(), mask, mode))
    return float(loss.detach()), log_prob.grad.clone(), scale


@pytest.mark.parametrize("empty_rows", [False, True])
@pytest.mark.parametrize("scale", [0.3, 2.0])
@pytest.mark.parametrize("seed", range(4))
def test_sapo_matches_verl_and_trl(seed, scale, empty_rows):
    old, ell, adv, mask = batch(seed, scale, empty_rows)
    m, grad = toolkit("sapo", old, ell, adv, mask, "seq-mean-token-mean")
    loss, vgrad, scale = verl_sapo(old, ell, adv, mask)
    # verl's seq-mean-token-mean divides by T_i + 1e-8: each row's term moves by a relative 1e-8 at most
    assert m["pg_loss"] == pytest.approx(loss, rel=0, abs=1.01e-8 * scale + 1e-14)
    torch.testing.assert_close(grad, vgrad, rtol=1.01e-8, atol=1e-14)
    m, grad = toolkit("sapo", old, ell, adv, mask, "grpo")
    loss, tgrad = trl_sapo(old, ell, adv, mask)
    assert m["pg_loss"] == pytest.approx(loss, **{"rel": 1e-12, "abs": 1e-14})
    torch.testing.assert_close(grad, tgrad, **TOL)
    assert m["clipfrac"] == 0.0  # no clip: verl logs 0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("seed", range(4))
def test_gpg_matches_verl(seed, mode):
    old, ell, adv, mask = batch(seed, 1.0, empty_rows=seed % 2 == 1)
    m, grad = toolkit("gpg", old, ell, adv, mask, mode)
    loss, vgrad, scale = verl_gpg(old, ell, adv, mask, mode)
    rel = 1.01e-8 if mode == "seq-mean-token-mean" else 1e-12
    assert m["pg_loss"] == pytest.approx(loss, rel=0, abs=rel * scale + 1e-14)
    torch.testing.assert_close(grad, vgrad, rtol=rel, atol=1e-14)


@pytest.mark.parametrize("empty_rows", [False, True])
@pytest.mark.parametrize("scale", [0.05, 0.5])
@pytest.mark.parametrize("seed", range(4))
def test_luspo_matches_trl(seed, scale, empty_rows):
    old, ell, adv, mask = batch(seed, scale, empty_rows)
    m, grad = toolkit("luspo", old, ell, adv, mask, "grpo")
    loss, tgrad, tm = trl_luspo(old, ell, adv, mask)
    assert m["pg_loss"] == pytest.approx(loss, rel=1e-12, abs=1e-14)
    torch.testing.assert_close(grad, tgrad, **TOL)
    for key, val in tm.items():
        assert m[key] == approx(val, 64, scale=max(abs(val), 1.0)), key  # shares and ratio means, O(1)


def test_luspo_clips_somewhere():
    # a parity test on batches where the clip never binds could not tell luspo from its unclipped form
    fr = [toolkit("luspo", *batch(s, 0.5), "grpo")[0]["clipfrac_seq"] for s in range(4)]
    assert max(fr) > 0.0 and min(fr) < 1.0, fr


def test_sapo_weight_is_finite_in_log_space_and_differs_from_verl_only_below_minus_20():
    ell = np.array([[1e4, -1e4, 30.0, -25.0, 0.0]])
    mask = np.ones_like(ell, dtype=bool)
    for fn in (tl.token_coefficients, tl.token_coefficients_numba):
        c = fn("sapo", ell, mask, np.array([1.0]))
        assert np.all(np.isfinite(c)) and c[0, 0] == 0.0 and c[0, 2] == 0.0
        # at ℓ = 0 (r = 1): 4σ(0)(1 − σ(0)) = 1
        assert c[0, 4] * ell.shape[1] == pytest.approx(1.0, rel=1e-15)
    # ℓ = −25: verl's clamp gives k = 4σ(x)(1−σ(x))e^{−20}, the toolkit e^{−25}: both below 4e^{−20}
    k = tl.token_coefficients("sapo", ell, mask, np.array([1.0]))[0, 3] * ell.shape[1]
    assert 0 < k < 4 * math.exp(-20)


def test_peer_losses_run_in_the_learner_and_are_not_corrections():
    from simulate.delays import fixed
    from simulate.training import InstanceSpec, TrainConfig, run_many

    assert set(est.PEER_LOSSES) == {"sapo", "gpg", "luspo"} and not set(est.PEER_LOSSES) & set(est.PEER_ESTIMATORS)
    assert {"sapo", "gpg", "luspo"} <= set(tl.TOKEN_ESTIMATORS)
    spec = InstanceSpec(kind="token", V=3, T=4, state="count", reward="count_ge", k=2)
    cfgs = [TrainConfig(instance=spec, estimator=e, G=8, eta=1.0, steps=60, delay=fixed(2), seed=0)
            for e in ("sapo", "gpg", "luspo", "onpolicy")]
    r = run_many(cfgs)
    for x in r:
        assert not x.diverged and x.final_J > x.J[0], x.config.estimator
    assert np.all(np.isnan(r[0].clip_frac))  # no clip
