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
                rate_premise_d0=p.rate_premise_d0, delays=list(p.delays), G=list(p.G), eps=list(p.eps),
                zero_tol=p.zero_tol, eta_rule=p.eta_rule, eta_lcb_level=p.eta_lcb_level, token_eta=p.token_eta,
                heldout_margin=p.heldout_margin, sensitivity_step_log2=p.sensitivity_step_log2,
                instance_settings={k: dict(v) for k, v in p.instance_settings.items()},
                instance_groups=instance_groups(p.instances))


def instance_groups(instances) -> dict:
    """``{instance: answer-table group}`` (:attr:`simulate.protocol.instances.TrainingInstance.report_group`)."""
    from simulate.protocol.instances import get_instance

    return {i: get_instance(i).report_group for i in instances}


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
    extra = {}
    if "heldout" in c9:  # v4
        extra["heldout"] = c9["heldout"]
        extra["n_flagged"] = int(c9["heldout"].flagged.sum()) if len(c9["heldout"]) else 0
    if "sensitivity" in c9:
        sm = c9["sensitivity"]["matrix"]
        extra["sensitivity"] = dict(matrix={s: dict(sm.loc[s]) for s in sm.index},
                                    aggregate=c9["sensitivity"]["aggregate"], verdict=c9["sensitivity"]["verdict"])
    return clean_json(dict(matrix={s: dict(m.loc[s]) for s in m.index}, aggregate=c9["aggregate"], verdict=c9["verdict"],
                       comparisons=c9["comparisons"], subclaims=c9["subclaims"], cells=summary,
                       n_edge=int(summary.eta_at_edge.sum()), n_cells=int(len(summary)), **extra))


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


# ----------------------------------------------------------------------------- the report interface (v4)
#: The answer table's rivals in C9's cells: THEORY's maps and token-level clip; every peer correction follows.
ANSWER_RIVALS = ("onpolicy", "is", "tis", "tic", "grpo")
_ARM_WORD = {"tuned": "tuned η", "common": "common η"}


def _fmt(x, digits: int = 3) -> str:
    """A number for a table cell, or "—" for a missing one (never "None"/"nan")."""
    return "—" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def answer_rows(res) -> list[dict]:
    """The ``"answer"`` rows of the protocol's instances (group ``tabular``, or the instance's own
    ``report_group``, e.g. ``toy-lm-faithful``): gmc − rival in nAUC at the primary cell (d = primary d), on
    each arm, for onpolicy, is, tis, tic, grpo and every peer correction of the protocol, per instance: the mean
    paired difference over the held-out seeds with its two-sided 95 % t-interval (``scipy.stats.t``), and the
    C9 comparison's verdict (non-inferiority at −margin, Holm) beside."""
    from asyncgrpo.estimators import registry
    from simulate import verdicts as vd
    from simulate.protocol.c9 import ARM_KINDS, eval_values

    p = res.protocol
    d, G, eps = int(p.primary["d"]), int(p.primary["G"]), float(p.primary["eps"])
    peers = [e for e in p.estimators if e not in ANSWER_RIVALS and e != "gmc" and _is_peer(registry, e)]
    comp = res.c9["comparisons"]
    groups = instance_groups(p.instances)
    rows = []
    for inst in p.instances:
        t = res.table[res.table.instance == inst]
        for arm in [a for a in ("tuned", "common") if a in p.step_arms]:
            g = eval_values(t, "gmc", d, eps, G, eta_kind=ARM_KINDS[arm][0])
            for x in [e for e in (*ANSWER_RIVALS, *peers) if e in p.estimators]:
                r = eval_values(t, x, d, eps, G, eta_kind=ARM_KINDS[arm][0])
                seeds = g.index.intersection(r.index)
                if len(seeds) < 2:
                    continue
                m, lo, hi = vd.t_interval((g[seeds] - r[seeds]).to_numpy())
                sel = comp[(comp.instance == inst) & (comp.get("arm") == arm)
                           & (comp.name == f"gmc − {x} (d={d}, {arm} η)")] if "arm" in comp else comp.iloc[:0]
                row = dict(group=groups[inst], setting=inst, d=d, rival=x, arm=_ARM_WORD[arm], metric="nAUC", delta=m,
                           lo=lo, hi=hi, interval=f"95 % paired t, {len(seeds)} held-out seeds", n=int(len(seeds)))
                if len(sel):
                    row["verdict"] = str(sel.verdict.iloc[0])
                rows.append(row)
    return rows


def _is_peer(registry, name: str) -> bool:
    try:
        return bool(registry.entry(name).peer)
    except (KeyError, ValueError):
        return False


def _rate(table, e, d, eps, G, arm) -> str:
    from simulate.protocol.c9 import failures

    nf, n = failures(table, e, d, eps, G, arm)
    return f"{nf}/{n}" if n else "—"


