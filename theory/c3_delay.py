"""C3 — delay enters only through the bias (docs/THEORY.md §3 C3).

In the C5 bound ``2ΔJ/(ηK) + LηM₂(ε) + c_B·E[𝔅] + c_G/G`` the variance constant ``M₂(ε) = (1+ε)E_π[A²‖s‖²]``
(C1) does not depend on the delay, so ``∂bound/∂d = c_B·∂E[𝔅]/∂d``: for an arbitrary bias functional
𝔅(d, ε, G), and for each estimator's C4 delay term (where the derivative is non-zero).
"""
from __future__ import annotations

import functools

import sympy as sp

from . import c5_symbolic as c5
from .c1_second_moment import M2
from .proof import Derivation, is_zero
from .symbols import G, K, L, c_B, c_G, d, dJ, eps, eta


@functools.cache
def derive(m2: sp.Expr = M2) -> Derivation:
    """``m2`` replaces M₂(ε): a delay-dependent second moment (as for ``is``) makes the check fail."""
    der = Derivation()
    der.add("M₂(ε) is independent of d", not m2.has(d), m2)
    bias = sp.Function("Bfrak")(d, eps, G)
    bound = 2 * dJ / (eta * K) + L * eta * m2 + c_B * bias + c_G / G
    der.add("generic 𝔅: ∂bound/∂d − c_B ∂𝔅/∂d ≡ 0", is_zero(sp.diff(bound, d) - c_B * sp.diff(bias, d)))
    for name in c5.EXPECTED_TUNED_EXPONENTS:
        full = c5.assembled(name, m2)
        dd = sp.diff(full, d)
        der.add(f"{name}: ∂bound/∂d = ∂(delay term)/∂d ≠ 0",
                is_zero(dd - sp.diff(c5.delay_term(name), d)) and not is_zero(dd), sp.simplify(dd))
        der.results[f"∂bound/∂d ({name})"] = sp.simplify(dd)
    return der
