"""C5 as a curve: the local G-exponent of the tuned bound, from the envelope theorem (docs/THEORY.md §3 C5).

With the variance term kept, ``B(η; G) = 2ΔJ/(ηK) + LηM₂(ε) + Cη⁴d⁴ε^{p_ε}G^{p_G}`` =: T₁ + T₂ + T₃ and the
tuned bound is ``B*(G) = min_η B(η; G)``. Its local G-exponent is, by the envelope theorem (∂B/∂η = 0 at
η*, so the η-dependence of η*(G) drops out of the first derivative),

    e(G) = d log B*/d log G = (∂B/∂log G)/B at η = η*(G) = p_G·T₃/(T₁ + T₂ + T₃).

Stationarity, η∂B/∂η = −T₁ + T₂ + 4T₃ = 0, gives T₁ = T₂ + 4T₃, hence ``e(G) = p_G/(5 + 2r(G))`` with
``r(G) = T₂/T₃`` at η*(G): gmc's −2/5 (p_G = −2) holds exactly only as r → 0, and |e + 2/5| ≤ 0.05 iff
r ≤ 5/14 ≈ 0.357. Along G, r grows (the delay term shrinks like G^{p_G}, the variance term has no G), so e
rises monotonically from e(1) towards 0 and the −2/5 law holds on an interval [1, G_hi] or nowhere.

Regimes (:data:`REGIMES`) are defined by the ratio r₁ = r(1) = LηM₂/delay at the optimum at G = 1, the
other constants fixed at :data:`BASE`: **delay-dominated** r₁ = 1e−3, **comparable** r₁ = 1,
**variance-dominated** r₁ = 100. ``second_moment`` (E_π[A²‖s‖²]) is solved from r₁ in closed form:
at G = 1, T₂ = r₁T₃ and T₁ = (r₁ + 4)T₃ give η₁⁵ = 2ΔJ/((r₁ + 4)KCd⁴ε^{p_ε}) and
S = r₁·Cη₁³d⁴ε^{p_ε}/(L(1 + ε)).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np
import pandas as pd
import sympy as sp
from scipy.optimize import brentq

from . import bounds
from . import symbols as sy
from .c5_symbolic import delay_term, log_G_derivative

#: constants shared by every regime (η-independent c_G/G is left out: c_G = 0)
BASE = {"K": 1e4, "d": 8.0, "eps": 0.05, "dJ": 1.0, "C": 1.0, "L": 1.0}
#: r₁ = LηM₂ / delay term at the optimal η at G = 1, per regime
RATIOS = {"delay-dominated": 1e-3, "comparable": 1.0, "variance-dominated": 100.0}
G_RANGE = (1.0, 1e4)
TARGET = -0.4  # gmc's tuned G-exponent with the variance term dropped
_KEYS = ("K", "d", "eps", "dJ", "C", "L", "second_moment")


def _exponents(name: str) -> tuple[float, float]:
    t = delay_term(name)
    return float(sp.diff(sp.log(t), sy.eps) * sy.eps), float(sp.diff(sp.log(t), sy.G) * sy.G)


def regime_params(ratio: float, name: str = "gmc", base: Mapping | None = None) -> dict:
    """The constants (``BASE`` overridden by ``base``) with ``second_moment`` set so that LηM₂/delay = ``ratio``
    at η*(G = 1) (closed form in the module docstring). ``ratio`` > 0."""
    if not (np.isfinite(ratio) and ratio > 0):
        raise ValueError(f"ratio must be finite with ratio > 0, got {ratio!r}")
    p = {**BASE, **(base or {})}
    pe, _ = _exponents(name)
    eta1 = (2 * p["dJ"] / ((ratio + 4) * p["K"] * p["C"] * p["d"] ** 4 * p["eps"] ** pe)) ** 0.2
    s = ratio * p["C"] * eta1**3 * p["d"] ** 4 * p["eps"] ** pe / (p["L"] * (1 + p["eps"]))
    return {**p, "second_moment": float(s)}


REGIMES = {rg: regime_params(r) for rg, r in RATIOS.items()}


def _params(regime_params) -> dict:
    if isinstance(regime_params, str):
        if regime_params not in REGIMES:
            raise ValueError(f"regime must be one of {tuple(REGIMES)} or a dict of {_KEYS}, got {regime_params!r}")
        return dict(REGIMES[regime_params])
    p = dict(regime_params)
    missing = [k for k in _KEYS if k not in p]
    if missing:
        raise ValueError(f"regime_params lacks {missing}; it needs {_KEYS}")
    return {k: float(p[k]) for k in _KEYS}


@functools.cache
def _dlogG(name: str):
    args = (sy.eta, sy.K, sy.d, sy.eps, sy.G, sy.dJ, sy.L, sy.S, sy.C, sy.c_G)
    return sp.lambdify(args, log_G_derivative(name), modules="numpy")


def _check_G(Gs) -> np.ndarray:
    g = np.atleast_1d(np.asarray(Gs, dtype=float))
    if g.ndim != 1 or g.size == 0 or not np.all(np.isfinite(g) & (g >= 1)):
        raise ValueError(f"Gs must be a non-empty 1-d sequence of finite values >= 1, got {Gs!r}")
    return g


def local_exponent_at(Gs, regime_params="comparable", name: str = "gmc") -> np.ndarray:
    """Local G-exponent ``e(G) = d log B*/d log G`` of the tuned C5 bound at each G in ``Gs`` (envelope theorem).

    ``Gs``: values ≥ 1 (need not be integers). ``regime_params``: a regime name in :data:`REGIMES` or a
    mapping with keys K, d, eps, dJ, C, L, second_moment (the constants of ``theory.bounds.assembled_bound``;
    c_G = 0). ``name``: gmc, tis or tic. Returns a float array shaped like ``Gs``: compare it with a slope
    measured over the same G values (e.g. C5 test B of the training protocol)."""
    g = _check_G(Gs)
    p = _params(regime_params)
    key = tuple(p[k] for k in _KEYS)
    return np.array([_e_at(name, float(gv), key) for gv in g])


@functools.lru_cache(maxsize=4096)
def _e_at(name: str, g: float, key: tuple) -> float:
    """e(G) at one G (cached: the claims table, the report section and the figure ask for the same points)."""
    p = dict(zip(_KEYS, key))
    e = bounds.eta_star_numeric(name, p["K"], p["d"], p["eps"], g, dJ=p["dJ"], C=p["C"], L=p["L"],
                                second_moment=p["second_moment"])
    b = bounds.assembled_bound(name, e, p["K"], p["d"], p["eps"], g, dJ=p["dJ"], L=p["L"],
                               second_moment=p["second_moment"], C=p["C"], c_G=0.0)
    return float(_dlogG(name)(e, p["K"], p["d"], p["eps"], g, p["dJ"], p["L"], p["second_moment"], p["C"], 0.0) / b)


def tuned_bound_slope(Gs, regime_params="comparable", name: str = "gmc") -> float:
    """Least-squares slope of log B*(G) against log G over exactly the given ``Gs`` (at least two distinct):
    what a log-log fit of the tuned bound at those G would report (a weighted mean of :func:`local_exponent_at`)."""
    g = _check_G(Gs)
    if np.unique(g).size < 2:
        raise ValueError(f"Gs must hold at least two distinct values for a slope, got {Gs!r}")
    p = _params(regime_params)
    vals, _ = bounds.tuned_bound(name, p["K"], p["d"], p["eps"], np.asarray(g, dtype=float), dJ=p["dJ"], C=p["C"],
                                 L=p["L"], second_moment=p["second_moment"])
    return float(np.polyfit(np.log(g), np.log(vals), 1)[0])


def local_exponent_curve(Gs=None, regimes=None, name: str = "gmc") -> pd.DataFrame:
    """DataFrame ``G, regime, local_exponent, ratio`` (r(G) = T₂/T₃ at η*) on ``Gs`` (default 81 log-spaced
    points on [1, 1e4]) for each regime name (default all of :data:`REGIMES`)."""
    g = _check_G(np.geomspace(*G_RANGE, 81) if Gs is None else Gs)
    rows = []
    for rg in (REGIMES if regimes is None else regimes):
        e = local_exponent_at(g, rg, name)
        _, pg = _exponents(name)
        ratio = (pg / e - 5) / 2 if pg != 0 else np.full_like(e, np.nan)  # e = p_G/(5 + 2r)
        rows += [{"G": float(a), "regime": rg, "local_exponent": float(b), "ratio": float(c)}
                 for a, b, c in zip(g, e, ratio)]
    return pd.DataFrame(rows)


@functools.lru_cache(maxsize=64)
def _range(regime, tol, target, name, G_range):
    return _exponent_range(regime, tol, target, name, G_range)


def c5_exponent_range(regime="comparable", tol: float = 0.05, target: float = TARGET, name: str = "gmc",
                      G_range=G_RANGE):
    """The G interval within ``G_range`` where ``|e(G) − target| ≤ tol`` (gmc: target −2/5), as ``(G_lo, G_hi)``,
    or the string ``"none"``. ``e`` is monotone in G (module docstring), so the set is one interval; its ends are
    located by a 41-point log grid and refined by Brent to 1e-10 in log G. ``regime``: a name in
    :data:`REGIMES` or a mapping as for :func:`local_exponent_at`. ``tol`` > 0."""
    if isinstance(regime, str):
        return _range(regime, float(tol), float(target), name, tuple(G_range))
    return _exponent_range(regime, tol, target, name, G_range)


def _exponent_range(regime="comparable", tol: float = 0.05, target: float = TARGET, name: str = "gmc",
                      G_range=G_RANGE):
    """Uncached body of :func:`c5_exponent_range`."""
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be finite with tol > 0, got {tol!r}")
    lo, hi = (float(v) for v in _check_G(G_range))
    g = np.geomspace(lo, hi, 41)
    f = lambda lg: abs(float(local_exponent_at([np.exp(lg)], regime, name)[0]) - target) - tol  # noqa: E731
    inside = np.array([f(np.log(v)) <= 0 for v in g])
    if not inside.any():
        return "none"
    idx = np.flatnonzero(inside)
    i0, i1 = idx[0], idx[-1]
    g_lo = g[i0] if i0 == 0 else float(np.exp(brentq(f, np.log(g[i0 - 1]), np.log(g[i0]), xtol=1e-10)))
    g_hi = g[i1] if i1 == g.size - 1 else float(np.exp(brentq(f, np.log(g[i1]), np.log(g[i1 + 1]), xtol=1e-10)))
    return (float(g_lo), float(g_hi))


def summary(tol: float = 0.05) -> pd.DataFrame:
    """Per regime: r₁, E_π[A²‖s‖²], e(1), e(10), e(100), e(1e4) and the G range where |e + 2/5| ≤ ``tol``."""
    rows = []
    for rg, p in REGIMES.items():
        e = local_exponent_at([1.0, 10.0, 100.0, 1e4], rg)
        rng = c5_exponent_range(rg, tol)
        rows.append({"regime": rg, "r1": RATIOS[rg], "second_moment": p["second_moment"], "e(1)": e[0],
                     "e(10)": e[1], "e(100)": e[2], "e(1e4)": e[3],
                     "range |e+2/5|<=tol": rng if rng == "none" else f"[{rng[0]:.4g}, {rng[1]:.4g}]"})
    return pd.DataFrame(rows)


__all__ = ["BASE", "G_RANGE", "RATIOS", "REGIMES", "TARGET", "c5_exponent_range", "local_exponent_at",
           "local_exponent_curve", "regime_params", "summary", "tuned_bound_slope"]
