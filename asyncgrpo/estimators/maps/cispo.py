"""``cispo``: ``k_{i,t} = clamp(r_{i,t}, lo, hi)``, a truncated token IS weight (stop-gradient, every token kept).

``cispo_clamp``: ``"upper"`` (``lo = 0, hi = 1+ε_high``), ``"two-sided"`` (verl: ``[1−ε_low, 1+ε_high]``),
``"absolute"`` (TRL: ``hi = ε_high``) — :func:`asyncgrpo.estimators.clip_bounds.cispo_log_bounds`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.clip_bounds import cispo_log_bounds
from asyncgrpo.estimators.maps._common import row_stats_nb
from asyncgrpo.estimators.registry import Estimator


def k_numpy(ell, mask, adv, T_i, p):
    clo, chi = cispo_log_bounds(p.cispo_clamp, p.eps_low, p.eps_high)
    return np.exp(np.clip(ell, clo, chi))


@njit(cache=True)
def coef_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    c_lo = -math.inf
    c_hi = math.log1p(eps_high)
    if cispo_mode == 1:
        c_lo = math.log1p(-eps_low)
    elif cispo_mode == 2:
        c_hi = math.log(eps_high)
    for i in range(N):
        Ti, _ = row_stats_nb(tok_ell, mask, i)
        for t in range(T):
            if not mask[i, t]:
                out[i, t] = 0.0
                continue
            c = math.exp(min(max(tok_ell[i, t], c_lo), c_hi))
            out[i, t] = c / Ti


def k_torch(ell, mask, adv, T_i, p):
    import torch

    clo, chi = cispo_log_bounds(p.cispo_clamp, p.eps_low, p.eps_high)
    return torch.exp(torch.clamp(ell, min=clo, max=chi))


MAPS = (Estimator("cispo", "token", code=12, formula="clamp(r_{i,t}, lo, hi)", numpy=k_numpy, numba=coef_nb,
                  torch=k_torch, clip_ratio="token", cispo_clamp=True, doc="CISPO: truncated token IS weight"),)
