"""verl's rollout correction at NON-default settings, against verl's OWN code (verl 0.9.1, tests/_peer_verl.py).

``asyncgrpo.integrations.verl.verl_policy_loss`` takes verl's option names (``rollout_is_threshold``, IcePop bounds,
``rollout_is_batch_normalize``, every ``rollout_rs`` mode and comma chain, ``bypass_mode`` with ``loss_type``, the
presets); verl's ``compute_rollout_correction_weights``, ``compute_rollout_rejection_mask``,
``compute_policy_loss_vanilla`` and ``compute_policy_loss_bypass_mode`` run the same batch. Three policies: the
current ``π_θ`` differs from ``π_old`` (a second PPO epoch), so the PPO clip and the IS weight act together.
Compared: the gradient with respect to ``log π_θ``, verl's loss value (our ``actor/pg_loss``) and every
``rollout_corr/*`` name we emit. Tolerances: ``k = 8·N·T`` float64 ulps of the largest entry (sums of ≤ N·T terms
in another order); verl's shares average in float32 (a few float32 ulps).
"""
from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
import torch

import _peer_verl
from _tol import assert_close
from asyncgrpo.estimators.maps.verl_rollout_config import PRESETS, RS_OPTIONS, RolloutCorrection
from asyncgrpo.integrations._peer_verl import verl_policy_loss

CA, RCH, VF, _MISSING = _peer_verl.load_or_missing()


@pytest.fixture(autouse=True)
def _verl_is_installed():
    _peer_verl.verl_is_installed(_MISSING)


SEEDS = (0, 1, 2)
CLIP = dict(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)


def batch(seed, scale=0.15, empty=False):
    """``(log π_θ, log π_old, log μ, A, mask)`` float64: ``ℓ = log π_old − log μ`` of spread ``scale`` with a few
    tokens at ±25 (beyond verl's clamp), ``log π_θ − log π_old`` of spread 0.2 plus 1.5 on a tenth of the tokens
    (the PPO clip and the dual clip bind)."""
    rng = np.random.default_rng([seed, 36])
    N, T = int(rng.integers(5, 12)), int(rng.integers(3, 14))
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, N)[:, None]
    if empty:
        mask[1] = False
    ell = rng.normal(0.0, scale, (N, T))
    big = rng.random((N, T)) < 0.03
    ell[big] = 25.0 * rng.choice([-1.0, 1.0], int(big.sum()))
    ell[0, 0], ell[-1, 0] = 25.0, -25.0  # first tokens are real: one row beyond +20, one beyond −20
    roll = rng.normal(-2.0, 0.7, (N, T))
    old = roll + ell
    cur = old + rng.normal(0.0, 0.2, (N, T)) + 1.5 * (rng.random((N, T)) < 0.1)  # r ≈ 4.5 > c: the dual clip
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.15] = 0.0
    t = lambda a: torch.tensor(np.where(mask, a, 0.0), dtype=torch.float64)  # noqa: E731
    return t(cur), t(old), t(roll), torch.tensor(adv), torch.tensor(mask)


class _Proto:  # verl wraps the weights in a DataProto; the stubbed module has none
    def __init__(self, tensors):
        self.batch = tensors

    @classmethod
    def from_dict(cls, tensors):
        return cls(tensors)


def verl_run(opts, cur, old, roll, adv, mask, mode="token-mean"):
    """verl's loss, gradient wrt log π_θ and metrics for ``opts`` (a verl ``rollout_correction`` mapping)."""
    o = {**dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_is_batch_normalize=False, rollout_rs=None,
                rollout_rs_threshold=None, bypass_mode=False, loss_type="ppo_clip"), **opts}
    lp = cur.clone().requires_grad_(True)
    resp = mask.long()
    A = adv[:, None].expand_as(cur)
    cfg = _peer_verl.Cfg(**CLIP, global_batch_info={}, policy_loss={"rollout_correction": o})
    metrics = {}
    if o["bypass_mode"]:
        with _peer_verl.patched(), mock.patch.object(RCH, "DataProto", _Proto):
            loss, m = CA.compute_policy_loss_bypass_mode(roll, lp, A, resp, loss_agg_mode=mode, config=cfg)
        metrics.update({k.removeprefix("rollout_corr/"): v for k, v in m.items()})
    else:
        w = None
        lr = old - roll
        if o["rollout_is"]:
            w, m = RCH.compute_rollout_correction_weights(lr, resp, o["rollout_is"], o["rollout_is_threshold"],
                                                          o["rollout_is_batch_normalize"])
            metrics.update(m)
        if o["rollout_rs"]:
            resp, m = RCH.compute_rollout_rejection_mask(lr, resp, o["rollout_rs"], o["rollout_rs_threshold"])
            metrics.update(m)
        loss, m = CA.compute_policy_loss_vanilla(old, lp, A, resp, loss_agg_mode=mode, config=cfg,
                                                 rollout_is_weights=w)
        metrics.update(m)
        metrics.update(RCH.compute_offpolicy_metrics(old, roll, mask.long()))
    if loss.requires_grad and bool(torch.isfinite(loss)):
        loss.backward()
    grad = lp.grad if lp.grad is not None else torch.zeros_like(lp)
    return loss.detach(), grad, metrics


