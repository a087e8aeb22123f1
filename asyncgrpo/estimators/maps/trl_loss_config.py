"""TRL's ``GRPOTrainer`` loss as a TRL user configures it (``GRPOConfig``, TRL 1.16.0): the options by TRL's names,
validated, and the gradient weight ``k`` and normaliser ``ν`` they give (PyTorch, float64 or wider).

The registry's ``trl_seq_mask``, ``sapo`` and ``luspo`` are TRL's losses at fixed settings (their Numba kernels compile
them in); :class:`TRLLoss` takes any:

========================================  =============================  ==========================================
``GRPOConfig`` option                     TRL default                    here
========================================  =============================  ==========================================
``loss_type``                             ``"dapo"``                     ``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``,
                                                                         ``luspo``, ``sapo``, ``vespo``, ``cispo``
                                                                         (``min(r, ε_high)``, stop-gradient)
``epsilon``, ``epsilon_high``             0.2, ``None`` (= ``epsilon``)  clip ``[1 − ε, 1 + ε_high]`` of the ratio
``delta``                                 ``None``                       two-sided clip (``min(r, δ)``)
``importance_sampling_level``             ``"token"``                    ``"sequence"``: ``s_i = exp(mean_t ℓ_{i,t})``
                                                                         (GSPO; luspo's paper setting)
``off_policy_mask_threshold``             ``None`` (off)                 OPSM: drop rows with ``A < 0`` and mean
                                                                         ``log μ − log π_θ > δ``
``sapo_temperature_pos``/``_neg``         1.0 / 1.05                     sapo's ``τ`` for ``A > 0`` / otherwise
``top_entropy_quantile``                  1.0 (all tokens)               keep tokens whose entropy ≥ the batch's
                                                                         ``1 − q`` quantile (float32, as TRL)
``vllm_importance_sampling_correction``   ``True`` (with ``use_vllm``)   multiply the loss by ``ρ̃ = π_old/μ``
                                                                         (vespo: inside ``φ``)
``vllm_importance_sampling_mode``         ``"sequence_mask"``            ``{token,sequence}_{truncate,mask}``:
                                                                         ``clamp(ρ)`` or ``ρ·1{min ≤ ρ ≤ max}``
``vllm_importance_sampling_clip_min``     ``None``                       ``min`` (``None``: no lower bound)
``vllm_importance_sampling_clip_max``     3.0                            ``max`` (TRL's deprecated
                                                                         ``vllm_importance_sampling_cap`` accepted)
``max_completion_length``                 512                            ``dr_grpo``'s ``L``
``vespo_k_pos``/``_lambda_pos``/          2, 3 / 3, 2                    VESPO's ``φ(w) = e^{λ + k log w − λw}``,
``vespo_k_neg``/``_lambda_neg``                                          ``w`` the row's clamped ratio (× ``ρ̃``)
========================================  =============================  ==========================================

In the one form ``ĝ = Σ ν A k ∇log π_θ``: ``k = k_loss·m_opsm·m_entropy·ρ̃`` with ``k_loss`` the clipped ratio
``r·1{unclipped}`` (token level) or ``s_i·1{unclipped}`` (sequence level: ``d s_i/d log π_{i,t} = s_i/T_i`` on every
token, which the ``grpo`` normaliser's ``1/T_i`` carries), or sapo's gate derivative ``4σ(x)(1−σ(x))·r``. ``ν``:
``grpo``/``sapo`` ``1/(T_i N)``, ``bnpo`` ``1/n_tok``, ``dr_grpo`` ``1/(N·L)``, ``dapo`` ``1/num_items_in_batch``,
``luspo`` ``1/N`` (the row's loss summed over its tokens), ``vespo`` as ``dapo`` with ``k = φ``, ``cispo`` as ``dapo``
with ``k = min(r, ε_high)`` (the cap itself, stop-gradient); all but ``dapo``, ``vespo`` and ``cispo`` then divided by
the accumulation steps, those three by ``num_items_in_batch·accum/steps_per_generation`` (TRL).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "sapo", "vespo", "cispo")
LEVELS = ("token", "sequence")
VLLM_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
#: ``loss_type`` → the aggregation mode of :mod:`asyncgrpo.estimators.aggregation` (``"theory"``: ``1/N``).
NORMALISER = {"grpo": "grpo", "sapo": "grpo", "bnpo": "bnpo", "dr_grpo": "dr_grpo", "dapo": "dapo", "luspo": "theory",
              "vespo": "dapo", "cispo": "dapo"}
#: The loss types whose normaliser is TRL's ``num_items_in_batch`` (rescaled to one accumulation window).
ITEM_NORMALISED = ("dapo", "vespo", "cispo")
#: ``log 1e-8``: VESPO's lower clamp of its log-weights (TRL's, matching the paper's code).
VESPO_LOG_MIN = math.log(1e-8)


def _num(v, name, lo=0.0, strict=True, hi=math.inf):
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) \
        and (v > lo if strict else v >= lo) and v < hi
    if not ok:
        rng = f"{'(' if strict else '['}{lo:g}, {hi:g})"
        raise ValueError(f"{name} must be a finite number in {rng}, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class TRLLoss:
    """TRL's loss options (names and defaults of ``GRPOConfig``), validated at construction."""

    loss_type: str = "dapo"
    epsilon: float = 0.2
    epsilon_high: float | None = None
    delta: float | None = None
    importance_sampling_level: str = "token"
    off_policy_mask_threshold: float | None = None
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    top_entropy_quantile: float = 1.0
    use_vllm: bool = False
    vllm_importance_sampling_correction: bool = True
    vllm_importance_sampling_mode: str = "sequence_mask"
    vllm_importance_sampling_clip_min: float | None = None
    vllm_importance_sampling_clip_max: float | None = 3.0
    max_completion_length: int = 512
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0

    def __post_init__(self):
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")
        if self.importance_sampling_level not in LEVELS:
            raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', got "
                             f"{self.importance_sampling_level!r}")
        _num(self.epsilon, "epsilon", hi=1.0)
        if self.epsilon_high is not None:
            _num(self.epsilon_high, "epsilon_high")
        if self.delta is not None:
            _num(self.delta, "delta")
        if self.off_policy_mask_threshold is not None:
            from asyncgrpo.estimators.maps.trl_opsm import check_threshold

            check_threshold(self.off_policy_mask_threshold)
        from asyncgrpo.estimators.maps.sapo import check_taus

        check_taus(self.sapo_temperature_pos, self.sapo_temperature_neg)
        q = self.top_entropy_quantile
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 <= q <= 1.0:
            raise ValueError(f"top_entropy_quantile must be a number in [0, 1], got {q!r}")
        for flag in ("use_vllm", "vllm_importance_sampling_correction"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.vllm_importance_sampling_mode not in VLLM_IS_MODES:
            raise ValueError(f"vllm_importance_sampling_mode must be one of {', '.join(VLLM_IS_MODES)}, got "
                             f"{self.vllm_importance_sampling_mode!r}")
        lo, hi = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if lo is not None:
            _num(lo, "vllm_importance_sampling_clip_min", strict=False)
        if hi is not None:
            _num(hi, "vllm_importance_sampling_clip_max")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"vllm_importance_sampling_clip_min ({lo}) must be <= vllm_importance_sampling_clip_max "
                             f"({hi})")
        if self.vllm_is_on and self.vllm_importance_sampling_mode.endswith("truncate") and lo is None and hi is None:
            raise ValueError("a truncate vllm_importance_sampling_mode needs vllm_importance_sampling_clip_min or "
                             "_clip_max (torch.clamp with neither)")
        for name in ("vespo_k_pos", "vespo_k_neg"):
            _num(getattr(self, name), name, lo=-math.inf)
        for name in ("vespo_lambda_pos", "vespo_lambda_neg"):
            _num(getattr(self, name), name, strict=False)
        mode = self.vllm_importance_sampling_mode
        if self.loss_type == "vespo" and self.vllm_is_on and not mode.startswith("token"):
            raise ValueError("loss_type='vespo' with the vLLM IS correction needs a token vllm_importance_sampling_mode "
                             f"(token_truncate or token_mask), as TRL requires; got {mode!r}")
        L = self.max_completion_length
        if isinstance(L, bool) or not isinstance(L, int) or L < 1:
            raise ValueError(f"max_completion_length must be an int >= 1, got {L!r}")

    @property
    def vllm_is_on(self) -> bool:
        """TRL applies its vLLM IS ratio only with ``use_vllm`` and ``vllm_importance_sampling_correction``."""
        return self.use_vllm and self.vllm_importance_sampling_correction

    @property
    def eps_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @classmethod
    def from_config(cls, config: Any = None, **overrides) -> "TRLLoss":
        """From a ``GRPOConfig`` (its attributes are read), a mapping of the same names, or ``None`` (TRL's
        defaults); ``overrides`` replace options (an unknown name is a ``ValueError``)."""
        names = tuple(f.name for f in fields(cls))
        if config is None:
            base: dict = {}
        elif isinstance(config, Mapping):
            base = dict(config)
        else:
            base = {n: getattr(config, n) for n in names if hasattr(config, n)}
        merged = {**base, **overrides}
        cap = merged.pop("vllm_importance_sampling_cap", None)
        if cap is not None and not hasattr(config, "vllm_importance_sampling_cap"):
            # TRL's deprecated name of the cap: GRPOConfig copies it into _clip_max itself (then read above)
            merged["vllm_importance_sampling_clip_max"] = cap
        unknown = sorted(set(merged) - set(names))
        if unknown:
            raise ValueError(f"unknown TRL loss option(s) {', '.join(unknown)}; known: {', '.join(names)}")
        return cls(**merged)

    # ------------------------------------------------------------------ the pieces of k
    def vllm_is_ratio(self, old_logp, sampling_logp, mask):
        """TRL's vLLM importance-sampling ratio ``ρ̃`` (``[N, T]`` or ``[N, 1]``) from ``π_old`` and the sampler ``μ``:
        ``exp`` of the masked log difference (NaN → 0: no correction) per token or summed per row, truncated to
        ``[min, max]`` or zeroed outside it."""
        import torch

        d = torch.nan_to_num(torch.where(mask, old_logp - sampling_logp, torch.zeros_like(old_logp)), nan=0.0)
        if self.vllm_importance_sampling_mode.startswith("sequence"):
            d = d.sum(dim=-1, keepdim=True)
        rho = torch.exp(d)
        lo, hi = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if self.vllm_importance_sampling_mode.endswith("truncate"):
            return torch.clamp(rho, min=lo, max=hi)
        bad = (rho < (-math.inf if lo is None else lo)) | (rho > (math.inf if hi is None else hi))
        return rho.masked_fill(bad, 0.0)

    def entropy_mask(self, entropies, mask):
        """TRL's ``get_high_entropy_mask`` at one process: tokens whose entropy is ≥ the ``1 − q`` quantile (float32,
        ``torch.quantile``) of the real tokens' entropies; all real tokens when ``q = 1``."""
        import torch

        if self.top_entropy_quantile >= 1.0:
            return mask
        vals = entropies[mask].float()
        if vals.numel() == 0:
            return torch.zeros_like(mask)
        thr = torch.quantile(vals, 1.0 - self.top_entropy_quantile)
        return (torch.where(mask, entropies, torch.zeros_like(entropies)) >= thr) & mask

    def vespo_weight(self, ell, adv, mask, rho=None):
        """VESPO's ``φ(w) = exp(λ + k log w − λ w)`` per row ``[N, 1]``: ``log w = clamp(Σ_t clamp(ℓ_{i,t}, ±20)
        [+ Σ_t clamp(log ρ̃_{i,t}, log 1e-8, 20)], log 1e-8, 20)`` (``ρ̃`` the token vLLM ratio, over every position as
        TRL), ``(k, λ)`` the ``_pos`` pair for ``A ≥ 0``, ``λ ≥ 1e-4``; NaN/inf → 0."""
        import torch

        seq = torch.where(mask, ell.clamp(-20.0, 20.0), torch.zeros_like(ell)).sum(dim=-1, keepdim=True)
        if rho is not None:
            seq = seq + torch.log(rho).clamp(VESPO_LOG_MIN, 20.0).sum(dim=-1, keepdim=True)
        log_w = seq.clamp(VESPO_LOG_MIN, 20.0)
        pos = (adv >= 0)[:, None]
        t = lambda v: torch.tensor(v, dtype=ell.dtype, device=ell.device)  # noqa: E731
        k = torch.where(pos, t(self.vespo_k_pos), t(self.vespo_k_neg))
        lam = torch.where(pos, t(self.vespo_lambda_pos), t(self.vespo_lambda_neg)).clamp(min=1e-4)
        return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)

    def coefficient(self, ell, adv, mask):
        """``k_loss`` ``[N, T]`` of ``ell = log π_θ − log π_old`` (0 off ``mask``) and ``adv`` ``[N]``."""
        import torch

        from asyncgrpo.estimators.maps.ppo_clip import grpo_k_torch
        from asyncgrpo.estimators.maps.sapo import gate_k_torch
        from asyncgrpo.estimators.registry import TokenParams

        x = ell
        if self.importance_sampling_level == "sequence":
            x = (ell.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)).expand_as(ell)
        if self.loss_type == "sapo":
            return gate_k_torch(x, adv, self.sapo_temperature_pos, self.sapo_temperature_neg)
        if self.loss_type == "cispo":  # TRL: −sg(min(r, ε_high))·A·log π, every token kept
            return torch.where(mask, torch.clamp(torch.exp(x), max=self.eps_high), torch.zeros_like(x))
        # TRL: −min(min(r, δ)·A, clip(r)·A). A < 0: the larger of min(r, δ) and clip(r) acts, so r carries the
        # gradient up to max(δ, 1 + ε_high) (a dual clip there); A ≥ 0: the smaller, so up to min(δ, 1 + ε_high)
        log_d = math.inf if self.delta is None else math.log(self.delta)
        log_c = max(log_d, math.log1p(self.eps_high))
        k = grpo_k_torch(x, mask, adv, None, TokenParams(self.epsilon, self.eps_high, 0.04, log_c, "upper", 0))
        return torch.where((adv >= 0)[:, None] & (x > log_d), torch.zeros_like(k), k)


