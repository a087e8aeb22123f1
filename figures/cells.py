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


def g_scaling_cell(estimator: str, quick: bool) -> pd.DataFrame:
    """``simulate.experiments.g_scaling_experiment`` for one estimator: Δ(G) rows plus the fitted slope columns."""
    from simulate.experiments import g_scaling_experiment

    df, fit = g_scaling_experiment(quick=quick, estimators=(estimator,), progress=False)
    f = fit[estimator]
    return df.assign(slope=f["slope"], slope_lo=f["lo"], slope_hi=f["hi"], slope_theory=f["theory"],
                     n_points=f["n_points"], n_seeds=fit["n_seeds"], steps=fit["steps"])


def robust_cell(estimator: str, quick: bool) -> pd.DataFrame:
    """``simulate.experiments.robustness_experiment`` for one estimator: the tuned row per delay d."""
    from simulate.experiments import robustness_experiment

    return robustness_experiment(quick=quick, estimators=(estimator,), progress=False)


def curve_cell(estimator: str, d: int, eta: float, G: int, eps: float, steps: int, n_seeds: int) -> pd.DataFrame:
    """Mean training curves ``J(θ_k)``, ``‖∇J(θ_k)‖²`` over seeds ``0..n_seeds−1`` at one (estimator, d, η).

    Uses the experiments' instance (``simulate.experiments.EXP_INSTANCE``) and ``run_many``, so with
    the tuned η these are the very runs behind :func:`robust_cell`'s row. Columns: ``k``, ``quantity``,
    ``value`` (mean over seeds), ``se`` (σ̂/√n_seeds), ``n``.
    """
    import numpy as np

    from simulate import delays as dl
    from simulate.experiments import EXP_INSTANCE
    from simulate.training import TrainConfig, run_many

    base = TrainConfig(instance=EXP_INSTANCE, estimator=estimator, G=G, eps=eps, steps=steps, eta=eta,
                       delay=dl.fixed(d))
    runs = run_many([base.replace(seed=s) for s in range(n_seeds)])
    rows = []
    for q in ("J", "grad_norm2"):
        x = np.vstack([getattr(r, q) for r in runs])
        with np.errstate(invalid="ignore"):
            m = np.nanmean(x, axis=0)
            se = np.nanstd(x, axis=0, ddof=1) / np.sqrt(np.isfinite(x).sum(axis=0))
        rows.append(pd.DataFrame({"k": np.arange(x.shape[1]), "quantity": q, "value": m, "se": se, "n": n_seeds}))
    return pd.concat(rows, ignore_index=True)