def ours(opts, cur, old, roll, adv, mask, mode="token-mean"):
    lp = cur.clone().requires_grad_(True)
    loss, m = verl_policy_loss(lp, old, roll, adv, mask, opts, loss_agg_mode=mode, return_metrics=True, **CLIP)
    loss.backward()
    return lp.grad, m


def check(opts, seeds=SEEDS, mode="token-mean", scale=0.15, empty=False):
    """Gradient, loss value and emitted metrics equal verl's; returns the share of tokens verl rejected."""
    rejected = []
    for seed in seeds:
        cur, old, roll, adv, mask = batch(seed, scale, empty)
        v_loss, v_grad, v_m = verl_run(opts, cur, old, roll, adv, mask, mode)
        g, m = ours(opts, cur, old, roll, adv, mask, mode)
        k = 8.0 * mask.numel()
        where = f"{opts} seed {seed}"
        assert_close(g, v_grad, k, scale=max(float(v_grad.abs().max()), 1.0), msg=f"{where}: gradient")
        if bool(torch.isfinite(v_loss)):
            assert m["actor/pg_loss"] == pytest.approx(float(v_loss), rel=k * 2.3e-16, abs=k * 2.3e-16), where
        else:  # every token rejected: verl's token-mean is 0/0; ours is 0 (documented)
            assert m["rollout_corr/rollout_rs_masked_fraction"] == 1.0 and m["actor/pg_loss"] == 0.0, where
        ours_rc = {n.removeprefix("rollout_corr/"): v for n, v in m.items() if n.startswith("rollout_corr/")}
        theirs_rc = {n: v for n, v in v_m.items() if not n.startswith("actor/")}
        assert set(ours_rc) == set(theirs_rc), (where, set(ours_rc) ^ set(theirs_rc))  # every name, no other
        for name, v in ours_rc.items():
            # verl's shares average in float32 (.float().mean()): a few float32 ulps; its other statistics are
            # float64 sums of ≤ N·T terms in another order (k float64 ulps; verl's ESS keeps its +1e-8, so must we)
            float32_share = "fraction" in name or "oob" in name
            rel = 8 * 1.2e-7 if float32_share else k * 2.3e-16
            assert v == pytest.approx(theirs_rc[name], rel=rel, abs=1e-7 if float32_share else rel), \
                (where, name, v, theirs_rc[name])
        rejected.append(m.get("rollout_corr/rollout_rs_masked_fraction", 0.0))
    return rejected


IS_SETTINGS = {
    "token_C5": dict(rollout_is="token", rollout_is_threshold=5.0),
    "token_C1.1": dict(rollout_is="token", rollout_is_threshold=1.1),
    "seq_C1.5": dict(rollout_is="sequence", rollout_is_threshold=1.5),
    "seq_C_string": dict(rollout_is="sequence", rollout_is_threshold="3.0"),
    "token_icepop": dict(rollout_is="token", rollout_is_threshold="0.9_1.1"),
    "seq_icepop": dict(rollout_is="sequence", rollout_is_threshold="0.7_1.3"),
    "token_batch_norm": dict(rollout_is="token", rollout_is_threshold=1.2, rollout_is_batch_normalize=True),
    "seq_batch_norm": dict(rollout_is="sequence", rollout_is_threshold=1.2, rollout_is_batch_normalize=True),
    "bypass_ppo_clip_with_is": dict(rollout_is="token", rollout_is_threshold=1.1, bypass_mode=True),
    "bypass_reinforce_seq_C3": dict(rollout_is="sequence", rollout_is_threshold=3.0, bypass_mode=True,
                                    loss_type="reinforce"),
}


