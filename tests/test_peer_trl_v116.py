"""``trl_policy_loss`` against TRL 1.16.0's OWN ``GRPOTrainer._compute_loss`` (issue 57 item 4; issue 56 items 4, 7).

``loss_type="cispo"`` (TRL has it; it was refused), ``dapo``/``cispo``/``vespo`` with ``gradient_accumulation_steps ≠
steps_per_generation`` (TRL rescales ``num_items_in_batch`` by ``accum/steps_per_generation``; it was 2× off), and
every metric TRL logs for the loss type under TRL's name (``clip_ratio/{low,high,region}_mean``, ``low_min``,
``high_max``, ``cispo_clip_ratio``, ``vespo/phi_seq_mean``, ``entropy``), with TRL's value. TRL runs on a bare
trainer as in tests/test_peer_trl_options.py. Then the inputs TRL would broadcast or turn into NaN are refused by
name. Tolerance: ``8·N·T`` float64 ulps of the largest gradient entry; metrics 1e-12 relative (clip shares: 8 float32
ulps, TRL averages them in float32).
"""
from __future__ import annotations

import math
import types
from collections import defaultdict

import pytest
import torch

from _tol import assert_close
from asyncgrpo.estimators.maps.trl_loss_config import TRLLoss
from test_peer_trl_options import _defaults, _MISSING, batch, trl_grpo, trl_vllm_ratio

from asyncgrpo.estimators.maps.trl_loss_config import trl_policy_loss


@pytest.fixture(autouse=True)
def _trl_is_installed():
    if _MISSING:
        pytest.fail(_MISSING)


def trl_run(opts, cur, old, mu, adv, mask, ent, accum=1, spg=None):
    """TRL's gradient wrt ``log π_θ`` and the metrics its ``_compute_loss`` logs."""
    cfg = TRLLoss.from_config(opts)
    args = types.SimpleNamespace(**{**_defaults(), **opts, "steps_per_generation": spg or accum,
                                    "gradient_accumulation_steps": accum})
    tr = object.__new__(trl_grpo.GRPOTrainer)
    tr.__dict__.update(
        loss_type=cfg.loss_type, importance_sampling_level=cfg.importance_sampling_level,
        off_policy_mask_threshold=cfg.off_policy_mask_threshold, top_entropy_quantile=cfg.top_entropy_quantile,
        epsilon_low=cfg.epsilon, epsilon_high=cfg.eps_high, beta=0.0, use_vllm=cfg.use_vllm,
        vllm_importance_sampling_correction=cfg.vllm_importance_sampling_correction,
        max_completion_length=cfg.max_completion_length, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=accum, args=args, model=types.SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list)},
        accelerator=types.SimpleNamespace(gather=lambda x: x, reduce=lambda x, reduction: x, num_processes=1,
                                          gather_for_metrics=lambda x: x, sync_gradients=True,
                                          pad_across_processes=lambda x, dim=0, pad_index=0: x))
    lp = cur.clone().requires_grad_(True)
    tr._get_per_token_logps_and_entropies = lambda *a, **k: (lp, ent, None)
    N, T = mask.shape
    inputs = dict(prompt_ids=torch.zeros(N, 1, dtype=torch.long), prompt_mask=torch.ones(N, 1, dtype=torch.long),
                  completion_ids=torch.zeros(N, T, dtype=torch.long), completion_mask=mask.long(),
                  advantages=adv.clone(), old_per_token_logps=old, sampling_per_token_logps=mu,
                  num_items_in_batch=mask.sum())
    if cfg.vllm_is_on:
        inputs["importance_sampling_ratio"] = trl_vllm_ratio(cfg, old, mu, mask)
    loss = tr._compute_loss(None, inputs)
    loss.backward()
    return lp.grad, {k: v[-1] for k, v in tr._metrics["train"].items()}


def ours(opts, cur, old, mu, adv, mask, ent, accum=1, spg=None):
    lp = cur.clone().requires_grad_(True)
    loss, m = trl_policy_loss(lp, old, adv, mask, opts, sampling_logp=mu, entropies=ent,
                              num_items_in_batch=int(mask.sum()), accumulation_steps=accum, steps_per_generation=spg,
                              return_metrics=True)
    loss.backward()
    return lp.grad, m


