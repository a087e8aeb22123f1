"""``verl_policy_loss`` against verl 0.9.1's OWN trainer path (issue 57 items 1, 2, 3, 5; issue 56 items 5, 7).

verl's side runs exactly what its trainer runs: ``compute_rollout_correction_and_add_to_batch`` on the user's
``rollout_correction`` mapping (read with ``.get(option, None)``, as the trainer reads a partial YAML node), then
``compute_policy_loss_vanilla`` (or ``compute_policy_loss_bypass_mode``) with ``config.global_batch_info``; the
defaults come from verl's shipped YAML file itself. Every ``loss_agg_mode`` × option set × global-batch setting ×
edge batch (holes inside rows, empty rows, length-1 rows, log-ratios of ±50 beyond verl's ±20 clamp): the
gradient, the loss value, and every metric verl logs (the name sets equal, no name verl does not log).
Tolerance: ``8·N·T`` float64 ulps of the largest entry (sums in another order); verl's shares average in float32.
"""
from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

import _peer_verl
from _tol import assert_close
from asyncgrpo.estimators.maps.verl_rollout_config import YAML_DEFAULTS
from asyncgrpo.integrations._peer_verl import verl_policy_loss

CA, RCH, VF, _MISSING = _peer_verl.load_or_missing()
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
CLIP = dict(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)


@pytest.fixture(autouse=True)
def _verl_is_installed():
    _peer_verl.verl_is_installed(_MISSING)


def edge_batch(seed, kind):
    """``(log π_θ, log π_old, log μ, A [N, T], mask)`` float64 with the edge ``kind``."""
    rng = np.random.default_rng([seed, 57])
    N, T = int(rng.integers(4, 10)), int(rng.integers(2, 12))
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, N)[:, None]
    if kind in ("holes", "all"):
        mask &= rng.random((N, T)) > 0.2
        mask[:, 0] = True
    if kind in ("empty", "all"):
        mask[1] = False
        mask[-1] = False
    if kind in ("len1", "all"):
        mask[0] = False
        mask[0, 0] = True
        mask[2] = False
        mask[2, T - 1] = True
    roll = rng.normal(-2.0, 0.7, (N, T))
    ell = rng.normal(0.0, 0.3, (N, T))
    if kind in ("big", "all"):
        ell[rng.random((N, T)) < 0.15] = 50.0
        ell[rng.random((N, T)) < 0.15] = -50.0
    old = roll + ell
    ratio = rng.normal(0.0, 0.25, (N, T)) + 1.6 * (rng.random((N, T)) < 0.15)
    if kind in ("big", "all"):
        ratio[rng.random((N, T)) < 0.1] = -30.0
        ratio[rng.random((N, T)) < 0.1] = 30.0
    cur = old + ratio
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.2] = 0.0
    t = lambda a: torch.tensor(np.where(mask, a, 0.0), dtype=torch.float64)  # noqa: E731
    A = torch.tensor(adv)[:, None].expand(N, T) * torch.tensor(mask, dtype=torch.float64)
    return t(cur), t(old), t(roll), A.contiguous(), torch.tensor(mask)


class _Proto:
    def __init__(self, tensors):
        self.batch = tensors

    @classmethod
    def from_dict(cls, tensors):
        return cls(dict(tensors))


class _Batch:  # what compute_rollout_correction_and_add_to_batch reads and writes
    def __init__(self, tensors):
        self.batch = tensors

    def union(self, other):
        self.batch.update(other.batch)
        return self


def verl_run(opts, cur, old, roll, A, mask, mode, info):
    """verl's loss, gradient wrt log π_θ and every metric it logs, for the user's ``rollout_correction`` ``opts``."""
    lp = cur.clone().requires_grad_(True)
    cfg = _peer_verl.Cfg(**CLIP, global_batch_info=dict(info), policy_loss={"rollout_correction": dict(opts)})
    with _peer_verl.patched(), mock.patch.object(RCH, "DataProto", _Proto):
        if opts.get("bypass_mode", False):
            loss, m = CA.compute_policy_loss_bypass_mode(roll, lp, A, mask.long(), loss_agg_mode=mode, config=cfg)
        else:
            b = _Batch({"old_log_probs": old, "rollout_log_probs": roll, "response_mask": mask.long()})
            b, m_rc = RCH.compute_rollout_correction_and_add_to_batch(b, dict(opts))
            loss, m = CA.compute_policy_loss_vanilla(old, lp, A, b.batch["response_mask"], loss_agg_mode=mode,
                                                     config=cfg, rollout_is_weights=b.batch.get("rollout_is_weights"))
            m = {**m, **m_rc}
    if loss.requires_grad and bool(torch.isfinite(loss)):
        loss.backward()
    grad = lp.grad if lp.grad is not None else torch.zeros_like(lp)
    return loss.detach(), grad, m


