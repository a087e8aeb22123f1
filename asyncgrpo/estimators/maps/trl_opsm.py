"""``trl_seq_mask``: TRL's off-policy sequence mask (``GRPOTrainer.get_off_policy_mask``, DeepSeek-V3.2 eq. 9).

A row is dropped when its advantage is negative and its mean token KL estimate
``(1/T_i) Σ_t (log μ − log π_θ) = −ℓ_i/T_i`` exceeds ``δ`` (``off_policy_mask_threshold``):
``k_{i,t} = 1{A_i ≥ 0 or −ℓ_i/T_i ≤ δ}``. TRL has no default (``None`` = off); δ = 0.5 here, the value
TRL's documentation gives as an example. In the learner's terms (one update per batch, ``π_old = π_θ``,
PPO ratio 1) the mask multiplies the GRPO token loss; TRL's normaliser is unchanged by the mask. Ignores ε.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.registry import Estimator

#: ``off_policy_mask_threshold`` δ (TRL: no default; its docs' example value).
THRESHOLD = 0.5


def k_numpy(ell, mask, adv, T_i, p):
    # TRL: kl = Σ_t (log μ − log π)·mask / clamp(T_i, min=1)
    kl = -np.where(mask, ell, 0.0).sum(axis=1, keepdims=True) / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
    keep = (adv >= 0)[:, None] | (kl <= THRESHOLD)
    return np.broadcast_to(np.where(keep, 1.0, 0.0), ell.shape)


@njit(cache=True)
def coef_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    for i in range(N):
        Ti = 0
        s = 0.0
        for t in range(T):
            if mask[i, t]:
                Ti += 1
                s += tok_ell[i, t]
        kl = -s / max(Ti, 1.0)
        c = 1.0 if (adv[i] >= 0.0 or kl <= THRESHOLD) else 0.0
        for t in range(T):
            out[i, t] = c / Ti if mask[i, t] else 0.0


def check_threshold(threshold) -> float:
    """δ as a float; ``ValueError`` naming ``off_policy_mask_threshold`` unless it is a finite number ≥ 0 (a mean KL
    estimate below 0 would drop every negative-advantage row whose policy did not move)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < math.inf:
        raise ValueError(f"off_policy_mask_threshold must be a finite number >= 0 (or None: off), got {threshold!r}")
    return float(threshold)


def keep_torch(ell, mask, adv, threshold=THRESHOLD):
    """``1{A_i ≥ 0 or −ℓ_i/T_i ≤ δ}`` per row ``[N, 1]`` (float of ``ell``'s dtype), at any δ."""
    import torch

    kl = -torch.where(mask, ell, torch.zeros_like(ell)).sum(dim=1, keepdim=True) \
        / mask.sum(dim=1, keepdim=True).to(ell.dtype).clamp(min=1.0)
    keep = (adv >= 0).unsqueeze(1) | (kl <= threshold)
    return torch.where(keep, torch.ones_like(kl), torch.zeros_like(kl))


def k_torch(ell, mask, adv, T_i, p):
    return keep_torch(ell, mask, adv).expand_as(ell)


MAPS = (Estimator("trl_seq_mask", "token", code=16, formula="1{A_i ≥ 0 or −ℓ_i/T_i ≤ δ}, δ = 0.5", numpy=k_numpy,
                  numba=coef_nb, torch=k_torch, clip_ratio="unit", peer="TRL GRPOTrainer", uses_eps=False,
                  correction=True,
                  defaults={"off_policy_mask_threshold": THRESHOLD},
                  doc="TRL's off-policy sequence mask (OPSM)"),)
