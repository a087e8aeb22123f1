"""C4 — the delay term: bias-functional bounds and their orders in ε, G and ηd (docs/THEORY.md §3 C4).

With ``X = ρ̄ − 1`` (gmc) or ``X = ρ − 1`` (tis, tic, one sample at a time):

- gmc: ``𝔅_gmc = (X − ε)₊²/ρ̄``. *fourth*: L1 squared and ``1/ρ̄ ≤ 1/(1+ε)`` on ``X > ε`` give
  ``𝔅 ≤ X⁴/(16ε²(1+ε))``, so by L4 ``E𝔅_gmc ≤ (3σ⁴/G² + (μ₄−3σ⁴)/G³)/(16ε²(1+ε))``.
  *second*: ``(X−ε)₊/ρ̄ ≤ 1`` and L1 give ``𝔅 ≤ (X−ε)₊ ≤ X²/(4ε)``, so ``E𝔅_gmc ≤ σ²/(4εG)``.
- tis: ``𝔅_tis = (1/G)Σ(ρ_i−1−ε)₊²/ρ_i``, the gmc argument with G = 1 per sample:
  *fourth* ``μ₄/(16ε²(1+ε))``; *second* ``σ²/(4ε)``. No G.
- tic: ``𝔅_tic = (1/G)Σ ρ_i 1{ρ_i − 1 > ε}``; L2 gives *fourth* ``E[ρ(ρ−1)⁴]/ε⁴``, *second*
  ``E[ρ(ρ−1)²]/ε²`` (``m_tic`` stands for the moment of the chosen tail). No G.

Orders as ε → 0 (fourth / second): gmc ε⁻² / ε⁻¹, tis ε⁻² / ε⁻¹, tic ε⁻⁴ / ε⁻²; as G → ∞: gmc G⁻² / G⁻¹,
tis and tic G⁰. Under C6 every fourth-tail bound is O((ηd)⁴). The tail inequality is a parameter
(``tail = "fourth" | "second"``) because it is a choice of the reconstruction (docs/THEORY.md §3, C4).
"""
from __future__ import annotations

import functools

import sympy as sp

from . import c6_overlap as c6
from .lemmas import derive_indicator, derive_plus_part, indicator_bound, mean_moment, plus_part_bound
from .proof import Derivation, exponent, is_zero, nonneg
from .symbols import G, X, eps, m_tic, rho, s, t

NAMES = ("gmc", "tis", "tic")
TAILS = ("fourth", "second")

#: (exponent in ε as ε→0, exponent in G as G→∞) that docs/THEORY.md states, per (estimator, tail)
EXPECTED_EXPONENTS = {
    ("gmc", "fourth"): (-2, -2), ("tis", "fourth"): (-2, 0), ("tic", "fourth"): (-4, 0),
    ("gmc", "second"): (-1, -1), ("tis", "second"): (-1, 0), ("tic", "second"): (-2, 0),
}


def pointwise_bound(name: str, tail: str) -> sp.Expr:
    """Pointwise majorant of the per-group (gmc) or per-sample (tis, tic) bias functional, in X."""
    if name in ("gmc", "tis"):
        if tail == "fourth":
            return plus_part_bound(X, eps) ** 2 / (1 + eps)
        return plus_part_bound(X, eps)
    if name == "tic":
        return rho * indicator_bound(X, eps, 4 if tail == "fourth" else 2)
    raise ValueError(name)


def _expect(expr: sp.Expr, group: sp.Expr) -> sp.Expr:
    """E over the group: X^k ↦ E(ρ̄−1)^k from L4 (``group`` = G for gmc, 1 for a single sample);
    ρX^k ↦ m_tic."""
    poly = sp.Poly(sp.expand(expr), X, rho)
    out = sp.Integer(0)
    for (kx, kr), coef in poly.terms():
        out += coef * (m_tic if kr == 1 else mean_moment(kx).subs(G, group))
    return sp.simplify(out)


@functools.cache
def bias_bound_expr(name: str, tail: str = "fourth") -> sp.Expr:
    """The C4 bound on E[𝔅_name] as a sympy expression in ε, G, σ², μ₄, m_tic."""
    if tail not in TAILS:
        raise ValueError(f"tail must be one of {TAILS}, got {tail!r}")
    return _expect(pointwise_bound(name, tail), G if name == "gmc" else 1)


