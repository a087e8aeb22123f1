"""``gscaling``: C5's G^{−2/5} experiment — tuned delay-dependent score against G for gmc and tic."""
from __future__ import annotations

import argparse

NAME = "gscaling"
HELP = "C5: tuned score(d) − tuned score(0) against G for gmc and tic, log-log slope with a bootstrap CI"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="G ∈ {2,8,32}, 3 step sizes, 5 seeds, few steps (< 1 min)")
    p.add_argument("--regime", choices=("far", "local"), default="far",
                   help="far: T=16, K=200, d=16, χ² ~ 10³–10⁵ (default); local: T=4, K=400, d=8, χ² ≲ 1 (C6)")
    p.add_argument("--d", type=int, default=None, help="delay d (default: the regime's, far 16, local 8)")
    p.add_argument("--score", choices=("avg_regret", "avg_grad_norm2"), default="avg_regret",
                   help="tuning score: (1/K)Σ(J*−J) (default) or (1/K)Σ‖∇J‖² (prefers collapse on softmax)")
    p.add_argument("--optimizer", choices=("sga", "adam"), default="sga")
    p.add_argument("--eps", type=float, default=0.2, help="ε (default 0.2)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds, >= 2 (default 10; quick 5)")
    p.add_argument("--steps", type=int, default=None, help="learner steps K (default: the regime's)")
    p.add_argument("--out", default=None, help="CSV path for the per-(estimator, G) table")


def main(args) -> int:
    from simulate.experiments import g_scaling_experiment, regime_criteria

    from asyncgrpo.validation import check_group_size

    seeds = None if args.seeds is None else range(check_group_size(args.seeds, "seeds"))
    df, fit = g_scaling_experiment(quick=args.quick, d=args.d, eps=args.eps, seeds=seeds, steps=args.steps,
                                   score=args.score, optimizer=args.optimizer, regime=args.regime)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"\nregime {fit['regime']}: {fit['instance']}, {fit['optimizer']}, score {fit['score']}; tuned η at an "
          f"end of the grid in {fit['n_edge']}/{fit['n_cells']} cells; median realised χ² at d: {fit['chi2_median_d']:.3g}")
    print("regime criteria (local-overlap targets):")
    for part, v in regime_criteria(df).items():
        print(f"  {part}: {'met' if v['holds'] else 'not met'} — {v['detail']}")
    print(f"fit of log Δ(G) = a + b·log G at d={fit['d']}, ε={fit['eps']:g}, {fit['n_seeds']} seeds, "
          f"K={fit['steps']}; 95% bootstrap CI; theory from {fit['theory_source']}")
    for e in ("gmc", "tic"):
        if e in fit:
            f = fit[e]
            print(f"  {e}: measured slope b = {f['slope']:.3f}  [{f['lo']:.3f}, {f['hi']:.3f}]  "
                  f"(fitted G with Δ > 0: {f['n_points']}/{len(fit['Gs'])}; not measurable (Δ ≤ 0): "
                  f"{f['not_measurable_G'] or 'none'}; bootstrap fits {f['n_boot_ok']})   theory: {f['theory']:.3f}")
            if f["reason"]:
                print(f"      note: {f['reason']}")
    if args.out:
        df.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0
