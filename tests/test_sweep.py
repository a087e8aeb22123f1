"""The sweep engine: grid as data, per-cell storage, resume, and the local / Dask backends agree.

Every test uses :func:`sweep.example_cell` (a seeded sample mean), so results are exact
and comparable across backends; the ``pid`` column records which process computed a cell.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

import sweep as sw

FN = "sweep:example_cell"
REPO = Path(__file__).resolve().parents[1]


def _grid(sweep_id="t", xs=(0.0, 1.0, 2.0, 3.0), sleep_s=0.0, seed=7):
    return sw.Sweep.from_grid(sweep_id, FN, {"x": list(xs)}, fixed={"n": 50, "sleep_s": sleep_s}, seed=seed)


def _values(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns="pid").sort_values("cell").reset_index(drop=True)


def _assert_matches_direct(table: pd.DataFrame, s: sw.Sweep) -> None:
    """Each stored value equals a direct, in-process call of the cell function (sleep removed)."""
    got = table.set_index("cell")["value"]
    for c in s.cells:
        want = sw.example_cell(**{**c.settings, "sleep_s": 0.0})["value"].iloc[0]
        assert got[c.id] == want, c.id


def test_grid_is_data_with_stable_distinct_seeds():
    a, b = _grid(), _grid()
    assert [c.id for c in a.cells] == ["x=0", "x=1", "x=2", "x=3"]
    assert a.frame().equals(b.frame())
    seeds = [c.settings["seed"] for c in a.cells]
    assert len(set(seeds)) == len(seeds)
    assert sw.cell_seed(7, "x=0") == seeds[0]
    assert sw.cell_seed(8, "x=0") != seeds[0]
    assert a.subset(["x=1"]).cells == (a.cells[1],)
    two = sw.Sweep.from_grid("g", FN, {"x": [1.0, 2.0], "n": [10, 20]})
    assert [c.id for c in two.cells] == ["x=1,n=10", "x=1,n=20", "x=2,n=10", "x=2,n=20"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: sw.Sweep("t", FN, ()),
        lambda: sw.Sweep("a/b", FN, (sw.Cell("c", {}),)),
        lambda: sw.Sweep("t", FN, (sw.Cell("c", {}), sw.Cell("c", {}))),
        lambda: sw.Sweep("t", lambda x: x, (sw.Cell("c", {}),)),
        lambda: sw.Cell("c", {"x": object()}),
        lambda: sw.Cell("c", {"x": float("nan")}),
        lambda: sw.Cell("", {}),
        lambda: sw.Sweep.from_grid("t", FN, {"x": []}),
        lambda: sw.cell_seed(-1, "c"),
    ],
)
def test_bad_input_raises_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_bad_backend_and_workers(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        sw.run_sweep(_grid(), root=tmp_path, backend="mpi")
    with pytest.raises(ValueError, match="n_workers"):
        sw.run_sweep(_grid(), root=tmp_path, n_workers=0)


def test_rerun_recomputes_nothing_and_version_change_recomputes(tmp_path):
    s = _grid()
    first = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v1")
    assert first.computed == tuple(c.id for c in s.cells) and first.cached == ()
    files = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert len(files) == 2 * len(s.cells)  # one .parquet + one .json per cell, nothing else
    again = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v1")
    assert again.computed == () and set(again.cached) == set(first.computed)
    pd.testing.assert_frame_equal(again.table, first.table)
    meta = json.loads(next((tmp_path / "t").glob("*.json")).read_text())
    assert meta["version"] == "v1" and "git_commit" in meta and meta["settings"]["n"] == 50
    # A new code version is a new key: everything is recomputed, old cells are kept, not overwritten.
    new = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v2")
    assert len(new.computed) == len(s.cells)
    assert len(list((tmp_path / "t").glob("*.json"))) == 2 * len(s.cells)
    # Same seed => same numbers.
    pd.testing.assert_frame_equal(_values(new.table), _values(first.table))


def test_settings_become_columns_and_stored_floats_round_trip(tmp_path):
    s = _grid(xs=(0.1, 1 / 3))
    res = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    direct = [sw.example_cell(**c.settings)["value"].iloc[0] for c in s.cells]
    assert res.table["value"].tolist() == direct  # exact: stored with %.17g
    assert res.table["x"].tolist() == [0.1, 1 / 3]
    assert set(res.table.columns) >= {"cell", "quantity", "value", "se", "n", "x", "seed", "sleep_s"}


def test_code_version_hashes_sources():
    v = sw.code_version()
    assert len(v) == 16 and v == sw.code_version()
    assert sw.code_version(("asyncgrpo",)) != v
    with pytest.raises(ValueError, match="code package"):
        sw.code_version(("no_such_package_xyz",))


def test_half_written_cell_counts_as_missing(tmp_path):
    s = _grid(xs=(0.0, 1.0))
    sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    d = tmp_path / "t"
    victim = next(d.glob("*.json"))
    victim.unlink()  # as if killed between the .parquet and the .json
    (d / ".junk.csv.123.tmp").write_text("half")  # as if killed while writing a temporary file
    with pytest.warns(sw.SweepCacheWarning, match="data file without metadata"):
        res = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    assert len(res.computed) == 1 and len(res.cached) == 1
    assert len(res.table) == 2


def test_failed_cell_raises_after_storing_the_others(tmp_path):
    s = sw.Sweep("f", FN, (sw.Cell("ok", {"x": 0.0, "n": 5, "seed": 1}), sw.Cell("bad", {"x": 0.0, "n": -1, "seed": 1})))
    with pytest.raises(sw.SweepError, match="bad"):
        sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    assert sw.load_cells(s, tmp_path, version="v").keys() == {"ok"}


def test_local_process_backend_matches_serial(tmp_path):
    s = _grid()
    ser = sw.run_sweep(s, root=tmp_path / "a", backend="serial", progress=False, version="v")
    loc = sw.run_sweep(s, root=tmp_path / "b", backend="local", n_workers=2, progress=False, version="v")
    pd.testing.assert_frame_equal(_values(loc.table), _values(ser.table))
    assert set(loc.table["pid"]) .isdisjoint({os.getpid()})  # computed in worker processes


def test_local_workers_are_reused_across_sweeps_and_replaced_when_needed(tmp_path, monkeypatch):
    """One worker pool per driver process: a second sweep runs on the same workers; a changed
    environment or code version (what workers fixed at spawn or import) or a dead worker gives fresh
    ones, with the same numbers."""
    from sweep import engine

    def workers():
        return set(engine._POOL["pool"]._processes)

    engine.shutdown_local_pool()
    a = sw.run_sweep(_grid("r1"), root=tmp_path, backend="local", n_workers=2, progress=False, version="v")
    first = workers()
    assert set(a.table["pid"]) <= first
    b = sw.run_sweep(_grid("r2", xs=(4.0, 5.0, 6.0)), root=tmp_path, backend="local", n_workers=2, progress=False,
                     version="v")
    assert workers() == first and set(b.table["pid"]) <= first
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    c = sw.run_sweep(_grid("r3"), root=tmp_path, backend="local", n_workers=2, progress=False, version="v")
    assert workers().isdisjoint(first) and set(c.table["pid"]) <= workers()
    pd.testing.assert_frame_equal(_values(c.table).drop(columns="cell"), _values(a.table).drop(columns="cell"))
    third = workers()
    e = sw.run_sweep(_grid("r5"), root=tmp_path, backend="local", n_workers=2, progress=False, version="v2")
    assert workers().isdisjoint(third)  # edited code: the old workers hold the old modules
    for pid in workers():  # kill the workers: the next sweep must not fail on a broken pool
        os.kill(int(pid), signal.SIGKILL)
    d = sw.run_sweep(_grid("r4"), root=tmp_path, backend="local", n_workers=2, progress=False, version="v2")
    for t in (d, e):
        pd.testing.assert_frame_equal(_values(t.table).drop(columns="cell"), _values(a.table).drop(columns="cell"))
    engine.shutdown_local_pool()


def test_a_forked_child_runs_local_sweeps_on_its_own_workers(tmp_path):
    """A child forked after a local sweep inherits the pool record but not its manager thread: it must
    start its own workers rather than queue work nobody reads (it hung before)."""
    import multiprocessing as mp

    from sweep import engine

    engine.shutdown_local_pool()
    sw.run_sweep(_grid("p1"), root=tmp_path, backend="local", n_workers=2, progress=False, version="v")
    child = mp.get_context("fork").Process(target=_child_sweep, args=(str(tmp_path),))
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    engine.shutdown_local_pool()
    assert not alive, "the forked child's local sweep hung"
    assert child.exitcode == 0
    assert len(sw.load_cells(_grid("p2"), tmp_path, version="v")) == 4


def _child_sweep(root: str) -> None:
    sw.run_sweep(_grid("p2"), root=root, backend="local", n_workers=2, progress=False, version="v")


def test_a_worker_killed_mid_sweep_is_replaced_and_its_cells_rerun(tmp_path, monkeypatch):
    """A worker that dies while computing (here: the first cell exits its process) breaks the pool; the
    cells it took are run once more on fresh workers and the sweep completes."""
    from sweep import engine

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "faults"))
    engine.shutdown_local_pool()
    s = sw.Sweep.from_grid("k", "dask_cells:dies_once_cell", {"x": [0.0, 1.0, 2.0, 3.0]},
                           fixed={"marker": str(tmp_path / "died")})
    res = sw.run_sweep(s, root=tmp_path / "c", backend="local", n_workers=2, progress=False, version="v")
    assert (tmp_path / "died").exists()
    assert sorted(res.table["x"]) == [0.0, 1.0, 2.0, 3.0]
    engine.shutdown_local_pool()


def test_interrupted_sweep_resumes_without_recomputing(tmp_path):
    """Kill a running sweep (SIGKILL to its whole process group), then resume in-process."""
    n_cells = 10
    script = textwrap.dedent(
        f"""
        import sys; sys.path.insert(0, {str(REPO)!r})
        import sweep as sw
        s = sw.Sweep.from_grid("t", {FN!r}, {{"x": [float(i) for i in range({n_cells})]}},
                               fixed={{"n": 50, "sleep_s": 0.25}}, seed=7)
        sw.run_sweep(s, root={str(tmp_path)!r}, backend="local", n_workers=2, progress=False, version="v")
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    d = tmp_path / "t"
    deadline = time.monotonic() + 60
    try:
        while len(list(d.glob("*.json"))) < 3:
            assert proc.poll() is None, "the sweep ended before it could be interrupted"
            assert time.monotonic() < deadline, "the sweep made no progress"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the group we started: driver and its pool workers
        proc.wait()
    done_before = {json.loads(p.read_text())["cell"] for p in d.glob("*.json")}
    assert 3 <= len(done_before) < n_cells
    s = sw.Sweep.from_grid("t", FN, {"x": [float(i) for i in range(n_cells)]}, fixed={"n": 50, "sleep_s": 0.0}, seed=7)
    # Same cells but sleep_s differs, so use the exact settings the killed run used:
    s = sw.Sweep("t", FN, tuple(sw.Cell(c.id, {**c.settings, "sleep_s": 0.25}) for c in s.cells))
    res = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    assert set(res.cached) == done_before
    assert set(res.computed) == {c.id for c in s.cells} - done_before
    assert len(list(d.glob("*.json"))) == n_cells and len(list(d.glob("*.parquet"))) == n_cells
    _assert_matches_direct(res.table, s)


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_dask_local_cluster_matches_local_backend(tmp_path, dask_client):
    s = _grid()
    loc = sw.run_sweep(s, root=tmp_path / "a", backend="local", n_workers=2, progress=False, version="v")
    das = sw.run_sweep(s, root=tmp_path / "b", client=dask_client, progress=False, version="v")
    pd.testing.assert_frame_equal(_values(das.table), _values(loc.table))
    worker_pids = set(dask_client.run(os.getpid).values())
    assert set(das.table["pid"]) <= worker_pids


