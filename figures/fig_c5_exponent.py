"""Figure (C5 as a curve): the local G-exponent of GMC's tuned bound against G, with the regimes of r.

``e(G) = d log B*/d log G`` at the optimal step size, exact by the envelope theorem
(:mod:`theory.c5_local`), for three sets of constants that differ only in r₁ = r(G = 1), where
``r = T₂/T₃`` is the bound's variance term ``LηM₂(ε)`` over its delay term ``Cη⁴d⁴ε^{p_ε}G^{p_G}`` at the
optimal η. Since ``e = −2/(5 + 2r)`` (gmc, p_G = −2), the exponent axis is also an r axis (right).
The regimes are bands of r (:data:`REGIME_BOUNDS`): **delay-dominated** r ≤ 5/14 (e within 0.05 of −2/5,
where C5's G^(−2/5) holds), **comparable** 5/14 < r < 14/5, **variance-dominated** r ≥ 14/5. The curves
carry the names of the regime each starts in at G = 1 (``theory.c5_local.RATIOS``). The dashed line is C5's
−2/5; the marker is where a curve leaves the delay-dominated band. Theory against theory: the evidence
rows are ``reported``, not measurements.
"""
from __future__ import annotations

import time

import numpy as np

from figures import common, style

NAME = "fig_c5_local_exponent"
TITLE = "C5: local G-exponent of the tuned bound"
CLAIMS = ("C5",)
TOL = 0.05
_COLORS = {"delay-dominated": "#0072B2", "comparable": "#E69F00", "variance-dominated": "#009E73"}
#: r at the regime boundaries: delay-dominated r ≤ 5/14 (|e + 2/5| ≤ 0.05), variance-dominated r ≥ 14/5
#: (the mirror image: variance term ≥ 14/5 × delay term), comparable in between.
REGIME_BOUNDS = (5 / 14, 14 / 5)
_BAND_SHADES = ("#E3E3E3", "#F3F3F3", "#FFFFFF")
P_G = -2.0  # gmc's G-exponent of the delay term: e = P_G/(5 + 2r)


def exponent_of_r(r):
    """e = p_G/(5 + 2r) (gmc): the local exponent at ratio r."""
    return P_G / (5 + 2 * np.asarray(r, dtype=float))


def r_of_exponent(e):
    """r = (p_G/e − 5)/2, the inverse of :func:`exponent_of_r` (e clipped just below 0, where r → ∞)."""
    e = np.minimum(np.asarray(e, dtype=float), -1e-9)
    return (P_G / e - 5) / 2


def settings(quick: bool = False) -> dict:
    from theory import c5_local

    return {"G": [1.0, 1e4], "n_points": 25 if quick else 81, "tol": TOL, "ratios": dict(c5_local.RATIOS),
            "base": dict(c5_local.BASE), "estimator": "gmc"}


def curves(quick: bool = False):
    """(DataFrame G, regime, local_exponent, ratio; {regime: (G_lo, G_hi) or "none"})."""
    from theory import c5_local

    s = settings(quick)
    df = c5_local.local_exponent_curve(np.geomspace(*s["G"], s["n_points"]))
    return df, {rg: c5_local.c5_exponent_range(rg, TOL) for rg in c5_local.REGIMES}


def _pow10(x: float) -> str:
    k = np.log10(x)
    if abs(k - round(k)) < 1e-9 and abs(k) >= 2:
        return "10" + str(int(round(k))).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{x:g}"


def caption(ranges: dict) -> str:
    """What is drawn, the regimes of r, and what is predicted (with the G range of the −2/5 law per curve)."""
    from theory import c5_local

    where = "; ".join(f"r(1) = {_pow10(c5_local.RATIOS[rg])}: "
                      + ("nowhere on G ∈ [1, 10⁴]" if r == "none" else f"G ∈ [{r[0]:.3g}, {r[1]:.3g}]")
                      for rg, r in ranges.items())
    lo, hi = REGIME_BOUNDS
    return ("C5 as a curve (theory only, no simulation): the local G-exponent e(G) = d log B*/d log G of gmc's "
            "step-size-tuned C5 bound B*, exact by the envelope theorem, for three sets of constants that differ only in "
            "r at G = 1. r = T₂/T₃ at the optimal η is the bound's variance term LηM₂(ε) over its delay term "
            "Cη⁴d⁴ε^{p_ε}G^{−2} (theory/c5_local.py); e = −2/(5 + 2r), so the right axis reads r. Regimes by r (shaded "
            f"bands): delay-dominated r ≤ 5/14 (dark band: e within {TOL:g} of −2/5), comparable 5/14 < r < 14/5, "
            f"variance-dominated r ≥ 14/5 (e > −{-exponent_of_r(hi):.2f}). Predicted: C5 states e = −2/5 (dashed line), "
            "which the envelope theorem reproduces only while r ≤ 5/14; since r grows with G (the delay term falls "
            "like G⁻², the variance term has no G), every curve rises towards 0, so the G^(−2/5) law holds on one "
            f"interval [1, G_hi] or nowhere — {where}. The marker is where the first curve leaves the band.")


