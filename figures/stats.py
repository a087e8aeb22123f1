"""Where figures and the report get interval widths, slopes and verdicts from.

Means over seeds use the one CI function, :func:`simulate.experiments.mean_ci` (Student t).

All intervals are normal-approximation intervals ``value ± z·σ̂/√n`` with a stated ``z``
(``Z = 1.96``: 95 %); Monte Carlo tables already carry ``se = σ̂/√n``. Verdicts follow THEORY.md §4:
a measurement above its bound beyond Monte Carlo error is ``violated``; a bound more than
``LOOSE`` times the measurement is ``loose by ×k``; otherwise ``holds``.
"""
from __future__ import annotations

import math

import numpy as np

Z = 1.96  #: 95 % two-sided normal quantile, the CI width used in every figure
Z_VERDICT = 3.0  #: a bound is only "violated" if measured − 3·se exceeds it (few false alarms over many cells)
LOOSE = 2.0  #: bound / measured above this reads "loose by ×k"


def ci(value, se, z: float = Z):
    """``(lo, hi) = value ∓ z·se`` (arrays broadcast)."""
    value, se = np.asarray(value, dtype=float), np.asarray(se, dtype=float)
    return value - z * se, value + z * se


def loglog_slope(x, y, se=None) -> tuple[float, float]:
    """Least-squares slope of ``log y`` on ``log x`` and its standard error.

    With ``se`` (standard errors of ``y``) the fit is weighted by ``(y/se)²`` (delta method:
    ``se(log y) ≈ se/y``). Points with ``y ≤ 0`` are dropped; fewer than 2 points give ``nan``.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if se is not None:
        s = np.asarray(se, dtype=float)
        keep &= np.isfinite(s) & (s > 0)
    if keep.sum() < 2:
        return float("nan"), float("nan")
    lx, ly = np.log(x[keep]), np.log(y[keep])
    w = np.ones_like(lx) if se is None else (y[keep] / s[keep]) ** 2
    xm = np.average(lx, weights=w)
    ym = np.average(ly, weights=w)
    sxx = np.sum(w * (lx - xm) ** 2)
    if sxx == 0:
        return float("nan"), float("nan")
    slope = float(np.sum(w * (lx - xm) * (ly - ym)) / sxx)
    if keep.sum() < 3:
        return slope, float("nan")
    resid = ly - (ym + slope * (lx - xm))
    dof = keep.sum() - 2
    s2 = np.sum(w * resid**2) / dof if se is None else max(np.sum(w * resid**2) / dof, 1.0)
    return slope, float(math.sqrt(s2 / sxx))


def verdict(measured: float, se: float, bound: float | None, *, z: float = Z_VERDICT, loose: float = LOOSE) -> str:
    """``holds`` / ``violated`` / ``loose by ×k`` for a measurement that should not exceed ``bound``.

    ``violated`` iff ``measured − z·se > bound``; ``loose by ×k`` iff ``bound > loose·max(measured, z·se)``
    (a measurement indistinguishable from 0 is compared through its resolution ``z·se``).
    """
    if bound is None or not np.isfinite(bound):
        return "no bound"
    if not np.isfinite(measured):
        return "not measured"
    se = 0.0 if se is None or not np.isfinite(se) else float(se)
    if measured - z * se > bound:
        return "violated"
    scale = max(measured, z * se)
    if scale > 0 and bound > loose * scale:
        return f"loose by ×{_sig(bound / scale)}"
    if scale <= 0 and bound > 0:
        return "holds (measured 0)"
    return "holds"


def verdict_equal(measured: float, se: float, target: float, *, z: float = Z_VERDICT) -> str:
    """``holds`` if ``|measured − target| ≤ z·se`` (an exact prediction), else ``violated``."""
    if not (np.isfinite(measured) and np.isfinite(target)):
        return "not measured"
    se = 0.0 if se is None or not np.isfinite(se) else float(se)
    return "holds" if abs(measured - target) <= z * se else "violated"


def _sig(x: float) -> str:
    if x >= 100:
        return f"{x:.3g}" if x < 1e4 else f"{x:.1e}"
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def fmt(x, se=None, z: float = Z) -> str:
    """``"1.23e-3 [1.10e-3, 1.36e-3]"``: a value with its ``z``-CI, in 3 significant digits."""
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "—"
    if se is None or not np.isfinite(se):
        return f"{x:.3g}"
    return f"{x:.3g} [{x - z * se:.3g}, {x + z * se:.3g}]"
