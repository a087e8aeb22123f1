"""``bias``: Monte Carlo bias, second moment and 𝔅 of estimators under controlled staleness.

Wraps :func:`simulate.montecarlo.bias_table`: for each ``(G, d)`` one pass samples groups from
``μ = π_{θ−d·η·u}`` and evaluates every ``(estimator, ε)`` on the same groups; the printed table
puts each measurement (± standard error) next to the exact value and theory's bound.
"""
from __future__ import annotations

import argparse

from asyncgrpo import estimators as est
from simulate import montecarlo as mc

NAME = "bias"
HELP = "Monte Carlo of E[ĝ] bias, E‖ĝ‖², 𝔅(w;ρ) and removed mass under staleness, with exact values and bounds"


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instance", default="token-mdp", choices=sorted(mc.INSTANCES), help="synthetic instance (default token-mdp)")
    p.add_argument("--estimators", default="gmc,tic,tis", help=f"comma list or 'all' (known: {', '.join(est.ESTIMATORS)})")
    p.add_argument("--eps", type=_floats, default=[0.2], help="comma list of ε > 0 (default 0.2)")
    p.add_argument("--G", type=_ints, default=[4, 16, 64], help="comma list of group sizes (default 4,16,64)")
    p.add_argument("--delay", type=_ints, default=[0, 2, 8], help="comma list of delays d >= 0 (default 0,2,8)")
    p.add_argument("--n-groups", type=int, default=20_000, help="groups per (G, d) (default 20000)")
    p.add_argument("--eta", type=float, default=None, help="step size η of the staleness pair (default: the instance's)")
    p.add_argument("--direction", default="grad", choices=("grad", "random"), help="direction u of θ − dηu (default grad)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--tail", default="fourth", choices=("fourth", "second"), help="tail inequality of theory's C4 bounds")
    p.add_argument(
        "--quantities",
        default="grad_bias,stale_bias,sq_norm,bias_functional,removed_mass",
        help="comma list of quantities to print, or 'all' (the CSV always has all)",
    )
    p.add_argument("--no-exact", action="store_true", help="skip exact expectations (faster on large instances)")
    p.add_argument("--out", default=None, help="also write the full tidy table to this CSV file")


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    names = est.ESTIMATORS if args.estimators == "all" else [s.strip() for s in args.estimators.split(",") if s.strip()]
    if args.n_groups < 2:
        raise ValueError(f"--n-groups must be an integer >= 2, got {args.n_groups}")
    df = mc.bias_table(
        args.instance,
        names,
        args.eps,
        args.G,
        args.delay,
        n_groups=args.n_groups,
        seed=args.seed,
        eta=args.eta,
        direction=args.direction,
        tail=args.tail,
        exact=not args.no_exact,
        n_chunks=min(32, args.n_groups),
        progress=True,
    )
    if args.out:
        df.to_csv(args.out, index=False)
    shown = df if args.quantities == "all" else df[df.quantity.isin(args.quantities.split(",") + ["chi2"])]
    with pd.option_context("display.width", 200, "display.max_rows", None, "display.float_format", "{:.4g}".format):
        print(shown.drop(columns=["instance", "n"]).to_string(index=False))
    print(f"instance {df.instance.iloc[0]}, n = {df.n.iloc[0]} groups per (G, d); se = σ̂/√n; NaN bound/exact: none available")
    if args.out:
        print(f"wrote {len(df)} rows to {args.out}")
    return 0
