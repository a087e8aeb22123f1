"""The claims registry: lemmas L1–L4 and claims C1–C8 of THEORY.md §3, each a derivation checked by sympy.

``CLAIMS["C4"].check()`` runs (once, cached) the derivation in ``theory/c4_bias.py``; ``.result``
is the derived result as text, ``.results`` the sympy objects, ``.steps`` every certified step.
C9 is empirical and lives in simulate/.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

from . import c1_second_moment, c2_kkt, c3_delay, c4_bias, c5_tuning, c6_overlap, c7_large_group, c8_baseline
from . import lemmas
from .proof import Derivation, Step


@dataclass(frozen=True)
class Claim:
    """A registered claim: ``id``, one-line ``title``, ``statement`` (THEORY.md notation), the
    ``derive`` function, and ``headline``: the result keys shown in the table."""

    id: str
    title: str
    statement: str
    derive: Callable[[], Derivation]
    headline: tuple[str, ...]

    def derivation(self) -> Derivation:
        return self.derive()

    def check(self) -> bool:
        """True when every step of the derivation is certified by sympy (undecided counts as failed)."""
        return self.derivation().ok

    @property
    def steps(self) -> list[Step]:
        return self.derivation().steps

    @property
    def results(self) -> dict:
        return self.derivation().results

    @property
    def result(self) -> str:
        """The headline results as text, ``key: value; …``."""
        return "; ".join(f"{k}: {_fmt(self.results[k])}" for k in self.headline)

    def result_latex(self) -> str:
        return "; ".join(f"{k}: {_tex(self.results[k])}" for k in self.headline)


_PRETTY = [(r"\bepsilon\b", "ε"), (r"\bsigma2\b", "σ²"), (r"\bmu4\b", "μ₄"), (r"\brhobar\b", "ρ̄"),
           (r"\brho\b", "ρ"), (r"\bDeltaJ\b", "ΔJ"), (r"\beta\b", "η"), (r"\bkappa\b", "κ"),
           (r"\*\*", "^"), (r"Heaviside\(([^,]*), 0\)", r"1{\1 > 0}"), (r"\bMax\(0, ", "max(0, "),
           (r"\bS\b", "E_π[A²‖s‖²]"), (r"σ²\^2", "σ⁴")]


def _fmt(v) -> str:
    """Plain-text form in THEORY.md notation (sympy's sstr with symbol names replaced)."""
    import re

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


def _tex(v) -> str:
    from .report import tex_text

    names = _latex_names()
    if isinstance(v, sp.Basic):
        return f"${sp.latex(v, symbol_names=names)}$"
    if isinstance(v, tuple) and all(isinstance(x, sp.Basic) for x in v):
        return "$(" + ", ".join(sp.latex(x, symbol_names=names) for x in v) + ")$"
    return tex_text(_fmt(v))


LEMMAS: dict[str, Claim] = {c.id: c for c in (
    Claim("L1", "plus-part bound", "(x−ε)₊ ≤ x²/(4ε) for ε > 0", lemmas.derive_plus_part,
          ("bound", "equality at")),
    Claim("L2", "tail → moment", "1{x>ε} ≤ x²/ε² and ≤ x⁴/ε⁴", lemmas.derive_indicator, ("k=2", "k=4")),
    Claim("L3", "weighted Cauchy–Schwarz", "‖(1/G)Σw_iv_i‖² ≤ ((1/G)Σw_i)((1/G)Σw_i‖v_i‖²), w ≥ 0",
          lemmas.derive_weighted_cs, ("gap",)),
    Claim("L4", "moments of an i.i.d. mean", "E(ρ̄−1)⁴ = 3σ⁴/G² + (μ₄−3σ⁴)/G³",
          lemmas.derive_mean_moments, ("E(ρ̄−1)^2", "E(ρ̄−1)^4")),
)}

CLAIMS: dict[str, Claim] = {c.id: c for c in (
    Claim("C1", "common second-moment guarantee",
          "every w ∈ 𝒲_ε: E_μ‖ĝ‖² ≤ (1+ε)·E_π[A²‖s‖²] = M₂(ε); is, snis ∉ 𝒲_ε",
          c1_second_moment.derive, ("M₂(ε)",)),
    Claim("C2", "GMC minimises the ratio-based bias functional",
          "argmin_{𝒲_ε} 𝔅(w;ρ) is w = cρ, c = min(1,(1+ε)/ρ̄), min (ρ̄−1−ε)₊²/ρ̄; removed mass ≤ tis ≤ tic",
          c2_kkt.derive, ("minimiser", "min 𝔅", "removed mass")),
    Claim("C3", "delay enters only through the bias",
          "∂bound/∂d = c_B ∂E[𝔅]/∂d", c3_delay.derive, ("∂bound/∂d (gmc)",)),
    Claim("C4", "fourth-order delay term: TIC O(ε⁻⁴), GMC O(ε⁻²)",
          "E𝔅_gmc ≤ E(ρ̄−1)⁴/(16ε²(1+ε)), E𝔅_tis ≤ μ₄/(16ε²(1+ε)), E𝔅_tic ≤ E[ρ(ρ−1)⁴]/ε⁴",
          c4_bias.derive, ("E𝔅_gmc (fourth)", "E𝔅_gmc (second)")
          + tuple(f"order {n} ({t})" for t in c4_bias.TAILS for n in c4_bias.NAMES)),
    Claim("C5", "step-size tuning: GMC delay term ∝ G^{−2/5}",
          "min_η 2ΔJ/(ηK) + Cη⁴d⁴/(ε²G²) ∝ K^{−4/5}d^{4/5}ε^{−2/5}G^{−2/5}; TIC ε^{−4/5}G⁰",
          c5_tuning.derive, ("η* gmc", "exponents gmc (K,d,ε,G)")
          + tuple(c5_tuning.fit_key("gmc", rg) for rg in c5_tuning.FIT_REGIMES)
          + ("variance-only limit (K,d,ε,G)", "exponents tic (K,d,ε,G)")
          + tuple(c5_tuning.fit_key("tic", rg) for rg in c5_tuning.FIT_REGIMES) + ("ε* gmc",)),
    Claim("C6", "local policy overlap", "σ² ≤ (e^{κηdM} − 1)²", c6_overlap.derive, ("σ² ≤", "expansion")),
    Claim("C7", "G → ∞: gmc bias → 0, tis/tic bias → constant",
          "E(ρ̄−1−ε)₊ ≤ σ²/(4εG); bandit exact limits", c7_large_group.derive,
          ("lim_G bias tis", "lim_G bias tic", "‖bias‖ gmc, G=1,2,4,8,16,32,64")),
    Claim("C8", "baseline bias", "A_i = R_i − R̄ ⇒ E[ĝ_is] = (1 − 1/G)∇J", c8_baseline.derive, ("E[ĝ_is]",)),
)}

ALL: dict[str, Claim] = {**LEMMAS, **CLAIMS}
