"""The regime map (issue 24 item 2): where does correcting stale rollouts with gmc help?

One heat map per instance of ``nAUC(gmc) − nAUC(onpolicy)`` (mean over the held-out seeds, paired), delay d
across, the common step size ``η = f·η₀`` up (η₀: onpolicy's η tuned at d = 0 for that instance and G,
shared by every estimator at every d), at the primary G and ε. Colour: sign and size on a diverging scale
centred at 0 (blue: gmc ahead; red: onpolicy ahead), shared by every panel; a black frame marks a cell whose
95 % paired t-interval excludes 0; "†" marks a cell where gmc's failure rate exceeds the protocol's p₀. The
sidecar holds the tidy comparison table at the primary G, ε and the boundary (smallest d at which each side
is significantly ahead), from :func:`simulate.protocol.regime_map.regime_map`.
"""
from __future__ import annotations

import math
import os
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Rectangle

from figures import common, style

NAME = "fig_regime_map"
TITLE = "Regime map: gmc − onpolicy in nAUC over delay and step size (C9)"
CLAIMS = ("C9",)
CMAP = "RdBu"  # red: negative (onpolicy ahead), blue: positive (gmc ahead)
CAPTION = ("Regime map of the common-η arm: per instance, nAUC(gmc) − nAUC(onpolicy) (mean over the held-out seeds, "
           "paired by seed), the delay d across and the step size η = f·η₀ up, where η₀ is onpolicy's η tuned at "
           "d = 0 for that instance and G and is shared by every estimator at every d (a practitioner who tuned before "
           "the delay appeared); primary G and ε. Blue: gmc ahead; red: the uncorrected learner ahead; one colour scale "
           "for every panel. Black frame: the 95 % paired t-interval over seeds excludes 0 (per cell, no multiplicity "
           "correction); †: gmc's failure rate (divergence, collapse or lock-in) above the protocol's p₀. Predicted "
           "(C9, with C3/C6: the overlap χ² and hence the bias of the uncorrected gradient grow with d): gmc is never "
           "behind by more than the margin δ = 0.02, and its advantage grows with d, so the panels should turn blue "
           "towards large d, most at large η. The boundary (smallest d at which gmc is significantly ahead, and at which "
           "onpolicy is) is in the sidecar and the report's evidence rows.")


def _factor_label(f: float) -> str:
    if f >= 1:
        return f"{f:g}"
    inv = 1 / f
    return f"1/{inv:g}" if abs(inv - round(inv)) < 1e-9 else f"{f:g}"


def panel_data(m, G: int, eps: float) -> dict:
    """{instance: dict(delays, factors, est (factors × delays), sig (bool), unstable (bool), eta0)} at (G, ε)."""
    comp = m.comparisons
    sel = comp[(comp.comparison == "gmc − onpolicy") & (comp.G == G) & np.isclose(comp.eps, eps)]
    delays = sorted(int(d) for d in sel.d.unique())
    factors = sorted(float(f) for f in sel.eta_factor.unique())
    out = {}
    for inst in m.settings["instances"]:
        s = sel[sel.instance == inst]
        if s.empty:
            continue
        est = np.full((len(factors), len(delays)), np.nan)
        sig = np.zeros_like(est, dtype=bool)
        unstable = np.zeros_like(sig)
        for r in s.itertuples(index=False):
            i, j = factors.index(float(r.eta_factor)), delays.index(int(r.d))
            est[i, j] = r.estimate
            sig[i, j] = bool(r.lo > 0 or r.hi < 0)
            unstable[i, j] = bool(r.fail_rate_gmc > m.protocol.failure_p0)
        e0 = m.etas[(m.etas.instance == inst) & (m.etas.G == G)].eta_tuned
        out[inst] = dict(delays=delays, factors=factors, est=est, sig=sig, unstable=unstable,
                         eta0=float(e0.iloc[0]) if len(e0) else math.nan)
    return out


