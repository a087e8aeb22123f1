"""``tune``: log-grid search over η for a grid of (estimator, d, ε, G); writes a tidy results table."""
from __future__ import annotations

import argparse

import pandas as pd

from asyncgrpo.validation import check_group_size
from simulate.commands.train import add_instance_arguments, delay_from, instance_from
from simulate.experiments import ETA_GRID, QUICK_ETAS, SCORES, best_eta, tune
from simulate.training import TrainConfig

NAME = "tune"
HELP = "tune the step size η over a log-grid for every (estimator, d, ε, G); ≥ 5 seeds, t confidence intervals"


def _list(typ):
    return lambda s: [typ(x) for x in s.split(",")]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_instance_arguments(p)
    p.add_argument("--estimators", type=_list(str), default=["gmc", "tic"], help="comma list")
    p.add_argument("--ds", type=_list(int), default=[0, 8], help="comma list of delays d")
    p.add_argument("--eps", type=_list(float), default=[0.2], help="comma list of ε")
    p.add_argument("--Gs", type=_list(int), default=[8], help="comma list of group sizes")
    p.add_argument("--etas", type=_list(float), default=list(ETA_GRID), help="comma list of step sizes")
    p.add_argument("--seeds", type=int, default=5, help="number of seeds 0..n-1 (n >= 1)")
    p.add_argument("--steps", type=int, default=None, help="learner steps K (default 200; quick 60)")
    p.add_argument("--score", choices=SCORES, default="avg_regret",
                   help="tuning criterion (default avg_regret: (1/K)Σ(J*−J); avg_grad_norm2 prefers collapse)")
    p.add_argument("--quick", action="store_true", help="3 step sizes, 60 steps")
    p.add_argument("--out", default=None, help="CSV path for the full (setting, η) table")


def main(args) -> int:
    check_group_size(args.seeds, "seeds")
    steps = args.steps if args.steps is not None else (60 if args.quick else 200)
    base = TrainConfig(instance=instance_from(args), steps=steps)
    grid = [base.replace(estimator=e, delay=delay_from(args, d), eps=eps, G=G)
            for e in args.estimators for d in args.ds for eps in args.eps for G in args.Gs]
    etas = list(QUICK_ETAS) if args.quick and args.etas == list(ETA_GRID) else args.etas
    df = tune(grid, seeds=range(args.seeds), etas=etas, score=args.score)
    best = best_eta(df)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(best[["estimator", "delay", "eps", "G", "eta", "div_rate", "regret", "regret_lo", "regret_hi", "score",
                    "final_J", "final_J_lo", "final_J_hi"]].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if args.out:
        df.to_csv(args.out, index=False)
        print(f"wrote {args.out} ({len(df)} rows)")
    return 0