def _check_trl_inputs(logp, old_logp, adv, mask, sampling_logp, entropies):
    """Shapes and finiteness of :func:`trl_policy_loss`'s inputs (issue 56 items 4 and 7): each error names the parameter
    and the shape it must have; nothing is broadcast. Returns ``(mask, N, T)``."""
    import torch

    from asyncgrpo.validation import check_finite_tensor, check_mask, check_real_array

    if not torch.is_tensor(logp):
        raise ValueError(f"logp must be a torch tensor [N, T] (the loss is differentiated through it), got "
                         f"{type(logp).__name__}")
    check_real_array(logp, "logp")
    if logp.ndim != 2 or 0 in logp.shape:
        raise ValueError(f"logp must have shape [N, T] with N, T >= 1, got {tuple(logp.shape)}")
    N, T = logp.shape
    mask = check_mask(mask, name="mask")
    if tuple(mask.shape) != (N, T):
        raise ValueError(f"mask must have logp's shape [N, T] = {(N, T)}, got {tuple(mask.shape)} (no broadcasting)")
    mask = torch.as_tensor(mask, device=logp.device).to(torch.bool)
    if not bool(mask.any()):
        raise ValueError("mask has no real token (every entry False): nothing to aggregate")
    for x, name in ((old_logp, "old_logp"), (sampling_logp, "sampling_logp"), (entropies, "entropies")):
        if x is None:
            continue
        check_real_array(x, name)
        if tuple(x.shape) != (N, T):
            raise ValueError(f"{name} must have logp's shape [N, T] = {(N, T)}, got {tuple(x.shape)} (no broadcasting)")
    check_real_array(adv, "adv")
    if tuple(adv.shape) != (N,):
        raise ValueError(f"adv must have shape [N] = ({N},), one advantage per row, got {tuple(adv.shape)} "
                         "(no broadcasting)")
    check_finite_tensor(logp, mask, "logp")
    if old_logp is not None:
        check_finite_tensor(torch.as_tensor(old_logp), mask, "old_logp")
    check_finite_tensor(torch.as_tensor(adv), None, "adv")
    if entropies is not None:
        # a NaN entropy fails every >= comparison: TRL's quantile mask would silently drop every token
        check_finite_tensor(torch.as_tensor(entropies), mask, "entropies")
    if sampling_logp is not None:  # NaN: a token the sampler could not score (TRL counts it as 0); ±inf is not that
        bad = mask & torch.isinf(torch.as_tensor(sampling_logp))
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(f"sampling_logp must not be ±inf on real tokens (mask True); found at {idx}")
    return mask, N, T


