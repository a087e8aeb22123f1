"""C9 (empirical robustness) under the pre-registered protocol: verdict matrix and learning-curve areas.

Top: one row per C9 sub-claim, one column per instance, the cell's verdict (docs/protocol.md);
the last column is the aggregate over instances. Bottom: normalised area under the learning curve
(held-out seeds, tuned η, mean and 95 % t-interval) against the delay d at the primary cell, one
panel per instance, gmc / tic / tis / onpolicy / is in colour and the other estimators in grey.
The layout sizes itself from the data (cell size from the longest label, figure width from the
number of instances and columns), so new sub-claims or instances fit without code changes.
"""
from __future__ import annotations

import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from figures import common, protocol_data, style
from simulate import verdicts as vd
from simulate.protocol.c9 import eval_values

NAME = "fig_c9_protocol"
VERDICT_COLOURS = {vd.HOLDS: "#4daf4a", vd.REFUTED: "#e41a1c", vd.INCONCLUSIVE: "#bbbbbb", vd.OUT_OF_SCOPE: "#ffffff"}
#: the words written in the cells (one short word each, so that the cell size can be set from them)
CELL_WORDS = {vd.HOLDS: "holds", vd.REFUTED: "refuted", vd.INCONCLUSIVE: "inconcl.", vd.OUT_OF_SCOPE: "n/a"}
OTHER_COLOUR = "#fdd49e"  # a verdict outside the four above (drawn with its own text, never dropped)
HIGHLIGHT = ("gmc", "tic", "tis", "onpolicy", "is")
CELL_FONT = 6.5  # points
CAPTION = ("C9 under the pre-registered protocol. Top: verdict of each sub-claim (rows) on each instance (columns; green "
           "holds, red refuted, grey inconclusive, white n/a = out of scope) and, right of the black line, the aggregate "
           "over instances; the verdicts are taken at the primary cell (its ε, G and delay d in the panel titles). Bottom: "
           "normalised AUC of the learning curve against the delay d per instance (held-out seeds, tuned η, mean and 95 % "
           "t-interval over seeds); the dotted vertical line is the primary cell's d. Predicted (C9): gmc's curve stays on "
           "top or tied at every d while tic, tis and onpolicy fall with d, and is becomes unstable; a qualitative "
           "claim, so no curve is drawn for it — compare where the orange gmc curve sits with the others at the dotted line.")


def _word(v) -> str:
    if not isinstance(v, str):
        return CELL_WORDS[vd.OUT_OF_SCOPE]
    return CELL_WORDS.get(v, v)


def _colour_index(v, order) -> int:
    if not isinstance(v, str):
        return order.index(vd.OUT_OF_SCOPE)
    if v in order:
        return order.index(v)
    if v.startswith(vd.HOLDS):  # "holds, bound loose ×k" and the like
        return order.index(vd.HOLDS)
    return len(order)  # OTHER_COLOUR


def matrix_cells(c9: dict):
    """(rows, columns, verdict strings) of the heat map: sub-claims × (instances + aggregate)."""
    m = c9["matrix"]
    insts = [str(c) for c in m.columns]
    rows = [str(r) for r in m.index]
    agg = c9.get("aggregate", {})
    cells = [[m.loc[r, c] for c in m.columns] + [agg.get(r)] for r in m.index]
    return rows, insts + ["aggregate"], cells


def matrix_size(c9: dict, font: float = CELL_FONT) -> tuple[float, float]:
    """(width, height) in inches of the heat map's cells, from the number of cells and the longest word."""
    rows, cols, cells = matrix_cells(c9)
    longest = max((len(_word(v)) for row in cells for v in row), default=4)
    cell_w = max(0.5, 0.62 * font / 72 * longest + 0.14)  # DejaVu Sans: ~0.6 em per character, plus padding
    cell_h = max(0.24, 2.4 * font / 72)
    return cell_w * len(cols), cell_h * len(rows)


def plot_matrix(c9: dict, ax=None, title: str | None = None):
    """Verdict heatmap: sub-claims × (instances + aggregate); returns ``(fig, ax)``."""
    rows, cols, cells = matrix_cells(c9)
    order = list(VERDICT_COLOURS)
    grid = np.array([[_colour_index(v, order) for v in row] for row in cells])
    if ax is None:
        w, h = matrix_size(c9)
        fig, ax = plt.subplots(figsize=(w + 1.6, h + 1.4))
    fig = ax.figure
    ax.imshow(grid, cmap=ListedColormap([*VERDICT_COLOURS.values(), OTHER_COLOUR]), vmin=-0.5,
              vmax=len(order) + 0.5, aspect="auto")
    for i, row in enumerate(cells):
        for j, v in enumerate(row):
            ax.text(j, i, _word(v), ha="center", va="center", fontsize=CELL_FONT)
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right", rotation_mode="anchor", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_xticks(np.arange(len(cols) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(rows) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", lw=1.0)
    ax.grid(which="major", visible=False)
    ax.tick_params(which="minor", length=0)
    ax.axvline(len(cols) - 1.5, color="k", lw=1.2)
    ax.set_xlabel("instance (right of the line: aggregate over instances)", fontsize=7)
    ax.set_ylabel("C9 sub-claim", fontsize=7)
    ax.set_title(title or f"C9: {c9['verdict']}", fontsize=8.5, loc="left")
    return fig, ax


