"""The regime map (issue 24 item 2): *when* does correcting stale rollouts with gmc help?

For every instance, group size G, ε, step-size factor f and delay d, the **common-η arm**: the η tuned
at d = 0 by ``onpolicy`` for that instance and G under the protocol's own tuning
(:func:`simulate.protocol.cells.run_cell`, the same sweep cells as the protocol run, so a protocol run
and a map share them), multiplied by f and shared by every estimator at every d. Each
``(instance, estimator, d, G, ε, f)`` is evaluated on the held-out seeds
(:func:`simulate.protocol.cells.eval_at`, ``kind="common"``), with the protocol's metrics and failure
definition (divergence, collapse, lock-in: :func:`simulate.protocol.cells.run_metrics`).

With ``tuned_arm`` (default: onpolicy and gmc) the map also has the **tuned arm**: each
``(instance, estimator, d, G, ε)`` with η tuned for that cell on the tuning seeds
(:func:`simulate.protocol.cells.run_cell`, the protocol's own sweep cells, so the protocol's delays are
shared), evaluated on the held-out seeds; its rows carry ``arm = "tuned"`` and ``eta_factor = 1``.

:func:`standard_map` is what ``make run`` draws: the d × η map at the primary G and ε, plus two
slices at η₀ (``f = 1``) over the G axis (``FULL_G`` at the primary ε) and the ε axis (``FULL_EPS`` at
the primary G), plus the tuned arm at the primary G and ε — one :class:`RegimeMap`.

Three tables come out of :func:`regime_map` (a :class:`RegimeMap`):

- ``cells``: one row per ``(instance, estimator, d, G, ε, arm, f)``: mean nAUC, the failure split and the
  mechanism columns (learning-phase χ², early ESS, final entropy, lock-in rate);
- ``comparisons`` (tidy, one row per ``(instance, d, G, ε, arm, f, comparison)``):
  ``Δ_s = nAUC_s(gmc) − nAUC_s(X)`` paired over seeds s, with X = onpolicy (``kind="superiority"``: the
  claim "gmc helps" is ``E Δ > +δ``) and X = the best other estimator of the cell (``kind="noninferiority"``:
  "gmc best or tied" is ``E Δ > −δ``, as C9; v4 ``gmc − best rival``: every rival, a failed run keeps its
  nAUC; v2/v3 ``gmc − best stable``: among the rivals failing in at most p₀); δ = the protocol's margin.
  Estimate, s.e., the two-sided 95 % t-interval ``Δ̄ ± t_{n−1,0.975}·s/√n``, the verdict against the
  threshold (:func:`simulate.verdicts.paired_comparison`, a family of one) and a sign label against 0:
  ``gmc ahead`` (lo > 0), ``gmc behind`` (hi < 0), ``n.s.``. No multiplicity correction over the map:
  it is a description, the pre-registered verdicts stay C9's;
- ``boundary``: per ``(instance, G, ε, arm, f)`` the smallest d at which gmc is significantly ahead of
  onpolicy (interval above 0) and the smallest d at which onpolicy is significantly ahead of gmc, or
  ``"none up to d = max d"``.

Cost (measured, one Numba thread): 8 delays × 24 held-out seeds at G = 8 take 0.8 CPU-s on each of the
five small instances, 4.3 on count-long-bernoulli and 9.2 on feature-lm-bernoulli, so the default map
(G = 8, ε = 0.2, every d and f, 7 instances: 175 sweep cells, 1400 evaluations) is ~450 CPU-s, ~4 min on
2 cores; the full grid of the issue (``G=FULL_G, eps=FULL_EPS``) is ~7× that (G = 4 costs 1.8×, G = 32
0.35× of G = 8; tis/tic/gmc run at 3 ε): ~3100 CPU-s. Under protocol v4 a tuned cell costs ~1.8× v3's (16
tuning seeds, η/√2 evaluated too), so the standard map's tuned arm runs at :data:`TUNED_DELAYS` only.

Every axis is validated before any cell runs (:func:`simulate.protocol.spec.check_axes`): no repeats, integer
d, G and seeds, G dividing the budget, known instances.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from simulate import verdicts as vd
from simulate.protocol import cells as pc
from simulate.protocol.spec import DEFAULT_PATH, Protocol, check_axes, load_protocol

__all__ = ["RegimeMap", "regime_map", "standard_map", "merge", "map_cell", "tuned_etas", "tuned_arm_runs",
           "cell_table", "comparisons", "boundary", "DELAYS", "ETA_FACTORS", "ESTIMATORS", "TUNED_ESTIMATORS",
           "DEFAULT_G", "DEFAULT_EPS", "FULL_G", "FULL_EPS", "QUICK", "TUNED_DELAYS"]

DELAYS = (0, 1, 2, 4, 8, 16, 32, 64)
ETA_FACTORS = (2.0 ** -2, 2.0 ** -1, 1.0, 2.0, 4.0)
ESTIMATORS = ("onpolicy", "is", "tis", "tic", "gmc")
#: The tuned arm's estimators: the map's headline comparison (a cell each per d: tuning costs ~3× evaluating).
TUNED_ESTIMATORS = ("onpolicy", "gmc")
#: The standard map's tuned-arm delays: d = 0 and the primary d are the protocol's own cells; 2 and 32 add
#: a short and a long delay (v4's 16 tuning seeds make a tuned cell ~1.8× v3's, so not every map d).
TUNED_DELAYS = (0, 2, 8, 32)
#: The default grid fits ~4 min on 2 cores (module docstring): the primary G and ε only.
DEFAULT_G = (8,)
DEFAULT_EPS = (0.2,)
#: The issue's full grid (~7× the default's cost), available by argument.
FULL_G = (4, 8, 32)
FULL_EPS = (0.1, 0.2, 0.5)
#: The quick map (figure ``--quick``, tests): two cheap instances, four delays, three factors, the quick
#: protocol's 8 held-out seeds; ~10 s from empty caches on one core.
QUICK = dict(instances=("count-frac", "feature-loglinear"), delays=(0, 4, 16, 64), eta_factors=(0.5, 1.0, 2.0),
             G=(8,), eps=(0.2,))
#: The quick standard map: QUICK plus its slices (G ∈ {4, 8}, ε ∈ {0.2, 0.5} at f = 1) and the tuned arm.
QUICK_SLICES = dict(G=(4, 8), eps=(0.2, 0.5))
ARMS = ("common", "tuned")
COMPARISONS = ("gmc − onpolicy", "gmc − best stable")
#: One map cell: the arm ("common": η = f·η₀; "tuned": η tuned per cell, f = 1).
KEYS = ["instance", "estimator", "d", "G", "eps", "arm", "eta_factor"]
FAILURES = ("diverged", "collapsed", "locked_in")
LEVEL = 0.95  # the map's intervals: two-sided 95 % t


@dataclass
class RegimeMap:
    """What :func:`regime_map` returns (tables described in the module docstring)."""

    protocol: Protocol
    runs: pd.DataFrame
    """One row per run (held-out seed) of every map cell."""
    etas: pd.DataFrame
    """The base η per (instance, G): onpolicy's tuned η at d = 0."""
    cells: pd.DataFrame
    comparisons: pd.DataFrame
    boundary: pd.DataFrame
    settings: dict = field(default_factory=dict)
    sweeps: list = field(default_factory=list)
    """The sweep ids whose cells hold the runs (tuning cells: the protocol's own sweeps)."""
    computed: int = 0
    """Map and tuning cells computed by this call (the rest came from the cache)."""
    cached: int = 0
    seconds: float = 0.0