def _count(v, name):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return v


def trl_policy_loss(logp, old_logp, adv, mask, config: Any = None, *, sampling_logp=None, entropies=None,
                    num_items_in_batch=None, accumulation_steps: int = 1, steps_per_generation: int | None = None,
                    return_metrics: bool = False, **options):
    """Surrogate ``−Σ ν A sg(k) log π_θ`` whose gradient is TRL's ``GRPOTrainer._compute_loss`` gradient (one process).

    ``config``: a ``GRPOConfig``, a mapping of its option names or ``None`` (TRL's defaults); ``options`` override
    (``off_policy_mask_threshold=0.3``, ``sapo_temperature_neg=2.0``, …). ``logp`` (with grad), ``old_logp``
    (TRL's ``old_per_token_logps``; ``None``: ``π_old = π_θ``), ``sampling_logp`` (the sampler's ``μ``: feeds OPSM —
    ``old_logp`` when absent, as TRL — and the vLLM IS ratio, which needs it), ``entropies`` (``top_entropy_quantile
    < 1``) are ``[N, T]``; ``adv`` ``[N]``; ``mask`` ``[N, T]``: nothing is broadcast, a wrong shape is a
    ``ValueError`` naming the parameter. NaN/±inf in ``logp``/``old_logp``/``entropies`` on real tokens or in ``adv``
    is refused (NaN in ``sampling_logp`` is TRL's "not scored", counted as 0). ``num_items_in_batch``: the active
    tokens of the whole generation batch (``dapo``, ``cispo``, ``vespo``); TRL divides it by ``steps_per_generation``
    and multiplies it by ``accumulation_steps`` (``steps_per_generation=None``: ``accumulation_steps``, TRL's default);
    every other loss type is divided by ``accumulation_steps``. A row's sequence-level loss depends on all its
    tokens, so there ``k = mean_row(M)·k_loss`` with ``M`` the per-token multipliers.

    ``return_metrics``: ``(loss, metrics)`` with TRL's names for the loss type (one process): ``clip_ratio/low_mean``,
    ``high_mean``, ``region_mean``, ``low_min``, ``high_max`` (grpo, bnpo, dr_grpo, dapo, luspo), ``cispo_clip_ratio``,
    ``vespo/phi_seq_mean``, ``entropy`` (when ``entropies`` are given); and the toolkit's own diagnostics
    ``trl_loss/opsm_kept_row_frac`` (rows OPSM keeps), ``trl_loss/vllm_is_ratio_mean``.
    """
    import torch

    from asyncgrpo.estimators.aggregation import token_normaliser
    from asyncgrpo.estimators.maps.trl_opsm import keep_torch

    cfg = config if isinstance(config, TRLLoss) else TRLLoss.from_config(config, **options)
    if isinstance(config, TRLLoss) and options:
        cfg = TRLLoss.from_config({f.name: getattr(config, f.name) for f in fields(TRLLoss)}, **options)
    accumulation_steps = _count(accumulation_steps, "accumulation_steps")
    steps_per_generation = _count(steps_per_generation, "steps_per_generation") or accumulation_steps
    mask, N, T = _check_trl_inputs(logp, old_logp, adv, mask, sampling_logp, entropies)
    dtype = torch.promote_types(logp.dtype, torch.float64)
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    cur = logp.detach().to(dtype)
    old = cur if old_logp is None else torch.as_tensor(old_logp, device=logp.device).detach().to(dtype)
    adv = torch.as_tensor(adv, device=logp.device).detach().to(dtype)
    ell = torch.where(mask, cur - old, zero)
    k = None if cfg.loss_type == "vespo" else cfg.coefficient(ell, adv, mask)
    M = torch.where(mask, torch.ones_like(cur), zero)
    metrics: dict[str, float] = {}
    if cfg.off_policy_mask_threshold is not None:
        mu = old if sampling_logp is None else sampling_logp.detach().to(dtype)
        # TRL's KL is log μ − log π_θ per token, NaN (a token the sampler could not score) counted as 0
        ell_mu = torch.where(mask, -torch.nan_to_num(mu - cur, nan=0.0), zero)
        keep = keep_torch(ell_mu, mask, adv, cfg.off_policy_mask_threshold)
        M = M * keep
        metrics["trl_loss/opsm_kept_row_frac"] = float(keep.mean())
    if cfg.top_entropy_quantile < 1.0:
        if entropies is None:
            raise ValueError(f"top_entropy_quantile={cfg.top_entropy_quantile} needs entropies [N, T]")
        M = M * cfg.entropy_mask(entropies.detach(), mask).to(dtype)
    rho = None
    if cfg.vllm_is_on:
        if sampling_logp is None:
            raise ValueError("use_vllm with vllm_importance_sampling_correction needs sampling_logp (the sampler's "
                             "log-probs, TRL's sampling_per_token_logps)")
        rho = cfg.vllm_is_ratio(old, sampling_logp.detach().to(dtype), mask)
        metrics["trl_loss/vllm_is_ratio_mean"] = float(rho.mean())
    phi = None
    if cfg.loss_type == "vespo":
        # φ is detached and multiplies −A log π per token: k = φ·M, whatever importance_sampling_level; the vLLM
        # ratio enters φ, not the product (TRL)
        phi = cfg.vespo_weight(ell, adv, mask, rho)
        k = phi.expand_as(cur)
    elif rho is not None:
        M = M * rho
    # cispo's and vespo's per-token loss is −sg(c)·A·log π: the multiplier stays on its token
    if cfg.importance_sampling_level == "sequence" and cfg.loss_type not in ("vespo", "cispo"):
        M = (M.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)).expand_as(M)
    k = torch.where(mask, k * M, zero)
    mode = NORMALISER[cfg.loss_type]
    agg = {"dr_grpo": dict(loss_scale_factor=cfg.max_completion_length)}.get(cfg.loss_type, {})
    if cfg.loss_type in ITEM_NORMALISED:
        n_items = num_items_in_batch
        if n_items is None:
            raise ValueError(f"loss_type={cfg.loss_type!r} needs num_items_in_batch (TRL's active-token count)")
        if isinstance(n_items, bool) or not isinstance(n_items, (int, float)) or not math.isfinite(n_items):
            raise ValueError(f"num_items_in_batch must be a finite number, got {n_items!r}")
        # TRL: num_items_in_batch.clamp(min=1) spans the generation batch, rescaled to one accumulation window
        agg = dict(batch_num_tokens=max(float(n_items), 1.0) * accumulation_steps / steps_per_generation)
    nu = token_normaliser(mode, mask, **agg).to(dtype)
    if cfg.loss_type not in ITEM_NORMALISED:
        nu = nu / accumulation_steps  # TRL divides all but dapo/cispo/vespo by the accumulation steps
    A = adv[:, None].expand_as(cur)
    coef = torch.where(mask & (A != 0) & (k != 0), nu * A * k, zero)
    loss = -torch.where(mask, coef.to(logp.dtype) * logp, torch.zeros_like(logp)).sum()
    if not return_metrics:
        return loss
    metrics.update(trl_metrics(cfg, ell, adv, mask, phi, entropies))
    return loss, metrics


