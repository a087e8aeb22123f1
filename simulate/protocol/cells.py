"""One protocol cell: tune η on the tuning seeds, then evaluate on the held-out seeds (docs/protocol.md).

A cell is ``(instance, estimator, d, ε, G)``. :func:`run_cell` returns a tidy table with one row
per run: ``phase = "tune"`` rows (every η of the grid × tuning seeds) and ``phase = "eval"`` rows
(evaluation seeds × {tuned η, neighbour η = tuned·2^{1/2}}), plus the cell's tuning summary in
every row (``eta_tuned``, ``eta_at_edge``, ``n_widen``, ``window_octaves``).

**Per-run metrics** (:func:`run_metrics`), with ``J_0 = J(θ_0)`` and ``J*`` of the instance:

- ``nauc = (1/(K+1)) Σ_{k=0}^{K} (J_k − J_0)/(J* − J_0)`` over ``K = budget/G`` steps, so every
  delay and every G spends the same number of sampled trajectories, counted from step 0;
- ``final_nJ``: the same normalisation of ``J_K``;
- ``zero_frac``: the fraction of steps whose groups all had equal rewards (``ĝ_k = 0``);
- ``diverged`` (θ or J not finite, or ``max|θ| > 10⁸``), ``collapsed`` (``J_k`` falls below its
  running maximum by more than ``collapse_drop·(J* − J_0)``), ``failed = diverged or collapsed``;
  after a divergence the curve counts as ``J_0`` (normalised 0);
- ``chi2_med``: the median over steps of the exact ``χ²(π_{θ_k}‖μ_k)``: the run's overlap regime.

**Tuning.** The score of an η is the mean ``nauc`` over the tuning seeds. The grid starts at
``2^{eta_log2}`` in half-octaves; while the best η sits on an edge the grid grows by two points on
that side (at most ``max_widen`` times; ``eta_at_edge`` reports a cell that still ends on an edge).
``window_octaves`` is the width (in octaves) of the contiguous η range whose score is within
``window_delta`` of the best: a direct measure of how forgiving the estimator is to tuning.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from simulate import delays as dl
from simulate.protocol.instances import TrainingInstance, get_instance
from simulate.protocol.spec import Protocol
from simulate.training import TrainConfig, run_many

THETA_MAX = 1e8  # "diverged" means effectively non-finite, not merely a saturated softmax

__all__ = ["run_cell", "run_metrics", "eval_at", "THETA_MAX"]


def run_metrics(result, J_star: float, collapse_drop: float) -> dict:
    """The per-run metrics of the module docstring from a :class:`simulate.training.TrainResult`."""
    J = np.asarray(result.J, dtype=np.float64)
    J0 = float(J[0])
    span = J_star - J0
    if not span > 0:
        raise ValueError(f"J* − J(θ_0) must be > 0 to normalise, got J* = {J_star}, J_0 = {J0}")
    nJ = np.where(np.isfinite(J), (J - J0) / span, 0.0)
    run_max = np.maximum.accumulate(np.where(np.isfinite(J), J, -np.inf))
    collapsed = bool(np.any(np.isfinite(J) & (J < run_max - collapse_drop * span)))
    chi2 = result.chi2[np.isfinite(result.chi2)]
    zero = result.zero_grad[np.isfinite(result.zero_grad)]
    return dict(
        nauc=float(nJ.mean()),
        final_nJ=float(nJ[-1]),
        zero_frac=float(zero.mean()) if zero.size else math.nan,
        diverged=bool(result.diverged),
        collapsed=collapsed,
        failed=bool(result.diverged or collapsed),
        chi2_med=float(max(np.median(chi2), 0.0)) if chi2.size else math.nan,  # χ² ≥ 0; round-off can give −1e−16
    )


def _configs(inst: TrainingInstance, estimator: str, d: int, eps: float, G: int, etas, seeds, proto: Protocol,
             K: int | None):
    steps = proto.budget // (G * proto.n_prompts) if K is None else int(K)
    return [TrainConfig(instance=inst, estimator=estimator, eps=eps, G=G, n_prompts=proto.n_prompts, eta=eta,
                        steps=steps, delay=dl.fixed(d), seed=int(s),
                        collapse_frac=0.0, theta_max=THETA_MAX)
            for eta in etas for s in seeds]


def _run(inst, estimator, d, eps, G, etas, seeds, proto, phase, eta_kind=None, K=None) -> list[dict]:
    cfgs = _configs(inst, estimator, d, eps, G, etas, seeds, proto, K)
    rows = []
    for c, r in zip(cfgs, run_many(cfgs)):
        row = dict(phase=phase, eta=c.eta, seed=c.seed, **run_metrics(r, inst.J_star, proto.collapse_drop))
        if eta_kind is not None:
            row["eta_kind"] = eta_kind
        rows.append(row)
    return rows


def _window(etas: list[float], score: np.ndarray, best: int, delta: float) -> float:
    lo = hi = best
    while lo > 0 and score[lo - 1] >= score[best] - delta:
        lo -= 1
    while hi < len(etas) - 1 and score[hi + 1] >= score[best] - delta:
        hi += 1
    return math.log2(etas[hi] / etas[lo])


def run_cell(instance, estimator: str, d: int, eps: float, G: int, proto: Protocol, K: int | None = None) -> pd.DataFrame:
    """Tune and evaluate one cell (module docstring); ``instance`` is a registry name or a
    :class:`~simulate.protocol.instances.TrainingInstance`; ``K`` overrides ``budget/G`` steps (C5)."""
    inst = get_instance(instance)
    lo, hi = proto.start_grid(estimator)
    step = proto.eta_step_log2
    rows = _run(inst, estimator, d, eps, G, proto.etas(lo, hi), proto.tune_seeds, proto, "tune", K=K)
    n_widen = 0
    while True:
        tune = pd.DataFrame(rows)
        score = tune.groupby("eta")["nauc"].mean().sort_index()
        etas = list(score.index)
        best = int(np.argmax(score.to_numpy()))  # first maximum: deterministic on ties
        at_low, at_high = best == 0, best == len(etas) - 1
        if not (at_low or at_high) or n_widen >= proto.max_widen:
            break
        n_widen += 1
        new = [2.0 ** (lo - step * i) for i in (2, 1)] if at_low else [2.0 ** (hi + step * i) for i in (1, 2)]
        lo, hi = (lo - 2 * step, hi) if at_low else (lo, hi + 2 * step)
        rows += _run(inst, estimator, d, eps, G, new, proto.tune_seeds, proto, "tune", K=K)
    eta_tuned = float(etas[best])
    window = _window(etas, score.to_numpy(), best, proto.window_delta)
    neighbour = eta_tuned * 2.0 ** proto.neighbour_step_log2
    rows += _run(inst, estimator, d, eps, G, [eta_tuned], proto.eval_seeds, proto, "eval", "tuned", K=K)
    rows += _run(inst, estimator, d, eps, G, [neighbour], proto.eval_seeds, proto, "eval", "neighbour", K=K)
    out = pd.DataFrame(rows)
    out["eta_kind"] = out["eta_kind"].fillna("grid") if "eta_kind" in out else "grid"
    steps = proto.budget // (G * proto.n_prompts) if K is None else int(K)
    out = out.assign(instance=inst.name, estimator=estimator, d=int(d), eps=float(eps), G=int(G), K=steps,
                     eta_tuned=eta_tuned,
                     eta_at_edge=bool(at_low or at_high), n_widen=n_widen, window_octaves=window)
    return out


def eval_at(instance, estimator: str, d: int, eps: float, G: int, eta: float, proto: Protocol,
            K: int | None = None) -> pd.DataFrame:
    """Evaluation seeds at a fixed η (C5 test A): one row per run, ``phase = "fixed"``."""
    inst = get_instance(instance)
    rows = _run(inst, estimator, d, eps, G, [eta], proto.eval_seeds, proto, "fixed", "fixed", K=K)
    return pd.DataFrame(rows).assign(instance=inst.name, estimator=estimator, d=int(d), eps=float(eps), G=int(G),
                                     K=proto.budget // (G * proto.n_prompts) if K is None else int(K))
