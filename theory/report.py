"""Render the claims table: short (fits 100 columns), full Markdown, or LaTeX; and the C5/C7 sections.

Takes any objects with the :class:`theory.claims.Claim` attributes (``ClaimLike``), so it does not
import theory.claims (no import cycle, not even for type checking).
"""
from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import Protocol

import pandas as pd

from .notation import tex_text

WIDTH = 100  # the short table and the sections fit this many columns


class ClaimLike(Protocol):
    id: str
    title: str
    statement: str

    def check(self) -> bool: ...

    @property
    def result(self) -> str: ...

    @property
    def summary(self) -> str: ...

    def result_latex(self) -> str: ...

    @property
    def steps(self) -> list: ...


def _status(c: ClaimLike) -> str:
    return "pass" if c.check() else "FAIL"


def _wrapped_frame(rows: list[dict], widths: dict[str, int]) -> str:
    """pandas ``to_string`` of ``rows`` with each cell wrapped to ``widths`` (continuation lines get their own
    row with the other cells blank), left-aligned."""
    lines = []
    for r in rows:
        parts = {k: textwrap.wrap(str(r[k]), w, break_long_words=True) or [""] for k, w in widths.items()}
        n = max(len(p) for p in parts.values())
        lines += [{k: (p[i] if i < len(p) else "") for k, p in parts.items()} for i in range(n)]
    df = pd.DataFrame(lines, columns=list(widths))
    fmts = {k: (lambda w: lambda v: f"{v:<{w}}")(w) for k, w in widths.items()}
    return df.to_string(index=False, formatters=fmts, justify="left")


def short(claims: Iterable[ClaimLike]) -> str:
    """claim | title | derived (plain notation, e.g. ``ε^-2 G^-2/5``) | check, every line ≤ ``WIDTH`` columns."""
    rows = [{"id": c.id, "claim": c.title, "derived": c.summary, "check": _status(c)} for c in claims]
    return _wrapped_frame(rows, {"id": 3, "claim": 24, "derived": 60, "check": 5})


def markdown(claims: Iterable[ClaimLike]) -> str:
    """The full table: statement and every headline result with its full expression (``--full``)."""
    rows = ["| id | claim | statement | derived result | check |", "|---|---|---|---|---|"]
    for c in claims:
        rows.append(f"| {c.id} | {c.title} | {c.statement} | {c.result.replace('|', '∣')} | {_status(c)} |")
    return "\n".join(rows)


def latex(claims: Iterable[ClaimLike]) -> str:
    """A LaTeX tabular: text through :func:`theory.notation.tex_text`, expressions through ``sympy.latex``."""
    rows = [r"\begin{tabular}{l p{3.2cm} p{5cm} p{6.5cm} l}", r"\hline",
            r"id & claim & statement & derived result & check \\", r"\hline"]
    for c in claims:
        verdict = "pass" if c.check() else r"\textbf{FAIL}"
        res = "; ".join(
            f"{tex_text(k)}: {v}" for k, v in (part.split(": ", 1) for part in c.result_latex().split("; ")))
        rows.append(f"{c.id} & {tex_text(c.title)} & {tex_text(c.statement)} & {res} & {verdict} \\\\")
    rows += [r"\hline", r"\end{tabular}"]
    return "\n".join(rows)


def _fit(df: pd.DataFrame, title: str, notes: list[str]) -> str:
    body = df.to_string(index=False, float_format=lambda v: f"{v:.3g}")
    wrapped = [textwrap.fill(n, WIDTH, subsequent_indent="  ") for n in notes]
    return "\n".join([title, body, *wrapped])


def c7_section() -> str:
    """C7 on the weighting part: the 2-arm table (issue 17's instance), then the verdict on further bandits."""
    from . import c7_decomposition as dec
    from . import c7_large_group as c7

    df = c7.decomposition_table()
    piv = df.pivot(index="G", columns="estimator")
    out = pd.DataFrame({"G": piv.index, "‖bias‖ gmc": piv["total_norm"]["gmc"].values,
                        "‖∇J‖/G": piv["grad_norm_over_G"]["gmc"].values,
                        "wt gmc": piv["weighting_norm"]["gmc"].values, "wt tis": piv["weighting_norm"]["tis"].values,
                        "wt tic": piv["weighting_norm"]["tic"].values, "‖bias‖ tis": piv["total_norm"]["tis"].values,
                        "‖bias‖ tic": piv["total_norm"]["tic"].values,
                        "G·E(ρ̄−1−ε)₊": piv["removed_mass_rate"]["gmc"].values})
    v = dec.c7_verdict(df)
    notes = ["bias = baseline part (C8: −∇J/G, every estimator) + weighting part wt = E[ĝ_w − ĝ_is]; C7 is judged "
             f"on wt. Verdict: {v['verdict']} — {v['reason']}.",
             c7.derive().results["finding"] + "."]
    for name in ("three-arm", "random"):
        b = dec.as_bandit(name)
        d = dec.bias_decomposition(b, ("gmc", "tis", "tic"), (1, 2, 3, 4, 6, 8, 16, 32, 64, 128, 256), 0.2)
        w = dec.c7_verdict(d)
        notes.append(f"{b.name} (ρ = {', '.join(f'{r:.3g}' for r in b.rho)}, σ² = {b.sigma2:.3g}), ε = 0.2, "
                     f"G ≤ 256: gmc wt peaks at G={w['peak_G']} ({w['peak']:.2g}), {w['final']:.2g} at G=256; "
                     f"G·E(ρ̄−1−ε)₊ = {w['rate_final']:.3g} at G=256: {w['verdict']}.")
    return _fit(out, "C7 bias decomposition, 2-arm bandit π=(3/4,1/4), μ=(1/2,1/2), R=(1,0), ε=1/5", notes)


def c5_section() -> str:
    """C5 as a curve: the local G-exponent e(G) of the tuned bound per regime and the range of the −2/5 law."""
    from . import c5_local

    df = c5_local.summary().drop(columns=["second_moment"]).rename(columns={"range |e+2/5|<=tol": "G: |e+2/5|≤.05"})
    notes = ["e(G) = d log B*/d log G at η*(G) (envelope theorem) = −2/(5 + 2r), r = LηM₂/delay at η*; "
             "regimes by r₁ = r(1); the −2/5 law holds only while r ≤ 5/14."]
    return _fit(df, "C5 local G-exponent of the tuned bound (gmc), G ∈ [1, 1e4]", notes)


def failures(claims: Iterable[ClaimLike]) -> list[str]:
    """``id: step`` for every step that did not verify."""
    return [f"{c.id}: {st.claim}" for c in claims for st in c.steps if not st.ok]
