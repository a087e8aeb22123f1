"""The regime map's tables, read from its runs (one row per held-out seed of every map cell; docs/protocol.md).

- :func:`cell_table`: one row per ``(instance, estimator, d, G, ε, arm, f)``: mean nAUC, the failure split and the
  mechanism columns (learning-phase χ², early ESS, final entropy, lock-in rate);
- :func:`comparisons` (tidy, one row per ``(instance, d, G, ε, arm, f, comparison)``):
  ``Δ_s = nAUC_s(gmc) − nAUC_s(X)`` paired over seeds s, with X = onpolicy (``kind="superiority"``: the
  claim "gmc helps" is ``E Δ > +δ``) and X = the best other estimator of the cell (``kind="noninferiority"``:
  "gmc best or tied" is ``E Δ > −δ``, as C9; v4 ``gmc − best rival``: every rival, a failed run keeps its
  nAUC; v2/v3 ``gmc − best stable``: among the rivals failing in at most p₀); δ = the protocol's margin.
  Estimate, s.e., the two-sided 95 % t-interval ``Δ̄ ± t_{n−1,0.975}·s/√n``, the verdict against the
  threshold (:func:`simulate.verdicts.paired_comparison`, a family of one) and a sign label against 0:
  ``gmc ahead`` (lo > 0), ``gmc behind`` (hi < 0), ``n.s.``. No multiplicity correction over the map:
  it is a description, the pre-registered verdicts stay C9's;
- :func:`boundary`: per ``(instance, G, ε, arm, f)`` the smallest d at which gmc is significantly ahead of
  onpolicy (interval above 0) and the smallest d at which onpolicy is significantly ahead of gmc, or
  ``"none up to d = max d"``.

The runs come from :mod:`simulate.protocol.regime_map` (which re-exports every name here).
"""
from __future__ import annotations

import math

import pandas as pd

from simulate import verdicts as vd
from simulate.protocol.spec import Protocol

__all__ = ["cell_table", "comparisons", "boundary", "best_label", "ESTIMATORS", "KEYS", "FAILURES", "LEVEL",
           "COMPARISONS"]

#: The estimators a map compares (gmc against each of the others).
ESTIMATORS = ("onpolicy", "is", "tis", "tic", "gmc")
COMPARISONS = ("gmc − onpolicy", "gmc − best stable")
#: One map cell: the arm ("common": η = f·η₀; "tuned": η tuned per cell, f = 1).
KEYS = ["instance", "estimator", "d", "G", "eps", "arm", "eta_factor"]
FAILURES = ("diverged", "collapsed", "locked_in")
LEVEL = 0.95  # the map's intervals: two-sided 95 % t


