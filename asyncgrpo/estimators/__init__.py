"""The one registry of trajectory-level importance-weight maps (THEORY.md §2).

Every estimator is a named factory taking ``eps`` (the ratio threshold ε) and
returning a :class:`WeightMap`, a small frozen object whose three backends share
the name::

    >>> from asyncgrpo import estimators as est
    >>> wm = est.gmc(0.2)                  # or est.get("gmc", eps=0.2)
    >>> wm([0.1, -0.3, 2.0])               # NumPy reference, shape (G,)
    >>> wm.torch(ell, mask=None)           # PyTorch, [n_groups, G], stop-gradient
    >>> wm.numba([0.1, -0.3, 2.0])         # Numba kernel via a validated wrapper
    >>> wm.code                            # int for kernels: kernels.weights_nb(code, ell, eps, out)

The weight ``w_i`` enters ``ĝ = (1/G) Σ_i w_i A_i s_θ(τ_i)`` with stop-gradient:

==========  =================================  ==============================
name        weight ``w_i``                      in the class ``𝒲_ε``?
==========  =================================  ==============================
onpolicy    ``1``                               no (ignores staleness)
is          ``ρ_i``                             no (unbounded)
tis         ``min(ρ_i, 1+ε)``                   yes
tic         ``ρ_i · 1{ρ_i ≤ 1+ε}``              yes
gmc         ``ρ_i · min(1, (1+ε)/ρ̄)``          yes (C2: least 𝔅 in the class)
snis        ``ρ_i / ρ̄``                         no
==========  =================================  ==============================

``𝒲_ε(ρ) = {w : 0 ≤ w_i ≤ ρ_i, (1/G)Σ w_i ≤ 1+ε}``. None of the six needs the
advantages; the token-level baselines (``grpo``, ``gspo``, ``cispo``, ``m2po``) and the peers'
token-level corrections live in :mod:`asyncgrpo.estimators.token_level`.

Every estimator is one module of :mod:`asyncgrpo.estimators.maps` (its NumPy, Numba and torch forms side
by side) listed by :mod:`asyncgrpo.estimators.registry`, which builds the dispatch of every backend.
Besides the six, the registry holds the peers' sequence-level corrections ``verl_seq_tis`` and
``verl_seq_rs`` (:data:`PEER_ESTIMATORS`, docs/estimators.md); every trajectory-level name is in
:data:`TRAJECTORY_ESTIMATORS`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asyncgrpo.estimators import reference, registry
from asyncgrpo.estimators.reference import ALL_CODES, CODES
from asyncgrpo.validation import check_eps, check_log_ratios

#: Names of THEORY.md §2's trajectory-level estimators, in its order (the maps the claims are about).
ESTIMATORS: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "gmc", "snis")
#: Every registered trajectory-level estimator (THEORY's six, the peers', any from $ASYNCGRPO_ESTIMATORS).
TRAJECTORY_ESTIMATORS: tuple[str, ...] = ESTIMATORS + tuple(n for n in registry.names("trajectory") if n not in ESTIMATORS)
#: The peers' off-policy corrections (verl's rollout correction, TRL's off-policy mask), both levels.
PEER_ESTIMATORS: tuple[str, ...] = tuple(n for n, e in registry.entries().items() if e.correction)
#: The peers' token-level losses in the registry (verl/TRL ``sapo``, verl ``gpg``).
PEER_LOSSES: tuple[str, ...] = tuple(n for n, e in registry.entries().items() if e.peer and not e.correction)
#: Those that belong to the class 𝒲_ε for every ρ (THEORY §3; registry attribute ``in_class``).
IN_CLASS: frozenset[str] = frozenset(n for n in TRAJECTORY_ESTIMATORS if registry.entry(n).in_class)


@dataclass(frozen=True)
class WeightMap:
    """Estimator ``name`` at threshold ``eps``: ``ℓ ↦ w`` in three backends."""

    name: str
    eps: float

    def __post_init__(self):
        # Validated here, not only in get(): a WeightMap built directly must not yield NaN weights.
        if self.name not in ALL_CODES:
            raise ValueError(f"unknown estimator {self.name!r}; known estimators: {', '.join(TRAJECTORY_ESTIMATORS)}")
        object.__setattr__(self, "eps", check_eps(self.eps))

    @property
    def code(self) -> int:
        """Integer id used by the Numba kernels (``reference.ALL_CODES``)."""
        return ALL_CODES[self.name]

    @property
    def in_class(self) -> bool:
        """Whether the weights always lie in ``𝒲_ε(ρ)``."""
        return self.name in IN_CLASS

    @property
    def spec(self) -> registry.Estimator:
        """The registry record (formula, attributes, the three backends)."""
        return registry.entry(self.name)

    def log_weights(self, log_ratios) -> np.ndarray:
        """``log w_i`` (NumPy reference); ``-inf`` marks a zero weight."""
        return reference.log_weights(self.name, check_log_ratios(log_ratios), self.eps)

    def __call__(self, log_ratios) -> np.ndarray:
        """``w_i`` (NumPy reference), shape ``(G,)``. Finite for ``|ℓ_i| ≤ 1e4`` except ``is``."""
        return reference.weights(self.name, check_log_ratios(log_ratios), self.eps)

    def numba(self, log_ratios) -> np.ndarray:
        """``w_i`` from the Numba kernel :func:`kernels.weights_nb` (validated wrapper)."""
        from asyncgrpo.estimators import kernels

        ell = check_log_ratios(log_ratios)
        with np.errstate(over="ignore"):
            return kernels.weights_nb(self.code, ell, self.eps, np.empty_like(ell))

    def torch(self, log_ratios, mask=None):
        """Detached weights ``[n_groups, G]`` from PyTorch; ``mask`` marks real entries.

        ``log_ratios`` may be ``[G]`` (one group) or ``[n_groups, G]``; the
        result has the same shape, with 0 at padded entries.
        """
        import torch

        from asyncgrpo.estimators import torch_backend

        from asyncgrpo.validation import check_log_ratios_torch

        # one validation for every backend: the NumPy path's rules (issue 27 item 9)
        ell, mask, squeeze = check_log_ratios_torch(log_ratios, mask)
        out = torch_backend.weights(self.name, ell, self.eps, mask)
        return out.squeeze(0) if squeeze else out


def names() -> tuple[str, ...]:
    """All registered trajectory-level estimator names."""
    return TRAJECTORY_ESTIMATORS


def get(name: str, eps: float = 0.2) -> WeightMap:
    """The :class:`WeightMap` called ``name`` at threshold ``eps`` (validated)."""
    return WeightMap(name, eps)


def onpolicy(eps: float = 0.2) -> WeightMap:
    """``w_i = 1``: ignores staleness, so ``E ĝ`` is the gradient at ``μ`` (no-IS ablation)."""
    return get("onpolicy", eps)


def is_(eps: float = 0.2) -> WeightMap:
    """``w_i = ρ_i``: plain importance sampling (``is`` is a Python keyword)."""
    return get("is", eps)


def tis(eps: float) -> WeightMap:
    """``w_i = min(ρ_i, 1+ε)``: truncated IS at trajectory level."""
    return get("tis", eps)


def tic(eps: float) -> WeightMap:
    """``w_i = ρ_i·1{ρ_i ≤ 1+ε}``: TIC-GRPO, the gradient of ``min(ρ_i, 1+ε)·A_i``."""
    return get("tic", eps)


def gmc(eps: float) -> WeightMap:
    """``w_i = ρ_i·min(1, (1+ε)/ρ̄)``: group-mass capping, one factor per group."""
    return get("gmc", eps)


def snis(eps: float = 0.2) -> WeightMap:
    """``w_i = ρ_i/ρ̄``: self-normalised IS (always rescales to mean weight 1)."""
    return get("snis", eps)


__all__ = ["ESTIMATORS", "TRAJECTORY_ESTIMATORS", "PEER_ESTIMATORS", "PEER_LOSSES", "IN_CLASS", "registry", "WeightMap", "get", "names", "onpolicy", "is_", "tis", "tic", "gmc", "snis"]
