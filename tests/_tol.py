"""Float tolerances from the dtype and the magnitude compared (issue 38; docs/portability.md).

Two computations of one quantity that differ only in rounding (another summation order, a fused
multiply-add, a vectorised ``exp`` or ``log`` from another instruction set) agree to a few units in the
last place of the *largest* term they combine, times the depth of the computation. So a comparison's
tolerance is ``k · eps(dtype) · scale``:

* ``eps`` is the dtype's machine epsilon (2.2e-16 for float64, 1.2e-7 for float32);
* ``scale`` is the magnitude compared: ``max |expected|`` for an array (one gradient tensor shares its
  reductions, so its small entries carry the rounding of its large ones), or the magnitude of the terms a
  scalar was summed from when they cancel (pass ``scale=``);
* ``k`` counts the roundings allowed; each call states why its ``k`` (a reduction's length, a chain of
  transcendental functions). It is never tuned on one CPU: ``make test-portable`` reruns these tests under
  every ``ATEN_CPU_CAPABILITY`` the machine has and ``NUMBA_CPU_NAME=generic``.

A bare ``atol`` below ``eps · scale`` asks for more digits than the dtype holds; that is the defect this
module exists to prevent (a float32 gradient compared with ``atol=1e-8`` failed on AVX-512 kernels).
"""
from __future__ import annotations

import numpy as np
import pytest

try:  # torch is in every extra, but this module must not force it on tests that compare NumPy only
    import torch
except ImportError:  # pragma: no cover
    torch = None


def eps(x) -> float:
    """Machine epsilon of ``x``'s dtype (a torch or NumPy dtype, array, tensor, or a Python float → float64)."""
    if torch is not None and isinstance(x, torch.dtype):
        return float(torch.finfo(x).eps)
    if torch is not None and isinstance(x, torch.Tensor):
        return float(torch.finfo(x.dtype).eps) if x.is_floating_point() else float(np.finfo(np.float64).eps)
    dt = np.asarray(x).dtype
    return float(np.finfo(dt if np.issubdtype(dt, np.floating) else np.float64).eps)


def magnitude(x) -> float:
    """``max |x|`` over the finite entries (0 for an empty or all-infinite input)."""
    a = x.detach().double().cpu().numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x, float)
    a = np.abs(a[np.isfinite(a)])
    return float(a.max()) if a.size else 0.0


def tol(expected, k: float, *, scale: float | None = None, dtype=None) -> dict:
    """``dict(rtol=k·eps, atol=k·eps·scale)`` with ``scale = max |expected|`` unless given.

    ``dtype`` overrides the dtype read from ``expected`` (e.g. a float32 computation compared with a
    float64 reference: the float32 one's rounding sets the tolerance).
    """
    e = eps(dtype if dtype is not None else expected)
    s = magnitude(expected) if scale is None else float(scale)
    return dict(rtol=k * e, atol=k * e * s)


def assert_close(actual, expected, k: float, *, scale: float | None = None, dtype=None, msg=None) -> None:
    """``actual ≈ expected`` within :func:`tol`; tensors through torch.testing, the rest through NumPy."""
    t = tol(expected, k, scale=scale, dtype=dtype)
    if torch is not None and isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, **t, msg=msg)
    else:
        np.testing.assert_allclose(actual, expected, **t, err_msg="" if msg is None else str(msg))


def approx(expected: float, k: float, *, scale: float | None = None, dtype=None):
    """``pytest.approx`` for one scalar within :func:`tol` (``scale`` defaults to ``|expected|``)."""
    t = tol(expected, k, scale=scale, dtype=dtype if dtype is not None else np.float64)
    return pytest.approx(expected, rel=t["rtol"], abs=t["atol"])
