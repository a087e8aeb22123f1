"""Sweeps as data (:class:`Sweep`, :class:`Cell`) and the driver :func:`run_sweep`.

The driver loads verified cells (:mod:`sweep.cache`), computes the missing or damaged ones on the
chosen backend and stores each result itself, so workers need no shared file system and a cell is
stored exactly once however many times a backend retried it.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sweep.compute import compute_cell, resolve  # noqa: F401  (resolve: public via sweep)
from sweep.cache import (
    DEFAULT_ROOT,
    SweepCacheWarning,
    cell_key,
    check_writable,
    git_commit,
    load_cell,
    store_cell,
    sweep_version,
)
from sweep.local_pool import _POOL, shutdown_local_pool  # noqa: F401  (public via sweep; tests read _POOL)
from sweep.local_pool import run_local as _run_local

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
            if any(isinstance(x, float) and not math.isfinite(x) for x in v):
                raise ValueError(f"{where}: setting {k!r} must hold finite numbers, got {v!r}")
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


# A bare string is safe in an id when it cannot be read as another value or split at a separator.
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.+\-]*")


def format_value(v) -> str:
    """The text of one setting inside a cell id; injective on values (numbers compared by value).

    Floats print as ``%g`` when that reads back as the same float (``0.1``, ``1e-05``) and as
    ``repr`` otherwise (``0.1000001``), so near-equal floats never share an id. Strings that could
    be read as a number, ``True``/``False``/``None`` or that hold a separator are JSON-quoted.
    """
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        short = f"{v:g}"
        return short if float(short) == v else repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ";".join(format_value(x) for x in v) + "]"
    s = str(v)
    if _BARE.fullmatch(s) and s not in {"True", "False", "None"} and not _is_number(s):
        return s
    return json.dumps(s)


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


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

        Cell ids read ``name=value,name=value`` in grid order (values by :func:`format_value`, so
        distinct values give distinct ids). With ``seed`` given, each cell gets
        ``settings[seed_key] = cell_seed(seed, cell_id)``: distinct, stable, order-independent.
        """
        names = list(grid)
        values = [list(grid[n]) for n in names]
        if any(len(v) == 0 for v in values):
            raise ValueError(f"sweep {sweep_id!r}: every grid axis needs at least one value")
        cells = []
        for combo in itertools.product(*values):
            s = _check_settings(dict(zip(names, combo, strict=True)), f"sweep {sweep_id!r}")
            cid = ",".join(f"{n}={format_value(v)}" for n, v in s.items()) or "cell"
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


