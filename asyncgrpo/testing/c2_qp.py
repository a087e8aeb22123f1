"""The C2 minimum ``min_{w ∈ 𝒲_ε(ρ)} 𝔅(w;ρ)`` by quadratic programming, independent of the closed form
(docs/THEORY.md §3 C2), for the property kit's ``c2_minimiser`` row."""
from __future__ import annotations

import math

import numpy as np

from asyncgrpo.validation import check_eps

def c2_minimum_qp(log_ratios, eps: float) -> float:
    """``min_{w ∈ 𝒲_ε(ρ)} 𝔅(w;ρ)`` by SLSQP (independent of the closed form ``(ρ̄−1−ε)₊²/ρ̄``).

    With ``w = ρ·u``: ``min (1/G)Σρ_i(1−u_i)²`` s.t. ``0 ≤ u_i ≤ 1`` and ``Σρ_i u_i ≤ G(1+ε)``; ρ is
    rescaled by its maximum so the problem is well conditioned. Raises ``RuntimeError`` if the
    solver does not converge (a verdict must never rest on a failed solve).
    """
    from scipy.optimize import minimize

    ell = np.asarray(log_ratios, dtype=np.float64)
    eps = check_eps(eps)
    G = ell.size
    top = float(ell.max())
    r = np.exp(ell - top)  # ρ / max ρ
    cap = G * (1.0 + eps) * math.exp(-top)  # G(1+ε) / max ρ
    best = None
    # two starts (all-zero, and full weight scaled onto the constraint); SLSQP's "positive
    # directional derivative" stop (status 8) means no further progress, accepted if feasible
    for u0 in (np.zeros(G), np.full(G, min(1.0, cap / float(r.sum())))):
        res = minimize(
            lambda u: float(np.sum(r * (1 - u) ** 2)),
            u0,
            jac=lambda u: -2 * r * (1 - u),
            bounds=[(0.0, 1.0)] * G,
            constraints=[{"type": "ineq", "fun": lambda u: cap - float(r @ u), "jac": lambda u: -r}],
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 1000},
        )
        u = np.clip(res.x, 0.0, 1.0)
        feasible = float(r @ u) <= cap * (1 + 1e-9) + 1e-300
        if res.status in (0, 8) and feasible:
            val = float(np.sum(r * (1 - u) ** 2))
            best = val if best is None else min(best, val)
            if res.status == 0:
                break
    if best is None:
        raise RuntimeError(f"SLSQP did not converge for log_ratios={ell.tolist()}, eps={eps}: {res.message}")
    return best * math.exp(top) / G


__all__ = ["c2_minimum_qp"]
