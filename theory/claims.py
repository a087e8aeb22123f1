"""The claims registry: lemmas L1–L4 and claims C1–C8 of docs/THEORY.md §3, each a derivation checked by sympy.

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
from .notation import fmt as _fmt
from .notation import tex as _tex
from .proof import Derivation, Step


@dataclass(frozen=True)
class Claim:
    """A registered claim: ``id``, one-line ``title``, ``statement`` (docs/THEORY.md notation), the
    ``derive`` function, and ``headline``: the result keys shown in the table."""

    id: str
    title: str
    statement: str
    derive: Callable[[], Derivation]
    headline: tuple[str, ...]
    summary_of: Callable[[dict], str] | None = None  #: results → one plain-text line for the short table
    kind: str = "bound"
    """The sense of the statement, which decides how a measurement judges it (docs/THEORY.md §4):
    ``bound``, ``rate`` (an exponent), ``bound + rate``, ``optimality``, ``exact identity``, ``limit``."""

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

    @property
    def summary(self) -> str:
        """The derived result in one plain line (exponents as ``ε^-2 G^-2/5``), for ``python -m theory``."""
        text = self.summary_of(self.results) if self.summary_of else _fmt(self.results[self.headline[0]])
        return text.replace("*", "·")

    def result_latex(self) -> str:
        return "; ".join(f"{k}: {_tex(self.results[k])}" for k in self.headline)


def _mono(exps, names=("K", "d", "ε", "G")) -> str:
    """``(−4/5, 4/5, −2/5, −2/5)`` → ``K^-4/5 d^4/5 ε^-2/5 G^-2/5`` (plain notation of the short table)."""
    return " ".join(f"{n}^{sp.sstr(sp.nsimplify(e))}" for n, e in zip(names, exps))


def _c4_short(r) -> str:
    return ", ".join(f"{n} " + r[f"order {n} (fourth)"].replace(", ", " ") for n in c4_bias.NAMES) + " (4th tail)"


def _c5_short(r) -> str:
    rng = "; ".join(f"{rg.split('-')[0]} {r[c5_tuning.range_key(rg)]}" for rg in c5_tuning.c5_local.REGIMES)
    return f"gmc {_mono(r['exponents gmc (K,d,ε,G)'])}, tic {_mono(r['exponents tic (K,d,ε,G)'])}; G^-2/5 ±0.05 " \
           f"on G ∈ {rng}"


def _c7_short(r) -> str:
    w = r["weighting part ‖E[ĝ_gmc − ĝ_is]‖"]
    lim = {n: float(sp.sqrt(sum(x**2 for x in r[f"lim_G bias {n}"]))) for n in ("tis", "tic")}
    return (f"weighting part ‖E[ĝ_w − ĝ_is]‖: gmc {w[0]:g}…{max(w):.2g}…{w[-1]:.1g} → 0, tis → {lim['tis']:.3g}, "
            f"tic → {lim['tic']:.3g}: {r['C7 verdict (weighting part)']}")


LEMMAS: dict[str, Claim] = {c.id: c for c in (
    Claim("L1", "plus-part bound", "(x−ε)₊ ≤ x²/(4ε) for ε > 0", lemmas.derive_plus_part,
          ("bound", "equality at"), lambda r: f"(x−ε)₊ ≤ x²/(4ε), equality at {_fmt(r['equality at'].rhs)}"),
    Claim("L2", "tail → moment", "1{x>ε} ≤ x²/ε² and ≤ x⁴/ε⁴", lemmas.derive_indicator, ("k=2", "k=4"),
          lambda r: f"{_fmt(r['k=2'])}, x^4/ε^4"),
    Claim("L3", "weighted Cauchy–Schwarz", "‖(1/G)Σw_iv_i‖² ≤ ((1/G)Σw_i)((1/G)Σw_i‖v_i‖²), w ≥ 0",
          lemmas.derive_weighted_cs, ("gap",)),
    Claim("L4", "moments of an i.i.d. mean", "E(ρ̄−1)⁴ = 3σ⁴/G² + (μ₄−3σ⁴)/G³",
          lemmas.derive_mean_moments, ("E(ρ̄−1)^2", "E(ρ̄−1)^4"),
          lambda r: f"E(ρ̄−1)² = {_fmt(r['E(ρ̄−1)^2'])}, E(ρ̄−1)⁴ = 3σ⁴ G^-2 + O(G^-3)"),
)}

CLAIMS: dict[str, Claim] = {c.id: c for c in (
    Claim("C1", "common second-moment guarantee",
          "every w ∈ 𝒲_ε: E_μ‖ĝ‖² ≤ (1+ε)·E_π[A²‖s‖²] = M₂(ε); is, snis ∉ 𝒲_ε",
          c1_second_moment.derive, ("M₂(ε)",),
          lambda r: f"M₂(ε) = {_fmt(r['M₂(ε)'])}"),
    Claim("C2", "GMC minimises the ratio-based bias functional",
          "argmin_{𝒲_ε} 𝔅(w;ρ) is w = cρ, c = min(1,(1+ε)/ρ̄), min (ρ̄−1−ε)₊²/ρ̄; removed mass ≤ tis ≤ tic",
          c2_kkt.derive, ("minimiser", "min 𝔅", "removed mass"),
          lambda r: f"w_i = {_fmt(r['minimiser'].rhs)}, min 𝔅 = {_fmt(r['min 𝔅'])}", kind="optimality"),
    Claim("C3", "delay enters only through the bias",
          "∂bound/∂d = c_B ∂E[𝔅]/∂d", c3_delay.derive, ("∂bound/∂d (gmc)",),
          lambda r: f"∂bound/∂d (gmc) = {_fmt(r['∂bound/∂d (gmc)'])}", kind="exact identity"),
    Claim("C4", "fourth-order delay term: TIC O(ε⁻⁴), GMC O(ε⁻²)",
          "E𝔅_gmc ≤ E(ρ̄−1)⁴/(16ε²(1+ε)), E𝔅_tis ≤ μ₄/(16ε²(1+ε)), E𝔅_tic ≤ E[ρ(ρ−1)⁴]/ε⁴",
          c4_bias.derive, ("E𝔅_gmc (fourth)", "E𝔅_gmc (second)")
          + tuple(f"order {n} ({t})" for t in c4_bias.TAILS for n in c4_bias.NAMES), _c4_short, kind="bound + rate"),
    Claim("C5", "step-size tuning: GMC delay term ∝ G^{−2/5}",
          "min_η 2ΔJ/(ηK) + Cη⁴d⁴/(ε²G²) ∝ K^{−4/5}d^{4/5}ε^{−2/5}G^{−2/5}; TIC ε^{−4/5}G⁰",
          c5_tuning.derive, ("η* gmc", "exponents gmc (K,d,ε,G)")
          + tuple(c5_tuning.fit_key("gmc", rg) for rg in c5_tuning.FIT_REGIMES)
          + ("variance-only limit (K,d,ε,G)", "exponents tic (K,d,ε,G)")
          + tuple(c5_tuning.fit_key("tic", rg) for rg in c5_tuning.FIT_REGIMES) + ("ε* gmc",)
          + tuple(c5_tuning.range_key(rg) for rg in c5_tuning.c5_local.REGIMES)
          + tuple(f"e(G) at G=1,10,100,1e4 ({rg})" for rg in c5_tuning.c5_local.REGIMES)
          + ("e(G) at G=1,10,100 (fit base, comparable)",), _c5_short, kind="rate"),
    Claim("C6", "local policy overlap", "σ² ≤ (e^{κηdM} − 1)²", c6_overlap.derive, ("σ² ≤", "expansion"),
          lambda r: "σ² ≤ (e^{κηdM} − 1)² = κ²M²(ηd)² + O((ηd)³)"),
    Claim("C7", "G → ∞: gmc weighting bias → 0, tis/tic → constant",
          "E[ĝ_w] − ∇J = baseline (C8, −∇J/G) + weighting E[ĝ_w − ĝ_is]; judged on the weighting part; "
          "E(ρ̄−1−ε)₊ ≤ σ²/(4εG); bandit exact limits", c7_large_group.derive,
          ("C7 verdict (weighting part)", "weighting part ‖E[ĝ_gmc − ĝ_is]‖", "finding", "weighting part tis",
           "weighting part tic", "lim_G bias tis", "lim_G bias tic", "‖bias‖ gmc, G=1,2,4,8,16,32,64",
           "‖∇J‖/G (C8 baseline part)", "‖bias‖ tis, same G", "‖bias‖ tic, same G", "G·E(ρ̄−1−ε)₊ gmc"),
          _c7_short, kind="limit"),
    Claim("C8", "baseline bias", "A_i = R_i − R̄ ⇒ E[ĝ_is] = (1 − 1/G)∇J", c8_baseline.derive, ("E[ĝ_is]",),
          lambda r: f"E[ĝ_is] = {r['E[ĝ_is]']}", kind="exact identity"),
)}

ALL: dict[str, Claim] = {**LEMMAS, **CLAIMS}
