"""Calling a user's weight map for the property kit: its output as float64 real numbers, or why not.

``fn(ell, eps, **kw)`` is called on a copy of the input with floating-point warnings silenced (a naive map
overflows on purpose here); a raise is :class:`_NoOutput` (the example is not judged; ``finite`` reports
it), an output that is not real numbers :class:`_NotReal`, a wrong shape :class:`_Violation`.
"""
from __future__ import annotations

import inspect
import warnings

import numpy as np

class _Violation(AssertionError):
    """A property does not hold on one example."""


class _NotReal(_Violation):
    """``fn`` returned something other than real numbers."""


class _NoOutput(Exception):
    """``fn`` raised or returned non-finite weights: the example is not judged (``finite`` reports it)."""


def _to_numpy(out) -> np.ndarray:
    """``out`` as float64, refusing complex, string and object outputs (NumPy would drop ``1e6j`` or parse ``"1.2"``)."""
    if hasattr(out, "detach"):  # torch tensor
        if out.is_complex() or not (out.is_floating_point() or out.dtype.is_signed or str(out.dtype) in
                                    ("torch.bool", "torch.uint8")):
            raise _NotReal(f"fn returned a tensor of dtype {out.dtype}, not real numbers")
        out = out.detach().cpu().double().numpy()
    arr = np.asarray(out)
    if arr.dtype.kind not in "fiub":
        what = {"c": "complex numbers", "U": "strings", "S": "bytes", "O": "Python objects"}.get(arr.dtype.kind,
                                                                                            f"dtype {arr.dtype}")
        raise _NotReal(f"fn returned {what} (dtype {arr.dtype}), not real numbers")
    return arr.astype(np.float64)


def _call(fn, ell, eps, **kw) -> np.ndarray:
    """``fn(copy of ell, eps, **kw)`` as float64; :class:`_NoOutput` if ``fn`` raises."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow warnings of a naive map are expected here
            out = fn(np.array(ell, dtype=np.float64), eps, **kw)
    except Exception as exc:  # noqa: BLE001 - a map that crashes gives no output to judge
        raise _NoOutput(f"fn raised {type(exc).__name__}: {exc}") from exc
    w = _to_numpy(out)
    if w.shape != np.shape(ell):
        raise _Violation(f"fn returned shape {w.shape} for log-ratios of shape {np.shape(ell)}")
    return w


def _finite_call(fn, ell, eps, **kw) -> np.ndarray:
    """:func:`_call`, with :class:`_NoOutput` also for non-finite weights (membership is judged where finite)."""
    w = _call(fn, ell, eps, **kw)
    if not np.isfinite(w).all():
        raise _NoOutput("non-finite weights")
    return w


def _accepts_mask(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "mask" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _probe(fn, eps, **kw) -> str | None:
    """``None`` if ``fn`` takes a ``[n_groups, G]`` input (with ``kw``), else why not."""
    ell = np.array([[0.1, -0.2, 0.3], [0.0, 0.5, -1.0]])
    try:
        out = _to_numpy(fn(ell, eps, **{k: v[: len(ell)] for k, v in kw.items()}))
    except Exception as exc:  # noqa: BLE001 - any refusal means "not supported", reported as such
        return f"fn does not take [n_groups, G] input{' with mask=' if kw else ''} ({type(exc).__name__}: {exc})"
    return None if out.ndim == 2 else f"fn returned shape {out.shape} for a [2, 3] input"
