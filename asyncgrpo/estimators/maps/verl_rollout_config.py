"""verl's rollout correction as a verl user configures it (``algorithm.rollout_correction``, verl 0.9.1): every option
by verl's name, validated, and the IS weights and rejection mask it gives (PyTorch, float64 or wider).

The four registry estimators of :mod:`asyncgrpo.estimators.maps.verl_rollout_corr` are verl's presets at their
default thresholds (their Numba kernels compile those in); this module takes any setting:

============================== ========================================= =================================
verl option                    values (verl's defaults)                  what it does here
============================== ========================================= =================================
``rollout_is``                 ``None``, ``"token"``, ``"sequence"``     IS weight ``exp(clamp(ℓ, ±20))`` per
                               (``"sequence"``)                          token, or of ``ℓ_i = Σ_t ℓ_{i,t}``
``rollout_is_threshold``       ``C > 0`` (2.0), or ``"a_C"``             TIS ``min(ρ, C)``; ``"a_C"`` (IcePop):
                                                                         ``ρ·1{a ≤ ρ ≤ C}``
``rollout_is_batch_normalize`` bool (False)                              weights divided by their batch mean
                                                                         (tokens, or rows at sequence level)
``rollout_rs``                 ``None`` or a comma list of               a row/token is kept iff every listed
                               :data:`RS_OPTIONS`                        criterion passes (the rejected leave
                                                                         the loss's mask)
``rollout_rs_threshold``       one spec shared by all options, or one    ``k1``: ``"a_b"`` ratio bounds
                               per option (comma list)                   (``"b"`` alone: ``a = 1/b``), kept iff
                                                                         ``log a ≤ stat ≤ log b``; ``k2``/``k3``:
                                                                         an upper bound ``b``, kept iff
                                                                         ``stat ≤ b``
``bypass_mode``                bool (False)                              ``π_old := μ``: the weights use the
                                                                         current policy (``loss_type``)
``loss_type``                  ``"ppo_clip"`` or ``"reinforce"``         bypass mode's loss: PPO clip on
                               (``"ppo_clip"``)                          ``π_θ/μ`` without IS weights, or
                                                                         ``−A·w·log π``
============================== ========================================= =================================

The rejection statistics use ``c = clamp(ℓ_{i,t}, ±20)`` per token: ``k1 = −c``, ``k2 = c²/2``, ``k3 = e^c − 1 − c``,
taken per token (``token_*``), summed (``seq_sum_*``), averaged over the row's ``T_i`` tokens (``seq_mean_*``) or
maximised (``seq_max_*``; 0 for an empty row). verl's sequence IS weight clamps the *sum* ``ℓ_i``, its
``seq_sum_k1`` statistic the *tokens* before summing (``ℓ = [25, −20]``: weight ``min(e^5, C)``, statistic 0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from asyncgrpo.estimators.maps.verl_rollout_corr import SAFETY_BOUND
from asyncgrpo.estimators.maps.verl_rollout_stats import is_stats, rs_stats

IS_LEVELS = ("token", "sequence")
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
LOSS_TYPES = ("ppo_clip", "reinforce")
#: verl's ``RolloutCorrectionConfig`` classmethods at their default arguments (verl/trainer/config/algorithm.py);
#: options not named take the dataclass defaults (``RolloutCorrection``'s).
PRESETS: dict[str, dict[str, Any]] = {
    "decoupled_token_is": dict(rollout_is="token", rollout_is_threshold=2.0),
    "decoupled_seq_is": dict(rollout_is="sequence", rollout_is_threshold=2.0),
    "decoupled_token_icepop": dict(rollout_is="token", rollout_is_threshold="0.5_5.0"),
    "decoupled_seq_is_rs": dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_sum_k1",
                                rollout_rs_threshold="0.5_2.0"),
    "decoupled_geo_rs": dict(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001"),
    "decoupled_geo_rs_seq_tis": dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_mean_k1",
                                     rollout_rs_threshold="0.999_1.001"),
    "decoupled_geo_rs_token_tis": dict(rollout_is="token", rollout_is_threshold=2.0, rollout_rs="seq_mean_k1",
                                       rollout_rs_threshold="0.999_1.001"),
    "decoupled_k3_rs": dict(rollout_is=None, rollout_rs="seq_mean_k3", rollout_rs_threshold=0.01),
    "decoupled_k3_rs_seq_tis": dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_mean_k3",
                                    rollout_rs_threshold=0.01),
    "decoupled_k3_rs_token_tis": dict(rollout_is="token", rollout_is_threshold=2.0, rollout_rs="seq_mean_k3",
                                      rollout_rs_threshold=0.01),
    "bypass_ppo_clip": dict(rollout_is=None, bypass_mode=True, loss_type="ppo_clip"),
    "bypass_ppo_clip_geo_rs": dict(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001",
                                   bypass_mode=True, loss_type="ppo_clip"),
    "bypass_ppo_clip_k3_rs": dict(rollout_is=None, rollout_rs="seq_mean_k3", rollout_rs_threshold=0.01,
                                  bypass_mode=True, loss_type="ppo_clip"),
    "bypass_pg_is": dict(rollout_is="sequence", rollout_is_threshold=2.0, bypass_mode=True, loss_type="reinforce"),
    "bypass_pg_token_icepop": dict(rollout_is="token", rollout_is_threshold="0.5_5.0", bypass_mode=True,
                                   loss_type="reinforce"),
    "bypass_pg_geo_rs": dict(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001",
                             bypass_mode=True, loss_type="reinforce"),
    "bypass_pg_geo_rs_seq_tis": dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_mean_k1",
                                     rollout_rs_threshold="0.999_1.001", bypass_mode=True, loss_type="reinforce"),
    "bypass_pg_geo_rs_token_tis": dict(rollout_is="token", rollout_is_threshold=2.0, rollout_rs="seq_mean_k1",
                                       rollout_rs_threshold="0.999_1.001", bypass_mode=True, loss_type="reinforce"),
    "disabled": dict(rollout_is=None, rollout_rs=None),
}
#: verl 0.9.1's shipped ``algorithm.rollout_correction`` YAML (``verl/trainer/config/algorithm/rollout_correction.yaml``):
#: what a verl user gets for every option not written, and what ``None`` means here. Note ``rollout_is: null`` (no
#: IS weight), where the ``RolloutCorrectionConfig`` dataclass default is ``"sequence"``; verl's trainer reads the
#: mapping with ``.get(option, None)``, so an option left out of a partial mapping is off, never sequence TIS.
YAML_DEFAULTS: dict[str, Any] = dict(rollout_is=None, rollout_is_threshold=2.0, rollout_rs=None,
                                     rollout_rs_threshold=None, bypass_mode=False, loss_type="ppo_clip",
                                     rollout_is_batch_normalize=False)
#: The registry estimators as the preset each reproduces at verl's defaults.
ESTIMATOR_PRESETS = {"verl_tok_tis": "decoupled_token_is", "verl_seq_tis": "decoupled_seq_is",
                     "verl_seq_rs": "decoupled_seq_is_rs", "verl_geo_rs": "decoupled_geo_rs"}


def _positive(x, name: str, what: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {what} must be a number > 0, got {x!r}") from None
    if isinstance(x, bool) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: {what} must be a finite number > 0, got {x!r}")
    return v


def parse_is_threshold(spec) -> tuple[float, float | None]:
    """``(upper, lower)`` of ``rollout_is_threshold``: ``C`` (TIS, ``lower`` None) or ``"a_C"`` (IcePop)."""
    name = "rollout_is_threshold"
    if isinstance(spec, str) and "_" in spec:
        lo, hi = spec.strip().split("_", 1)
        lower, upper = _positive(lo, name, "the lower bound a of 'a_C'"), _positive(hi, name, "the upper bound C")
        if lower > upper:
            raise ValueError(f"{name}: the lower bound must be <= the upper bound, got {spec!r}")
        return upper, lower
    return _positive(spec.strip() if isinstance(spec, str) else spec, name, "C (or 'a_C')"), None


def parse_rs(rollout_rs, threshold) -> tuple[tuple[str, float | None, float], ...]:
    """``((option, lower, upper), …)`` of ``rollout_rs`` and ``rollout_rs_threshold`` (ratio bounds for ``k1``,
    ``lower`` None otherwise); options deduplicated in order, as verl."""
    if not isinstance(rollout_rs, str) or not [o for o in rollout_rs.split(",") if o.strip()]:
        raise ValueError(f"rollout_rs must be None or a comma list of {', '.join(RS_OPTIONS)}, got {rollout_rs!r}")
    opts: list[str] = []
    for o in (o.strip() for o in rollout_rs.split(",") if o.strip()):
        if o not in RS_OPTIONS:
            raise ValueError(f"rollout_rs: unknown option {o!r}; valid: {', '.join(RS_OPTIONS)}")
        if o not in opts:
            opts.append(o)
    if threshold is None or isinstance(threshold, bool):
        raise ValueError(f"rollout_rs_threshold must be given with rollout_rs={rollout_rs!r} (a number > 0, 'a_b' "
                         f"for k1 options, or one per option, comma separated), got {threshold!r}")
    specs = [threshold] if not isinstance(threshold, str) else [s.strip() for s in threshold.split(",") if s.strip()]
    if len(specs) not in (1, len(opts)):
        raise ValueError(f"rollout_rs_threshold must hold one spec shared by all options or {len(opts)} (one per "
                         f"option of {rollout_rs!r}), got {threshold!r}")
    specs = specs * len(opts) if len(specs) == 1 else specs
    out = []
    for o, s in zip(opts, specs):
        name = f"rollout_rs_threshold (option {o})"
        s_txt = str(s)
        if o.endswith("k1"):
            if "_" in s_txt:
                lo, hi = s_txt.split("_", 1)
                lower, upper = _positive(lo, name, "the lower ratio bound a"), _positive(hi, name, "the upper bound b")
            else:
                upper = _positive(s, name, "the upper ratio bound b")
                lower = 1.0 / upper
            if lower > upper:
                raise ValueError(f"{name}: the lower bound must be <= the upper bound, got {s!r}")
            out.append((o, lower, upper))
        else:
            if "_" in s_txt:
                raise ValueError(f"{name}: a k2/k3 option takes one upper bound (no '_'), got {s!r}")
            out.append((o, None, _positive(s, name, "the upper bound")))
    return tuple(out)


@dataclass(frozen=True)
class RolloutCorrection:
    """verl's ``algorithm.rollout_correction`` (field names, defaults and validation as verl 0.9.1's
    ``RolloutCorrectionConfig`` dataclass; :meth:`from_config` starts from verl's YAML, :data:`YAML_DEFAULTS`), parsed
    once: ``is_upper``/``is_lower`` and ``rs`` (:func:`parse_rs`). ``rollout_is_threshold=None`` turns IS off, as verl's
    ``compute_rollout_correction_and_rejection_mask`` (``rollout_is is not None and rollout_is_threshold is not None``)."""

    rollout_is: str | None = "sequence"
    rollout_is_threshold: float | str = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: float | str | None = None
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"
    is_upper: float = field(init=False, repr=False, default=2.0)
    is_lower: float | None = field(init=False, repr=False, default=None)
    rs: tuple = field(init=False, repr=False, default=())

    def __post_init__(self):
        if self.rollout_is is not None and self.rollout_is not in IS_LEVELS:
            raise ValueError(f"rollout_is must be None, 'token' or 'sequence', got {self.rollout_is!r}")
        for flag in ("rollout_is_batch_normalize", "bypass_mode"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")
        upper, lower = (None, None) if self.rollout_is_threshold is None else \
            parse_is_threshold(self.rollout_is_threshold)
        object.__setattr__(self, "is_upper", upper)
        object.__setattr__(self, "is_lower", lower)
        rs = () if self.rollout_rs is None else parse_rs(self.rollout_rs, self.rollout_rs_threshold)
        object.__setattr__(self, "rs", rs)

    @classmethod
    def from_config(cls, config: Mapping | str | None = None, **overrides) -> "RolloutCorrection":
        """From a verl config mapping (``algorithm.rollout_correction``, a dict or an OmegaConf node), a preset name
        of :data:`PRESETS`, or an estimator name of :data:`ESTIMATOR_PRESETS`; ``overrides`` replace options. Options a
        mapping (or ``None``) leaves out take verl's shipped YAML defaults (:data:`YAML_DEFAULTS`: no IS, no rejection),
        as verl's trainer reads them; a preset's take the dataclass defaults, as verl's preset classmethods."""
        if isinstance(config, str):
            preset = ESTIMATOR_PRESETS.get(config, config)
            if preset not in PRESETS:
                raise ValueError(f"unknown rollout-correction preset {config!r}; known: "
                                 f"{', '.join(PRESETS)} (or {', '.join(ESTIMATOR_PRESETS)})")
            config = PRESETS[preset]
        elif config is None or isinstance(config, Mapping) or hasattr(config, "items"):
            config = {**YAML_DEFAULTS, **dict(config.items() if config is not None else ())}
        else:
            raise ValueError(f"rollout_correction must be a mapping of verl's options, a preset name or None, got "
                             f"{type(config).__name__}")
        known = tuple(f.name for f in fields(cls) if f.init)
        merged = {**dict(config or {}), **overrides}
        unknown = sorted(set(merged) - set(known))
        if unknown:
            raise ValueError(f"unknown rollout_correction option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return cls(**merged)

    # ------------------------------------------------------------------ the weights and the mask
    def weights(self, log_ratio, mask):
        """``(w [N, T] or None, metrics)``: verl's IS weights of ``log_ratio`` (0 off ``mask``), truncated (TIS) or
        zeroed outside ``[a, C]`` (IcePop), then divided by their batch mean if ``rollout_is_batch_normalize``."""
        import torch

        if self.rollout_is is None or self.is_upper is None:
            return None, {}
        m = mask.to(torch.bool)
        lr = torch.where(m, log_ratio, torch.zeros_like(log_ratio))
        stat = lr if self.rollout_is == "token" else lr.sum(dim=1, keepdim=True)
        raw = torch.where(m, torch.exp(stat.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(lr), torch.zeros_like(lr))
        if self.is_lower is None:
            w = raw.clamp(max=self.is_upper)
        else:
            w = torch.where((raw >= self.is_lower) & (raw <= self.is_upper), raw, torch.zeros_like(raw))
        # verl compares log ρ with a float32 log C (torch.log(torch.tensor(C))): the same bounds here
        lo_c = self.is_lower if self.is_lower is not None else 1.0 / self.is_upper
        hi, lo = (float(torch.log(torch.tensor(c, dtype=torch.float32))) for c in (self.is_upper, lo_c))
        if self.rollout_is == "sequence":
            s = stat[:, 0]
            metrics = {"rollout_is_ratio_fraction_high": float((s > hi).double().mean()),
                       "rollout_is_ratio_fraction_low": float((s < lo).double().mean())}
        else:
            n = float(m.sum())
            metrics = {"rollout_is_ratio_fraction_high": float(((raw > self.is_upper) & m).sum()) / n,
                       "rollout_is_ratio_fraction_low": float(((raw < lo_c) & m).sum()) / n}
        metrics.update(is_stats(w, raw, stat, m, self.rollout_is, self.is_upper, self.is_lower))
        if self.rollout_is_batch_normalize:
            if self.rollout_is == "token":
                mean = w.sum() / m.sum()
            else:
                rows = m.any(dim=1)
                seq = w.sum(dim=1) / m.sum(dim=1).clamp(min=1)
                mean = seq[rows].sum() / rows.sum().clamp(min=1)
            # verl leaves the weights as they are when their mean is ≤ 1e-8 (and logs factor 1)
            if float(mean) > 1e-8:
                w = w / mean
                metrics["rollout_is_batch_norm_factor"] = float(mean)
            else:
                metrics["rollout_is_batch_norm_factor"] = 1.0
        return w, metrics

    def keep(self, log_ratio, mask):
        """``(kept [N, T] bool, metrics)``: ``mask`` with the tokens/rows every ``rollout_rs`` criterion rejects
        removed, and verl's ``rollout_rs_*masked_fraction`` metrics (overall and per option)."""
        import torch

        m = mask.to(torch.bool)
        if not self.rs:
            return m, {}
        c = torch.where(m, log_ratio, torch.zeros_like(log_ratio)).clamp(-SAFETY_BOUND, SAFETY_BOUND)
        per_token = {"k1": -c, "k2": 0.5 * c * c, "k3": torch.exp(c) - 1.0 - c}
        T_i = m.sum(dim=1, keepdim=True)
        kept = m.clone()
        metrics: dict[str, float] = {}
        n_tok, rows = float(m.sum()), m.any(dim=1)
        for opt, lower, upper in self.rs:
            level, k = opt.rsplit("_", 1)
            x = torch.where(m, per_token[k], torch.zeros_like(c))
            if level == "seq_sum":
                x = x.sum(dim=1, keepdim=True)
            elif level == "seq_mean":
                x = x.sum(dim=1, keepdim=True) / T_i.clamp(min=1)  # verl: T_i + 1e-8 in float32, i.e. T_i
            elif level == "seq_max":
                x = torch.where(m, x, torch.full_like(x, -math.inf)).amax(dim=1, keepdim=True)
                x = torch.where(rows[:, None], x, torch.zeros_like(x))
            ok = (x <= math.log(upper)) & (x >= math.log(lower)) if k == "k1" else x <= upper
            bounds = (math.log(upper), math.log(lower)) if k == "k1" else (upper, None)
            metrics.update(rs_stats(opt, x, m, *bounds))
            ok = ok.expand_as(m) & m
            kept &= ok
            rej = m & ~ok
            metrics[f"rollout_rs_{opt}_masked_fraction"] = float(rej.sum()) / n_tok
            metrics[f"rollout_rs_{opt}_seq_masked_fraction"] = float(rej.any(dim=1).sum()) / max(float(rows.sum()), 1.0)
        rej = m & ~kept
        metrics["rollout_rs_masked_fraction"] = float(rej.sum()) / n_tok
        metrics["rollout_rs_seq_masked_fraction"] = float(rej.any(dim=1).double().mean())
        return kept, metrics


__all__ = ["YAML_DEFAULTS", "IS_LEVELS", "RS_OPTIONS", "LOSS_TYPES", "PRESETS", "ESTIMATOR_PRESETS",
           "RolloutCorrection", "parse_is_threshold", "parse_rs"]
