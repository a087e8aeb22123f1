"""The ladder's mechanism diagnostic (issue 33): is the applied step downhill, and is it the stale push-down?

The learner records, per step (:class:`simulate.training.TrainResult`), ``gdot_k = ⟨ĝ_k, ∇J(θ_k)⟩/‖∇J(θ_k)‖`` —
the step's first-order ascent rate — and ``gneg_k``, the same projection of the part of ĝ_k from
negative-advantage tokens whose current probability is already below the behaviour one (``π_θ(a_t|s_t) <
μ_k(a_t|s_t)``). An uncorrected learner applies that part at full weight, an importance-weighted one damps it
by ``ρ < 1``. ``gneg < 0``: pushing those tokens further down lowers J (through shared parameters it lowers
the right token of other contexts); in a tabular policy pushing a wrong token down can only raise J.
"""
from __future__ import annotations

import math

import numpy as np

from simulate.training.config import require_diagnostics

__all__ = ["run_diagnostics", "EARLY"]

EARLY = 0.25  # the learning phase's share of the run: the first quarter of the steps


def run_diagnostics(result) -> dict:
    """Per-run summaries of ``gdot`` and ``gneg`` over the first ``EARLY·K`` steps (finite ones):
    ``gdot_early`` and ``gneg_early`` (means), ``down_frac`` (share of those steps with ``gdot < 0``) and
    ``negpush_frac`` (share of them with ``gneg < 0``). NaN where the run recorded no finite step; a run made with
    ``TrainConfig(diagnostics=False)`` recorded none of them and is refused."""
    require_diagnostics(result, "gdot/gneg")
    gd = np.asarray(result.gdot, dtype=np.float64)
    gn = np.asarray(result.gneg, dtype=np.float64)
    n = max(1, int(math.ceil(EARLY * gd.size)))
    gd, gn = gd[:n], gn[:n]
    ok = np.isfinite(gd) & np.isfinite(gn)
    if not ok.any():
        return dict(gdot_early=math.nan, gneg_early=math.nan, down_frac=math.nan, negpush_frac=math.nan)
    return dict(gdot_early=float(gd[ok].mean()), gneg_early=float(gn[ok].mean()),
                down_frac=float(np.mean(gd[ok] < 0)), negpush_frac=float(np.mean(gn[ok] < 0)))