def plot(data: dict, *, G: int, eps: float, vmax: float | None = None):
    """The heat maps, one per instance, with one colour bar; returns ``(fig, axes)``."""
    n = max(len(data), 1)
    ncol = min(n, 4)
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(2.55 * ncol + 1.1, 2.35 * nrow + 0.9), squeeze=False,
                             layout="constrained")
    if vmax is None:
        finite = [np.nanmax(np.abs(p["est"])) for p in data.values() if np.isfinite(p["est"]).any()]
        vmax = max(max(finite, default=0.0), 0.02)  # at least the margin, so a null map stays pale
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax)
    im = None
    flat = axes.ravel()
    for ax, (inst, p) in zip(flat, data.items()):
        est = p["est"]
        im = ax.imshow(est, cmap=CMAP, norm=norm, origin="lower", aspect="auto")
        for i in range(est.shape[0]):
            for j in range(est.shape[1]):
                v = est[i, j]
                if not np.isfinite(v):
                    continue
                txt = ("0" if v == 0 else f"{v:+.2f}".replace("0.", ".").replace("-", "−")) + (
                    "†" if p["unstable"][i, j] else "")
                ax.text(j, i, txt, ha="center", va="center", fontsize=5.2,
                        color="white" if abs(v) > 0.6 * vmax else "black")
                if p["sig"][i, j]:
                    # inset, so that neighbouring significant cells keep separate frames
                    ax.add_patch(Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, ec="black", lw=1.2))
        ax.set_xticks(range(len(p["delays"])), [str(d) for d in p["delays"]], fontsize=6.5)
        ax.set_yticks(range(len(p["factors"])), [_factor_label(f) for f in p["factors"]], fontsize=6.5)
        ax.set_xlabel("delay d", fontsize=7)
        ax.set_ylabel("η / η₀", fontsize=7)
        ax.grid(False)
        ax.set_title(textwrap.fill(inst, 24) + f"\nη₀ = {p['eta0']:.3g}", fontsize=7)
    for ax in flat[len(data):]:
        ax.set_axis_off()
    if im is not None:
        cb = fig.colorbar(im, ax=axes, shrink=0.85, pad=0.02)
        cb.set_label("nAUC(gmc) − nAUC(onpolicy)", fontsize=7)
        cb.ax.tick_params(labelsize=6.5)
    else:
        common.placeholder(flat[0], "no gmc − onpolicy comparisons in the map")
    fig.suptitle(f"gmc − onpolicy, common η = (η/η₀)·η₀, G = {G}, ε = {eps:g}  (frame: 95 % t-interval excludes 0; "
                 "†: gmc fails above p₀)", fontsize=7.5)
    return fig, axes


def _primary(m) -> tuple[int, float]:
    p = m.protocol.primary
    Gs, epss = m.settings["G"], m.settings["eps"]
    G = int(p["G"]) if int(p["G"]) in Gs else int(Gs[0])
    eps = float(p["eps"]) if any(math.isclose(float(p["eps"]), e) for e in epss) else float(epss[0])
    return G, eps


def evidence(m, G: int, eps: float) -> list[common.Evidence]:
    """One ``reported`` row per instance: the smallest d at which gmc is significantly ahead of onpolicy at
    f = 1 (the η tuned at d = 0 itself), with both boundaries in the note."""
    b = m.boundary
    rows = []
    for r in b[(b.G == G) & np.isclose(b.eps, eps) & np.isclose(b.eta_factor, 1.0)].itertuples(index=False):
        d = None if pd.isna(r.d_gmc_ahead) else int(r.d_gmc_ahead)
        rows.append(common.Evidence("C9", "regime map: smallest d with gmc − onpolicy > 0 in nAUC (95 % paired t, "
                                    "common η₀ tuned at d = 0)", f"{r.instance}, G={G}, ε={eps:g}, η = η₀", d, None, None,
                                    "reported", NAME, note=f"gmc ahead: {r.gmc_ahead}; onpolicy ahead: {r.onpolicy_ahead}"))
    return rows


def _records(df) -> list[dict]:
    """Rows as JSON-able dicts (missing values → None)."""
    return [{k: None if pd.isna(v) else common._jsonable(v) for k, v in row.items()}
            for row in df.astype(object).to_dict(orient="records")]


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    from simulate.protocol import regime_map as rm

    t0 = time.perf_counter()
    style.apply()
    opts = dict(sweep_opts or {})
    if "client" not in opts and "scheduler" not in opts and "dask_local" not in opts:
        opts.setdefault("backend", "local" if int(opts.get("n_workers") or os.cpu_count() or 1) > 1 else "serial")
    m = rm.regime_map(**(rm.QUICK if quick else {}), quick=quick, **opts)
    G, eps = _primary(m)
    fig, _ = plot(panel_data(m, G, eps), G=G, eps=eps)
    ev = evidence(m, G, eps)
    comp = m.comparisons
    keep = ["instance", "d", "G", "eps", "eta_factor", "eta", "comparison", "rival", "kind", "threshold", "n",
            "estimate", "lo", "hi", "verdict", "sign", "nauc_gmc", "nauc_rival", "fail_rate_gmc", "fail_rate_rival"]
    prim = comp[(comp.G == G) & np.isclose(comp.eps, eps)][[c for c in keep if c in comp.columns]]
    meta = common.sidecar(NAME, quick=quick, settings=dict(m.settings, primary_G=G, primary_eps=eps),
                          seeds=dict(tune=list(m.protocol.tune_seeds), eval=m.settings["seeds"]), sweeps=m.sweeps,
                          evidence=ev)
    meta.update(caption=CAPTION, boundary=_records(m.boundary), comparisons=_records(prim),
                etas=_records(m.etas), interval="two-sided 95 % paired t over the held-out seeds, per cell",
                kinds={"gmc − onpolicy": "superiority (threshold +margin)",
                       "gmc − best stable": "noninferiority (threshold −margin)"})
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
