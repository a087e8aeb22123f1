"""``python -m bench [NAME ...]``: run the benchmarks in ``bench/`` (all, or those named) and print tables.

Each module ``bench/bench_<name>.py`` defines ``run(quick: bool = False) -> str`` returning the
table it measured; adding a file adds a benchmark.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time

import bench


def main(argv: list[str] | None = None) -> int:
    mods = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {', '.join(m[6:] for m in mods)})")
    p.add_argument("--quick", action="store_true", help="smaller problem sizes (smoke run)")
    args = p.parse_args(argv)
    chosen = mods if not args.names else [f"bench_{n}" for n in args.names]
    for name in chosen:
        if name not in mods:
            print(f"error: unknown benchmark {name[6:]!r}; known: {', '.join(m[6:] for m in mods)}", file=sys.stderr)
            return 2
    twice = sorted({n[6:] for n in chosen if chosen.count(n) > 1})
    if twice:  # a benchmark named twice would run (and print its timings) twice
        print(f"error: benchmark {', '.join(map(repr, twice))} named more than once; name each once", file=sys.stderr)
        return 2
    for name in chosen:
        mod = importlib.import_module(f"bench.{name}")
        t0 = time.perf_counter()
        print(f"== {name[6:]} ==")
        print(mod.run(quick=args.quick))
        print(f"({time.perf_counter() - t0:.1f} s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
