"""Small proof kernel: a derivation is a list of steps, each one checked by sympy.

A step is certified only when sympy *decides* it (``is_nonnegative is True``, ``simplify(...) == 0``);
an undecided ``None`` counts as a failure, so a check can never pass by default.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy as sp


@dataclass(frozen=True)
class Step:
    """One certified step: what is claimed, whether sympy verified it, and the certificate."""

    claim: str
    ok: bool
    certificate: str = ""


@dataclass
class Derivation:
    """The outcome of deriving a result: the steps, and named results (sympy objects or text)."""

    steps: list[Step] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(st.ok for st in self.steps)

    def add(self, claim: str, ok: bool, certificate: Any = "") -> bool:
        self.steps.append(Step(claim, bool(ok), str(certificate)))
        return bool(ok)

    def failed(self) -> list[Step]:
        return [st for st in self.steps if not st.ok]


def nonneg(expr: sp.Expr) -> tuple[bool, sp.Expr]:
    """Certify ``expr ≥ 0``: factor it, then let sympy's sign rules decide the factored form.

    A factored form that is a product of positive symbols, even powers and positive constants is a
    sum-of-squares / sign certificate; sympy returning ``None`` is reported as not proved.
    """
    if expr.is_nonnegative is True:  # already in certificate form (e.g. a weighted sum of squares)
        return True, expr
    f = sp.factor(sp.together(sp.expand(expr)))
    return f.is_nonnegative is True, f


def positive(expr: sp.Expr) -> tuple[bool, sp.Expr]:
    """Certify ``expr > 0`` the same way as :func:`nonneg` (expanding first exposes positive sums)."""
    e = sp.expand(expr)
    if e.is_positive is True:
        return True, e
    f = sp.factor(sp.together(e))
    return f.is_positive is True, f


def is_zero(expr: sp.Expr) -> bool:
    """True when sympy simplifies ``expr`` to exactly 0."""
    return sp.simplify(sp.expand(expr)) == 0


def above(var: sp.Symbol, a: sp.Expr, expr: sp.Expr, slack: sp.Symbol) -> sp.Expr:
    """Restrict ``expr`` to the branch ``var > a`` (or ``≥``) by the substitution ``var = a + slack``."""
    return expr.subs(var, a + slack)


def exponent(expr: sp.Expr, var: sp.Symbol, point) -> sp.Expr:
    """Order of ``expr`` in ``var`` at ``point``: ``lim log(expr)/log(var)``.

    At ``point = 0`` this is p in expr ≍ var^p as var → 0; at ``∞`` it is p in expr ≍ var^p.
    """
    return sp.limit(sp.log(expr) / sp.log(var), var, point)


def resolve_minmax(expr: sp.Expr) -> sp.Expr:
    """Evaluate every two-argument Min/Max in ``expr`` whose order sympy can certify on the current
    assumptions (used on a branch after the substitution ``var = a ± slack``)."""

    def pick(e):
        a, b = e.args if len(e.args) == 2 else (None, None)
        if a is None:
            return e
        a_le_b = nonneg(b - a)[0]
        b_le_a = nonneg(a - b)[0]
        if isinstance(e, sp.Min):
            return a if a_le_b else b if b_le_a else e
        return b if a_le_b else a if b_le_a else e

    return expr.replace(lambda e: isinstance(e, (sp.Min, sp.Max)), pick)
