"""Held-out accuracy against delay over estimators × delays × seeds: the C9 check at LM scale.

A sweep is data (STYLE §5): :func:`grid` lists the runs as ``(run_id, TrainConfig)`` and
:func:`to_sweep` turns them into a sweep-engine ``Sweep`` whose cells are single runs (cell function
:func:`run_cell`, one tidy row per ``(estimator, d, seed)``). :func:`run` executes it through the
project's one sweep engine, which owns caching by hash of settings + code version, atomic writes,
resume and the serial / local-process / Dask backends. The warm start is computed once in the driver
before any cell runs (one per init seed; ``warmstart_seed`` shares one across seeds) and the cells
load it from its cache. Each run still writes its per-step ``metrics.jsonl``/``metrics.csv`` under
``out_dir/runs/<run_id>`` (diagnostics), but the results table is the engine's.

The verdict follows the pre-registered :class:`simulate.llm.protocol.LMProtocol` (seeds, delays,
estimators, metric, margin, comparisons) and the project's one verdict module
(:mod:`simulate.verdicts`): paired per-seed comparisons, Holm over the family, Clopper–Pearson for
instability rates. :func:`summarise`, :func:`c9_result`, :func:`c9_verdict` and :func:`table` are
pure functions of the results table.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulate import verdicts as vd
from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
from simulate.llm.protocol import PROTOCOL, LMProtocol

MAIN_ESTIMATORS: tuple[str, ...] = PROTOCOL.estimators
#: Columns of the one row a cell returns (the engine adds ``cell`` and the flattened config).
ROW_COLUMNS: tuple[str, ...] = (
    "run_id", "estimator", "d", "seed", "lr_factor", "eta", "initial_acc", "final_acc", "auc", "gain", "skipped_steps",
    "mean_realised_delay", "chi2_mean", "chi2_learn_med", "ess_early", "ess_mean", "ell_max", "clip_frac_mean",
    "capped_frac_mean", "token_clip_frac_mean", "grad_norm_max", "reward_last10", "collapsed", "locked_in", "failure",
    "seconds",
)
#: Maps whose weights are capped (``w_i < ρ_i`` means the cap acted): ``capped_frac_mean`` is theirs.
CAPPED_MAPS: tuple[str, ...] = ("tis", "tic", "gmc")
#: Default backend of :func:`run`. Measured on 2 cores (18 tiny-model runs of 40 steps, 16×8 rollouts,
#: warm start cached, one torch thread per run): ``serial`` 64 s, ``local`` (2 spawned processes) 55 s,
#: same numbers to the last digit. Per-run time rises from 3.3 s to 5.1 s under two processes
#: (the cores are shared), so the gain is ~15 %, not 2×; a larger machine gains more.
DEFAULT_BACKEND = "local"


def protocol_base(protocol: LMProtocol = PROTOCOL, quick: bool = False, cache_dir: str = "results/llm/cache") -> TrainConfig:
    """The run settings of ``protocol`` as a :class:`TrainConfig` (``quick``: its shorter runs)."""
    q = quick
    return TrainConfig(steps=protocol.quick_steps if q else protocol.steps, eta=protocol.eta,
                       n_prompts=protocol.quick_n_prompts if q else protocol.n_prompts, G=protocol.G,
                       eval_every=protocol.eval_every, D=max(protocol.delays), preset=protocol.preset,
                       length_normalize=protocol.length_normalize, warmstart_seed=protocol.warmstart_seed,
                       threads=protocol.threads,
                       task=TaskConfig(task=protocol.task, digits=protocol.digits,
                                       n_eval=protocol.quick_n_eval if q else protocol.n_eval),
                       warmstart=WarmStartConfig(steps=protocol.quick_warmstart_steps if q else protocol.warmstart_steps),
                       cache_dir=cache_dir)


@dataclass(frozen=True)
class Sweep:
    """Settings of an accuracy-against-delay sweep (the table of runs is :func:`grid`).

    Defaults are the pre-registered protocol's (:data:`simulate.llm.protocol.PROTOCOL`);
    ``base.length_normalize=True``: trajectory-level maps then carry the same ``1/T_i`` as the
    token-level baselines, so AdamW + grad-norm clip see gradients of one scale (THEORY's
    un-normalised ``ĝ`` is ``base.replace(length_normalize=False)``).
    """

    estimators: tuple[str, ...] = PROTOCOL.estimators
    delays: tuple[int, ...] = PROTOCOL.delays
    seeds: tuple[int, ...] = PROTOCOL.seeds
    base: TrainConfig = protocol_base()
    out_dir: str = "results/llm/experiment"
    pairs: tuple[tuple[str, int], ...] | None = None
    """``(estimator, d)`` pairs to run for every seed; ``None``: every estimator at every delay."""
    arms: tuple[tuple[float, tuple[int, ...]], ...] | None = None
    """``((lr_factor, seeds), …)``: run the pairs at ``base.eta·lr_factor`` on those seeds; ``None``: one arm,
    ``((1.0, seeds),)``."""
    arm_pairs: tuple[tuple[float, tuple[tuple[str, int], ...]], ...] | None = None
    """``((lr_factor, pairs), …)``: an arm's own ``(estimator, d)`` pairs (default ``pairs``)."""

    def pairs_for(self, lr_factor: float) -> list[tuple[str, int]]:
        """The ``(estimator, d)`` pairs of the arm ``lr_factor``."""
        own = dict(self.arm_pairs or ())
        if lr_factor in own:
            return list(own[lr_factor])
        return list(self.pairs) if self.pairs is not None else [(x, d) for d in self.delays for x in self.estimators]

    def __post_init__(self) -> None:
        for f, seeds in self.arm_list:
            if not (isinstance(f, (int, float)) and math.isfinite(f) and f > 0):
                raise ValueError(f"arms: lr_factor must be a finite number > 0, got {f!r}")
            if not seeds:
                raise ValueError(f"arms: the arm at lr_factor {f:g} has no seeds")

    @property
    def arm_list(self) -> tuple[tuple[float, tuple[int, ...]], ...]:
        """The arms, ``((1.0, seeds),)`` when ``arms`` is ``None``."""
        return self.arms if self.arms is not None else ((1.0, tuple(self.seeds)),)

    @property
    def sweep_id(self) -> str:
        """Directory name of the stored cells (the engine's sweep id): the last part of ``out_dir``."""
        name = os.path.basename(os.path.abspath(self.out_dir))
        return name if name and not name.startswith(".") else "llm_experiment"


