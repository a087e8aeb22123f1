"""``is`` (``log w_i = ℓ_i``: plain importance sampling) and ``snis`` (``log w_i = ℓ_i − log ρ̄``:
self-normalised, mean weight 1 in every group)."""
from __future__ import annotations

from numba import njit

from asyncgrpo.estimators.maps._common import lse_parts, lse_parts_nb, lse_parts_torch
from asyncgrpo.estimators.registry import Estimator


def is_log_weights(ell, eps):
    return ell.copy()


@njit(cache=True)
def is_log_weights_nb(ell, eps, out):
    for i in range(ell.shape[0]):
        out[i] = ell[i]


def is_log_weights_torch(ell, eps, mask):
    return ell.clone()


def snis_log_weights(ell, eps):
    m, rest = lse_parts(ell)
    return (ell - m) - rest


@njit(cache=True)
def snis_log_weights_nb(ell, eps, out):
    m, r = lse_parts_nb(ell)
    for i in range(ell.shape[0]):
        out[i] = (ell[i] - m) - r


def snis_log_weights_torch(ell, eps, mask):
    m, r = lse_parts_torch(ell, mask)
    return (ell - m) - r


MAPS = (
    Estimator("is", "trajectory", code=1, formula="ρ_i", numpy=is_log_weights, numba=is_log_weights_nb,
              torch=is_log_weights_torch, doc="plain importance sampling: unbiased, unbounded second moment"),
    Estimator("snis", "trajectory", code=5, formula="ρ_i/ρ̄", numpy=snis_log_weights, numba=snis_log_weights_nb,
              torch=snis_log_weights_torch, doc="self-normalised IS"),
)
