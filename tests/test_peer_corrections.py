"""The peers' off-policy corrections in the registry (issue 28 item 7) against the peers' own formulas.

Each reference below is transcribed here from the peer's source, never imported and never from the
toolkit's implementation: verl ``verl/trainer/ppo/rollout_corr_helper.py``
(``compute_rollout_correction_weights``, ``compute_rollout_rejection_mask``, ``compute_is_metrics``,
``compute_rs_metrics``; ``SAFETY_BOUND = 20``; presets ``decoupled_token_is``, ``decoupled_seq_is``,
``decoupled_seq_is_rs``, ``decoupled_geo_rs`` in ``verl/trainer/config/algorithm.py``), verl
``compute_policy_loss_vanilla`` × ``rollout_is_weights`` aggregated by ``agg_loss`` over the rejection-modified
``response_mask``; TRL ``GRPOTrainer.get_off_policy_mask`` and ``_compute_loss`` (installed TRL 1.16.0 and
main agree on this code). The learner's setting is the peers' decoupled mode with ``π_old = π_θ`` (one
update per batch): ``old_log_prob = log π_θ`` detached, so the PPO ratio is 1 and only the correction acts.

Compared in float64: the loss value the peer logs (toolkit ``pg_loss``), the gradient with respect to
``log π_θ``, and the peer's metrics. Both sides evaluate the same sums in a different order, so they agree
to a few ulps of the sums (``1e-12`` relative); the comparisons of thresholds are exact.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo import estimators as est
from asyncgrpo.estimators import registry
from asyncgrpo.estimators import token_level as tl

from _tol import approx

TOL = dict(rtol=1e-12, atol=1e-14)
SAFETY_BOUND = 20.0  # verl rollout_corr_helper.SAFETY_BOUND


# ----------------------------------------------------------------------------- batches
def batch(seed, *, scale=1.0, empty_rows=False, big=False):
    """``(logp_old, ell, adv, mask)``: ragged rows with holes, token ℓ at ``scale`` (a few at ±25 with ``big``)."""
    rng = np.random.default_rng(seed)
    N, T = int(rng.integers(3, 13)), int(rng.integers(1, 30))
    lengths = rng.integers(1, T + 1, N)
    mask = np.arange(T)[None, :] < lengths[:, None]
    mask &= rng.random((N, T)) > 0.15
    mask[np.arange(N), rng.integers(0, lengths)] = True
    if empty_rows:
        mask[rng.random(N) < 0.3] = False
        mask[0, 0] = True
    ell = rng.normal(0.0, scale, (N, T))
    if big:
        ell[rng.random((N, T)) < 0.05] = 25.0 * rng.choice([-1.0, 1.0])
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.15] = 0.0
    logp_old = rng.normal(-2, 0.7, (N, T))
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    return t(logp_old), t(np.where(mask, ell, 0.0)), t(adv), torch.tensor(mask)


def toolkit(name, logp_old, ell, adv, mask, mode):
    lp = (logp_old + ell).clone().requires_grad_(True)
    kw = dict(group_size=1) if name in est.TRAJECTORY_ESTIMATORS else {}
    loss, m = tl.policy_loss(name, lp, logp_old, adv, mask, loss_agg_mode=mode, return_metrics=True, **kw)
    loss.backward()
    return m, lp.grad.clone()


# ----------------------------------------------------------------------------- verl, transcribed
def v_masked_sum(values, mask, axis=None):
    return torch.where(mask.bool(), values, torch.zeros_like(values)).sum(axis) if axis is not None else \
        torch.where(mask.bool(), values, torch.zeros_like(values)).sum()


def v_masked_mean(values, mask, axis=None):
    m = mask.to(values.dtype)
    return v_masked_sum(values, mask, axis) / (m.sum(axis) + 1e-8 if axis is not None else m.sum() + 1e-8)


def verl_is_weights(log_ratio, response_mask, rollout_is, threshold=2.0):
    m = response_mask.to(log_ratio.dtype)
    if rollout_is == "token":
        w = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND))
    else:
        s = v_masked_sum(log_ratio, response_mask, -1).unsqueeze(-1)
        w = torch.exp(torch.clamp(s, min=-SAFETY_BOUND, max=SAFETY_BOUND)).expand_as(log_ratio)
    w = w * m
    return w.clamp(max=threshold).detach()


def verl_rs_mask(log_ratio, response_mask, option, spec):
    lower, upper = (float(x) for x in spec.split("_"))
    k1 = -torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    if option == "seq_sum_k1":
        stat = v_masked_sum(k1, response_mask, -1)
    else:  # seq_mean_k1
        stat = v_masked_mean(k1, response_mask, -1)
    keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
    return response_mask.to(log_ratio.dtype) * keep.unsqueeze(-1).to(log_ratio.dtype)


def verl_metrics(log_ratio, response_mask, rollout_is, threshold, rs_mask=None):
    out = {}
    m = response_mask.to(log_ratio.dtype)
    if rollout_is == "sequence":
        s = v_masked_sum(log_ratio, response_mask, -1).unsqueeze(-1)
        out["is_frac_high"] = float((s > math.log(threshold)).double().mean())
        out["is_frac_low"] = float((s < math.log(1.0 / threshold)).double().mean())
    elif rollout_is == "token":
        w = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)) * m
        out["is_frac_high"] = float(v_masked_mean((w > threshold).double(), response_mask))
        out["is_frac_low"] = float(v_masked_mean((w < 1.0 / threshold).double(), response_mask))
    if rs_mask is not None:
        out["rs_masked_frac"] = float(v_masked_mean(1.0 - rs_mask, response_mask))
        kept = (rs_mask > 0.5) & response_mask.bool()
        out["rs_seq_masked_frac"] = float((~kept & response_mask.bool()).any(dim=-1).double().mean())
    return out


def verl_decoupled(logp_old, ell, adv, mask, rollout_is=None, rollout_rs=None, rs_threshold=None):
    """verl's loss and gradient in decoupled mode at ``old_log_prob = log π_θ``, token-mean aggregation."""
    logp = (logp_old + ell).clone().requires_grad_(True)
    log_ratio = (logp - logp_old).detach()  # log π_θ − log π_rollout
    resp = mask.to(torch.float64)
    w = verl_is_weights(log_ratio, mask, rollout_is) if rollout_is else None
    rs = verl_rs_mask(log_ratio, mask, rollout_rs, rs_threshold) if rollout_rs else None
    loss_mask = resp if rs is None else rs  # compute_rollout_correction_and_add_to_batch rewrites response_mask
    ratio = torch.exp(logp - logp.detach())
    A = adv[:, None]
    pg = torch.maximum(-A * ratio, -A * torch.clamp(ratio, 0.8, 1.2))
    pg = torch.where(A < 0, torch.minimum(pg, -A * 3.0), pg)  # verl's dual clip, c = 3
    if w is not None:
        pg = pg * w
    loss = (pg * loss_mask).sum() / loss_mask.sum()
    loss.backward()
    metrics = verl_metrics(log_ratio, mask, rollout_is, 2.0, rs)
    return float(loss.detach()), logp.grad.clone(), metrics


