"""Numba kernels of the trajectory-level weight maps (THEORY.md §2).

``log_weights_nb(code, ell, eps, out)`` is the registry's generated dispatch
(:func:`asyncgrpo.estimators.registry.dispatch`) over each map's own kernel in
:mod:`asyncgrpo.estimators.maps`; the integer ``code`` (``reference.CODES``) lets other ``@njit`` kernels
(the Monte Carlo and training simulators) pick an estimator at run time without Python objects, and
``estimator_flags_nb(code)`` gives them the registry attributes they need. No validation here: the public
wrappers validate once.

Shapes: ``ell`` is ``ndarray(float64, ndim=1)`` of length ``G``; ``out`` has the
same shape and is overwritten. No randomness is drawn.
"""
from __future__ import annotations

import math

from numba import njit

from asyncgrpo.estimators import registry
from asyncgrpo.estimators.maps._common import lse_parts_nb

_dispatch = registry.dispatch()
log_weights_nb = _dispatch.log_weights_nb
estimator_flags_nb = _dispatch.estimator_flags_nb


@njit(cache=True)
def log_group_mass_nb(ell):
    """``log ρ̄ = logsumexp(ℓ) − log G``."""
    m, r = lse_parts_nb(ell)
    return m + r


@njit(cache=True)
def weights_nb(code, ell, eps, out):
    """Write ``w_i = exp(log w_i)`` of estimator ``code`` into ``out``; returns ``out``."""
    log_weights_nb(code, ell, eps, out)
    for i in range(ell.shape[0]):
        out[i] = math.exp(out[i])
    return out


@njit(cache=True)
def weights_batch_nb(code, ell, eps, out):
    """Row-wise :func:`weights_nb` for ``ell`` of shape ``(n_groups, G)``."""
    for g in range(ell.shape[0]):
        weights_nb(code, ell[g], eps, out[g])
    return out


@njit(cache=True, inline="always")
def weight_terms_nb(lw, ell_i, rho_i):
    """``(w_i, ρ_i f_i², ρ_i f_i)`` for one trajectory from ``log w_i``, ``ℓ_i`` and ``ρ_i = e^{ℓ_i}``:
    the summands of ``Σw``, ``G·𝔅(w;ρ)`` and ``G·`` removed mass, with ``f_i = 1 − w_i/ρ_i = −expm1(log w_i − ℓ_i)``
    (no ratio of two under- or overflowed numbers).

    Most maps leave most weights unclipped (``log w_i = ℓ_i``: ``w_i = ρ_i``, ``f_i = 0``) or at
    ``w_i = 1``; those reuse ``ρ_i`` and skip the transcendental calls, with values bit-identical to
    ``exp``/``expm1``. The one definition of these terms: the Monte Carlo kernel and
    :func:`group_functionals_nb` both call it.
    """
    d = lw - ell_i
    if d == 0.0:
        return rho_i, 0.0, 0.0
    f = -math.expm1(d)
    w = 1.0 if lw == 0.0 else math.exp(lw)
    if f == 0.0:
        return w, 0.0, 0.0
    return w, rho_i * f * f, rho_i * f


@njit(cache=True)
def group_functionals_nb(ell, logw):
    """Return ``(ρ̄, 𝔅(w;ρ), removed mass, Σw/G)`` for one group from ``ℓ`` and ``log w``.

    ``𝔅(w;ρ) = (1/G)Σ(ρ_i − w_i)²/ρ_i`` and removed mass ``(1/G)Σ(ρ_i − w_i)``, from the summands of
    :func:`weight_terms_nb`.
    """
    G = ell.shape[0]
    B = 0.0
    removed = 0.0
    mass_w = 0.0
    for i in range(G):
        w, b, r = weight_terms_nb(logw[i], ell[i], math.exp(ell[i]))
        B += b
        removed += r
        mass_w += w
    return math.exp(log_group_mass_nb(ell)), B / G, removed / G, mass_w / G


__all__ = ["lse_parts_nb", "log_group_mass_nb", "log_weights_nb", "estimator_flags_nb", "weights_nb",
           "weights_batch_nb", "weight_terms_nb", "group_functionals_nb"]
