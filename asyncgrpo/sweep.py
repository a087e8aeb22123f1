"""Sweeps as data: a grid of settings, one stored table per cell, resume, local or Dask execution.

A :class:`Sweep` is a table of settings (STYLE §5). Each :class:`Cell` has a string id and a
settings dict; the cell function ``fn(**settings) -> pandas.DataFrame`` computes one grid point
(one call of a ``simulate``/``theory`` function) and returns a tidy table. The engine is the only
place in the project that handles parallelism, caching and resume:

- **Storage.** A finished cell is stored as ``<root>/<sweep-id>/<key>.csv`` plus ``<key>.json``
  (settings, cell id, code version, git commit, seconds). ``key`` is a SHA-256 of the cell function's
  name, its settings and the *code version* (a hash of the source files of the packages that compute
  cells, see :func:`code_version`), so changing the code recomputes, changing a plot does not.
  Both files are written to a temporary name and renamed (atomic on POSIX); the ``.json`` is written
  last and marks the cell as done. A kill at any moment leaves either a finished cell or none.
- **Resume.** Re-running a sweep loads the finished cells and computes only the missing ones, so an
  interrupted sweep (Ctrl-C, killed process, killed worker) loses nothing and duplicates nothing
  (one file per key).
- **Backends.** ``"serial"`` (in-process), ``"local"`` (a process pool, the default) and ``"dask"``
  (a ``distributed`` cluster: ``scheduler="tcp://host:port"`` or ``dask_local=n`` worker processes).
  Workers only compute; the driver writes every cell, so no shared file system is needed and a
  worker killed mid-cell just makes Dask recompute that cell elsewhere.
- **Randomness.** The seed is a setting like any other; :func:`cell_seed` derives a stable per-cell
  seed from a base seed and the cell id, so results do not depend on the backend or the order.

Example::

    >>> sw = Sweep.from_grid("demo", "asyncgrpo.sweep:example_cell", {"x": [1.0, 2.0], "n": [100]},
    ...                      seed=0)
    >>> table = run_sweep(sw, backend="serial").table
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "Cell",
    "Sweep",
    "SweepResult",
    "SweepError",
    "run_sweep",
    "code_version",
    "cell_seed",
    "cell_key",
    "load_cells",
    "example_cell",
    "DEFAULT_ROOT",
    "DEFAULT_CODE_PACKAGES",
]

#: Where cells are stored unless told otherwise (git-ignored ``results/``).
DEFAULT_ROOT = Path("results") / "cells"
#: Packages whose source defines what a cell computes; their hash is the code version.
DEFAULT_CODE_PACKAGES: tuple[str, ...] = ("asyncgrpo", "simulate", "theory")
BACKENDS = ("serial", "local", "dask")

# Settings must survive a JSON round trip unchanged, so that the key computed now equals the key
# computed on resume; these are the value types for which that holds.
_SCALARS = (str, int, float, bool, type(None))


class SweepError(RuntimeError):
    """Some cells failed; the finished ones are stored and a re-run computes only the rest."""


def _check_settings(settings: Mapping, where: str) -> dict:
    out = {}
    for k, v in settings.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"{where}: setting names must be non-empty strings, got {k!r}")
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, (list, tuple)):
            v = [x.item() if isinstance(x, np.generic) else x for x in v]
            if not all(isinstance(x, _SCALARS) for x in v):
                raise ValueError(f"{where}: setting {k!r} must hold str/int/float/bool/None values, got {v!r}")
        elif not isinstance(v, _SCALARS):
            raise ValueError(
                f"{where}: setting {k!r} must be str, int, float, bool, None or a list of them, got {type(v).__name__}"
            )
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{where}: setting {k!r} must be finite, got {v!r}")
        out[k] = v
    return out


@dataclass(frozen=True)
class Cell:
    """One grid point: a string ``id`` and the keyword ``settings`` passed to the cell function."""

    id: str
    settings: Mapping = field(hash=False)

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"cell id must be a non-empty string, got {self.id!r}")
        object.__setattr__(self, "settings", _check_settings(dict(self.settings), f"cell {self.id!r}"))


def _fn_ref(fn: str | Callable) -> str:
    if isinstance(fn, str):
        if ":" not in fn:
            raise ValueError(f"fn must be 'package.module:function' or a module-level function, got {fn!r}")
        return fn
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not mod or mod == "__main__" or "<" in qual:
        raise ValueError(
            f"fn must be a module-level function importable by workers (not a lambda, a closure or __main__), got {fn!r}"
        )
    return f"{mod}:{qual}"


def _resolve(ref: str) -> Callable:
    mod, _, qual = ref.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Sweep:
    """A sweep: ``id`` (directory name), cell function ``fn`` (``"module:function"``) and its cells.

    ``fn(**cell.settings)`` must return a ``pandas.DataFrame`` (a tidy table) and must not depend on
    anything but its settings (no global random state: pass the seed as a setting).
    """

    id: str
    fn: str
    cells: tuple[Cell, ...]

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id or "/" in self.id or self.id.startswith("."):
            raise ValueError(f"sweep id must be a non-empty string without '/', got {self.id!r}")
        object.__setattr__(self, "fn", _fn_ref(self.fn))
        cells = tuple(self.cells)
        if not cells:
            raise ValueError(f"sweep {self.id!r} needs at least one cell")
        ids = [c.id for c in cells]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"sweep {self.id!r}: cell ids must be unique, duplicated: {dup[:5]}")
        object.__setattr__(self, "cells", cells)

    @classmethod
    def from_grid(
        cls,
        sweep_id: str,
        fn: str | Callable,
        grid: Mapping[str, Iterable],
        *,
        fixed: Mapping | None = None,
        seed: int | None = None,
        seed_key: str = "seed",
    ) -> Sweep:
        """The Cartesian product of ``grid`` (name → values), plus ``fixed`` settings.

        Cell ids read ``name=value,name=value`` in grid order. With ``seed`` given, each cell gets
        ``settings[seed_key] = cell_seed(seed, cell_id)``: distinct, stable, order-independent.
        """
        names = list(grid)
        values = [list(grid[n]) for n in names]
        if any(len(v) == 0 for v in values):
            raise ValueError(f"sweep {sweep_id!r}: every grid axis needs at least one value")
        cells = []
        for combo in itertools.product(*values):
            s = dict(zip(names, combo, strict=True))
            cid = ",".join(f"{n}={_fmt(v)}" for n, v in s.items()) or "cell"
            s.update(fixed or {})
            if seed is not None:
                s[seed_key] = cell_seed(seed, cid)
            cells.append(Cell(cid, s))
        return cls(sweep_id, fn, tuple(cells))

    def frame(self) -> pd.DataFrame:
        """The sweep as a table: one row per cell, columns ``cell`` and every setting."""
        return pd.DataFrame([{"cell": c.id, **c.settings} for c in self.cells])

    def subset(self, ids: Iterable[str]) -> Sweep:
        """The same sweep restricted to the cells ``ids`` (e.g. a small CI subset)."""
        keep = set(ids)
        unknown = keep - {c.id for c in self.cells}
        if unknown:
            raise ValueError(f"sweep {self.id!r} has no cells {sorted(unknown)[:5]}")
        return Sweep(self.id, self.fn, tuple(c for c in self.cells if c.id in keep))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ";".join(_fmt(x) for x in v) + "]"
    return str(v)


def cell_seed(base_seed: int, cell_id: str) -> int:
    """A stable 31-bit seed for ``cell_id`` under ``base_seed`` (SHA-256, not Python's salted ``hash``)."""
    if isinstance(base_seed, bool) or not isinstance(base_seed, (int, np.integer)) or base_seed < 0:
        raise ValueError(f"base_seed must be an integer >= 0, got {base_seed!r}")
    h = hashlib.sha256(f"{int(base_seed)}:{cell_id}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


_VERSION_CACHE: dict[tuple[str, ...], str] = {}


def code_version(packages: Iterable[str] = DEFAULT_CODE_PACKAGES) -> str:
    """SHA-256 (16 hex digits) of every ``.py`` file of ``packages`` (relative path + bytes).

    This, not the git commit, keys the cells: it also covers uncommitted edits, and it ignores
    changes outside the code that computes cells (plots, docs).
    """
    pk = tuple(packages)
    if pk in _VERSION_CACHE:
        return _VERSION_CACHE[pk]
    h = hashlib.sha256()
    for name in pk:
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ValueError(f"code package {name!r} cannot be imported")
        if spec.submodule_search_locations:
            base = Path(next(iter(spec.submodule_search_locations)))
            files = sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)
            root = base.parent
        else:
            files, root = [Path(spec.origin)], Path(spec.origin).parent
        for p in files:
            h.update(str(p.relative_to(root)).encode())
            h.update(b"\0")
            h.update(p.read_bytes())
            h.update(b"\0")
    _VERSION_CACHE[pk] = h.hexdigest()[:16]
    return _VERSION_CACHE[pk]


def _sweep_version(fn_ref: str) -> str:
    """:func:`code_version` plus the source of the cell function's own module (it may live elsewhere)."""
    mod = fn_ref.partition(":")[0]
    pkg = mod.split(".")[0]
    if pkg in DEFAULT_CODE_PACKAGES:
        return code_version()
    spec = importlib.util.find_spec(mod)
    src = Path(spec.origin).read_bytes() if spec is not None and spec.origin else mod.encode()
    return f"{code_version()}-{hashlib.sha256(src).hexdigest()[:8]}"


def git_commit() -> str:
    """The current git commit (with ``-dirty`` if the tree has changes), or ``"unknown"``."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cell_key(fn_ref: str, settings: Mapping, version: str) -> str:
    """``sha256(fn, sorted settings, code version)`` as 24 hex digits: the cell's file name."""
    payload = json.dumps({"fn": fn_ref, "settings": settings, "version": version}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _store(directory: Path, key: str, cell: Cell, table: pd.DataFrame, meta: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    # %.17g: floats round-trip exactly, so a stored cell equals the computed one.
    _atomic_write(directory / f"{key}.csv", lambda p: table.to_csv(p, index=False, float_format="%.17g"))
    # The .json is written last: its presence is what marks the cell as finished.
    _atomic_write(
        directory / f"{key}.json",
        lambda p: p.write_text(json.dumps({"cell": cell.id, "settings": cell.settings, **meta}, indent=1)),
    )


def _load(directory: Path, key: str) -> pd.DataFrame | None:
    if not (directory / f"{key}.json").exists():
        return None
    try:
        return pd.read_csv(directory / f"{key}.csv")
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except FileNotFoundError:
        return None


def _compute(fn_ref: str, settings: dict) -> tuple[pd.DataFrame, float]:
    """Run one cell in whatever process the backend chose; returns (table, seconds)."""
    t0 = time.perf_counter()
    table = _resolve(fn_ref)(**settings)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"cell function {fn_ref} must return a pandas.DataFrame, got {type(table).__name__}")
    return table, time.perf_counter() - t0


@dataclass(frozen=True)
class SweepResult:
    """Outcome of :func:`run_sweep`: the tidy ``table`` and which cells were computed or loaded."""

    sweep_id: str
    table: pd.DataFrame
    computed: tuple[str, ...]
    cached: tuple[str, ...]
    directory: Path
    version: str
    seconds: float


def _annotate(table: pd.DataFrame, cell: Cell) -> pd.DataFrame:
    t = table.copy()
    t.insert(0, "cell", cell.id)
    # Settings the cell's own table does not report become columns, so analysis can group by them.
    for k, v in cell.settings.items():
        if k not in t.columns:
            t[k] = json.dumps(v) if isinstance(v, list) else v
    return t


def load_cells(sweep: Sweep, root: str | Path = DEFAULT_ROOT, *, version: str | None = None) -> dict[str, pd.DataFrame]:
    """The finished cells of ``sweep`` already stored under ``root``: ``{cell id: table}``."""
    version = _sweep_version(sweep.fn) if version is None else version
    directory = Path(root) / sweep.id
    out = {}
    for c in sweep.cells:
        t = _load(directory, cell_key(sweep.fn, c.settings, version))
        if t is not None:
            out[c.id] = t
    return out


def run_sweep(
    sweep: Sweep,
    *,
    root: str | Path = DEFAULT_ROOT,
    backend: str = "local",
    n_workers: int | None = None,
    scheduler: str | None = None,
    dask_local: int | None = None,
    client=None,
    version: str | None = None,
    progress: bool = True,
    on_result: Callable[[Cell, int], None] | None = None,
) -> SweepResult:
    """Compute the missing cells of ``sweep`` and return every cell's table, concatenated.

    ``backend``: ``"serial"``, ``"local"`` (``n_workers`` processes, default the CPU count) or
    ``"dask"`` (an existing ``client``, or ``scheduler="tcp://host:port"``, or a
    ``LocalCluster`` of ``dask_local`` processes). Giving ``scheduler``/``dask_local``/``client``
    selects ``"dask"``. ``version`` overrides :func:`code_version`. ``on_result(cell, n_done)`` is
    called in the driver after each computed cell is stored. The table has a ``cell`` column and
    the settings as columns (when the cell's table does not already hold them).

    Raises :class:`SweepError` after the run if cells failed; the others are stored.
    """
    if scheduler is not None or dask_local is not None or client is not None:
        backend = "dask"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if n_workers is not None and (isinstance(n_workers, bool) or int(n_workers) < 1):
        raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
    if dask_local is not None and (isinstance(dask_local, bool) or int(dask_local) < 1):
        raise ValueError(f"dask_local must be an integer >= 1 (number of worker processes), got {dask_local!r}")
    t0 = time.perf_counter()
    version = _sweep_version(sweep.fn) if version is None else version
    directory = Path(root) / sweep.id
    keys = {c.id: cell_key(sweep.fn, c.settings, version) for c in sweep.cells}
    tables: dict[str, pd.DataFrame] = {}
    for c in sweep.cells:
        t = _load(directory, keys[c.id])
        if t is not None:
            tables[c.id] = t
    cached = tuple(c.id for c in sweep.cells if c.id in tables)
    todo = [c for c in sweep.cells if c.id not in tables]
    computed: list[str] = []
    failures: dict[str, str] = {}
    commit = git_commit() if todo else "unknown"

    from tqdm.auto import tqdm

    bar = tqdm(
        total=len(sweep.cells), initial=len(cached), desc=f"sweep {sweep.id}", unit="cell", disable=not progress,
        leave=False,
    )

    def finish(cell: Cell, table: pd.DataFrame, seconds: float) -> None:
        meta = {"fn": sweep.fn, "version": version, "git_commit": commit, "seconds": seconds, "key": keys[cell.id]}
        _store(directory, keys[cell.id], cell, table, meta)
        # Re-read what was stored so that every backend returns byte-identical tables.
        tables[cell.id] = _load(directory, keys[cell.id])
        computed.append(cell.id)
        bar.update(1)
        if on_result is not None:
            on_result(cell, len(computed))

    try:
        if todo:
            if backend == "dask":
                _run_dask(sweep, todo, keys, finish, failures, client=client, scheduler=scheduler, n_local=dask_local)
            elif backend == "local" and int(n_workers or os.cpu_count() or 1) > 1 and len(todo) > 1:
                _run_local(sweep.fn, todo, n_workers, finish, failures)
            else:  # serial, or local with one worker or one cell: no pool to start
                for c in todo:
                    try:
                        finish(c, *_compute(sweep.fn, c.settings))
                    except Exception as exc:  # noqa: BLE001 — recorded and re-raised as SweepError
                        failures[c.id] = f"{type(exc).__name__}: {exc}"
    finally:
        bar.close()
    if failures:
        lines = "\n".join(f"  {k}: {v}" for k, v in list(failures.items())[:10])
        raise SweepError(
            f"sweep {sweep.id!r}: {len(failures)} of {len(todo)} cells failed ({len(computed)} stored; "
            f"re-run to retry only the failed ones):\n{lines}"
        )
    frames = [_annotate(tables[c.id], c) for c in sweep.cells]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return SweepResult(sweep.id, table, tuple(computed), cached, directory, version, time.perf_counter() - t0)


def _run_local(fn_ref, todo, n_workers, finish, failures) -> None:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    n = min(int(n_workers or os.cpu_count() or 1), len(todo))
    # spawn, not fork: the driver may hold threads (tqdm, torch, Numba's pool) that fork would copy
    # in a locked state; workers re-import the cell function from its module.
    with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as pool:
        pending = {pool.submit(_compute, fn_ref, c.settings): c for c in todo}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    c = pending.pop(fut)
                    try:
                        table, seconds = fut.result()
                    except Exception as exc:  # noqa: BLE001
                        failures[c.id] = f"{type(exc).__name__}: {exc}"
                        continue
                    finish(c, table, seconds)
        except BaseException:
            # Ctrl-C: drop queued cells now; finished ones are already stored.
            for fut in pending:
                fut.cancel()
            raise


def _run_dask(sweep, todo, keys, finish, failures, *, client, scheduler, n_local) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:  # pragma: no cover — depends on the install
        raise ValueError("the dask backend needs the 'dask' extra: pip install 'asyncgrpo[dask]'") from exc
    with contextlib.ExitStack() as stack:
        if client is None:
            if scheduler is not None:
                client = stack.enter_context(Client(scheduler))
            else:
                cluster = stack.enter_context(
                    LocalCluster(n_workers=int(n_local or 2), threads_per_worker=1, processes=True,
                                 dashboard_address=None)
                )
                client = stack.enter_context(Client(cluster))
        by_key = {}
        futures = []
        for c in todo:
            # pure=False plus a unique key: Dask must not merge or skip cells on its own; caching is ours.
            fut = client.submit(_compute, sweep.fn, c.settings, key=f"cell-{sweep.id}-{keys[c.id]}", pure=False,
                                retries=2)
            by_key[fut.key] = c
            futures.append(fut)
        try:
            for fut in as_completed(futures):
                c = by_key[fut.key]
                try:
                    table, seconds = fut.result()
                except Exception as exc:  # noqa: BLE001 — includes KilledWorker after repeated crashes
                    failures[c.id] = f"{type(exc).__name__}: {exc}"
                    continue
                finish(c, table, seconds)
                fut.release()
        except BaseException:
            client.cancel(futures)
            raise


def example_cell(x: float, n: int, seed: int, sleep_s: float = 0.0) -> pd.DataFrame:
    """A cheap documented cell for examples and tests: the sample mean of ``n`` draws of ``N(x, 1)``.

    Returns a tidy row (``quantity="mean"``, ``value``, ``se = 1/√n``, ``n``) and the worker's pid,
    so tests can see which process computed it; ``sleep_s`` stretches it to exercise resume and
    worker loss.
    """
    if sleep_s:
        time.sleep(float(sleep_s))
    rng = np.random.default_rng(seed)
    draws = rng.normal(x, 1.0, size=int(n))
    return pd.DataFrame(
        {"quantity": ["mean"], "value": [float(draws.mean())], "se": [1.0 / math.sqrt(n)], "n": [int(n)],
         "pid": [os.getpid()]}
    )


def main(argv: list[str] | None = None) -> int:  # pragma: no cover — thin CLI for inspection
    """``python -m asyncgrpo.sweep ROOT``: list stored sweeps and their number of finished cells."""
    root = Path(argv[0] if argv else (sys.argv[1] if len(sys.argv) > 1 else DEFAULT_ROOT))
    for d in sorted(p for p in root.glob("*") if p.is_dir()):
        print(f"{d.name}: {len(list(d.glob('*.json')))} cells")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
