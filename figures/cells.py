"""Cell functions of the figure sweeps: one grid point each, a thin call into simulate/.

Each returns the tidy table of the function it calls; :mod:`sweep` handles caching,
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
