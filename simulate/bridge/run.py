"""Running the ladder (issue 33; docs/bridge.md): tune η per rung, evaluate gmc and its rivals under delay.

**Tuning** (fixed before the data): for each rung, onpolicy's η at ``d = 0`` on the tuning seeds (every
trajectory map coincides with onpolicy at ``d = 0``, and the token-level ``grpo`` runs at the length-normalised
``T·η``, so one η is one step for every estimator, as the LM harness uses one learning rate at every delay);
the score of an η is protocol v4's lower confidence bound of the tuning nAUC, ``mean − t_{n−1, 0.9}·s/√n``,
over the grid ``2^{g/2}``. **Evaluation**: ``ESTIMATORS × DELAYS`` on the held-out seeds (disjoint from the
tuning seeds) at two arms, the tuned ``η₀`` and ``η₀/4`` (the regime map's smallest step factor: the best η at
``d = 0`` is often the largest that the undelayed learner survives, so the smaller arm asks whether a stable
corrected learner exists at all). Every run gets protocol v4's ``zero_tol``. Per run: the protocol's metrics
(:func:`simulate.protocol.cells.run_metrics`, normalised by ``J* = 1``, the exact-match optimum) and the
mechanism diagnostics of :mod:`simulate.bridge.diagnostics`.

Cells (one per rung and phase) go through the :mod:`sweep` engine, so ``make run`` recomputes nothing cached.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS
from simulate import delays as dl
from simulate.bridge.diagnostics import run_diagnostics
from simulate.bridge.ladder import CONTROLS, RUNGS, get_rung
from simulate.protocol.cells import run_metrics
from simulate.training import TrainConfig, run_many

__all__ = ["ESTIMATORS", "DELAYS", "ARMS", "tune_cell", "eval_cell", "run_ladder", "settings", "tuned_eta"]

ESTIMATORS = ("onpolicy", "is", "gmc", "grpo")
DELAYS = (0, 8, 32)
G = 8
EPS = 0.2
ZERO_TOL = 1e-9          # protocol v4's
COLLAPSE_DROP = 0.5      # protocol v4's: J falls below its running max by half the gap J* − J₀
LCB_LEVEL = 0.9
#: run lengths and seeds: standard (make run) and full
MODES = {
    "standard": dict(K=100, tune_seeds=tuple(range(100, 104)), eval_seeds=tuple(range(1000, 1012))),
    "full": dict(K=200, tune_seeds=tuple(range(100, 116)), eval_seeds=tuple(range(1000, 1024))),
    "quick": dict(K=30, tune_seeds=(100, 101), eval_seeds=(1000, 1001), grid_stride=2),
}
GRID = {"sga": (0, 12), "adam": (-14, -2)}
ARMS = {"η₀": 1.0, "η₀/4": 0.25}  # arm label → factor on the tuned η  # half-octave exponents g of η = 2^{g/2}, inclusive


def settings(mode: str) -> dict:
    """Run length and seeds of ``mode`` (``standard``, ``full``, ``quick``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return MODES[mode]


def _config(rung, estimator, d, eta, seed, K):
    inst = rung.build()
    step = eta * inst.T if estimator in TOKEN_ESTIMATORS else eta  # length-normalised maps: the same step
    delay = dl.DelaySpec(kind="fixed", d=int(d))
    return TrainConfig(instance=inst, estimator=estimator, eps=EPS, G=G, eta=float(step), steps=int(K), delay=delay,
                       seed=int(seed), zero_tol=ZERO_TOL, theta_max=1e8, collapse_frac=0.0, **rung.learner)


def _rows(rung, cfgs, results, phase, etas, arms=None):
    rows = []
    arms = arms or [""] * len(cfgs)
    for c, r, eta, arm in zip(cfgs, results, etas, arms):
        m = run_metrics(r, 1.0, COLLAPSE_DROP)
        rows.append(dict(rung=rung.name, phase=phase, arm=arm, estimator=c.estimator, d=int(c.delay.d), eta=eta, seed=c.seed,
                         J0=float(r.J[0]), **m, **run_diagnostics(r)))
    return pd.DataFrame(rows)


def tune_cell(rung: str, mode: str) -> pd.DataFrame:
    """The tuning runs of ``rung``: onpolicy at ``d = 0``, every η of the grid × tuning seeds."""
    R, s = get_rung(rung), settings(mode)
    lo, hi = GRID[R.learner.get("optimizer", "sga")]
    grid = range(lo, hi + 1, s.get("grid_stride", 1))  # quick: whole octaves only
    etas = [2.0 ** (g / 2) for g in grid for _ in s["tune_seeds"]]
    seeds = [x for _ in grid for x in s["tune_seeds"]]
    cfgs = [_config(R, "onpolicy", 0, e, x, s["K"]) for e, x in zip(etas, seeds)]
    return _rows(R, cfgs, run_many(cfgs), "tune", etas)


def tuned_eta(tune: pd.DataFrame) -> tuple[float, bool]:
    """``(η, at_edge)``: the η with the largest ``mean − t_{n−1,0.9}·s/√n`` of the tuning nAUC."""
    g = tune.groupby("eta")["nauc"]
    n = g.count()
    lcb = g.mean() - stats.t.ppf(LCB_LEVEL, n - 1) * g.std(ddof=1) / np.sqrt(n)
    best = float(lcb.idxmax())
    return best, bool(best in (lcb.index.min(), lcb.index.max()))


def eval_cell(rung: str, eta: float, mode: str) -> pd.DataFrame:
    """The held-out runs of ``rung`` at the tuned ``eta``: ``ARMS × ESTIMATORS × DELAYS × eval seeds``."""
    R, s = get_rung(rung), settings(mode)
    keys = [(a, e, d, x) for a in ARMS for e in ESTIMATORS for d in DELAYS for x in s["eval_seeds"]]
    cfgs = [_config(R, e, d, eta * ARMS[a], x, s["K"]) for a, e, d, x in keys]
    return _rows(R, cfgs, run_many(cfgs), "eval", [eta * ARMS[a] for a, *_ in keys], [a for a, *_ in keys])


def run_ladder(mode: str = "standard", rungs=None, sweep_kw: dict | None = None) -> pd.DataFrame:
    """Every rung (and control): tune, then evaluate; cells cached by the sweep engine (``results/cells``).
    Returns the eval rows with ``eta_at_edge`` and the tuning score of the chosen η."""
    from simulate.protocol.run import run_pinned
    from sweep import Cell, Sweep

    settings(mode)
    names = [r.name for r in (RUNGS + CONTROLS)] if rungs is None else list(rungs)
    kw = dict(backend="serial", progress=False)
    kw.update(sweep_kw or {})
    tune = run_pinned(Sweep(f"bridge-tune-{mode}", "simulate.bridge.run:tune_cell",
                            tuple(Cell(n, dict(rung=n, mode=mode)) for n in names)), **kw).table
    cells, edge = [], {}
    for n in names:
        eta, at_edge = tuned_eta(tune[tune["rung"] == n])
        edge[n] = at_edge
        cells.append(Cell(n, dict(rung=n, eta=eta, mode=mode)))
    ev = run_pinned(Sweep(f"bridge-eval-{mode}", "simulate.bridge.run:eval_cell", tuple(cells)), **kw).table
    ev = ev.drop(columns=[c for c in ("cell", "mode") if c in ev.columns])
    ev["eta_at_edge"] = ev["rung"].map(edge)
    ev["tune_nauc"] = ev["rung"].map({n: float(tune[(tune["rung"] == n) & np.isclose(tune["eta"], e)]["nauc"].mean())
                                      for n, e in zip(names, [c.settings["eta"] for c in cells])})
    return ev
