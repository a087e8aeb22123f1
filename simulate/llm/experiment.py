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
pure functions of the results table (defined in :mod:`simulate.llm.analysis`, re-exported here).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig, config_diff, warmstart_dict
from simulate.llm.analysis import (  # noqa: F401 — re-exported: the decision lives in analysis.py
    C9Result,
    _with_arm,
    arm,
    arm_results,
    c9_result,
    c9_verdict,
    failed,
    failure_modes,
    rate_premise,
    stable,
    summarise,
    table,
    turning_points,
    turning_table,
)
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
                       threads=protocol.threads, warmup_steps=protocol.warmup_steps, adv_norm=protocol.adv_norm,
                       device=protocol.device, dtype=protocol.dtype, max_new_tokens=protocol.max_new_tokens,
                       task=TaskConfig(task=protocol.task, digits=protocol.digits,
                                       n_eval=protocol.quick_n_eval if q else protocol.n_eval),
                       warmstart=WarmStartConfig(steps=protocol.quick_warmstart_steps if q else protocol.warmstart_steps,
                                                 batch_size=protocol.warmstart_batch_size, eta=protocol.warmstart_eta,
                                                 frozen="" if q else protocol.warmstart_frozen,
                                                 frozen_sha256="" if q else protocol.warmstart_frozen_sha256),
                       cache_dir=cache_dir, kernels=protocol.kernel_pin)


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
        if f.name == "kernels" and not v:
            continue  # no recorded kernel path (before v5): the cells keep the keys they had
        if f.name == "warmstart":
            out.update({f"warmstart.{k}": x for k, x in warmstart_dict(v).items()})
        elif dataclasses.is_dataclass(v):
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
    :class:`TrainConfig` whose ``out_dir`` is the runs folder), trained as one forest on the harness's engine
    (:func:`simulate.llm.tree.train_forest`, batched: every run of the cell in one stacked step); one row per run.
    ``seconds`` is the cell's wall time over its runs (a forest shares work, so a run has no wall time of its own)."""
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


def warm_start_sweep(sweep: Sweep):
    """The warm starts the grid needs as an :class:`sweep.Sweep` of their own, one cell per distinct warm start
    (id ``w<key>``, :func:`simulate.llm.config.warmstart_key`; cell function :func:`warm_start_cell`). :func:`run`
    runs it before the forests: cells of several seeds would otherwise race to train the same warm start (the
    cache write is atomic, so a race would only waste time, never corrupt it)."""
    from sweep import Cell
    from sweep import Sweep as EngineSweep

    from simulate.llm.config import warmstart_key

    cells: dict[str, Cell] = {}
    for _, cfg in grid(sweep):
        key = warmstart_key(cfg)
        if key not in cells:
            cells[key] = Cell(f"w{key[:16]}", config_settings(cfg.replace(out_dir="")))
    return EngineSweep(f"{sweep.sweep_id}-warmstarts", "simulate.llm.experiment:warm_start_cell", tuple(cells.values()))


def warm_start_cell(**settings) -> pd.DataFrame:
    """One warm start (trained and cached, or a frozen file checked by its SHA-256:
    :func:`simulate.llm.warmstart.warm_start`) and its greedy held-out accuracy, as a one-row table."""
    from simulate.llm.warmstart import warm_start

    info = warm_start(config_from_settings(settings), progress=False)[2]
    return pd.DataFrame([{"key": info.get("key", ""), "heldout_accuracy": float(info["heldout_accuracy"]),
                          "seconds": float(info.get("seconds", 0.0))}])


#: File in ``out_dir`` that records what shapes the runs stored there (:func:`manifest`).
MANIFEST = "experiment.json"


def manifest(sweep: Sweep) -> dict:
    """Everything that shapes the runs of ``sweep`` except which seeds run: the base config (without its
    output and cache folders and seed) and every arm's step-size factor with its ``(estimator, d)`` pairs.
    Two sweeps with the same manifest write the same numbers into a run folder of the same name."""
    base = {k: v for k, v in sweep.base.to_dict().items() if k not in ("out_dir", "cache_dir", "seed")}
    base = json.loads(json.dumps(base, default=repr))  # inf → "inf": comparable after a JSON round trip
    return {"base": base, "arms": [{"lr_factor": float(f), "pairs": [f"{x}:{d}" for x, d in sweep.pairs_for(f)]}
                                   for f, _ in sweep.arm_list]}