@pytest.mark.parametrize("name", IS_SETTINGS)
def test_is_thresholds_icepop_and_batch_normalize_equal_verls(name):
    check(IS_SETTINGS[name])


RS_THRESHOLDS = {"token_k1": "0.8_1.25", "token_k2": 0.01, "token_k3": 0.01, "seq_sum_k1": "0.5_1.5",
                 "seq_sum_k2": 0.05, "seq_sum_k3": 0.05, "seq_mean_k1": 1.02, "seq_mean_k2": 0.01,
                 "seq_mean_k3": 0.01, "seq_max_k2": 0.05, "seq_max_k3": 0.05}


@pytest.mark.parametrize("opt", RS_OPTIONS)
def test_every_rejection_mode_equals_verls(opt):
    """Each of verl's 11 ``rollout_rs`` modes at a threshold that rejects some but not all tokens (checked)."""
    rej = check(dict(rollout_is=None, rollout_rs=opt, rollout_rs_threshold=RS_THRESHOLDS[opt]))
    assert any(0.0 < r < 1.0 for r in rej), (opt, rej)


@pytest.mark.parametrize("spec", [("token_k1,seq_mean_k3", "0.8_1.25,0.01"), ("seq_max_k2,seq_sum_k1", "0.05,0.5_1.5"),
                                  ("seq_mean_k2,seq_max_k3", "0.05"),
                                  ("token_k3,seq_mean_k1,token_k3", "0.02,0.97_1.02")])
def test_chained_rejection_criteria_equal_verls(spec):
    """Comma chains (AND of the criteria), one shared threshold or one per option; a repeated option counts once."""
    rs, thr = spec
    if rs.count(",") == 2:  # three listed, two distinct: verl deduplicates before matching thresholds
        rs_ok = "token_k3,seq_mean_k1"
        assert RolloutCorrection(rollout_is=None, rollout_rs=rs, rollout_rs_threshold=thr).rs \
            == RolloutCorrection(rollout_is=None, rollout_rs=rs_ok, rollout_rs_threshold=thr).rs
    rej = check(dict(rollout_is="token", rollout_is_threshold=2.0, rollout_rs=rs, rollout_rs_threshold=thr))
    assert any(0.0 < r < 1.0 for r in rej), (spec, rej)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_verl_preset_equals_verls_loss(preset):
    """verl's presets (Geo-RS + Seq/Token-TIS, K3-RS and its TIS chains, IcePop, bypass ``ppo_clip``/``reinforce``)
    by name; the presets' option values are verl's classmethods' own (test below)."""
    check(PRESETS[preset], scale=0.01)


def test_the_preset_table_is_verls_classmethods():
    """:data:`PRESETS` holds what verl's ``RolloutCorrectionConfig.<preset>()`` returns at default arguments."""
    cls = _peer_verl.rollout_correction_config()
    for name, opts in PRESETS.items():
        got = getattr(cls, name)()
        want = {**{f: getattr(cls(), f) for f in opts}, **opts}
        for f in ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs",
                  "rollout_rs_threshold", "bypass_mode", "loss_type"):
            expect = want.get(f, getattr(cls(), f))
            assert getattr(got, f) == expect or str(getattr(got, f)) == str(expect), (name, f, getattr(got, f), expect)
    default = RolloutCorrection()
    for f in ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "bypass_mode", "loss_type"):
        assert getattr(default, f) == getattr(cls(), f), f


@pytest.mark.parametrize("mode", ("seq-mean-token-mean", "seq-mean-token-sum"))
def test_other_aggregation_modes_and_empty_rows_equal_verls(mode):
    check(dict(rollout_is="token", rollout_is_threshold=1.5, rollout_rs="seq_mean_k3", rollout_rs_threshold=0.01),
          mode=mode, empty=True)


def test_seq_sum_k1_clamps_each_token_before_summing_as_verl():
    """ℓ = [25, −20] on one row: verl's statistic Σ clamp(ℓ_t) = 0 keeps it (IS weight min(e^5, 2) = 2)."""
    ell = torch.tensor([[25.0, -20.0]], dtype=torch.float64)
    cfg = RolloutCorrection.from_config("verl_seq_rs")
    kept, _ = cfg.keep(ell, torch.ones_like(ell, dtype=torch.bool))
    assert bool(kept.all())
    want, _ = RCH.compute_rollout_rejection_mask(ell, torch.ones_like(ell).long(), "seq_sum_k1", "0.5_2.0")
    assert bool(want.bool().all())


