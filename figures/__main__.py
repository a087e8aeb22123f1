"""``python -m figures``: regenerate every figure and the claims report (REPORT.md + REPORT.html).

Figures are the modules ``figures/fig_*.py`` (discovered, so new ones join automatically); each
has ``main(out_dir, quick=False)``. Sweeps run on local processes by default, or on a Dask
cluster with ``--scheduler tcp://HOST:PORT`` / ``--dask-local N``. Finished sweep cells are cached
under ``--cells`` (default ``results/cells``), so a re-run or an interrupted run recomputes nothing
that is already done.

Only the full default run writes the committed results (``figures/out/``, ``figures/REPORT.md``),
and only from a clean git tree (``--allow-dirty`` overrides and stamps the report visibly). A
``--quick`` run, an ``--only``/``--skip`` subset, or any run with ``--out`` writes to a separate
folder (default ``results/quick/`` or ``results/partial/``) and says where.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import sys
import time
import traceback
from pathlib import Path

import figures
from asyncgrpo.validation import parse_list

HERE = Path(figures.__file__).resolve().parent
DEFAULT_OUT = HERE / "out"
DEFAULT_REPORT = HERE / "REPORT.md"
SMALL_RUNS = Path("results")  # --quick / --only / --skip results go below it, never over the committed ones
#: Figures whose own quick mode does not fit the 3-minute ``--quick`` budget on 2 cores; ``--quick``
#: leaves them out with a printed note unless ``--only`` names them. fig_bridge: its quick ladder took
#: 173 CPU-s (4.6 min wall on 2 shared cores), most of it the kernels' first compile.
SLOW_IN_QUICK: tuple[str, ...] = ("fig_bridge",)


def discover() -> list[str]:
    """Names of the ``figures/fig_*.py`` modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(figures.__path__) if m.name.startswith("fig_"))


def left_out_of_quick(name: str, mod=None) -> bool:
    """Whether ``--quick`` (without ``--only``) leaves figure ``name`` out: listed in :data:`SLOW_IN_QUICK`, or its
    module sets ``SKIP_IN_QUICK`` (its own quick mode does not fit the budget)."""
    mod = mod if mod is not None else importlib.import_module(f"figures.{name}")
    return name in SLOW_IN_QUICK or bool(getattr(mod, "SKIP_IN_QUICK", False))