# ----------------------------------------------------------------------------- sweep plumbing
def _tag(proto: Protocol) -> str:
    return f"{proto.name}-{proto.sha256[:12]}" + ("-quick" if proto.quick else "")


def _sweep(fn: str, sweep_id: str, cells: list[tuple[str, dict]], sweep_kw: dict):
    """Run ``cells`` (``(id, settings)``) through the sweep engine; one Numba thread per local worker
    (a cell's kernel batches are too small to gain from threads; results do not depend on it)."""
    from simulate.protocol.run import run_pinned
    from sweep import Cell, Sweep

    sw = Sweep(sweep_id, fn, tuple(Cell(i, s) for i, s in cells))
    kw = dict(backend="serial", progress=False)
    kw.update(sweep_kw)
    return run_pinned(sw, **kw)


def tuned_etas(instances, G, proto: Protocol, path: Path = DEFAULT_PATH, sweep_kw: dict | None = None):
    """``η₀(instance, G)``: onpolicy's η tuned at d = 0 (ε = primary ε, which onpolicy ignores) by
    :func:`simulate.protocol.cells.run_cell`. The cells are the protocol run's own (same sweep id, cell id
    and settings), so a map after a protocol run tunes nothing. Returns ``(table, computed, cached, sweep ids)``."""
    eps = float(proto.primary["eps"])
    from simulate.protocol.run import cell_id, protocol_settings

    fixed = protocol_settings(proto, path)
    rows, n_comp, n_cached, ids = [], 0, 0, []
    for inst in instances:
        cells = []
        for g in G:
            c = dict(instance=inst, estimator="onpolicy", d=0, eps=eps, G=int(g))
            cells.append((cell_id(c), {**c, **fixed}))  # the protocol run's own cells
        res = _sweep("simulate.protocol.run:sweep_cell", f"protocol-{_tag(proto)}-{inst}", cells, sweep_kw or {})
        n_comp, n_cached = n_comp + len(res.computed), n_cached + len(res.cached)
        ids.append(res.sweep_id)
        t = res.table
        for g in G:
            s = t[t.G == int(g)]
            rows.append(dict(instance=inst, G=int(g), eta_tuned=float(s.eta_tuned.iloc[0]),
                             eta_at_edge=bool(s.eta_at_edge.iloc[0])))
    return pd.DataFrame(rows), n_comp, n_cached, ids