def protocol_sweep(protocol: LMProtocol = PROTOCOL, quick: bool = False, out_dir: str = "results/llm/experiment",
                   cache_dir: str = "results/llm/cache", full: bool = False) -> Sweep:
    """The sweep that ``protocol`` pre-declares, every arm (``quick``: its seeds, delays and run lengths for a
    path check; ``full``: v3's ``full_seeds``)."""
    arms = protocol.variant(full=full).arms(quick)
    protocol = protocol.variant(quick, full)
    return Sweep(estimators=protocol.estimators, delays=protocol.delays, seeds=arms[0][1],
                 base=protocol_base(protocol, quick, cache_dir), out_dir=out_dir, pairs=protocol.runs(), arms=arms,
                 arm_pairs=protocol.arm_runs())


def run_id(name: str, d: int, seed: int, lr_factor: float = 1.0) -> str:
    """``<estimator>-d<d>-s<seed>``, with ``-lr<factor>`` for an arm other than the main one."""
    return f"{name}-d{d}-s{seed}" + ("" if lr_factor == 1.0 else f"-lr{lr_factor:g}")


def grid(sweep: Sweep) -> list[tuple[str, TrainConfig]]:
    """``(run_id, config)`` for every arm × seed × (estimator, delay) pair (fixed delays; ``D = max(delays)``);
    an arm's runs have ``eta = base.eta·lr_factor``."""
    D = max(max(sweep.delays), 0)
    runs = []
    for f, seeds in sweep.arm_list:
        for seed in seeds:
            for name, d in sweep.pairs_for(f):
                rid = run_id(name, d, seed, f)
                runs.append((rid, sweep.base.replace(estimator=name, d=d, D=max(D, sweep.base.D), delay="fixed",
                                                     seed=seed, eta=sweep.base.eta * f,
                                                     out_dir=os.path.join(sweep.out_dir, "runs", rid))))
    return runs


