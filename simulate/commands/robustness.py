"""``robustness``: C9 — tuned final J and average ‖∇J‖² against delay for every estimator, with verdicts."""
from __future__ import annotations

import argparse

NAME = "robustness"
HELP = "C9: final J and (1/K)Σ‖∇J‖² against delay d for every estimator (η tuned), and the claim's verdict"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="3 delays, 3 step sizes, 5 seeds, few steps (< 1 min)")
    p.add_argument("--regime", choices=("far", "local"), default="far",
                   help="far: T=16, K=200, d ≤ 32, χ² ~ 10⁵ (default); local: T=4, K=400, d ≤ 4, χ² ≲ 1 (C6)")
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--eps", type=float, default=0.2)
    p.add_argument("--seeds", type=int, default=None, help="number of seeds, >= 2 (default 8; quick 5)")
    p.add_argument("--ds", type=lambda v: [int(x) for x in v.split(",")], default=None,
                   help="comma list of delays (default: the regime's; far 0,2,4,8,16,32, local 0,1,2,4)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--score", choices=("final_J", "avg_regret", "avg_grad_norm2"), default="final_J",
                   help="tuning criterion")
    p.add_argument("--optimizer", choices=("sga", "adam"), default="sga")
    p.add_argument("--out", default=None, help="CSV path for the table")


def main(args) -> int:
    from simulate.experiments import c9_verdict, regime_criteria, robustness_experiment

    from asyncgrpo.validation import check_group_size

    seeds = None if args.seeds is None else range(check_group_size(args.seeds, "seeds"))
    tab = robustness_experiment(quick=args.quick, G=args.G, eps=args.eps, seeds=seeds, steps=args.steps,
                                score=args.score, optimizer=args.optimizer, ds=args.ds,
                                regime=args.regime)
    cols = ["estimator", "d", "eta", "edge", "div_rate", "div_rate_any", "final_J", "final_J_lo", "final_J_hi",
            "regret", "score", "chi2", "clip_frac", "ess", "tail_any", "tail_rel_any", "div_ref", "tail_rel_ref"]
    print(tab[cols].to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    print(f"\nregime {args.regime}; regime criteria (local-overlap targets):")
    for part, v in regime_criteria(tab).items():
        print(f"  {part}: {'met' if v['holds'] else 'not met'} — {v['detail']}")
    print(f"C9 verdict (from the numbers above; instability test at η_ref = {tab['eta_ref'].iloc[0]:g}):")
    for part, v in c9_verdict(tab).items():
        word = "not decided" if v["holds"] is None else ("holds" if v["holds"] else "does not hold")
        print(f"  {part}: {word} — {v['detail']}")
    if args.out:
        tab.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0