def tuned_arm_runs(instances, delays, G, eps, estimators, proto: Protocol, path: Path = DEFAULT_PATH,
                   sweep_kw: dict | None = None):
    """The tuned arm: for each ``(instance, estimator ∈ estimators, d ∈ delays, G, ε)`` the protocol's
    cell :func:`simulate.protocol.cells.run_cell` (η tuned on the tuning seeds for that cell; the same sweep
    id, cell id and settings as a protocol run, so shared cells are computed once), keeping the held-out
    runs at the tuned η. Returns ``(runs, computed, cached, sweep ids)``; ``runs`` has ``arm = "tuned"``,
    ``eta_factor = 1``, ``eta_base`` = the cell's tuned η."""
    from simulate.protocol.run import cell_id, protocol_settings

    fixed = protocol_settings(proto, path)
    pe = float(proto.primary["eps"])
    tables, n_comp, n_cached, ids = [], 0, 0, []
    for inst in instances:
        cells = []
        for e in estimators:
            for g in G:
                for ep in (eps if e in proto.eps_estimators else (pe,)):
                    for d in delays:
                        c = dict(instance=inst, estimator=e, d=int(d), eps=float(ep), G=int(g))
                        cells.append((cell_id(c), {**c, **fixed}))
        res = _sweep("simulate.protocol.run:sweep_cell", f"protocol-{_tag(proto)}-{inst}", cells, sweep_kw or {})
        n_comp, n_cached = n_comp + len(res.computed), n_cached + len(res.cached)
        ids.append(res.sweep_id)
        t = res.table
        t = t[(t.phase == "eval") & (t.eta_kind == "tuned")]
        tables.append(t.assign(arm="tuned", eta_factor=1.0, eta_base=t.eta_tuned))
    runs = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return runs, n_comp, n_cached, ids