def trl_metrics(cfg: TRLLoss, ell, adv, mask, phi=None, entropies=None) -> dict[str, float]:
    """The metrics TRL 1.16.0's ``_compute_loss`` logs for ``cfg.loss_type`` on one process, by TRL's names, from
    ``ell = log π_θ − log π_old`` (0 off ``mask``): token level, means over real tokens; sequence level, over all
    ``N`` rows (TRL's ``global_masked_mean``); ``low_min``/``high_max`` over rows with a real token (NaN-skipping)."""
    import torch

    A = adv[:, None]
    m = mask.to(ell.dtype)
    seq = cfg.importance_sampling_level == "sequence"
    x = (ell.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)) if seq else ell

    def gmean(v):
        v = v.to(ell.dtype)
        return float(v.sum() / v.shape[0]) if v.shape[1] == 1 else float((v * m).sum() / m.sum().clamp(min=1.0))

    def row_means(v):
        v = v.to(ell.dtype)
        return v[:, 0] if v.shape[1] == 1 else (v * m).sum(-1) / m.sum(-1)

    out: dict[str, float] = {}
    coef_1 = torch.exp(x)
    if cfg.loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        if cfg.delta is not None:  # TRL clamps coef_1 at δ before counting
            coef_1 = torch.clamp(coef_1, max=cfg.delta)
        low = (coef_1 < 1 - cfg.epsilon) & (A < 0)
        high = (coef_1 > 1 + cfg.eps_high) & (A > 0)
        out["clip_ratio/low_mean"] = gmean(low)
        out["clip_ratio/high_mean"] = gmean(high)
        out["clip_ratio/region_mean"] = gmean(low | high)
        out["clip_ratio/low_min"] = float(torch.nan_to_num(row_means(low), nan=math.inf).min())
        out["clip_ratio/high_max"] = float(torch.nan_to_num(row_means(high), nan=-math.inf).max())
    elif cfg.loss_type == "cispo":
        out["cispo_clip_ratio"] = gmean((coef_1 > cfg.eps_high) & (A > 0))
    elif cfg.loss_type == "vespo":
        out["vespo/phi_seq_mean"] = gmean(phi)
    if entropies is not None:
        out["entropy"] = gmean(torch.where(mask, entropies.detach().to(ell.dtype), torch.zeros_like(ell)))
    return out


__all__ = ["TRLLoss", "trl_policy_loss", "trl_metrics", "ITEM_NORMALISED", "LOSS_TYPES", "LEVELS", "VLLM_IS_MODES", "NORMALISER"]
