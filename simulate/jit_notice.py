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

#: Modules whose kernels the simulate commands need, with the measured cold compile time (s, quiet 2-core machine).
KERNEL_MODULES = {"simulate.training.kernel": 25, "simulate.montecarlo.kernel": 15, "simulate.instances.dp": 3}


def _cache_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    import numba

    src = Path(spec.origin)
    if numba.config.CACHE_DIR:
        # numba mirrors the source path below NUMBA_CACHE_DIR
        return Path(numba.config.CACHE_DIR) / src.parent.relative_to(src.anchor) / "__pycache__"
    return src.parent / "__pycache__"


def is_cold(module: str) -> bool:
    """True when ``module`` has no Numba cache index on disk (its kernels will compile on first use)."""
    d = _cache_dir(module)
    if d is None:
        return False
    stem = module.rsplit(".", 1)[-1]
    return not any(d.glob(f"{stem}.*.nbi"))


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