def cell_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per ``(instance, estimator, d, G, eps, eta_factor)``: ``n``, mean nAUC, the failure split
    (counts of ``failure`` = diverged/collapsed/locked_in), ``fail_rate``, and the mechanism columns:
    ``chi2_learn`` (median over runs of the learning-phase median χ²), ``ess_early`` (mean early weight
    ESS), ``entropy_final`` (mean), ``lockin_rate``."""
    keys = KEYS
    runs = _with_arm(runs)
    g = runs.groupby(keys, sort=True)
    out = g.agg(eta=("eta", "first"), n=("nauc", "size"), nauc=("nauc", "mean"), final_nJ=("final_nJ", "mean"),
                fail_rate=("failed", "mean"), chi2_learn=("chi2_learn_med", "median"),
                ess_early=("ess_early", "mean"), entropy_final=("entropy_final", "mean"),
                lockin_rate=("locked_in", "mean"), zero_frac=("zero_frac", "mean")).reset_index()
    for f in FAILURES:
        out[f"n_{f}"] = g.failure.agg(lambda v, f=f: int((v == f).sum())).to_numpy()
    return out


def _with_arm(df: pd.DataFrame) -> pd.DataFrame:
    """Tables written before the tuned arm (no ``arm`` column) are the common arm."""
    return df if "arm" in df else df.assign(arm="common")


def comparisons(runs: pd.DataFrame, proto: Protocol, estimators=ESTIMATORS) -> pd.DataFrame:
    """The tidy comparison table (module docstring): per ``(instance, d, G, eps, eta_factor)`` two rows,
    ``gmc − onpolicy`` and ``gmc − best stable``. A rival is *stable* in a cell when its failure fraction
    is ≤ the protocol's ``failure_p0`` (C9's rule); the best stable rival has the largest mean nAUC.
    Columns: the keys, ``comparison``, ``rival``, ``kind``, ``margin``, ``threshold``, ``n``, ``estimate``,
    ``se``, ``lo``/``hi`` (95 % t), ``verdict``, ``sign``, the rival's and gmc's mean nAUC and mechanism
    columns, and ``{e}_{diverged|collapsed|locked_in}`` counts for every estimator of the cell."""
    runs = _with_arm(runs)
    cells = cell_table(runs)
    pe, eps_est = float(proto.primary["eps"]), tuple(proto.eps_estimators)
    others = [e for e in estimators if e != "gmc"]
    vals = {k: s.set_index("seed").nauc for k, s in runs.groupby(KEYS)}
    cidx = cells.set_index(KEYS)
    rows = []
    gmc = cells[cells.estimator == "gmc"]
    for r in gmc.itertuples(index=False):
        inst, d, G, eps, arm, f = r.instance, r.d, r.G, r.eps, r.arm, r.eta_factor
        key = lambda e: (inst, e, d, G, _eps_of(e, eps, pe, eps_est), arm, f)  # noqa: E731
        present = [e for e in others if key(e) in cidx.index]
        base = dict(instance=inst, d=int(d), G=int(G), eps=float(eps), arm=arm, eta_factor=float(f), eta=float(r.eta),
                    nauc_gmc=r.nauc, fail_rate_gmc=r.fail_rate, chi2_learn_gmc=r.chi2_learn,
                    ess_early_gmc=r.ess_early, entropy_final_gmc=r.entropy_final)
        for e in ("gmc", *present):
            for fl in FAILURES:
                base[f"{e}_{fl}"] = int(cidx.loc[key(e), f"n_{fl}"])
        # v4: no rival is dropped for failing (a failed run keeps its nAUC); v2/v3: the best *stable* rival
        stable = [e for e in present if proto.version >= 4 or cidx.loc[key(e), "fail_rate"] <= proto.failure_p0]
        best = max(stable, key=lambda e: cidx.loc[key(e), "nauc"]) if stable else None
        for comp, rival, kind in (("gmc − onpolicy", "onpolicy" if "onpolicy" in present else None, "superiority"),
                                  (best_label(proto), best, "noninferiority")):
            row = dict(base, comparison=comp, rival=rival, kind=kind, margin=proto.margin)
            if rival is None:
                row.update(n=0, estimate=math.nan, se=math.nan, lo=math.nan, hi=math.nan, verdict=vd.INCONCLUSIVE,
                           sign="no stable rival" if comp.startswith("gmc − best") else "n.s.",
                           threshold=proto.margin if kind == "superiority" else -proto.margin)
            else:
                row.update(_compare(vals[key("gmc")], vals[key(rival)], kind, proto.margin, f"{comp} ({rival})"))
                c = cidx.loc[key(rival)]
                row.update(nauc_rival=c.nauc, fail_rate_rival=c.fail_rate, chi2_learn_rival=c.chi2_learn,
                           ess_early_rival=c.ess_early, entropy_final_rival=c.entropy_final)
            rows.append(row)
    out = pd.DataFrame(rows)
    front = ["instance", "d", "G", "eps", "arm", "eta_factor", "comparison", "rival", "kind", "margin", "threshold",
             "n", "estimate", "se", "lo", "hi", "verdict", "sign"]
    return out[front + [c for c in out.columns if c not in front]].sort_values(
        ["instance", "G", "eps", "arm", "eta_factor", "comparison", "d"], kind="stable").reset_index(drop=True)


def _eps_of(estimator: str, eps: float, primary_eps: float, eps_estimators) -> float:
    return float(eps) if estimator in eps_estimators else float(primary_eps)


def _compare(a: pd.Series, b: pd.Series, kind: str, margin: float, name: str) -> dict:
    seeds = a.index.intersection(b.index)
    if len(seeds) < 2:
        return dict(n=len(seeds), estimate=math.nan, se=math.nan, lo=math.nan, hi=math.nan, verdict=vd.INCONCLUSIVE,
                    sign="n.s.")
    c = vd.paired_comparison(a[seeds].to_numpy(), b[seeds].to_numpy(), kind=kind, margin=margin, name=name,
                             alpha=(1 - LEVEL) / 2)  # a family of one: its interval is the two-sided 95 % t
    sign = "gmc ahead" if c.lo > 0 else "gmc behind" if c.hi < 0 else "n.s."
    return dict(n=c.n, estimate=c.estimate, se=c.se, lo=c.lo, hi=c.hi, threshold=c.threshold, verdict=c.verdict,
                sign=sign)


def best_label(proto: Protocol) -> str:
    """The second comparison's name: ``gmc − best rival`` (v4: every rival) or ``gmc − best stable`` (v2/v3)."""
    return "gmc − best rival" if proto.version >= 4 else "gmc − best stable"