def map_cell(instance: str, estimator: str, delays, eps: float, G: int, eta: float, eta_factor: float, seeds,
             protocol_path: str, quick: bool, protocol_sha256: str) -> pd.DataFrame:
    """Sweep cell function: ``estimator`` at ``η = eta·eta_factor`` (``eta`` = the tuned base) at every d of
    ``delays`` on ``seeds``, one row per run (:func:`simulate.protocol.cells.eval_at`, ``kind="common"``).
    One cell holds every d: storing a cell costs ~50 ms, as much as computing one d on a small instance."""
    from simulate.protocol.run import cell_protocol

    proto = replace(cell_protocol(protocol_path, quick, protocol_sha256), eval_seeds=tuple(int(s) for s in seeds))
    out = pd.concat([pc.eval_at(instance, estimator, int(d), float(eps), int(G), float(eta) * float(eta_factor), proto,
                                kind="common") for d in delays], ignore_index=True)
    return out.assign(eta_base=float(eta), eta_factor=float(eta_factor))


# ----------------------------------------------------------------------------- tables
def _eps_of(estimator: str, eps: float, primary_eps: float, eps_estimators) -> float:
    return float(eps) if estimator in eps_estimators else float(primary_eps)


def _with_arm(df: pd.DataFrame) -> pd.DataFrame:
    """Tables written before the tuned arm (no ``arm`` column) are the common arm."""
    return df if "arm" in df else df.assign(arm="common")


