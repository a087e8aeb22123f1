"""verl integration: trajectory-level weights grouped by ``uid``, and policy losses that apply them.

verl's policy losses see old/new log-probs, advantages, the response mask, the aggregation mode, the
actor config and ``rollout_is_weights`` — but no group id, and micro-batches mix groups. So the
work is split the way verl splits its own rollout correction:

1. **Trainer side** (driver, once per batch, after ``old_log_probs`` are recomputed):
   :func:`compute_trajectory_weights` / :func:`add_trajectory_weights` group the rows by the batch's
   ``non_tensor_batch["uid"]`` and compute, per group, ``w = W_ε(ℓ)`` with the registry's torch
   backend, where ``ℓ_i = Σ_t m_{i,t} (old_log_probs − rollout_log_probs)_{i,t}`` is the log-ratio of
   the learner's policy at the start of the step to the rollout (behaviour) policy ``μ``
   (docs/THEORY.md §1–§2). The result is ``[bs, response_length]`` (``w_i`` on every real token, 0
   on padding), detached — the shape verl expects for ``batch.batch["rollout_is_weights"]``.
   :func:`install_trainer_hook` wires this into ``RayPPOTrainer.fit`` by wrapping verl's
   ``compute_rollout_correction_and_add_to_batch`` (rejection sampling and verl's metrics kept).
2. **Actor side**: :func:`trajectory_policy_loss`, registered with verl's ``register_policy_loss``
   under ``"gmc"``, ``"tic"``, ``"tis"``, ``"snis"``, ``"is"`` and ``"onpolicy"``
   (:func:`register_policy_losses`). It is the toolkit's
   :func:`~asyncgrpo.estimators.token_level.policy_loss` with ``A_i·sg(w_i)`` as the per-sequence
   coefficient, ``loss = −Σ_{i,t} ν_{i,t} A_i sg(w_i) log π_θ(a_{i,t}|s_{i,t})``, with verl's
   aggregation modes ``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum`` and
   ``seq-mean-token-sum-norm``, and ``config.global_batch_info`` (``dp_size``, ``batch_num_tokens``,
   ``global_batch_size``, ``loss_scale_factor``) honoured as verl 0.9.1's ``agg_loss`` does.

The weights are those of the policy at the start of the step: with several PPO mini-batches or
epochs per step, later updates use weights that are stale by those inner updates (as verl's own
``rollout_is_weights`` are). No PPO clip is applied by ``"gmc"`` and the other plain names: the weight map
replaces it. **With a trust region**: the names ``"<estimator>_ppo"`` (``"gmc_ppo"``, …; one flag,
``ppo_clip=True``) apply the weight to verl's PPO-clip loss instead, ``sg(w_i)·max(−A r, −A clip(r, 1−c_low,
1+c_high))`` with verl's dual clip for ``A < 0`` and ``r = π_θ/π_old`` per token, the clip ranges read from the actor
config (``clip_ratio``, ``clip_ratio_low``/``high``, ``clip_ratio_c``) as verl's ``vanilla`` loss reads them: the
weight corrects the behaviour → old-policy mismatch, the clip bounds each update (decoupled PPO).

verl's own corrections at any setting (``algorithm.rollout_correction``'s options, presets, bypass mode, three
policies): :func:`verl_policy_loss` (:mod:`asyncgrpo.integrations._peer_verl`, docs/integrations.md).

Discovery: verl imports the modules listed in ``VERL_USE_EXTERNAL_MODULES`` when ``verl`` is imported
(driver and Ray workers). Importing this module with verl installed registers the losses; with
``ASYNCGRPO_VERL_ESTIMATOR`` (and ``ASYNCGRPO_VERL_EPS``, default 0.2) set it also installs the
trainer hook. YAML and commands: docs/integrations.md. Everything except registration and the hook
is pure torch and needs no verl.
"""
from __future__ import annotations

import functools
import math
import os
from typing import Any

