"""Sweeps as data: a grid of settings, one verified stored table per cell, resume, local or Dask execution.

The project's one sweep engine. It sits above the estimator core (``asyncgrpo`` never imports it)
and runs cell functions from any layer (``simulate``, ``theory``, ``figures``, notebooks).

A :class:`Sweep` is a table of settings. Each :class:`Cell` has a string id and a settings dict;
the cell function ``fn(**settings) -> pandas.DataFrame`` computes one grid point and returns a
tidy table. The engine is the only place that handles parallelism, caching and resume:

- **Storage** (:mod:`sweep.cache`). A finished cell is ``<root>/<sweep-id>/<key>.parquet`` plus
  ``<key>.json`` (settings, cell id, code version, git commit, seconds, row count and SHA-256 of
  the ``.parquet``; a typed store, so a cell reads back equal to what was written). ``key`` is a SHA-256 of the cell function's name, its settings and the *code
  version* (a hash of the sources of the code packages, passed by the caller or
  :data:`DEFAULT_CODE_PACKAGES`), so changing the code recomputes, changing a plot does not.
  Both files are written to a temporary name and renamed; the ``.json`` last.
- **Verified resume.** Re-running a sweep loads the cells that verify (checksum, rows) and
  computes the rest; an empty, truncated or garbage data file, or missing or damaged metadata,
  is recomputed with a :class:`SweepCacheWarning` naming the cell. Nothing is lost or duplicated.
- **Backends.** ``"serial"``, ``"local"`` (a process pool, the default) and ``"dask"``
  (``scheduler="tcp://host:port"`` with a 5 s connect timeout, or ``dask_local=n`` worker
  processes that exit with the driver, see :mod:`sweep.dask_backend`). Workers only compute;
  the driver writes every cell.
- **Cell ids** (:func:`format_value`) are injective: near-equal floats get distinct ids.
- **Randomness.** The seed is a setting like any other; :func:`cell_seed` derives a stable per-cell
  seed from a base seed and the cell id, so results do not depend on the backend or the order.

Example::

    >>> from sweep import Sweep, run_sweep
    >>> sw = Sweep.from_grid("demo", "sweep:example_cell", {"x": [1.0, 2.0], "n": [100]}, seed=0)
    >>> table = run_sweep(sw, backend="serial").table

``python -m sweep --help`` lists and verifies stored sweeps.
"""
from sweep.cache import (
    _VERSION_CACHE,
    DEFAULT_CODE_PACKAGES,
    DEFAULT_ROOT,
    SweepCacheWarning,
    cell_key,
    code_version,
    git_commit,
    sweep_version,
)
from sweep import dask_backend
from sweep.engine import (
    BACKENDS,
    Cell,
    Sweep,
    SweepError,
    SweepResult,
    cell_seed,
    example_cell,
    format_value,
    load_cells,
    run_sweep,
)

__all__ = [
    "Cell",
    "Sweep",
    "SweepResult",
    "SweepError",
    "SweepCacheWarning",
    "run_sweep",
    "code_version",
    "sweep_version",
    "git_commit",
    "cell_seed",
    "cell_key",
    "format_value",
    "load_cells",
    "example_cell",
    "BACKENDS",
    "DEFAULT_ROOT",
    "DEFAULT_CODE_PACKAGES",
    "_VERSION_CACHE",
]
