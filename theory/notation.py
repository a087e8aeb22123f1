"""Render derived results in the notation of docs/THEORY.md: plain text, and LaTeX that typesets.

Shared by :mod:`theory.claims` (a result's text) and :mod:`theory.report` (the tables), so neither
imports the other. Exponents are typeset, never escaped: plain ``ε^-2`` or ``G^{−2/5}`` becomes
``ε\\ensuremath{^{-2}}``; sympy objects go through ``sympy.latex``.
"""
from __future__ import annotations

import re

import sympy as sp

_PRETTY = [(r"\bepsilon\b", "ε"), (r"\bsigma2\b", "σ²"), (r"\bmu4\b", "μ₄"), (r"\brhobar\b", "ρ̄"),
           (r"\brho\b", "ρ"), (r"\bDeltaJ\b", "ΔJ"), (r"\beta\b", "η"), (r"\bkappa\b", "κ"),
           (r"\*\*", "^"), (r"Heaviside\(([^,]*), 0\)", r"1{\1 > 0}"), (r"\bMax\(0, ", "max(0, "),
           (r"\bS\b", "E_π[A²‖s‖²]"), (r"σ²\^2", "σ⁴")]


def fmt(v) -> str:
    """Plain-text form in docs/THEORY.md notation (sympy's sstr with symbol names replaced)."""
    if isinstance(v, tuple) and all(isinstance(x, sp.Basic) for x in v):
        text = "(" + ", ".join(sp.sstr(x) for x in v) + ")"
    else:
        text = sp.sstr(v) if isinstance(v, sp.Basic) else str(v)
    for pat, rep in _PRETTY:
        text = re.sub(pat, rep, text)
    return text


def _latex_names():
    from . import symbols as sy

    return {sy.sigma2: r"\sigma^2", sy.mu4: r"\mu_4", sy.m_tic: r"m_{\mathrm{tic}}", sy.rhobar: r"\bar\rho",
            sy.dJ: r"\Delta J", sy.S: r"\mathbb{E}_\pi[A^2\|s\|^2]", sy.eps: r"\varepsilon"}


def tex(v) -> str:
    """LaTeX (text mode) of a result: ``$sympy.latex(v)$`` for sympy objects, :func:`tex_text` otherwise."""
    names = _latex_names()
    if isinstance(v, sp.Basic):
        return f"${sp.latex(v, symbol_names=names)}$"
    if isinstance(v, tuple) and v and all(isinstance(x, sp.Basic) for x in v):
        return "$(" + ", ".join(sp.latex(x, symbol_names=names) for x in v) + ")$"
    return tex_text(fmt(v))


_MATH = {
    "ρ̄": r"\bar\rho", "R̄": r"\bar R", "ε": r"\varepsilon", "σ": r"\sigma", "μ": r"\mu", "π": r"\pi",
    "ρ": r"\rho", "η": r"\eta", "κ": r"\kappa", "Δ": r"\Delta", "∇": r"\nabla", "𝔅": r"\mathfrak{B}",
    "𝒲": r"\mathcal{W}", "ĝ": r"\hat g", "≤": r"\le", "≥": r"\ge", "∈": r"\in", "∉": r"\notin", "→": r"\to",
    "⇒": r"\Rightarrow", "∝": r"\propto", "∂": r"\partial", "‖": r"\|", "Σ": r"\sum", "·": r"\cdot",
    "∞": r"\infty", "∘": r"\circ", "≈": r"\approx", "×": r"\times", "≠": r"\ne", "√": r"\surd",
    ">": ">", "<": "<", "|": "|",  # OT1 text mode would print ¿, ¡ and — for these
}
_TEXT = {"−": "-", "–": "--", "&": r"\&", "%": r"\%", "#": r"\#", "{": r"\{", "}": r"\}", "$": r"\$",
         "~": r"\textasciitilde{}", "\\": r"\textbackslash{}", "^": r"\textasciicircum{}", "_": r"\_"}
_MATH_ESC = {"{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "#": r"\#", "$": r"\$", "\\": r"\backslash ",
             "~": r"\sim "}
_SUP = dict(zip("⁻⁺⁰¹²³⁴⁵⁶⁷⁸⁹", "-+0123456789"))
_SUB = dict(zip("₋₊₀₁₂₃₄₅₆₇₈₉", "-+0123456789"))
_SCRIPT_TOKEN = re.compile(r"[-−+]?[0-9]+(?:/[0-9]+)?|[-−+]?[A-Za-z]+|[-−+]?[^\s,;:()\[\]{}]")


def _script_arg(s: str, i: int) -> tuple[str, int]:
    """The argument of ^ or _ starting at s[i]: a {…} or (…) group, or a number / word / one symbol."""
    if i < len(s) and s[i] in "{(":
        close = "}" if s[i] == "{" else ")"
        depth, j = 0, i
        while j < len(s):
            depth += s[j] == s[i]
            depth -= s[j] == close
            if depth == 0:
                inner = s[i + 1:j] if s[i] == "{" else s[i:j + 1]
                return inner, j + 1
            j += 1
        return s[i + 1:], len(s)
    m = _SCRIPT_TOKEN.match(s, i)
    return (m.group(0), m.end()) if m else ("", i)


def _math(s: str) -> str:
    """Plain text → LaTeX math-mode body (used inside exponents and subscripts, which may nest)."""
    out, i = [], 0
    s = s.replace("−", "-")
    while i < len(s):
        ch = s[i]
        if ch in "^_":
            arg, j = _script_arg(s, i + 1)
            if arg:
                out.append(f"{ch}{{{_math(arg)}}}")
                i = j
                continue
        if ch in _SUP or ch in _SUB:
            table, mark = (_SUP, "^") if ch in _SUP else (_SUB, "_")
            j = i
            while j < len(s) and s[j] in table:
                j += 1
            out.append(f"{mark}{{{''.join(table[c] for c in s[i:j])}}}")
            i = j
            continue
        m = _MATH.get(ch)
        out.append(m + (" " if m[-1].isalpha() else "") if m else _MATH_ESC.get(ch, ch))
        i += 1
    return "".join(out).strip()


def tex_text(s: str) -> str:
    """Plain text with docs/THEORY.md's unicode math → LaTeX text mode (pdflatex-safe).

    Math symbols become ``\\ensuremath{…}``; ``x^k``, ``x^{…}``, ``x_i`` and runs of unicode super/subscripts
    become real super/subscripts (``\\ensuremath{^{…}}``), so no caret or underscore is ever escaped as text."""
    out, i = [], 0
    keys = sorted(_MATH, key=len, reverse=True)
    while i < len(s):
        ch = s[i]
        if ch in "^_":
            arg, j = _script_arg(s, i + 1)
            if arg:
                body = _math(arg)
                body = rf"\mathrm{{{body}}}" if ch == "_" and re.fullmatch(r"[A-Za-z]{2,}", arg) else body
                out.append(rf"\ensuremath{{{ch}{{{body}}}}}")
                i = j
                continue
        if ch in _SUP or ch in _SUB:
            table, mark = (_SUP, "^") if ch in _SUP else (_SUB, "_")
            j = i
            while j < len(s) and s[j] in table:
                j += 1
            out.append(rf"\ensuremath{{{mark}{{{''.join(table[c] for c in s[i:j])}}}}}")
            i = j
            continue
        for k in keys:
            if s.startswith(k, i):
                out.append(rf"\ensuremath{{{_MATH[k]}}}")
                i += len(k)
                break
        else:
            out.append(_TEXT.get(ch, ch))
            i += 1
    return "".join(out)
