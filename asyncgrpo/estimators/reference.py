"""NumPy reference implementations of the trajectory-level weight maps.

THEORY.md §2. For one group with log-ratios ``ℓ_i = log π_θ(τ_i) − log μ(τ_i)``,
``ρ_i = exp(ℓ_i)`` and ``log ρ̄ = logsumexp(ℓ) − log G``, each map returns the
*log*-weights ``log w_i`` (``-inf`` for a zero weight):

==========  =================================================
onpolicy    ``0``
is          ``ℓ_i``
tis         ``min(ℓ_i, log(1+ε))``
tic         ``ℓ_i`` if ``ℓ_i ≤ log(1+ε)`` else ``-inf``
gmc         ``ℓ_i + min(0, log(1+ε) − log ρ̄)``
snis        ``ℓ_i − log ρ̄``
==========  =================================================

Working in log space keeps every weight except ``is`` finite for
``|ℓ_i| ≤ 1e4``: ``gmc`` and ``snis`` never form ``ρ_i`` or ``ρ̄`` themselves.
These functions are the readable definition; the Numba kernels and the PyTorch
backend are tested equal to them.
"""
from __future__ import annotations

import math

import numpy as np

# Codes shared with the Numba kernels (numba dispatches on an int, not a str).
CODES = {"onpolicy": 0, "is": 1, "tis": 2, "tic": 3, "gmc": 4, "snis": 5}


def _lse_parts(ell: np.ndarray):
    # log ρ̄ = m + log(Σ exp(ℓ − m)/G) with m = max ℓ, over the last axis (keepdims). Kept as
    # two parts so that ℓ_i − log ρ̄ is formed as (ℓ_i − m) − rest: exact for the largest ℓ_i at |ℓ| = 1e4.
    m = np.max(ell, axis=-1, keepdims=True)
    return m, np.log(np.sum(np.exp(ell - m), axis=-1, keepdims=True)) - np.log(ell.shape[-1])


def log_group_mass(ell: np.ndarray):
    """``log ρ̄ = logsumexp(ℓ) − log G`` over the last axis (a float for one group ``(G,)``)."""
    m, rest = _lse_parts(ell)
    out = (m + rest)[..., 0]
    return float(out) if out.ndim == 0 else out


def log_weights(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Log-weights ``log w_i`` of estimator ``name`` (table above).

    ``ell`` has shape ``(..., G)``: one group, or a batch of groups along the leading axes.
    """
    # the same float as the Numba and torch backends (NumPy's log1p can differ from math.log1p by an
    # ulp, e.g. at ε = 0.2, which would move tic's boundary between backends)
    cap = math.log1p(eps)
    if name == "onpolicy":
        return np.zeros_like(ell)
    if name == "is":
        return ell.copy()
    if name == "tis":
        return np.minimum(ell, cap)
    if name == "tic":
        return np.where(ell <= cap, ell, -np.inf)
    if name == "gmc":
        m, rest = _lse_parts(ell)
        return np.where(cap >= m + rest, ell, (ell - m) + (cap - rest))
    if name == "snis":
        m, rest = _lse_parts(ell)
        return (ell - m) - rest
    raise KeyError(name)


def weights(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Weights ``w_i = exp(log w_i)``, shape of ``ell``; ``is`` overflows to ``+inf`` past ``ℓ ≈ 709.78``."""
    with np.errstate(over="ignore"):
        return np.exp(log_weights(name, ell, eps))
