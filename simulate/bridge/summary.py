"""The ladder's tables and its finding, computed from the eval rows of :func:`simulate.bridge.run.run_ladder`.

- :func:`ladder_table`: per rung and delay, ``gmc − rival`` in nAUC (mean over held-out seeds, paired by seed,
  95 % paired-t interval from ``scipy.stats.t``), each estimator's failure count, onpolicy's learning-phase χ²
  (median over runs of the per-run median), gmc's early weight ESS, and the mechanism diagnostic
  (:mod:`simulate.bridge.diagnostics`) for onpolicy and is.
- :func:`lm_faithful`: a rung reproduces the LM's row when onpolicy fails in ≥ 50 % of runs at every ``d ≥ 8``
  while is and gmc fail in ≤ 25 % and learn (their final normalised J is above 0, 95 % t interval).
- :func:`first_failure`: the first rung of the ladder (in order) at which gmc − onpolicy at some ``d ≥ 8`` is
  positive with its interval above 0 and onpolicy fails in ≥ 50 % of runs there.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["paired_delta", "ladder_table", "lm_faithful", "first_failure", "RIVALS", "FAIL_RATE", "STABLE_RATE"]

RIVALS = ("onpolicy", "is", "grpo")
FAIL_RATE = 0.5    # the LM's row: onpolicy fails in at least half the runs
STABLE_RATE = 0.25  # ... while is and gmc fail in at most a quarter


def paired_delta(a: pd.Series, b: pd.Series, level: float = 0.95) -> tuple[float, float, float, int]:
    """``(mean, lo, hi, n)`` of ``a − b`` paired by index (seed): mean ± t_{n−1}·s/√n (scipy.stats.t)."""
    x = (a - b).dropna().to_numpy(dtype=np.float64)
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(x.mean())
    if n < 2:
        return m, math.nan, math.nan, n
    h = float(stats.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return m, m - h, m + h, n


def _mean_ci(x) -> tuple[float, float]:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return (float(x.mean()) if x.size else math.nan), math.nan
    return float(x.mean()), float(x.mean() - stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))


def ladder_table(ev: pd.DataFrame, order=None) -> pd.DataFrame:
    """One row per (rung, d) (module docstring); ``order``: the rungs' order (default: as they appear)."""
    order = list(dict.fromkeys(ev["rung"])) if order is None else [r for r in order if r in set(ev["rung"])]
    rows = []
    for rung in order:
        R = ev[ev["rung"] == rung]
        for d in sorted(R["d"].unique()):
            D = R[R["d"] == d]
            by = {e: D[D["estimator"] == e].set_index("seed") for e in D["estimator"].unique()}
            row = dict(rung=rung, d=int(d), eta=float(D["eta"].iloc[0]), n=int(len(by["gmc"])),
                       J0=float(D["J0"].mean()))
            for e, t in by.items():
                row[f"nauc_{e}"] = float(t["nauc"].mean())
                row[f"fail_{e}"] = int(t["failed"].sum())
                row[f"final_{e}"], row[f"final_lo_{e}"] = _mean_ci(t["final_nJ"])
            for rival in RIVALS:
                if rival in by:
                    m, lo, hi, n = paired_delta(by["gmc"]["nauc"], by[rival]["nauc"])
                    row.update({f"d_{rival}": m, f"lo_{rival}": lo, f"hi_{rival}": hi})
            on = by["onpolicy"]
            row["chi2_learn_onpolicy"] = float(np.nanmedian(on["chi2_learn_med"])) if on["chi2_learn_med"].notna().any() else math.nan
            row["ess_early_gmc"] = _nanmean(by["gmc"]["ess_early"])
            for e in ("onpolicy", "is"):
                row[f"gneg_{e}"] = _nanmean(by[e]["gneg_early"])
                row[f"gdot_{e}"] = _nanmean(by[e]["gdot_early"])
                row[f"down_{e}"] = _nanmean(by[e]["down_frac"])
            rows.append(row)
    return pd.DataFrame(rows)


def _nanmean(x) -> float:
    """Mean over the non-NaN values; NaN (without NumPy's "mean of empty slice" warning) when there are none,
    e.g. an early-phase diagnostic of runs that all failed before the phase began."""
    x = np.asarray(x, dtype=float)
    return float(np.nanmean(x)) if np.any(~np.isnan(x)) else math.nan


def _stale(tab: pd.DataFrame) -> pd.DataFrame:
    return tab[tab["d"] >= 8]


def lm_faithful(tab: pd.DataFrame, d: int | None = None) -> list[str]:
    """The rungs that reproduce the LM's row (module docstring) at every ``d ≥ 8`` (or at ``d`` alone), in table order."""
    out = []
    S = _stale(tab) if d is None else tab[tab["d"] == d]
    for rung, T in S.groupby("rung", sort=False):
        n = T["n"]
        ok = ((T["fail_onpolicy"] >= FAIL_RATE * n).all() and (T["fail_is"] <= STABLE_RATE * n).all()
              and (T["fail_gmc"] <= STABLE_RATE * n).all() and (T["final_lo_is"] > 0).all()
              and (T["final_lo_gmc"] > 0).all())
        if ok:
            out.append(rung)
    return out


def first_failure(tab: pd.DataFrame, order) -> str | None:
    """The first rung in ``order`` where uncorrected stale training fails (module docstring), or ``None``."""
    S = _stale(tab)
    for rung in order:
        T = S[S["rung"] == rung]
        if len(T) and ((T["lo_onpolicy"] > 0) & (T["fail_onpolicy"] >= FAIL_RATE * T["n"])).any():
            return rung
    return None
