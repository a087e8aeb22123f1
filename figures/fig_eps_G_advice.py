"""ε, G and η for a given delay (issue 58; exploratory): gmc, tis and grpo on protocol v6's LM-like draws.

Held-out nAUC (IQM over draws × seeds, 95 % stratified bootstrap) against the group size G, per delay (columns)
and budget mode (rows: a fixed trajectory budget, K = budget/G, and a fixed number of steps, K = 64), one line
per estimator × ε, η tuned per cell on the tuning seeds (:mod:`simulate.protocol.advice`). The report's section
gives, per delay, the setting each estimator's tuning scores pick and its held-out number.
"""
from __future__ import annotations

import os
import time

import matplotlib.pyplot as plt
import numpy as np

from figures import common, style
from simulate.protocol import advice as adv

NAME = "fig_eps_G_advice"
SKIP_IN_QUICK = True  # the grid is ~420 tuned cells: minutes, not the quick budget
CAPTION = ("ε, G and η for a delay (exploratory; protocol v6's LM-like draws, η tuned per cell on the tuning seeds). "
           "Held-out nAUC IQM over draws × seeds with 95 % stratified-bootstrap intervals against G; top: a fixed "
           "trajectory budget (a small G also gets more steps), bottom: a fixed number of steps (a large G also sees "
           "more trajectories). gmc in its colour, tis in its, grpo grey; line style: ε.")
LS = {0.1: ":", 0.2: "-", 0.5: "--"}


def _curves(t, seeds):
    from rliable import metrics

    from simulate.protocol import aggregate as ag

    out = {}
    for (mode, d, e, eps), g in t.groupby(["mode", "d", "estimator", "eps"]):
        pts = []
        for G, gg in g.groupby("G"):
            insts = sorted(gg.instance.unique())
            X = ag.score_matrix(gg, e, d, insts, seeds, eta_kind="tuned")
            _, lo, hi = ag.iqm_interval(X, reps=500)
            pts.append((int(G), float(metrics.aggregate_iqm(X)), lo, hi))
        out[(mode, int(d), e, float(eps))] = sorted(pts)
    return out


def section(rows: list[dict], label: str) -> dict:
    """The report section: per delay, each estimator's chosen (ε, G, η) and held-out nAUC in both budget modes."""
    tab = [[f"d = {r['d']}", adv.MODES[r["mode"]], r["estimator"], "—" if r["estimator"] == "grpo" else f"{r['eps']:g}",
            str(r["G"]), str(r["K"]), f"2^{np.log2(r['eta_median']):.1f} [2^{np.log2(r['eta_min']):.1f}, "
            f"2^{np.log2(r['eta_max']):.1f}]", f"{r['iqm']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"] for r in rows]
    return dict(title="Choosing ε, G and η for your delay (exploratory)",
                paragraphs=[f"On protocol v6's {rows[0]['n_instances'] if rows else 0} LM-like draws ({label}), η tuned "
                            "per cell on the tuning seeds by v6's rule, the setting each estimator's tuning score picks "
                            "(the mean over draws of the tuned η's lower confidence bound), and its held-out nAUC: IQM over "
                            "draws × held-out seeds [95 % stratified bootstrap percentile interval]. η is length-"
                            "normalised (grpo runs at T·η): median [range] over the draws. The confound: under a fixed "
                            "trajectory budget a small G also takes more steps (K = budget/G); the fixed-steps rows "
                            f"(K = {adv.STEPS}) remove it. Exploratory: the grid was set after v6 was registered and never "
                            "feeds the headline."],
                tables=[dict(columns=["delay", "budget mode", "estimator", "ε", "G", "K", "η: median [range]",
                                      "held-out nAUC IQM [95 % CI]"], rows=tab)])


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    from simulate.protocol.spec import V6_PATH, load_protocol

    t0 = time.perf_counter()
    style.apply()
    proto = load_protocol(V6_PATH, quick=quick)
    opts = dict(sweep_opts or {})
    if "client" not in opts and "scheduler" not in opts:
        opts["backend"] = "local" if int(opts.get("n_workers") or os.cpu_count() or 1) > 1 else "serial"
    t = adv.run_advice(quick, **opts)
    rows = adv.recommend(t, proto.eval_seeds)
    curves = _curves(t, proto.eval_seeds)
    fig, axes = plt.subplots(2, len(adv.DELAYS), figsize=(3.4 * len(adv.DELAYS), 5.0), squeeze=False, sharey=True)
    for i, mode in enumerate(adv.MODES):
        for j, d in enumerate(adv.DELAYS):
            ax = axes[i, j]
            for (m, dd, e, eps), pts in curves.items():
                if m != mode or dd != d:
                    continue
                G, y, lo, hi = (np.array(v) for v in zip(*pts))
                ax.errorbar(G, y, yerr=[y - lo, hi - y], color=style.color(e), ls=LS.get(eps, "-"), marker=style.marker(e),
                            ms=3, lw=1.1, capsize=2, label=f"{e}" + ("" if e == "grpo" else f", ε = {eps:g}"))
            ax.set_xscale("log", base=2)
            ax.set_xticks(adv.GROUP_SIZES, [str(g) for g in adv.GROUP_SIZES])
            ax.set_title(f"d = {d}, {mode}", fontsize=8)
            ax.set_xlabel("G")
            if j == 0:
                ax.set_ylabel("held-out nAUC (IQM)")
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=4, fontsize=6.5)
    fig.subplots_adjust(bottom=0.22, hspace=0.4)
    meta = common.sidecar(NAME, quick=quick, settings=dict(protocol=proto.label, grid={k: list(v) for k, v in adv.GRID.items()},
                                                           G=list(adv.GROUP_SIZES), delays=list(adv.DELAYS),
                                                           steps=adv.STEPS),
                          seeds=dict(tune=list(proto.tune_seeds), eval=list(proto.eval_seeds)))
    meta.update(caption=CAPTION, advice=rows, sections=[section(rows, proto.label)])
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), [], [], time.perf_counter() - t0)
