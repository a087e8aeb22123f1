"""One name, one map (issue 57 item 6): every registered estimator, plugins included (the list is the registry's at
import, ``$ASYNCGRPO_ESTIMATORS`` too), gives the same weights in the learner's NumPy map, its Numba kernel, the
torch map and the torch loss ``policy_loss`` (its gradient at the learner's own aggregation, THEORY's ``1/N`` for
trajectory maps, ``seq-mean-token-mean`` for token maps), on token log-ratios within verl's ±20 (past them a map of
``ℓ_i`` alone cannot know verl's per-token clamp; the torch loss follows verl there, docs/losses.md §4).
``verl_seq_rs``: at verl's own modes the loss renormalises over the batch's kept rows as verl 0.9.1 (verl's own
functions); the learner's map keeps THEORY's ``1/G`` instead of verl's ``1/G_kept`` (strict xfail below: the fix,
renormalising kept rows inside the map, changes the protocol's verl_seq_rs numbers and is left to the lead)."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch

import _peer_verl
from asyncgrpo import estimators as est
from asyncgrpo.estimators import registry
from asyncgrpo.estimators import token_level as tl

CA, RCH, VF, _MISSING = _peer_verl.load_or_missing()


def groups(seed, n=3, G=4, T=5, spread=0.5):
    """``(tok_ell [n·G, T], mask)``: token log-ratios within ±20 (where a map of ``ℓ_i`` can be the peer's), rows of
    1..T real tokens, one group straddling verl_seq_rs's band (some rows kept, some rejected)."""
    rng = np.random.default_rng([seed, 576])
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, n * G)[:, None]
    tok = np.clip(rng.normal(0.0, spread, (n * G, T)), -19.0, 19.0)
    tok[0, 0], tok[1, 0] = 1.5, 0.05  # group 0: a row far outside [−log 2, log 2], one inside
    tok[0, 1:] = tok[1, 1:] = 0.0
    return np.where(mask, tok, 0.0), mask


@pytest.mark.parametrize("name", registry.names("trajectory"))
def test_trajectory_map_is_one_map_in_numpy_numba_torch_and_the_loss(name):
    eps, G = 0.2, 4
    for seed in range(4):
        tok, mask = groups(seed, G=G)
        N = tok.shape[0]
        ell = tok.sum(1).reshape(-1, G)
        wm = est.get(name, eps)
        w_np = np.stack([wm(g) for g in ell])
        w_nb = np.stack([wm.numba(g) for g in ell])
        w_t = wm.torch(torch.tensor(ell)).numpy()
        np.testing.assert_allclose(w_nb, w_np, rtol=1e-12, atol=0, err_msg=f"{name}: Numba vs NumPy")
        np.testing.assert_allclose(w_t, w_np, rtol=1e-12, atol=0, err_msg=f"{name}: torch map vs NumPy")
        adv = np.random.default_rng(seed).uniform(-2, 2, N)
        old = torch.tensor(np.random.default_rng(seed + 9).normal(-2, 0.5, tok.shape))
        lp = (old + torch.tensor(tok)).requires_grad_(True)
        tl.policy_loss(name, lp, old, torch.tensor(adv), torch.tensor(mask), group_size=G, eps=eps).backward()
        want = -(w_np.reshape(N) * adv / N)[:, None] * mask
        np.testing.assert_allclose(lp.grad.numpy(), want, rtol=1e-12, atol=1e-300, err_msg=f"{name}: loss vs map")


@pytest.mark.parametrize("name", registry.names("token"))
def test_token_map_is_one_map_in_numpy_numba_torch_and_the_loss(name):
    for seed, spread in ((0, 0.5), (1, 0.5), (2, 4e-4), (3, 4e-4)):  # tiny spreads: Geo-RS keeps some rows, not all
        tok, mask = groups(seed, spread=spread)
        N = tok.shape[0]
        adv = np.random.default_rng(seed).uniform(-2, 2, N)
        c_np = tl.token_coefficients(name, tok, mask, adv)
        np.testing.assert_allclose(tl.token_coefficients_numba(name, tok, mask, adv), c_np, rtol=1e-12, atol=1e-300)
        c_t = tl.token_coefficients_torch(name, torch.tensor(tok), torch.tensor(mask), torch.tensor(adv)).numpy()
        np.testing.assert_allclose(c_t, c_np, rtol=1e-12, atol=1e-300)
        old = torch.tensor(np.random.default_rng(seed + 9).normal(-2, 0.5, tok.shape))
        lp = (old + torch.tensor(tok)).requires_grad_(True)
        tl.policy_loss(name, lp, old, torch.tensor(adv), torch.tensor(mask),
                       loss_agg_mode="seq-mean-token-mean").backward()
        np.testing.assert_allclose(lp.grad.numpy(), -c_np * adv[:, None] / N, rtol=1e-12, atol=1e-300, err_msg=name)


