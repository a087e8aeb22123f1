"""C1 — common second-moment guarantee (docs/THEORY.md §3 C1).

For every ``w ∈ 𝒲_ε(ρ)`` and vectors ``v_i = A_i s_θ(τ_i)``:

    ‖(1/G) Σ w_i v_i‖² ≤ ((1/G) Σ w_i)·((1/G) Σ w_i‖v_i‖²)        (L3, weighted Cauchy–Schwarz)
                       ≤ (1+ε)·(1/G) Σ ρ_i ‖v_i‖²                  (w ∈ 𝒲_ε)

and ``E_μ[ρ f] = E_{π_θ}[f]`` give ``E_μ‖ĝ‖² ≤ (1+ε)·E_{π_θ}[A²‖s_θ‖²] =: M₂(ε)``.
``is`` and ``snis`` are not in 𝒲_ε in general (explicit counterexamples), so C1 says nothing for them.

Reconstruction note: with the group-centred advantage A_i depends on the whole group; the last
equality reads ``E_μ[(1/G) Σ ρ_i A_i²‖s_i‖²]`` as ``E_π[A²‖s‖²]``, which is how docs/THEORY.md defines
the constant.
"""
from __future__ import annotations

import functools
from fractions import Fraction as F

import sympy as sp

from . import lemmas
from .proof import Derivation, is_zero, nonneg
from .symbols import S, eps
from .weights import in_class, weights

M2 = (1 + eps) * S  # M₂(ε) = (1+ε)·E_π[A²‖s‖²]


@functools.cache
def derive() -> Derivation:
    der = Derivation()
    der.add("L3: ‖(1/G)Σw_i v_i‖² ≤ ((1/G)Σw_i)((1/G)Σw_i‖v_i‖²)", lemmas.derive_weighted_cs().ok)
    # 0 ≤ a ≤ a+s1 and 0 ≤ b ≤ b+s2 ⇒ ab ≤ (a+s1)(b+s2): the product step with a = mean w, b = mean w‖v‖²
    a, b, s1, s2 = sp.symbols("a b s1 s2", nonnegative=True)
    ok, cert = nonneg((a + s1) * (b + s2) - a * b)
    der.add("0≤a≤A, 0≤b≤B ⇒ ab ≤ AB (with A = 1+ε, B = (1/G)Σρ_i‖v_i‖²)", ok, cert)
    n = 4
    mu_ = sp.symbols(f"mu0:{n}", positive=True)
    pi_ = sp.symbols(f"pi0:{n}", positive=True)
    f_ = sp.symbols(f"f0:{n}", real=True)
    der.add("change of measure E_μ[ρ f] = E_π[f] (ρ = π/μ)",
            is_zero(sum(m * (p / m) * f for m, p, f in zip(mu_, pi_, f_)) - sum(p * f for p, f in zip(pi_, f_))))
    e = F(1, 2)
    der.add("is ∉ 𝒲_ε: ρ = (2, 2), ε = 1/2 has mean w = 2 > 1+ε",
            not in_class(weights("is", [F(2), F(2)], e), [F(2), F(2)], e))
    der.add("snis ∉ 𝒲_ε: ρ = (1/2, 1/2) gives w = (1, 1) > ρ",
            not in_class(weights("snis", [F(1, 2)] * 2, e), [F(1, 2)] * 2, e))
    der.results["M₂(ε)"] = M2
    der.results["bound"] = f"E_μ‖ĝ‖² ≤ {sp.sstr(M2)}"
    return der
