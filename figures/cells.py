"""Cell functions of the figure sweeps: one grid point each, a thin call into simulate/.

Each returns the tidy table of the function it calls; :mod:`asyncgrpo.sweep` handles caching,
parallelism and resume. Seeds are settings: the Monte Carlo sweeps pass one fixed ``seed`` to every
cell so that all cells share the behaviour policy ``μ`` of :func:`simulate.instances.stale_pair`
(``bias_table`` derives the per-``G`` Monte Carlo stream from ``(seed, G)``).
"""
from __future__ import annotations

import pandas as pd


def bias_cell(instance: str, estimators: list, eps: float, G: int, d: int, n_groups: int, seed: int,
              tail: str = "fourth") -> pd.DataFrame:
    """``simulate.montecarlo.bias_table`` at one ``(ε, G, d)``: measured ‖bias‖, E‖ĝ‖², E𝔅, … with bounds."""
    from simulate.montecarlo import bias_table

    return bias_table(instance, estimators=tuple(estimators), eps_list=(eps,), G_list=(G,), delays=(d,),
                      n_groups=n_groups, seed=seed, tail=tail, progress=False)


def g_scaling_cell(estimator: str, quick: bool, regime: str = "far") -> pd.DataFrame:
    """``simulate.experiments.g_scaling_experiment`` for one estimator in one regime: Δ(G) rows plus the fit.

    Adds the fitted slope of ``log Δ`` on ``log G`` with its bootstrap CI, theory's exponent, and the
    fit's grid-edge count ``n_edge`` of ``n_cells`` (tuned η at an end of the η grid) as columns.
    """
    from simulate.experiments import g_scaling_experiment

    df, fit = g_scaling_experiment(quick=quick, estimators=(estimator,), progress=False, regime=regime)
    f = fit[estimator]
    return df.assign(slope=f["slope"], slope_lo=f["lo"], slope_hi=f["hi"], slope_theory=f["theory"],
                     n_points=f["n_points"], n_seeds=fit["n_seeds"], steps=fit["steps"], regime=fit["regime"],
                     n_edge=fit["n_edge"], n_cells=fit["n_cells"], instance=fit["instance"])


def robust_cell(estimator: str, quick: bool, regime: str = "far") -> pd.DataFrame:
    """``simulate.experiments.robustness_experiment`` for one estimator in one regime: the tuned row per d."""
    from simulate.experiments import robustness_experiment

    return robustness_experiment(quick=quick, estimators=(estimator,), progress=False, regime=regime)


def curve_cell(estimator: str, d: int, eta: float, G: int, eps: float, steps: int, n_seeds: int,
               regime: str = "far") -> pd.DataFrame:
    """Mean training curves ``J(θ_k)``, ``‖∇J(θ_k)‖²`` over seeds ``0..n_seeds−1`` at one (estimator, d, η).

    Uses the regime's instance and prompts per step (``simulate.experiments.REGIMES``) and
    ``run_many``, so with the tuned η these are the very runs behind :func:`robust_cell`'s row.
    Quantities ``J``, ``gap`` (``J* − J(θ_k)``) and ``grad_norm2``; columns ``k``, ``quantity``, ``value``
    (mean over seeds), ``se`` (σ̂/√n_seeds), ``n``.
    """
    import numpy as np

    from simulate import delays as dl
    from simulate.experiments import get_regime
    from simulate.training import TrainConfig, run_many

    reg = get_regime(regime)
    base = TrainConfig(instance=reg.instance, estimator=estimator, G=G, eps=eps, steps=steps, eta=eta,
                       delay=dl.fixed(d), n_prompts=reg.n_prompts)
    runs = run_many([base.replace(seed=s) for s in range(n_seeds)])
    rows = []
    for q in ("J", "gap", "grad_norm2"):
        # gap = J* − J(θ_k): on a log axis it separates runs that all look saturated in J
        x = np.vstack([r.J_star - r.J if q == "gap" else getattr(r, q) for r in runs])
        with np.errstate(invalid="ignore"):
            m = np.nanmean(x, axis=0)
            se = np.nanstd(x, axis=0, ddof=1) / np.sqrt(np.isfinite(x).sum(axis=0))
        rows.append(pd.DataFrame({"k": np.arange(x.shape[1]), "quantity": q, "value": m, "se": se, "n": n_seeds}))
    return pd.concat(rows, ignore_index=True)