def scope_section(res) -> dict:
    """The v4 scope table as a report ``"sections"`` entry (one row per instance, ≤ 15 lines)."""
    p = res.protocol
    d, G, eps = int(p.primary["d"]), int(p.primary["G"]), float(p.primary["eps"])
    sub = res.c9["subclaims"].drop_duplicates("instance").set_index("instance")
    ho = res.c9.get("heldout")
    rows = []
    for inst in p.instances:
        if inst not in sub.index:
            continue
        s = sub.loc[inst]
        t = res.table[res.table.instance == inst]
        flagged = "—"
        if ho is not None and len(ho):
            h = ho[ho.instance == inst]
            flagged = f"{int(h.flagged.sum())}/{len(h)}"
        zf = f"{_fmt(s.get('zero_frac_d0'), 2)} [{_fmt(s.get('zero_frac_d0_lo'), 2)}, {_fmt(s.get('zero_frac_d0_hi'), 2)}]"
        chi = f"{s.regime} {_fmt(s.get('chi2_median'), 2)} [{_fmt(s.get('chi2_lo'), 2)}, {_fmt(s.get('chi2_hi'), 2)}]"
        stab = "; ".join(f"{e} {_rate(t, e, d, eps, G, 'tuned')} | {_rate(t, e, d, eps, G, 'common')}"
                         for e in ("is", "gmc") if e in p.estimators)
        rows.append([inst, zf, "out of scope" if bool(s.get("saturated")) else "in scope", flagged, stab, chi])
    note = (f"Zero-gradient fraction: onpolicy at d = 0, tuned η, groups equal within zero_tol = {p.zero_tol:g} "
            f"(mean [95 % t] over held-out seeds); saturation judged on its one-sided lower bound. Flagged cells: "
            f"held-out nAUC more than {p.heldout_margin:g} below the tuning nAUC at the chosen η. Stability: failed / "
            f"runs at d = {d} (η and its neighbour), tuned | common arm. Regime: gmc's learning-phase χ² median "
            f"[95 % order-statistic interval]; local when ≤ {p.local_chi2:g}." if p.version >= 4 else "")
    sens = res.c9.get("sensitivity")
    paras = [f"Protocol {p.label}. C9 at η: {res.c9['verdict']}"
             + (f"; at η/√2 (sensitivity line): {sens['verdict']}" if sens else "") + "."]
    return dict(title=f"Protocol v{p.version} scope (C9, tabular instances)", paragraphs=paras,
                tables=[dict(title="Scope per instance", columns=["instance", "zero-gradient fraction", "saturation",
                                                                  "cells flagged (held-out < tuning)",
                                                                  "stability at d (tuned | common)", "regime (χ²)"],
                             rows=rows, note=note)])


def appendix_tables(res) -> list[dict]:
    """Per-cell details for the appendix: tuning vs held-out nAUC with the flag, failure splits on both
    arms, and the verdict matrix at η/√2."""
    from simulate.protocol.c9 import failure_split

    p = res.protocol
    out = []
    ho = res.c9.get("heldout")
    if ho is not None and len(ho):
        out.append(dict(title="Tuning vs held-out nAUC per cell (v4)",
                        columns=["instance", "estimator", "d", "η", "tuning nAUC", "tuning LCB", "held-out nAUC",
                                 "95 % t", "gap", "flag"],
                        rows=[[r.instance, r.estimator, int(r.d), _fmt(r.eta_tuned, 3), _fmt(r.tune_nauc), _fmt(r.tune_lcb),
                               _fmt(r.heldout_nauc), f"[{_fmt(r.heldout_lo)}, {_fmt(r.heldout_hi)}]", _fmt(r.gap),
                               "flagged" if r.flagged else ""] for r in ho.itertuples(index=False)],
                        note=f"η chosen by rule '{p.eta_rule}' on {len(p.tune_seeds)} tuning seeds; held-out: "
                             f"{len(p.eval_seeds)} seeds; flagged when the gap < −{p.heldout_margin:g}."))
    G, eps = int(p.primary["G"]), float(p.primary["eps"])
    rows = []
    for inst in p.instances:
        t = res.table[res.table.instance == inst]
        for e in p.estimators:
            for d in p.delays:
                cells = []
                for arm in ("tuned", "common"):
                    s = failure_split(t, e, int(d), eps, G, arm)
                    cells.append(f"{s['diverged']}/{s['collapsed']}/{s['locked_in']} of {s['n']}" if s["n"] else "—")
                rows.append([inst, e, int(d), *cells])
    out.append(dict(title="Failures per cell on both arms (v4)", columns=["instance", "estimator", "d",
                    "tuned: diverged/collapsed/locked-in", "common: diverged/collapsed/locked-in"], rows=rows,
                    note="Failures are reported beside the comparisons, never a filter: a failed run keeps its nAUC."))
    sens = res.c9.get("sensitivity")
    if sens:
        m = sens["matrix"]
        out.append(dict(title="C9 verdicts at η/√2 (sensitivity line)", columns=["sub-claim", *map(str, m.columns),
                                                                                  "aggregate"],
                        rows=[[s, *[v if isinstance(v, str) else "—" for v in m.loc[s]], sens["aggregate"].get(s, "—")]
                              for s in m.index],
                        note="Every arm's η replaced by η·2^−0.5; the same rules and seeds."))
    return out