def cell_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per ``(instance, estimator, d, G, eps, eta_factor)``: ``n``, mean nAUC, the failure split
    (counts of ``failure`` = diverged/collapsed/locked_in), ``fail_rate``, and the mechanism columns:
    ``chi2_learn`` (median over runs of the learning-phase median χ²), ``ess_early`` (mean early weight
    ESS), ``entropy_final`` (mean), ``lockin_rate``."""
    keys = KEYS
    runs = _with_arm(runs)
    g = runs.groupby(keys, sort=True)
    out = g.agg(eta=("eta", "first"), n=("nauc", "size"), nauc=("nauc", "mean"), final_nJ=("final_nJ", "mean"),
                fail_rate=("failed", "mean"), chi2_learn=("chi2_learn_med", "median"),
                ess_early=("ess_early", "mean"), entropy_final=("entropy_final", "mean"),
                lockin_rate=("locked_in", "mean"), zero_frac=("zero_frac", "mean")).reset_index()
    for f in FAILURES:
        out[f"n_{f}"] = g.failure.agg(lambda v, f=f: int((v == f).sum())).to_numpy()
    return out


def _compare(a: pd.Series, b: pd.Series, kind: str, margin: float, name: str) -> dict:
    seeds = a.index.intersection(b.index)
    if len(seeds) < 2:
        return dict(n=len(seeds), estimate=math.nan, se=math.nan, lo=math.nan, hi=math.nan, verdict=vd.INCONCLUSIVE,
                    sign="n.s.")
    c = vd.paired_comparison(a[seeds].to_numpy(), b[seeds].to_numpy(), kind=kind, margin=margin, name=name,
                             alpha=(1 - LEVEL) / 2)  # a family of one: its interval is the two-sided 95 % t
    sign = "gmc ahead" if c.lo > 0 else "gmc behind" if c.hi < 0 else "n.s."
    return dict(n=c.n, estimate=c.estimate, se=c.se, lo=c.lo, hi=c.hi, threshold=c.threshold, verdict=c.verdict,
                sign=sign)


def comparisons(runs: pd.DataFrame, proto: Protocol, estimators=ESTIMATORS) -> pd.DataFrame:
    """The tidy comparison table (module docstring): per ``(instance, d, G, eps, eta_factor)`` two rows,
    ``gmc − onpolicy`` and ``gmc − best stable``. A rival is *stable* in a cell when its failure fraction
    is ≤ the protocol's ``failure_p0`` (C9's rule); the best stable rival has the largest mean nAUC.
    Columns: the keys, ``comparison``, ``rival``, ``kind``, ``margin``, ``threshold``, ``n``, ``estimate``,
    ``se``, ``lo``/``hi`` (95 % t), ``verdict``, ``sign``, the rival's and gmc's mean nAUC and mechanism
    columns, and ``{e}_{diverged|collapsed|locked_in}`` counts for every estimator of the cell."""
    runs = _with_arm(runs)
    cells = cell_table(runs)
    pe, eps_est = float(proto.primary["eps"]), tuple(proto.eps_estimators)
    others = [e for e in estimators if e != "gmc"]
    vals = {k: s.set_index("seed").nauc for k, s in runs.groupby(KEYS)}
    cidx = cells.set_index(KEYS)
    rows = []
    gmc = cells[cells.estimator == "gmc"]
    for r in gmc.itertuples(index=False):
        inst, d, G, eps, arm, f = r.instance, r.d, r.G, r.eps, r.arm, r.eta_factor
        key = lambda e: (inst, e, d, G, _eps_of(e, eps, pe, eps_est), arm, f)  # noqa: E731
        present = [e for e in others if key(e) in cidx.index]
        base = dict(instance=inst, d=int(d), G=int(G), eps=float(eps), arm=arm, eta_factor=float(f), eta=float(r.eta),
                    nauc_gmc=r.nauc, fail_rate_gmc=r.fail_rate, chi2_learn_gmc=r.chi2_learn,
                    ess_early_gmc=r.ess_early, entropy_final_gmc=r.entropy_final)
        for e in ("gmc", *present):
            for fl in FAILURES:
                base[f"{e}_{fl}"] = int(cidx.loc[key(e), f"n_{fl}"])
        # v4: no rival is dropped for failing (a failed run keeps its nAUC); v2/v3: the best *stable* rival
        stable = [e for e in present if proto.version >= 4 or cidx.loc[key(e), "fail_rate"] <= proto.failure_p0]
        best = max(stable, key=lambda e: cidx.loc[key(e), "nauc"]) if stable else None
        for comp, rival, kind in (("gmc − onpolicy", "onpolicy" if "onpolicy" in present else None, "superiority"),
                                  (best_label(proto), best, "noninferiority")):
            row = dict(base, comparison=comp, rival=rival, kind=kind, margin=proto.margin)
            if rival is None:
                row.update(n=0, estimate=math.nan, se=math.nan, lo=math.nan, hi=math.nan, verdict=vd.INCONCLUSIVE,
                           sign="no stable rival" if comp.startswith("gmc − best") else "n.s.",
                           threshold=proto.margin if kind == "superiority" else -proto.margin)
            else:
                row.update(_compare(vals[key("gmc")], vals[key(rival)], kind, proto.margin, f"{comp} ({rival})"))
                c = cidx.loc[key(rival)]
                row.update(nauc_rival=c.nauc, fail_rate_rival=c.fail_rate, chi2_learn_rival=c.chi2_learn,
                           ess_early_rival=c.ess_early, entropy_final_rival=c.entropy_final)
            rows.append(row)
    out = pd.DataFrame(rows)
    front = ["instance", "d", "G", "eps", "arm", "eta_factor", "comparison", "rival", "kind", "margin", "threshold",
             "n", "estimate", "se", "lo", "hi", "verdict", "sign"]
    return out[front + [c for c in out.columns if c not in front]].sort_values(
        ["instance", "G", "eps", "arm", "eta_factor", "comparison", "d"], kind="stable").reset_index(drop=True)


def best_label(proto: Protocol) -> str:
    """The second comparison's name: ``gmc − best rival`` (v4: every rival) or ``gmc − best stable`` (v2/v3)."""
    return "gmc − best rival" if proto.version >= 4 else "gmc − best stable"


