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
    "run_id", "estimator", "d", "seed", "initial_acc", "final_acc", "auc", "gain", "skipped_steps",
    "mean_realised_delay", "chi2_mean", "chi2_learn_med", "ess_early", "ell_max", "clip_frac_mean", "grad_norm_max",
    "reward_last10", "collapsed", "locked_in", "failure", "seconds",
)
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

    @property
    def sweep_id(self) -> str:
        """Directory name of the stored cells (the engine's sweep id): the last part of ``out_dir``."""
        name = os.path.basename(os.path.abspath(self.out_dir))
        return name if name and not name.startswith(".") else "llm_experiment"


def protocol_sweep(protocol: LMProtocol = PROTOCOL, quick: bool = False, out_dir: str = "results/llm/experiment",
                   cache_dir: str = "results/llm/cache") -> Sweep:
    """The sweep that ``protocol`` pre-declares (``quick``: its seeds, delays and run lengths for a path check)."""
    protocol = protocol.variant(quick)
    return Sweep(estimators=protocol.estimators, delays=protocol.delays,
                 seeds=protocol.quick_seeds if quick else protocol.seeds,
                 base=protocol_base(protocol, quick, cache_dir), out_dir=out_dir, pairs=protocol.runs())


def grid(sweep: Sweep) -> list[tuple[str, TrainConfig]]:
    """``(run_id, config)`` for every (estimator, delay) pair × seed (fixed delays; ``D = max(delays)``)."""
    D = max(max(sweep.delays), 0)
    pairs = sweep.pairs if sweep.pairs is not None else [(x, d) for d in sweep.delays for x in sweep.estimators]
    runs = []
    for seed in sweep.seeds:
        for name, d in pairs:
            rid = f"{name}-d{d}-s{seed}"
            runs.append((rid, sweep.base.replace(estimator=name, d=d, D=max(D, sweep.base.D), delay="fixed",
                                                 seed=seed, out_dir=os.path.join(sweep.out_dir, "runs", rid))))
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
    """The experiment as an :class:`sweep.Sweep`: one cell per run, id ``<estimator>-d<d>-s<seed>``."""
    from sweep import Cell
    from sweep import Sweep as EngineSweep

    return EngineSweep(sweep.sweep_id, "simulate.llm.experiment:run_cell",
                       tuple(Cell(rid, config_settings(cfg)) for rid, cfg in grid(sweep)))


def accuracy_auc(initial_acc: float, metrics: pd.DataFrame, steps: int) -> float:
    """``(1/K) ∫_0^K acc(k) dk`` by the trapezoid rule over ``k = 0`` (the warm start) and every evaluated
    step (``heldout_acc`` of step ``j`` is measured after ``j + 1`` updates), ``K = steps``."""
    ev = metrics.loc[metrics["heldout_acc"].notna(), ["step", "heldout_acc"]]
    x = np.concatenate([[0.0], ev["step"].to_numpy(dtype=float) + 1.0])
    y = np.concatenate([[float(initial_acc)], ev["heldout_acc"].to_numpy(dtype=float)])
    if x[-1] != steps:
        raise ValueError(f"the last evaluated step must be K={steps} (got {x[-1]:g}): the run did not finish")
    return float(np.trapezoid(y, x) / steps)


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
    m = pd.read_csv(os.path.join(cfg.out_dir, "metrics.csv"))
    row = {
        "run_id": os.path.basename(cfg.out_dir), "estimator": cfg.estimator, "d": cfg.d, "seed": cfg.seed,
        "initial_acc": s["initial_acc"], "final_acc": s["final_acc"],
        "auc": accuracy_auc(s["initial_acc"], m, cfg.steps),
        "gain": s["final_acc"] - s["initial_acc"], "skipped_steps": s["skipped_steps"],
        "mean_realised_delay": s["mean_realised_delay"], "chi2_mean": float(m["chi2"].mean()),
        "ell_max": float(m["ell_max"].max()), "clip_frac_mean": float(m["clip_frac"].mean()),
        "grad_norm_max": float(m["grad_norm"].max()), "reward_last10": s["mean_reward_last10"],
        **failure_modes(s["initial_acc"], m, cfg.eval_every, s["skipped_steps"]),
        "seconds": time.perf_counter() - t0,
    }
    return pd.DataFrame([row], columns=list(ROW_COLUMNS))


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


def summarise(df: pd.DataFrame, metric: str = PROTOCOL.metric, level: float = 0.95) -> pd.DataFrame:
    """Per (estimator, d): mean of ``metric`` over seeds with its Student-t interval
    (:func:`simulate.verdicts.t_interval`), and the same for the gain over the warm start."""
    rows = []
    for (name, d), g in df.groupby(["estimator", "d"], sort=True):
        m, lo, hi = vd.t_interval(g[metric].to_numpy(float), level)
        gm, glo, ghi = vd.t_interval(g["gain"].to_numpy(float), level)
        rows.append({"estimator": name, "d": int(d), "n": len(g), "mean": m, "lo": lo, "hi": hi,
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
        out.append(f"{pre}C9 at LM scale (d={self.d_max}, {self.n_seeds} seeds, metric {self.metric}, protocol "
                   f"{self.protocol_hash}): {self.verdict}")
        return out

    @property
    def line(self) -> str:
        """The claim's one-line verdict."""
        return self.lines[-1]


def _paired(df: pd.DataFrame, metric: str, side: tuple[str, int]) -> pd.Series:
    name, d = side
    return df[(df["estimator"] == name) & (df["d"] == d)].set_index("seed")[metric].sort_index()


def c9_result(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False) -> C9Result:
    """Decide C9 at LM scale from the results table by the protocol's pre-declared comparisons.

    Each comparison pairs the two sides by seed (seeds present on both sides only; at least 2);
    ``decide`` applies Holm over those that can be made. A comparison whose data are not in the table
    (a sub-grid from the CLI) is listed as not compared, never silently dropped.
    """
    registered = protocol.content_hash()
    protocol = protocol.variant(quick)
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
    for name, direction in (("is", "above"), ("gmc", "below")):
        runs = at[at["estimator"] == name]
        if len(runs):
            bad = int(failed(runs, protocol).sum())
            what = "unstable" if direction == "above" else "stable"
            rates.append(vd.rate_check(bad, len(runs), p0=protocol.p0, direction=direction, alpha=protocol.alpha,
                                       name=f"{name} {what} at d={protocol.d_max}"))
    parts = [c.verdict for c in family] + [r.verdict for r in rates]
    verdict = vd.combine(parts) if parts else vd.OUT_OF_SCOPE
    n_seeds = int(df["seed"].nunique()) if len(df) else 0
    return C9Result(verdict, tuple(family), tuple(rates), metric, protocol.d_max, n_seeds, registered,
                    quick, tuple(skipped))


def c9_verdict(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False) -> str:
    """:func:`c9_result`'s lines, one per comparison and one for the claim."""
    return "\n".join(c9_result(df, protocol, quick).lines)


def _wide(s: pd.DataFrame, col: str) -> str:
    wide = s.pivot(index="estimator", columns="d", values=col).fillna("—")
    wide.columns = [f"d={c}" for c in wide.columns]
    return wide.to_string()


def table(df: pd.DataFrame, metric: str = PROTOCOL.metric) -> str:
    """Accuracy-against-delay tables: rows estimators, columns delays, cells ``mean [lo, hi]`` (95 % Student-t
    over seeds) of ``metric``, of the final held-out accuracy, and of the gain over the warm start."""
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
