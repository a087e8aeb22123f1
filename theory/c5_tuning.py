"""C5 — the assembled bound and step-size tuning: GMC's delay term ∝ G^{−2/5} (docs/THEORY.md §3 C5).

The closed forms live in :mod:`theory.c5_symbolic` (re-exported here); this module adds the numeric fits
and the derivation. A single fitted slope over G averages a G-dependent local exponent: the exact curve
``e(G) = d log B*/d log G`` and the G range where it is within 0.05 of −2/5 are in :mod:`theory.c5_local`.

For L-smooth J and ascent θ_{k+1} = θ_k + ηĝ_k (constants c_B, c_G as in docs/THEORY.md):

    (1/K) Σ E‖∇J(θ_k)‖² ≤ 2ΔJ/(ηK) + LηM₂(ε) + c_B·E[𝔅] + c_G/G.

The delay term is the C4 fourth-tail bound under C6, kept to leading order: ``C η⁴d⁴ ε^{p_ε} G^{p_G}``
with the exponents read off by sympy in C4 — gmc ``Cη⁴d⁴/(ε²G²)``, tis ``Cη⁴d⁴/ε²``, tic ``Cη⁴d⁴/ε⁴``.
Dropping the variance term, ``η* = (ΔJ ε^{−p_ε} G^{−p_G}/(2CKd⁴))^{1/5}`` and the tuned value
``min_η [2ΔJ/(ηK) + delay] = (5/2)·ΔJ/(η*K) ∝ K^{−4/5} d^{4/5} ε^{p_ε/5} G^{p_G/5}``:
gmc ``(−4/5, 4/5, −2/5, −2/5)``, tic ``(−4/5, 4/5, −4/5, 0)``, tis ``(−4/5, 4/5, −2/5, 0)`` in (K, d, ε, G).
With ``LηM₂`` kept the optimum is found numerically (scipy) and its log-log slopes are fitted in three
regimes (``FIT_REGIMES``): bias-dominated (the slopes reproduce the closed form above), variance-dominated
(they reproduce the variance-only limit ``min_η 2ΔJ/(ηK) + LηM₂ = 2√(2ΔJLM₂/K)``: K^{−1/2}, d⁰, G⁰,
ε-elasticity ε/(2(1+ε))), and comparable, where by the envelope theorem each local elasticity is a
convex combination of the two limits' (e.g. ``∂log B*/∂log K = −(T₂+4T₃)/(2T₂+5T₃) ∈ [−4/5, −1/2]``
with T₂ = LηM₂, T₃ = delay at the optimum), so the fitted slope lies between them: the K exponent
moves to −1/2 and GMC's G exponent flattens towards 0 as LηM₂ grows (the variance term has no G).
GMC's ε trade-off, ``min_ε LηM₂(ε) + Cη⁴d⁴/(ε²G²)``, gives ``ε* = (2Cη³d⁴/(L·E_π[A²‖s‖²]·G²))^{1/3}``.
"""
from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from . import c5_local
from .bounds import assembled_bound, eta_star_numeric
from .c1_second_moment import M2
from .c5_symbolic import (EXPECTED_TUNED_EXPONENTS, assembled, delay_term, eps_star_gmc_expr, eta_star_expr,
                          log_exponent, tuned_expr, variance_only_expr)
from .proof import Derivation, is_zero
from .symbols import C, G, K, L, S, c_G, d, dJ, eps, eta

__all__ = ["EXPECTED_TUNED_EXPONENTS", "FIT_BASE", "FIT_REGIMES", "FIT_SWEEP", "FIT_TOL", "FIT_VARS", "assembled",
           "closed_form_slopes", "delay_term", "derive", "eps_star_gmc_expr", "eta_star_expr", "fit_key",
           "fitted_exponents", "log_exponent", "tuned_expr", "variance_only_expr", "C", "G", "K", "L", "S", "c_G",
           "d", "dJ", "eps", "eta", "M2"]

