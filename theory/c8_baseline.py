"""C8 — baseline bias of the mean-centred advantage (docs/THEORY.md §3 C8).

With ``A_i = R_i − R̄`` and any per-sample weight ``w_i = w(τ_i)``, independence of the group gives
``E[w_i A_i s_i] = (1 − 1/G)·(E_μ[wRs] − E_μ[ws]·E_μ[R])``. For ``is`` (w = ρ): ``E_μ[ρ s] = E_π[s] = 0``
(score identity) and ``E_μ[ρRs] = ∇J``, hence ``E[ĝ_is] = (1 − 1/G)∇J`` exactly.
Checked in general (symbolic expectations) and by exact symbolic enumeration of all 2^G groups on a
two-armed softmax bandit with symbolic π, μ and rewards.
"""
from __future__ import annotations

import functools
import itertools

import sympy as sp

from .proof import Derivation, is_zero
from .symbols import G


@functools.cache
def derive(group_sizes=(2, 3, 4), factor=None) -> Derivation:
    """``factor`` replaces the derived (1 − 1/G) to show that a wrong constant fails."""
    der = Derivation()
    m_wrs, m_ws, m_r = sp.symbols("E_wRs E_ws E_R", real=True)
    # E[w_i A_i s_i]: the j = i term gives E[wRs]/G, each of the G−1 terms j ≠ i gives E[ws]E[R]/G
    e_term = m_wrs - m_wrs / G - (G - 1) / G * m_ws * m_r
    general = sp.factor(e_term)
    der.add("E[w_iA_is_i] = (1−1/G)(E_μ[wRs] − E_μ[ws]E_μ[R])", is_zero(general - (1 - 1 / G) * (m_wrs - m_ws * m_r)), general)
    th = sp.symbols("theta0:3", real=True)
    z = sum(sp.exp(a) for a in th)
    pis = [sp.exp(a) / z for a in th]
    der.add("score identity E_π[∇log π] = 0 (softmax, 3 arms)",
            all(is_zero(sum(pis[k] * sp.diff(sp.log(pis[k]), th[j]) for k in range(3))) for j in range(3)))
    e_is = (1 - 1 / G) * m_wrs
    derived = sp.simplify(e_is / m_wrs)
    coef = derived if factor is None else factor
    p, q = sp.symbols("p q", positive=True)  # π_0, μ_0 (θ ↦ π is onto, so the score is e_k − π)
    r = sp.symbols("r0 r1", real=True)
    pi, mu = (p, 1 - p), (q, 1 - q)
    rho = [pi[k] / mu[k] for k in range(2)]
    score0 = [1 - p, -p]  # first coordinate of e_k − π
    grad0 = sum(pi[k] * r[k] * score0[k] for k in range(2))
    for g in group_sizes:
        e = 0
        for arms in itertools.product(range(2), repeat=g):
            prob = sp.prod(mu[a] for a in arms)
            rbar = sum(r[a] for a in arms) / sp.Integer(g)
            e += prob * sum(rho[a] * (r[a] - rbar) * score0[a] for a in arms) / g
        der.add(f"bandit, G={g}: E[ĝ_is] = {coef.subs(G, g)}·∇J (all 2^G groups, symbolic π, μ, R)",
                is_zero(sp.together(e - coef.subs(G, g) * grad0)))
    der.results["E[ĝ_is]"] = f"({sp.sstr(sp.factor(derived))})·∇J"
    return der
