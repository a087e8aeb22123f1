"""Held-out accuracy against delay, every estimator, over seeds: the C9 check at LM scale.

A sweep is data (STYLE §5): :func:`grid` lists the runs as ``(run_id, TrainConfig)``; :func:`run`
executes them (one cached warm start per init seed; ``warmstart_seed`` shares one across seeds)
and returns a tidy DataFrame, one row per run; :func:`summarise`, :func:`c9_verdict` and
:func:`table` are pure functions of that table.

C9 at LM scale (THEORY §3) is read as: at the largest delay, ``gmc`` has the highest mean final
held-out accuracy among the *stable* estimators (no skipped step, final accuracy not collapsed
below half the warm start in any seed), and the verdict says whether the paired gap to the best
rival exceeds ``z·SE`` over seeds (HOLDS), is positive but within it (CONSISTENT, NOT SIGNIFICANT),
or another estimator is best (NOT SUPPORTED).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulate.llm.config import TrainConfig

MAIN_ESTIMATORS: tuple[str, ...] = ("onpolicy", "is", "tic", "gmc", "grpo")


@dataclass(frozen=True)
class Sweep:
    """Settings of an accuracy-against-delay sweep (the table of runs is :func:`grid`)."""

    estimators: tuple[str, ...] = MAIN_ESTIMATORS
    delays: tuple[int, ...] = (0, 4, 8)
    seeds: tuple[int, ...] = (0, 1, 2)
    base: TrainConfig = TrainConfig(steps=30, lr=3e-4, eval_every=1000, max_delay=8)
    out_dir: str = "results/llm/experiment"


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


def run(sweep: Sweep, progress: bool = True) -> pd.DataFrame:
    """Execute the grid; returns one row per run and writes ``results.csv`` after every run.

    Runs whose ``summary.json`` exists (same config) are read back instead of rerun, so an
    interrupted sweep resumes.
    """
    import json

    from tqdm.auto import tqdm

    from simulate.llm.train import train

    os.makedirs(sweep.out_dir, exist_ok=True)
    rows = []
    runs = grid(sweep)
    for rid, cfg in tqdm(runs, desc="llm sweep", disable=not progress):
        summ_path = os.path.join(cfg.out_dir, "summary.json")
        cfg_path = os.path.join(cfg.out_dir, "config.json")
        t0 = time.time()
        if os.path.exists(summ_path) and os.path.exists(cfg_path) and json.load(open(cfg_path)) == cfg.to_dict():
            s = json.load(open(summ_path))
        else:
            s = train(cfg, progress=False)
        m = pd.read_csv(os.path.join(cfg.out_dir, "metrics.csv"))
        rows.append({
            "run_id": rid, "estimator": cfg.estimator, "delay": cfg.delay, "seed": cfg.seed,
            "initial_acc": s["initial_acc"], "final_acc": s["final_acc"],
            "gain": s["final_acc"] - s["initial_acc"], "skipped_steps": s["skipped_steps"],
            "mean_realised_delay": s["mean_realised_delay"], "chi2_mean": float(m["chi2"].mean()),
            "ell_max": float(m["ell_max"].max()), "clip_frac_mean": float(m["clip_frac"].mean()),
            "grad_norm_max": float(m["grad_norm"].max()), "reward_last10": s["mean_reward_last10"],
            "seconds": time.time() - t0,
        })
        pd.DataFrame(rows).to_csv(os.path.join(sweep.out_dir, "results.csv"), index=False)
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame, z: float = 1.96) -> pd.DataFrame:
    """Per (estimator, delay): mean final accuracy and mean gain over the warm start, each with a
    normal CI ``± z·σ̂/√n`` over seeds (the gain is paired: it removes the warm start's seed effect)."""
    keys = ["estimator", "delay"]
    out = df.groupby(keys)["final_acc"].agg(["mean", "std", "count"]).reset_index()
    out["half_ci"] = z * out["std"].fillna(0.0) / np.sqrt(out["count"])
    gain = df.groupby(keys)["gain"].agg(["mean", "std"]).reset_index()
    out["gain_mean"] = gain["mean"].values
    out["gain_half_ci"] = z * gain["std"].fillna(0.0).values / np.sqrt(out["count"].values)
    return out


def stable(df: pd.DataFrame) -> pd.Series:
    """Per run: no skipped (non-finite) update and final accuracy ≥ half the warm start's."""
    return (df["skipped_steps"] == 0) & (df["final_acc"] >= 0.5 * df["initial_acc"])


def c9_verdict(df: pd.DataFrame, z: float = 1.96) -> str:
    """One line: does ``gmc`` have the best mean final accuracy among stable estimators at the largest delay?"""
    d_max = int(df["delay"].max())
    at = df[df["delay"] == d_max].copy()
    at["stable"] = stable(at)
    per = at.groupby("estimator").agg(mean=("final_acc", "mean"), std=("final_acc", "std"),
                                      n=("final_acc", "count"), stable=("stable", "all"))
    if "gmc" not in per.index:
        return "C9: not evaluated (gmc not in the sweep)"
    ok = per[per["stable"]]
    if "gmc" not in ok.index:
        return f"C9 at d={d_max}: VIOLATED — gmc itself was unstable"
    best = ok["mean"].idxmax()
    rivals = ok.drop(index="gmc")
    if rivals.empty:
        return f"C9 at d={d_max}: not evaluated (no other stable estimator)"
    r_name = rivals["mean"].idxmax()
    # paired over seeds (same seeds, same warm starts): SE of the per-seed difference gmc − rival
    g_s = at[at.estimator == "gmc"].set_index("seed")["final_acc"]
    r_s = at[at.estimator == r_name].set_index("seed")["final_acc"]
    diff = (g_s - r_s).dropna()
    se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    gap = float(diff.mean()) if len(diff) else float(ok.loc["gmc", "mean"] - rivals.loc[r_name, "mean"])
    unstable = ", ".join(per.index[~per["stable"]]) or "none"
    detail = (f"gmc {ok.loc['gmc', 'mean']:.3f} vs best stable rival {r_name} {rivals.loc[r_name, 'mean']:.3f}, "
              f"paired gap {gap:+.3f} ± {z * se:.3f} (z={z}, {len(diff)} seeds); collapsed in some seed: {unstable}")
    if best == "gmc" and gap > z * se:
        return f"C9 at d={d_max}: HOLDS ({detail})"
    if best == "gmc":
        return f"C9 at d={d_max}: CONSISTENT, NOT SIGNIFICANT (gmc best by mean; {detail})"
    return f"C9 at d={d_max}: NOT SUPPORTED (best stable is {best}; {detail})"


def table(df: pd.DataFrame) -> str:
    """Accuracy-against-delay table: rows estimators, columns delays, cells ``mean ± 1.96·σ̂/√n`` of the
    final held-out accuracy, then the same for the gain over the warm start."""
    s = summarise(df)
    s["cell"] = [f"{m:.3f} ± {h:.3f}" for m, h in zip(s["mean"], s["half_ci"])]
    s["gcell"] = [f"{m:+.3f} ± {h:.3f}" for m, h in zip(s["gain_mean"], s["gain_half_ci"])]
    init = df.groupby("seed")["initial_acc"].first()
    n = int(s["count"].max())
    parts = [f"warm-start held-out accuracy per seed: {', '.join(f'{v:.3f}' for v in init.values)}"]
    for col, title in (("cell", "final held-out accuracy"), ("gcell", "gain over the warm start (paired)")):
        wide = s.pivot(index="estimator", columns="delay", values=col)
        wide.columns = [f"d={c}" for c in wide.columns]
        parts += [f"{title}, mean ± 1.96·SE over {n} seeds:", wide.to_string()]
    return "\n".join(parts)
