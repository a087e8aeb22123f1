"""Cell storage: code version, cell keys, atomic writes and verified reads.

A finished cell is two files in ``<root>/<sweep id>/``: ``<key>.parquet`` (the table, its index
and dtypes) and ``<key>.json`` (its metadata: settings, cell id, code version, git commit,
seconds, and the ``rows``, ``columns`` and ``sha256`` of the ``.parquet``). Parquet, not CSV: a
cell reads back equal to what was written (CSV parsing turned the strings "NA", "None", "null" and
"" into NaN, "007" into 7.0, and dropped a named index); :func:`store_cell` checks that before
writing and refuses a table that would not survive. Both files are written to a temporary name,
flushed and renamed, data first, metadata last, so a kill at any moment leaves a finished cell or a
cell that :func:`load_cell` reports as damaged. A read is trusted only if the metadata parses,
names the expected key, and the data file has the recorded checksum and row count; anything else
(empty, truncated or garbage data, missing or damaged metadata) is reported so the engine
recomputes the cell with a :class:`SweepCacheWarning` that names it. Cells of the older CSV format
count as not stored: they are recomputed (and their ``.csv`` removed) without a warning.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

#: Where cells are stored unless told otherwise (git-ignored ``results/``).
DEFAULT_ROOT = Path("results") / "cells"
#: The project's computing layers: their sources define what a cell computes, so their hash keys
#: the cells. This list lives here, above those layers, never in them; callers with other code
#: pass ``code_packages=`` (or an explicit ``version=``) to :func:`run_sweep`.
DEFAULT_CODE_PACKAGES: tuple[str, ...] = ("asyncgrpo", "simulate", "theory")
#: Bumped when the on-disk format changes; part of every metadata record.
FORMAT = "parquet-sha256-v2"
#: Earlier formats: such a cell counts as not stored and is recomputed.
OLD_FORMATS = frozenset({"csv-sha256-v1"})
#: Suffix of a cell's data file.
DATA_SUFFIX = ".parquet"


class SweepCacheWarning(UserWarning):
    """A stored cell failed verification (damaged or half-written) and is being recomputed."""


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


def sweep_version(fn_ref: str, packages: Iterable[str] | None = None) -> str:
    """The code version of a sweep whose cell function is ``fn_ref`` (``"module:function"``).

    :func:`code_version` of ``packages`` (default :data:`DEFAULT_CODE_PACKAGES`) and of the estimator plugins
    named in ``$ASYNCGRPO_ESTIMATORS`` (:func:`asyncgrpo.plugins.plugin_fingerprint`), plus the hash of
    the cell function's own module when its top-level package is not among them (a cell function
    may live in ``figures/`` or a notebook without making every plot edit recompute everything).
    """
    pk = DEFAULT_CODE_PACKAGES if packages is None else tuple(packages)
    mod = fn_ref.partition(":")[0]
    version = code_version(pk) + _plugins_version(pk)
    if mod.split(".")[0] in pk:
        return version
    spec = importlib.util.find_spec(mod)
    src = Path(spec.origin).read_bytes() if spec is not None and spec.origin else mod.encode()
    return f"{version}-{hashlib.sha256(src).hexdigest()[:8]}"


def _plugins_version(packages: tuple[str, ...]) -> str:
    """``"-p<hash>"`` of the estimator plugins' sources (``$ASYNCGRPO_ESTIMATORS``) when ``asyncgrpo`` is
    among ``packages`` and a plugin is named, else ``""``: a plugin changes what asyncgrpo computes, so an
    edit to its formula must not reuse cells computed with the old one (issue 38 item 2)."""
    if "asyncgrpo" not in packages or not os.environ.get("ASYNCGRPO_ESTIMATORS", "").strip():
        return ""  # no plugin named: nothing to add, and asyncgrpo (Numba) is not imported for nothing
    from asyncgrpo.plugins import plugin_fingerprint

    fp = plugin_fingerprint()
    if not fp:
        return ""
    return "-p" + hashlib.sha256("".join(f"{m}={d};" for m, d in sorted(fp.items())).encode()).hexdigest()[:12]


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


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is flushed (POSIX; a no-op elsewhere).
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a flushed temporary file and a rename (atomic on POSIX)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def check_writable(directory: Path) -> None:
    """Raise ``ValueError`` now, before any cell is computed, if cells cannot be stored in ``directory``."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-", delete=True):
            pass
    except OSError as exc:
        raise ValueError(
            f"sweep results root {directory} is not writable ({exc.strerror or type(exc).__name__}); "
            "choose another root (--cells) or fix its permissions"
        ) from None


def _object_columns(table: pd.DataFrame) -> list[str]:
    return [str(c) for c in table.columns if table[c].dtype == object]


