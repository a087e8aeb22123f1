"""verl's actor loss with its rollout correction, at any setting a verl user writes in ``algorithm.rollout_correction``
(:class:`~asyncgrpo.estimators.maps.verl_rollout_config.RolloutCorrection`) and ``actor`` (clip ratios, dual clip,
``loss_agg_mode``), in the toolkit's one form ``ĝ = Σ ν A k ∇log π_θ`` (pure torch; no verl needed).

Three policies: the rollout policy ``μ`` (``rollout_log_probs``), the learner at the start of the step ``π_old``
(``old_log_probs``) and the current ``π_θ``. Decoupled mode (verl's default): the IS weight ``w`` and the rejection
mask use ``ℓ = log π_old − log μ``; the PPO ratio ``r = exp(clamp(log π_θ − log π_old, ±20))`` is clipped to
``[1 − ε_low, 1 + ε_high]`` with verl's dual clip ``c`` for ``A < 0``, so ``k = r·1{unclipped}·w`` on the kept tokens.
Bypass mode (``bypass_mode=True``, ``π_old := μ``): the weight and the mask use ``ℓ = log π_θ − log μ`` (detached);
``loss_type="ppo_clip"`` clips ``r = π_θ/μ`` and applies no IS weight (verl: the ratio already is one),
``loss_type="reinforce"`` has ``k = w`` (verl's ``−A·w·log π``, no ratio). ``ν`` is the aggregation mode on the kept
mask (verl rewrites ``response_mask``), with ``global_batch_info`` as verl's ``agg_loss``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from asyncgrpo.estimators.aggregation import LOSS_AGG_MODES, token_normaliser
from asyncgrpo.estimators.maps.verl_rollout_config import RolloutCorrection
from asyncgrpo.estimators.maps.verl_rollout_corr import SAFETY_BOUND
from asyncgrpo.estimators.maps.verl_rollout_stats import offpolicy_stats
from asyncgrpo.validation import check_mask, check_real_array


def _clip_ratios(clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c):
    lo = clip_ratio if clip_ratio_low is None else clip_ratio_low
    hi = clip_ratio if clip_ratio_high is None else clip_ratio_high
    for v, name in ((lo, "clip_ratio_low"), (hi, "clip_ratio_high")):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ValueError(f"{name} (or clip_ratio) must be a finite number > 0, got {v!r}")
    if lo >= 1:
        raise ValueError(f"clip_ratio_low must be in (0, 1) so that 1 − clip_ratio_low > 0, got {lo!r}")
    if isinstance(clip_ratio_c, bool) or not isinstance(clip_ratio_c, (int, float)) or not 1 < clip_ratio_c:
        raise ValueError(f"clip_ratio_c (dual clip) must be a number > 1 as verl asserts, got {clip_ratio_c!r}")
    return float(lo), float(hi), float(clip_ratio_c)


def ppo_coefficient(ratio_log, A_tok, lo: float, hi: float, c: float):
    """``(k, objective)``: ``k = r·1{unclipped}`` with ``r = exp(clamp(ratio_log, ±20))``, the gradient weight of verl's
    ``compute_policy_loss_vanilla`` (``A > 0``: clipped above ``1 + hi``; ``A < 0``: below ``1 − lo`` or, dual clip,
    above ``c``; a ratio on a bound is unclipped; beyond ±20 the clamp stops the gradient), and verl's per-token
    objective ``max(−A r, −A clip(r))`` (``min(·, −A c)`` for ``A < 0``). ``A_tok`` is ``[N, T]``."""
    import torch

    x = ratio_log.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    r = torch.exp(x)
    # comparisons on log r, as the toolkit's grpo (never on exp(ℓ))
    ok = torch.where(A_tok > 0, x <= math.log1p(hi), x >= math.log1p(-lo))
    ok = ok & ~((A_tok < 0) & (x > math.log(c))) & (ratio_log.abs() <= SAFETY_BOUND)
    k = torch.where(ok, r, torch.zeros_like(r))
    obj = torch.maximum(-A_tok * r, -A_tok * r.clamp(1 - lo, 1 + hi))
    obj = torch.where(A_tok < 0, torch.minimum(-A_tok * c, obj), obj)
    return k, obj


#: The keys verl's workers put in ``config.global_batch_info`` (``verl/workers/utils/losses.py``), which verl's
#: ``agg_loss`` takes as keyword arguments.
GLOBAL_BATCH_KEYS = ("dp_size", "batch_num_tokens", "global_batch_size", "loss_scale_factor")
#: The global count each of verl's modes reads (``token-sum`` reads none).
_MODE_COUNTS = {"token-mean": ("batch_num_tokens",), "seq-mean-token-mean": ("global_batch_size",),
                "seq-mean-token-sum": ("global_batch_size",),
                "seq-mean-token-sum-norm": ("global_batch_size", "loss_scale_factor")}


def global_batch_kwargs(global_batch_info, loss_agg_mode: str) -> tuple[int, dict]:
    """``(dp_size, counts)`` of verl's ``config.global_batch_info`` for ``loss_agg_mode``, as verl 0.9.1's ``agg_loss``
    reads them: ``counts`` are the keyword arguments of :func:`~asyncgrpo.estimators.aggregation.token_normaliser`
    that apply to the mode (``None`` = the local count), and the loss is multiplied by ``dp_size``.

    ``dp_size`` must be an integer ``≥ 1`` (``None`` or absent: 1); ``-1`` would flip the loss's sign, ``0`` zero it
    and ``2.7`` scale it by a non-integer, so each is a ``ValueError``. With ``dp_size > 1`` the mode's global count
    is required, as verl 0.9.1 raises (``"(global) batch_num_tokens is required when dp_size > 1"``). Unknown keys
    are refused (verl's ``agg_loss(**global_batch_info)`` would raise ``TypeError``)."""
    from asyncgrpo.validation import is_integral

    if global_batch_info is None:
        info: dict = {}
    elif isinstance(global_batch_info, Mapping) or hasattr(global_batch_info, "items"):
        info = dict(global_batch_info.items())
    else:
        raise ValueError(f"global_batch_info must be a mapping of {', '.join(GLOBAL_BATCH_KEYS)} or None, got "
                         f"{type(global_batch_info).__name__}")
    unknown = sorted(set(info) - set(GLOBAL_BATCH_KEYS))
    if unknown:
        raise ValueError(f"global_batch_info: unknown key(s) {', '.join(map(str, unknown))}; verl's agg_loss takes "
                         f"{', '.join(GLOBAL_BATCH_KEYS)}")
    dp = info.get("dp_size")
    if dp is None:
        dp = 1
    elif not is_integral(dp) or float(dp) < 1:
        raise ValueError(f"global_batch_info['dp_size'] must be an integer >= 1 (the data-parallel world size), got "
                         f"{dp!r}: the loss is multiplied by it")
    dp = int(dp)
    counts = {}
    for key in _MODE_COUNTS.get(loss_agg_mode, ()):
        val = info.get(key)
        if val is None:
            if dp > 1 and key != "loss_scale_factor":
                raise ValueError(f"global_batch_info['{key}'] is required when dp_size > 1 (loss_agg_mode="
                                 f"{loss_agg_mode!r}), as verl 0.9.1's agg_loss requires")
            continue
        counts[key] = val
    return dp, counts


def _check_finite_inputs(tensors, mask):
    """``ValueError`` naming the first non-finite entry on a real token (``policy_loss``'s rule, issue 56 item 7)."""
    from asyncgrpo.validation import check_finite_tensor

    for x, what in tensors:
        check_finite_tensor(x, mask if x.shape == mask.shape else None, what)


def verl_policy_loss(log_prob, old_log_prob, rollout_log_prob, advantages, response_mask,
                     rollout_correction: Mapping | str | RolloutCorrection | None = None, *,
                     loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
                     clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0,
                     global_batch_info: Mapping | None = None, return_metrics: bool = False):
    """Surrogate ``−Σ ν A sg(k) log π_θ`` whose gradient is verl's actor loss gradient under ``rollout_correction``.

    ``rollout_correction``: verl's option mapping (``{"rollout_is": "token", "rollout_is_threshold": 5.0, …}``;
    options left out take verl's shipped YAML defaults, ``rollout_is: null``), a preset name
    (``"decoupled_k3_rs_token_tis"``), an estimator name (``"verl_seq_rs"``) or a :class:`RolloutCorrection`;
    ``None`` is verl's shipped ``algorithm.rollout_correction`` YAML: no IS weight, no rejection. ``advantages``
    is ``[N]`` or ``[N, T]``. ``global_batch_info``: ``dp_size``, ``batch_num_tokens``, ``global_batch_size``,
    ``loss_scale_factor`` as verl 0.9.1's ``agg_loss`` reads them (:func:`global_batch_kwargs`). When rejection
    leaves no token, the loss is 0 (verl's ``token-mean`` is NaN there). A mask with no real token, or NaN/±inf on a
    real token of a log-prob or an advantage, is a ``ValueError``.

    ``return_metrics=True``: ``(loss, metrics)`` with verl's names: every ``rollout_corr/…`` statistic verl's
    correction step logs for this setting (:mod:`asyncgrpo.estimators.maps.verl_rollout_stats`), ``actor/pg_loss``
    (verl's objective value), ``actor/ppo_kl``, and in every PPO-clip setting ``actor/pg_clipfrac`` and
    ``actor/pg_clipfrac_lower`` (the dual clip's share).
    """
    import torch

    cfg = rollout_correction if isinstance(rollout_correction, RolloutCorrection) \
        else RolloutCorrection.from_config(rollout_correction)
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of verl's {', '.join(LOSS_AGG_MODES)}, got {loss_agg_mode!r}")
    lo, hi, c = _clip_ratios(clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c)
    dp, agg = global_batch_kwargs(global_batch_info, loss_agg_mode)
    for x, what in ((log_prob, "log_prob"), (old_log_prob, "old_log_prob"), (rollout_log_prob, "rollout_log_prob"),
                    (advantages, "advantages")):
        check_real_array(x, what)
    mask = check_mask(response_mask, name="response_mask").to(torch.bool)
    if not (log_prob.shape == old_log_prob.shape == rollout_log_prob.shape == mask.shape) or log_prob.ndim != 2:
        raise ValueError("log_prob, old_log_prob, rollout_log_prob and response_mask must share one shape [N, T]; got "
                         f"{[tuple(t.shape) for t in (log_prob, old_log_prob, rollout_log_prob, mask)]}")
    if not bool(mask.any()):
        raise ValueError("response_mask must contain at least one valid token (1): nothing to aggregate "
                         "(verl raises the same)")
    if not (advantages.ndim == 2 and advantages.shape == mask.shape) and tuple(advantages.shape) != mask.shape[:1]:
        raise ValueError(f"advantages must be [N] or [N, T] = {tuple(mask.shape)}, got {tuple(advantages.shape)}")
    used = [(log_prob, "log_prob"), (rollout_log_prob, "rollout_log_prob"), (advantages, "advantages")]
    _check_finite_inputs(used if cfg.bypass_mode else used + [(old_log_prob, "old_log_prob")], mask)
    dtype = torch.promote_types(log_prob.dtype, torch.float64)
    zero = torch.zeros((), dtype=dtype, device=log_prob.device)
    cur, roll = log_prob.detach().to(dtype), rollout_log_prob.detach().to(dtype)
    old = roll if cfg.bypass_mode else old_log_prob.detach().to(dtype)
    adv = advantages.detach().to(dtype)
    A_tok = adv if adv.ndim == 2 else adv[:, None].expand_as(cur)
    ell = torch.where(mask, (cur if cfg.bypass_mode else old) - roll, zero)
    w, m_is = cfg.weights(ell, mask)
    kept, m_rs = cfg.keep(ell, mask)
    ratio_log = torch.where(mask, cur - old, zero)
    reinforce = cfg.bypass_mode and cfg.loss_type == "reinforce"
    if reinforce:
        k = torch.ones_like(cur) if w is None else w
        obj = -A_tok * k * cur
    else:
        k, obj = ppo_coefficient(ratio_log, A_tok, lo, hi, c)
        if w is not None and not cfg.bypass_mode:  # bypass ppo_clip: the ratio π_θ/μ is the correction
            k, obj = k * w, obj * w
    m_off = offpolicy_stats(cur if cfg.bypass_mode else old, roll, mask) if return_metrics else {}
    metrics: dict[str, Any] = {f"rollout_corr/{n}": v for n, v in {**m_is, **m_rs, **m_off}.items()}
    if bool(kept.any()):
        nu = token_normaliser(loss_agg_mode, kept, **agg).to(dtype) * dp
        coef = torch.where(kept & (A_tok != 0) & (k != 0), nu * A_tok * k, zero)
        pg = float(torch.where(kept, nu * obj, zero).sum())
    else:
        coef, pg = torch.zeros_like(cur), 0.0
    loss = -torch.where(mask, coef.to(log_prob.dtype) * log_prob, torch.zeros_like(log_prob)).sum()
    if not return_metrics:
        return loss
    n_kept = kept.sum().clamp(min=1)
    # verl's REINFORCE logs the unclamped k1 of π_θ against μ; its PPO loss the clamped one
    x = ratio_log if reinforce else ratio_log.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    metrics.update({"actor/pg_loss": pg, "actor/ppo_kl": float(torch.where(kept, -x, zero).sum() / n_kept)})
    if not reinforce:
        r = x.exp()
        l1, l2 = -A_tok * r, -A_tok * r.clamp(1 - lo, 1 + hi)
        metrics["actor/pg_clipfrac"] = float((kept & (l2 > l1)).sum() / n_kept)
        # verl: max(l1, l2) > −A·c on A < 0 tokens (the dual clip binds)
        lower = kept & (A_tok < 0) & (torch.maximum(l1, l2) > -A_tok * c)
        metrics["actor/pg_clipfrac_lower"] = float(lower.sum() / n_kept)
    return loss, metrics


__all__ = ["verl_policy_loss", "ppo_coefficient", "RolloutCorrection", "global_batch_kwargs", "GLOBAL_BATCH_KEYS"]