def check_manifest(sweep: Sweep, overwrite: bool = False) -> None:
    """Refuse to run ``sweep`` into an ``out_dir`` whose runs were made with other base settings (their run
    folders and ``results.csv`` would be replaced) unless ``overwrite``; a folder with a ``results.csv`` but
    no manifest counts as other settings. Lists the differing keys. Other seeds, delays, estimators or
    step-size arms of the same base settings are fine: a run folder's name (estimator, ``d``, seed, factor)
    and the base settings fix its numbers (the forest is exact), so no folder changes meaning."""
    path = os.path.join(sweep.out_dir, MANIFEST)
    now = manifest(sweep)
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        diff = config_diff(saved.get("base", {}), now["base"])
    elif os.path.exists(os.path.join(sweep.out_dir, "results.csv")):
        diff = [("settings", "unknown (results.csv without experiment.json)", "this sweep's")]
    else:
        diff = []
    if diff and not overwrite:
        what = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in diff[:6]) + ("; …" if len(diff) > 6 else "")
        raise ValueError(f"--experiment-dir {sweep.out_dir!r} holds runs made with other settings ({what}); their run "
                         f"folders and results.csv would be replaced. Pass --overwrite to replace them, or choose "
                         f"another --experiment-dir")


def run(sweep: Sweep, progress: bool = True, *, root: str | None = None, backend: str | None = None,
        overwrite: bool = False, **engine_opts) -> pd.DataFrame:
    """Execute the grid through :func:`sweep.run_sweep`; returns one row per run. Top to bottom:

    1. refuse an ``out_dir`` that holds runs of other settings, unless ``overwrite`` (:func:`check_manifest`);
    2. a sweep whose runs record a kernel path (``base.kernels``, v5) that this process does not run is run in a
       child process started with it (:func:`simulate.llm.portability.run_on_its_path`), its table read back;
    3. the warm starts, one engine cell each (:func:`warm_start_sweep`), before any forest;
    4. the forests, one engine cell per seed and step-size arm (:func:`to_sweep`, :func:`run_forest_cell`: the
       seed's runs in one batched forest);
    5. the table (the run's row, the cell id and every config setting) to ``out_dir/results.csv``, beside the
       manifest of the settings (:func:`manifest`).

    Cells are stored under ``root`` (default ``out_dir/cells``) by the engine, so an interrupted or repeated sweep
    recomputes only missing cells (and everything after a code change). ``backend`` and ``engine_opts``
    (``n_workers``, ``client``, ``scheduler``, ``dask_local``) go to the engine; ``backend=None``:
    :data:`DEFAULT_BACKEND` on CPU, ``"serial"`` on CUDA (one device: parallel processes would only hold extra
    CUDA contexts).
    """
    from sweep import run_sweep

    from simulate.llm.portability import run_on_its_path

    check_manifest(sweep, overwrite)  # here too when a child runs it: the refusal is one clear error in this process
    elsewhere = run_on_its_path(sweep, sweep_to_dict, progress=progress, root=root, backend=backend,
                                overwrite=overwrite, **engine_opts)
    if elsewhere is not None:
        return elsewhere
    root = os.path.join(sweep.out_dir, "cells") if root is None else root
    if backend is None:
        backend = DEFAULT_BACKEND if sweep.base.device == "cpu" else "serial"
    run_sweep(warm_start_sweep(sweep), root=root, backend=backend, progress=progress, **engine_opts)
    df = run_sweep(to_sweep(sweep), root=root, backend=backend, progress=progress, **engine_opts).table
    os.makedirs(sweep.out_dir, exist_ok=True)
    with open(os.path.join(sweep.out_dir, MANIFEST), "w") as f:
        json.dump(manifest(sweep), f, indent=1)
    df.to_csv(os.path.join(sweep.out_dir, "results.csv"), index=False)
    return df


def sweep_to_dict(sweep) -> dict:
    """A :class:`simulate.llm.experiment.Sweep` as JSON-ready data (the base config flattened by
    :func:`config_settings`)."""
    return dict(estimators=list(sweep.estimators), delays=list(sweep.delays), seeds=list(sweep.seeds),
                out_dir=sweep.out_dir, base=config_settings(sweep.base),
                pairs=None if sweep.pairs is None else [list(x) for x in sweep.pairs],
                arms=None if sweep.arms is None else [[f, list(s)] for f, s in sweep.arms],
                arm_pairs=None if sweep.arm_pairs is None else [[f, [list(x) for x in ps]] for f, ps in sweep.arm_pairs])


def sweep_from_dict(d: dict):
    """Inverse of :func:`sweep_to_dict`."""
    pairs = lambda ps: tuple((str(x), int(dd)) for x, dd in ps)  # noqa: E731
    return Sweep(estimators=tuple(d["estimators"]), delays=tuple(d["delays"]), seeds=tuple(d["seeds"]),
                    base=config_from_settings(d["base"]), out_dir=d["out_dir"],
                    pairs=None if d["pairs"] is None else pairs(d["pairs"]),
                    arms=None if d["arms"] is None else tuple((float(f), tuple(s)) for f, s in d["arms"]),
                    arm_pairs=None if d["arm_pairs"] is None else tuple((float(f), pairs(ps)) for f, ps in d["arm_pairs"]))
