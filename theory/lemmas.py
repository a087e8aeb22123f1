"""Lemmas L1–L4, each proved symbolically.

- **L1** (plus-part): for ε > 0 and real x, ``(x − ε)₊ ≤ x²/(4ε)``, with equality at x = 2ε.
- **L2** (tail → moment): for ε > 0, real x and k ∈ {2, 4}, ``1{x > ε} ≤ x^k/ε^k``.
- **L3** (weighted Cauchy–Schwarz, the step of C1): for w_i ≥ 0 and vectors v_i,
  ``‖(1/G) Σ w_i v_i‖² ≤ ((1/G) Σ w_i)·((1/G) Σ w_i ‖v_i‖²)``; the gap is
  ``(1/(2G²)) Σ_{i,j} w_i w_j ‖v_i − v_j‖² ≥ 0`` (Lagrange identity).
- **L4** (moments of an i.i.d. mean): for ρ̄ the mean of G i.i.d. ratios with E ρ = 1, σ² = Var ρ,
  μ₄ = E(ρ−1)⁴: ``E(ρ̄−1)² = σ²/G`` and ``E(ρ̄−1)⁴ = 3σ⁴/G² + (μ₄−3σ⁴)/G³``.

The right-hand sides are exported as functions (``plus_part_bound``, ``indicator_bound``,
``mean_moment``) so that C4 composes them instead of retyping them.
"""
from __future__ import annotations

import functools

import sympy as sp

from .proof import Derivation, above, is_zero, nonneg, positive
from .symbols import G, eps, mu3, mu4, s, sigma2, t, x


def plus_part_bound(arg: sp.Expr, width: sp.Expr) -> sp.Expr:
    """L1 right-hand side: ``(arg − width)₊ ≤ arg²/(4·width)``."""
    return arg**2 / (4 * width)


def indicator_bound(arg: sp.Expr, width: sp.Expr, k: int) -> sp.Expr:
    """L2 right-hand side: ``1{arg > width} ≤ arg^k/width^k`` (k even)."""
    return arg**k / width**k


def derive_plus_part(rhs=None) -> Derivation:
    """Prove L1 by the case split x ≤ ε / x > ε; ``rhs`` may be replaced to show the check can fail."""
    rhs = plus_part_bound(x, eps) if rhs is None else rhs
    der = Derivation()
    ok, cert = nonneg(above(x, eps, rhs, -s))  # branch x ≤ ε, x = ε − s: (x−ε)₊ = 0 ≤ rhs
    der.add("x ≤ ε: 0 ≤ rhs", ok, cert)
    ok, cert = nonneg(above(x, eps, rhs - (x - eps), t))  # branch x > ε, x = ε + t
    der.add("x > ε: rhs − (x−ε) ≥ 0", ok, cert)
    eq = sp.solve(sp.Eq(rhs, x - eps), x)
    der.results["bound"] = sp.Max(x - eps, 0) <= rhs
    der.results["equality at"] = sp.Eq(x, eq[0]) if len(eq) == 1 else eq
    return der


def derive_indicator(k_values=(2, 4), rhs_of=None) -> Derivation:
    """Prove L2 for each k: on x ≤ ε the right side is ≥ 0, on x = ε + t it exceeds 1."""
    rhs_of = rhs_of or (lambda k: indicator_bound(x, eps, k))
    der = Derivation()
    for k in k_values:
        rhs = rhs_of(k)
        ok, cert = nonneg(rhs)
        der.add(f"k={k}, x ≤ ε: 0 ≤ x^{k}/ε^{k}", ok, cert)
        ok, cert = positive(above(x, eps, rhs, t) - 1)
        der.add(f"k={k}, x > ε: x^{k}/ε^{k} − 1 > 0", ok, cert)
        der.results[f"k={k}"] = f"1{{x>ε}} ≤ {sp.sstr(rhs)}"
    return der


def _vec(name: str, i: int, dim: int) -> sp.Matrix:
    return sp.Matrix(sp.symbols(f"{name}{i}_0:{dim}", real=True))


