"""Protocol v6 (confirmatory): gmc against the fixed rival set on instance families drawn by seed.

Per family (tabular, lm-like) and delay d ∈ {0, 8, 32}, on both step-size arms: the IQM difference
``IQM(nAUC_gmc) − IQM(nAUC_rival)`` and the probability of improvement ``P(gmc > rival)``, each with a 95 %
stratified-bootstrap interval over instances × held-out seeds (:mod:`simulate.protocol.aggregate`). These are the
report's answer-table entries (groups ``tabular-family``, ``lm-like-family``) from which the headline is computed
(simulate/protocol/headline.py). The figure: performance profiles (fraction of runs with nAUC > τ) of gmc and
every rival per family at d = 8 and d = 32, on the primary arm. The per-instance paired t-intervals go to the
appendix.
"""
from __future__ import annotations

import os
import time

import matplotlib.pyplot as plt
import numpy as np

from figures import common, style
from simulate import verdicts as vd
from simulate.protocol import aggregate as ag

NAME = "fig_protocol_v6"
#: ``--quick`` leaves it out loudly: its quick overlay (4 draws × 11 estimators × 3 delays × 2 arms) took longer than
#: the 3-minute quick budget (a 2-draw calibration run: 187 s on 2 loaded cores, most of it each worker's compile).
SKIP_IN_QUICK = True
#: report group of each family (figures/report/answer.py GROUPS)
FAMILY_GROUPS = {"tabular": "tabular-family", "lm-like": "lm-like-family"}
ARMS = {"tuned": "tuned η", "common": "common η"}
PROFILE_DELAYS = (8, 32)
CAPTION = ("Protocol v6 (confirmatory; instances drawn by seed). Performance profiles: the fraction of held-out runs "
           "(instances × seeds) whose normalised AUC exceeds τ, per family (rows) at d = 8 and d = 32 (columns), η tuned "
           "per estimator. gmc in black, its rivals in colour; a curve above another is better at every τ. The numbers "
           "(IQM difference, probability of improvement, 95 % stratified bootstrap) are in the report's answer table.")


def run(quick: bool = False, sweep_opts: dict | None = None):
    """The v6 :class:`~simulate.protocol.ProtocolResult` (cells cached and resumable through the sweep engine)."""
    from simulate.protocol import run_protocol
    from simulate.protocol.spec import V6_PATH

    opts = dict(sweep_opts or {})
    if "client" not in opts and "scheduler" not in opts:
        opts["backend"] = "local" if int(opts.get("n_workers") or os.cpu_count() or 1) > 1 else "serial"
    return run_protocol(V6_PATH, quick=quick, **opts)


def family_instances(proto) -> dict[str, list[str]]:
    """``{family: [instance, …]}`` of the protocol's instances, in order."""
    from simulate.protocol.families import by_family

    return by_family(proto.instances)


def answer_rows(res) -> list[dict]:
    """gmc − rival per family × d × arm: IQM difference (``delta``, ``lo``, ``hi``) and probability of improvement
    (``poi``, ``poi_lo``, ``poi_hi``), stratified bootstrap over instances × held-out seeds
    (:func:`simulate.protocol.aggregate.family_comparisons`)."""
    p = res.protocol
    out = []
    for arm in p.step_arms:
        for c in ag.family_comparisons(res.table, p, "gmc", p.rivals, arm):
            fam, n_inst = c["family"], c["n_instances"]
            out.append(dict(group=FAMILY_GROUPS[fam], setting=f"{fam} family ({n_inst} drawn instances)",
                            d=c["d"], rival=c["rival"], arm=ARMS[arm], metric="nAUC IQM", delta=c["delta"], lo=c["lo"],
                            hi=c["hi"], poi=c["poi"], poi_lo=c["poi_lo"], poi_hi=c["poi_hi"],
                            n=c["n_seeds"] * n_inst, interval=ag.INTERVAL, protocol=p.label,
                            primary=arm == p.primary_arm))
    return out


