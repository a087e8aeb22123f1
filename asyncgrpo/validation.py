"""Input checks shared by every public entry point.

Each check raises ``ValueError`` naming the parameter and its valid range, so
bad input never turns into a silent NaN deep inside a kernel. Kernels
themselves never validate (STYLE §1): the public wrapper does it once.
"""
from __future__ import annotations

import math

import numpy as np


def check_eps(eps, name: str = "eps") -> float:
    """Return ``eps`` as a float if it is a finite number > 0, else raise."""
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number > 0, got {eps!r}") from None
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0 (valid range: 0 < {name} < inf), got {eps!r}")
    return value


def check_group_size(G, name: str = "G") -> int:
    """Return ``G`` as an int if it is an integer ≥ 1, else raise."""
    try:
        ok = not isinstance(G, bool) and float(G).is_integer() and int(G) >= 1
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer >= 1, got {G!r}")
    return int(G)


def check_log_ratios(log_ratios, name: str = "log_ratios") -> np.ndarray:
    """Return a 1-D float64 array of finite log-ratios ``ℓ_i`` (G ≥ 1), else raise.

    ``ℓ_i = log π_θ(τ_i) − log μ(τ_i)`` must be finite: ±inf means a trajectory
    with zero probability under one policy, which a sampled group cannot hold.
    """
    arr = np.asarray(log_ratios, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of one group's log-ratios, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is an empty group: G must be >= 1")
    check_finite(arr, name)
    return arr


def check_finite(arr: np.ndarray, name: str) -> None:
    """Raise if ``arr`` holds NaN or ±inf, saying where."""
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} must be finite (no NaN or inf); found {float(arr[idx])!r} at index {idx if len(idx) > 1 else idx[0]}"
        )


def check_log_weights(log_w, shape: tuple, name: str = "log_w") -> np.ndarray:
    """Return ``log w`` as float64 if it has ``shape`` and no NaN or ``+inf`` (``-inf`` = zero weight)."""
    arr = np.asarray(log_w, dtype=np.float64)
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have the shape of the log-ratios {tuple(shape)}, got {arr.shape}")
    bad = np.isnan(arr) | (arr == np.inf)
    if bad.any():
        i = int(np.argwhere(bad)[0][0])
        raise ValueError(f"{name} must be finite or -inf (a zero weight); found {float(arr.flat[i])!r} at index {i}")
    return arr


def check_same_shape(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    """Raise unless ``a`` and ``b`` have the same shape."""
    if np.shape(a) != np.shape(b):
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {np.shape(a)} and {np.shape(b)}")
