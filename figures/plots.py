"""Plot functions over tidy Monte Carlo tables: take an optional ``ax``, return ``(fig, ax)``, never save.

They draw what the table holds (``value ± 1.96·se`` as error bars, ``bound`` dashed in the
estimator's colour, ``exact`` as open markers) and compute no statistics beyond the CI.
"""
from __future__ import annotations

import numpy as np

from figures import stats, style


def quantity_vs(df, x: str, quantity: str, *, estimators=None, ax=None, bounds: bool = True, exact: bool = False,
                logx: bool = True, logy: bool = True, label_suffix: str = ""):
    """``quantity`` against column ``x`` for each estimator, 95 % CIs, bounds dashed; returns (fig, ax)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots() if ax is None else (ax.figure, ax)
    sub = df[df["quantity"] == quantity]
    names = style.ordered(estimators if estimators is not None else sub["estimator"].unique())
    for name in names:
        s = sub[sub["estimator"] == name].sort_values(x)
        if s.empty:
            continue
        xv, v, se = s[x].to_numpy(float), s["value"].to_numpy(float), s["se"].to_numpy(float)
        lo, hi = stats.ci(v, se)
        if logy:  # a CI reaching below 0 cannot be drawn on a log axis: clip it at the axis floor
            lo = np.where(lo > 0, lo, np.nan)
        yerr = np.vstack([v - np.where(np.isnan(lo), v * 0.5, lo), hi - v])
        keep = v > 0 if logy else np.isfinite(v)
        c = style.color(name)
        ax.errorbar(xv[keep], v[keep], yerr=yerr[:, keep], color=c, marker=style.marker(name), capsize=2,
                    label=f"{name}{label_suffix}")
        if bounds and "bound" in s and np.isfinite(s["bound"]).any():
            ax.plot(xv, s["bound"], ls="--", color=c, lw=1.0, label=f"{name} bound")
        if exact and "exact" in s and np.isfinite(s["exact"]).any():
            ax.plot(xv, s["exact"], ls="none", marker=style.marker(name), mfc="none", mec=c, ms=7, alpha=0.7)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    return fig, ax
