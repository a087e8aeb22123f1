"""``onpolicy``: ``w_i = 1`` (``log w_i = 0``), ignores staleness: the no-correction ablation."""
from __future__ import annotations

from numba import njit

from asyncgrpo.estimators.registry import Estimator


def log_weights(ell, eps):
    import numpy as np

    return np.zeros_like(ell)


@njit(cache=True)
def log_weights_nb(ell, eps, out):
    for i in range(ell.shape[0]):
        out[i] = 0.0


def log_weights_torch(ell, eps, mask):
    import torch

    return torch.zeros_like(ell)


MAPS = (Estimator("onpolicy", "trajectory", code=0, formula="1", numpy=log_weights, numba=log_weights_nb,
                  torch=log_weights_torch, doc="ignores staleness (the no-correction ablation)"),)
