"""The C5 bound tuned over the step size, evaluated on grids for figures 4 and 6 and the ε/G notebook.

Every number comes from :mod:`theory.bounds` (lambdified from the sympy derivations); this module
only minimises over η and ε on grids. With the variance term kept,

    B(η; ε, G) = 2ΔJ/(ηK) + LηM₂(ε) + C η⁴d⁴ ε^{p_ε} G^{p_G}      (THEORY C5, ``assembled_bound``)

and the *tuned bound* is ``B*(ε, G) = min_η B(η; ε, G)``; ``ε*(G) = argmin_ε B*(ε, G)``.
Minimisation over η is on a log grid of ``n_eta`` points (relative spacing ``r``), refined
by one parabola through the three points around the grid minimum in ``log η`` (B is smooth
and strictly convex in η, so the error is far below plotting resolution).
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


def tuned_bound(name: str, eps, G, k: BoundConstants = BoundConstants(), *, n_eta: int = 1200,
                log10_eta=(-9.0, 2.0)):
    """``(B*, η*)`` = ``min_η`` / ``argmin_η`` of ``assembled_bound(name, η, K, d, ε, G)``, broadcast over ε, G."""
    from theory.bounds import assembled_bound

    eps, G = np.broadcast_arrays(np.asarray(eps, dtype=float), np.asarray(G, dtype=float))
    u = np.linspace(np.log(10.0) * log10_eta[0], np.log(10.0) * log10_eta[1], n_eta)
    eta = np.exp(u).reshape((-1,) + (1,) * eps.ndim)
    vals = assembled_bound(name, eta, k.K, k.d, eps[None], G[None], dJ=k.dJ, L=k.L,
                           second_moment=k.second_moment, C=k.C, c_G=0.0)
    i = np.clip(np.argmin(vals, axis=0), 1, n_eta - 2)
    f0, f1, f2 = (np.take_along_axis(vals, (i + o)[None], axis=0)[0] for o in (-1, 0, 1))
    h = u[1] - u[0]
    denom = f0 - 2 * f1 + f2
    shift = np.where(denom > 0, 0.5 * h * (f0 - f2) / np.where(denom > 0, denom, 1.0), 0.0)
    eta_star = np.exp(u[i] + np.clip(shift, -h, h))
    best = assembled_bound(name, eta_star, k.K, k.d, eps, G, dJ=k.dJ, L=k.L, second_moment=k.second_moment,
                           C=k.C, c_G=0.0)
    return np.minimum(best, f1), eta_star


def eps_star(name: str, G, k: BoundConstants = BoundConstants(), *, eps_grid=None):
    """``(ε*(G), B*(ε*, G), η*)`` on a log grid of ε (default ``10^-3 … 10``, 241 points)."""
    eps_grid = np.geomspace(1e-3, 10.0, 241) if eps_grid is None else np.asarray(eps_grid, dtype=float)
    G = np.atleast_1d(np.asarray(G, dtype=float))
    B, eta = tuned_bound(name, eps_grid[:, None], G[None, :], k)
    j = np.argmin(B, axis=0)
    cols = np.arange(G.size)
    return eps_grid[j], B[j, cols], eta[j, cols]
