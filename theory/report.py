"""Render the claims table (Markdown or LaTeX) with a pass/fail per symbolic check."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .claims import Claim


_TEX = {
    "ρ̄": r"\ensuremath{\bar\rho}", "R̄": r"\ensuremath{\bar R}", "ε": r"\ensuremath{\varepsilon}", "σ": r"\ensuremath{\sigma}",
    "μ": r"\ensuremath{\mu}", "π": r"\ensuremath{\pi}", "ρ": r"\ensuremath{\rho}", "η": r"\ensuremath{\eta}",
    "κ": r"\ensuremath{\kappa}", "Δ": r"\ensuremath{\Delta}", "∇": r"\ensuremath{\nabla}",
    "𝔅": r"\ensuremath{\mathfrak{B}}", "𝒲": r"\ensuremath{\mathcal{W}}", "ĝ": r"\ensuremath{\hat g}",
    "≤": r"\ensuremath{\le}", "≥": r"\ensuremath{\ge}", "∈": r"\ensuremath{\in}", "∉": r"\ensuremath{\notin}",
    "→": r"\ensuremath{\to}", "⇒": r"\ensuremath{\Rightarrow}", "∝": r"\ensuremath{\propto}",
    "∂": r"\ensuremath{\partial}", "‖": r"\ensuremath{\|}", "Σ": r"\ensuremath{\sum}", "·": r"\ensuremath{\cdot}",
    "−": "-", "–": "--", "⁻": r"\ensuremath{^-}", "²": r"\ensuremath{^2}", "⁴": r"\ensuremath{^4}",
    "⁰": r"\ensuremath{^0}", "³": r"\ensuremath{^3}", "ĝ": r"\ensuremath{\hat g}", "Δ": r"\ensuremath{\Delta}", "₊": r"\ensuremath{_+}", "₂": r"\ensuremath{_2}", "₄": r"\ensuremath{_4}",
    "∞": r"\ensuremath{\infty}", "^": r"\^{}", "_": r"\_", "&": r"\&", "%": r"\%", "#": r"\#",
    "{": r"\{", "}": r"\}",
}


def tex_text(s: str) -> str:
    """Escape plain text with THEORY.md's unicode math for LaTeX (pdflatex-safe)."""
    out, i = [], 0
    keys = sorted(_TEX, key=len, reverse=True)
    while i < len(s):
        for k in keys:
            if s.startswith(k, i):
                out.append(_TEX[k])
                i += len(k)
                break
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def markdown(claims: Iterable[Claim]) -> str:
    rows = ["| id | claim | statement | derived result | check |", "|---|---|---|---|---|"]
    for c in claims:
        verdict = "pass" if c.check() else "FAIL"
        rows.append(f"| {c.id} | {c.title} | {c.statement} | {c.result.replace('|', '∣')} | {verdict} |")
    return "\n".join(rows)


def latex(claims: Iterable[Claim]) -> str:
    rows = [r"\begin{tabular}{l p{3.2cm} p{5cm} p{6.5cm} l}", r"\hline",
            r"id & claim & statement & derived result & check \\", r"\hline"]
    for c in claims:
        verdict = "pass" if c.check() else r"\textbf{FAIL}"
        res = "; ".join(
            f"{tex_text(k)}: {v}" for k, v in (part.split(": ", 1) for part in c.result_latex().split("; ")))
        rows.append(f"{c.id} & {tex_text(c.title)} & {tex_text(c.statement)} & {res} & {verdict} \\\\")
    rows += [r"\hline", r"\end{tabular}"]
    return "\n".join(rows)


def failures(claims: Iterable[Claim]) -> list[str]:
    """``id: step`` for every step that did not verify."""
    return [f"{c.id}: {st.claim}" for c in claims for st in c.steps if not st.ok]