import numpy as np
import torch

from asyncgrpo import estimators as est
from asyncgrpo.estimators import torch_backend
from asyncgrpo.estimators.token_level import policy_loss
from asyncgrpo.integrations._peer_verl import RolloutCorrection, global_batch_kwargs, verl_policy_loss
from asyncgrpo.validation import check_eps, check_mask, check_real_array

#: Names registered with verl's ``register_policy_loss`` (one per registry estimator) and their PPO-clip variants.
LOSS_NAMES: tuple[str, ...] = est.ESTIMATORS
PPO_SUFFIX = "_ppo"
PPO_LOSS_NAMES: tuple[str, ...] = tuple(n + PPO_SUFFIX for n in est.ESTIMATORS)
#: verl's loss aggregation modes that :func:`trajectory_policy_loss` honours, as verl 0.9.1's ``agg_loss``
#: (``seq-mean-token-sum-norm`` divides by the kept rows, then by ``loss_scale_factor``); verl 0.9's new
#: ``token-sum`` is refused rather than guessed.
VERL_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
#: Metric prefix (verl style: ``actor/...``, ``rollout_corr/...``).
METRIC_PREFIX = "traj_is"


# --------------------------------------------------------------------------- trainer side (pure torch)
def group_index(uid) -> tuple[np.ndarray, np.ndarray]:
    """``(group, slot)``: for each row, its group number (order of first appearance) and position in it.

    ``uid`` is verl's ``non_tensor_batch["uid"]`` (one id per row; rows of a prompt share it). Ids are
    grouped as verl groups them (``defaultdict`` keys in ``compute_grpo_outcome_advantage``): by Python
    equality, so ``1``, ``1.0`` and ``True`` are one group there and here. A NaN id is refused: it is not
    equal to itself, so verl would put it in one group or in several depending on object identity.
    """
    uid = np.asarray(uid, dtype=object)
    if uid.ndim != 1 or uid.size == 0:
        raise ValueError(f"uid must be a non-empty 1-D array with one id per row, got shape {uid.shape}")
    first: dict[Any, int] = {}
    group = np.empty(uid.size, dtype=np.int64)
    counts: list[int] = []
    slot = np.empty(uid.size, dtype=np.int64)
    for i, u in enumerate(uid.tolist()):
        if _is_nan(u):
            raise ValueError(f"uid of row {i} is {u!r}: a NaN id is not equal to itself and names no group")
        g = first.setdefault(u, len(first))
        if g == len(counts):
            counts.append(0)
        group[i], slot[i] = g, counts[g]
        counts[g] += 1
    return group, slot


def _is_nan(u) -> bool:
    try:
        return bool(u != u)
    except Exception:  # noqa: BLE001 - an id whose comparison fails is not NaN; the dict lookup will say more
        return False


def trajectory_log_ratios(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                          response_mask: torch.Tensor) -> torch.Tensor:
    """``ℓ_i = Σ_t m_{i,t} (log π_old − log μ)_{i,t}`` in float64, shape ``[bs]`` (detached)."""
    old_log_prob = check_real_array(old_log_prob, "old_log_probs")
    rollout_log_prob = check_real_array(rollout_log_prob, "rollout_log_probs")
    response_mask = check_mask(response_mask, name="response_mask")
    if old_log_prob.shape != rollout_log_prob.shape or response_mask.shape != old_log_prob.shape or old_log_prob.ndim != 2:
        raise ValueError(
            "old_log_probs, rollout_log_probs and response_mask must share one shape [bs, response_length]; got "
            f"{tuple(old_log_prob.shape)}, {tuple(rollout_log_prob.shape)}, {tuple(response_mask.shape)}"
        )
    m = response_mask.detach().bool()
    diff = old_log_prob.detach().double() - rollout_log_prob.detach().double()
    bad = m & ~torch.isfinite(diff)
    if bool(bad.any()):
        i, t = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"old_log_probs/rollout_log_probs must be finite on response tokens; row {i}, token {t} is not")
    return torch.where(m, diff, torch.zeros((), dtype=torch.float64, device=diff.device)).sum(dim=1)