def _certify_pointwise(der: Derivation) -> None:
    der.add("L1: (X−ε)₊ ≤ X²/(4ε)", derive_plus_part().ok)
    der.add("L2: 1{X>ε} ≤ X²/ε², X⁴/ε⁴", derive_indicator().ok)
    a, s1 = sp.symbols("a s1", nonnegative=True)
    ok, cert = nonneg((a + s1) ** 2 - a**2)
    der.add("0 ≤ A ≤ B ⇒ A² ≤ B² (L1 squared)", ok, cert)
    ok, cert = nonneg(1 / (1 + eps) - 1 / (1 + eps + t))
    der.add("X = ε+t > ε ⇒ 1/ρ̄ = 1/(1+X) ≤ 1/(1+ε)", ok, cert)
    ok, cert = nonneg(1 - t / (1 + eps + t))
    der.add("X > ε ⇒ (X−ε)₊/ρ̄ ≤ 1 (second-tail step)", ok, cert)
    # End-to-end: the composed bound dominates 𝔅 = (X−ε)₊²/(1+X) on both branches. On X = ε+t the
    # cleared numerator is matched against a sum-of-squares certificate (found by hand, checked here).
    sos = {"fourth": (1 + eps) * (eps - t) ** 2 * (eps**2 + 6 * eps * t + t**2) + t * (eps + t) ** 4,
           "second": (1 + eps) * (eps + t) ** 2 + t * (eps - t) ** 2}
    for tail in TAILS:
        pb = pointwise_bound("gmc", tail)
        ok_lo = nonneg(pb.subs(X, eps - s))[0]
        num, den = sp.fraction(sp.together(pb.subs(X, eps + t) - t**2 / (1 + eps + t)))
        ratio = sp.cancel(num / sos[tail])  # must be a positive factor: num = ratio · SOS
        ok_hi = (den * ratio).is_positive is True and nonneg(sos[tail])[0] and is_zero(num - ratio * sos[tail])
        der.add(f"gmc/tis {tail}: (X−ε)₊²/(1+X) ≤ pointwise bound on X ≤ ε and X > ε (SOS)", ok_lo and ok_hi,
                f"numerator ∝ {sos[tail]}")


@functools.cache
def derive(expected=None) -> Derivation:
    """Derive all six bounds and read off their orders; ``expected`` overrides the exponent table
    (to show that a wrong exponent fails)."""
    expected = dict(EXPECTED_EXPONENTS if expected is None else expected)
    der = Derivation()
    _certify_pointwise(der)
    for (name, tail), (pe, pg) in expected.items():
        b = bias_bound_expr(name, tail)
        got = (exponent(b, eps, 0), exponent(b, G, sp.oo))
        der.add(f"{name}/{tail}: order ε^{got[0]} (ε→0), G^{got[1]} (G→∞)", got == (pe, pg), got)
        der.results[f"E𝔅_{name} ({tail})"] = b
        der.results[f"order {name} ({tail})"] = f"ε^{got[0]}, G^{got[1]}"
    for tail in TAILS:
        g1 = sp.Symbol("g", nonnegative=True)  # G = 1 + g tells sympy that G ≥ 1
        ratio = sp.factor(sp.expand((bias_bound_expr("tic", tail) / bias_bound_expr("gmc", tail)).subs(G, 1 + g1)))
        r = sp.limit(ratio, eps, 0)
        der.add(f"{tail}: tic/gmc bound → ∞ as ε → 0", r is sp.oo, r)
    # under C6 the moments are bounded by powers of e^{κηdM} − 1, so the fourth-tail terms are O((ηd)⁴)
    subs = {sp.Symbol("sigma2", positive=True): c6.SIGMA2_BOUND, sp.Symbol("mu4", positive=True): c6.MU4_BOUND,
            m_tic: c6.M_TIC_BOUND}
    for name in NAMES:
        p = exponent(c6.in_h(bias_bound_expr(name, "fourth").subs(subs)), c6.h, 0)
        der.add(f"{name}/fourth under C6: order (ηd)^{p}", p == 4, p)
    return der
