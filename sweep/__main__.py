"""``python -m sweep``: list the sweeps stored under a results root and verify their cells."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sweep.cache import DEFAULT_ROOT, list_sweeps, verify_sweep_dir


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sweep",
        description="List the sweeps stored under ROOT with their number of stored cells; "
        "--verify also checks every cell's checksum and row count.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("root", nargs="?", type=Path, default=DEFAULT_ROOT, metavar="ROOT", help="results root")
    p.add_argument("--verify", action="store_true",
                   help="check every stored cell; list damaged ones (a sweep run recomputes them)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.root.is_dir():
        print(f"error: results root {args.root} is not a directory", file=sys.stderr)
        return 2
    n_bad = 0
    for name, n in list_sweeps(args.root):
        line = f"{name}: {n} cells"
        if args.verify:
            bad = verify_sweep_dir(args.root / name)
            n_bad += len(bad)
            line += f", {len(bad)} damaged" if bad else ", all verified"
            line += "".join(f"\n  {k}: {why}" for k, why in bad.items())
        print(line)
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
