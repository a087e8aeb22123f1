"""Running one cell: resolve the cell function by name and call it (the code every backend's worker runs).

Its own module so that the engine and the Dask backend both import it and not each other
(engine → dask_backend → compute, engine → compute).
"""
from __future__ import annotations

import importlib
import time
from typing import Callable

import pandas as pd


def resolve(ref: str) -> Callable:
    """The function named by ``"package.module:function"``."""
    mod, _, qual = ref.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def compute_cell(fn_ref: str, settings: dict) -> tuple[pd.DataFrame, float]:
    """Run one cell in whatever process the backend chose; returns (table, seconds)."""
    t0 = time.perf_counter()
    table = resolve(fn_ref)(**settings)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"cell function {fn_ref} must return a pandas.DataFrame, got {type(table).__name__}")
    return table, time.perf_counter() - t0


__all__ = ["resolve", "compute_cell"]
