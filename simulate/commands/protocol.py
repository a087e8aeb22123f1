"""``protocol``: run the pre-registered training-claims protocol (C5, C9) and print its verdicts."""
from __future__ import annotations

import argparse
from pathlib import Path

NAME = "protocol"
HELP = "run the pre-registered C5/C9 training protocol (docs/protocol.md) and print the verdict tables"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from simulate.protocol import INSTANCES
    from simulate.protocol.spec import DEFAULT_PATH

    p.add_argument("--protocol", type=Path, default=DEFAULT_PATH, help="protocol TOML file")
    p.add_argument("--quick", action="store_true", help="the file's [quick] overlay: fewer seeds, a smaller grid "
                   "(same rules; not a verdict)")
    p.add_argument("--instance", default=None,
                   help=f"comma list of registered instances (default: the protocol's; known: {', '.join(INSTANCES)})")
    p.add_argument("--cells", type=Path, default=Path("results") / "cells", help="sweep cell cache root")
    p.add_argument("--out", type=Path, default=None, help="write the run table and verdicts as CSV here")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from simulate.protocol import INSTANCES, run_protocol

    insts = None
    if args.instance is not None:
        insts = [s.strip() for s in args.instance.split(",") if s.strip()]
        if not insts:
            raise ValueError("--instance must name at least one instance")
        unknown = sorted(set(insts) - set(INSTANCES))
        if unknown:
            raise ValueError(f"--instance: unknown {unknown}; known: {', '.join(INSTANCES)}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    res = run_protocol(args.protocol, quick=args.quick, instances=insts, root=args.cells,
                       progress=not args.no_progress)
    p = res.protocol
    print(f"protocol {p.label} — tuning seeds {list(p.tune_seeds)}, evaluation seeds {p.eval_seeds[0]}…"
          f"{p.eval_seeds[-1]} ({len(p.eval_seeds)})" + ("  [quick: not a verdict]" if p.quick else ""))
    with pd.option_context("display.width", 100, "display.max_columns", 20):
        print("\nC9 per instance (primary cell ε={eps}, G={G}, d={d}):".format(**p.primary))
        print(res.c9["matrix"].fillna("—").to_string())
        print("\nC9 aggregate: " + "; ".join(f"{k}: {v}" for k, v in res.c9["aggregate"].items())
              + f"  →  C9 {res.c9['verdict']}")
        if res.c5:
            print("\nC5 per instance:")
            for inst, r in res.c5["per_instance"].items():
                extra = f" — {r['reason']}" if r.get("reason") else ""
                print(f"  {inst:22s} χ² {r['chi2_median']:.3g}: {r['verdict']}{extra}")
            print(f"C5 aggregate: {res.c5['verdict']}")
    if args.out is not None:
        res.table.to_csv(args.out / "protocol_runs.csv", index=False)
        res.c9["comparisons"].to_csv(args.out / "c9_comparisons.csv", index=False)
        print(f"\nwrote {args.out / 'protocol_runs.csv'} and {args.out / 'c9_comparisons.csv'}")
    return 0
