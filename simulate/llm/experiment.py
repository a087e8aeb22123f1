"""Held-out accuracy against delay, every estimator, over seeds: the C9 check at LM scale.

A sweep is data (STYLE §5): :func:`grid` lists the runs as ``(run_id, TrainConfig)``; :func:`run`
executes them (sharing one cached warm start per seed) and returns a tidy DataFrame, one row per
run; :func:`summarise` and :func:`c9_verdict` are pure functions of that table.

C9 at LM scale (THEORY §3) is read as: at the largest delay, ``gmc`` has the highest mean final
held-out accuracy among the *stable* estimators (no skipped step, final accuracy not collapsed
below half the warm start), and the verdict says whether the gap exceeds the seeds' noise.
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
    """Mean final accuracy per (estimator, delay) with a normal CI ``mean ± z·σ̂/√n`` over seeds."""
    g = df.groupby(["estimator", "delay"])["final_acc"]
    out = g.agg(["mean", "std", "count"]).reset_index()
    out["half_ci"] = z * out["std"].fillna(0.0) / np.sqrt(out["count"])
    out["gain_mean"] = df.groupby(["estimator", "delay"])["gain"].mean().values
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
    g = ok.loc["gmc"]
    rivals = ok.drop(index="gmc")
    if rivals.empty:
        return f"C9 at d={d_max}: not evaluated (no other stable estimator)"
    r_name = rivals["mean"].idxmax()
    r = rivals.loc[r_name]
    se = math.sqrt((g["std"] ** 2) / g["n"] + (r["std"] ** 2) / r["n"]) if g["n"] > 1 and r["n"] > 1 else float("nan")
    gap = g["mean"] - r["mean"]
    unstable = ", ".join(per.index[~per["stable"]]) or "none"
    if best == "gmc":
        strength = "beyond" if se == se and gap > z * se else "within"
        return (f"C9 at d={d_max}: HOLDS (gmc {g['mean']:.3f} vs best rival {r_name} {r['mean']:.3f}, "
                f"gap {gap:+.3f}, {strength} z={z}·SE={z * se:.3f}); unstable: {unstable}")
    return (f"C9 at d={d_max}: NOT SUPPORTED (best stable is {best} {ok.loc[best, 'mean']:.3f}, gmc {g['mean']:.3f}, "
            f"gap {gap:+.3f} vs {r_name}, z·SE={z * se:.3f}); unstable: {unstable}")


def table(df: pd.DataFrame) -> str:
    """Accuracy-against-delay table: rows estimators, columns delays, cells ``mean ± half-CI``."""
    s = summarise(df)
    s["cell"] = [f"{m:.3f} ± {h:.3f}" for m, h in zip(s["mean"], s["half_ci"])]
    wide = s.pivot(index="estimator", columns="delay", values="cell")
    wide.columns = [f"d={c}" for c in wide.columns]
    init = df.groupby("seed")["initial_acc"].first()
    head = f"warm-start held-out accuracy per seed: {', '.join(f'{v:.3f}' for v in init.values)}\n"
    return head + wide.to_string()