@pytest.mark.parametrize("bad, match", [
    (dict(rollout_is_threshold=0.0), r"rollout_is_threshold.*> 0"),
    (dict(rollout_is_threshold="2_1"), r"rollout_is_threshold.*lower bound must be <="),
    (dict(rollout_is_threshold=math.inf), r"rollout_is_threshold.*finite"),
    (dict(rollout_is="tokens"), r"rollout_is must be None, 'token' or 'sequence'"),
    (dict(rollout_rs="seq_max_k1", rollout_rs_threshold=2.0), r"rollout_rs: unknown option 'seq_max_k1'"),
    (dict(rollout_rs="seq_mean_k3"), r"rollout_rs_threshold must be given"),
    (dict(rollout_rs="seq_mean_k3", rollout_rs_threshold="0.1_0.2"), r"option seq_mean_k3.*one upper bound"),
    (dict(rollout_rs="token_k1", rollout_rs_threshold="-1_2"), r"option token_k1.*> 0"),
    (dict(rollout_rs="token_k1,token_k2", rollout_rs_threshold="1,2,3"), r"one spec shared by all options or 2"),
    (dict(loss_type="ppo"), r"loss_type must be one of ppo_clip, reinforce"),
    (dict(bypass_mode="yes"), r"bypass_mode must be True or False"),
    (dict(rollout_is_thresold=2.0), r"unknown rollout_correction option"),
])
def test_bad_options_name_the_parameter_and_the_valid_range(bad, match):
    with pytest.raises(ValueError, match=match):
        RolloutCorrection.from_config(bad)


@pytest.mark.parametrize("name", ("verl_tok_tis", "verl_seq_tis", "verl_seq_rs", "verl_geo_rs"))
def test_the_registry_estimators_are_their_presets_at_pi_old_equal_pi_theta(name):
    """One formula: at π_old = π_θ and |ℓ_{i,t}| ≤ 20, ``verl_policy_loss(name)`` and the registry's
    ``policy_loss(name)`` (token-mean) have the same gradient."""
    from asyncgrpo.estimators import token_level as tl

    for seed in SEEDS:
        cur, old, roll, adv, mask = batch(seed, scale=0.01)
        old = torch.where(mask, roll + (old - roll).clamp(-1, 1), old)  # no token beyond the ±20 clamp
        lp = old.clone().requires_grad_(True)
        verl_policy_loss(lp, old, roll, adv, mask, name).backward()
        lp2 = old.clone().requires_grad_(True)
        kw = dict(group_size=1) if name in ("verl_seq_tis", "verl_seq_rs") else {}
        tl.policy_loss(name, lp2, roll, adv, mask, loss_agg_mode="token-mean", **kw).backward()
        assert_close(lp.grad, lp2.grad, 8.0 * mask.numel(), scale=max(float(lp2.grad.abs().max()), 1.0),
                     msg=f"{name} seed {seed}")


@pytest.mark.parametrize("taus", [(2.0, 0.5), (0.3, 3.0)])
def test_sapo_temperatures_equal_verls_compute_policy_loss_sapo(taus):
    """verl's ``actor.policy_loss`` ``tau_pos``/``tau_neg`` at non-default values: the gradient of verl's own
    ``compute_policy_loss_sapo`` (which aggregates ``seq-mean-token-mean`` whatever ``loss_agg_mode`` says) is
    ``−ν A k`` with the toolkit's ``gate_k_torch`` at those τ."""
    from asyncgrpo.estimators.aggregation import token_normaliser
    from asyncgrpo.estimators.maps.sapo import gate_k_torch

    for seed in SEEDS:
        cur, old, roll, adv, mask = batch(seed, scale=0.01)
        cur = torch.where(mask, old + (cur - old).clamp(-3, 3), cur)
        cfg = CA.ActorConfig()
        cfg.__dict__.update(tau_pos=taus[0], tau_neg=taus[1], global_batch_info={})
        lp = cur.clone().requires_grad_(True)
        loss, _ = CA.compute_policy_loss_sapo(old, lp, adv[:, None].expand_as(cur), mask.long(),
                                              loss_agg_mode="token-mean", config=cfg)
        loss.backward()
        k = gate_k_torch(torch.where(mask, cur - old, torch.zeros_like(cur)), adv, *taus)
        want = -token_normaliser("seq-mean-token-mean", mask) * adv[:, None] * k
        assert_close(lp.grad, want, 8.0 * mask.numel(), scale=max(float(want.abs().max()), 1e-3),
                     msg=f"{taus} seed {seed}")
