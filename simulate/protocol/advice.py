"""ε, G and η for a given delay (issue 58): gmc, tis and grpo on protocol v6's LM-like draws, exploratory.

For each delay d ∈ :data:`DELAYS`, estimator, ε and G the cell is tuned and evaluated by v6's own rules
(:func:`simulate.protocol.cells.run_cell`: η on the tuning seeds by the lower confidence bound, the numbers on the
held-out seeds), in two **budget modes** that separate the group-size effect from the step count:

- ``budget``: a fixed number of trajectories per context (v6's ``family_budget``), so ``K = budget / G`` — a small G
  also gets more steps;
- ``steps``: a fixed number of steps ``K =`` :data:`STEPS` for every G — a large G also sees more trajectories.

The recommendation per (d, mode, estimator) is the (ε, G) whose **tuning** score (the mean over the draws of the
tuned η's lower confidence bound) is highest — chosen on the tuning seeds, so the held-out number is not a
winner's-curse maximum — reported with its held-out nAUC IQM and a 95 % stratified-bootstrap interval over
instances × seeds, and the tuned η (median and range over the draws). Exploratory: the grid was set after v6's
registration and never feeds the headline.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["GRID", "DELAYS", "STEPS", "MODES", "cells", "run_advice", "recommend"]

#: estimator → the ε it is run at (grpo's own clip does not read ε: one value)
GRID = {"gmc": (0.1, 0.2, 0.5), "tis": (0.1, 0.2, 0.5), "grpo": (0.2,)}
GROUP_SIZES = (4, 8, 16)
DELAYS = (8, 32)
STEPS = 64
MODES = {"budget": "fixed trajectory budget (K = budget / G)", "steps": f"fixed number of steps (K = {STEPS})"}
FAMILY = "lm-like"


def cells(proto, grid: dict | None = None, group_sizes=GROUP_SIZES, steps: int = STEPS,
          family: str = FAMILY) -> list[dict]:
    """Every cell ``(instance, estimator, d, eps, G[, K])`` of the advice grid on ``proto``'s ``family`` draws."""
    from simulate.protocol.families import parse_name

    insts = [i for i in proto.instances if parse_name(i)[0] == family]
    if not insts:
        raise ValueError(f"the protocol has no {family} draws (instances: {list(proto.instances)})")
    out = []
    for inst in insts:
        for mode in MODES:
            for e, epss in (grid or GRID).items():
                for eps in epss:
                    for G in group_sizes:
                        if mode == "steps" and proto.steps(inst, G) == steps:
                            continue  # the same run as the budget mode's cell: computed once (run_advice copies it)
                        for d in DELAYS:
                            c = dict(instance=inst, estimator=e, d=int(d), eps=float(eps), G=int(G))
                            if mode == "steps":
                                c["K"] = int(steps)
                            out.append(c)
    return out


def run_advice(quick: bool = False, progress: bool = True, path=None, grid: dict | None = None,
               group_sizes=GROUP_SIZES, steps: int = STEPS, **sweep_kw) -> pd.DataFrame:
    """Run the grid through the sweep engine (cached, resumable) under protocol v6's file (or ``path``, a version-6
    file); one row per run with a ``mode`` column."""
    from pathlib import Path

    from simulate.protocol.run import _run_cells
    from simulate.protocol.spec import V6_PATH, load_protocol

    path = V6_PATH if path is None else Path(path)
    proto = load_protocol(path, quick=quick)
    cs = cells(proto, grid, group_sizes, steps)
    tag = f"advice-{proto.name}-{proto.sha256[:12]}" + ("-quick" if quick else "")
    t = _run_cells("simulate.protocol.run:sweep_cell", cs, proto, path, tag, dict(progress=progress, **sweep_kw))
    t = t.assign(mode=np.where(t["cell"].str.contains(",K="), "steps", "budget"))
    shared = t[(t["mode"] == "budget") & (t.K == int(steps))]  # a budget cell whose K is STEPS is also the steps cell
    return pd.concat([t, shared.assign(mode="steps")], ignore_index=True)


def recommend(table: pd.DataFrame, eval_seeds) -> list[dict]:
    """Per (d, mode, estimator): the (ε, G) with the best mean tuning lower bound over the draws, its held-out nAUC
    IQM with the 95 % stratified-bootstrap interval (:mod:`simulate.protocol.aggregate`), and its tuned η."""
    from rliable import metrics

    from simulate.protocol import aggregate as ag

    out = []
    for d in sorted(table.d.unique()):
        for mode in MODES:
            for e in table.estimator.unique():
                t = table[(table.d == d) & (table["mode"] == mode) & (table.estimator == e)]
                if t.empty:
                    continue
                score = t.groupby(["eps", "G", "instance"]).tune_lcb.first().groupby(level=[0, 1]).mean()
                eps, G = score.idxmax()
                sel = t[np.isclose(t.eps, eps) & (t.G == G)]
                insts = sorted(sel.instance.unique())
                X = ag.score_matrix(sel, e, d, insts, eval_seeds, eta_kind="tuned")
                _, lo, hi = ag.iqm_interval(X)
                etas = sel.groupby("instance").eta_tuned.first()
                out.append(dict(d=int(d), mode=mode, estimator=e, eps=float(eps), G=int(G),
                                iqm=float(metrics.aggregate_iqm(X)), lo=lo, hi=hi,
                                eta_median=float(np.median(etas)), eta_min=float(etas.min()),
                                eta_max=float(etas.max()), n_instances=len(insts), n_seeds=int(X.shape[0]),
                                K=int(sel.K.iloc[0])))
    return out
