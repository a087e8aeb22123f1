"""Dask faults: a killed driver leaves no orphan workers; an unreachable scheduler fails fast and clearly.

(A worker killed mid-sweep is ``tests/test_sweep.py::test_dask_worker_killed_mid_sweep_loses_no_cell``.)
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")  # a dependency of distributed

import sweep as sw  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigkill_of_the_driver_leaves_no_orphan_workers(tmp_path):
    """Start a sweep on a local Dask cluster in a child process, SIGKILL that driver alone (not its
    process group) while both workers are inside a long GIL-holding cell, and require every process
    it started to be gone within 5 s (without the guard they run on until the cell ends)."""
    script = textwrap.dedent(
        f"""
        import sys; sys.path[:0] = [{str(REPO)!r}, {str(HERE)!r}]
        import sweep as sw
        s = sw.Sweep.from_grid("t", "dask_cells:gil_cell", {{"x": [0.0, 1.0, 2.0, 3.0]}}, fixed={{"n": 10**11}})
        sw.run_sweep(s, root={str(tmp_path)!r}, dask_local=2, progress=False, version="v")
        """
    )
    driver = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids: list = []
    try:
        deadline = time.monotonic() + 90
        busy: set = set()
        while len(busy) < 2:  # both workers are computing (a second of CPU each inside gil_cell)
            assert driver.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "the workers never started computing"
            kids = psutil.Process(driver.pid).children(recursive=True)
            busy = {k.pid for k in kids if _alive(k) and k.cpu_times().user > 1.0 + _start_cpu(k)}
            time.sleep(0.1)
        os.kill(driver.pid, signal.SIGKILL)  # the driver only: its cluster must notice on its own
        driver.wait()
        deadline = time.monotonic() + 5
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        orphans = [k.pid for k in kids if _alive(k)]
        assert orphans == [], f"orphan processes 5 s after the driver was killed: {orphans}"
    finally:
        for k in kids:  # never leave them behind, even when the test fails
            if _alive(k):
                k.kill()
        if driver.poll() is None:
            driver.kill()


_CPU_AT_START: dict = {}


def _start_cpu(k) -> float:
    # A worker spends about a second of CPU importing; count only what it burns after we first see it.
    return _CPU_AT_START.setdefault(k.pid, k.cpu_times().user)


def test_unreachable_scheduler_fails_fast_with_one_line(tmp_path):
    s = sw.Sweep.from_grid("t", "sweep:example_cell", {"x": [0.0]}, fixed={"n": 5}, seed=1)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'") as info:
        sw.run_sweep(s, root=tmp_path, scheduler="tcp://127.0.0.1:9", progress=False, version="v")
    elapsed = time.monotonic() - t0
    assert elapsed <= 5.0 + 2.0, f"took {elapsed:.1f} s"  # 5 s timeout, plus slack for a loaded runner
    assert "\n" not in str(info.value)
    assert not list(tmp_path.glob("t/*.json"))


def _thread_names():
    import threading

    return sorted(t.name for t in threading.enumerate())


def test_only_workers_run_the_parent_guard():
    """Workers watch their parent; the driver (where LocalCluster's nannies live) must not, or it
    would exit whenever its own parent does (``nohup``, a closed terminal)."""
    with sw.dask_backend.dask_client(n_local=1) as client:
        names = client.run(_thread_names)
        assert len(names) == 1 and all("sweep-parent-guard" in v for v in names.values()), names
    assert "sweep-parent-guard" not in _thread_names()
