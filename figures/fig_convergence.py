"""Figure 5 (C9): convergence at the largest delay and final J against delay, in both simulator regimes.

One row per regime of ``simulate.experiments.REGIMES`` (``far``: realised χ² ~ 10³–10⁶ at the
largest d; ``local``: χ² ≲ 1, C6's local-overlap regime). Two sweeps per regime. First, one cell per
estimator runs ``simulate.experiments.robustness_experiment`` (η tuned per (estimator, d) for the
best mean final J; all ten estimators, trajectory- and token-level). Second, one cell per estimator
re-runs the tuned setting's seeds at the largest delay with :func:`figures.cells.curve_cell` to draw
mean curves of the gap ``J* − J(θ_k)`` and of ``‖∇J(θ_k)‖²`` (log axes: in the local regime every J
saturates near J*) (shaded: 95 % CI over seeds). The last column is the tuned
final J against d (t-intervals over seeds). The verdict is ``simulate.experiments.c9_verdict`` on each
regime's tuned table, one evidence row per part of C9 and regime; the regime's realised χ² and its
criteria (``simulate.experiments.regime_criteria``) are reported next to it.
"""
from __future__ import annotations

import math
import time

import numpy as np

from sweep import Cell, Sweep
from figures import common, stats, style

NAME = "fig5_convergence"
TITLE = "Convergence across delays (C9)"
CLAIMS = ("C9",)
REGIME_NAMES = ("far", "local")


def estimators():
    from simulate.training import ALL_ESTIMATORS

    return tuple(ALL_ESTIMATORS)


def _suffix(quick: bool, regime: str) -> str:
    return ("" if regime == "far" else f"_{regime}") + ("_quick" if quick else "")


def tuned_sweep(quick: bool, regime: str = "far") -> Sweep:
    """One cell per estimator: ``robustness_experiment`` in ``regime`` (η tuned per d)."""
    return Sweep.from_grid(f"robust{_suffix(quick, regime)}", "figures.cells:robust_cell",
                           {"estimator": list(estimators())}, fixed={"quick": quick, "regime": regime})


def curve_sweep(tuned, quick: bool, regime: str = "far", ds=None) -> Sweep:
    """One cell per (estimator, d in ``ds``; default the largest d): mean curves at the tuned η."""
    ds = [int(tuned.d.max())] if ds is None else [int(d) for d in ds]
    cells = []
    for r in tuned.itertuples():
        if int(r.d) not in ds or not np.isfinite(r.eta):
            continue  # every η diverged: nothing to draw, the table says so
        cells.append(Cell(f"estimator={r.estimator},d={int(r.d)}",
                          {"estimator": r.estimator, "d": int(r.d), "eta": float(r.eta), "G": int(r.G),
                           "eps": float(r.eps), "steps": int(r.steps), "n_seeds": int(r.n_seeds), "regime": regime}))
    return Sweep(f"curves{_suffix(quick, regime)}", "figures.cells:curve_cell", tuple(cells))


def plot_regime(tuned, curves, axes, title: str = ""):
    """One row: ``J* − J(θ_k)`` and ``‖∇J(θ_k)‖²`` at the largest d, then final J against d; returns axes."""
    d = int(tuned.d.max())
    names = style.ordered(tuned["estimator"].unique())
    for i, q in enumerate(("gap", "grad_norm2")):
        ax = axes[i]
        for name in names:
            s = curves[(curves.estimator == name) & (curves.d == d) & (curves.quantity == q)]
            if s.empty:
                continue
            lo, hi = stats.ci(s["value"], s["se"])
            lo = np.where(lo > 0, lo, s["value"])  # log axis: a CI reaching 0 is drawn only above the mean
            ax.plot(s["k"], s["value"], color=style.color(name), lw=1.0, label=name)
            ax.fill_between(s["k"], lo, hi, color=style.color(name), alpha=0.15, lw=0)
        ax.set_yscale("log")
        ax.set_xlabel("learner step $k$")
        ax.set_ylabel(r"$J^* - J(\theta_k)$" if q == "gap" else r"$\|\nabla J(\theta_k)\|^2$")
        ax.set_title(f"{title}, d = {d}" if i == 0 else f"d = {d}, tuned η")
    axf = axes[2]
    for name in names:
        s = tuned[tuned.estimator == name].sort_values("d")
        axf.errorbar(s["d"] + 0.5, s["final_J"], yerr=[s["final_J"] - s["final_J_lo"], s["final_J_hi"] - s["final_J"]],
                     color=style.color(name), marker=style.marker(name), capsize=2, lw=1.0, label=name)
    import matplotlib.ticker as mticker

    ds = sorted(int(x) for x in tuned["d"].unique())
    axf.set_xscale("log")
    axf.xaxis.set_minor_formatter(mticker.NullFormatter())
    axf.set_xticks([x + 0.5 for x in ds], [str(x) for x in ds])
    axf.set_xlabel("delay $d$ (steps; axis: log of d + 0.5)")
    axf.set_ylabel(r"final $J(\theta_K)$, tuned $\eta$ (95% CI)")
    axf.set_title("final J vs delay")
    return axes