def table_bytes(table: pd.DataFrame) -> bytes:
    """The stored form of a cell's table: Parquet (pyarrow) with its index and dtypes."""
    bad = [c for c in table.columns if not isinstance(c, str)]
    if bad:
        raise ValueError(f"cell table column names must be strings (Parquet), got {bad[0]!r} "
                         f"({type(bad[0]).__name__})")
    import pyarrow as pa

    buf = io.BytesIO()
    try:
        table.to_parquet(buf, engine="pyarrow", index=None)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise ValueError(f"cell table cannot be stored as Parquet: {exc}; a column must hold one type "
                         "(numbers, strings, bools or dates)") from None
    return buf.getvalue()


def _parse(data: bytes, object_columns: list) -> pd.DataFrame:
    import pyarrow.parquet as pq

    arrow = pq.read_table(io.BytesIO(data))
    table = arrow.to_pandas()
    # pandas reads Parquet strings as its str dtype; a column written as object gets its Python values
    # (None stays None) back
    for c in object_columns:
        table[c] = pd.Series(arrow.column(c).to_pylist(), dtype=object, index=table.index)
    return table


def _check_round_trip(table: pd.DataFrame, data: bytes) -> None:
    back = _parse(data, _object_columns(table))
    try:
        pd.testing.assert_frame_equal(back, table, check_exact=True)
    except AssertionError as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ValueError(f"cell table does not read back unchanged from Parquet ({detail}); store numbers, "
                         "strings, bools or dates, one type per column") from None


def store_cell(directory: Path, key: str, cell_id: str, settings: Mapping, table: pd.DataFrame, meta: dict) -> None:
    """Store one finished cell: the ``.parquet`` first, then the ``.json`` that marks it finished.

    Raises ``ValueError`` (nothing written) if the table would not read back equal to itself.
    """
    data = table_bytes(table)
    _check_round_trip(table, data)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(directory / f"{key}{DATA_SUFFIX}", data)
    record = {"cell": cell_id, "settings": dict(settings), **meta, "key": key, "format": FORMAT,
              "rows": int(len(table)), "columns": [str(c) for c in table.columns],
              "object_columns": _object_columns(table), "sha256": hashlib.sha256(data).hexdigest()}
    atomic_write_bytes(directory / f"{key}.json", json.dumps(record, indent=1).encode())
    with contextlib.suppress(OSError):
        (directory / f"{key}.csv").unlink()  # the same cell in the older CSV format, if any


def load_cell(directory: Path, key: str) -> tuple[pd.DataFrame | None, str | None]:
    """``(table, None)`` for a verified cell, ``(None, None)`` if none is stored, ``(None, why)`` if damaged."""
    meta_path, data_path = directory / f"{key}.json", directory / f"{key}{DATA_SUFFIX}"
    has_meta, has_data = meta_path.exists(), data_path.exists()
    if not has_meta and not has_data:
        return None, None
    if not has_meta:
        return None, "data file without metadata (interrupted write or deleted .json)"
    try:
        meta = json.loads(meta_path.read_text())
        rows, digest, columns = int(meta["rows"]), str(meta["sha256"]), list(meta["columns"])
        stored_key, fmt = meta.get("key"), meta.get("format")
    except (OSError, ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        return None, f"metadata unreadable or incomplete ({type(exc).__name__}: {exc})"
    if fmt in OLD_FORMATS and not has_data:
        return None, None  # a cell of the older CSV format: not stored in this one
    if fmt != FORMAT:
        return None, f"metadata of unknown format {fmt!r} (expected {FORMAT!r})"
    if stored_key != key:
        return None, f"metadata names key {stored_key!r}, expected {key!r}"
    if not has_data:
        return None, "metadata without data file"
    data = data_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != digest:
        return None, f"data file checksum mismatch ({len(data)} bytes; empty, truncated or overwritten)"
    try:
        table = _parse(data, list(meta.get("object_columns", [])))
    except Exception as exc:  # noqa: BLE001 — any failure to decode verified bytes means a damaged cell
        return None, f"data file does not parse ({type(exc).__name__})"
    if len(table) != rows or [str(c) for c in table.columns] != columns:
        return None, f"data file has {len(table)} rows and columns {list(table.columns)}, metadata says {rows} and {columns}"
    return table, None


def list_sweeps(root: Path) -> list[tuple[str, int]]:
    """``[(sweep id, number of stored cells)]`` under ``root`` (a cell = one ``.json``)."""
    return [(d.name, len(list(d.glob("*.json")))) for d in sorted(p for p in Path(root).glob("*") if p.is_dir())]


def verify_sweep_dir(directory: Path) -> dict[str, str]:
    """``{key: why}`` for every damaged cell stored in ``directory`` (empty when all verify)."""
    keys = {p.stem for p in directory.glob("*.json")} | {p.stem for p in directory.glob(f"*{DATA_SUFFIX}")}
    out = {}
    for key in sorted(keys):
        _, why = load_cell(directory, key)
        if why is not None:
            out[key] = why
    return out


__all__ = ["DEFAULT_ROOT", "DEFAULT_CODE_PACKAGES", "SweepCacheWarning", "code_version", "sweep_version",
           "git_commit", "cell_key", "check_writable", "store_cell", "load_cell", "list_sweeps", "verify_sweep_dir"]