def boundary(comp: pd.DataFrame, delays=None) -> pd.DataFrame:
    """Per ``(instance, G, eps, arm, eta_factor)`` from the ``gmc − onpolicy`` rows of :func:`comparisons`:
    ``d_gmc_ahead`` = min{d : lo_d > 0} (95 % t-interval above 0), ``d_onpolicy_ahead`` = min{d : hi_d < 0},
    each ``None`` when no d qualifies, with a text (``"d = 8 (+0.031 [0.012, 0.050])"`` or
    ``"none up to d = 64"``, the largest d of ``delays``, default the table's), the delays where each side
    is ahead, and ``d_gmc_ahead_from``: the smallest d from which gmc is ahead at *every* larger grid d."""
    sel = _with_arm(comp[comp.comparison == "gmc − onpolicy"])
    rows = []
    for (inst, G, eps, arm, f), s in sel.groupby(["instance", "G", "eps", "arm", "eta_factor"], sort=True):
        s = s.sort_values("d")
        dmax = int(max(delays)) if delays is not None else int(s.d.max())
        ahead, behind = s[s.lo > 0], s[s.hi < 0]

        def first(t):
            if t.empty:
                return None, f"none up to d = {dmax}"
            r = t.iloc[0]
            return int(r.d), f"d = {int(r.d)} ({r.estimate:+.3f} [{r.lo:.3f}, {r.hi:.3f}])"

        da, ta = first(ahead)
        db, tb = first(behind)
        ok = (s.lo > 0).to_numpy()
        tail = None
        for i in range(len(ok) - 1, -1, -1):  # walk down from the largest d while gmc stays ahead
            if not ok[i]:
                break
            tail = int(s.d.iloc[i])
        rows.append(dict(instance=inst, G=int(G), eps=float(eps), arm=arm, eta_factor=float(f), d_gmc_ahead=da,
                         gmc_ahead=ta,
                         d_onpolicy_ahead=db, onpolicy_ahead=tb, d_gmc_ahead_from=tail,
                         gmc_ahead_at=",".join(str(int(x)) for x in ahead.d), onpolicy_ahead_at=",".join(
                             str(int(x)) for x in behind.d), d_max=dmax))
    out = pd.DataFrame(rows, columns=["instance", "G", "eps", "arm", "eta_factor", "d_gmc_ahead", "gmc_ahead",
                                      "d_onpolicy_ahead", "onpolicy_ahead", "d_gmc_ahead_from", "gmc_ahead_at",
                                      "onpolicy_ahead_at", "d_max"])
    for c in ("d_gmc_ahead", "d_onpolicy_ahead", "d_gmc_ahead_from"):
        out[c] = out[c].astype("Int64")  # missing = no such d (not NaN in a float column)
    return out