def compute_trajectory_weights(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                               response_mask: torch.Tensor, uid, estimator: str = "gmc",
                               eps: float = 0.2) -> tuple[torch.Tensor, dict[str, float]]:
    """``(rollout_is_weights, metrics)``: ``w_i`` of ``estimator`` per ``uid`` group, on every real token.

    ``w = W_ε(ℓ_group)`` from :meth:`WeightMap.torch` (log space, stop-gradient) on the rows of each
    group, in any row order and for groups of unequal size (rows with no response token are absent
    trajectories: weight 0, not in ``ρ̄``). Returns ``[bs, response_length]`` in the dtype of
    ``old_log_prob`` (0 on padding), rounded toward zero so that ``w_i ≤ ρ_i`` and each group's mean
    ``≤ 1+ε`` (tis/tic/gmc) hold in that dtype too, and verl-style metrics: ``traj_is/weight_mean``,
    ``traj_is/weight_max``, ``traj_is/cap_frac`` (rows with ``w_i < ρ_i``),
    ``traj_is/removed_mass`` (mean over groups of ``(1/G)Σ(ρ_i − w_i)``), ``traj_is/ess_frac``
    (mean of ``(Σw)²/(G Σw²)``), ``traj_is/log_ratio_abs_max``.
    """
    if estimator not in est.ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(est.ESTIMATORS)}, got {estimator!r}")
    eps = check_eps(eps)
    ell = trajectory_log_ratios(old_log_prob, rollout_log_prob, response_mask)
    response_mask = check_mask(response_mask, name="response_mask")
    bs = ell.shape[0]
    if len(uid) != bs:
        raise ValueError(f"uid has {len(uid)} entries but the batch has {bs} rows")
    group, slot = group_index(uid)
    n_groups, width = int(group.max()) + 1, int(slot.max()) + 1
    real = response_mask.detach().bool().any(dim=1).cpu()
    if not bool(real.any()):
        raise ValueError("response_mask has no response token in any row: no trajectory to weight "
                         f"(batch of {bs} rows)")
    g_t, s_t = torch.as_tensor(group), torch.as_tensor(slot)
    padded = torch.zeros(n_groups, width, dtype=torch.float64)
    mask = torch.zeros(n_groups, width, dtype=torch.bool)
    padded[g_t, s_t] = ell.cpu()
    mask[g_t, s_t] = real
    w = torch.zeros(n_groups, width, dtype=torch.float64)
    live = mask.any(dim=1)
    if bool(live.any()):
        w[live] = est.get(estimator, eps).torch(padded[live], mask=mask[live])
    w_row = w[g_t, s_t]
    out = w_row.to(old_log_prob.device)[:, None] * response_mask.detach().to(torch.float64)
    # toward zero, not to nearest: a rounded-up weight broke the cap (bf16 group mean 1.203125 > 1.2)
    out = torch_backend.cast_down(out, old_log_prob.dtype)
    return out.detach(), _metrics(padded, mask, w)