def config_settings(cfg: TrainConfig) -> dict:
    """The config as flat scalar settings for the sweep engine (``task.*``/``warmstart.*`` for the nested ones)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v):
            out.update({f"{f.name}.{k}": x for k, x in dataclasses.asdict(v).items()})
        elif isinstance(v, float) and not math.isfinite(v):
            out[f.name] = repr(v)  # the engine's settings must be finite; max_grad_norm=inf means "no clip"
        else:
            out[f.name] = v
    return out


def config_from_settings(settings: dict) -> TrainConfig:
    """Inverse of :func:`config_settings` (validated by the dataclasses)."""
    floats = {f.name for f in dataclasses.fields(TrainConfig) if f.type in ("float", float)}
    top = {k: (float(v) if k in floats and isinstance(v, str) else v) for k, v in settings.items() if "." not in k}
    task = {k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith("task.")}
    warm = {k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith("warmstart.")}
    return TrainConfig(**top, task=TaskConfig(**task), warmstart=WarmStartConfig(**warm))


def to_sweep(sweep: Sweep):
    """The experiment as an :class:`sweep.Sweep`: one cell per seed and arm (id ``s<seed>`` or
    ``s<seed>-lr<factor>``), computing that seed's runs as one forest (:mod:`simulate.llm.tree`: shared
    prefixes and warm-start batches, bit for bit the separate runs) and returning one row per run."""
    from sweep import Cell
    from sweep import Sweep as EngineSweep

    D = max(max(sweep.delays), 0, sweep.base.D)
    cells = []
    for f, seeds in sweep.arm_list:
        pairs = sweep.pairs_for(f)
        for seed in seeds:
            cfg = sweep.base.replace(seed=seed, eta=sweep.base.eta * f, D=D, delay="fixed", d=0,
                                     out_dir=os.path.join(sweep.out_dir, "runs"))
            cid = f"s{seed}" + ("" if f == 1.0 else f"-lr{f:g}")
            cells.append(Cell(cid, {**config_settings(cfg), "lr_factor": float(f),
                                    "pairs": [f"{x}:{d}" for x, d in pairs]}))
    return EngineSweep(sweep.sweep_id, "simulate.llm.experiment:run_forest_cell", tuple(cells))


def accuracy_auc(initial_acc: float, metrics: pd.DataFrame, steps: int) -> float:
    """``(1/K) ∫_0^K acc(k) dk`` by the trapezoid rule over ``k = 0`` (the warm start) and every evaluated
    step (``heldout_acc`` of step ``j`` is measured after ``j + 1`` updates), ``K = steps``."""
    ev = metrics.loc[metrics["heldout_acc"].notna(), ["step", "heldout_acc"]]
    x = np.concatenate([[0.0], ev["step"].to_numpy(dtype=float) + 1.0])
    y = np.concatenate([[float(initial_acc)], ev["heldout_acc"].to_numpy(dtype=float)])
    if x[-1] != steps:
        raise ValueError(f"the last evaluated step must be K={steps} (got {x[-1]:g}): the run did not finish")
    return float(np.trapezoid(y, x) / steps)


def run_row(cfg: TrainConfig, s: dict, lr_factor: float, seconds: float) -> dict:
    """The results-table row of one finished run (``s``: its summary; metrics read from its ``out_dir``)."""
    m = pd.read_csv(os.path.join(cfg.out_dir, "metrics.csv"))
    ess_col = m["ess_w"] if m["ess_w"].notna().any() else m["ess_rho"]
    return {
        "run_id": os.path.basename(cfg.out_dir), "estimator": cfg.estimator, "d": cfg.d, "seed": cfg.seed,
        "lr_factor": float(lr_factor), "eta": cfg.eta,
        "initial_acc": s["initial_acc"], "final_acc": s["final_acc"],
        "auc": accuracy_auc(s["initial_acc"], m, cfg.steps),
        "gain": s["final_acc"] - s["initial_acc"], "skipped_steps": s["skipped_steps"],
        "mean_realised_delay": s["mean_realised_delay"], "chi2_mean": float(m["chi2"].mean()),
        "ess_mean": float(ess_col.mean()),
        "ell_max": float(m["ell_max"].max()), "clip_frac_mean": float(m["clip_frac"].mean()),
        # not applicable → NaN, by design: onpolicy and is cap nothing; trajectory maps clip no token
        "capped_frac_mean": float(m["clip_frac"].mean()) if cfg.estimator in CAPPED_MAPS else math.nan,
        "token_clip_frac_mean": float(m["clip_frac"].mean()) if cfg.token_level else math.nan,
        "grad_norm_max": float(m["grad_norm"].max()), "reward_last10": s["mean_reward_last10"],
        **failure_modes(s["initial_acc"], m, cfg.eval_every, s["skipped_steps"]),
        "seconds": seconds,
    }


def run_forest_cell(*, pairs: list[str], lr_factor: float = 1.0, **settings) -> pd.DataFrame:
    """One cell: every ``"estimator:d"`` of ``pairs`` for the seed and step size of ``settings`` (a flattened
    :class:`TrainConfig` whose ``out_dir`` is the runs folder), trained as one forest
    (:func:`simulate.llm.tree.train_forest`); one row per run. ``seconds`` is the cell's wall time over its
    runs (a forest shares work, so a run has no wall time of its own)."""
    from simulate.llm.tree import train_forest

    base = config_from_settings(settings)
    cfgs = []
    for p in pairs:
        name, _, d = str(p).partition(":")
        cfgs.append(base.replace(estimator=name, d=int(d),
                                 out_dir=os.path.join(base.out_dir, run_id(name, int(d), base.seed, lr_factor))))
    t0 = time.perf_counter()
    summaries = train_forest(cfgs, progress=False)
    per_run = (time.perf_counter() - t0) / max(len(cfgs), 1)
    rows = [run_row(c, s, lr_factor, per_run) for c, s in zip(cfgs, summaries)]
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))


def run_cell(**settings) -> pd.DataFrame:
    """One cell: train the run of ``settings`` (a flattened :class:`TrainConfig`) and return its tidy row.

    Row: final and initial greedy held-out accuracy, the accuracy AUC (:func:`accuracy_auc`),
    ``gain = final − initial``, skipped updates, mean realised delay, and per-run diagnostics from the
    step metrics (mean ``χ̂²``, max ``ℓ_i``, mean clip fraction, max pre-clip grad norm, mean reward of
    the last 10 steps), plus wall seconds (the only column that is not a function of the settings).
    """
    from simulate.llm.train import train

    cfg = config_from_settings(settings)
    t0 = time.perf_counter()
    s = train(cfg, progress=False, overwrite=True)  # the sweep owns the run folder: a recomputed cell replaces it
    return pd.DataFrame([run_row(cfg, s, 1.0, time.perf_counter() - t0)], columns=list(ROW_COLUMNS))


def prepare_warm_starts(sweep: Sweep, progress: bool = True) -> list[dict]:
    """Compute (or load) every warm start the grid needs, in this process, before cells are dispatched.

    Parallel cells would otherwise race to train the same warm start; the cache write is atomic, so
    a race would only waste time, never corrupt it. Returns the warm starts' ``info`` dicts.
    """
    from simulate.llm.config import warmstart_key
    from simulate.llm.warmstart import warm_start

    seen, infos = set(), []
    for _, cfg in grid(sweep):
        key = warmstart_key(cfg)
        if key not in seen:
            seen.add(key)
            infos.append(warm_start(cfg, progress=progress)[2])
    return infos


def run(sweep: Sweep, progress: bool = True, *, root: str | None = None, backend: str | None = None,
        **engine_opts) -> pd.DataFrame:
    """Execute the grid through :func:`sweep.run_sweep`; returns one row per run.

    Cells are stored under ``root`` (default ``out_dir/cells``) by the engine, so an interrupted or
    repeated sweep recomputes only missing cells (and everything after a code change). ``backend``
    and ``engine_opts`` (``n_workers``, ``client``, ``scheduler``, ``dask_local``) go to the engine.
    The table (the run's row, the cell id and every config setting) is also written to
    ``out_dir/results.csv``. ``backend=None``: :data:`DEFAULT_BACKEND` on CPU, ``"serial"`` on CUDA
    (one device: parallel processes would only hold extra CUDA contexts).
    """
    from sweep import load_cells, run_sweep

    eng = to_sweep(sweep)
    root = os.path.join(sweep.out_dir, "cells") if root is None else root
    if len(load_cells(eng, root)) < len(eng.cells):
        prepare_warm_starts(sweep, progress=progress)
    if backend is None:
        backend = DEFAULT_BACKEND if sweep.base.device == "cpu" else "serial"
    res = run_sweep(eng, root=root, backend=backend, progress=progress, **engine_opts)
    df = res.table
    os.makedirs(sweep.out_dir, exist_ok=True)
    df.to_csv(os.path.join(sweep.out_dir, "results.csv"), index=False)
    return df


def _with_arm(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with an ``lr_factor`` column (1.0 for tables written before the step-size arm existed)."""
    return df if "lr_factor" in df.columns else df.assign(lr_factor=1.0)


def arm(df: pd.DataFrame, lr_factor: float = 1.0) -> pd.DataFrame:
    """The runs of one step-size arm."""
    df = _with_arm(df)
    return df[np.isclose(df["lr_factor"].to_numpy(float), lr_factor)]


def summarise(df: pd.DataFrame, metric: str = PROTOCOL.metric, level: float = 0.95) -> pd.DataFrame:
    """Per (lr_factor, estimator, d): mean of ``metric`` over seeds with its Student-t interval
    (:func:`simulate.verdicts.t_interval`; ``lo = hi = NaN`` for a single run), and the same for the gain
    over the warm start."""
    rows = []
    for (f, name, d), g in _with_arm(df).groupby(["lr_factor", "estimator", "d"], sort=True):
        m, lo, hi = vd.t_interval(g[metric].to_numpy(float), level) if len(g) > 1 else (float(g[metric].iloc[0]), math.nan, math.nan)
        gm, glo, ghi = vd.t_interval(g["gain"].to_numpy(float), level) if len(g) > 1 else (float(g["gain"].iloc[0]), math.nan, math.nan)
        rows.append({"lr_factor": float(f), "estimator": name, "d": int(d), "n": len(g), "mean": m, "lo": lo, "hi": hi,
                     "gain_mean": gm, "gain_lo": glo, "gain_hi": ghi})
    return pd.DataFrame(rows)


def failure_modes(initial_acc: float, metrics: pd.DataFrame, tail: int, skipped_steps: int,
                  protocol: LMProtocol = PROTOCOL) -> dict:
    """The tabular protocol's diagnostics and failure modes for one LM run (:mod:`simulate.llm.protocol`):

    - ``chi2_learn_med``: median over the steps with a non-zero gradient of the batch's sequence-level
      ``χ̂² = mean_i (ρ_i − 1)²`` (converged or all-equal-reward steps would pull it towards 0);
    - ``ess_early``: mean weight ESS/G over the first quarter of the steps (``ess_w``; ``ess_rho`` for
      token-level maps, whose weights are per token);
    - ``collapsed``: accuracy ``a_k < max_{j≤k} a_j − collapse_drop·(1 − a_0)``;
    - ``locked_in``: ``(a_K − a_0)/(1 − a_0) < lockin_nJ`` and the mean gradient norm of the last ``tail``
      steps ≤ ``lockin_grad_rel`` × the first step's;
    - ``failure``: the first of ``diverged`` (a skipped update), ``collapsed``, ``locked_in`` that applies.
    """
    acc = np.concatenate([[float(initial_acc)], metrics["heldout_acc"].dropna().to_numpy(dtype=float)])
    span = max(1.0 - float(initial_acc), 1e-12)
    collapsed = bool(np.any(acc < np.maximum.accumulate(acc) - protocol.collapse_drop * span))
    gn = metrics["grad_norm"].to_numpy(dtype=float)
    g0 = gn[0] if gn.size and np.isfinite(gn[0]) else np.nan
    last = gn[-max(1, int(tail)):]
    locked = bool((acc[-1] - acc[0]) / span < protocol.lockin_nJ and g0 > 0
                  and np.nanmean(last) <= protocol.lockin_grad_rel * g0)
    live = metrics.loc[metrics["grad_norm"] > 0, "chi2"].to_numpy(dtype=float)
    live = live[np.isfinite(live)]
    ess_col = metrics["ess_w"] if metrics["ess_w"].notna().any() else metrics["ess_rho"]
    early = ess_col.to_numpy(dtype=float)[: max(1, len(metrics) // 4)]
    diverged = int(skipped_steps) > 0
    failure = "diverged" if diverged else "collapsed" if collapsed else "locked_in" if locked else "none"
    return dict(chi2_learn_med=float(np.median(live)) if live.size else math.nan,
                ess_early=float(np.nanmean(early)) if np.isfinite(early).any() else math.nan,
                collapsed=collapsed, locked_in=locked, failure=failure)


def failed(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL) -> pd.Series:
    """Per run: the protocol's failure rule (v2: divergence | collapse | lock-in; v1: a skipped update or
    final accuracy below ``collapse_fraction`` × the warm start's)."""
    if protocol.version >= 2:
        return (df["skipped_steps"] > 0) | df["collapsed"].astype(bool) | df["locked_in"].astype(bool)
    return ~stable(df, protocol.collapse_fraction)


def stable(df: pd.DataFrame, collapse_fraction: float = PROTOCOL.collapse_fraction) -> pd.Series:
    """Version 1's rule per run: no skipped (non-finite) update and final accuracy ≥ ``collapse_fraction`` ×
    the warm start's."""
    return (df["skipped_steps"] == 0) & (df["final_acc"] >= collapse_fraction * df["initial_acc"])


@dataclass(frozen=True)
class C9Result:
    """C9 at LM scale under a protocol: the Holm family of paired comparisons, the rate checks, and
    the claim's verdict (:func:`simulate.verdicts.combine` of the parts). ``quick``: a path check on
    fewer seeds; its lines say "quick: not a verdict"."""

    verdict: str
    comparisons: tuple[vd.Comparison, ...]
    rates: tuple[vd.RateCheck, ...]
    metric: str
    d_max: int
    n_seeds: int
    protocol_hash: str
    quick: bool = False
    skipped: tuple[str, ...] = ()
    lr_factor: float = 1.0
    """The step-size arm (``η·lr_factor``); the claim's registered verdict is the main arm's (1.0)."""

    @property
    def lines(self) -> list[str]:
        """One line per part, then the claim's line (each states the interval its verdict comes from)."""
        pre = "quick: not a verdict — " if self.quick else ""
        out = []
        for c in self.comparisons:
            pw = vd.comparison_power(c.n, c.se * math.sqrt(c.n), c.margin, c.alpha_level) if c.n >= 2 else math.nan
            out.append(f"{pre}{c.name}: Δ{self.metric} = {c.estimate:+.3f}, {1 - 2 * c.alpha_level:.1%} t-interval "
                       f"[{c.lo:+.3f}, {c.hi:+.3f}] vs threshold {c.threshold:+.3f} ({c.kind}, n={c.n}, power "
                       f"{pw:.2f}) → {c.verdict}")
        for r in self.rates:
            sign = ">" if r.direction == "above" else "<"
            pw = vd.rate_power(r.n, r.p0, r.direction)
            out.append(f"{pre}{r.name}: {r.failures}/{r.n} failed (divergence, collapse or lock-in), "
                       f"{1 - 2 * vd.ALPHA:.0%} Clopper–Pearson [{r.lo:.3f}, {r.hi:.3f}] vs rate {sign} {r.p0:g} "
                       f"(power {pw:.2f}) → {r.verdict}")
        for why in self.skipped:
            out.append(f"{pre}not compared: {why}")
        armtxt = "" if self.lr_factor == 1.0 else f", step-size arm η×{self.lr_factor:g}"
        out.append(f"{pre}C9 at LM scale (d={self.d_max}, {self.n_seeds} seeds{armtxt}, metric {self.metric}, protocol "
                   f"{self.protocol_hash}): {self.verdict}")
        return out

    @property
    def line(self) -> str:
        """The claim's one-line verdict."""
        return self.lines[-1]


def _paired(df: pd.DataFrame, metric: str, side: tuple[str, int]) -> pd.Series:
    name, d = side
    return df[(df["estimator"] == name) & (df["d"] == d)].set_index("seed")[metric].sort_index()


def c9_result(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False, lr_factor: float = 1.0,
              full: bool = False) -> C9Result:
    """Decide C9 at LM scale from the results table by the protocol's pre-declared comparisons, on the runs
    of the step-size arm ``lr_factor`` (default the main arm, whose verdict is the registered one).

    Each comparison pairs the two sides by seed (seeds present on both sides only; at least 2);
    ``decide`` applies Holm over those that can be made. A comparison whose data are not in the table
    (a sub-grid from the CLI) is listed as not compared, never silently dropped.
    """
    registered = protocol.content_hash()
    protocol = protocol.variant(quick, full)
    df = arm(df, lr_factor)
    metric = protocol.metric
    built, skipped = [], []
    for name, kind, a_side, b_side in protocol.comparisons():
        a, b = _paired(df, metric, a_side), _paired(df, metric, b_side)
        common = a.index.intersection(b.index)
        if len(common) < 2:
            skipped.append(f"{name} (needs ≥ 2 seeds of {a_side[0]}@d={a_side[1]} and {b_side[0]}@d={b_side[1]})")
            continue
        built.append(vd.paired_comparison(a[common], b[common], kind=kind, margin=protocol.margin, name=name,
                                          alpha=protocol.alpha))
    family = vd.decide(built, alpha=protocol.alpha) if built else []
    at = df[df["d"] == protocol.d_max]
    rates = []
    premise = rate_premise(df, protocol)
    for name, direction in (("is", "above"), ("gmc", "below")):
        runs = at[at["estimator"] == name]
        if len(runs):
            bad = int(failed(runs, protocol).sum())
            what = "unstable" if direction == "above" else "stable"
            r = vd.rate_check(bad, len(runs), p0=protocol.p0, direction=direction, alpha=protocol.alpha,
                              name=f"{name} {what} at d={protocol.d_max}")
            if premise:
                r = dataclasses.replace(r, verdict=vd.OUT_OF_SCOPE)
                skipped.append(f"{r.name}: {premise}")
            rates.append(r)
    parts = [c.verdict for c in family] + [r.verdict for r in rates]
    verdict = vd.combine(parts) if parts else vd.OUT_OF_SCOPE
    n_seeds = int(df["seed"].nunique()) if len(df) else 0
    return C9Result(verdict, tuple(family), tuple(rates), metric, protocol.d_max, n_seeds, registered,
                    quick, tuple(skipped), float(lr_factor))


def rate_premise(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL) -> str:
    """v3 (the tabular protocol's ``rate_premise_d0``): the failure-rate sub-claims need a stable learner at
    ``d = 0``; if the shared ``d = 0`` runs (every map coincides there) fail in more than ``p0`` of the seeds,
    a failure at ``d_max`` cannot be put down to the delay. Returns the reason they are out of scope, or
    ``""`` when the premise holds (or the protocol predates the rule, or there are no ``d = 0`` runs)."""
    if protocol.version < 3 or not protocol.rate_premise_d0:
        return ""
    runs = df[(df["d"] == 0) & (df["estimator"] == protocol.baseline)]
    if not len(runs):
        return ""
    nf = int(failed(runs, protocol).sum())
    if nf / len(runs) > protocol.p0:
        return (f"out of scope: the d = 0 learner ({protocol.baseline}) already fails {nf}/{len(runs)} "
                f"(> p0 = {protocol.p0:g}), so failures at d > 0 are not the delay's")
    return ""


def arm_results(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False,
                full: bool = False) -> list[C9Result]:
    """:func:`c9_result` for every step-size arm present in ``df`` (main arm first)."""
    factors = sorted(_with_arm(df)["lr_factor"].unique(), key=lambda f: (f != 1.0, f))
    return [c9_result(df, protocol, quick, float(f), full) for f in factors]


def turning_points(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False,
                   lr_factor: float = 1.0) -> list[dict]:
    """Where each sub-claim turns along the delay sweep (protocol docstring, v3): for every pre-declared
    comparison and rate check, re-made at each ``d > 0`` of the arm ``lr_factor`` with the same kind, margin
    and ``α`` but **no multiplicity correction** (a map, not a verdict): the one-sided level-``α`` paired
    t-test (interval at two-sided level ``1 − 2α``) or Clopper–Pearson bound. Returns one dict per
    sub-claim: ``claim``, ``lr_factor``, ``first_holds`` / ``first_refuted`` (the smallest ``d`` at which it
    holds / is refuted, ``None`` if never) and ``per_d`` (``d``, estimate, ``lo``, ``hi``, ``n``, verdict).
    """
    protocol = protocol.variant(quick)
    df = arm(df, lr_factor)
    metric = protocol.metric
    out = []
    specs = [(f"gmc not worse than {x}", "noninferiority", lambda d, x=x: (("gmc", d), (x, d)))
             for x in protocol.estimators if x != "gmc"]
    specs += [(f"{x} degrades from d=0", "superiority", lambda d, x=x: ((protocol.baseline, 0), (x, d)))
              for x in protocol.degrading]
    delays = [d for d in sorted(protocol.delays) if d > 0]
    for name, kind, sides in specs:
        per = []
        for d in delays:
            a_side, b_side = sides(d)
            a, b = _paired(df, metric, a_side), _paired(df, metric, b_side)
            common = a.index.intersection(b.index)
            if len(common) < 2:
                continue
            c = vd.paired_comparison(a[common], b[common], kind=kind, margin=protocol.margin, name=name,
                                     alpha=protocol.alpha)
            per.append(dict(d=int(d), estimate=c.estimate, lo=c.lo, hi=c.hi, n=c.n, verdict=c.verdict))
        out.append(_turn(name, "Δ" + metric, lr_factor, per))
    premise = rate_premise(df, protocol)
    for x, direction in (("is", "above"), ("gmc", "below")):
        per = []
        for d in delays:
            runs = df[(df["estimator"] == x) & (df["d"] == d)]
            if not len(runs):
                continue
            r = vd.rate_check(int(failed(runs, protocol).sum()), len(runs), p0=protocol.p0, direction=direction,
                              alpha=protocol.alpha)
            per.append(dict(d=int(d), estimate=r.rate, lo=r.lo, hi=r.hi, n=r.n,
                            verdict=vd.OUT_OF_SCOPE if premise else r.verdict, failures=r.failures))
        out.append(_turn(f"{x} {'unstable' if direction == 'above' else 'stable'}", "failure rate", lr_factor, per))
    return out


def _turn(claim: str, quantity: str, lr_factor: float, per: list[dict]) -> dict:
    first = {w: next((p["d"] for p in per if p["verdict"] == w), None) for w in (vd.HOLDS, vd.REFUTED)}
    return dict(claim=claim, quantity=quantity, lr_factor=float(lr_factor), first_holds=first[vd.HOLDS],
                first_refuted=first[vd.REFUTED], per_d=per)


def turning_table(turns: list[dict]) -> str:
    """:func:`turning_points` as text: one line per sub-claim and arm."""
    lines = ["smallest d at which each sub-claim holds / is refuted (per-d test at the protocol's α, no "
             "multiplicity correction: a map, not a verdict):"]
    for t in turns:
        at = "; ".join(f"d={p['d']}: {p['estimate']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}] {p['verdict']}"
                       for p in t["per_d"])
        lines.append(f"  η×{t['lr_factor']:g} {t['claim']}: holds from d={t['first_holds']}, refuted from "
                     f"d={t['first_refuted']} — {at}")
    return "\n".join(lines)


def c9_verdict(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False) -> str:
    """:func:`c9_result`'s lines, one per comparison and one for the claim."""
    return "\n".join(c9_result(df, protocol, quick).lines)


def _wide(s: pd.DataFrame, col: str) -> str:
    wide = s.pivot(index="estimator", columns="d", values=col).fillna("—")
    wide.columns = [f"d={c}" for c in wide.columns]
    return wide.to_string()


def table(df: pd.DataFrame, metric: str = PROTOCOL.metric) -> str:
    """Accuracy-against-delay tables, one block per step-size arm: rows estimators, columns delays, cells
    ``mean [lo, hi]`` (95 % Student-t over seeds) of ``metric``, of the final held-out accuracy, and of the
    gain over the warm start."""
    df = _with_arm(df)
    factors = sorted(df["lr_factor"].unique(), key=lambda f: (f != 1.0, f))
    if len(factors) == 1:
        return _table_one(df, metric)
    return "\n".join(f"== step-size arm η×{f:g} ==\n" + _table_one(arm(df, f), metric) for f in factors)


def _table_one(df: pd.DataFrame, metric: str) -> str:
    init = df.groupby("seed")["initial_acc"].first()
    parts = [f"warm-start held-out accuracy per seed: {', '.join(f'{v:.3f}' for v in init.values)}"]
    for m in [metric] + [x for x in ("final_acc",) if x != metric]:
        s = summarise(df, m)
        s["cell"] = [f"{a:.3f} [{lo:.3f}, {hi:.3f}]" if n > 1 else f"{a:.3f} (n=1)"
                     for a, lo, hi, n in zip(s["mean"], s["lo"], s["hi"], s["n"])]
        parts += [f"{m}, mean [95% t-interval] over {int(s['n'].max())} seeds:", _wide(s, "cell")]
    s = summarise(df, "final_acc")
    s["cell"] = [f"{a:+.3f} [{lo:+.3f}, {hi:+.3f}]" if n > 1 else f"{a:+.3f} (n=1)"
                 for a, lo, hi, n in zip(s["gain_mean"], s["gain_lo"], s["gain_hi"], s["n"])]
    parts += ["final accuracy gain over the warm start (paired), mean [95% t-interval]:", _wide(s, "cell")]
    at0 = sorted(df.loc[df["d"] == 0, "estimator"].unique())
    if len(at0) == 1:
        parts.append(f"d=0 is one shared run per seed ({at0[0]}): at d=0 every map coincides (protocol docstring)")
    return "\n".join(parts)
