"""A sweep run in a child process started on a CPU kernel path (LM protocol v5,
:mod:`simulate.llm.portability.kernel_paths`): what :func:`simulate.llm.experiment.run` does, through
:func:`run_on_its_path`, for a sweep whose runs record a path this process does not run, and what the perturbation
check (:mod:`simulate.llm.portability.perturbation`) does for each other path. It imports neither of them: the sweep
arrives as data (:func:`simulate.llm.experiment.sweep_to_dict`) and the child is
``python -m simulate.llm.portability.perturbation --sweep``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from simulate.llm.portability import kernel_paths

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["run_on_its_path", "start_under", "finish_under", "run_under"]


def start_under(sweep, spec: str, *, data: dict, log: str | None = None, progress: bool = False, root: str | None = None,
                backend: str | None = None, overwrite: bool = False, **engine_opts) -> subprocess.Popen:
    """Start a child process on the kernel path ``spec`` (:func:`simulate.llm.portability.kernel_paths.path_env`) that runs
    ``sweep`` (``python -m simulate.llm.portability.perturbation --sweep``; ``data`` is
    :func:`simulate.llm.experiment.sweep_to_dict` of it, passed in so that this module imports neither); its output goes to ``log`` (default: this process's). A Dask ``client`` cannot
    carry a kernel path into its workers: it is left out and the child uses the local backend."""
    os.makedirs(sweep.out_dir, exist_ok=True)
    path = os.path.join(sweep.out_dir, "sweep.json")
    with open(path, "w") as f:
        json.dump(data, f)
    dropped = [k for k in ("client", "scheduler", "dask_local") if engine_opts.pop(k, None) is not None]
    if dropped:
        print(f"note: kernel path {spec}: the sweep runs in a child process started with it; {', '.join(dropped)} "
              f"left out (local backend)", file=sys.stderr)
        backend = None if backend == "dask" else backend
    cmd = [sys.executable, "-m", "simulate.llm.portability.perturbation", "--sweep", path, "--path", spec]
    cmd += (["--root", str(root)] if root else []) + (["--backend", backend] if backend else [])
    cmd += (["--workers", str(engine_opts.pop("n_workers"))] if engine_opts.get("n_workers") else [])
    cmd += (["--overwrite"] if overwrite else []) + (["--progress"] if progress else [])
    out = open(log, "w") if log else None
    proc = subprocess.Popen(cmd, env=kernel_paths.path_env(spec), stdout=out, stderr=subprocess.STDOUT if out else None)
    proc.log_file = out  # closed by finish_under
    return proc


def finish_under(proc: subprocess.Popen, sweep, spec: str, log: str | None = None) -> pd.DataFrame:
    """Wait for :func:`start_under`'s child; its results table, or ``RuntimeError`` with its last lines."""
    import pandas as pd  # here, not at the top: the package's face (simulate.llm.config imports it) stays pandas-free

    rc = proc.wait()
    if getattr(proc, "log_file", None):
        proc.log_file.close()
    if rc != 0:
        tail = ""
        if log and os.path.exists(log):
            with open(log) as f:
                tail = "".join(f.readlines()[-15:])
        raise RuntimeError(f"the sweep on kernel path {spec} failed (exit {rc}){':' if tail else ''}\n{tail}")
    return pd.read_csv(os.path.join(sweep.out_dir, "results.csv"))


def run_under(sweep, spec: str, *, data: dict, **opts) -> pd.DataFrame:
    """Run ``sweep`` in a child process on the kernel path ``spec`` and return its results table (what
    :func:`simulate.llm.experiment.run` does for a sweep whose runs record a path this process does not run)."""
    return finish_under(start_under(sweep, spec, data=data, **opts), sweep, spec)


def run_on_its_path(sweep, to_data, **opts) -> pd.DataFrame | None:
    """``None`` when this process may run ``sweep`` itself: its runs record no kernel path (``base.kernels``), run
    off the CPU, or this process started on their path; else the sweep's results table from a child process
    started on it (:func:`run_under`; the warm starts too). ``to_data``: the sweep as JSON-ready data
    (:func:`simulate.llm.experiment.sweep_to_dict`, passed in so that this module imports no experiment)."""
    spec = sweep.base.kernels
    if not spec or sweep.base.device != "cpu" or kernel_paths.env_matches(spec):
        return None
    return run_under(sweep, spec, data=to_data(sweep), **opts)