#: regimes of the numeric fit with LηM₂ kept, set by E_π[A²‖s‖²] (``second_moment``) at otherwise equal
#: constants; each variable is swept over FIT_SWEEP's decades with the others at the base value.
#: At the base point η₀ (delay only) ≈ 0.018 and η_v (variance only) ≈ 0.014/√S, so S = 1e−9 is
#: bias-dominated over every sweep, S = 1e6 variance-dominated over every sweep, and S = 1 (the
#: default of figures.tuning.BoundConstants) crosses over inside the sweeps.
_FIT_CONSTS = {"K": 1e4, "d": 8.0, "eps": 0.05, "G": 8.0, "dJ": 1.0, "C": 1.0, "L": 1.0}
FIT_REGIMES = {
    "bias-dominated": {**_FIT_CONSTS, "second_moment": 1e-9},
    "comparable": {**_FIT_CONSTS, "second_moment": 1.0},
    "variance-dominated": {**_FIT_CONSTS, "second_moment": 1e6},
}
#: the bias-dominated base (figure 4's theory panel uses it): here the numeric optimum is the closed form
FIT_BASE = FIT_REGIMES["bias-dominated"]
FIT_SWEEP = {"K": (1e3, 1e6), "d": (1.0, 1e2), "eps": (1e-3, 1e-1), "G": (1.0, 1e2)}
FIT_VARS = ("K", "d", "eps", "G")
FIT_TOL = 0.05
LOCAL_TOL = 0.05  # |e(G) + 2/5| within which the −2/5 law is said to hold at G


def _grid(lo, hi):
    return np.geomspace(lo, hi, 7)


def fitted_exponents(name: str, base=None, sweep=None) -> dict[str, float]:
    """Least-squares slopes of log min_η B(η) against log K, d, ε, G from the scipy optimum (variance kept),
    ``B = 2ΔJ/(ηK) + LηM₂(ε) + delay`` (``c_G/G`` is η-independent and left out); 7 log-spaced points per sweep."""
    base = dict(FIT_BASE if base is None else base)
    sweep = FIT_SWEEP if sweep is None else sweep
    out = {}
    for var, (lo, hi) in sweep.items():
        xs = _grid(lo, hi)
        vals = []
        for xv in xs:
            p = {**base, var: xv}
            e = eta_star_numeric(name, p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], C=p["C"], L=p["L"],
                                 second_moment=p["second_moment"])
            vals.append(assembled_bound(name, e, p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], L=p["L"],
                                        second_moment=p["second_moment"], C=p["C"], c_G=0.0))
        out[var] = float(np.polyfit(np.log(xs), np.log(vals), 1)[0])
    return out


def closed_form_slopes(expr: sp.Expr, base=None, sweep=None) -> dict[str, float]:
    """The same 7-point log-log least-squares slopes as ``fitted_exponents``, of a closed form ``expr``
    (the exact exponent for a monomial; for the variance-only limit, the fit of ε/(2(1+ε))-elasticity)."""
    base = dict(FIT_BASE if base is None else base)
    sweep = FIT_SWEEP if sweep is None else sweep
    fn = sp.lambdify((K, d, eps, G, dJ, C, L, S), expr, modules="numpy")
    out = {}
    for var, (lo, hi) in sweep.items():
        xs = _grid(lo, hi)
        p = {**base, var: xs}
        vals = np.broadcast_to(fn(*(np.asarray(p[k], dtype=float) for k in
                                    ("K", "d", "eps", "G", "dJ", "C", "L", "second_moment"))), xs.shape)
        out[var] = float(np.polyfit(np.log(xs), np.log(vals), 1)[0])
    return out


def range_key(regime: str) -> str:
    """Result key of the G range where gmc's local exponent is within c5_local's tolerance of −2/5."""
    return f"G range |e(G)+2/5| ≤ {LOCAL_TOL} ({regime}, r₁={c5_local.RATIOS[regime]:g})"


