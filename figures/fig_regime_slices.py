"""The regime map's G and ε axes: ``nAUC(gmc) − nAUC(onpolicy)`` over delay × group size and delay × ε.

Two rows of heat maps, one panel per instance: top, the group size G up (at the primary ε); bottom, ε up
(at the primary G); the delay d across; common-η arm at ``η₀`` (onpolicy's η tuned at d = 0 for that
instance and G). Same colour scale, frames and daggers as ``fig_regime_map``, from the same map
(:func:`figures.fig_regime_map.standard`, so a run computes it once).
"""
from __future__ import annotations

import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from figures import common, fig_regime_map as frm, style

NAME = "fig_regime_slices"
TITLE = "Regime map slices: gmc − onpolicy over delay × G and delay × ε (C9, C7)"
CLAIMS = ("C9",)
CAPTION = ("The regime map's other axes, common-η arm at η₀ (onpolicy's η tuned at d = 0 for that instance and G, shared "
           "by every estimator at every d): per instance, nAUC(gmc) − nAUC(onpolicy) (mean over the held-out seeds, "
           "paired), the delay d across; top row: the group size G up at the primary ε; bottom row: ε up at the primary "
           "G (onpolicy ignores ε). Blue: gmc ahead; red: onpolicy ahead; black frame: the 95 % paired t-interval "
           "excludes 0 (per cell); †: gmc fails (divergence, collapse or lock-in) above the protocol's p₀. Predicted: "
           "gmc's bias falls with G (C7), so its advantage at large d should grow with G; larger ε caps less, so gmc "
           "moves towards is (more variance, less bias).")


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    t0 = time.perf_counter()
    style.apply()
    m = frm.standard(quick, sweep_opts)
    G, eps = frm._primary(m)
    dG, de = frm.panel_data(m, G, eps, axis="G"), frm.panel_data(m, G, eps, axis="eps")
    finite = [np.nanmax(np.abs(p["est"])) for d in (dG, de) for p in d.values() if np.isfinite(p["est"]).any()]
    vmax = max(max(finite, default=0.0), 0.02)
    insts = [i for i in m.settings["instances"] if i in dG or i in de]
    n = max(len(insts), 1)
    fig, axes = plt.subplots(2, n, figsize=(2.3 * n + 1.1, 5.0), squeeze=False, layout="constrained")
    im = None
    for row, (data, axis) in enumerate(((dG, "G"), (de, "eps"))):
        for col, inst in enumerate(insts):
            ax = axes[row, col]
            if inst not in data:
                common.placeholder(ax, f"no {axis} slice for {inst}")
                continue
            im = frm.draw_panel(ax, data[inst], vmax)
            ax.set_xlabel("delay d", fontsize=7)
            ax.set_ylabel({"G": "group size G (η = η₀)", "eps": "ε (η = η₀)"}[axis], fontsize=7)
            ax.set_title(inst, fontsize=7)
    if im is not None:
        cb = fig.colorbar(im, ax=axes, shrink=0.85, pad=0.02)
        cb.set_label("nAUC(gmc) − nAUC(onpolicy)", fontsize=7)
        cb.ax.tick_params(labelsize=6.5)
    fig.suptitle(f"gmc − onpolicy in nAUC at η₀: top G (ε = {eps:g}), bottom ε (G = {G})\n(frame: 95 % paired "
                 "t-interval excludes 0; †: gmc fails above p₀)", fontsize=7.5)
    b = m.boundary
    b = b[(b.arm == "common") & np.isclose(b.eta_factor, 1.0)]
    sl = b[((b.G != G) & np.isclose(b.eps, eps)) | ((b.G == G) & ~np.isclose(b.eps, eps))]
    ev = [common.Evidence("C9", "regime map slice: smallest d with gmc − onpolicy > 0 in nAUC (95 % paired t, common η₀)",
                          f"{r.instance}, G={int(r.G)}, ε={r.eps:g}, η = η₀",
                          None if pd.isna(r.d_gmc_ahead) else int(r.d_gmc_ahead), None, None, "reported", NAME,
                          note=f"gmc ahead: {r.gmc_ahead}; onpolicy ahead: {r.onpolicy_ahead}")
          for r in sl.itertuples(index=False)]
    meta = common.sidecar(NAME, quick=quick, settings=dict(m.settings, primary_G=G, primary_eps=eps),
                          seeds=dict(tune=list(m.protocol.tune_seeds), eval=m.settings["seeds"]), sweeps=m.sweeps,
                          evidence=ev)
    meta.update(caption=CAPTION, boundary=frm._records(sl), interval="two-sided 95 % paired t over the held-out seeds")
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
