"""``score``: the staleness benchmark for any weight map — the property kit, then protocol v6 beside the registry's
strongest corrections, scored with rliable's IQM and probability of improvement (simulate/score.py).

``--estimator NAME`` scores a registered estimator; ``--estimator module:NAME`` first loads ``module`` as an
estimator plugin (``$ASYNCGRPO_ESTIMATORS``, docs/checker.md) and scores its ``NAME``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

NAME = "score"
HELP = ("score a weight map on protocol v6's drawn instances against gmc and the rival set: a one-page scorecard "
        "(markdown + figure)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--estimator", required=True, metavar="NAME | module:NAME",
                   help="a registered estimator, or module:NAME to load an estimator plugin first")
    p.add_argument("--quick", action="store_true", help="v6's [quick] overlay (fewer draws and seeds; not a verdict)")
    p.add_argument("--out", type=Path, default=Path("results/score"), help="folder for the scorecard and its figure")
    p.add_argument("--protocol", type=Path, default=None, help="a version-6 protocol file (default: the registered v6)")
    p.add_argument("--cells", type=Path, default=None, help="sweep cell cache root (default results/cells)")
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: CPUs)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _relaunch_with_plugin(module: str, argv: list[str]) -> int:
    """Run this command again with ``module`` in ``$ASYNCGRPO_ESTIMATORS`` (the registry reads it at import)."""
    from asyncgrpo.plugins import ENV_VAR, plugin_modules

    mods = [*plugin_modules(), module]
    env = {**os.environ, ENV_VAR: ",".join(dict.fromkeys(mods))}
    return subprocess.call([sys.executable, "-m", "simulate", "score", *argv], env=env)


def main(args: argparse.Namespace) -> int:
    from asyncgrpo.plugins import plugin_modules

    est = args.estimator
    if ":" in est:
        module, _, name = est.partition(":")
        if not module or not name:
            print(f"error: --estimator must be NAME or module:NAME, got {est!r}", file=sys.stderr)
            return 2
        if module not in plugin_modules():
            argv = ["--estimator", est, "--out", str(args.out)] + (["--quick"] if args.quick else [])
            argv += (["--protocol", str(args.protocol)] if args.protocol else []) + (
                ["--cells", str(args.cells)] if args.cells else []) + (
                ["--workers", str(args.workers)] if args.workers else []) + (["--no-progress"] if args.no_progress else [])
            return _relaunch_with_plugin(module, argv)
        est = name
    if args.workers is not None and args.workers < 1:
        print(f"error: --workers must be an integer >= 1, got {args.workers}", file=sys.stderr)
        return 2
    from simulate.score import score

    kw = {}
    if args.cells is not None:
        kw["root"] = str(args.cells)
    if args.workers is not None:
        kw["n_workers"] = args.workers
        if args.workers == 1:
            kw["backend"] = "serial"
    try:
        md = score(est, quick=args.quick, out=args.out, protocol=args.protocol, progress=not args.no_progress, **kw)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[score] {md}")
    print(md.read_text().split("## ")[1].strip())
    return 0