def _metrics(ell: torch.Tensor, mask: torch.Tensor, w: torch.Tensor) -> dict[str, float]:
    # ρ_i − w_i and w_i/ρ_i from log differences, so |ℓ| up to 1e4 stays finite
    with torch.no_grad():
        logw = torch.log(w)
        frac = torch.where(mask, torch.exp(logw - ell), torch.zeros_like(w))  # w_i / ρ_i
        capped = mask & (frac < 1 - 1e-12)
        G = mask.sum(dim=1).clamp(min=1).double()
        # uncapped rows contribute exactly 0 (not exp(ℓ)·0, which is NaN once exp(ℓ) overflows)
        removed = torch.where(capped, torch.exp(ell) * (1 - frac), torch.zeros_like(w)).sum(dim=1) / G
        s1, s2 = w.sum(dim=1), (w * w).sum(dim=1)
        ess = torch.where(s2 > 0, s1 * s1 / s2.clamp(min=1e-300), torch.zeros_like(s1)) / G
        live = mask.any(dim=1)
        p = METRIC_PREFIX
        return {
            f"{p}/weight_mean": float(w[mask].mean()),
            f"{p}/weight_max": float(w[mask].max()),
            f"{p}/cap_frac": float(capped.sum() / mask.sum()),
            f"{p}/removed_mass": float(removed[live].mean()),
            f"{p}/ess_frac": float(ess[live].mean()),
            f"{p}/log_ratio_abs_max": float(ell[mask].abs().max()),
        }


def add_trajectory_weights(batch, estimator: str = "gmc", eps: float = 0.2,
                           old_key: str = "old_log_probs", rollout_key: str = "rollout_log_probs") -> dict[str, float]:
    """Set ``batch.batch["rollout_is_weights"]`` on a verl ``DataProto`` (or any object shaped like one).

    Needs ``batch.batch[old_key]``, ``batch.batch[rollout_key]``, ``batch.batch["response_mask"]`` and
    ``batch.non_tensor_batch["uid"]``; returns the metrics of :func:`compute_trajectory_weights`.
    """
    tensors, extra = batch.batch, getattr(batch, "non_tensor_batch", None) or {}
    missing = [k for k in (old_key, rollout_key, "response_mask") if k not in tensors.keys()]
    if missing:
        hint = (" (enable the rollout's log-probs, actor_rollout_ref.rollout.calculate_log_probs=True)"
                if rollout_key in missing else "")
        raise ValueError(f"batch.batch lacks {', '.join(missing)}{hint}")
    if "uid" not in extra:
        raise ValueError("batch.non_tensor_batch has no 'uid': trajectory-level weights need verl's group ids")
    w, metrics = compute_trajectory_weights(tensors[old_key], tensors[rollout_key], tensors["response_mask"],
                                            extra["uid"], estimator=estimator, eps=eps)
    tensors["rollout_is_weights"] = w
    return metrics


# --------------------------------------------------------------------------- actor side (pure torch)
def _per_sequence(x: torch.Tensor, mask: torch.Tensor, name: str) -> torch.Tensor:
    """The one value a ``[bs, T]`` tensor holds on each row's real tokens (``ValueError`` if it varies)."""
    m = mask.bool()
    T = m.sum(dim=1)
    val = torch.where(m, x, torch.zeros_like(x)).sum(dim=1) / T.clamp(min=1)
    spread = torch.where(m, (x - val[:, None]).abs(), torch.zeros_like(x)).amax(dim=1)
    tol = 1e-5 * val.abs().clamp(min=1.0)
    bad = spread > tol
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{name} must be constant over each sequence's tokens for a trajectory-level estimator "
            f"(outcome advantages: GRPO, RLOO, …); row {i} varies by {float(spread[i]):.3g}"
        )
    return val