class _Proto:
    def __init__(self, tensors):
        self.batch = tensors

    @classmethod
    def from_dict(cls, tensors):
        return cls(dict(tensors))


def test_verl_seq_rs_map_renormalises_kept_rows_as_verls_seq_mean():
    """On one group (verl's batch), the learner's ``(1/G) Σ_i w_i A_i ∇log π`` with the registry's ``verl_seq_rs``
    weights is verl 0.9.1's REINFORCE gradient after its ``decoupled_seq_is_rs`` correction at ``seq-mean-token-sum``
    (verl divides by the rows its rejection keeps). Before: the map kept ``1/G``, off by ``G/G_kept`` (relative up
    to 1.0)."""
    _peer_verl.verl_is_installed(_MISSING)
    for seed in range(4):
        tok, mask = groups(seed, n=1, G=6)
        G = tok.shape[0]
        adv = torch.tensor(np.random.default_rng(seed).uniform(-2, 2, G))
        roll = torch.tensor(np.random.default_rng(seed + 9).normal(-2, 0.5, tok.shape))
        lp = (roll + torch.tensor(tok)).requires_grad_(True)
        with _peer_verl.patched(), mock.patch.object(RCH, "DataProto", _Proto):
            w, kept, _ = RCH.compute_rollout_correction_and_rejection_mask(
                lp.detach(), roll, torch.tensor(mask).long(), rollout_is="sequence", rollout_is_threshold=2.0,
                rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0")
            loss, _ = CA.compute_policy_loss_reinforce(roll, lp, adv[:, None].expand_as(lp), kept,
                                                       loss_agg_mode="seq-mean-token-sum",
                                                       config=_peer_verl.Cfg(global_batch_info={}),
                                                       rollout_is_weights=w.batch["rollout_is_weights"])
        loss.backward()
        w_map = est.get("verl_seq_rs")(tok.sum(1))
        assert 0 < int((w_map > 0).sum()) < G, (seed, w_map)  # the group rejects some rows, keeps others
        want = -(w_map * adv.numpy() / G)[:, None] * mask
        np.testing.assert_allclose(lp.grad.numpy(), want, rtol=1e-12, atol=1e-300)


def test_verl_seq_rs_statistic_is_the_row_sum_unclamped():
    """``−ℓ_i`` in NumPy, Numba and torch alike: the band is decided on the row sum itself (a clamp at ±20 can never
    move a sum into or out of ``[log ½, log 2]``, so this is the definition, not a numerical change)."""
    ell = np.array([0.6, -0.6, 0.7, 30.0, -30.0, 0.0])
    wm = est.get("verl_seq_rs")
    kept = wm(ell) > 0
    assert kept.tolist() == [True, True, False, False, False, True]
    np.testing.assert_array_equal(wm.numba(ell) > 0, kept)
    np.testing.assert_array_equal(wm.torch(torch.tensor(ell)).numpy() > 0, kept)


@pytest.mark.parametrize("mode", ("seq-mean-token-sum", "token-mean", "seq-mean-token-mean"))
def test_policy_loss_at_verls_modes_renormalises_over_the_batch_as_verl(mode):
    """At verl's own modes ``policy_loss("verl_seq_rs", group_size=G)`` is verl's loss on the whole batch (several
    groups): the map's in-group ``G/G_kept`` is divided out and ``ν`` counts the kept rows (tokens) of the batch."""
    _peer_verl.verl_is_installed(_MISSING)
    for seed in range(3):
        tok, mask = groups(seed, n=3, G=4)
        N = tok.shape[0]
        adv = torch.tensor(np.random.default_rng(seed).uniform(-2, 2, N))
        roll = torch.tensor(np.random.default_rng(seed + 9).normal(-2, 0.5, tok.shape))
        lp = (roll + torch.tensor(tok)).requires_grad_(True)
        with _peer_verl.patched(), mock.patch.object(RCH, "DataProto", _Proto):
            w, kept, _ = RCH.compute_rollout_correction_and_rejection_mask(
                lp.detach(), roll, torch.tensor(mask).long(), rollout_is="sequence", rollout_is_threshold=2.0,
                rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0")
            loss, _ = CA.compute_policy_loss_reinforce(roll, lp, adv[:, None].expand_as(lp), kept, loss_agg_mode=mode,
                                                       config=_peer_verl.Cfg(global_batch_info={}),
                                                       rollout_is_weights=w.batch["rollout_is_weights"])
        loss.backward()
        want = lp.grad.clone()
        lp.grad = None
        tl.policy_loss("verl_seq_rs", lp, roll, adv, torch.tensor(mask), group_size=4, loss_agg_mode=mode).backward()
        rel = 1e-7 if mode == "seq-mean-token-mean" else 1e-12  # verl's T_i + 1e-8
        torch.testing.assert_close(lp.grad, want, rtol=rel, atol=1e-15)