VERL = {
    "verl_tok_tis": dict(rollout_is="token"),
    "verl_seq_tis": dict(rollout_is="sequence"),
    "verl_seq_rs": dict(rollout_is="sequence", rollout_rs="seq_sum_k1", rs_threshold="0.5_2.0"),
    "verl_geo_rs": dict(rollout_rs="seq_mean_k1", rs_threshold="0.999_1.001"),
}


@pytest.mark.parametrize("name", sorted(VERL))
@pytest.mark.parametrize("variant", ["plain", "empty_rows", "wide", "near_one"])
@pytest.mark.parametrize("seed", range(4))
def test_verl_rollout_correction_parity(name, variant, seed):
    kw = {"plain": {}, "empty_rows": dict(empty_rows=True), "wide": dict(scale=6.0, big=True),
          "near_one": dict(scale=0.002)}[variant]
    old, ell, adv, mask = batch(seed, **kw)
    m, grad = toolkit(name, old, ell, adv, mask, "token-mean")
    loss, vgrad, vm = verl_decoupled(old, ell, adv, mask, **VERL[name])
    # verl's masked_mean divides token shares by n_tok + 1e-8: a relative difference of 1e-8/n_tok, no more
    rel = 1e-8 / float(mask.sum()) + 1e-12
    if math.isnan(loss):
        # every token rejected: verl's local token-mean is 0/0 = NaN; the toolkit's (documented) loss and
        # gradient are 0 — nothing is kept, nothing moves
        assert vm["rs_masked_frac"] == pytest.approx(1.0, rel=rel)
        assert m["pg_loss"] == 0.0 and not bool(grad.any())
    else:
        assert m["pg_loss"] == pytest.approx(loss, rel=1e-12, abs=1e-14)
        torch.testing.assert_close(grad, vgrad, **TOL)
    for key, val in vm.items():
        assert m[key] == pytest.approx(val, rel=rel, abs=1e-15), key
    if name in ("verl_geo_rs", "verl_seq_rs") and variant in ("near_one", "plain"):
        # the batch must exercise the rejection on both sides of the decision somewhere in the sweep
        assert 0.0 <= m["rs_seq_masked_frac"] <= 1.0