SETTINGS = {
    "cispo": dict(loss_type="cispo"),
    "cispo_eps5": dict(loss_type="cispo", epsilon_high=5.0),
    "cispo_eps1.1_seq": dict(loss_type="cispo", epsilon_high=1.1, importance_sampling_level="sequence"),
    "cispo_opsm_entropy": dict(loss_type="cispo", epsilon_high=1.05, off_policy_mask_threshold=0.05,
                               top_entropy_quantile=0.5),
    "dapo": dict(loss_type="dapo"),
    "dapo_delta_seq": dict(loss_type="dapo", delta=1.5, importance_sampling_level="sequence"),
    "vespo": dict(loss_type="vespo"),
    "grpo": dict(loss_type="grpo", epsilon_high=0.28),
    "bnpo_delta": dict(loss_type="bnpo", delta=1.1),
    "dr_grpo": dict(loss_type="dr_grpo"),
    "luspo_seq": dict(loss_type="luspo", importance_sampling_level="sequence"),
    "sapo": dict(loss_type="sapo"),
}
#: TRL's metric names per loss type (besides "entropy", logged for every type)
NAMES = {"cispo": {"cispo_clip_ratio"}, "vespo": {"vespo/phi_seq_mean"}, "sapo": set()}
CLIP_NAMES = {f"clip_ratio/{n}" for n in ("low_mean", "high_mean", "region_mean", "low_min", "high_max")}


@pytest.mark.parametrize("accum,spg", ((1, None), (2, 4), (4, 2), (3, 3)))
@pytest.mark.parametrize("setting", SETTINGS)
def test_gradient_and_every_metric_equal_trls(setting, accum, spg):
    opts = SETTINGS[setting]
    for seed in (0, 1, 2):
        cur, old, mu, adv, mask, ent = batch(seed, drift=0.3 if seed == 2 else 0.0)
        mask[1] = False  # an empty row
        mask[0, 0] = True
        t_grad, t_m = trl_run(opts, cur, old, mu, adv, mask, ent, accum, spg)
        assert bool(torch.isfinite(t_grad).all())
        g, m = ours(opts, cur, old, mu, adv, mask, ent, accum, spg)
        tol = 8.0 * mask.numel() * (5e5 if opts["loss_type"] == "sapo" else 1.0)  # TRL's sapo τ is float32
        assert_close(g, t_grad, tol, scale=max(float(t_grad.abs().max()), 1e-3), msg=f"{setting} seed {seed}")
        want = NAMES.get(opts["loss_type"], CLIP_NAMES) | {"entropy"}
        assert set(t_m) == want, (setting, set(t_m))  # the test's list is TRL's
        mine = {k for k in m if not k.startswith("trl_loss/")}
        assert mine == want, (setting, sorted(mine ^ want))
        for k, v in t_m.items():
            rel = 8 * 1.2e-7 if "clip" in k else 1e-12  # TRL's shares average float32 (bool.float())
            assert m[k] == pytest.approx(v, rel=rel, abs=rel) or (math.isinf(v) and m[k] == v), (setting, k, m[k], v)


def _args(seed=0):
    cur, old, mu, adv, mask, ent = batch(seed)
    return dict(logp=cur.clone().requires_grad_(True), old_logp=old, adv=adv, mask=mask), ent


@pytest.mark.parametrize("param,bad,match", [
    ("adv", lambda a: a[:1], r"adv must have shape \[N\]"),
    ("adv", lambda a: a[:, None].expand(-1, 4).contiguous(), r"adv must have shape \[N\]"),
    ("old_logp", lambda a: a[:1], r"old_logp must have logp's shape"),
    ("mask", lambda a: a[:1], r"mask must have logp's shape"),
    ("adv", lambda a: torch.where(torch.arange(a.numel()) == 0, torch.tensor(float("nan"), dtype=a.dtype), a),
     r"adv must be finite"),
])
def test_wrong_shapes_and_non_finite_inputs_name_the_parameter(param, bad, match):
    """Issue 56 item 4: adv of shape [1] for N rows gave 1.0254 instead of 0.0005; [1, T] old_logp or mask passed;
    adv [N, T] gave a raw torch error. Item 7: a NaN advantage gave a NaN loss."""
    kw, _ = _args()
    if param == "adv" and "expand" in match:
        pass
    kw[param] = bad(kw[param])
    with pytest.raises(ValueError, match=match):
        trl_policy_loss(**kw, config={"loss_type": "grpo"})


def test_non_finite_log_probs_and_entropies_are_refused():
    kw, ent = _args()
    for name in ("logp", "old_logp"):
        k2 = dict(kw)
        x = k2[name].detach().clone()
        x[0, 0] = -math.inf
        k2[name] = x.requires_grad_(name == "logp")
        with pytest.raises(ValueError, match=f"{name} must be finite"):
            trl_policy_loss(**k2, config={"loss_type": "grpo"})
    bad = ent.clone()
    bad[0, 0] = math.nan  # NaN entropies silently masked every token (loss −0.0)
    with pytest.raises(ValueError, match="entropies must be finite"):
        trl_policy_loss(**kw, config={"loss_type": "grpo", "top_entropy_quantile": 0.5}, entropies=bad)
    with pytest.raises(ValueError, match="entropies must have logp's shape"):
        trl_policy_loss(**kw, config={"loss_type": "grpo", "top_entropy_quantile": 0.5}, entropies=ent[:, :1])
    with pytest.raises(ValueError, match="mask has no real token"):
        trl_policy_loss(**{**kw, "mask": torch.zeros_like(kw["mask"])}, config={"loss_type": "grpo"})
