"""``gmc``, group-mass capping: ``w_i = ρ_i·min(1, (1+ε)/ρ̄)``, one common factor per group
(``log w_i = ℓ_i + min(0, log(1+ε) − log ρ̄)``); the least 𝔅 in ``𝒲_ε`` (C2)."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.maps._common import lse_parts, lse_parts_nb, lse_parts_torch
from asyncgrpo.estimators.registry import Estimator


def log_weights(ell, eps):
    cap = math.log1p(eps)
    m, rest = lse_parts(ell)
    return np.where(cap >= m + rest, ell, (ell - m) + (cap - rest))


@njit(cache=True)
def log_weights_nb(ell, eps, out):
    cap = math.log1p(eps)
    m, r = lse_parts_nb(ell)
    if cap >= m + r:
        for i in range(ell.shape[0]):
            out[i] = ell[i]
    else:
        for i in range(ell.shape[0]):
            out[i] = (ell[i] - m) + (cap - r)


def log_weights_torch(ell, eps, mask):
    import torch

    cap = math.log1p(eps)
    m, r = lse_parts_torch(ell, mask)
    return torch.where(cap >= m + r, ell, (ell - m) + (cap - r))


MAPS = (Estimator("gmc", "trajectory", code=4, formula="ρ_i·min(1, (1+ε)/ρ̄)", numpy=log_weights,
                  numba=log_weights_nb, torch=log_weights_torch, in_class=True, capped=True, reports_clip=True,
                  doc="group-mass capping: one common factor per group"),)