def derive_weighted_cs(group_sizes=(2, 3, 4), dim: int = 2) -> Derivation:
    """Prove L3: RHS − LHS equals the Lagrange sum of non-negative terms, for each G listed.

    The identity is checked as a polynomial identity in all coordinates. It holds for every G
    because both sides are sums over index pairs (i, j) whose (i, j)+(j, i) parts agree, which is
    the ``pair`` step below, checked with symbolic vectors.
    """
    der = Derivation()
    wi, wj = sp.symbols("w_i w_j", nonnegative=True)
    vi, vj = _vec("vi", 0, dim), _vec("vj", 0, dim)
    pair = wi * wj * (vi.dot(vi) + vj.dot(vj)) - 2 * wi * wj * vi.dot(vj)
    der.add("pair (i,j)+(j,i) term = w_i w_j ‖v_i − v_j‖²",
            is_zero(pair - wi * wj * (vi - vj).dot(vi - vj)))
    ok, cert = nonneg(wi * wj * (vi - vj).dot(vi - vj))
    der.add("w_i w_j ‖v_i − v_j‖² ≥ 0", ok, cert)
    for g in group_sizes:
        w = sp.symbols(f"w0:{g}", nonnegative=True)
        v = [_vec("v", i, dim) for i in range(g)]
        mean_wv = sum((w[i] * v[i] for i in range(g)), sp.zeros(dim, 1)) / g
        lhs = mean_wv.dot(mean_wv)
        rhs = (sum(w) / g) * (sum(w[i] * v[i].dot(v[i]) for i in range(g)) / g)
        gap = sum(w[i] * w[j] * (v[i] - v[j]).dot(v[i] - v[j])
                  for i in range(g) for j in range(g)) / (2 * g**2)
        der.add(f"G={g}: RHS − LHS − (1/2G²)Σ w_i w_j‖v_i−v_j‖² ≡ 0", is_zero(rhs - lhs - gap))
    der.results["gap"] = "(1/(2G²)) Σ_ij w_i w_j ‖v_i − v_j‖² ≥ 0"
    return der


def _expected_power_of_sum(g: int, k: int) -> sp.Expr:
    """E(Σ_{i<g} Y_i)^k for i.i.d. centred Y with E Y² = σ², E Y³ = μ₃, E Y⁴ = μ₄ (k ≤ 4)."""
    ys = sp.symbols(f"y0:{g}", real=True)
    moment = {0: sp.Integer(1), 1: sp.Integer(0), 2: sigma2, 3: mu3, 4: mu4}
    poly = sp.Poly(sp.expand(sum(ys) ** k), *ys)
    return sp.expand(sum(c * sp.prod(moment[p] for p in powers) for powers, c in poly.terms()))


@functools.cache
def mean_moment(k: int) -> sp.Expr:
    """E(ρ̄ − 1)^k for k ≤ 4, derived (not typed): E(Σ Y_i)^k is a polynomial in G of degree ≤ k
    (a pattern of b distinct indices occurs G(G−1)…(G−b+1) times), so exact values at
    G = 1..k+1 determine it by interpolation; divide by G^k."""
    pts = [(g, _expected_power_of_sum(g, k)) for g in range(1, k + 2)]
    poly_in_G = sp.expand(sp.interpolate(pts, G))
    return sp.expand(poly_in_G / G**k)


def derive_mean_moments() -> Derivation:
    """Prove L4: interpolate, cross-check at two further G, compare with docs/THEORY.md's form."""
    der = Derivation()
    for k in (2, 4):
        m = mean_moment(k)
        for g in (k + 2, k + 3):
            der.add(f"k={k}: interpolant exact at G={g}",
                    is_zero(m.subs(G, g) * g**k - _expected_power_of_sum(g, k)))
        der.results[f"E(ρ̄−1)^{k}"] = m
    der.add("E(ρ̄−1)² = σ²/G", is_zero(mean_moment(2) - sigma2 / G))
    der.add("E(ρ̄−1)⁴ = 3σ⁴/G² + (μ₄−3σ⁴)/G³",
            is_zero(mean_moment(4) - (3 * sigma2**2 / G**2 + (mu4 - 3 * sigma2**2) / G**3)))
    der.add("μ₃ drops out", not mean_moment(4).has(mu3))
    return der
