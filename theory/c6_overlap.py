"""C6 — local policy overlap (docs/THEORY.md §3 C6).

Assume ``|log π_θ(τ) − log π_θ'(τ)| ≤ κ‖θ − θ'‖`` on the support and ``‖θ_k − θ_{k−d}‖ ≤ ηdM``.
Then the log-ratio obeys ``|ℓ| ≤ δ := κηdM`` and, because ``ℓ ↦ e^ℓ − 1`` is increasing and
``e^δ − 1 ≥ 1 − e^{−δ}``,

    |ρ − 1| ≤ e^{κηdM} − 1,   σ² = E_μ(ρ−1)² ≤ (e^{κηdM} − 1)²,
    μ₄ ≤ (e^{κηdM} − 1)⁴,     E_μ[ρ(ρ−1)⁴] ≤ e^{κηdM}(e^{κηdM} − 1)⁴,

with ``(e^{κηdM} − 1)² = κ²M²(ηd)² + κ³M³(ηd)³ + (7/12)κ⁴M⁴(ηd)⁴ + O((ηd)⁵)``.
"""
from __future__ import annotations

import functools

import sympy as sp

from .proof import Derivation, exponent, is_zero, nonneg
from .symbols import M, d, eta, kappa

h = sp.Symbol("h", positive=True)  # h = ηd, the parameter distance in units of M/…
delta = kappa * eta * d * M  # δ = κηdM, bound on |ℓ|
RHO_DEV = sp.exp(delta) - 1  # bound on |ρ − 1|
SIGMA2_BOUND = RHO_DEV**2
MU4_BOUND = RHO_DEV**4
M_TIC_BOUND = sp.exp(delta) * RHO_DEV**4


def in_h(expr: sp.Expr) -> sp.Expr:
    """Rewrite an expression in η, d as one in h = ηd (they enter only through the product)."""
    return sp.simplify(expr.subs(eta, h / d))


@functools.cache
def derive(order: int = 4) -> Derivation:
    der = Derivation()
    ell = sp.Symbol("ell", real=True)
    der.add("ℓ ↦ e^ℓ − 1 is increasing", sp.diff(sp.exp(ell) - 1, ell).is_positive is True)
    u = sp.Symbol("u", positive=True)  # u = e^{δ/2}
    ok, cert = nonneg((u**2 - 1) - (1 - 1 / u**2))
    der.add("e^δ − 1 ≥ 1 − e^{−δ}  (u = e^{δ/2}: u² + u⁻² − 2 = (u − 1/u)²)", ok, cert)
    # |y| ≤ b ⇒ y^k ≤ b^k for k = 2, 4: write y² = b²/(1+s), s ≥ 0
    b, s_ = sp.Symbol("b", positive=True), sp.Symbol("s", nonnegative=True)
    ok = all(nonneg(b**k - (b**2 / (1 + s_)) ** (k // 2))[0] for k in (2, 4))
    der.add("hence |ρ−1| ≤ e^δ−1 ⇒ σ² = E(ρ−1)² ≤ (e^δ−1)², μ₄ ≤ (e^δ−1)⁴; and ρ ≤ e^δ", ok)
    ser = sp.series(in_h(SIGMA2_BOUND), h, 0, order + 1).removeO()
    want = kappa**2 * M**2 * h**2 + kappa**3 * M**3 * h**3 + sp.Rational(7, 12) * kappa**4 * M**4 * h**4
    der.add("series of (e^{κMh}−1)² through h⁴", is_zero(ser - want), ser)
    p = exponent(in_h(SIGMA2_BOUND), h, 0)
    der.add("σ² bound is second order in ηd", p == 2, p)
    der.results["σ² ≤"] = SIGMA2_BOUND
    der.results["expansion"] = ser.subs(h, eta * d)
    return der