def test_verl_rejection_is_exercised_both_ways():
    # a test of a mask that never binds, or always binds, could not fail: the batches above must do both
    kept = {n: [] for n in ("verl_geo_rs", "verl_seq_rs")}
    for seed in range(4):
        for kw in ({}, dict(scale=0.002)):
            old, ell, adv, mask = batch(seed, **kw)
            for n in kept:
                kept[n].append(toolkit(n, old, ell, adv, mask, "token-mean")[0]["rs_seq_masked_frac"])
    for n, fr in kept.items():
        assert min(fr) < 1.0 and max(fr) > 0.0, (n, fr)


def test_verl_seq_rs_documented_difference_only_past_the_safety_bound():
    """verl's ``seq_sum_k1`` clamps each token to ±20 before summing; so does the torch loss (registry
    ``torch_tokens``, tested with verl's batches above), but the NumPy/Numba trajectory map sees only ``ℓ_i`` and
    clamps the sum (docs/estimators.md). A row of two tokens +25 and −24.5 (ℓ_i = 0.5) shows it: verl's statistic is
    −(20 − 20) = 0 (kept), the registry's is −0.5 (kept too, inside [log ½, log 2]); +25 and −25.9 (ℓ_i = −0.9)
    is rejected by the registry (−ℓ_i = 0.9 > log 2) and kept by verl."""
    ell = torch.tensor([[25.0, -25.9]], dtype=torch.float64)
    mask = torch.ones_like(ell, dtype=torch.bool)
    verl_keep = verl_rs_mask(ell, mask, "seq_sum_k1", "0.5_2.0")
    assert float(verl_keep.sum()) == 2.0
    assert est.get("verl_seq_rs")(ell.sum(1).numpy())[0] == 0.0
    # with every |ℓ_t| ≤ 20 the two agree
    ell = torch.tensor([[19.0, -19.9]], dtype=torch.float64)
    assert float(verl_rs_mask(ell, mask, "seq_sum_k1", "0.5_2.0").sum()) == 0.0
    assert est.get("verl_seq_rs")(ell.sum(1).numpy())[0] == 0.0


# ----------------------------------------------------------------------------- TRL, transcribed
def trl_opsm(logp_old, ell, adv, mask, threshold=0.5, eps_low=0.2, eps_high=0.2):
    """TRL ``_compute_loss`` with ``off_policy_mask_threshold``, ``old_per_token_logps = per_token_logps.detach()``,
    ``sampling_per_token_logps`` = the behaviour log-probs, ``loss_type="dapo"`` on one process."""
    per_token_logps = (logp_old + ell).clone().requires_grad_(True)
    m = mask.to(torch.float64)
    advantages = adv.unsqueeze(1)
    kl_div = logp_old - per_token_logps.detach()
    kl_div = torch.nan_to_num(kl_div, nan=0.0)
    avg_seq_kl = (kl_div * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)
    off_policy_mask = ((advantages >= 0) | (avg_seq_kl <= threshold)).to(dtype=m.dtype)
    coef_1 = torch.exp(per_token_logps - per_token_logps.detach())
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    per_token_loss = per_token_loss * off_policy_mask
    loss = (per_token_loss * m).sum() / m.sum()
    loss.backward()
    return float(loss.detach()), per_token_logps.grad.clone(), off_policy_mask