def _modules(option: str):
    """argparse ``type`` of ``--only`` / ``--skip``: a comma list of figure modules, each once (the shared check,
    :func:`asyncgrpo.validation.parse_list`), refused when the command line is parsed."""
    def parse(text: str) -> list[str]:
        try:
            return parse_list(text, option, str, "figure modules")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m figures", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (< 3 min on 2 cores), written to results/quick/: "
                   "not a verdict")
    p.add_argument("--out", type=Path, default=None, help=f"image directory (default {DEFAULT_OUT} for the full run, "
                   "results/quick or results/partial otherwise)")
    p.add_argument("--allow-dirty", action="store_true", help="write the committed report from a tree with "
                   "uncommitted changes (stamped DIRTY in the report)")
    p.add_argument("--report", type=Path, default=None,
                   help="REPORT.md path (default figures/REPORT.md, or OUT/REPORT.md when --out is given)")
    p.add_argument("--cells", type=Path, default=None, help="sweep cell cache root (default results/cells)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT", help="run sweeps on this Dask scheduler")
    g.add_argument("--dask-local", type=int, default=None, metavar="N",
                   help="run sweeps on a local Dask cluster of N worker processes")
    g.add_argument("--workers", type=int, default=None, metavar="N", help="local worker processes (default: CPUs)")
    p.add_argument("--only", default=None, type=_modules("--only"), help="comma list of figure modules to run (e.g. fig_heatmap)")
    p.add_argument("--skip", default=None, type=_modules("--skip"), help="comma list of figure modules to leave out (e.g. fig_llm_delay)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the figures and the report (see ``--help``); returns the exit status."""
    from figures import common

    try:
        return _run(argv)
    finally:
        common.RUN_COMMIT = None  # a later sidecar() in this process (a notebook, a test) asks git again


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be an integer >= 1 (local worker processes), got {args.workers}")
    if args.dask_local is not None and args.dask_local < 1:
        parser.error(f"--dask-local must be an integer >= 1 (worker processes), got {args.dask_local}")
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed (CI, clusters)
    from sweep import git_commit

    from figures import common

    commit = git_commit()
    common.RUN_COMMIT = commit  # every sidecar of this run carries the tree state at its start
    provenance = {"commit": commit.removesuffix("-dirty"), "dirty": commit.endswith("-dirty")}
    partial = bool(args.only or args.skip)
    committed = args.out is None and not args.quick and not partial
    if args.out is not None:
        out = args.out.resolve()
    elif committed:
        out = DEFAULT_OUT
    else:
        out = (SMALL_RUNS / ("quick" if args.quick else "partial")).resolve()
    report = args.report or (DEFAULT_REPORT if committed else out / "REPORT.md")
    if committed and provenance["dirty"] and not args.allow_dirty:
        print("error: the committed report (figures/REPORT.md) is written only from a clean git tree; commit your "
              "changes, or pass --allow-dirty (the report is then stamped DIRTY), or use --quick / --out DIR",
              file=sys.stderr)
        return 2
    print(f"[figures] writing {'the committed results' if committed else 'a small/partial run'} to {out} "
          f"and {report}", flush=True)
    names = discover()
    if args.only:
        wanted = args.only
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"error: unknown figure modules {unknown}; known: {', '.join(names)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]
    if args.skip:
        skipped = set(args.skip)
        for n in sorted(skipped & set(names)):
            print(f"[skip] {n}: --skip")
        names = [n for n in names if n not in skipped]
    sweep_opts = {"progress": not args.no_progress}
    if args.cells is not None:
        sweep_opts["root"] = args.cells
    client = cluster = None
    if args.scheduler or args.dask_local:
        from distributed import Client

        from sweep.dask_backend import connect, local_cluster

        if args.scheduler:
            try:
                client = connect(args.scheduler)  # short timeout, one clear line
            except ValueError as exc:
                print(f"error: --scheduler: {exc}", file=sys.stderr)
                return 2
        else:
            cluster = local_cluster(args.dask_local)  # workers exit with this process, even on SIGKILL
            client = Client(cluster)
        sweep_opts["client"] = client
        print(f"sweeps on Dask: {client.scheduler.address}")
    elif args.workers:
        sweep_opts["n_workers"] = args.workers
    out.mkdir(parents=True, exist_ok=True)
    timings, failures = {}, {}
    t_all = time.perf_counter()
    try:
        for name in names:
            mod = importlib.import_module(f"figures.{name}")
            if args.quick and not args.only and left_out_of_quick(name, mod):
                print(f"[skip] {name}: its quick mode does not fit the 3-minute --quick budget; "
                      f"run `python -m figures --quick --only {name}`")
                continue
            print(f"[figure] {name} …", flush=True)
            t0 = time.perf_counter()
            kwargs = {"sweep_opts": sweep_opts} if "sweep_opts" in inspect.signature(mod.main).parameters else {}
            try:
                mod.main(out, quick=args.quick, **kwargs)
            except Exception as exc:  # noqa: BLE001 — one broken figure must not hide the others
                failures[name] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            timings[name] = time.perf_counter() - t0
            print(f"[figure] {name}: {'FAILED' if name in failures else 'done'} in {timings[name]:.1f} s", flush=True)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    from figures import report as rp

    t0 = time.perf_counter()
    md, page, rep = rp.write(out, report, quick=args.quick, timings=timings, failures=failures, provenance=provenance)
    for pb in rep["evidence_problems"]:  # a missing or damaged sidecar: its rows are not run (issue 56)
        print(f"  evidence {pb['file']}: {pb['reason']} → {', '.join(pb['rows']) or 'no claim row'} not run",
              file=sys.stderr)
    if committed and rep["evidence_problems"]:
        failures = {**failures, "evidence": f"{len(rep['evidence_problems'])} sidecar(s) missing or damaged"}
    if committed and not failures:
        readme = HERE.parent / "README.md"
        if rp.update_readme(readme, rep):
            print(f"[report] updated the findings block of {readme}")
    print(f"[report] {md} and {page} ({time.perf_counter() - t0:.1f} s; total {time.perf_counter() - t_all:.1f} s)")
    for label in rp.ROWS:  # C4's bound and rate rows are printed apart
        print(f"  {label}: {rp.summary(rep, label)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