def plot(df, ranges, ax=None):
    """Local exponent against G (log x) per curve, regime bands of r, −2/5 reference, exit markers; returns (fig, ax)."""
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    from theory import c5_local

    fig, ax = plt.subplots(figsize=(style.WIDTH_1COL * 1.6, 3.1)) if ax is None else (ax.figure, ax)
    e_lo, e_hi = float(exponent_of_r(REGIME_BOUNDS[0])), float(exponent_of_r(REGIME_BOUNDS[1]))
    top, bottom = 0.0, -0.42
    # (from, to, label, label's x in axes fraction, label's y): labels placed where no curve runs
    bands = ((bottom, e_lo, "delay-dominated: r ≤ 5/14", 0.015, e_lo - 0.012),
             (e_lo, e_hi, "comparable: 5/14 < r < 14/5", 0.2, (e_lo + e_hi) / 2),
             (e_hi, top, "variance-dominated: r ≥ 14/5", 0.45, e_hi + 0.015))
    text_at = blended_transform_factory(ax.transAxes, ax.transData)
    for (y0, y1, name, tx, ty), shade in zip(bands, _BAND_SHADES):
        ax.axhspan(y0, y1, color=shade, lw=0, zorder=0)
        if y1 < top:
            ax.axhline(y1, color="#BBBBBB", lw=0.5, zorder=0.5)
        ax.text(tx, ty, name, transform=text_at, ha="left", va="center", fontsize=6.5, color="#555555")
    ax.axhline(-0.4, color=style.REFERENCE, ls="--", lw=0.9, label=r"C5's prediction $e=-2/5$ ($G^{-2/5}$)")
    for rg, s in df.groupby("regime", sort=False):
        c = _COLORS.get(rg, None)
        ax.plot(s.G, s.local_exponent, color=c, lw=1.5,
                label=f"r(1) = {_pow10(c5_local.RATIOS.get(rg, float('nan')))} (starts {rg})")
        r = ranges.get(rg, "none")
        if r != "none" and r[1] < float(s.G.max()):
            ax.plot([r[1]], [-0.4 + TOL], ls="none", marker="o", ms=5, mfc="white", mec=c, mew=1.2, zorder=5)
            ax.annotate(f"leaves the band\n(r = 5/14) at G ≈ {r[1]:.0f}", (r[1], -0.4 + TOL), xytext=(-8, 6),
                        textcoords="offset points", ha="right", va="bottom", fontsize=6, color=c,
                        arrowprops=dict(arrowstyle="-", color=c, lw=0.6))
    ax.set_xscale("log")
    ax.set_ylim(bottom, top)
    ax.set_xlim(float(df.G.min()) / 1.3, float(df.G.max()) * 1.3)
    ax.set_xlabel("group size G")
    ax.set_ylabel(r"local exponent $e(G)=d\,\log B^*/d\,\log G$")
    sec = ax.secondary_yaxis("right", functions=(r_of_exponent, exponent_of_r))
    sec.set_yticks([0, REGIME_BOUNDS[0], 1, REGIME_BOUNDS[1], 10, 100], ["0", "5/14", "1", "14/5", "10", "100"])
    sec.set_ylabel("r = variance term / delay term at η*")
    ax.set_title("gmc, tuned C5 bound (envelope theorem)")
    ax.legend(loc="upper right", bbox_to_anchor=(1.0, 0.95), fontsize=6, framealpha=0.95, frameon=True,
              edgecolor="none")
    return fig, ax


def evidence(df, ranges) -> list[common.Evidence]:
    """Per regime: the upper end of the G range of the −2/5 law (None when there is none) and e(1), e(1e4)."""
    from theory import c5_local

    ev = []
    for rg, s in df.groupby("regime", sort=False):
        s = s.sort_values("G")
        r = ranges[rg]
        ev.append(common.Evidence(
            "C5", "G range where the local G-exponent is within 0.05 of −2/5", f"{rg}, r₁={c5_local.RATIOS[rg]:g}",
            None if r == "none" else float(r[1]), None, None, "reported", NAME,
            note=("none on G ∈ [1, 1e4]" if r == "none" else f"G ∈ [{r[0]:.4g}, {r[1]:.4g}]")
                 + f"; e(1) = {s.local_exponent.iloc[0]:+.3f}, e(1e4) = {s.local_exponent.iloc[-1]:+.3g} "
                 "(theory against theory, envelope theorem)"))
    return ev


def main(out_dir, quick: bool = False, **_ignored) -> common.FigureResult:
    """Draw the figure into ``out_dir`` (PNG, PDF, JSON sidecar) and return its C5 evidence rows."""
    t0 = time.perf_counter()
    style.apply()
    df, ranges = curves(quick)
    fig, _ = plot(df, ranges)
    fig.tight_layout()
    ev = evidence(df, ranges)
    meta = common.sidecar(NAME, quick=quick, settings=settings(quick), seeds=None, evidence=ev)
    meta["caption"] = caption(ranges)
    meta["ranges"] = {rg: r if r == "none" else list(r) for rg, r in ranges.items()}
    meta["curve"] = df.to_dict(orient="list")
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
