"""Where figures and the report get interval widths, slopes and verdicts from.

Means over seeds use the one CI function, :func:`simulate.verdicts.t_interval` (Student t); the
training claims' verdicts come from :mod:`simulate.verdicts`.

Monte Carlo intervals are ``value ± z·σ̂/√n`` with a stated ``z`` (``Z = 1.96``: 95 %; Monte Carlo
tables carry ``se = σ̂/√n`` over ≥ 10⁴ groups, where the normal approximation is exact enough).
Bound verdicts follow docs/THEORY.md §4 in the report's one vocabulary: a measurement above its
bound beyond Monte Carlo error is ``refuted``; a bound more than ``LOOSE`` times the measurement's upper
3-s.e. limit (:func:`simulate.verdicts.looseness`, the one looseness) is ``holds, bound loose ×k``; otherwise
``holds``.
"""
from __future__ import annotations

import math

import numpy as np

Z = 1.96  #: 95 % two-sided normal quantile, the CI width used in every figure
Z_VERDICT = 3.0  #: a bound is only "refuted" if measured − 3·se exceeds it (few false alarms over many cells)
LOOSE = 2.0  #: looseness k = bound / (measured + 3·se) above this reads "holds, bound loose ×k"


def ci(value, se, z: float = Z):
    """``(lo, hi) = value ∓ z·se`` (arrays broadcast)."""
    value, se = np.asarray(value, dtype=float), np.asarray(se, dtype=float)
    return value - z * se, value + z * se


def loglog_slope(x, y, se=None) -> tuple[float, float]:
    """Least-squares slope of ``log y`` on ``log x`` and its standard error (``np.polyfit``).

    With ``se`` (standard errors of ``y``) the fit is weighted by ``y/se`` per residual (delta method:
    ``se(log y) ≈ se/y``) and the slope's standard error is the unscaled one, inflated by the reduced
    χ² of the fit when that exceeds 1 (scatter beyond the stated errors); without ``se`` it is the
    usual ``σ̂²/Sxx`` one. Points with ``y ≤ 0`` are dropped; fewer than 2 points give ``nan`` (3 for
    the standard error).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if se is not None:
        s = np.asarray(se, dtype=float)
        keep &= np.isfinite(s) & (s > 0)
    n = int(keep.sum())
    if n < 2 or np.ptp(x[keep]) == 0:
        return float("nan"), float("nan")
    lx, ly = np.log(x[keep]), np.log(y[keep])
    w = np.ones(n) if se is None else y[keep] / s[keep]
    coef = np.polyfit(lx, ly, 1, w=w)
    if n < 3:
        return float(coef[0]), float("nan")
    _, cov = np.polyfit(lx, ly, 1, w=w, cov="unscaled")
    chi2_red = float(np.sum((w * (ly - np.polyval(coef, lx))) ** 2) / (n - 2))
    scale = chi2_red if se is None else max(chi2_red, 1.0)
    return float(coef[0]), float(math.sqrt(cov[0, 0] * scale))


def verdict(measured: float, se: float, bound: float | None, *, z: float = Z_VERDICT, loose: float = LOOSE) -> str:
    """``holds`` / ``refuted`` / ``holds, bound loose ×k`` for a measurement that should not exceed ``bound``.

    ``refuted`` iff ``measured − z·se > bound``; otherwise ``holds, bound loose ×k`` when the one looseness
    :func:`simulate.verdicts.looseness` ``k = bound/(measured + z·se)`` exceeds ``loose``, else ``holds``
    (a measurement and s.e. both 0 under a positive bound: ``×∞``); no bound or no finite measurement →
    ``inconclusive``.
    """
    from simulate import verdicts as vd

    if bound is None or not np.isfinite(bound) or not np.isfinite(measured):
        return vd.INCONCLUSIVE
    se = 0.0 if se is None or not np.isfinite(se) else float(se)
    if measured - z * se > bound:
        return vd.REFUTED
    if measured + z * se <= 0 and bound > 0:
        return vd.LOOSE_PREFIX + "∞"
    k = vd.looseness(measured, se, bound, z)
    return f"{vd.LOOSE_PREFIX}{_sig(k)}" if k is not None and k > loose else vd.HOLDS


def verdict_equal(measured: float, se: float, target: float, *, z: float = Z_VERDICT) -> str:
    """``holds`` if ``|measured − target| ≤ z·se`` (an exact prediction), else ``refuted``."""
    if not (np.isfinite(measured) and np.isfinite(target)):
        return "inconclusive"
    se = 0.0 if se is None or not np.isfinite(se) else float(se)
    return "holds" if abs(measured - target) <= z * se else "refuted"


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
