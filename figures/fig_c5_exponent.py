"""Figure (C5 as a curve): the local G-exponent of GMC's tuned bound against G, per regime.

``e(G) = d log B*/d log G`` at the optimal step size, exact by the envelope theorem
(:mod:`theory.c5_local`), for the three regimes defined by r₁ = LηM₂/delay at the optimum at G = 1
(delay-dominated 1e−3, comparable 1, variance-dominated 100). The dashed line is C5's −2/5, the grey band
±0.05 around it, and the shaded spans the G ranges where the exponent lies in that band (the range of the
−2/5 law). Theory against theory: the evidence rows are ``reported``, not measurements.
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


def plot(df, ranges, ax=None):
    """Local exponent against G (log x) per regime, −2/5 reference, ±TOL band, shaded ranges; returns (fig, ax)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(style.WIDTH_1COL * 1.4, 2.9)) if ax is None else (ax.figure, ax)
    ax.axhspan(-0.4 - TOL, -0.4 + TOL, color="#DDDDDD", alpha=0.6, lw=0, label=f"−2/5 ± {TOL:g}")
    ax.axhline(-0.4, color=style.REFERENCE, ls="--", lw=0.9, label=r"C5: $G^{-2/5}$")
    for rg, s in df.groupby("regime", sort=False):
        c = _COLORS.get(rg, None)
        r = ranges.get(rg, "none")
        span = "nowhere" if r == "none" else f"on G ∈ [{r[0]:.3g}, {r[1]:.3g}]"
        ax.plot(s.G, s.local_exponent, color=c, lw=1.4, label=f"{rg}: −2/5 {span}")
        if r != "none":
            ax.axvspan(r[0], r[1], color=c, alpha=0.12, lw=0)
    ax.set_xscale("log")
    ax.set_ylim(-0.5, 0.02)
    ax.set_xlabel("group size G")
    ax.set_ylabel(r"$d\,\log B^*/d\,\log G$")
    ax.set_title("gmc, tuned C5 bound (envelope theorem)")
    ax.legend(loc="center right", bbox_to_anchor=(1.0, 0.58), fontsize=6, framealpha=0.9)
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
    meta["ranges"] = {rg: r if r == "none" else list(r) for rg, r in ranges.items()}
    meta["curve"] = df.to_dict(orient="list")
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