# ----------------------------------------------------------------------------- the map
def regime_map(instances=None, delays=DELAYS, eta_factors=ETA_FACTORS, G=DEFAULT_G, eps=DEFAULT_EPS,
               estimators=ESTIMATORS, seeds=None, proto: Protocol | str | Path | None = None, *, quick: bool = False,
               tuned_arm=(), tuned_delays=None, progress: bool = False, **sweep_kw) -> RegimeMap:
    """The regime map (module docstring) on ``instances`` (default: the protocol's), common-η arm
    ``η = f·η₀(instance, G)`` for ``f`` in ``eta_factors``, on ``seeds`` (default the protocol's held-out
    seeds). ``proto``: a :class:`Protocol`, a path, or ``None`` (the current committed file,
    :data:`~simulate.protocol.spec.DEFAULT_PATH`; ``quick`` overlays its ``[quick]`` table). ``sweep_kw`` go to :func:`sweep.run_sweep` (``root``, ``backend``,
    ``n_workers``…; default ``backend="serial"``). Every cell is cached: a second call computes nothing.
    ``G=FULL_G, eps=FULL_EPS`` is the issue's full grid. ``tuned_arm``: estimators (each in ``estimators``)
    that also get the tuned arm at every ``d``, ``G``, ``ε`` (:func:`tuned_arm_runs`; the protocol's held-out
    seeds, whatever ``seeds`` says) at ``tuned_delays`` (default: ``delays``). Every axis is validated first
    (:func:`check_axes`)."""
    t0 = time.perf_counter()
    path = Path(proto) if isinstance(proto, (str, Path)) else DEFAULT_PATH
    proto = proto if isinstance(proto, Protocol) else load_protocol(path, quick=quick)
    insts = tuple(proto.instances if instances is None else instances)
    seeds = tuple(proto.eval_seeds if seeds is None else seeds)
    check_axes(proto, instances=insts, delays=delays, eta_factors=eta_factors, G=G, eps=eps, estimators=estimators,
               seeds=seeds, tuned_delays=tuned_delays)
    seeds = tuple(int(s) for s in seeds)
    if set(seeds) & set(proto.tune_seeds):
        raise ValueError(f"seeds must be held out: {sorted(set(seeds) & set(proto.tune_seeds))} are tuning seeds")
    from simulate.training.config import REGISTERED_ESTIMATORS

    unknown = set(estimators) - set(REGISTERED_ESTIMATORS)
    if "gmc" not in estimators or unknown:
        raise ValueError(f"estimators must include gmc and be among {REGISTERED_ESTIMATORS}, got {tuple(estimators)}")
    if not set(tuned_arm) <= set(estimators):
        raise ValueError(f"tuned_arm must be a subset of estimators {tuple(estimators)}, got {tuple(tuned_arm)}")
    sweep_kw = dict(sweep_kw, progress=progress)
    etas, n_comp, n_cached, sweeps = tuned_etas(insts, G, proto, path, sweep_kw)
    from simulate.protocol.run import protocol_settings

    fixed = protocol_settings(proto, path)
    pe = float(proto.primary["eps"])
    sid = hashlib.sha256(",".join(map(str, seeds)).encode()).hexdigest()[:8]
    tables = []
    for inst in insts:
        cells = []
        for g in G:
            eta0 = float(etas[(etas.instance == inst) & (etas.G == int(g))].eta_tuned.iloc[0])
            for e in estimators:
                for ep in (eps if e in proto.eps_estimators else (pe,)):  # ε matters only for the capped maps
                    for f in eta_factors:
                        s = dict(instance=inst, estimator=e, eps=float(ep), G=int(g), eta=eta0, eta_factor=float(f))
                        cid = ",".join(f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items())
                        cells.append((cid, {**s, "delays": [int(d) for d in delays], "seeds": list(seeds), **fixed}))
        res = _sweep("simulate.protocol.regime_map:map_cell", f"regime-map-{_tag(proto)}-{inst}-seeds{sid}", cells,
                     sweep_kw)
        n_comp, n_cached = n_comp + len(res.computed), n_cached + len(res.cached)
        sweeps.append(res.sweep_id)
        tables.append(res.table.assign(arm="common"))
    if tuned_arm:
        t, c, k, ids = tuned_arm_runs(insts, delays if tuned_delays is None else tuned_delays, G, eps, tuned_arm, proto,
                                      path, sweep_kw)
        tables.append(t)
        n_comp, n_cached = n_comp + c, n_cached + k
        sweeps += ids
    runs = pd.concat(tables, ignore_index=True)
    runs = runs.drop(columns=[c for c in ("cell", "delays", "seeds", "protocol_path", "quick", "protocol_sha256")
                              if c in runs.columns])
    comp = comparisons(runs, proto, estimators)
    settings = dict(instances=list(insts), delays=[int(d) for d in delays], eta_factors=[float(f) for f in eta_factors],
                    G=[int(g) for g in G], eps=[float(e) for e in eps], estimators=list(estimators), seeds=list(seeds),
                    tuned_arm=list(tuned_arm),
                    tuned_delays=[int(d) for d in (delays if tuned_delays is None else tuned_delays)] if tuned_arm else [],
                    protocol=proto.label, margin=proto.margin, failure_p0=proto.failure_p0, level=LEVEL)
    return RegimeMap(proto, runs, etas, cell_table(runs), comp, boundary(comp, delays), settings, sweeps, n_comp,
                     n_cached, time.perf_counter() - t0)


