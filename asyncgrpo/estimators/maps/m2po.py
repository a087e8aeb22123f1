"""``m2po``: ``k_{i,t} = r_{i,t}·keep_{i,t}``, where ``keep`` drops, over the whole batch, the tokens with the
largest ``(log r)²`` until the kept mean of ``(log r)²`` is ``≤ τ_M2`` (ties: stable sort on the flat index)."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.maps._common import row_stats_nb
from asyncgrpo.estimators.registry import Estimator


def keep_mask(tok_ell: np.ndarray, mask: np.ndarray, tau_m2: float) -> np.ndarray:
    """Boolean keep-mask: drop the largest ``(log r)²`` until the kept mean is ``≤ τ_M2``."""
    v = np.where(mask, tok_ell * tok_ell, 0.0).ravel()
    order = np.argsort(-v, kind="mergesort")
    real = mask.ravel()
    total, n = float(v[real].sum()), int(real.sum())
    keep = real.copy()
    for j in order:
        if n == 0 or total <= tau_m2 * n:
            break
        if real[j]:
            keep[j] = False
            total -= v[j]
            n -= 1
    return keep.reshape(mask.shape)


def k_numpy(ell, mask, adv, T_i, p):
    return np.where(keep_mask(ell, mask, p.tau_m2), np.exp(ell), 0.0)


@njit(cache=True)
def coef_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    keep = np.ones((N, T), dtype=np.bool_)
    # batch-level mask, same stable order as the NumPy reference
    v = np.zeros(N * T)
    total = 0.0
    n = 0
    for i in range(N):
        for t in range(T):
            if mask[i, t]:
                v[i * T + t] = tok_ell[i, t] * tok_ell[i, t]
                total += v[i * T + t]
                n += 1
    order = np.argsort(-v, kind="mergesort")
    for j in order:
        if n == 0 or total <= tau_m2 * n:
            break
        i, t = j // T, j % T
        if mask[i, t]:
            keep[i, t] = False
            total -= v[j]
            n -= 1
    for i in range(N):
        Ti, _ = row_stats_nb(tok_ell, mask, i)
        for t in range(T):
            if not mask[i, t]:
                out[i, t] = 0.0
                continue
            c = math.exp(tok_ell[i, t]) if keep[i, t] else 0.0
            out[i, t] = c / Ti


def k_torch(ell, mask, adv, T_i, p):
    import torch

    keep = keep_mask(ell.double().cpu().numpy(), mask.cpu().numpy(), p.tau_m2)
    return torch.where(torch.as_tensor(keep, device=ell.device), torch.exp(ell), torch.zeros_like(ell))


MAPS = (Estimator("m2po", "token", code=13, formula="r_{i,t}·keep_{i,t} (batch (log r)² ≤ τ_M2)", numpy=k_numpy,
                  numba=coef_nb, torch=k_torch, clip_ratio="token", doc="M2PO: second-moment token mask"),)