def test_dask_worker_killed_mid_sweep_loses_no_cell(tmp_path, dask_client):
    s = _grid(xs=[float(i) for i in range(8)], sleep_s=0.4)
    killed: dict = {}

    def kill_busy_worker(cell, n_done):
        if killed:
            return
        pids = dask_client.run(os.getpid)
        busy = {w: keys for w, keys in dask_client.processing().items() if keys}
        addr = sorted(busy)[0]
        killed.update(pid=pids[addr], keys=set(busy[addr]))
        os.kill(pids[addr], signal.SIGKILL)  # the worker process itself; its nanny restarts it

    res = sw.run_sweep(s, root=tmp_path, client=dask_client, progress=False, version="v", on_result=kill_busy_worker)
    assert killed, "no worker was killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)
    assert len(res.computed) == len(s.cells) and len(list((tmp_path / "t").glob("*.json"))) == len(s.cells)
    # The cells that were running on the killed worker were recomputed by another process.
    keys = {f"cell-t-{sw.cell_key(FN, c.settings, 'v')}": c.id for c in s.cells}
    lost = {keys[k] for k in killed["keys"] if k in keys}
    assert lost, "the killed worker held no cell"
    assert (res.table.set_index("cell").loc[sorted(lost), "pid"] != killed["pid"]).all()
    _assert_matches_direct(res.table, s)


def test_code_packages_are_the_callers_choice(tmp_path):
    """The core names no upper layer: the caller says which packages' sources key the cells."""
    s = _grid(xs=(0.0,))
    only_core = sw.sweep_version(FN, ("asyncgrpo",))
    assert only_core.startswith(sw.code_version(("asyncgrpo",)) + "-")  # plus the cell module's own hash
    assert sw.sweep_version(FN, ("sweep",)) == sw.code_version(("sweep",))  # fn inside the listed package
    assert sw.sweep_version(FN) != only_core
    a = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, code_packages=("asyncgrpo",))
    b = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, code_packages=("asyncgrpo",))
    assert a.version == only_core and b.computed == () and b.version == a.version
    c = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, code_packages=("asyncgrpo", "theory"))
    assert c.computed == (s.cells[0].id,)  # another code version is another key
