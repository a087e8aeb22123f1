"""Cell functions for the Dask fault tests (imported by worker processes, so not a test module)."""
from __future__ import annotations

import os

import pandas as pd


def gil_cell(x: float, n: int) -> pd.DataFrame:
    """Hold the GIL for the whole cell (one C-level loop), like a long Numba kernel without ``nogil``."""
    total = sum(range(int(n)))
    return pd.DataFrame({"x": [x], "total": [total], "pid": [os.getpid()]})
