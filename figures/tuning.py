"""The C5 bound tuned over the step size, evaluated on grids for figures 4 and 6 and the ε/G notebook.

Every number comes from :mod:`theory.bounds` (lambdified from the sympy derivations, minimised over η
by :func:`theory.bounds.tuned_bound`); this module holds the figures' constants and minimises over ε
on a grid. With the variance term kept,

    B(η; ε, G) = 2ΔJ/(ηK) + LηM₂(ε) + C η⁴d⁴ ε^{p_ε} G^{p_G}      (THEORY C5, ``assembled_bound``)

and the *tuned bound* is ``B*(ε, G) = min_η B(η; ε, G)``; ``ε*(G) = argmin_ε B*(ε, G)``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class BoundConstants:
    """Constants of the C5 bound (THEORY §3, C5); defaults are the ones used in the figures."""

    K: float = 1e4  #: number of learner steps
    d: float = 4.0  #: delay (steps)
    dJ: float = 1.0  #: ΔJ = J* − J(θ_0), objective gap at the start
    L: float = 1.0  #: smoothness constant of J
    second_moment: float = 1.0  #: E_π[A²‖s_θ‖²], so that M₂(ε) = (1+ε)·second_moment
    C: float = 1.0  #: constant of the delay term (absorbs c_B and the C6 constants)

    def asdict(self) -> dict:
        return asdict(self)


def tuned_bound(name: str, eps, G, k: BoundConstants = BoundConstants()):
    """``(B*, η*)`` = ``min_η`` / ``argmin_η`` of the C5 bound at the constants ``k``, broadcast over ε, G
    (:func:`theory.bounds.tuned_bound`, the project's one η minimiser)."""
    from theory.bounds import tuned_bound as theory_tuned_bound

    eps, G = np.broadcast_arrays(np.asarray(eps, dtype=float), np.asarray(G, dtype=float))
    B, eta = theory_tuned_bound(name, k.K, k.d, eps, G, dJ=k.dJ, C=k.C, L=k.L, second_moment=k.second_moment)
    return np.asarray(B), np.asarray(eta)


def eps_star(name: str, G, k: BoundConstants = BoundConstants(), *, eps_grid=None):
    """``(ε*(G), B*(ε*, G), η*)`` on a log grid of ε (default ``10^-3 … 10``, 241 points)."""
    eps_grid = np.geomspace(1e-3, 10.0, 241) if eps_grid is None else np.asarray(eps_grid, dtype=float)
    G = np.atleast_1d(np.asarray(G, dtype=float))
    B, eta = tuned_bound(name, eps_grid[:, None], G[None, :], k)
    j = np.argmin(B, axis=0)
    cols = np.arange(G.size)
    return eps_grid[j], B[j, cols], eta[j, cols]