def trajectory_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                           response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                           rollout_is_weights: torch.Tensor | None = None, ppo_clip: bool = False
                           ) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy loss ``−Σ_{i,t} ν_{i,t} A_i sg(w_i) log π_θ(a_{i,t}|s_{i,t})`` (verl's signature).

    ``rollout_is_weights`` (``[bs, T]``, from :func:`compute_trajectory_weights`) carries ``w_i``;
    ``advantages`` must hold one value per sequence. The loss is
    :func:`~asyncgrpo.estimators.token_level.policy_loss` (``"onpolicy"``, i.e. coefficient 1, with
    advantages ``A_i·w_i``), aggregated by ``loss_agg_mode`` with ``config.global_batch_info``
    (``batch_num_tokens`` for ``token-mean``, ``global_batch_size`` for the ``seq-mean-*`` modes)
    (and ``loss_scale_factor`` for ``seq-mean-token-sum-norm``) and multiplied by its ``dp_size``, as verl 0.9.1's
    ``agg_loss`` does; a count left ``None`` is the local one, and is required when ``dp_size > 1`` (verl raises).
    ``ppo_clip=True``: the weighted PPO-clip loss (module docstring; the ``"<name>_ppo"`` registrations), i.e. the
    toolkit's ``"grpo"`` loss with advantages ``A_i·sg(w_i)`` (``w_i ≥ 0`` commutes with the clip's max and min).
    """
    if rollout_is_weights is None:
        raise ValueError(
            "rollout_is_weights is None: the trajectory-level losses need the trainer-side weights "
            "(asyncgrpo.integrations.verl.install_trainer_hook, or add_trajectory_weights on the batch)"
        )
    if loss_agg_mode not in VERL_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {', '.join(VERL_AGG_MODES)}, got {loss_agg_mode!r}")
    for x, what in ((old_log_prob, "old_log_prob"), (log_prob, "log_prob"), (advantages, "advantages"),
                    (rollout_is_weights, "rollout_is_weights")):
        check_real_array(x, what)
    mask = check_mask(response_mask, name="response_mask")
    w = _per_sequence(rollout_is_weights.detach().to(torch.float64), mask, "rollout_is_weights")
    adv = _per_sequence(advantages.detach().to(torch.float64), mask, "advantages")
    # verl 0.9.1's agg_loss reads the mode's global counts (the local ones when None, required when dp_size > 1)
    # and multiplies by dp_size, an integer >= 1 (a negative one would flip the loss's sign)
    dp_size, kwargs = global_batch_kwargs(getattr(config, "global_batch_info", None) if config is not None else None,
                                          loss_agg_mode)
    coef = (adv * w).to(torch.promote_types(log_prob.dtype, torch.float32))
    if ppo_clip:
        loss = policy_loss("grpo", log_prob, old_log_prob, coef, mask, loss_agg_mode=loss_agg_mode,
                           **_clip_ranges(config), **kwargs)
    else:
        loss = policy_loss("onpolicy", log_prob, old_log_prob, coef, mask, loss_agg_mode=loss_agg_mode, **kwargs)
    loss = loss * dp_size
    rows = mask.any(dim=1)
    metrics = {
        f"actor/{METRIC_PREFIX}/weight_mean": float(w[rows].mean()) if bool(rows.any()) else 0.0,
        f"actor/{METRIC_PREFIX}/weight_max": float(w[rows].max()) if bool(rows.any()) else 0.0,
    }
    return loss, metrics


def _clip_ranges(config) -> dict[str, float]:
    """``eps_low``, ``eps_high``, ``clip_ratio_c`` from verl's actor config, as verl's ``vanilla`` loss reads them
    (``clip_ratio_low``/``high`` default to ``clip_ratio``; ``clip_ratio_c`` to 3.0); a missing ``clip_ratio`` is an
    error naming it (the trust region needs its ε)."""
    def get(k, default=None):
        if config is None:
            return default
        if isinstance(config, dict):
            return config.get(k, default)
        return getattr(config, k, default)

    c = get("clip_ratio")
    if c is None:
        raise ValueError("ppo_clip needs the actor config's clip_ratio (verl's PPO ε), got none")
    lo, hi, cc = get("clip_ratio_low"), get("clip_ratio_high"), get("clip_ratio_c", 3.0)
    out = dict(eps_low=float(c if lo is None else lo), eps_high=float(c if hi is None else hi), clip_ratio_c=float(cc))
    for k, v in out.items():
        if not (math.isfinite(v) and v > 0) or (k == "clip_ratio_c" and v <= 1):
            raise ValueError(f"{k} must be a finite number > {1 if k == 'clip_ratio_c' else 0}, got {v!r}")
    return out


def trajectory_policy_loss_ppo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                               config=None, rollout_is_weights=None):
    """:func:`trajectory_policy_loss` with ``ppo_clip=True`` (verl's signature): registered as ``"<name>_ppo"``."""
    return trajectory_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                                  rollout_is_weights, ppo_clip=True)


