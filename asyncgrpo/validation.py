"""Input checks shared by every public entry point.

Each check raises ``ValueError`` naming the parameter and its valid range, so bad input never
turns into a silent NaN deep inside a kernel. Kernels themselves never validate: the public
wrapper does it once. Types are checked, not coerced: a bool is not a number (``eps=True``), a
complex number is not real, ``2.5`` is not a group size, ``0.5`` is not a mask entry, and a
Python int too large for a float (``10**400``) is out of range rather than an ``OverflowError``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

#: Largest accepted integer parameter: counts are stored as int64 by the kernels.
INT_MAX = 2**63 - 1


def _show(value) -> str:
    # A 400-digit integer or a large array should not flood the one-line error.
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}…({len(text)} chars)"


def _unwrap(value):
    # A 0-d NumPy array (e.g. from arr.sum()) is a scalar in all but type.
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def is_real_number(value) -> bool:
    """Whether ``value`` is a real scalar (int, float, NumPy number or 0-d array; NaN and ±inf included), not a bool,
    complex number or string: the predicate behind every "must be a number" check."""
    value = _unwrap(value)
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def is_integral(value) -> bool:
    """Whether ``value`` is a real scalar with an integer value (``3`` or ``3.0``; not ``2.5``, NaN, ±inf or a bool)."""
    value = _unwrap(value)
    if not is_real_number(value):
        return False
    return isinstance(value, numbers.Integral) or (math.isfinite(value) and float(value).is_integer())


def _real(value, name: str, must: str) -> float:
    """``value`` as a float if it is a real number (not bool, complex, str), else ``ValueError``."""
    value = _unwrap(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {must}, got {type(value).__name__} {_show(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} must be {must}, got {_show(value)} (too large for a float)") from None


def check_real(value, name: str) -> float:
    """Return ``value`` as a float if it is a finite real number, else raise."""
    out = _real(value, name, "a finite real number")
    if not math.isfinite(out):
        raise ValueError(f"{name} must be a finite real number, got {_show(value)}")
    return out


def check_eps(eps, name: str = "eps") -> float:
    """Return ``eps`` as a float if it is a finite real number > 0, else raise."""
    must = f"a finite number > 0 (valid range: 0 < {name} < inf)"
    value = _real(eps, name, must)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be {must}, got {_show(eps)}")
    return value


def check_group_size(G, name: str = "G") -> int:
    """Return ``G`` as an int if it is an integer ``1 ≤ G ≤ 2**63 − 1`` (``8`` or ``8.0``), else raise.

    ``G = 1`` is accepted: a group of one has ``A_1 = 0`` (THEORY §1) and every functional is defined.
    """
    valid = f"an integer >= 1 (valid range: 1 <= {name} <= 2**63 - 1)"
    G = _unwrap(G)
    if isinstance(G, (bool, np.bool_)) or not isinstance(G, numbers.Real):
        raise ValueError(f"{name} must be {valid}, got {type(G).__name__} {_show(G)}")
    if isinstance(G, numbers.Integral):
        value = int(G)
    else:
        g = float(G)
        if not (math.isfinite(g) and g.is_integer()):
            raise ValueError(f"{name} must be {valid}, got {_show(G)}")
        value = int(g)
    if not 1 <= value <= INT_MAX:
        raise ValueError(f"{name} must be {valid}, got {_show(G)}")
    return value


def _is_torch_tensor(x) -> bool:
    # recognised by its type, so that this module never imports torch
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "is_complex")


def check_index(value, name: str, size: int, what: str = "index") -> int:
    """Return ``value`` as an int if it is an integer in ``[0, size-1]`` (``2`` or ``2.0``), else raise.

    A fraction is an error, never truncated (``1.7`` is not index 1); so are bools and complex numbers.
    """
    must = f"an integer {what} in [0, {size - 1}]" if size >= 1 else f"an integer {what} (there are none: size 0)"
    v = _unwrap(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name} must be {must}, got {type(v).__name__} {_show(value)}")
    if not isinstance(v, numbers.Integral):
        f = float(v)
        if not (math.isfinite(f) and f.is_integer()):
            raise ValueError(f"{name} must be {must}, got {_show(value)}")
        v = int(f)
    if not 0 <= int(v) < size:
        raise ValueError(f"{name} must be {must}, got {_show(value)}")
    return int(v)


def check_index_array(values, name: str, size: int, what: str = "indices") -> np.ndarray:
    """A new int64 array of ``values`` if every entry is an integer in ``[0, size-1]``, else raise.

    Integral floats (``2.0``) are accepted; fractions, NaN, bools, complex numbers and strings are not.
    """
    arr = np.asarray(values)
    must = f"integer {what} in [0, {size - 1}]"
    if arr.dtype.kind in "iu":
        ok = arr.size == 0 or (arr.min() >= 0 and arr.max() < size)
    elif arr.dtype.kind == "f":
        ok = bool(np.all(np.isfinite(arr) & (arr == np.floor(arr)) & (arr >= 0) & (arr < size)))
    else:
        raise ValueError(f"{name} must hold {must}, got {arr.dtype} values {_show(values)}")
    if not ok:
        flat = arr.ravel()
        bad = ~((flat >= 0) & (flat < size)) if arr.dtype.kind in "iu" else \
            ~(np.isfinite(flat) & (flat == np.floor(flat)) & (flat >= 0) & (flat < size))
        i = int(np.argmax(bad))
        idx = np.unravel_index(i, arr.shape)
        raise ValueError(f"{name} must hold {must}; found {flat[i].item()!r} at index {tuple(int(k) for k in idx)}")
    return np.array(arr, dtype=np.int64, copy=True)


def check_real_array(values, name: str) -> np.ndarray:
    """``values`` as a float64 array if every entry is a real number (no bool, complex, str), else raise.

    A torch tensor is checked by the same rule and stays a tensor on its device (a floating dtype is
    kept, integers become float64). Values are not checked for finiteness (see :func:`check_finite`).
    """
    if _is_torch_tensor(values):
        if values.is_complex():
            raise ValueError(f"{name} must be real numbers, got complex values ({values.dtype})")
        if str(values.dtype) == "torch.bool":
            raise ValueError(f"{name} must be real numbers, got booleans ({values.dtype})")
        return values if values.is_floating_point() else values.double()
    arr = np.asarray(values)
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} must be real numbers, got complex values {_show(values)}")
    if arr.dtype.kind == "b":
        raise ValueError(f"{name} must be real numbers, got booleans {_show(values)}")
    if arr.dtype.kind in "OUSV":
        if arr.dtype.kind == "O" and all(
            isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) for x in arr.ravel()
        ):
            try:
                return arr.astype(np.float64)
            except OverflowError:
                raise ValueError(f"{name} must be real numbers within float range, got {_show(values)}") from None
        raise ValueError(f"{name} must be real numbers, got {arr.dtype} values {_show(values)}")
    return arr.astype(np.float64, copy=False)


def check_real_ndarray(values, name: str) -> np.ndarray:
    """:func:`check_real_array` for the NumPy backends: always a float64 NumPy array. A torch tensor (any device,
    any real dtype, with or without grad) is checked by the same rule and copied to the CPU, so NumPy's functions
    never see a tensor (``np.isfinite`` of a tensor is a tensor, and ``~`` of its uint8 is 254, not False)."""
    arr = check_real_array(values, name)
    if _is_torch_tensor(arr):
        arr = arr.detach().cpu().double().numpy()
    return arr


def check_log_ratios(log_ratios, name: str = "log_ratios") -> np.ndarray:
    """Return a 1-D float64 array of finite log-ratios ``ℓ_i`` (G ≥ 1), else raise.

    ``ℓ_i = log π_θ(τ_i) − log μ(τ_i)`` must be finite: ±inf means a trajectory
    with zero probability under one policy, which a sampled group cannot hold. A torch tensor is accepted
    and read as a NumPy array (:func:`check_real_ndarray`).
    """
    arr = check_real_ndarray(log_ratios, name)
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


def check_log_ratios_torch(log_ratios, mask=None, name: str = "log_ratios"):
    """``(ell, mask, squeezed)`` for the torch backend, by the rules of :func:`check_log_ratios`.

    ``log_ratios`` is ``[G]`` or ``[n_groups, G]`` (tensor or array-like) of real numbers, finite on the
    real entries; ``mask`` (optional, same shape) holds booleans or exactly 0/1 and leaves every group
    at least one real entry. Returns ``ell`` as a 2-D floating tensor, ``mask`` as a 2-D bool tensor on
    ``ell``'s device, and whether a 1-D input was given a leading axis.
    """
    import torch

    ell = check_real_array(log_ratios if torch.is_tensor(log_ratios) else check_real_array(log_ratios, name), name)
    ell = torch.as_tensor(ell)
    squeeze = ell.ndim == 1
    if squeeze:
        ell = ell.unsqueeze(0)
    if ell.ndim != 2:
        raise ValueError(f"{name} must have shape [G] or [n_groups, G], got {tuple(ell.shape)}")
    if mask is None:
        mask = torch.ones_like(ell, dtype=torch.bool)
    else:
        mask = check_mask(mask if torch.is_tensor(mask) else np.asarray(mask))
        mask = torch.as_tensor(mask, device=ell.device)
        if squeeze and mask.ndim == 1:
            mask = mask.unsqueeze(0)
        if mask.shape != ell.shape:
            raise ValueError(f"mask and {name} must have the same shape, got {tuple(mask.shape)} and {tuple(ell.shape)}")
    if ell.shape[-1] == 0:
        raise ValueError(f"{name} is an empty group: G must be >= 1")
    empty = ~mask.any(dim=-1)
    if bool(empty.any()):
        raise ValueError(f"mask leaves group {int(empty.nonzero()[0, 0])} empty: every group needs G >= 1 real entries")
    bad = mask & ~torch.isfinite(ell.detach())
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name} must be finite (no NaN or inf); found {float(ell[idx])} at index {idx}")
    return ell, mask, squeeze


def check_log_weights(log_w, shape: tuple, name: str = "log_w") -> np.ndarray:
    """Return ``log w`` as float64 if it has ``shape`` and no NaN or ``+inf`` (``-inf`` = zero weight)."""
    arr = check_real_ndarray(log_w, name)
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have the shape of the log-ratios {tuple(shape)}, got {arr.shape}")
    bad = np.isnan(arr) | (arr == np.inf)
    if bad.any():
        i = int(np.argwhere(bad.ravel())[0][0])
        raise ValueError(f"{name} must be finite or -inf (a zero weight); found {float(arr.flat[i])!r} at index {i}")
    return arr


def check_mask(mask, shape: tuple | None = None, name: str = "mask"):
    """Return ``mask`` as booleans if every entry is ``True``/``False`` or exactly ``0``/``1``, else raise.

    Works for NumPy array-likes and for ``torch`` tensors (returned as a bool tensor on the same
    device) without importing torch: a mask of ``0.5`` or NaN is an error, never silently ``True``.
    """
    if not hasattr(mask, "dtype"):
        mask = np.asarray(mask)
    if shape is not None and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(mask.shape)}")
    if str(mask.dtype) in ("bool", "torch.bool"):
        return mask
    if isinstance(mask, np.ndarray) and mask.dtype.kind not in "iufc":
        raise ValueError(f"{name} must hold booleans or 0/1, got dtype {mask.dtype}")
    bad = (mask != 0) & (mask != 1)
    if bool(bad.any()):
        idx = tuple(int(i) for i in (np.argwhere(bad)[0] if isinstance(bad, np.ndarray) else bad.nonzero()[0]))
        raise ValueError(f"{name} must hold booleans or exactly 0/1; found {mask[idx].item()!r} at index {idx}")
    return mask != 0


def as_tensor_on(x, device):
    """``x`` (a validated array or tensor) as a torch tensor on ``device`` (``None``: where it is, or the CPU)."""
    import torch

    return x if torch.is_tensor(x) and (device is None or x.device == device) else torch.as_tensor(x, device=device)


def check_finite_tensor(x, mask, name: str) -> None:
    """Raise if the torch tensor ``x`` holds NaN or ±inf (only where ``mask`` is True, when given), saying where."""
    import torch

    bad = ~torch.isfinite(x.detach()) if mask is None else mask & ~torch.isfinite(x.detach())
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        where = "" if mask is None else " on real tokens (mask True)"
        raise ValueError(f"{name} must be finite{where} (no NaN or inf); found {float(x.detach()[idx])} at {idx}")


def parse_list(text, option: str, convert=str, what: str = "values") -> list:
    """A comma list from a command line (``--G 4,16,64``), each item converted by ``convert``: empty items left out;
    no values, an unconvertible item or a value given twice (after conversion: ``4,04`` repeats 4) is a
    ``ValueError`` naming ``option``. The one check every comma-list option uses (issue 56 item 8): a repeated value
    runs the same cells twice (duplicated CSV rows, double-counted averages) or makes cells collide."""
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items:
        raise ValueError(f"{option}: give at least one value ({what}), got {text!r}")
    try:
        out = [convert(s) for s in items]
    except (ValueError, TypeError):
        raise ValueError(f"{option}: expected a comma list of {what}, got {text!r}") from None
    return check_unique(out, option)


def check_unique(values, option: str) -> list:
    """``values`` as a list when no value repeats; else a ``ValueError`` naming ``option`` and the repeated ones."""
    out, seen, dup = list(values), [], []
    for v in out:
        if v in seen:
            if v not in dup:
                dup.append(v)
        else:
            seen.append(v)
    if dup:
        raise ValueError(f"{option}: each value once; repeated {dup} (a repeated value would run "
                         "or count the same thing twice)")
    return out
