"""C9 (empirical robustness) as pre-declared comparisons on the primary cell (docs/THEORY.md §3 C9).

On each instance, at the protocol's primary cell ``(ε, G, d)`` against ``d = 0``, with η tuned on the
tuning seeds and every number below measured on the held-out evaluation seeds:

==================  =========================================================================  ===========
sub-claim           comparison                                                                 kind
==================  =========================================================================  ===========
is-unstable         failure rate of ``is`` at d (tuned and neighbour η) above ``failure_p0``   rate
onpolicy-degrades   ``nauc(onpolicy, 0) − nauc(onpolicy, d) > δ``                              superiority
tic-degrades        ``nauc(tic, 0) − nauc(tic, d) > δ``                                        superiority
tis-degrades        ``nauc(tis, 0) − nauc(tis, d) > δ``                                        superiority
gmc-best-or-tied    ``nauc(gmc, d) − nauc(X, d) > −δ`` for every other X stable at d            non-inferiority
gmc-stable          failure rate of ``gmc`` at d (tuned and neighbour η) below ``failure_p0``  rate
==================  =========================================================================  ===========

Differences are paired by seed; Holm runs over all t-comparisons of C9 on one instance
(:func:`simulate.verdicts.decide`). A sub-claim with several comparisons holds if all hold and is
refuted if any is (:func:`simulate.verdicts.combine`). Across instances each sub-claim is
aggregated by :func:`simulate.verdicts.aggregate`; C9 as a whole combines its sub-claims.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulate import verdicts as vd
from simulate.protocol.spec import Protocol

__all__ = ["SUBCLAIMS", "eval_values", "failures", "regime_of", "c9_instance", "c9_verdicts"]

SUBCLAIMS = ("is-unstable", "onpolicy-degrades", "tic-degrades", "tis-degrades", "gmc-best-or-tied", "gmc-stable")


def eval_values(table: pd.DataFrame, estimator: str, d: int, eps: float, G: int, column: str = "nauc",
                eta_kind: str = "tuned") -> pd.Series:
    """Per-seed values of ``column`` for one cell's evaluation runs at ``eta_kind`` (``tuned``,
    ``neighbour``, or ``fixed`` for C5 test A), indexed by seed (sorted)."""
    sel = table[(table.eta_kind == eta_kind) & (table.estimator == estimator) & (table.d == d) & (table.G == G)
                & np.isclose(table.eps, eps)]
    return sel.set_index("seed")[column].sort_index()


def failures(table: pd.DataFrame, estimator: str, d: int, eps: float, G: int) -> tuple[int, int]:
    """``(failed runs, runs)`` at the tuned and the neighbour η of one cell (evaluation seeds)."""
    sel = table[(table.phase == "eval") & (table.estimator == estimator) & (table.d == d) & (table.G == G)
                & np.isclose(table.eps, eps)]
    return int(sel.failed.sum()), int(len(sel))


def regime_of(chi2_med: float, proto: Protocol) -> str:
    """``local`` if the median χ² is at most ``local_chi2``, else ``far``."""
    return "local" if chi2_med <= proto.local_chi2 else "far"


def _eps_of(e: str, proto: Protocol) -> float:
    return float(proto.primary["eps"])


def c9_instance(table: pd.DataFrame, proto: Protocol) -> tuple[pd.DataFrame, pd.DataFrame]:
    """C9 on one instance's table: ``(comparisons, subclaims)`` tidy frames (module docstring)."""
    p = proto.primary
    d, G = int(p["d"]), int(p["G"])
    ests = set(table.estimator.unique())
    comps, rates = [], []

    def diff(a_est, a_d, b_est, b_d, kind, subclaim, name):
        a = eval_values(table, a_est, a_d, _eps_of(a_est, proto), G)
        b = eval_values(table, b_est, b_d, _eps_of(b_est, proto), G)
        seeds = a.index.intersection(b.index)
        c = vd.paired_comparison(a[seeds].to_numpy(), b[seeds].to_numpy(), kind=kind, margin=proto.margin,
                                 name=name, alpha=proto.alpha)
        comps.append((subclaim, c))

    for e in ("onpolicy", "tic", "tis"):
        if e in ests:
            diff(e, 0, e, d, "superiority", f"{e}-degrades", f"{e}(d=0) − {e}(d={d})")
    if "gmc" in ests:
        for x in sorted(ests - {"gmc"}):
            nf, n = failures(table, x, d, _eps_of(x, proto), G)
            if n and nf / n <= proto.failure_p0:  # only stable competitors count ("among the stable")
                diff("gmc", d, x, d, "noninferiority", "gmc-best-or-tied", f"gmc − {x} (d={d})")
    for e, direction, name in (("is", "above", "is-unstable"), ("gmc", "below", "gmc-stable")):
        if e in ests:
            nf, n = failures(table, e, d, _eps_of(e, proto), G)
            rates.append((name, vd.rate_check(nf, n, p0=proto.failure_p0, direction=direction, name=name,
                                              alpha=proto.alpha)))
    decided = vd.decide([c for _, c in comps], alpha=proto.alpha)
    rows = [dict(subclaim=s, test="paired t", **c.as_dict()) for (s, _), c in zip(comps, decided)]
    rows += [dict(subclaim=s, test="Clopper–Pearson", name=r.name, kind=f"rate {r.direction} p0", margin=np.nan,
                  threshold=r.p0, n=r.n, estimate=r.rate, lo=r.lo, hi=r.hi, verdict=r.verdict) for s, r in rates]
    comp = pd.DataFrame(rows)
    chi2 = eval_values(table, "gmc" if "gmc" in ests else sorted(ests)[0], d, float(p["eps"]), G, "chi2_med")
    regime = regime_of(float(np.median(chi2)), proto) if len(chi2) else "unknown"
    sub = (comp.groupby("subclaim", sort=False)["verdict"].agg(lambda v: vd.combine(list(v))).reset_index()
           if len(comp) else pd.DataFrame(columns=["subclaim", "verdict"]))
    sub["regime"] = regime
    sub["chi2_median"] = float(np.median(chi2)) if len(chi2) else np.nan
    return comp, sub


def c9_verdicts(table: pd.DataFrame, proto: Protocol) -> dict:
    """C9 over every instance of ``table``: per-instance comparisons and sub-claims, the verdict
    matrix (sub-claim × instance), the aggregate per sub-claim and the overall verdict."""
    comps, subs = [], []
    for inst, t in table.groupby("instance", sort=False):
        c, s = c9_instance(t, proto)
        comps.append(c.assign(instance=inst))
        subs.append(s.assign(instance=inst))
    comp = pd.concat(comps, ignore_index=True)
    sub = pd.concat(subs, ignore_index=True)
    matrix = sub.pivot(index="subclaim", columns="instance", values="verdict")
    matrix = matrix.reindex(index=[s for s in SUBCLAIMS if s in matrix.index], columns=list(sub.instance.unique()))
    agg = {s: vd.aggregate(list(matrix.loc[s].dropna())) for s in matrix.index}
    overall = vd.combine(list(agg.values())) if agg else vd.OUT_OF_SCOPE
    return dict(comparisons=comp, subclaims=sub, matrix=matrix, aggregate=agg, verdict=overall)
