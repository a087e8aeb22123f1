"""``to_peer(metrics, name, "verl")`` against verl 0.9.1's OWN loss functions (issue 57 items 1, 2, 3).

For each registry loss verl has (grpo = ``compute_policy_loss_vanilla`` with the dual clip, gspo, cispo two-sided,
sapo, gpg) on batches with empty rows and log-ratios of ±50 (beyond verl's ±20 clamp): the ``actor/*`` names emitted
are exactly the ones verl's function logs (``pg_clipfrac_lower`` in every PPO-clip setting; nothing for gpg), each
with verl's value (clamped ``ppo_kl`` where verl clamps); ``rollout_corr/chi2_*`` and ``k3_kl`` carry
``compute_offpolicy_metrics``'s values (χ² clamped at ±20). The loss (``pg_loss`` and the gradient) equals verl's at
``seq-mean-token-sum-norm`` too, with and without ``global_batch_size``/``loss_scale_factor``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import _peer_verl
from asyncgrpo.estimators import loss_metrics as lm
from asyncgrpo.estimators import token_level as tl

CA, RCH, VF, _MISSING = _peer_verl.load_or_missing()
VERL_FN = {"grpo": "compute_policy_loss_vanilla", "gspo": "compute_policy_loss_gspo",
           "cispo": "compute_policy_loss_cispo", "sapo": "compute_policy_loss_sapo", "gpg": "compute_policy_loss_gpg"}
OPTS = {"grpo": dict(eps_low=0.2, eps_high=0.2, clip_ratio_c=3.0), "gspo": dict(eps_low=0.2, eps_high=0.2),
        "cispo": dict(eps_low=0.2, eps_high=0.2, cispo_clamp="two-sided"), "sapo": {}, "gpg": {}}


@pytest.fixture(autouse=True)
def _verl_is_installed():
    _peer_verl.verl_is_installed(_MISSING)


def batch(seed, big):
    rng = np.random.default_rng([seed, 572])
    N, T = int(rng.integers(4, 10)), int(rng.integers(2, 12))
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, N)[:, None]
    mask &= rng.random((N, T)) > 0.2
    mask[:, 0] = True
    mask[1] = False
    ell = rng.normal(0.0, 0.4, (N, T)) + 1.4 * (rng.random((N, T)) < 0.15)
    if big:
        ell[rng.random((N, T)) < 0.2] = 50.0
        ell[rng.random((N, T)) < 0.2] = -50.0
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.2] = 0.0
    old = rng.normal(-2.0, 0.7, (N, T))
    t = lambda a: torch.tensor(np.where(mask, a, 0.0), dtype=torch.float64)  # noqa: E731
    return t(old), t(ell), torch.tensor(adv), torch.tensor(mask)


def _cfg(info, actor=False):
    class Config(_peer_verl.Cfg, CA.ActorConfig):  # verl's cispo/sapo assert isinstance(config, ActorConfig)
        pass

    # the stubs make ActorConfig and AlgoConfig one class: vanilla asserts it is *not* an AlgoConfig
    return (Config if actor else _peer_verl.Cfg)(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, tau_pos=1.0,
                  tau_neg=1.05, global_batch_info=dict(info))


def verl_run(name, old, ell, adv, mask, mode, info):
    lp = (old + ell).clone().requires_grad_(True)
    A = adv[:, None].expand_as(lp)
    with _peer_verl.patched():
        loss, m = getattr(CA, VERL_FN[name])(old, lp, A, mask.long(), loss_agg_mode=mode,
                                                config=_cfg(info, actor=name in ("cispo", "sapo", "gspo")))
    loss.backward()
    off = RCH.compute_offpolicy_metrics(lp.detach(), old, mask.long())
    return float(loss.detach()), lp.grad, dict(m), {f"rollout_corr/{k}": v for k, v in off.items()}


def ours(name, old, ell, adv, mask, mode, **kw):
    lp = (old + ell).clone().requires_grad_(True)
    loss, m = tl.policy_loss(name, lp, old, adv, mask, loss_agg_mode=mode, return_metrics=True, **OPTS[name], **kw)
    loss.backward()
    return lp.grad, m


@pytest.mark.parametrize("big", (False, True))
@pytest.mark.parametrize("name", tuple(VERL_FN))
def test_actor_names_are_exactly_verls_with_verls_values(name, big):
    for seed in range(4):
        old, ell, adv, mask = batch(seed, big)
        # verl's sapo and gspo aggregate as the actor's mode (sapo forces seq-mean-token-mean)
        mode = "seq-mean-token-mean" if name == "sapo" else "token-mean"
        v_loss, v_grad, v_actor, v_rc = verl_run(name, old, ell, adv, mask, mode, {})
        _, m = ours(name, old, ell, adv, mask, mode)
        got = lm.to_peer(m, name, "verl")
        mine = {k for k in got if k.startswith("actor/")} - {"actor/pg_loss"}
        assert mine == set(v_actor), (name, seed, sorted(mine ^ set(v_actor)))
        for k, want in {**v_actor, **{k: v_rc[k] for k in ("rollout_corr/chi2_token", "rollout_corr/chi2_seq",
                                                               "rollout_corr/k3_kl")}}.items():
            rel = 8 * 1.2e-7 if "clipfrac" in k else 1e-12
            assert got[k] == pytest.approx(want, rel=rel, abs=1e-12), (name, seed, k, got[k], want)


@pytest.mark.parametrize("info", ({}, {"global_batch_size": 13}, {"global_batch_size": 13, "loss_scale_factor": 40},
                                  {"loss_scale_factor": 5}))
@pytest.mark.parametrize("name", ("grpo", "cispo", "gpg"))
def test_seq_mean_token_sum_norm_is_verls_agg_loss(name, info):
    """Issue 57 item 1: verl 0.9.1 divides by the non-empty rows (``global_batch_size``) and then by
    ``loss_scale_factor`` (default T); the toolkit divided by T only (B_seq times verl's loss)."""
    for seed in range(3):
        old, ell, adv, mask = batch(seed, False)
        v_loss, v_grad, _, _ = verl_run(name, old, ell, adv, mask, "seq-mean-token-sum-norm", info)
        g, m = ours(name, old, ell, adv, mask, "seq-mean-token-sum-norm", **info)
        torch.testing.assert_close(g, v_grad, rtol=1e-12, atol=1e-15)
        if name != "gpg":  # gpg's pg_loss is −A·log π, verl's value too
            assert m["pg_loss"] == pytest.approx(v_loss, rel=1e-12, abs=1e-15)


def test_ppo_kl_of_trajectory_maps_is_verls_unclamped_reinforce_kl():
    """verl's REINFORCE (what a trajectory map's loss is) logs the unclamped k1; its PPO loss the clamped one."""
    old, ell, adv, mask = batch(0, True)
    lp = (old + ell).clone().requires_grad_(True)
    with _peer_verl.patched():
        _, m = CA.compute_policy_loss_reinforce(old, lp, adv[:, None].expand_as(lp), mask.long(), config=_cfg({}))
    _, ours_m = tl.policy_loss("tis", lp, old, adv, mask, group_size=mask.shape[0], loss_agg_mode="seq-mean-token-sum",
                               return_metrics=True)
    assert lm.to_peer(ours_m, "tis", "verl")["actor/ppo_kl"] == pytest.approx(m["actor/ppo_kl"], rel=1e-12)
