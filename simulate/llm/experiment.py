"""Held-out accuracy against delay, every estimator, over seeds: the C9 check at LM scale.

A sweep is data (STYLE §5): :func:`grid` lists the runs as ``(run_id, TrainConfig)`` and
:func:`to_sweep` turns them into an :class:`asyncgrpo.sweep.Sweep` whose cells are single runs
(cell function :func:`run_cell`, one tidy row per ``(estimator, delay, seed)``). :func:`run`
executes it through the project's one sweep engine (:func:`asyncgrpo.sweep.run_sweep`), which owns
caching by hash of settings + code version, atomic writes, resume and the serial / local-process /
Dask backends. The warm start is computed once in the driver before any cell runs (one per init
seed; ``warmstart_seed`` shares one across seeds) and the cells load it from its cache. Each run
still writes its per-step ``metrics.jsonl``/``metrics.csv`` under ``out_dir/runs/<run_id>`` (useful
for diagnostics), but the results table is the engine's. :func:`summarise`, :func:`c9_verdict` and
:func:`table` are pure functions of that table.

C9 at LM scale (THEORY §3) is read as: at the largest delay, ``gmc`` has the highest mean final
held-out accuracy among the *stable* estimators (no skipped step, final accuracy not collapsed
below half the warm start in any seed), and the verdict says whether the paired gap to the best
rival exceeds ``z·SE`` over seeds (HOLDS), is positive but within it (CONSISTENT, NOT SIGNIFICANT),
or another estimator is best by mean (NOT SUPPORTED — "significantly" when its paired lead over
``gmc`` exceeds ``z·SE``, else "WITHIN NOISE").
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig

MAIN_ESTIMATORS: tuple[str, ...] = ("onpolicy", "is", "tic", "gmc", "grpo", "cispo")
#: Columns of the one row a cell returns (the engine adds ``cell`` and the flattened config).
ROW_COLUMNS: tuple[str, ...] = (
    "run_id", "estimator", "delay", "seed", "initial_acc", "final_acc", "gain", "skipped_steps",
    "mean_realised_delay", "chi2_mean", "ell_max", "clip_frac_mean", "grad_norm_max", "reward_last10", "seconds",
)
#: Default backend of :func:`run`. Measured on 2 cores (18 tiny-model runs of 40 steps, 16×8 rollouts,
#: warm start cached, one torch thread per run): ``serial`` 64 s, ``local`` (2 spawned processes) 55 s,
#: same numbers to the last digit. Per-run time rises from 3.3 s to 5.1 s under two processes
#: (the cores are shared), so the gain is ~15 %, not 2×; a larger machine gains more.
DEFAULT_BACKEND = "local"


@dataclass(frozen=True)
class Sweep:
    """Settings of an accuracy-against-delay sweep (the table of runs is :func:`grid`).

    ``base.length_normalize=True`` by default: trajectory-level maps then carry the same ``1/T_i``
    as the token-level baselines, so AdamW + grad-norm clip see gradients of one scale (THEORY's
    un-normalised ``ĝ`` is ``base.replace(length_normalize=False)``).
    """

    estimators: tuple[str, ...] = MAIN_ESTIMATORS
    delays: tuple[int, ...] = (0, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2)
    base: TrainConfig = TrainConfig(steps=30, lr=3e-4, eval_every=1000, max_delay=8, length_normalize=True)
    out_dir: str = "results/llm/experiment"

    @property
    def sweep_id(self) -> str:
        """Directory name of the stored cells (the engine's sweep id): the last part of ``out_dir``."""
        name = os.path.basename(os.path.abspath(self.out_dir))
        return name if name and not name.startswith(".") else "llm_experiment"


def grid(sweep: Sweep) -> list[tuple[str, TrainConfig]]:
    """``(run_id, config)`` for every estimator × delay × seed (fixed delays; ``D = max(delays)``)."""
    D = max(max(sweep.delays), 0)
    runs = []
    for seed in sweep.seeds:
        for d in sweep.delays:
            for name in sweep.estimators:
                rid = f"{name}-d{d}-s{seed}"
                runs.append((rid, sweep.base.replace(estimator=name, delay=d, max_delay=max(D, sweep.base.max_delay),
                                                     delay_mode="fixed", seed=seed,
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
    """The experiment as an :class:`asyncgrpo.sweep.Sweep`: one cell per run, id ``<estimator>-d<d>-s<seed>``."""
    from asyncgrpo.sweep import Cell
    from asyncgrpo.sweep import Sweep as EngineSweep

    return EngineSweep(sweep.sweep_id, "simulate.llm.experiment:run_cell",
                       tuple(Cell(rid, config_settings(cfg)) for rid, cfg in grid(sweep)))


def run_cell(**settings) -> pd.DataFrame:
    """One cell: train the run of ``settings`` (a flattened :class:`TrainConfig`) and return its tidy row.

    Row: final and initial greedy held-out accuracy, ``gain = final − initial``, skipped updates,
    mean realised delay, and per-run diagnostics from the step metrics (mean ``χ̂²``, max ``ℓ_i``,
    mean clip fraction, max pre-clip grad norm, mean reward of the last 10 steps), plus wall seconds.
    """
    from simulate.llm.train import train

    cfg = config_from_settings(settings)
    t0 = time.perf_counter()
    s = train(cfg, progress=False)
    m = pd.read_csv(os.path.join(cfg.out_dir, "metrics.csv"))
    row = {
        "run_id": os.path.basename(cfg.out_dir), "estimator": cfg.estimator, "delay": cfg.delay, "seed": cfg.seed,
        "initial_acc": s["initial_acc"], "final_acc": s["final_acc"],
        "gain": s["final_acc"] - s["initial_acc"], "skipped_steps": s["skipped_steps"],
        "mean_realised_delay": s["mean_realised_delay"], "chi2_mean": float(m["chi2"].mean()),
        "ell_max": float(m["ell_max"].max()), "clip_frac_mean": float(m["clip_frac"].mean()),
        "grad_norm_max": float(m["grad_norm"].max()), "reward_last10": s["mean_reward_last10"],
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
    """Execute the grid through :func:`asyncgrpo.sweep.run_sweep`; returns one row per run.

    Cells are stored under ``root`` (default ``out_dir/cells``) by the engine, so an interrupted or
    repeated sweep recomputes only missing cells (and everything after a code change). ``backend``
    and ``engine_opts`` (``n_workers``, ``client``, ``scheduler``, ``dask_local``) go to the engine.
    The table (the run's row, the cell id and every config setting) is also written to
    ``out_dir/results.csv``. ``backend=None``: :data:`DEFAULT_BACKEND` on CPU, ``"serial"`` on CUDA
    (one device: parallel processes would only hold extra CUDA contexts).
    """
    from asyncgrpo.sweep import load_cells, run_sweep

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


def _t(n: int, level: float = 0.95) -> float:
    """Two-sided Student-t quantile ``t_{n−1,(1+level)/2}`` (seed counts are small: 1.96 would overstate)."""
    from scipy import stats as _st

    return float(_st.t.ppf(0.5 + level / 2, n - 1)) if n > 1 else float("nan")


def summarise(df: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per (estimator, delay): mean final accuracy and mean gain over the warm start, each with a
    Student-t CI ``± t_{n−1}·σ̂/√n`` over seeds (the gain is paired: it removes the warm start's seed effect)."""
    keys = ["estimator", "delay"]
    out = df.groupby(keys)["final_acc"].agg(["mean", "std", "count"]).reset_index()
    t = np.array([_t(int(n), level) for n in out["count"]])
    out["half_ci"] = t * out["std"].fillna(0.0) / np.sqrt(out["count"])
    gain = df.groupby(keys)["gain"].agg(["mean", "std"]).reset_index()
    out["gain_mean"] = gain["mean"].values
    out["gain_half_ci"] = t * gain["std"].fillna(0.0).values / np.sqrt(out["count"].values)
    return out


def stable(df: pd.DataFrame) -> pd.Series:
    """Per run: no skipped (non-finite) update and final accuracy ≥ half the warm start's."""
    return (df["skipped_steps"] == 0) & (df["final_acc"] >= 0.5 * df["initial_acc"])


@dataclass(frozen=True)
class C9Result:
    """C9 at LM scale, at the largest delay: gmc against the best stable rival, paired over seeds.

    ``verdict`` is ``holds`` (gmc best by mean and ahead beyond the t-interval), ``violated`` (gmc
    unstable, or the best rival significantly ahead of gmc), ``inconclusive`` (within noise) or
    ``not evaluated``; ``gap`` = mean over seeds of gmc − rival, ``se`` its standard error.
    """

    verdict: str
    line: str
    d: int
    rival: str | None = None
    gap: float = math.nan
    se: float = math.nan
    n: int = 0


def c9_result(df: pd.DataFrame, level: float = 0.95) -> C9Result:
    """Does ``gmc`` have the best final accuracy among stable estimators at the largest delay?

    Stable = every seed passes :func:`stable`. Differences are paired over seeds (same seeds, same
    warm start) with a Student-t interval at ``level``.
    """
    d_max = int(df["delay"].max())
    at = df[df["delay"] == d_max].copy()
    at["stable"] = stable(at)
    per = at.groupby("estimator").agg(mean=("final_acc", "mean"), n=("final_acc", "count"), stable=("stable", "all"))
    if "gmc" not in per.index:
        return C9Result("not evaluated", "C9: not evaluated (gmc not in the sweep)", d_max)
    ok = per[per["stable"]]
    unstable = ", ".join(per.index[~per["stable"]]) or "none"
    if "gmc" not in ok.index:
        return C9Result("violated", f"C9 at d={d_max}: VIOLATED — gmc itself collapsed in some seed", d_max)
    rivals = ok.drop(index="gmc")
    if rivals.empty:
        return C9Result("not evaluated", f"C9 at d={d_max}: not evaluated (no other stable estimator; "
                                         f"collapsed: {unstable})", d_max)
    rival = rivals["mean"].idxmax()
    g_s = at[at.estimator == "gmc"].set_index("seed")["final_acc"]
    r_s = at[at.estimator == rival].set_index("seed")["final_acc"]
    diff = (g_s - r_s).dropna()
    n = len(diff)
    gap = float(diff.mean())
    se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    half = _t(n, level) * se
    detail = (f"gmc {ok.loc['gmc', 'mean']:.3f} vs best stable rival {rival} {rivals.loc[rival, 'mean']:.3f}, "
              f"paired gap {gap:+.3f} ± {half:.3f} ({level:.0%} t-interval, {n} seeds); collapsed in some seed: {unstable}")
    if not n > 1:
        return C9Result("inconclusive", f"C9 at d={d_max}: INCONCLUSIVE (one seed; {detail})", d_max, rival, gap, se, n)
    if gap > half:
        return C9Result("holds", f"C9 at d={d_max}: HOLDS ({detail})", d_max, rival, gap, se, n)
    if gap < -half:
        return C9Result("violated", f"C9 at d={d_max}: VIOLATED — {rival} significantly ahead ({detail})",
                        d_max, rival, gap, se, n)
    return C9Result("inconclusive", f"C9 at d={d_max}: INCONCLUSIVE, within noise ({detail})", d_max, rival, gap, se, n)


def c9_verdict(df: pd.DataFrame, level: float = 0.95) -> str:
    """One line: :func:`c9_result`'s verdict with its numbers."""
    return c9_result(df, level).line


def table(df: pd.DataFrame) -> str:
    """Accuracy-against-delay table: rows estimators, columns delays, cells ``mean ± t_{n−1}·σ̂/√n`` of the
    final held-out accuracy, then the same for the gain over the warm start."""
    s = summarise(df)
    # one seed has no spread estimate: print "± n/a" rather than a CI of zero width
    s["cell"] = [f"{m:.3f} ± {h:.3f}" if n > 1 else f"{m:.3f} ± n/a"
                 for m, h, n in zip(s["mean"], s["half_ci"], s["count"])]
    s["gcell"] = [f"{m:+.3f} ± {h:.3f}" if n > 1 else f"{m:+.3f} ± n/a"
                  for m, h, n in zip(s["gain_mean"], s["gain_half_ci"], s["count"])]
    init = df.groupby("seed")["initial_acc"].first()
    n = int(s["count"].max())
    parts = [f"warm-start held-out accuracy per seed: {', '.join(f'{v:.3f}' for v in init.values)}"]
    for col, title in (("cell", "final held-out accuracy"), ("gcell", "gain over the warm start (paired)")):
        wide = s.pivot(index="estimator", columns="delay", values=col)
        wide.columns = [f"d={c}" for c in wide.columns]
        parts += [f"{title}, mean ± 95% t-interval over {n} seeds:", wide.to_string()]
    return "\n".join(parts)