@pytest.mark.parametrize("variant", ["plain", "empty_rows", "wide"])
@pytest.mark.parametrize("seed", range(6))
def test_trl_off_policy_sequence_mask_parity(variant, seed):
    kw = {"plain": {}, "empty_rows": dict(empty_rows=True), "wide": dict(scale=3.0)}[variant]
    old, ell, adv, mask = batch(seed, **kw)
    m, grad = toolkit("trl_seq_mask", old, ell, adv, mask, "dapo")
    loss, tgrad, opsm = trl_opsm(old, ell, adv, mask)
    assert m["pg_loss"] == pytest.approx(loss, rel=1e-12, abs=1e-14)
    torch.testing.assert_close(grad, tgrad, **TOL)
    # the toolkit's clipfrac is the masked share of real tokens with A ≠ 0 (TRL logs no OPSM metric)
    dropped = (opsm == 0).expand_as(mask) & mask & (adv != 0)[:, None]
    assert m["clipfrac"] == approx(float(dropped.sum()) / float(mask.sum()), 16, scale=1.0)  # a share in [0, 1]


def test_trl_mask_is_exercised_both_ways():
    fr = []
    for seed in range(6):
        old, ell, adv, mask = batch(seed, scale=3.0)
        fr.append(float((trl_opsm(old, ell, adv, mask)[2] == 0).double().mean()))
    assert min(fr) < 1.0 and max(fr) > 0.0, fr


# ----------------------------------------------------------------------------- registry facts about the peers
PEERS = {"verl_tok_tis": "token", "verl_seq_tis": "trajectory", "verl_seq_rs": "trajectory",
         "verl_geo_rs": "token", "trl_seq_mask": "token"}


def test_peer_names_levels_and_defaults():
    assert set(est.PEER_ESTIMATORS) == set(PEERS)
    for name, level in PEERS.items():
        e = registry.entry(name)
        assert e.level == level and e.peer and not e.uses_eps and not e.in_class
        # length-normalised ĝ (the protocol's token η grid) exactly for the token-level ones
        assert (name in tl.TOKEN_ESTIMATORS) == (level == "token")
    assert registry.entry("verl_seq_tis").defaults["rollout_is_threshold"] == 2.0
    assert registry.entry("verl_seq_rs").defaults["rollout_rs_threshold"] == "0.5_2.0"
    assert registry.entry("verl_geo_rs").defaults["rollout_rs_threshold"] == "0.999_1.001"
    assert registry.entry("trl_seq_mask").defaults["off_policy_mask_threshold"] == 0.5


def test_peer_maps_ignore_eps():
    rng = np.random.default_rng(0)
    ell = rng.normal(0, 2, 6)
    for name in ("verl_seq_tis", "verl_seq_rs"):
        np.testing.assert_array_equal(est.get(name, 0.2)(ell), est.get(name, 3.0)(ell))


def test_verl_seq_tis_is_tis_at_eps_c_minus_one_above_the_floor():
    ell = np.concatenate([np.linspace(-19.9, 30.0, 200), [1e4]])
    np.testing.assert_array_equal(est.get("verl_seq_tis")(ell), est.get("tis", 1.0)(ell))
    # below −20 verl's floor e^{−20} exceeds ρ: outside W_ε, as the property kit reports
    assert est.get("verl_seq_tis")(np.array([-25.0]))[0] == pytest.approx(math.exp(-20.0), rel=1e-15)


@pytest.mark.parametrize("name", sorted(PEERS))
def test_peer_maps_finite_in_log_space(name):
    if PEERS[name] == "trajectory":
        ell = np.array([1e4, -1e4, 0.3, -0.1])
        for backend in ("__call__", "numba"):
            assert np.all(np.isfinite(getattr(est.get(name), backend)(ell)))
    else:
        ell = np.array([[1e4, -1e4, 0.3], [0.001, -0.001, 0.0]])
        mask = np.ones_like(ell, dtype=bool)
        for fn in (tl.token_coefficients, tl.token_coefficients_numba):
            assert np.all(np.isfinite(fn(name, ell, mask, np.array([1.0, -1.0]))))
