"""Helpers shared by several maps, in the three backends: ``log ρ̄`` in two parts, and row lengths.

``log ρ̄ = m + r`` with ``m = max ℓ`` and ``r = log(Σ exp(ℓ − m)/G)``: kept as two parts so that
``ℓ_i − log ρ̄ = (ℓ_i − m) − r`` is exact for the largest ``ℓ_i`` at ``|ℓ| = 1e4``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit


def lse_parts(ell: np.ndarray):
    """NumPy ``(m, r)`` over the last axis (keepdims)."""
    m = np.max(ell, axis=-1, keepdims=True)
    return m, np.log(np.sum(np.exp(ell - m), axis=-1, keepdims=True)) - np.log(ell.shape[-1])


@njit(cache=True)
def lse_parts_nb(ell):
    """Numba ``(m, r)`` of one group ``ell`` (1-D)."""
    G = ell.shape[0]
    m = ell[0]
    for i in range(1, G):
        if ell[i] > m:
            m = ell[i]
    s = 0.0
    for i in range(G):
        s += math.exp(ell[i] - m)
    return m, math.log(s) - math.log(G)


def lse_parts_torch(ell, mask):
    """PyTorch ``(m, r)`` per row of ``ell`` ``[n, G]`` over the real entries (``mask``)."""
    import torch

    neg_inf = torch.full_like(ell, -math.inf)
    masked = torch.where(mask, ell, neg_inf)
    m = masked.max(dim=-1, keepdim=True).values
    s = torch.exp(masked - m).sum(dim=-1, keepdim=True)
    r = torch.log(s) - torch.log(mask.sum(dim=-1, keepdim=True).to(ell.dtype))
    return m, r


@njit(cache=True, inline="always")
def row_stats_nb(tok_ell, mask, i):
    """``(T_i, Σ_t ℓ_{i,t})`` of row ``i`` over its real tokens (``T_i`` an int)."""
    Ti = 0
    s = 0.0
    for t in range(tok_ell.shape[1]):
        if mask[i, t]:
            Ti += 1
            s += tok_ell[i, t]
    return Ti, s
