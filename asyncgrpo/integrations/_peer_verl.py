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


def verl_policy_loss(log_prob, old_log_prob, rollout_log_prob, advantages, response_mask,
                     rollout_correction: Mapping | str | RolloutCorrection | None = None, *,
                     loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2, clip_ratio_low: float | None = None,
                     clip_ratio_high: float | None = None, clip_ratio_c: float = 3.0,
                     global_batch_info: Mapping | None = None, return_metrics: bool = False):
    """Surrogate ``−Σ ν A sg(k) log π_θ`` whose gradient is verl's actor loss gradient under ``rollout_correction``.

    ``rollout_correction``: verl's option mapping (``{"rollout_is": "token", "rollout_is_threshold": 5.0, …}``),
    a preset name (``"decoupled_k3_rs_token_tis"``), an estimator name (``"verl_seq_rs"``) or a
    :class:`RolloutCorrection`; ``None`` is verl's ``RolloutCorrectionConfig()`` (sequence TIS, C = 2). ``advantages``
    is ``[N]`` or ``[N, T]``. ``global_batch_info``: ``dp_size``, ``batch_num_tokens``, ``global_batch_size`` as
    verl's ``agg_loss`` reads them. When rejection leaves no token, the loss is 0 (verl's ``token-mean`` is NaN there).

    ``return_metrics=True``: ``(loss, metrics)`` with verl's names: every ``rollout_corr/…`` statistic verl's
    correction step logs for this setting (:mod:`asyncgrpo.estimators.maps.verl_rollout_stats`), ``actor/pg_loss``
    (verl's objective value), ``actor/ppo_kl``, ``actor/pg_clipfrac``.
    """
    import torch

    cfg = rollout_correction if isinstance(rollout_correction, RolloutCorrection) \
        else RolloutCorrection.from_config(rollout_correction)
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of verl's {', '.join(LOSS_AGG_MODES)}, got {loss_agg_mode!r}")
    lo, hi, c = _clip_ratios(clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c)
    for x, what in ((log_prob, "log_prob"), (old_log_prob, "old_log_prob"), (rollout_log_prob, "rollout_log_prob"),
                    (advantages, "advantages")):
        check_real_array(x, what)
    mask = check_mask(response_mask, name="response_mask").to(torch.bool)
    if not (log_prob.shape == old_log_prob.shape == rollout_log_prob.shape == mask.shape) or log_prob.ndim != 2:
        raise ValueError("log_prob, old_log_prob, rollout_log_prob and response_mask must share one shape [N, T]; got "
                         f"{[tuple(t.shape) for t in (log_prob, old_log_prob, rollout_log_prob, mask)]}")
    dtype = torch.promote_types(log_prob.dtype, torch.float64)
    zero = torch.zeros((), dtype=dtype, device=log_prob.device)
    cur, roll = log_prob.detach().to(dtype), rollout_log_prob.detach().to(dtype)
    old = roll if cfg.bypass_mode else old_log_prob.detach().to(dtype)
    adv = advantages.detach().to(dtype)
    if adv.ndim == 2:
        if adv.shape != mask.shape:
            raise ValueError(f"advantages must be [N] or [N, T] = {tuple(mask.shape)}, got {tuple(adv.shape)}")
        A_tok = adv
    elif adv.shape == mask.shape[:1]:
        A_tok = adv[:, None].expand_as(cur)
    else:
        raise ValueError(f"advantages must be [N] or [N, T] = {tuple(mask.shape)}, got {tuple(adv.shape)}")
    ell = torch.where(mask, (cur if cfg.bypass_mode else old) - roll, zero)
    w, m_is = cfg.weights(ell, mask)
    kept, m_rs = cfg.keep(ell, mask)
    ratio_log = torch.where(mask, cur - old, zero)
    if cfg.bypass_mode and cfg.loss_type == "reinforce":
        k = torch.ones_like(cur) if w is None else w
        obj = -A_tok * k * cur
    else:
        k, obj = ppo_coefficient(ratio_log, A_tok, lo, hi, c)
        if w is not None and not cfg.bypass_mode:  # bypass ppo_clip: the ratio π_θ/μ is the correction
            k, obj = k * w, obj * w
    info = dict(global_batch_info or {})
    dp = int(info.get("dp_size") or 1)
    key = "batch_num_tokens" if loss_agg_mode == "token-mean" else "global_batch_size"
    agg = {key: info[key]} if info.get(key) is not None and loss_agg_mode != "seq-mean-token-sum-norm" else {}
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
    metrics.update({"actor/pg_loss": pg,
                    "actor/ppo_kl": float(torch.where(kept, -ratio_log.clamp(-SAFETY_BOUND, SAFETY_BOUND), zero).sum()
                                          / n_kept)})
    if not (cfg.bypass_mode and cfg.loss_type == "reinforce"):
        r = ratio_log.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
        clipped = kept & (-A_tok * r.clamp(1 - lo, 1 + hi) > -A_tok * r)
        metrics["actor/pg_clipfrac"] = float(clipped.sum() / n_kept)
    return loss, metrics


__all__ = ["verl_policy_loss", "ppo_coefficient", "RolloutCorrection"]
