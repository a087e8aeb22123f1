"""Fixed-order products ``Φw`` and ``Φᵀg``, and libm's ``exp``, for the instance layer: the same bits on every CPU.

A BLAS ``dgemv`` sums in an order chosen by the CPU's kernel: OpenBLAS's Haswell and Sandy Bridge kernels give
``Φw`` different last bits, and a supervised warm start iterated on them (:func:`simulate.bridge.rungs.supervised_init`)
ended at a different ``w_init`` on an AMD EPYC than on an Intel Xeon, so every number of ``lm-faithful-exact`` moved
with the machine. These loops fix the order and run without ``fastmath`` (no reassociation), so the result is the
same on any CPU. ``Φw`` is the order the training kernel computes (:func:`simulate.training.phases.logits_nb`, from
``0.0``); the kernel's ``Φᵀg`` is summed per distinct feature block instead (issue 59,
:func:`simulate.training.params.to_params_nb`), which agrees with this loop to ~1e-15 relative, not bit for bit:

    (Φw)_i = Σ_j Φ_ij w_j   (j = 0, 1, …, p−1)        (Φᵀg)_j = Σ_i Φ_ij g_i   (i = 0, 1, …, n−1)

:func:`exp` is ``e^x`` elementwise by ``math.exp`` compiled by Numba (libm's, the training kernel's ``exp``).
NumPy's float64 ``np.exp`` has an AVX-512 implementation that NumPy picks at run time on a CPU that has it, and
its last bits differ from libm's: on an AMD EPYC with AVX-512 (6 Dec 2026) on 45 920 of 10⁶ arguments uniform
in [−30, 5], and the warm start iterated on it ended at another ``w_init`` than on an AVX2 machine.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["phi_w", "phi_t_g", "exp"]


@njit(cache=True)
def _phi_w_nb(phi, w, out):
    n, p = phi.shape
    for i in range(n):
        out[i] = 0.0
    for j in range(p):  # j outermost: each out[i] still sums j ascending, and the inner loop vectorises over i
        wj = w[j]
        for i in range(n):
            out[i] += phi[i, j] * wj
    return out


@njit(cache=True)
def _phi_t_g_nb(phi, g, out):
    n, p = phi.shape
    for j in range(p):
        out[j] = 0.0
    for i in range(n):  # i outermost: each out[j] sums i ascending, the inner loop runs along Φ's row
        gi = g[i]
        for j in range(p):
            out[j] += phi[i, j] * gi
    return out


@njit(cache=True)
def _exp_nb(x, out):
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i])
    return out


def _checked(phi, x, axis: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    phi = np.ascontiguousarray(phi, dtype=np.float64)
    x = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    if phi.ndim != 2:
        raise ValueError(f"phi must be a 2-D array (rows, p), got shape {phi.shape}")
    if x.shape[0] != phi.shape[axis]:
        raise ValueError(f"{name} must have {phi.shape[axis]} entries (phi's {('rows', 'columns')[axis]}), "
                         f"got {x.shape[0]}")
    return phi, x


def phi_w(phi, w) -> np.ndarray:
    """``θ = Φw`` with ``θ_i = Σ_j Φ_ij w_j`` summed in ``j`` order (module docstring); ``phi`` ``(n, p)``, ``w`` ``(p,)``."""
    phi, w = _checked(phi, w, 1, "w")
    return _phi_w_nb(phi, w, np.empty(phi.shape[0]))


def phi_t_g(phi, g) -> np.ndarray:
    """``Φᵀg`` with ``(Φᵀg)_j = Σ_i Φ_ij g_i`` summed in ``i`` order; ``phi`` ``(n, p)``, ``g`` ``(n,)`` (any shape with
    ``n`` entries, read in C order)."""
    phi, g = _checked(phi, g, 0, "g")
    return _phi_t_g_nb(phi, g, np.empty(phi.shape[1]))


def exp(x) -> np.ndarray:
    """``e^x`` elementwise by libm (module docstring), a new float64 array of ``x``'s shape; NumPy's ``np.exp``
    gives other last bits on AVX-512 CPUs."""
    x = np.asarray(x, dtype=np.float64)
    flat = np.ascontiguousarray(x).reshape(-1)
    return _exp_nb(flat, np.empty(flat.shape[0])).reshape(x.shape)
