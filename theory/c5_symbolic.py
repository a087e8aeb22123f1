"""C5, symbolic layer: the assembled bound and its closed-form optima (docs/THEORY.md §3 C5).

For L-smooth J and ascent θ_{k+1} = θ_k + ηĝ_k:

    (1/K) Σ E‖∇J(θ_k)‖² ≤ 2ΔJ/(ηK) + LηM₂(ε) + c_B·E[𝔅] + c_G/G.

The delay term is the C4 fourth-tail bound under C6 at leading order, ``C η⁴d⁴ ε^{p_ε} G^{p_G}``, with
the exponents read off by sympy in C4: gmc ``Cη⁴d⁴/(ε²G²)``, tis ``Cη⁴d⁴/ε²``, tic ``Cη⁴d⁴/ε⁴``.
This module holds only sympy expressions; :mod:`theory.bounds` lambdifies them and
:mod:`theory.c5_tuning` / :mod:`theory.c5_local` add the numeric optimisation on top (so the import
graph is one-way: c5_symbolic → bounds → c5_tuning, c5_local).
"""
from __future__ import annotations

import functools

import sympy as sp

from . import c4_bias as c4
from .c1_second_moment import M2
from .symbols import C, G, K, L, c_G, d, dJ, eps, eta

EXPECTED_TUNED_EXPONENTS = {
    "gmc": (sp.Rational(-4, 5), sp.Rational(4, 5), sp.Rational(-2, 5), sp.Rational(-2, 5)),
    "tis": (sp.Rational(-4, 5), sp.Rational(4, 5), sp.Rational(-2, 5), 0),
    "tic": (sp.Rational(-4, 5), sp.Rational(4, 5), sp.Rational(-4, 5), 0),
}


@functools.cache
def delay_term(name: str) -> sp.Expr:
    """Leading-order C4 delay term ``C η⁴ d⁴ ε^{p_ε} G^{p_G}`` with exponents read off by sympy."""
    b = c4.bias_bound_expr(name, "fourth")
    pe, pg = c4.exponent(b, eps, 0), c4.exponent(b, G, sp.oo)
    return C * eta**4 * d**4 * eps**pe * G**pg


def assembled(name: str, m2: sp.Expr = M2) -> sp.Expr:
    """The C5 bound ``2ΔJ/(ηK) + LηM₂(ε) + delay + c_G/G`` for estimator ``name``."""
    return 2 * dJ / (eta * K) + L * eta * m2 + delay_term(name) + c_G / G


@functools.cache
def eta_star_expr(name: str) -> sp.Expr:
    """Closed-form minimiser over η of ``2ΔJ/(ηK) + delay`` (variance term dropped)."""
    obj = 2 * dJ / (eta * K) + delay_term(name)
    sols = sp.solve(sp.diff(obj, eta), eta)
    if len(sols) != 1:
        raise ArithmeticError(f"expected one positive stationary point, got {sols}")
    return sp.simplify(sols[0])


@functools.cache
def tuned_expr(name: str) -> sp.Expr:
    """``min_η [2ΔJ/(ηK) + delay]``: the tuned delay-dependent term."""
    return sp.simplify((2 * dJ / (eta * K) + delay_term(name)).subs(eta, eta_star_expr(name)))


@functools.cache
def eps_star_gmc_expr() -> sp.Expr:
    """Minimiser over ε of ``LηM₂(ε) + Cη⁴d⁴/(ε²G²)`` (the GMC ε/G trade-off)."""
    obj = L * eta * M2 + delay_term("gmc")
    (sol,) = sp.solve(sp.diff(obj, eps), eps)
    return sp.simplify(sol)


def log_exponent(expr: sp.Expr, var: sp.Symbol) -> sp.Expr:
    """Elasticity ``∂ log expr/∂ log var`` (a constant for a monomial)."""
    return sp.simplify(var * sp.diff(sp.log(expr), var))


@functools.cache
def variance_only_expr() -> sp.Expr:
    """``min_η [2ΔJ/(ηK) + LηM₂(ε)] = 2√(2ΔJ·L·M₂(ε)/K)``: the tuned bound when the delay term is negligible."""
    obj = 2 * dJ / (eta * K) + L * eta * M2
    sols = [r for r in sp.solve(sp.diff(obj, eta), eta) if r.is_positive is not False]
    if len(sols) != 1:
        raise ArithmeticError(f"expected one positive stationary point, got {sols}")
    return sp.simplify(obj.subs(eta, sols[0]))


@functools.cache
def log_G_derivative(name: str) -> sp.Expr:
    """``∂B/∂log G = G·∂B/∂G`` of the assembled bound at fixed η (c_G kept symbolic).

    By the envelope theorem ``d log B*/d log G = (G ∂B/∂G)/B`` at ``η = η*(G)``, since ``∂B/∂η = 0`` there.
    """
    return sp.simplify(G * sp.diff(assembled(name), G))
