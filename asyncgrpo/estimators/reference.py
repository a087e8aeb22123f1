"""NumPy reference of the trajectory-level weight maps (THEORY.md §2), dispatched by the registry.

For one group with log-ratios ``ℓ_i = log π_θ(τ_i) − log μ(τ_i)``, ``ρ_i = exp(ℓ_i)`` and
``log ρ̄ = logsumexp(ℓ) − log G``, each map returns the *log*-weights ``log w_i`` (``-inf`` for a zero
weight). The formulas live with each estimator in :mod:`asyncgrpo.estimators.maps` (NumPy, Numba and
torch side by side); this module keeps the names older code uses (``CODES``, :func:`log_weights`,
:func:`weights`, :func:`log_group_mass`).

Working in log space keeps every weight except ``is`` finite for ``|ℓ_i| ≤ 1e4``: ``gmc`` and ``snis``
never form ``ρ_i`` or ``ρ̄`` themselves.
"""
from __future__ import annotations

import numpy as np

from asyncgrpo.estimators import registry
from asyncgrpo.estimators.maps._common import lse_parts as _lse_parts

#: Codes shared with the Numba kernels (numba dispatches on an int, not a str) of THEORY's six maps.
CODES = {name: registry.code(name) for name in ("onpolicy", "is", "tis", "tic", "gmc", "snis")}
#: The same for every registered trajectory-level map (the six, the peers', extra modules').
ALL_CODES = {name: registry.code(name) for name in registry.names("trajectory")}


def log_group_mass(ell: np.ndarray):
    """``log ρ̄ = logsumexp(ℓ) − log G`` over the last axis (a float for one group ``(G,)``)."""
    m, rest = _lse_parts(ell)
    out = (m + rest)[..., 0]
    return float(out) if out.ndim == 0 else out


def log_weights(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Log-weights ``log w_i`` of estimator ``name``; ``ell`` has shape ``(..., G)`` (groups along leading axes)."""
    if name not in ALL_CODES:
        raise KeyError(name)
    return registry.entry(name).numpy(ell, eps)


def weights(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Weights ``w_i = exp(log w_i)``, shape of ``ell``; ``is`` overflows to ``+inf`` past ``ℓ ≈ 709.78``."""
    with np.errstate(over="ignore"):
        return np.exp(log_weights(name, ell, eps))