def merge(maps) -> RegimeMap:
    """One :class:`RegimeMap` from several on the same protocol (e.g. the d × η grid and its G and ε
    slices): their runs without duplicates (a cell shared by two grids is one cell), tables recomputed.
    ``settings`` lists each part's settings under ``parts``, and the union of its axes."""
    maps = list(maps)
    if not maps:
        raise ValueError("maps must hold at least one RegimeMap")
    proto = maps[0].protocol
    if any(m.protocol.sha256 != proto.sha256 or m.protocol.quick != proto.quick for m in maps):
        raise ValueError("maps must come from one protocol (same hash and quick flag)")
    runs = pd.concat([m.runs for m in maps], ignore_index=True).drop_duplicates(KEYS + ["seed"], keep="first")
    runs = runs.reset_index(drop=True)
    ests = list(dict.fromkeys(e for m in maps for e in m.settings["estimators"]))
    comp = comparisons(runs, proto, ests)
    delays = sorted({int(d) for m in maps for d in m.settings["delays"]})
    union = lambda k, f: sorted({f(v) for m in maps for v in m.settings[k]})  # noqa: E731
    settings = dict(maps[0].settings, instances=list(dict.fromkeys(i for m in maps for i in m.settings["instances"])),
                    delays=delays, eta_factors=union("eta_factors", float), G=union("G", int), eps=union("eps", float),
                    estimators=ests, tuned_arm=list(dict.fromkeys(e for m in maps for e in m.settings["tuned_arm"])),
                    parts=[m.settings for m in maps])
    etas = pd.concat([m.etas for m in maps], ignore_index=True).drop_duplicates(["instance", "G"]).reset_index(drop=True)
    return RegimeMap(proto, runs, etas, cell_table(runs), comp, boundary(comp, delays), settings,
                     list(dict.fromkeys(s for m in maps for s in m.sweeps)), sum(m.computed for m in maps),
                     sum(m.cached for m in maps), sum(m.seconds for m in maps))


def standard_map(quick: bool = False, instances=None, estimators=ESTIMATORS, tuned_arm=TUNED_ESTIMATORS,
                 proto: Protocol | str | Path | None = None, progress: bool = False, **sweep_kw) -> RegimeMap:
    """The map ``make run`` draws (module docstring): the d × η grid at the primary G and ε with the tuned
    arm, and two slices at ``f = 1``: G ∈ ``FULL_G`` at the primary ε, ε ∈ ``FULL_EPS`` at the primary G
    (``quick``: :data:`QUICK` and :data:`QUICK_SLICES`). Cells are cached: a second call computes nothing."""
    p = proto if isinstance(proto, Protocol) else load_protocol(Path(proto) if proto else DEFAULT_PATH, quick=quick)
    pG, pe = int(p.primary["G"]), float(p.primary["eps"])
    base = dict(QUICK) if quick else dict(delays=DELAYS, eta_factors=ETA_FACTORS)
    if instances is not None:
        base["instances"] = tuple(instances)
    base.update(G=(pG,), eps=(pe,))
    slices = QUICK_SLICES if quick else dict(G=FULL_G, eps=FULL_EPS)
    kw = dict(estimators=estimators, proto=p, quick=quick, progress=progress, **sweep_kw)
    tuned_delays = None if quick else tuple(d for d in TUNED_DELAYS if d in base["delays"])
    parts = [regime_map(**base, tuned_arm=tuned_arm, tuned_delays=tuned_delays, **kw),
             regime_map(**{**base, "eta_factors": (1.0,), "G": tuple(slices["G"])}, **kw),
             regime_map(**{**base, "eta_factors": (1.0,), "eps": tuple(slices["eps"])}, **kw)]
    return merge(parts)