def _local(der: Derivation) -> None:
    """C5 as a curve: the local G-exponent e(G) of the tuned bound per regime (:mod:`theory.c5_local`)."""
    grid = np.geomspace(*c5_local.G_RANGE, 41)
    for rg in c5_local.REGIMES:
        e = c5_local.local_exponent_at(grid, rg)
        der.add(f"{rg}: local exponent e(G) ∈ [−2/5, 0] and non-decreasing on G ∈ [1, 1e4]",
                bool(np.all(e >= -0.4 - 1e-9) and np.all(e <= 0) and np.all(np.diff(e) >= -1e-9)),
                f"e(1)={e[0]:.3f}, e(1e4)={e[-1]:.3g}")
        rng = c5_local.c5_exponent_range(rg, LOCAL_TOL)
        der.results[range_key(rg)] = rng if rng == "none" else f"[{rng[0]:.4g}, {rng[1]:.4g}]"
        pts = c5_local.local_exponent_at([1.0, 10.0, 100.0, 1e4], rg)
        der.results[f"e(G) at G=1,10,100,1e4 ({rg})"] = [round(float(x), 3) + 0.0 for x in pts]
    # the single-slope fit's own 'comparable' base: its G slope over [1, 100] averages a curve that runs to 0
    pts = c5_local.local_exponent_at([1.0, 10.0, 100.0], FIT_REGIMES["comparable"])
    der.results["e(G) at G=1,10,100 (fit base, comparable)"] = [round(float(x), 3) + 0.0 for x in pts]


def fit_key(name: str, regime: str) -> str:
    """Result key of the fitted slopes of ``name`` in ``regime`` (shown in ``python -m theory``)."""
    return f"fitted {name} (K,d,ε,G), {regime} E[A²‖s‖²]={FIT_REGIMES[regime]['second_moment']:g}"


def _r(fit):
    return tuple(round(fit[k], 3) + 0.0 for k in FIT_VARS)  # + 0.0: no "-0.0" in the table


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
        lim_b = closed_form_slopes(tuned_expr(name), FIT_REGIMES["bias-dominated"])
        lim_v = closed_form_slopes(variance_only_expr(), FIT_REGIMES["variance-dominated"])
        fits = {rg: fitted_exponents(name, base) for rg, base in FIT_REGIMES.items()}
        fb, fv, fc = fits["bias-dominated"], fits["variance-dominated"], fits["comparable"]
        der.add(f"{name}: bias-dominated, fitted slopes within {FIT_TOL} of the closed form",
                all(abs(fb[k] - lim_b[k]) < FIT_TOL for k in FIT_VARS) and
                all(abs(lim_b[k] - float(w)) < 1e-9 for k, w in zip(FIT_VARS, want)), _r(fb))
        der.add(f"{name}: variance-dominated, fitted slopes within {FIT_TOL} of the variance-only limit "
                f"2√(2ΔJLM₂/K)", all(abs(fv[k] - lim_v[k]) < FIT_TOL for k in FIT_VARS), (_r(fv), _r(lim_v)))
        # envelope theorem: every local elasticity is a convex combination of the limits' local ones; an OLS
        # slope is a positive-weight average of local slopes, so the comparable fit lies between the limits
        # (ε: the variance limit's elasticity ε/(2(1+ε)) varies over the sweep, so its range is used)
        eps_lo, eps_hi = FIT_SWEEP["eps"]
        span = {"K": (-0.5, float(want[0])), "d": (0.0, float(want[1])), "G": (0.0, float(want[3])),
                "eps": (eps_lo / (2 * (1 + eps_lo)), eps_hi / (2 * (1 + eps_hi)), float(want[2]))}
        der.add(f"{name}: comparable, each fitted slope between the two limits (envelope theorem)",
                all(min(span[k]) - 1e-6 <= fc[k] <= max(span[k]) + 1e-6 for k in FIT_VARS), _r(fc))
        for rg, fit in fits.items():
            der.results[fit_key(name, rg)] = _r(fit)
        der.results[f"η* {name}"] = es
        der.results[f"exponents {name} (K,d,ε,G)"] = got
    es = eps_star_gmc_expr()
    obj = L * eta * M2 + delay_term("gmc")
    der.add("gmc: ε* is a minimum (∂²/∂ε² > 0)", sp.simplify(sp.diff(obj, eps, 2).subs(eps, es)).is_positive is True, es)
    der.add("gmc: ε* ∝ G^{−2/3} d^{4/3} η",
            [log_exponent(es, v) for v in (G, d, eta)] == [sp.Rational(-2, 3), sp.Rational(4, 3), 1])
    der.results["ε* gmc"] = es
    _local(der)
    der.results["variance-only limit (K,d,ε,G)"] = tuple(log_exponent(variance_only_expr(), v) for v in (K, d, eps, G))
    der.results["bound"] = assembled("gmc")
    return der