def per_instance_rows(res) -> list[dict]:
    """The appendix: gmc − rival per instance × d × arm, paired over held-out seeds, mean and 95 % t-interval."""
    p = res.protocol
    eps, G = float(p.primary["eps"]), int(p.primary["G"])
    rows = []
    for arm in p.step_arms:
        for d in p.delays:
            X = ag.score_matrix(res.table, "gmc", d, p.instances, p.eval_seeds, eta_kind=arm, eps=eps, G=G)
            for r in p.rivals:
                Y = ag.score_matrix(res.table, r, d, p.instances, p.eval_seeds, eta_kind=arm, eps=eps, G=G)
                for j, inst in enumerate(p.instances):
                    m, lo, hi = vd.t_interval(X[:, j] - Y[:, j], 0.95)
                    rows.append(dict(instance=inst, d=int(d), arm=arm, rival=r, gmc_minus_rival=m, lo=lo, hi=hi))
    return rows


def c9_table(res) -> dict:
    """C9's sub-claims judged on v6's drawn instances (appendix): the aggregate verdict and the per-instance counts."""
    from collections import Counter

    m, agg = res.c9["matrix"], res.c9["aggregate"]
    rows = []
    for sub in m.index:
        cnt = Counter(v if isinstance(v, str) else vd.OUT_OF_SCOPE for v in m.loc[sub])
        rows.append([sub, agg.get(sub, ""), ", ".join(f"{w} {n}" for w, n in cnt.most_common())])
    return dict(title=f"C9's sub-claims on protocol v6's {m.shape[1]} drawn instances (primary cell; rules of "
                      f"docs/protocol.md; counts of the per-instance verdicts)",
                columns=["C9 sub-claim", "verdict (aggregate)", "per-instance counts of each word"], rows=rows)


def plot(res, delays=PROFILE_DELAYS):
    """Performance profiles per family (rows) × delay (columns) on the primary arm; returns ``(fig, axes)``."""
    p = res.protocol
    fams = family_instances(p)
    eps, G = float(p.primary["eps"]), int(p.primary["G"])
    taus = np.linspace(-0.25, 1.25, 121)
    fig, axes = plt.subplots(len(fams), len(delays), figsize=(3.3 * len(delays), 2.6 * len(fams)), squeeze=False,
                             sharex=True, sharey=True)
    for i, (fam, insts) in enumerate(fams.items()):
        for j, d in enumerate(delays):
            ax = axes[i, j]
            for e in ("gmc", *p.rivals):
                X = ag.score_matrix(res.table, e, d, insts, p.eval_seeds, eta_kind=p.primary_arm, eps=eps, G=G)
                ax.plot(taus, ag.performance_profile(X, taus), color=style.color(e),
                        lw=1.8 if e == "gmc" else 0.9, label=e, zorder=3 if e == "gmc" else 2)
            ax.set_title(f"{fam} family, d = {d}", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == len(fams) - 1:
                ax.set_xlabel("τ (nAUC)")
            if j == 0:
                ax.set_ylabel("fraction of runs > τ")
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=6, fontsize=6.5, bbox_to_anchor=(0.5, 0.0))
    fig.subplots_adjust(bottom=0.22, hspace=0.35)
    return fig, axes


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    t0 = time.perf_counter()
    style.apply()
    res = run(quick, sweep_opts)
    p = res.protocol
    fig, _ = plot(res)
    rows = answer_rows(res)
    meta = common.sidecar(NAME, quick=quick, settings=dict(protocol=p.label, families=family_instances(p),
                                                           rivals=list(p.rivals), delays=list(p.delays),
                                                           primary_arm=p.primary_arm, boot_reps=ag.BOOT_REPS,
                                                           boot_seed=ag.BOOT_SEED),
                          seeds=dict(tune=list(p.tune_seeds), eval=list(p.eval_seeds)))
    meta.update(caption=CAPTION, answer=rows, v6=dict(name=p.name, sha256=p.sha256, label=p.label, registered=p.registered,
                                                     rivals=list(p.rivals), delays=list(p.delays),
                                                     primary_arm=p.primary_arm, families=family_instances(p)),
                appendix_tables=[dict(title=f"Protocol v6 ({p.label}) per instance: gmc − rival (nAUC), paired over "
                                            f"{len(p.eval_seeds)} held-out seeds, mean [95 % t-interval]",
                                      columns=["instance", "arm", "d", "rival", "gmc − rival [95 % t]"],
                                      rows=[[r["instance"], r["arm"], r["d"], r["rival"],
                                             f"{r['gmc_minus_rival']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"]
                                            for r in per_instance_rows(res)]),
                                 c9_table(res)])
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), [], [], time.perf_counter() - t0)