def cell_seed(base_seed: int, cell_id: str) -> int:
    """A stable 31-bit seed for ``cell_id`` under ``base_seed`` (SHA-256, not Python's salted ``hash``)."""
    if isinstance(base_seed, bool) or not isinstance(base_seed, (int, np.integer)) or base_seed < 0:
        raise ValueError(f"base_seed must be an integer >= 0, got {base_seed!r}")
    h = hashlib.sha256(f"{int(base_seed)}:{cell_id}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


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


def _load_verified(sweep: Sweep, directory: Path, keys: Mapping[str, str]) -> dict[str, pd.DataFrame]:
    out = {}
    for c in sweep.cells:
        table, why = load_cell(directory, keys[c.id])
        if why is not None:
            warnings.warn(
                f"sweep {sweep.id!r}: cell {c.id!r} ({keys[c.id]}) is damaged: {why}; recomputing it",
                SweepCacheWarning,
                stacklevel=3,
            )
        elif table is not None:
            out[c.id] = table
    return out


def load_cells(
    sweep: Sweep,
    root: str | Path = DEFAULT_ROOT,
    *,
    version: str | None = None,
    code_packages: Iterable[str] | None = None,
) -> dict[str, pd.DataFrame]:
    """The verified finished cells of ``sweep`` stored under ``root``: ``{cell id: table}``.

    A damaged cell is left out with a :class:`SweepCacheWarning` naming it.
    """
    version = sweep_version(sweep.fn, code_packages) if version is None else version
    keys = {c.id: cell_key(sweep.fn, c.settings, version) for c in sweep.cells}
    return _load_verified(sweep, Path(root) / sweep.id, keys)


def _check_count(value, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


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
    code_packages: Iterable[str] | None = None,
    progress: bool = True,
    on_result: Callable[[Cell, int], None] | None = None,
) -> SweepResult:
    """Compute the missing cells of ``sweep`` and return every cell's table, concatenated.

    ``backend``: ``"serial"``, ``"local"`` (``n_workers`` processes, default the CPU count) or
    ``"dask"`` (an existing ``client``, or ``scheduler="tcp://host:port"``, or a
    ``LocalCluster`` of ``dask_local`` processes). Giving ``scheduler``/``dask_local``/``client``
    selects ``"dask"``. The code version keying the cells is ``version`` if given, else
    :func:`sweep.cache.sweep_version` of ``code_packages`` (default the project's computing
    layers). ``on_result(cell, n_done)`` is called in the driver after each computed cell is
    stored. The table has a ``cell`` column and the settings as columns (when the cell's table
    does not already hold them).

    Stored cells are verified (checksum, row count); a damaged one is recomputed with a
    :class:`SweepCacheWarning`. An unwritable ``root`` raises ``ValueError`` before any cell is
    computed. Raises :class:`SweepError` after the run if cells failed; the others are stored.
    """
    if scheduler is not None or dask_local is not None or client is not None:
        backend = "dask"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    _check_count(n_workers, "n_workers")
    if dask_local is not None:
        _check_count(dask_local, "dask_local (number of worker processes)")
    t0 = time.perf_counter()
    version = sweep_version(sweep.fn, code_packages) if version is None else version
    directory = Path(root) / sweep.id
    keys = {c.id: cell_key(sweep.fn, c.settings, version) for c in sweep.cells}
    tables = _load_verified(sweep, directory, keys)
    cached = tuple(c.id for c in sweep.cells if c.id in tables)
    todo = [c for c in sweep.cells if c.id not in tables]
    computed: list[str] = []
    failures: dict[str, str] = {}
    if todo:
        check_writable(directory)  # fail now, not after hours of computing
    commit = git_commit() if todo else "unknown"

    from asyncgrpo.progress import progress as _progress

    bar = _progress(
        total=len(sweep.cells), initial=len(cached), desc=f"sweep {sweep.id}", unit="cell", disable=not progress,
        leave=False,
    )

    def finish(cell: Cell, table: pd.DataFrame, seconds: float) -> None:
        if cell.id in tables:  # a backend delivered a cell twice: the first stored copy stands
            return
        meta = {"fn": sweep.fn, "version": version, "git_commit": commit, "seconds": seconds}
        store_cell(directory, keys[cell.id], cell.id, cell.settings, table, meta)
        # Re-read what was stored so that every backend returns byte-identical tables.
        stored, why = load_cell(directory, keys[cell.id])
        if stored is None:
            raise SweepError(f"sweep {sweep.id!r}: cell {cell.id!r} did not verify right after it was stored: {why}")
        tables[cell.id] = stored
        computed.append(cell.id)
        bar.update(1)
        if on_result is not None:
            on_result(cell, len(computed))

    try:
        if todo:
            if backend == "dask":
                from sweep.dask_backend import run_dask

                run_dask(sweep, todo, keys, finish, failures, client=client, scheduler=scheduler, n_local=dask_local)
            elif backend == "local" and int(n_workers or os.cpu_count() or 1) > 1 and len(todo) > 1:
                _run_local(sweep.fn, todo, n_workers, finish, failures, version)
            else:  # serial, or local with one worker or one cell: no pool to start
                for c in todo:
                    try:
                        finish(c, *compute_cell(sweep.fn, c.settings))
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
