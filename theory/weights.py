"""Exact weight maps of docs/THEORY.md §2 and the class 𝒲_ε, for exact (rational) arithmetic.

``w = W_ε(ρ)`` for ρ a sequence of ratios; works on ``fractions.Fraction`` / sympy ``Rational`` /
floats alike. These are theory/'s own reference versions, used for exact enumeration (C1, C2, C7, C8);
the production kernels live in asyncgrpo/.

- onpolicy ``w_i = 1``; is ``w_i = ρ_i``; tis ``w_i = min(ρ_i, 1+ε)``; tic ``w_i = ρ_i·1{ρ_i ≤ 1+ε}``;
  gmc ``w_i = ρ_i·min(1, (1+ε)/ρ̄)``; snis ``w_i = ρ_i/ρ̄``.
- ``𝒲_ε(ρ) = {w : 0 ≤ w_i ≤ ρ_i, (1/G) Σ w_i ≤ 1+ε}``.
"""
from __future__ import annotations

from collections.abc import Sequence


def _mean(v: Sequence) -> object:
    return sum(v) / len(v)


def weights(name: str, rho: Sequence, eps) -> list:
    """``W_ε(ρ)`` for estimator ``name`` (formulas in the module docstring)."""
    cap = 1 + eps
    if name == "onpolicy":
        return [1 + 0 * r for r in rho]
    if name == "is":
        return list(rho)
    if name == "tis":
        return [min(r, cap) for r in rho]
    if name == "tic":
        return [r if r <= cap else 0 * r for r in rho]
    if name == "gmc":
        c = min(1, cap / _mean(rho))
        return [c * r for r in rho]
    if name == "snis":
        rb = _mean(rho)
        return [r / rb for r in rho]
    raise ValueError(f"unknown estimator {name!r}")


ESTIMATORS = ("onpolicy", "is", "tis", "tic", "gmc", "snis")
IN_CLASS = ("tis", "tic", "gmc")  # the estimators docs/THEORY.md places in 𝒲_ε


def in_class(w: Sequence, rho: Sequence, eps, tol=0) -> bool:
    """Membership ``w ∈ 𝒲_ε(ρ)``; ``tol`` only for floating-point inputs."""
    box = all(-tol <= wi <= ri + tol for wi, ri in zip(w, rho, strict=True))
    return box and _mean(w) <= 1 + eps + tol


def bias_functional(w: Sequence, rho: Sequence):
    """Ratio-based bias functional ``𝔅(w;ρ) = (1/G) Σ (ρ_i − w_i)²/ρ_i``."""
    return _mean([(r - wi) ** 2 / r for wi, r in zip(w, rho, strict=True)])


def removed_mass(w: Sequence, rho: Sequence):
    """Removed mass ``(1/G) Σ (ρ_i − w_i)``."""
    return _mean([r - wi for wi, r in zip(w, rho, strict=True)])
