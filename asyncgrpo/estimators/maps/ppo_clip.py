"""``grpo`` and ``gspo``: the gradient of PPO's clipped objective ``min(r A, clip(r, 1−ε_low, 1+ε_high) A)``.

``k_{i,t} = r·1{unclipped}`` with ``r = r_{i,t} = exp(ℓ_{i,t})`` (grpo) or the sequence ratio
``s_i = exp(ℓ_i/T_i)`` (gspo, every token of the row). The clip binds (``k = 0``) when ``A ≥ 0, ℓ > log(1+ε_high)``
or ``A < 0, ℓ < log(1−ε_low)``; with the dual clip ``c`` also when ``A < 0, ℓ > log c``. A ratio on a
boundary counts as unclipped; comparisons are on ``ℓ`` (log space).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.maps._common import row_stats_nb
from asyncgrpo.estimators.registry import Estimator


def _unclipped(lr, pos, p):
    hi, lo = math.log1p(p.eps_high), math.log1p(-p.eps_low)
    return np.where(pos, lr <= hi, (lr >= lo) & (lr <= p.log_c))


def grpo_k(ell, mask, adv, T_i, p):
    return np.where(_unclipped(ell, (adv >= 0)[:, None], p), np.exp(ell), 0.0)


def gspo_k(ell, mask, adv, T_i, p):
    seq = ell.sum(axis=1, keepdims=True) / T_i
    return np.broadcast_to(np.where(_unclipped(seq, (adv >= 0)[:, None], p), np.exp(seq), 0.0), ell.shape)


@njit(cache=True)
def _ppo_nb(tok_ell, mask, adv, eps_low, eps_high, log_clip_c, seq_level, out):
    N, T = tok_ell.shape
    hi = math.log1p(eps_high)
    lo = math.log1p(-eps_low)
    for i in range(N):
        Ti, seq = row_stats_nb(tok_ell, mask, i)
        seq /= Ti
        pos = adv[i] >= 0.0
        for t in range(T):
            if not mask[i, t]:
                out[i, t] = 0.0
                continue
            e = seq if seq_level else tok_ell[i, t]
            ok = e <= hi if pos else (e >= lo and e <= log_clip_c)
            c = math.exp(e) if ok else 0.0
            out[i, t] = c / Ti


@njit(cache=True)
def grpo_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    _ppo_nb(tok_ell, mask, adv, eps_low, eps_high, log_clip_c, False, out)


@njit(cache=True)
def gspo_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    _ppo_nb(tok_ell, mask, adv, eps_low, eps_high, log_clip_c, True, out)


def _unclipped_torch(lr, pos, p):
    import torch

    hi, lo = math.log1p(p.eps_high), math.log1p(-p.eps_low)
    return torch.where(pos, lr <= hi, (lr >= lo) & (lr <= p.log_c))


def grpo_k_torch(ell, mask, adv, T_i, p):
    import torch

    return torch.where(_unclipped_torch(ell, (adv >= 0).unsqueeze(1), p), torch.exp(ell), torch.zeros_like(ell))


def gspo_k_torch(ell, mask, adv, T_i, p):
    import torch

    seq = ell.sum(dim=1, keepdim=True) / T_i
    keep = _unclipped_torch(seq, (adv >= 0).unsqueeze(1), p)
    return torch.where(keep, torch.exp(seq), torch.zeros_like(seq)).expand_as(ell)


MAPS = (
    Estimator("grpo", "token", code=10, formula="r_{i,t}·1{unclipped}", numpy=grpo_k, numba=grpo_nb, torch=grpo_k_torch,
              clip_ratio="token", dual_clip=True, doc="PPO/GRPO clipped token ratio"),
    Estimator("gspo", "token", code=11, formula="s_i·1{unclipped}, s_i = exp(ℓ_i/T_i)", numpy=gspo_k, numba=gspo_nb,
              torch=gspo_k_torch, clip_ratio="sequence", dual_clip=True, doc="GSPO: clipped sequence ratio"),
)
