"""``tis`` (``log w_i = min(ℓ_i, log(1+ε))``: truncated IS) and ``tic`` (``log w_i = ℓ_i`` if
``ℓ_i ≤ log(1+ε)`` else ``−∞``: TIC-GRPO's trajectory-level clipping). Both in ``𝒲_ε``.

``cap = math.log1p(ε)`` in every backend: NumPy's log1p can differ from math.log1p by an ulp (at
ε = 0.2), which would move tic's boundary between backends.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.registry import Estimator


def tis_log_weights(ell, eps):
    return np.minimum(ell, math.log1p(eps))


@njit(cache=True)
def tis_log_weights_nb(ell, eps, out):
    cap = math.log1p(eps)
    for i in range(ell.shape[0]):
        out[i] = ell[i] if ell[i] < cap else cap


def tis_log_weights_torch(ell, eps, mask):
    import torch

    return torch.clamp(ell, max=math.log1p(eps))


def tic_log_weights(ell, eps):
    return np.where(ell <= math.log1p(eps), ell, -np.inf)


@njit(cache=True)
def tic_log_weights_nb(ell, eps, out):
    cap = math.log1p(eps)
    for i in range(ell.shape[0]):
        out[i] = ell[i] if ell[i] <= cap else -np.inf


def tic_log_weights_torch(ell, eps, mask):
    import torch

    return torch.where(ell <= math.log1p(eps), ell, torch.full_like(ell, -math.inf))


MAPS = (
    Estimator("tis", "trajectory", code=2, formula="min(ρ_i, 1+ε)", numpy=tis_log_weights, numba=tis_log_weights_nb,
              torch=tis_log_weights_torch, in_class=True, capped=True, reports_clip=True,
              doc="truncated IS, per trajectory"),
    Estimator("tic", "trajectory", code=3, formula="ρ_i·1{ρ_i ≤ 1+ε}", numpy=tic_log_weights,
              numba=tic_log_weights_nb, torch=tic_log_weights_torch, in_class=True, capped=True, reports_clip=True,
              doc="TIC-GRPO: trajectory-level clipping"),
)
