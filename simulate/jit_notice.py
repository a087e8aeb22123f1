"""Say so when the first run of a command must compile its Numba kernels (docs/THEORY.md is unaffected).

Every simulation kernel is ``@njit(cache=True)``: the first process on a machine compiles it (tens of
seconds, longer on a loaded machine) and writes the machine code next to the source (or under
``NUMBA_CACHE_DIR``); later processes load it in about a second. :func:`announce_if_cold` prints one
line before that silent first compile, so a new user knows the wait is expected and happens once.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: Modules whose kernels the simulate commands need, with the measured cold compile time (s, 2 cores).
KERNEL_MODULES = {"simulate.training.kernel": 35, "simulate.montecarlo.kernel": 15, "simulate.instances.dp": 3}
#: The kernels each command compiles.
COMMAND_MODULES = {"train": ("simulate.training.kernel", "simulate.instances.dp"),
                   "protocol": ("simulate.training.kernel", "simulate.instances.dp"),
                   "bias": ("simulate.montecarlo.kernel", "simulate.instances.dp")}


def _cache_dirs(module: str) -> list[Path]:
    """Where Numba keeps ``module``'s cache: ``__pycache__`` next to the source, or with
    ``NUMBA_CACHE_DIR`` set, ``<dir>/<package folder>_<hash of its path>/``."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return []
    import numba

    src = Path(spec.origin)
    if numba.config.CACHE_DIR:
        return sorted(Path(numba.config.CACHE_DIR).glob(f"{src.parent.name}_*"))
    return [src.parent / "__pycache__"]


def is_cold(module: str) -> bool:
    """True when ``module`` has no Numba cache index on disk (its kernels will compile on first use)."""
    stem = module.rsplit(".", 1)[-1]
    return not any(any(d.glob(f"{stem}.*.nbi")) for d in _cache_dirs(module))


def announce_if_cold(modules=tuple(KERNEL_MODULES), stream=None) -> bool:
    """Print ``compiling simulation kernels, once, about N s …`` if any of ``modules`` is cold; returns
    whether it printed. ``N`` sums the measured cold times of the cold modules."""
    cold = [m for m in modules if is_cold(m)]
    if not cold:
        return False
    secs = sum(KERNEL_MODULES.get(m, 10) for m in cold)
    print(f"compiling simulation kernels, once, about {secs} s on a quiet 2-core machine (later runs load the cache)",
          file=stream or sys.stderr, flush=True)
    return True