def boundary(comp: pd.DataFrame, delays=None) -> pd.DataFrame:
    """Per ``(instance, G, eps, arm, eta_factor)`` from the ``gmc − onpolicy`` rows of :func:`comparisons`:
    ``d_gmc_ahead`` = min{d : lo_d > 0} (95 % t-interval above 0), ``d_onpolicy_ahead`` = min{d : hi_d < 0},
    each ``None`` when no d qualifies, with a text (``"d = 8 (+0.031 [0.012, 0.050])"`` or
    ``"none up to d = 64"``, the largest d of ``delays``, default the table's), the delays where each side
    is ahead, and ``d_gmc_ahead_from``: the smallest d from which gmc is ahead at *every* larger grid d."""
    sel = _with_arm(comp[comp.comparison == "gmc − onpolicy"])
    rows = []
    for (inst, G, eps, arm, f), s in sel.groupby(["instance", "G", "eps", "arm", "eta_factor"], sort=True):
        s = s.sort_values("d")
        dmax = int(max(delays)) if delays is not None else int(s.d.max())
        ahead, behind = s[s.lo > 0], s[s.hi < 0]

        def first(t):
            if t.empty:
                return None, f"none up to d = {dmax}"
            r = t.iloc[0]
            return int(r.d), f"d = {int(r.d)} ({r.estimate:+.3f} [{r.lo:.3f}, {r.hi:.3f}])"

        da, ta = first(ahead)
        db, tb = first(behind)
        ok = (s.lo > 0).to_numpy()
        tail = None
        for i in range(len(ok) - 1, -1, -1):  # walk down from the largest d while gmc stays ahead
            if not ok[i]:
                break
            tail = int(s.d.iloc[i])
        rows.append(dict(instance=inst, G=int(G), eps=float(eps), arm=arm, eta_factor=float(f), d_gmc_ahead=da,
                         gmc_ahead=ta,
                         d_onpolicy_ahead=db, onpolicy_ahead=tb, d_gmc_ahead_from=tail,
                         gmc_ahead_at=",".join(str(int(x)) for x in ahead.d), onpolicy_ahead_at=",".join(
                             str(int(x)) for x in behind.d), d_max=dmax))
    out = pd.DataFrame(rows, columns=["instance", "G", "eps", "arm", "eta_factor", "d_gmc_ahead", "gmc_ahead",
                                      "d_onpolicy_ahead", "onpolicy_ahead", "d_gmc_ahead_from", "gmc_ahead_at",
                                      "onpolicy_ahead_at", "d_max"])
    for c in ("d_gmc_ahead", "d_onpolicy_ahead", "d_gmc_ahead_from"):
        out[c] = out[c].astype("Int64")  # missing = no such d (not NaN in a float column)
    return out
