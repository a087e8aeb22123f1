"""Cell functions for tests/faults/test_sweep_parquet.py (imported by name, ``module:function``)."""
from __future__ import annotations

import pandas as pd


def strings_cell(x: float, seed: int) -> pd.DataFrame:
    """A user table that CSV parsing used to change: NA-like strings, a zero-padded code, a named index."""
    return pd.DataFrame(
        {"label": ["NA", "None", "null", "", "007", "nan"], "code": ["007", "0x1", "1e3", " 1", "-0", "TRUE"],
         "value": [x, -0.0, 1e-310, float("inf"), float("nan"), 0.1 + 0.2]},
        index=pd.Index([3, 1, 4, 1, 5, 9], name="trial"),
    )
