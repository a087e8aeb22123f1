"""Figure 5 (C9): convergence curves ``J(θ_k)`` and ``‖∇J(θ_k)‖²`` across delays, and final J against delay.

Two sweeps. First, one cell per estimator runs ``simulate.experiments.robustness_experiment``
(η tuned per (estimator, d) for the best mean final J; all ten estimators, trajectory- and
token-level). Second, one cell per (estimator, d) re-runs the tuned setting's seeds with
:func:`figures.cells.curve_cell` to draw mean curves (shaded: 95 % CI over seeds). The verdict is
``simulate.experiments.c9_verdict`` on the tuned table, one evidence row per part of C9.
"""
from __future__ import annotations

import time

import numpy as np

from asyncgrpo.sweep import Cell, Sweep
from figures import common, stats, style

NAME = "fig5_convergence"
TITLE = "Convergence across delays (C9)"
CLAIMS = ("C9",)


def estimators():
    from simulate.training import ALL_ESTIMATORS

    return tuple(ALL_ESTIMATORS)


def tuned_sweep(quick: bool) -> Sweep:
    return Sweep.from_grid(f"robust{'_quick' if quick else ''}", "figures.cells:robust_cell",
                           {"estimator": list(estimators())}, fixed={"quick": quick})


def curve_sweep(tuned, quick: bool) -> Sweep:
    cells = []
    for r in tuned.itertuples():
        if not np.isfinite(r.eta):
            continue  # every η diverged: nothing to draw, the table says so
        cells.append(Cell(f"estimator={r.estimator},d={int(r.d)}",
                          {"estimator": r.estimator, "d": int(r.d), "eta": float(r.eta), "G": int(r.G),
                           "eps": float(r.eps), "steps": int(r.steps), "n_seeds": int(r.n_seeds)}))
    return Sweep(f"curves{'_quick' if quick else ''}", "figures.cells:curve_cell", tuple(cells))


def plot(tuned, curves, axes=None):
    """Rows J and ‖∇J‖² against step for three delays, plus final J against d; returns (fig, axes)."""
    import matplotlib.pyplot as plt

    ds = sorted(tuned["d"].unique())
    show = [ds[0], ds[len(ds) // 2], ds[-1]] if len(ds) >= 3 else ds
    if axes is None:
        fig = plt.figure(figsize=(style.WIDTH_2COL, 4.6))
        gs = fig.add_gridspec(2, len(show) + 1)
        axes = np.array([[fig.add_subplot(gs[i, j]) for j in range(len(show))] for i in range(2)])
        axf = fig.add_subplot(gs[:, -1])
    else:
        fig, axf = axes[0, 0].figure, axes[0, -1]
    names = style.ordered(tuned["estimator"].unique())
    for j, d in enumerate(show):
        for i, q in enumerate(("J", "grad_norm2")):
            ax = axes[i, j]
            for name in names:
                s = curves[(curves.estimator == name) & (curves.d == d) & (curves.quantity == q)]
                if s.empty:
                    continue
                lo, hi = stats.ci(s["value"], s["se"])
                if q == "grad_norm2":  # log axis: a CI reaching 0 is drawn only above the mean
                    lo = np.where(lo > 0, lo, s["value"])
                ax.plot(s["k"], s["value"], color=style.color(name), lw=1.0, label=name)
                ax.fill_between(s["k"], lo, hi, color=style.color(name), alpha=0.15, lw=0)
            if q == "grad_norm2":
                ax.set_yscale("log")
                ax.set_xlabel("learner step $k$")
            ax.set_title(f"d = {int(d)}" if i == 0 else "")
        axes[0, j].set_ylabel(r"$J(\theta_k)$" if j == 0 else "")
        axes[1, j].set_ylabel(r"$\|\nabla J(\theta_k)\|^2$" if j == 0 else "")
    for name in names:
        s = tuned[tuned.estimator == name].sort_values("d")
        axf.errorbar(s["d"] + 0.5, s["final_J"], yerr=[s["final_J"] - s["final_J_lo"], s["final_J_hi"] - s["final_J"]],
                     color=style.color(name), marker=style.marker(name), capsize=2, lw=1.0, label=name)
    axf.set_xscale("log")
    axf.set_xlabel("delay $d$ + 0.5 (steps)")
    axf.set_ylabel(r"final $J(\theta_K)$ at tuned $\eta$ (95% CI)")
    axf.legend(loc="best", fontsize=6, ncol=2)
    fig.tight_layout()
    return fig, axes


def evidence(tuned) -> list[common.Evidence]:
    from simulate.experiments import c9_verdict

    ev = []
    for part, v in c9_verdict(tuned).items():
        h = v.get("holds")
        ev.append(common.Evidence("C9", part, f"largest d = {int(tuned.d.max())}", None, None, None,
                                  "not measured" if h is None else ("holds" if h else "violated"), NAME,
                                  note=v.get("detail", "")))
    dmax = tuned.d.max()
    g = tuned[(tuned.estimator == "gmc") & (tuned.d == dmax)]
    if len(g):
        r = g.iloc[0]
        se = (r.final_J_hi - r.final_J_lo) / (2 * stats.Z)
        ev.append(common.Evidence("C9", "final J of gmc at tuned η", f"d = {int(dmax)}", r.final_J, se, None,
                                  "reported", NAME, note="t-interval over seeds (simulate.experiments.mean_ci) as ±z·se"))
    return ev


def main(out_dir, quick: bool = False, *, sweep_opts: dict | None = None) -> common.FigureResult:
    """Run both sweeps (cached), draw figure 5, return C9's evidence."""
    t0 = time.perf_counter()
    style.apply()
    exp, why = common.optional("simulate.experiments")
    if exp is None or not hasattr(exp, "robustness_experiment"):
        return common.unavailable(NAME, out_dir, quick, {"quick": quick}, why or
                                  "not available: simulate.experiments.robustness_experiment missing", t0)
    sw1 = tuned_sweep(quick)
    tuned = common.run(sw1, sweep_opts).table
    sw2 = curve_sweep(tuned, quick)
    curves = common.run(sw2, sweep_opts).table
    fig, _ = plot(tuned, curves)
    ev = evidence(tuned)
    meta = common.sidecar(NAME, quick=quick, settings={"quick": quick, "d": sorted(tuned.d.unique().tolist())},
                          seeds=f"range(n_seeds) per setting, n_seeds={int(tuned.n_seeds.max())}",
                          sweeps=[sw1.id, sw2.id], evidence=ev)
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
