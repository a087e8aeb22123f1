"""C9 (empirical robustness) under the pre-registered protocol: verdict matrix and learning-curve areas.

Left: one row per C9 sub-claim, one column per instance, the cell's verdict (docs/protocol.md);
the last column is the aggregate over instances. Right: normalised area under the learning curve
(held-out seeds, tuned η, mean and 95 % t-interval) against the delay d at the primary cell, one
panel per instance, gmc / tic / tis / onpolicy / is in colour and the other estimators in grey.
"""
from __future__ import annotations

import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from figures import common, protocol_data, style
from simulate import verdicts as vd
from simulate.protocol.c9 import eval_values

NAME = "fig_c9_protocol"
VERDICT_COLOURS = {vd.HOLDS: "#4daf4a", vd.REFUTED: "#e41a1c", vd.INCONCLUSIVE: "#bbbbbb", vd.OUT_OF_SCOPE: "#ffffff"}
HIGHLIGHT = ("gmc", "tic", "tis", "onpolicy", "is")
CAPTION = ("C9 under the pre-registered protocol. Left: verdict of each sub-claim on each instance (green holds, red "
           "refuted, grey inconclusive, white out of scope) and the aggregate. Right: normalised AUC of the learning "
           "curve against the delay d (held-out seeds, tuned η, 95 % t-intervals). The claim predicts that gmc's "
           "curve stays on top while tic/tis/onpolicy fall with d; look for where the orange gmc curve sits.")


def plot_matrix(c9: dict, ax=None):
    """Verdict heatmap: sub-claims × (instances + aggregate); returns ``(fig, ax)``."""
    m = c9["matrix"]
    insts = list(m.columns)
    rows = list(m.index)
    cols = insts + ["aggregate"]
    order = list(VERDICT_COLOURS)
    grid = np.array([[order.index(m.loc[r, c]) if isinstance(m.loc[r, c], str) else order.index(vd.OUT_OF_SCOPE)
                      for c in insts] + [order.index(c9["aggregate"][r])] for r in rows])
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(style.WIDTH_1COL * 1.3, 2.6))
    ax.imshow(grid, cmap=ListedColormap(list(VERDICT_COLOURS.values())), vmin=-0.5, vmax=len(order) - 0.5,
              aspect="auto")
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            ax.text(j, i, order[grid[i, j]].replace("out of scope", "n/a").replace("inconclusive", "inc."),
                    ha="center", va="center", fontsize=6.5)
    ax.set_xticks(range(len(cols)), cols, rotation=35, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.axvline(len(insts) - 0.5, color="k", lw=1)
    ax.grid(False)
    ax.set_title(f"C9: {c9['verdict']}")
    return fig, ax


def plot_curves(res, axes):
    """nAUC vs d at the primary cell, one axis per instance (highlighted estimators in colour)."""
    p = res.protocol
    eps, G = float(p.primary["eps"]), int(p.primary["G"])
    for ax, inst in zip(axes, p.instances if not res.table.empty else []):
        t = res.table[res.table.instance == inst]
        for e in style.ordered(t.estimator.unique()):
            means, los, his = [], [], []
            for d in p.delays:
                x = eval_values(t, e, int(d), eps, G)
                m, lo, hi = vd.t_interval(x.to_numpy()) if len(x) else (np.nan,) * 3
                means.append(m), los.append(lo), his.append(hi)
            hl = e in HIGHLIGHT
            ax.errorbar(p.delays, means, yerr=[np.subtract(means, los), np.subtract(his, means)],
                        color=style.color(e) if hl else "#cccccc", marker=style.marker(e), ms=3.5 if hl else 2,
                        lw=1.3 if hl else 0.7, capsize=2 if hl else 0, label=e, zorder=3 if hl else 1)
        ax.set_title(inst, fontsize=8)
        ax.set_xlabel("delay d")
    axes[0].set_ylabel(f"nAUC (ε={eps:g}, G={G})")


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    t0 = time.perf_counter()
    style.apply()
    res = protocol_data.result(quick, sweep_opts)
    n = len(res.protocol.instances)
    fig = plt.figure(figsize=(style.WIDTH_2COL * 1.45, 3.4))
    gs = fig.add_gridspec(1, n + 2, width_ratios=[2.2, 0.25] + [1] * n, wspace=0.35)
    plot_matrix(res.c9, fig.add_subplot(gs[0, 0]))
    axes = [fig.add_subplot(gs[0, 2])]
    axes += [fig.add_subplot(gs[0, 2 + i], sharey=axes[0]) for i in range(1, n)]
    plot_curves(res, axes)
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=10, bbox_to_anchor=(0.6, -0.08), fontsize=7)
    c9 = protocol_data.c9_sidecar(res)
    ev = [common.Evidence("C9", f"sub-claim {s}", f"aggregate over {n} instances (primary cell ε={res.protocol.primary['eps']},"
                          f" G={res.protocol.primary['G']}, d={res.protocol.primary['d']})", None, None, None, v, NAME,
                          note="; ".join(f"{i}: {c9['matrix'][s].get(i)}" for i in res.protocol.instances))
          for s, v in res.c9["aggregate"].items()]
    meta = common.sidecar(NAME, quick=quick, settings=dict(protocol=protocol_data.protocol_meta(res)),
                          seeds=dict(tune=list(res.protocol.tune_seeds), eval=list(res.protocol.eval_seeds)),
                          evidence=ev)
    meta.update(caption=CAPTION, protocol=protocol_data.protocol_meta(res), c9=c9)
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
