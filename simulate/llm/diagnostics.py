"""Log-ratio diagnostics of one learner batch (a metrics row's ``ell_*``, ``chi2``, ESS and clip columns),
shared by the one-run-at-a-time loop (:mod:`simulate.llm.train`) and the batched forest
(:mod:`simulate.llm.batched`)."""
from __future__ import annotations

import math

import torch

from asyncgrpo import estimators as est
from asyncgrpo.estimators.token_level import token_coefficients_torch
from simulate.llm.config import TrainConfig


@torch.no_grad()
def ratio_stats(cfg: TrainConfig, tok_ell: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor) -> dict:
    """Log-ratio diagnostics of one batch (float64).

    ``ℓ_i`` mean/max/min; ``χ̂² = mean_i (ρ_i − 1)²`` (estimates ``χ²(π_θ‖μ) = Var_μ ρ``); ``ESS/G`` of
    ``ρ`` per group and, for trajectory-level maps, of ``w``; ``clip_frac``: share of trajectories with
    ``w_i < ρ_i`` (trajectory-level) or of real tokens whose coefficient is below the uncapped one
    (token-level: ``r_{i,t}/T_i``, or ``exp(ℓ_i/T_i)/T_i`` for gspo), with a relative tolerance 1e-4 so
    that sampler-vs-learner round-off (``|ℓ| ~ 1e-6`` at ``d = 0``) does not count as clipping.
    """
    tok_ell, adv = tok_ell.double(), adv.double()
    G = cfg.G
    ell = tok_ell.sum(1)
    rho = torch.exp(ell)

    def ess_over_g(w: torch.Tensor) -> float:
        w = w.reshape(-1, G)
        s, s2 = w.sum(1), (w * w).sum(1)
        ok = s2 > 0
        return float(((s[ok] ** 2 / s2[ok]) / G).mean()) if bool(ok.any()) else 0.0

    out = {
        "ell_mean": float(ell.mean()),
        "ell_max": float(ell.max()),
        "ell_min": float(ell.min()),
        "tok_ell_absmax": float(tok_ell.abs().max()),
        "chi2": float(torch.expm1(ell).pow(2).mean()),
        "ess_rho": ess_over_g(torch.exp(ell - ell.max())),  # ESS is scale-free: shift avoids overflow
    }
    if cfg.token_level:
        clip = {k: v for k, v in (("clip_ratio_c", cfg.clip_ratio_c), ("cispo_clamp", cfg.cispo_clamp)) if v is not None}
        c = token_coefficients_torch(cfg.estimator, tok_ell, mask, adv, eps_low=cfg.eps_low,
                                     eps_high=cfg.eps_high, tau_m2=cfg.tau_m2, **clip)
        T_i = mask.sum(1, keepdim=True).double()
        ref = torch.exp(ell[:, None] / T_i).expand_as(c) if cfg.estimator == "gspo" else torch.exp(tok_ell)
        below = (c * T_i < ref * (1 - 1e-4)) & mask
        out["clip_frac"] = float(below.sum() / mask.sum())
        out["ess_w"] = math.nan
    else:
        w = est.get(cfg.estimator, cfg.eps).torch(ell.reshape(-1, G)).reshape(-1)
        out["clip_frac"] = float((w < rho * (1 - 1e-4)).double().mean())
        out["ess_w"] = ess_over_g(w)
    return out
