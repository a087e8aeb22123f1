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

Three tables come out of :func:`regime_map` (a :class:`RegimeMap`): ``cells`` (one row per map cell: mean nAUC,
failures, mechanism columns), ``comparisons`` (gmc against onpolicy and against the best rival, paired over seeds,
95 % t-intervals) and ``boundary`` (per slice, the smallest d where either side is significantly ahead); they are
read from the runs by :mod:`simulate.protocol.regime_tables` (its names are re-exported here).

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
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from simulate.protocol import cells as pc
from simulate.protocol.regime_tables import (COMPARISONS, ESTIMATORS, FAILURES, KEYS, LEVEL, best_label, boundary,
                                             cell_table, comparisons)
from simulate.protocol.spec import DEFAULT_PATH, Protocol, check_axes, load_protocol

__all__ = ["RegimeMap", "regime_map", "standard_map", "merge", "map_cell", "tuned_etas", "tuned_arm_runs",
           "cell_table", "comparisons", "boundary", "DELAYS", "ETA_FACTORS", "ESTIMATORS", "TUNED_ESTIMATORS",
           "DEFAULT_G", "DEFAULT_EPS", "FULL_G", "FULL_EPS", "QUICK", "TUNED_DELAYS", "KEYS", "FAILURES", "LEVEL",
           "COMPARISONS", "best_label"]

DELAYS = (0, 1, 2, 4, 8, 16, 32, 64)
ETA_FACTORS = (2.0 ** -2, 2.0 ** -1, 1.0, 2.0, 4.0)
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