def ours(opts, cur, old, roll, A, mask, mode, info):
    lp = cur.clone().requires_grad_(True)
    loss, m = verl_policy_loss(lp, old, roll, A, mask, opts, loss_agg_mode=mode, global_batch_info=info,
                               return_metrics=True, **CLIP)
    loss.backward()
    return lp.grad, m


OPTION_SETS = {
    "yaml_default": {},
    "token_tis": dict(rollout_is="token"),
    "seq_tis_C1.5": dict(rollout_is="sequence", rollout_is_threshold=1.5),
    "seq_rs_only": dict(rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0"),
    "geo_rs_token_tis": dict(rollout_is="token", rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001"),
    "k3_rs_seq_tis_norm": dict(rollout_is="sequence", rollout_is_batch_normalize=True, rollout_rs="seq_mean_k3",
                               rollout_rs_threshold=0.5),
    "icepop": dict(rollout_is="token", rollout_is_threshold="0.5_5.0"),
    "is_threshold_none": dict(rollout_is="token", rollout_is_threshold=None),
    "bypass_ppo_clip": dict(bypass_mode=True),
    "bypass_reinforce_seq": dict(bypass_mode=True, loss_type="reinforce", rollout_is="sequence"),
    "bypass_reinforce_none": dict(bypass_mode=True, loss_type="reinforce"),
}
INFOS = {"local": {}, "global": "global", "dp2": "dp2"}
KINDS = ("holes", "empty", "len1", "big", "all")
MAX_DIFF: dict = {}


def _info(which, mask):
    n_tok, n_seq = int(mask.sum()), int(mask.any(dim=1).sum())
    if which == "local":
        return {}
    dp = 1 if which == "global" else 2
    return {"dp_size": dp, "batch_num_tokens": 3 * n_tok, "global_batch_size": 3 * n_seq, "loss_scale_factor": 17}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("opt", OPTION_SETS)
def test_every_mode_option_set_and_edge_batch_equals_verl_091(mode, opt):
    opts = OPTION_SETS[opt]
    for kind in KINDS:
        for seed in (0, 1):
            cur, old, roll, A, mask = edge_batch(seed, kind)
            for which in INFOS:
                info = _info(which, mask)
                where = f"{opt} {mode} {kind} seed {seed} info {which}"
                v_loss, v_grad, v_m = verl_run(opts, cur, old, roll, A, mask, mode, info)
                g, m = ours(opts, cur, old, roll, A, mask, mode, info)
                k = 8.0 * mask.numel()
                scale = max(float(v_grad.abs().max()), 1.0)
                assert_close(g, v_grad, k, scale=scale, msg=f"{where}: gradient")
                MAX_DIFF[(mode, opt)] = max(MAX_DIFF.get((mode, opt), 0.0), float((g - v_grad).abs().max()))
                if bool(torch.isfinite(v_loss)):
                    assert m["actor/pg_loss"] == pytest.approx(float(v_loss), rel=k * 2.3e-16, abs=k * 2.3e-16), where
                # every name verl logs, and no other (actor/pg_loss is the trainer's name for the loss value)
                theirs = set(v_m)
                mine = set(m) - {"actor/pg_loss"}
                assert mine == theirs, (where, sorted(mine ^ theirs))
                for name, v in m.items():
                    if name == "actor/pg_loss":
                        continue
                    float32_share = "fraction" in name or "oob" in name or "clipfrac" in name
                    rel = 8 * 1.2e-7 if float32_share else k * 2.3e-16
                    want = float(v_m[name])
                    if np.isnan(want):
                        assert np.isnan(v), (where, name, v)
                        continue
                    assert v == pytest.approx(want, rel=rel, abs=1e-7 if float32_share else rel), (where, name, v, want)


def test_the_default_is_verls_shipped_yaml_no_is():
    """``rollout_correction=None`` and a partial mapping take verl's shipped YAML (``rollout_is: null``), read from
    verl's own file; before, ``None`` applied sequence TIS with C = 2 (the dataclass default)."""
    import yaml

    path = _peer_verl.ROOT / "verl" / "trainer" / "config" / "algorithm" / "rollout_correction.yaml"
    shipped = yaml.safe_load(Path(path).read_text())
    assert shipped == YAML_DEFAULTS
    cur, old, roll, A, mask = edge_batch(3, "holes")
    _, v_grad, _ = verl_run(shipped, cur, old, roll, A, mask, "token-mean", {})
    for opts in (None, {}, dict(bypass_mode=False), dict(rollout_rs=None)):
        lp = cur.clone().requires_grad_(True)
        verl_policy_loss(lp, old, roll, A, mask, opts, **CLIP).backward()
        assert_close(lp.grad, v_grad, 8.0 * mask.numel(), msg=str(opts))


def test_all_masked_batch_is_a_clear_error_as_verl():
    cur, old, roll, A, mask = edge_batch(0, "holes")
    none = torch.zeros_like(mask)
    with pytest.raises(ValueError, match="at least one valid token"):
        RCH.compute_rollout_correction_and_rejection_mask(old, roll, none.long(), rollout_is="token")
    for opts in (None, "decoupled_seq_is", "bypass_pg_is"):
        with pytest.raises(ValueError, match="at least one valid token"):
            verl_policy_loss(cur, old, roll, A, none, opts)


@pytest.mark.parametrize("what", ("log_prob", "old_log_prob", "rollout_log_prob", "advantages"))
@pytest.mark.parametrize("bad", (float("nan"), float("-inf"), float("inf")))
def test_non_finite_inputs_on_real_tokens_are_named(what, bad):
    """Issue 56 item 7: a −inf log-prob on a real token or a NaN advantage gave a NaN loss; now a ValueError."""
    args = dict(zip(("log_prob", "old_log_prob", "rollout_log_prob", "advantages", "response_mask"),
                    edge_batch(1, "holes")))
    args[what] = args[what].clone()
    args[what][0, 0] = bad
    with pytest.raises(ValueError, match=f"{what} must be finite"):
        verl_policy_loss(**args, rollout_correction="decoupled_token_is")
    args[what][0, 0] = 0.0
    pad = ~args["response_mask"]
    if bool(pad.any()):  # padding is ignored
        args[what] = torch.where(pad, torch.full_like(args[what], bad), args[what])
        loss = verl_policy_loss(**args, rollout_correction="decoupled_token_is")
        assert bool(torch.isfinite(loss))


@pytest.mark.parametrize("dp", (-1, 0, 2.7, True, "2", float("nan"), float("inf")))
def test_dp_size_must_be_an_integer_at_least_one(dp):
    """Issue 56 item 5: dp_size −1 flipped the loss's sign, 0 was read as 1, 2.7 as 2."""
    cur, old, roll, A, mask = edge_batch(1, "holes")
    info = {"dp_size": dp, "batch_num_tokens": 100, "global_batch_size": 10}
    with pytest.raises(ValueError, match=r"dp_size.*integer >= 1"):
        verl_policy_loss(cur, old, roll, A, mask, global_batch_info=info)


def test_global_batch_info_unknown_key_and_missing_count_with_dp_size():
    cur, old, roll, A, mask = edge_batch(1, "holes")
    with pytest.raises(ValueError, match="unknown key.*dp_szie"):
        verl_policy_loss(cur, old, roll, A, mask, global_batch_info={"dp_szie": 2})
    with pytest.raises(ValueError, match="required when dp_size > 1"):
        verl_policy_loss(cur, old, roll, A, mask, global_batch_info={"dp_size": 2})
    with pytest.raises(ValueError, match="required when dp_size > 1"):
        CA.agg_loss(cur, mask.long(), "token-mean", dp_size=2)
    loss2 = verl_policy_loss(cur, old, roll, A, mask, global_batch_info={"dp_size": 2.0, "batch_num_tokens": 50})
    loss1 = verl_policy_loss(cur, old, roll, A, mask, global_batch_info={"dp_size": 1, "batch_num_tokens": 50})
    assert float(loss2) == pytest.approx(2 * float(loss1), rel=1e-14)
