"""Plot functions over tidy Monte Carlo tables: take an optional ``ax``, return ``(fig, ax)``, never save.

They draw what the table holds (``value ± 1.96·se`` as error bars, ``bound`` dashed in the
estimator's colour, ``exact`` as open markers) and compute no statistics beyond the CI. On a log y
axis a value that is exactly 0 (every Monte Carlo group gave 0, so ``se = 0``) cannot be drawn: it is
marked on the x axis with the estimator's open marker and a legend entry says so, never dropped silently.
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
    any_exact = any_zero = False
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
        if logy:
            zero = (v == 0) & (se == 0)
            if zero.any():  # exactly 0 in every group: on the x axis (blended coordinates), not dropped
                any_zero = True
                ax.plot(xv[zero], np.zeros(int(zero.sum())), ls="none", marker=style.marker(name), mfc="white",
                        mec=c, mew=1.1, ms=5, clip_on=False, zorder=6, transform=ax.get_xaxis_transform())
        if bounds and "bound" in s and np.isfinite(s["bound"]).any():
            ax.plot(xv, s["bound"], ls="--", color=c, lw=1.0, label=f"{name} bound")
        if exact and "exact" in s and np.isfinite(s["exact"]).any():
            any_exact = True
            ax.plot(xv, s["exact"], ls="none", marker=style.marker(name), mfc="none", mec=c, ms=7, alpha=0.7)
    if any_exact:  # one legend entry for the open markers of every estimator
        ax.plot([], [], ls="none", marker="o", mfc="none", mec=style.REFERENCE, ms=7, alpha=0.7, label="exact (open)")
    if any_zero:
        ax.plot([], [], ls="none", marker="o", mfc="white", mec=style.REFERENCE, ms=5, label="= 0 (on the x axis)")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    return fig, ax


def ticks_at(ax, values, fmt="{:g}") -> None:
    """Label the x axis at exactly ``values`` (every grid point used), no minor tick labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    vals = sorted({float(v) for v in values})
    ax.xaxis.set_major_locator(FixedLocator(vals))
    ax.set_xticklabels([fmt.format(v) for v in vals])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
