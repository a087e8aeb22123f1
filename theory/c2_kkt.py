"""C2 — GMC minimises the ratio-based bias functional over 𝒲_ε (docs/THEORY.md §3 C2).

``𝔅(w;ρ) = (1/G) Σ_i (ρ_i − w_i)²/ρ_i`` is strictly convex in w (Hessian diag 2/(Gρ_i) > 0) and
𝒲_ε(ρ) is a polytope, so the KKT conditions are necessary and sufficient and the minimiser is unique.
Stationarity with multiplier λ ≥ 0 of the mass constraint gives ``w_i = (1 − λ/2)·ρ_i = cρ_i``:
one common factor. Complementary slackness gives ``c = 1`` when ρ̄ ≤ 1+ε and ``cρ̄ = 1+ε`` otherwise,
i.e. ``c = min(1, (1+ε)/ρ̄)`` (= gmc), and the minimum is ``(ρ̄ − 1 − ε)₊²/ρ̄``.
Removed mass: gmc removes ``(ρ̄−1−ε)₊ ≤ (1/G) Σ (ρ_i−1−ε)₊`` (tis, Jensen) ``≤ (1/G) Σ ρ_i 1{ρ_i>1+ε}``
(tic); and since tis, tic ∈ 𝒲_ε, ``𝔅_tis, 𝔅_tic ≥ 𝔅_gmc``.
"""
from __future__ import annotations

import functools

import sympy as sp

from .proof import Derivation, is_zero, nonneg, resolve_minmax
from .symbols import G, eps, rho, rhobar, s, t

lam = sp.Symbol("lambda", nonnegative=True)
w_i = sp.Symbol("w_i", real=True)

#: gmc's common factor, as derived below
GMC_FACTOR = sp.Min(1, (1 + eps) / rhobar)
#: min over 𝒲_ε(ρ) of 𝔅(w;ρ), as a function of ρ̄
GMC_MIN_VALUE = sp.Max(rhobar - 1 - eps, 0) ** 2 / rhobar


@functools.cache
def derive(factor=None) -> Derivation:
    """Run the KKT derivation; ``factor`` (a function of ρ̄, ε) replaces the derived common factor to
    show that a wrong candidate fails the checks."""
    der = Derivation()
    # the i-th coordinate's share of the Lagrangian (box multipliers vanish at an interior point 0 < w_i < ρ_i)
    lag_i = (rho - w_i) ** 2 / (G * rho) + lam * w_i / G
    der.add("strict convexity: ∂²𝔅/∂w_i² = 2/(Gρ_i) > 0", sp.diff(lag_i, w_i, 2).is_positive is True,
            sp.diff(lag_i, w_i, 2))
    (w_star,) = sp.solve(sp.diff(lag_i, w_i), w_i)
    c_kkt = sp.simplify(w_star / rho)
    der.add("stationarity ⇒ w_i = cρ_i with c independent of i", not c_kkt.has(rho), f"c = {c_kkt}")
    # case A: λ = 0 (mass constraint slack) ⇒ c = 1, feasible iff ρ̄ ≤ 1+ε
    c_a = c_kkt.subs(lam, 0)
    der.add("case λ = 0: c = 1", c_a == 1)
    # case B: constraint active, c ρ̄ = 1+ε
    (lam_b,) = sp.solve(sp.Eq(c_kkt * rhobar, 1 + eps), lam)
    c_b = sp.simplify(c_kkt.subs(lam, lam_b))
    ok, cert = nonneg(lam_b.subs(rhobar, 1 + eps + s))
    der.add("case active: λ = 2(1 − (1+ε)/ρ̄) ≥ 0 iff ρ̄ ≥ 1+ε (dual feasibility)", ok, cert)
    ok1, _ = nonneg((1 - c_b).subs(rhobar, 1 + eps + s))
    ok2 = c_b.subs(rhobar, 1 + eps + s).is_positive is True
    der.add("case active: 0 < c ≤ 1, so 0 < w_i ≤ ρ_i (box inactive, consistent)", ok1 and ok2)
    # the two KKT branches glue into min(c_A, c_B); the branch checks below confirm the gluing
    cand = sp.Min(c_a, c_b) if factor is None else factor(rhobar, eps)
    # compare branch by branch; ρ̄ = (1+ε)/(1+t) sweeps (0, 1+ε), ρ̄ = 1+ε+t sweeps (1+ε, ∞)
    for br, val, want in (("ρ̄ < 1+ε", (1 + eps) / (1 + t), c_a), ("ρ̄ > 1+ε", 1 + eps + t, c_b)):
        got = sp.simplify(resolve_minmax(cand.subs(rhobar, val)))
        der.add(f"candidate factor = KKT factor on branch {br}", is_zero(got - want.subs(rhobar, val)), got)
    ok, _ = nonneg(((1 + eps) / rhobar - 1).subs(rhobar, (1 + eps) / (1 + t)))
    der.add("(1+ε)/ρ̄ ≥ 1 iff ρ̄ ≤ 1+ε, so the KKT factor is min(1, (1+ε)/ρ̄)", ok)
    # minimum value 𝔅(cρ;ρ) = (1/G)Σ(1−c)²ρ_i = (1−c)²ρ̄
    val_b = sp.simplify((1 - c_b) ** 2 * rhobar)
    der.add("minimum on ρ̄ > 1+ε: (1−c)²ρ̄ = (ρ̄−1−ε)²/ρ̄", is_zero(val_b - (rhobar - 1 - eps) ** 2 / rhobar))
    der.add("minimum on ρ̄ ≤ 1+ε: 0", (1 - c_a) ** 2 * rhobar == 0)
    removed_b = sp.simplify((1 - c_b) * rhobar)
    der.add("gmc removed mass (1−c)ρ̄ = ρ̄ − 1 − ε on the active branch", is_zero(removed_b - (rhobar - 1 - eps)))
    # Jensen via two linear minorants: (y)₊ ≥ y and (y)₊ ≥ 0, so mean (y_i)₊ ≥ max(mean y_i, 0)
    y = sp.Symbol("y", real=True)
    for br, sub in (("y ≥ 0", s), ("y < 0", -t)):
        ok = all(nonneg(sp.Max(y, 0).subs(y, sub) - m.subs(y, sub))[0] for m in (y, sp.Integer(0)))
        der.add(f"Jensen minorants (y)₊ ≥ y, (y)₊ ≥ 0 on branch {br}", ok)
    ok, cert = nonneg(rho - (rho - 1 - eps))
    der.add("tic removes ρ_i ≥ (ρ_i−1−ε)₊ per capped sample", ok, cert)
    der.results["minimiser"] = sp.Eq(w_i, sp.Min(1, (1 + eps) / rhobar) * rho)
    der.results["min 𝔅"] = GMC_MIN_VALUE
    der.results["removed mass"] = sp.Max(rhobar - 1 - eps, 0)
    return der