def plot(results: dict, axes=None):
    """``results[regime] = (tuned, curves, title)``: one row per regime; returns (fig, axes)."""
    import matplotlib.pyplot as plt

    n = len(results)
    if axes is None:
        fig, axes = plt.subplots(n, 3, figsize=(style.WIDTH_2COL, 2.6 * n + 0.4), squeeze=False)
    else:
        fig = axes[0, 0].figure
    for row, (tuned, curves, title) in zip(axes, results.values()):
        plot_regime(tuned, curves, row, title)
    axes[0, 2].legend(loc="best", fontsize=5.5, ncol=2)
    fig.tight_layout()
    return fig, axes


def regime_meta(tuned, regime: str) -> dict:
    """The sidecar's description of one regime: median χ² at the largest d, grid-edge counts, criteria."""
    from simulate.experiments import get_regime, regime_criteria

    crit = regime_criteria(tuned)
    reg = get_regime(regime)
    chi = float(crit["chi2"]["value"])
    return {"claim": "C9", "chi2_median": chi if math.isfinite(chi) else None, "d": int(tuned.d.max()),
            "what": f"{reg.instance.label}, K={int(tuned.steps.max())}, G={int(tuned.G.iloc[0])}, "
                    f"d∈{sorted(int(x) for x in tuned.d.unique())}, {int(tuned.n_seeds.max())} seeds",
            "n_edge": int(tuned["edge"].sum()), "n_cells": len(tuned),
            "edge_cells": [f"{r.estimator} d={int(r.d)}" for r in tuned.itertuples() if r.edge],
            "criteria": {k: v["detail"] for k, v in crit.items()}}


def evidence(tuned, meta: dict | None = None) -> list[tuple[str, common.Evidence]]:
    """``(label, Evidence)`` rows of one regime: C9's four parts, gmc's final J, the spread and χ²."""
    from simulate.experiments import c9_verdict

    ev = []
    dmax = tuned.d.max()
    for part, v in c9_verdict(tuned).items():
        h = v.get("holds")
        ev.append((part, common.Evidence("C9", part, f"largest d = {int(dmax)}", None, None, None,
                                         "not measured" if h is None else ("holds" if h else "violated"), NAME,
                                         note=v.get("detail", ""))))
    g = tuned[(tuned.estimator == "gmc") & (tuned.d == dmax)]
    if len(g):
        r = g.iloc[0]
        se = (r.final_J_hi - r.final_J_lo) / (2 * stats.Z)
        ev.append(("gmc final J", common.Evidence(
            "C9", "final J of gmc at tuned η", f"d = {int(dmax)}", r.final_J, se, None, "reported", NAME,
            note=f"{r.final_J:.6f} [{r.final_J_lo:.6f}, {r.final_J_hi:.6f}] (t-interval over seeds, "
                 f"simulate.experiments.mean_ci, shown as ±z·se)")))
    at = tuned[(tuned.d == dmax) & np.isfinite(tuned.final_J)]
    if len(at) >= 2:
        best, worst = at.loc[at.final_J.idxmax()], at.loc[at.final_J.idxmin()]
        ev.append(("spread", common.Evidence(
            "C9", "spread of tuned final J over estimators (max − min)", f"d = {int(dmax)}",
            float(best.final_J - worst.final_J), None, None, "reported", NAME,
            note=f"best {best.estimator} {best.final_J:.5g}, worst {worst.estimator} {worst.final_J:.5g}; "
                 f"{len(at)} estimators")))
    if meta is not None:
        ev.append(("χ²", common.Evidence(
            "C9", "median realised χ²(π_θ‖μ) at the tuned η", f"d = {meta['d']}", meta["chi2_median"], None, None,
            "reported", NAME, note="; ".join(meta["criteria"].values()))))
    return ev


def main(out_dir, quick: bool = False, *, sweep_opts: dict | None = None) -> common.FigureResult:
    """Run both sweeps per regime (cached), draw figure 5, return C9's evidence per regime."""
    from figures.report import tag

    t0 = time.perf_counter()
    style.apply()
    results, regimes, sweeps, ev_all, rows, n_seeds = {}, {}, [], [], [], {}
    for regime in REGIME_NAMES:
        sw1 = tuned_sweep(quick, regime)
        tuned = common.run(sw1, sweep_opts).table
        sw2 = curve_sweep(tuned, quick, regime)
        curves = common.run(sw2, sweep_opts).table
        sweeps += [sw1.id, sw2.id]
        regimes[regime] = meta = regime_meta(tuned, regime)
        chi = "—" if meta["chi2_median"] is None else f"{meta['chi2_median']:.2g}"
        results[regime] = (tuned, curves, f"{regime} (median χ² {chi})")
        labelled = evidence(tuned, meta)
        ev_all += [e for _, e in labelled]
        rows += tag([e for _, e in labelled], regime, [lab for lab, _ in labelled])
        n_seeds[regime] = int(tuned.n_seeds.max())
    fig, _ = plot(results)
    meta = common.sidecar(NAME, quick=quick,
                          settings={"quick": quick, "d": {r: sorted(int(x) for x in t.d.unique())
                                                          for r, (t, _, _) in results.items()}},
                          seeds=f"range(n_seeds) per setting, n_seeds={n_seeds}", sweeps=sweeps, evidence=())
    meta["evidence"], meta["regimes"] = rows, regimes
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev_all, [], time.perf_counter() - t0)
