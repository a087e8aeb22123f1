"""Cell functions for the Dask fault tests (imported by worker processes, so not a test module)."""
from __future__ import annotations

import os

import pandas as pd


def gil_cell(x: float, n: int) -> pd.DataFrame:
    """Hold the GIL for the whole cell (one C-level loop), like a long Numba kernel without ``nogil``."""
    total = sum(range(int(n)))
    return pd.DataFrame({"x": [x], "total": [total], "pid": [os.getpid()]})


def dies_once_cell(x: float, marker: str) -> pd.DataFrame:
    """Kill its own worker process the first time any cell runs (``marker`` file absent), like an
    out-of-memory kill; afterwards return ``x``."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return pd.DataFrame({"x": [x], "pid": [os.getpid()]})
    os.close(fd)
    os._exit(1)