# --------------------------------------------------------------------------- verl wiring (needs verl)
def register_policy_losses(names: tuple[str, ...] = LOSS_NAMES + PPO_LOSS_NAMES) -> tuple[str, ...]:
    """Register :func:`trajectory_policy_loss` with verl under each of ``names``; returns them.

    The loss applies whatever trajectory weights the trainer put in ``rollout_is_weights``; the
    name only says which estimator that should be — the trainer hook's ``estimator``.
    """
    from verl.trainer.ppo.core_algos import register_policy_loss

    for n in names:
        if n not in est.ESTIMATORS and n not in PPO_LOSS_NAMES:
            raise ValueError(f"names must be registry estimators ({', '.join(est.ESTIMATORS)}) or their "
                             f"'{PPO_SUFFIX}' variants, got {n!r}")
        register_policy_loss(n)(trajectory_policy_loss_ppo if n in PPO_LOSS_NAMES else trajectory_policy_loss)
    return tuple(names)


def wrap_rollout_correction(original, estimator: str = "gmc", eps: float = 0.2):
    """``original(batch, cfg) -> (batch, metrics)`` followed by :func:`add_trajectory_weights` on its batch.

    The wrapped function keeps verl's rejection sampling (the updated ``response_mask``) and metrics,
    then overwrites ``rollout_is_weights`` with trajectory-level weights grouped by ``uid``.
    """
    if estimator not in est.ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(est.ESTIMATORS)}, got {estimator!r}")
    eps = check_eps(eps)

    @functools.wraps(original)
    def wrapped(batch, rollout_corr_config, *args, **kwargs):
        batch, metrics = original(batch, rollout_corr_config, *args, **kwargs)
        metrics = dict(metrics)
        metrics.update(add_trajectory_weights(batch, estimator=estimator, eps=eps))
        return batch, metrics

    wrapped.asyncgrpo_estimator = (estimator, eps)
    return wrapped


def install_trainer_hook(estimator: str = "gmc", eps: float = 0.2) -> None:
    """Make verl's driver compute trajectory weights every step (wraps its rollout-correction step).

    verl runs that step when ``algorithm.rollout_correction`` is set, the rollout returned log-probs
    and ``bypass_mode`` is false; set ``rollout_is: null`` there so verl adds no weights of its own
    (its rejection sampling, if configured, still applies first). Idempotent.
    """
    from verl.trainer.ppo import rollout_corr_helper as rch

    original = getattr(rch.compute_rollout_correction_and_add_to_batch, "__wrapped__",
                       rch.compute_rollout_correction_and_add_to_batch)
    rch.compute_rollout_correction_and_add_to_batch = wrap_rollout_correction(original, estimator, eps)


def _autoregister() -> None:
    # Imported by verl through VERL_USE_EXTERNAL_MODULES: register the losses, and install the hook
    # when an estimator is configured in the environment (the driver process).
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        return  # no verl: the pure-torch half of this module still works
    register_policy_losses()  # verl present: a broken verl install raises here, it is not skipped
    name = os.environ.get("ASYNCGRPO_VERL_ESTIMATOR")
    if name:
        install_trainer_hook(name, float(os.environ.get("ASYNCGRPO_VERL_EPS", "0.2")))


_autoregister()

__all__ = [
    "LOSS_NAMES", "PPO_LOSS_NAMES", "VERL_AGG_MODES", "group_index", "trajectory_policy_loss_ppo", "trajectory_log_ratios", "compute_trajectory_weights",
    "add_trajectory_weights", "trajectory_policy_loss", "register_policy_losses", "wrap_rollout_correction",
    "install_trainer_hook", "verl_policy_loss", "RolloutCorrection",
]
