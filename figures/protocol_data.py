"""The one protocol run behind the training-claims figures (C5, C9) and the report's verdict matrices.

:func:`result` runs :func:`simulate.protocol.run_protocol` once per process and size (the cells are
cached by the sweep engine, so a second process loads them); :func:`to_sidecar` turns its verdict
structures into JSON for the figures' sidecars, which is what :mod:`figures.report` reads.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from figures.common import clean_json

_CACHE: dict = {}


def _local_exponent(Gs):
    from theory.c5_local import local_exponent_at

    return local_exponent_at(np.asarray(Gs, dtype=float), "comparable", "gmc")


def result(quick: bool, sweep_opts: dict | None = None):
    """The :class:`simulate.protocol.ProtocolResult` of the committed protocol (``quick`` overlay)."""
    if quick not in _CACHE:
        from simulate.protocol import run_protocol

        opts = dict(sweep_opts or {})
        if "client" not in opts and "scheduler" not in opts:
            # cells side by side in worker processes (run.py gives each one Numba thread)
            opts["backend"] = "local" if int(opts.get("n_workers") or os.cpu_count() or 1) > 1 else "serial"
        _CACHE[quick] = run_protocol(quick=quick, local_exponent=_local_exponent, **opts)
    return _CACHE[quick]


def protocol_meta(res) -> dict:
    """Name, hash, quick flag, seeds and rules of the protocol (for sidecars and the report header)."""
    p = res.protocol
    return dict(name=p.name, sha256=p.sha256, quick=p.quick, registered=p.registered, instances=list(p.instances),
                tune_seeds=list(p.tune_seeds), eval_seeds=list(p.eval_seeds), margin=p.margin, alpha=p.alpha,
                failure_p0=p.failure_p0, local_chi2=p.local_chi2, primary=dict(p.primary), c5=dict(p.c5),
                budget=p.budget, version=p.version, lockin_nJ=p.lockin_nJ, lockin_grad_rel=p.lockin_grad_rel,
                learning_gap=p.learning_gap, saturation_nauc=p.saturation_nauc, saturation_zero=p.saturation_zero,
                step_arms=list(p.step_arms), power_target=p.power_target, normalise=p.normalise,
                rate_premise_d0=p.rate_premise_d0, delays=list(p.delays), G=list(p.G), eps=list(p.eps))


def c9_sidecar(res) -> dict:
    """C9's verdict structures as JSON-able data."""
    c9 = res.c9
    m = c9["matrix"]
    cells = res.table[res.table.phase == "eval"]
    tuned = cells[cells.eta_kind == "tuned"]
    summary = (tuned.groupby(["instance", "estimator", "d", "eps", "G"])
               .agg(nauc=("nauc", "mean"), final_nJ=("final_nJ", "mean"), zero_frac=("zero_frac", "mean"),
                    chi2_med=("chi2_med", "median"), eta_tuned=("eta_tuned", "first"),
                    eta_at_edge=("eta_at_edge", "first"), window_octaves=("window_octaves", "first"))
               .reset_index())
    keys = ["instance", "estimator", "d", "eps", "G"]
    arm = cells.eta_kind.isin(["tuned", "neighbour"])
    fail = cells[arm].groupby(keys).failed.mean().rename("failure_rate").reset_index()
    summary = summary.merge(fail, on=keys)
    if "failure" in cells:
        def split(sel, suffix):
            g = sel.groupby(keys)
            return pd.DataFrame({f"n_{m}{suffix}": g.failure.agg(lambda v, m=m: int((v == m).sum()))
                                 for m in ("diverged", "collapsed", "locked_in")}).reset_index()

        extra = tuned.groupby(keys).agg(chi2_learn_med=("chi2_learn_med", "median"),
                                        chi2_learn_max=("chi2_learn_max", "max"), ess_early=("ess_early", "mean"),
                                        entropy_final=("entropy_final", "mean"),
                                        lockin_step=("lockin_step", lambda v: float(np.median(v[v >= 0])) if (v >= 0).any()
                                                     else np.nan)).reset_index()
        summary = summary.merge(extra, on=keys).merge(split(cells[arm], ""), on=keys)
        summary = summary.merge(cells[arm].groupby(keys).size().rename("n_runs").reset_index(), on=keys)
        common = cells[cells.eta_kind.isin(["common", "common-neighbour"])]
        if len(common):
            summary = summary.merge(split(common, "_common"), on=keys, how="left")
            summary = summary.merge(common[common.eta_kind == "common"].groupby(keys).nauc.mean()
                                    .rename("nauc_common").reset_index(), on=keys, how="left")
    return clean_json(dict(matrix={s: dict(m.loc[s]) for s in m.index}, aggregate=c9["aggregate"], verdict=c9["verdict"],
                       comparisons=c9["comparisons"], subclaims=c9["subclaims"], cells=summary,
                       n_edge=int(summary.eta_at_edge.sum()), n_cells=int(len(summary))))


def c5_sidecar(res) -> dict:
    """C5's verdict structures as JSON-able data."""
    per = {}
    for inst, r in res.c5.get("per_instance", {}).items():
        d = {k: v for k, v in r.items() if k not in ("test_a", "test_b")}
        if r.get("test_a") is not None:
            d["test_a"] = r["test_a"]
        if r.get("test_b") is not None:
            d["test_b"] = r["test_b"]
        per[inst] = d
    return clean_json(dict(per_instance=per, verdict=res.c5.get("verdict")))
