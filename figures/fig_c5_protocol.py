"""C5 in training under the pre-registered protocol: the delay cost Δ(G) for gmc and tic per instance.

Each panel is one instance: ``Δ(G) = nAUC(d=0) − nAUC(d)`` (held-out seeds, mean and 95 % t-interval)
with η re-tuned per G (test B, solid) and at one fixed η (test A, dashed), all at the same number of
learner steps K. The title gives the instance's median χ² (the premise: local overlap, χ² ≤ 1) and
its C5 verdict; an instance whose premise fails is marked out of scope, not refuted.
"""
from __future__ import annotations

import time

import matplotlib.pyplot as plt
import numpy as np

from figures import common, protocol_data, style
from simulate import verdicts as vd
from simulate.protocol.c5 import delta_matrix

NAME = "fig_c5_protocol"
CAPTION = ("C5 in training: delay cost Δ(G) = nAUC(d=0) − nAUC(d) against the group size G (log scale) for gmc and "
           "tic, η re-tuned per G (solid, test B) and fixed (dashed, test A), same number of steps K for every G. "
           "The bound predicts gmc's Δ falls roughly as G^(−2/5) while tic's stays flat; panels whose median χ² "
           "exceeds 1 are outside the claim's premise (out of scope).")


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    t0 = time.perf_counter()
    style.apply()
    res = protocol_data.result(quick, sweep_opts)
    p = res.protocol
    insts = list(p.instances)
    fig, axes = plt.subplots(1, len(insts), figsize=(style.WIDTH_2COL * 1.3, 2.5), sharey=True, squeeze=False)
    Gs = np.asarray(p.c5["G"], dtype=float)
    per = res.c5.get("per_instance", {})
    for ax, inst in zip(axes[0], insts):
        for e in p.c5["estimators"]:
            for table, kind, ls in ((res.c5_table, "tuned", "-"), (res.fixed, "fixed", "--")):
                t = table[table.instance == inst]
                if t.empty:
                    continue
                D = delta_matrix(t, e, p, eta_kind=kind)
                ci = np.array([vd.t_interval(D[:, j]) for j in range(D.shape[1])])
                ax.errorbar(Gs * (1.04 if ls == "--" else 1.0), ci[:, 0], yerr=[ci[:, 0] - ci[:, 1], ci[:, 2] - ci[:, 0]],
                            color=style.color(e), ls=ls, marker=style.marker(e), capsize=2,
                            label=f"{e} ({'tuned η' if kind == 'tuned' else 'fixed η'})")
        r = per.get(inst, {})
        ax.set_xscale("log", base=2)
        ax.axhline(0, color=style.REFERENCE, lw=0.6)
        ax.set_title(f"{inst}\nχ² {r.get('chi2_median', float('nan')):.2g}: {r.get('verdict', '—')}", fontsize=7.5)
        ax.set_xlabel("G")
    axes[0, 0].set_ylabel(f"Δ(G), d = {p.c5['d']}, K = {p.c5['steps']}")
    axes[0, 0].legend(fontsize=6)
    c5 = protocol_data.c5_sidecar(res)
    ev = [common.Evidence("C5", "delay cost falls with G (tests A, B)", f"{inst}, d={p.c5['d']}, K={p.c5['steps']}",
                          r.get("chi2_median"), None, None, r["verdict"], NAME, note=r.get("reason", ""))
          for inst, r in per.items()]
    ev.append(common.Evidence("C5", "aggregate over instances", f"{len(per)} instances", None, None, None,
                              res.c5.get("verdict", vd.OUT_OF_SCOPE), NAME))
    meta = common.sidecar(NAME, quick=quick, settings=dict(protocol=protocol_data.protocol_meta(res)),
                          seeds=dict(tune=list(p.tune_seeds), eval=list(p.eval_seeds)), evidence=ev)
    meta.update(caption=CAPTION, protocol=protocol_data.protocol_meta(res), c5=c5)
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
