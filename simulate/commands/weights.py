"""``weights``: print one group's weights, group mass, removed mass and 𝔅 for chosen estimators."""
from __future__ import annotations

import argparse

import numpy as np

from asyncgrpo import estimators as est
from asyncgrpo.functionals import bias_functional, ess, log_group_mass, removed_mass
from asyncgrpo.validation import check_log_ratios, parse_list

NAME = "weights"
HELP = "weights w_i of one group from its log-ratios ℓ_i, with ρ̄, removed mass and 𝔅(w;ρ)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--estimator",
        default="gmc",
        help=f"estimator name, comma list, or 'all' (known: {', '.join(est.ESTIMATORS)})",
    )
    p.add_argument("--eps", type=float, default=0.2, help="ratio threshold ε > 0")
    p.add_argument(
        "--log-ratios",
        type=float,
        nargs="+",
        required=True,
        metavar="ℓ",
        help="the group's log-ratios ℓ_i = log π_θ(τ_i) − log μ(τ_i), i = 1..G (negative values as they are: "
        "--log-ratios 0.1 -1e4)",
    )


def main(args: argparse.Namespace) -> int:
    ell = check_log_ratios(args.log_ratios)
    chosen = est.ESTIMATORS if args.estimator.strip() == "all" else tuple(
        parse_list(args.estimator, "--estimator", str, "estimator names"))
    maps = [est.get(name, args.eps) for name in chosen]
    lm = log_group_mass(ell)
    print(f"G = {ell.size}, eps = {args.eps:g}, 1+eps = {1 + args.eps:g}")
    print(f"log-ratios ℓ      : {np.array2string(ell, precision=6)}")
    with np.errstate(over="ignore"):
        print(f"ratios ρ = exp(ℓ) : {np.array2string(np.exp(ell), precision=6)}")
        print(f"group mass ρ̄      : {np.exp(lm):.6g}   (log ρ̄ = {lm:.6g})")
    header = f"{'estimator':<9} {'in W_eps':<8} {'mean w':>10} {'removed mass':>13} {'B(w;rho)':>12} {'ESS':>7}  weights"
    print(header)
    print("-" * len(header))
    for wm in maps:
        logw = wm.log_weights(ell)
        with np.errstate(over="ignore"):
            w = np.exp(logw)
        print(
            f"{wm.name:<9} {'yes' if wm.in_class else 'no':<8} {w.mean():>10.6g} {removed_mass(ell, logw):>13.6g} "
            f"{bias_functional(ell, logw):>12.6g} {ess(logw):>7.3f}  {np.array2string(w, precision=6)}"
        )
    return 0