def curve_data(res) -> dict:
    """{instance: {estimator: (delays, mean, lo, hi)}} of nAUC at the primary cell (tuned η, 95 % t-intervals)."""
    p = res.protocol
    eps, G = float(p.primary["eps"]), int(p.primary["G"])
    out = {}
    for inst in (p.instances if not res.table.empty else []):
        t = res.table[res.table.instance == inst]
        out[inst] = {}
        for e in style.ordered(t.estimator.unique()):
            rows = []
            for d in p.delays:
                x = eval_values(t, e, int(d), eps, G)
                rows.append(vd.t_interval(x.to_numpy()) if len(x) else (np.nan,) * 3)
            m, lo, hi = (np.array(c, dtype=float) for c in zip(*rows))
            out[inst][e] = (np.asarray(p.delays, dtype=float), m, lo, hi)
    return out


def plot_curves(data: dict, axes, *, eps: float, G: int, d_primary: float | None = None):
    """nAUC vs d, one axis per instance (highlighted estimators in colour)."""
    for ax, (inst, per) in zip(axes, data.items()):
        for e, (ds, means, los, his) in per.items():
            hl = e in HIGHLIGHT
            ax.errorbar(ds, means, yerr=[means - los, his - means], color=style.color(e) if hl else "#cccccc",
                        marker=style.marker(e), ms=3.5 if hl else 2, lw=1.3 if hl else 0.7, capsize=2 if hl else 0,
                        label=e, zorder=3 if hl else 1)
        if d_primary is not None:
            ax.axvline(d_primary, color=style.REFERENCE, ls=":", lw=0.8, zorder=0)
        ds = sorted({float(x) for per_e in per.values() for x in per_e[0]})
        ax.set_xticks(ds, [f"{x:g}" for x in ds])
        ax.set_title(textwrap.fill(inst, 16, break_on_hyphens=True), fontsize=7.5)
        ax.set_xlabel("delay d")
        ax.tick_params(labelsize=7)
    if len(axes):
        axes[0].set_ylabel(f"nAUC (ε={eps:g}, G={G})")


def plot(c9: dict, curves: dict, *, eps: float, G: int, d_primary: float | None = None):
    """The whole figure: the verdict matrix above, the nAUC panels below; sizes from the data. Returns (fig, axes)."""
    rows, cols, _ = matrix_cells(c9)
    mw, mh = matrix_size(c9)
    em = 0.6 * 7 / 72  # inches per character of the 7-pt tick labels
    below = em * max(map(len, cols)) * 0.5 + 0.45  # rotated (30°) column names and the x label
    beside = em * max(map(len, rows)) + 0.45  # row names and the y label
    n = max(len(curves), 1)
    panel_w = 1.45
    width = max(n * panel_w + 0.9, beside + mw + 0.4)
    top_h, bottom_h = mh + below + 0.45, 2.5
    fig = plt.figure(figsize=(width, top_h + bottom_h))
    top, bottom = fig.subfigures(2, 1, height_ratios=[top_h, bottom_h], hspace=0.0)
    # the matrix axes get exactly its cells' size; the labels go in the margins computed above
    ax_m = top.add_axes([beside / width, below / top_h, mw / width, mh / top_h])
    cell = f"ε = {eps:g}, G = {G}" + (f", d = {d_primary:g}" if d_primary is not None else "")
    plot_matrix(c9, ax_m, title=f"C9: {c9['verdict']}  (verdicts at the primary cell {cell})")
    axes = bottom.subplots(1, n, sharey=True, squeeze=False)[0]
    bottom.subplots_adjust(left=0.65 / width, right=1 - 0.1 / width, bottom=0.3, top=0.84, wspace=0.12)
    plot_curves(curves, axes, eps=eps, G=G, d_primary=d_primary)
    h, lab = axes[0].get_legend_handles_labels()
    bottom.legend(h, lab, loc="lower center", ncol=min(len(lab), 10) or 1, fontsize=6.5, bbox_to_anchor=(0.5, 0.0),
                  handlelength=1.6, columnspacing=1.0)
    return fig, [ax_m, *axes]


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    t0 = time.perf_counter()
    style.apply()
    res = protocol_data.result(quick, sweep_opts)
    n = len(res.protocol.instances)
    p = res.protocol
    fig, _ = plot(res.c9, curve_data(res), eps=float(p.primary["eps"]), G=int(p.primary["G"]),
                  d_primary=float(p.primary["d"]))
    c9 = protocol_data.c9_sidecar(res)
    ev = [common.Evidence("C9", f"sub-claim {s}", f"aggregate over {n} instances (primary cell ε={res.protocol.primary['eps']},"
                          f" G={res.protocol.primary['G']}, d={res.protocol.primary['d']})", None, None, None, v, NAME,
                          note="; ".join(f"{i}: {c9['matrix'][s].get(i)}" for i in res.protocol.instances))
          for s, v in res.c9["aggregate"].items()]
    meta = common.sidecar(NAME, quick=quick, settings=dict(protocol=protocol_data.protocol_meta(res)),
                          seeds=dict(tune=list(res.protocol.tune_seeds), eval=list(res.protocol.eval_seeds)),
                          evidence=ev)
    meta.update(caption=CAPTION, protocol=protocol_data.protocol_meta(res), c9=c9)
    if res.protocol.version >= 4:  # the one-screen report's interface (figures/report.py)
        meta.update(answer=protocol_data.answer_rows(res), sections=[protocol_data.scope_section(res)],
                    appendix_tables=protocol_data.appendix_tables(res))
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
