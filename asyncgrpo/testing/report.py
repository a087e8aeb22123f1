"""The report of :func:`asyncgrpo.testing.check_weight_map`: the properties' names, kinds and meanings, one
:class:`PropertyResult` per row and the :class:`WeightMapReport` that prints them and answers the four
questions (member of ``𝒲_ε``, numerically robust, pure, C2 minimiser). The checks themselves live in
:mod:`asyncgrpo.testing.properties`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

#: Properties whose failure means ``fn`` is not a member of ``𝒲_ε`` (judged where its output is finite).
MEMBERSHIP = ("real_valued", "nonnegative", "w_le_rho", "mean_le_1_plus_eps")
#: The kind of each property: membership, numerics, purity, structure, C2 (one summary line each but structure).
KINDS = {"real_valued": "membership", "nonnegative": "membership", "w_le_rho": "membership",
         "mean_le_1_plus_eps": "membership", "finite": "numerics", "purity": "purity",
         "permutation": "structure", "padding": "structure", "batch_shape": "structure", "c2_minimiser": "C2"}

DESCRIPTIONS = {
    "real_valued": "one real weight per log-ratio (not complex, strings or other objects; the input's shape)",
    "finite": "numerical robustness: every weight is a finite number for log-ratios up to ±1e4",
    "nonnegative": "every (finite) weight is >= 0",
    "w_le_rho": "no trajectory gets more weight than its ratio: w_i <= rho_i",
    "mean_le_1_plus_eps": "the group's mean weight is at most 1+eps (membership of W_eps, C1)",
    "purity": "fn does not modify its input (called with read-only arrays, compared before/after)",
    "permutation": "reordering the group reorders the weights the same way (permutation equivariance)",
    "padding": "padded entries get weight 0 and do not change the real entries' weights",
    "batch_shape": "a [n_groups, G] call agrees with one call per group (and [1, G] with [G])",
    "c2_minimiser": "for members of W_eps: the bias functional B(w; rho) equals the C2 minimum (scipy QP)",
}

#: The rows of a report, in order.
ORDER = MEMBERSHIP + ("finite", "purity", "permutation", "padding", "batch_shape", "c2_minimiser")

HOLDS, REFUTED, OUT_OF_SCOPE = "holds", "refuted", "out of scope"


@dataclass
class PropertyResult:
    """One row of the report."""

    property: str
    description: str
    verdict: str
    membership: bool
    examples: int
    detail: str = ""
    counterexample: dict[str, Any] | None = None
    kind: str = ""


@dataclass
class WeightMapReport:
    """What :func:`check_weight_map` found: one :class:`PropertyResult` per property.

    Four separate answers: :attr:`is_member` (``𝒲_ε``), :attr:`is_robust` (finite for ``|ℓ| ≤ 1e4``;
    :attr:`unsafe_from` the first failing ``ℓ``), the ``c2_minimiser`` row, :attr:`is_pure`; :attr:`all_hold`
    is what the CLI's exit status reports.
    """

    name: str
    eps: float | None
    rows: list[PropertyResult] = field(default_factory=list)
    unsafe_from: float | None = None

    def __getitem__(self, prop: str) -> PropertyResult:
        for r in self.rows:
            if r.property == prop:
                return r
        raise KeyError(prop)

    @property
    def is_member(self) -> bool:
        """Whether every membership property holds (the map lies in ``𝒲_ε`` wherever its output is finite)."""
        return all(self[p].verdict == HOLDS for p in MEMBERSHIP)

    @property
    def is_robust(self) -> bool:
        """Whether every weight was finite for ``|ℓ_i| ≤ 1e4``."""
        return self["finite"].verdict == HOLDS

    @property
    def is_pure(self) -> bool:
        """Whether ``fn`` left its (read-only) input unchanged."""
        return self["purity"].verdict == HOLDS

    @property
    def refuted(self) -> list[str]:
        """Names of the refuted properties."""
        return [r.property for r in self.rows if r.verdict == REFUTED]

    @property
    def all_hold(self) -> bool:
        """No property refuted and the map a member (``out of scope`` structure rows do not count)."""
        return self.is_member and not self.refuted

    def to_frame(self):
        """The report as a ``pandas.DataFrame`` (one row per property)."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.rows]).set_index("property")

    def summary(self) -> list[str]:
        """One line per question: membership, numerical robustness, C2, purity."""
        failed = [p for p in MEMBERSHIP if self[p].verdict == REFUTED] or \
            [p for p in MEMBERSHIP if self[p].verdict != HOLDS]
        lines = ["member of 𝒲_ε" if not failed else
                 f"NOT a member of 𝒲_ε ({', '.join(f'{p} {self[p].verdict}' for p in failed)})"]
        fin = self["finite"]
        if fin.verdict == HOLDS:
            lines.append("numerically safe: finite weights for |ℓ| ≤ 1e4")
        elif self.unsafe_from is not None:
            side = "≥" if self.unsafe_from > 0 else "≤" if self.unsafe_from < 0 else "="
            lines.append(f"numerically unsafe for ℓ {side} {self.unsafe_from:.6g} (non-finite weights there; "
                         "compute in log space)")
        else:
            lines.append(f"numerical robustness {fin.verdict}: {fin.detail}")
        c2 = self["c2_minimiser"]
        if c2.verdict == HOLDS:
            lines.append("C2: the minimiser of the bias functional over 𝒲_ε")
        elif c2.verdict == REFUTED:
            lines.append(f"C2: {c2.detail}")
        else:
            lines.append(f"C2: out of scope ({c2.detail})")
        pur = self["purity"]
        lines.append("pure: leaves its input unchanged" if pur.verdict == HOLDS else
                     f"NOT pure: {pur.detail}" if pur.verdict == REFUTED else f"purity out of scope ({pur.detail})")
        return lines

    def __str__(self) -> str:
        eps = "drawn by hypothesis" if self.eps is None else f"{self.eps:g}"
        lines = [f"weight map {self.name}  (eps = {eps})"]
        w = max(len(r.property) for r in self.rows)
        for r in self.rows:
            lines.append(f"  {r.property:<{w}}  {r.verdict:<12}  {r.description}")
            if r.detail:
                lines.append(f"  {'':<{w}}  {'':<12}  {r.detail}")
            if r.counterexample is not None:
                lines.append(f"  {'':<{w}}  {'':<12}  counterexample: {_fmt_example(r.counterexample)}")
        lines += [f"  => {line}" for line in self.summary()]
        return "\n".join(lines)


def _fmt_example(ex: dict[str, Any]) -> str:
    parts = []
    for k, v in ex.items():
        if isinstance(v, np.ndarray):
            v = np.array2string(v, precision=17, separator=", ", threshold=40, max_line_width=10**6)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


__all__ = ["MEMBERSHIP", "KINDS", "DESCRIPTIONS", "ORDER", "HOLDS", "REFUTED", "OUT_OF_SCOPE", "PropertyResult",
           "WeightMapReport"]
