"""C5 — the assembled bound and step-size tuning: GMC's delay term ∝ G^{−2/5}.

For L-smooth J and ascent θ_{k+1} = θ_k + ηĝ_k (constants c_B, c_G as in THEORY.md):

    (1/K) Σ E‖∇J(θ_k)‖² ≤ 2ΔJ/(ηK) + LηM₂(ε) + c_B·E[𝔅] + c_G/G.

The delay term is the C4 fourth-tail bound under C6, kept to leading order: ``C η⁴d⁴ ε^{p_ε} G^{p_G}``
with the exponents read off by sympy in C4 — gmc ``Cη⁴d⁴/(ε²G²)``, tis ``Cη⁴d⁴/ε²``, tic ``Cη⁴d⁴/ε⁴``.
Dropping the variance term, ``η* = (ΔJ ε^{−p_ε} G^{−p_G}/(2CKd⁴))^{1/5}`` and the tuned value
``min_η [2ΔJ/(ηK) + delay] = (5/2)·ΔJ/(η*K) ∝ K^{−4/5} d^{4/5} ε^{p_ε/5} G^{p_G/5}``:
gmc ``(−4/5, 4/5, −2/5, −2/5)``, tic ``(−4/5, 4/5, −4/5, 0)``, tis ``(−4/5, 4/5, −2/5, 0)`` in (K, d, ε, G).
With ``LηM₂`` kept the optimum is found numerically (scipy) and its log-log slopes are reported.
GMC's ε trade-off, ``min_ε LηM₂(ε) + Cη⁴d⁴/(ε²G²)``, gives ``ε* = (2Cη³d⁴/(L·E_π[A²‖s‖²]·G²))^{1/3}``.
"""
from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from . import c4_bias as c4
from .c1_second_moment import M2
from .proof import Derivation, is_zero
from .symbols import C, G, K, L, c_G, d, dJ, eps, eta

EXPECTED_TUNED_EXPONENTS = {
    "gmc": (sp.Rational(-4, 5), sp.Rational(4, 5), sp.Rational(-2, 5), sp.Rational(-2, 5)),
    "tis": (sp.Rational(-4, 5), sp.Rational(4, 5), sp.Rational(-2, 5), 0),
    "tic": (sp.Rational(-4, 5), sp.Rational(4, 5), sp.Rational(-4, 5), 0),
}
#: the regime of the numeric fit with LηM₂ kept: delay-dominated (tiny L·E[A²‖s‖²]); each
#: variable is swept over the given decades with the others at their base value
FIT_BASE = {"K": 1e4, "d": 8.0, "eps": 0.05, "G": 8.0, "dJ": 1.0, "C": 1.0, "L": 1.0, "second_moment": 1e-9}
FIT_SWEEP = {"K": (1e3, 1e6), "d": (1.0, 1e2), "eps": (1e-3, 1e-1), "G": (1.0, 1e2)}
FIT_TOL = 0.05


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


def fitted_exponents(name: str, base=None, sweep=None) -> dict[str, float]:
    """Slopes of log min_η(full bound) against log K, d, ε, G from the scipy optimum (variance kept)."""
    from .bounds import assembled_bound, eta_star_numeric  # numeric layer, built from this module

    base = dict(FIT_BASE if base is None else base)
    sweep = FIT_SWEEP if sweep is None else sweep
    out = {}
    for var, (lo, hi) in sweep.items():
        xs = np.geomspace(lo, hi, 7)
        vals = []
        for xv in xs:
            p = {**base, var: xv}
            e = eta_star_numeric(name, p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], C=p["C"], L=p["L"],
                                 second_moment=p["second_moment"])
            # c_G/G is η-independent and not part of the tuned term
            vals.append(assembled_bound(name, e, p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], L=p["L"],
                                        second_moment=p["second_moment"], C=p["C"], c_G=0.0))
        out[var] = float(np.polyfit(np.log(xs), np.log(vals), 1)[0])
    return out


@functools.cache
def derive(expected=None) -> Derivation:
    """Closed-form optimum, exponents, numeric fit and ε*; ``expected`` (tuple of (name, exps)) overrides
    the exponent table to show a wrong exponent fails."""
    expected = dict(EXPECTED_TUNED_EXPONENTS if expected is None else expected)
    der = Derivation()
    for name, want in expected.items():
        es = eta_star_expr(name)
        obj = 2 * dJ / (eta * K) + delay_term(name)
        der.add(f"{name}: unique positive η*, ∂²/∂η² > 0 there",
                sp.simplify(sp.diff(obj, eta, 2).subs(eta, es)).is_positive is True, f"η* = {es}")
        got = tuple(log_exponent(tuned_expr(name), v) for v in (K, d, eps, G))
        der.add(f"{name}: tuned term ∝ K^{got[0]} d^{got[1]} ε^{got[2]} G^{got[3]}",
                all(is_zero(g - w) for g, w in zip(got, want)), got)
        der.add(f"{name}: tuned = (5/2)ΔJ/(η*K)", is_zero(tuned_expr(name) - sp.Rational(5, 2) * dJ / (es * K)))
        fit = fitted_exponents(name)
        der.add(f"{name}: variance kept, fitted slopes within {FIT_TOL} of closed form",
                all(abs(fit[k] - float(w)) < FIT_TOL for k, w in zip(("K", "d", "eps", "G"), want)),
                {k: round(v, 3) for k, v in fit.items()})
        der.results[f"η* {name}"] = es
        der.results[f"exponents {name} (K,d,ε,G)"] = got
        der.results[f"fitted {name} (K,d,ε,G)"] = tuple(round(fit[k], 3) for k in ("K", "d", "eps", "G"))
    es = eps_star_gmc_expr()
    obj = L * eta * M2 + delay_term("gmc")
    der.add("gmc: ε* is a minimum (∂²/∂ε² > 0)", sp.simplify(sp.diff(obj, eps, 2).subs(eps, es)).is_positive is True, es)
    der.add("gmc: ε* ∝ G^{−2/3} d^{4/3} η",
            [log_exponent(es, v) for v in (G, d, eta)] == [sp.Rational(-2, 3), sp.Rational(4, 3), 1])
    der.results["ε* gmc"] = es
    der.results["bound"] = assembled("gmc")
    return der
