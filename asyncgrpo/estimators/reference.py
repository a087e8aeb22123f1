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

import numpy as np

# Codes shared with the Numba kernels (numba dispatches on an int, not a str).
CODES = {"onpolicy": 0, "is": 1, "tis": 2, "tic": 3, "gmc": 4, "snis": 5}


def _lse_parts(ell: np.ndarray) -> tuple[float, float]:
    # log ρ̄ = m + log(Σ exp(ℓ − m)/G) with m = max ℓ. Kept as two parts so that
    # ℓ_i − log ρ̄ is formed as (ℓ_i − m) − rest: exact for the largest ℓ_i even at |ℓ| = 1e4.
    m = float(np.max(ell))
    return m, float(np.log(np.sum(np.exp(ell - m))) - np.log(ell.shape[0]))


def log_group_mass(ell: np.ndarray) -> float:
    """``log ρ̄ = logsumexp(ℓ) − log G`` for ``ℓ`` of shape ``(G,)``."""
    m, rest = _lse_parts(ell)
    return m + rest


def log_weights(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Log-weights ``log w_i`` of estimator ``name`` (table above), shape ``(G,)``."""
    cap = np.log1p(eps)
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
        return ell.copy() if cap >= m + rest else (ell - m) + (cap - rest)
    if name == "snis":
        m, rest = _lse_parts(ell)
        return (ell - m) - rest
    raise KeyError(name)


def weights(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Weights ``w_i = exp(log w_i)``; ``is`` overflows to ``+inf`` past ``ℓ ≈ 709.78``."""
    with np.errstate(over="ignore"):
        return np.exp(log_weights(name, ell, eps))
