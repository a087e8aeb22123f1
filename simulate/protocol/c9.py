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

__all__ = ["SUBCLAIMS", "SUBCLAIMS_V2", "ARM_KINDS", "eval_values", "failures", "failure_split", "regime_of",
           "learning_regime", "saturation", "c9_instance", "c9_instance_v2", "c9_verdicts"]

SUBCLAIMS = ("is-unstable", "onpolicy-degrades", "tic-degrades", "tis-degrades", "gmc-best-or-tied", "gmc-stable")
#: Version 2: "best or tied" judged on each step-size arm, reported side by side.
SUBCLAIMS_V2 = ("is-unstable", "onpolicy-degrades", "tic-degrades", "tis-degrades", "gmc-best-or-tied (tuned η)",
                "gmc-best-or-tied (common η)", "gmc-stable")


def eval_values(table: pd.DataFrame, estimator: str, d: int, eps: float, G: int, column: str = "nauc",
                eta_kind: str = "tuned") -> pd.Series:
    """Per-seed values of ``column`` for one cell's evaluation runs at ``eta_kind`` (``tuned``,
    ``neighbour``, or ``fixed`` for C5 test A), indexed by seed (sorted)."""
    sel = table[(table.eta_kind == eta_kind) & (table.estimator == estimator) & (table.d == d) & (table.G == G)
                & np.isclose(table.eps, eps)]
    return sel.set_index("seed")[column].sort_index()


#: The η kinds of each step-size arm: the run's η and its grid neighbour η·2^{1/2}.
ARM_KINDS = {"tuned": ("tuned", "neighbour"), "common": ("common", "common-neighbour")}


def failures(table: pd.DataFrame, estimator: str, d: int, eps: float, G: int, arm: str = "tuned") -> tuple[int, int]:
    """``(failed runs, runs)`` at the η and the neighbour η of one cell's ``arm`` (evaluation seeds)."""
    sel = _arm_rows(table, estimator, d, eps, G, arm)
    return int(sel.failed.sum()), int(len(sel))


def failure_split(table: pd.DataFrame, estimator: str, d: int, eps: float, G: int, arm: str = "tuned") -> dict:
    """Counts of each failure mode (``diverged``, ``collapsed``, ``locked_in``) and ``n`` at one cell's arm."""
    sel = _arm_rows(table, estimator, d, eps, G, arm)
    col = sel["failure"] if "failure" in sel else pd.Series("", index=sel.index)
    return dict(n=int(len(sel)), **{m: int((col == m).sum()) for m in ("diverged", "collapsed", "locked_in")})


def _arm_rows(table, estimator, d, eps, G, arm):
    kinds = ARM_KINDS[arm]
    kind = table.eta_kind if "eta_kind" in table else pd.Series("tuned", index=table.index)
    return table[(table.phase == "eval") & kind.isin(kinds) & (table.estimator == estimator) & (table.d == d)
                 & (table.G == G) & np.isclose(table.eps, eps)]


def regime_of(chi2_med: float, proto: Protocol) -> str:
    """``local`` if the median χ² is at most ``local_chi2``, else ``far``."""
    return "local" if chi2_med <= proto.local_chi2 else "far"


def _eps_of(e: str, proto: Protocol) -> float:
    return float(proto.primary["eps"])


def c9_instance(table: pd.DataFrame, proto: Protocol) -> tuple[pd.DataFrame, pd.DataFrame]:
    """C9 on one instance's table: ``(comparisons, subclaims)`` tidy frames (module docstring);
    a version-2 protocol uses :func:`c9_instance_v2`."""
    if proto.version >= 2:
        return c9_instance_v2(table, proto)
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
    order = SUBCLAIMS_V2 if proto.version >= 2 else SUBCLAIMS
    matrix = matrix.reindex(index=[s for s in order if s in matrix.index], columns=list(sub.instance.unique()))
    agg = {s: vd.aggregate(list(matrix.loc[s].dropna())) for s in matrix.index}
    overall = vd.combine(list(agg.values())) if agg else vd.OUT_OF_SCOPE
    if proto.version >= 2:
        # the claim-level word comes only from the sub-claims tested in scope somewhere
        scoped = [v for v in agg.values() if v != vd.OUT_OF_SCOPE]
        overall = vd.combine(scoped) if scoped else vd.OUT_OF_SCOPE
    return dict(comparisons=comp, subclaims=sub, matrix=matrix, aggregate=agg, verdict=overall)


def learning_regime(table: pd.DataFrame, estimator: str, d: int, eps: float, G: int, proto: Protocol,
                    arm: str = "tuned") -> dict:
    """The overlap regime of one cell from its learning phase (v2): over the evaluation runs at the
    arm's η, the median of each run's learning-phase median χ²(π_θ‖μ), the mean of their means, the
    median of their 90th percentiles and the largest value, and ``local`` iff that median ≤ ``local_chi2``.
    A cell whose runs have no learning-phase step (solved at once) is ``unknown``."""
    sel = table[(table.phase == "eval") & (table.eta_kind == ARM_KINDS[arm][0]) & (table.estimator == estimator)
                & (table.d == d) & (table.G == G) & np.isclose(table.eps, eps)]
    if "chi2_learn_med" not in sel or sel.chi2_learn_med.notna().sum() == 0:
        return dict(regime="unknown", chi2_learn_med=np.nan, chi2_learn_mean=np.nan, chi2_learn_p90=np.nan,
                    chi2_learn_max=np.nan, chi2_all_med=float(sel.chi2_med.median()) if len(sel) else np.nan)
    med = float(sel.chi2_learn_med.median())
    return dict(regime=regime_of(med, proto), chi2_learn_med=med, chi2_learn_mean=float(sel.chi2_learn_mean.mean()),
                chi2_learn_p90=float(sel.chi2_learn_p90.median()), chi2_learn_max=float(sel.chi2_learn_max.max()),
                chi2_all_med=float(sel.chi2_med.median()))


def saturation(table: pd.DataFrame, proto: Protocol) -> dict:
    """Ceiling check of the primary G (v2): ``nAUC`` and zero-gradient fraction of the reference learner
    (onpolicy, else the first estimator) at ``d = 0``, tuned η; ``saturated`` when ``nAUC > saturation_nauc``
    or the zero-gradient fraction exceeds ``saturation_zero``."""
    p = proto.primary
    ests = sorted(set(table.estimator))
    ref = "onpolicy" if "onpolicy" in ests else ests[0]
    nauc = eval_values(table, ref, 0, float(p["eps"]), int(p["G"]))
    zero = eval_values(table, ref, 0, float(p["eps"]), int(p["G"]), "zero_frac")
    n_, z_ = float(nauc.mean()) if len(nauc) else np.nan, float(zero.mean()) if len(zero) else np.nan
    sat = bool(n_ > proto.saturation_nauc or z_ > proto.saturation_zero)
    why = (f"saturated: nAUC({ref}, d=0) = {n_:.3f} (> {proto.saturation_nauc:g}?) and zero-gradient fraction "
           f"{z_:.2f} (> {proto.saturation_zero:g}?) at G = {p['G']}") if sat else ""
    return dict(reference=ref, nauc_d0=n_, zero_frac_d0=z_, saturated=sat, reason=why)


def c9_instance_v2(table: pd.DataFrame, proto: Protocol) -> tuple[pd.DataFrame, pd.DataFrame]:
    """C9 on one instance under protocol v2 (docs/protocol.md, "Version 2"):

    - *degrades* and the failure-rate sub-claims on the **common-η arm** (the η tuned at d = 0, shared),
      failure = divergence | collapse | lock-in;
    - *gmc best or tied* on **both arms**, as two sub-claims, each against the rivals stable on that arm;
    - every comparison and rate prints its power (:func:`simulate.verdicts.comparison_power`,
      :func:`~simulate.verdicts.rate_power`); an ``inconclusive`` one below ``power_target`` says so;
    - a **saturated** instance (:func:`saturation`) is ``out of scope`` for every sub-claim, with the
      measurement, and the cell's regime comes from the learning phase (:func:`learning_regime`);
    - v3 (``rate_premise_d0``): a failure-rate sub-claim is ``out of scope`` when the same estimator at
      ``d = 0`` (common arm) already fails in more than ``p0`` of its runs; ``premise`` says so with the count.
    """
    p = proto.primary
    d, G, eps = int(p["d"]), int(p["G"]), float(p["eps"])
    ests = set(table.estimator.unique())
    sat = saturation(table, proto)
    reg = learning_regime(table, "gmc" if "gmc" in ests else sorted(ests)[0], d, eps, G, proto)
    comps, rates = [], []

    def diff(a_est, a_d, b_est, b_d, kind, subclaim, name, arm):
        a = eval_values(table, a_est, a_d, eps, G, eta_kind=ARM_KINDS[arm][0])
        b = eval_values(table, b_est, b_d, eps, G, eta_kind=ARM_KINDS[arm][0])
        seeds = a.index.intersection(b.index)
        if len(seeds) < 2:
            return
        c = vd.paired_comparison(a[seeds].to_numpy(), b[seeds].to_numpy(), kind=kind, margin=proto.margin,
                                 name=name, alpha=proto.alpha)
        comps.append((subclaim, arm, c, float(np.std(a[seeds].to_numpy() - b[seeds].to_numpy(), ddof=1))))

    for e in ("onpolicy", "tic", "tis"):
        if e in ests:
            diff(e, 0, e, d, "superiority", f"{e}-degrades", f"{e}(d=0) − {e}(d={d}), common η", "common")
    if "gmc" in ests:
        for arm in ("tuned", "common"):
            for x in sorted(ests - {"gmc"}):
                nf, n = failures(table, x, d, eps, G, arm)
                if n and nf / n <= proto.failure_p0:  # only stable rivals count ("among the stable")
                    diff("gmc", d, x, d, "noninferiority", f"gmc-best-or-tied ({arm} η)", f"gmc − {x} (d={d}, {arm} η)",
                         arm)
    premise = {}
    for e, direction, name in (("is", "above", "is-unstable"), ("gmc", "below", "gmc-stable")):
        if e in ests:
            nf, n = failures(table, e, d, eps, G, "common")
            if n:
                split = failure_split(table, e, d, eps, G, "common")
                rates.append((name, vd.rate_check(nf, n, p0=proto.failure_p0, direction=direction, name=name,
                                                  alpha=proto.alpha), split))
                if proto.rate_premise_d0:  # v3: a failure at d is the delay's only if the d = 0 learner is stable
                    nf0, n0 = failures(table, e, 0, eps, G, "common")
                    if n0 and nf0 / n0 > proto.failure_p0:
                        premise[name] = (f"out of scope: {e} at d = 0 already fails {nf0}/{n0} "
                                         f"(> p0 = {proto.failure_p0:g}), so failures at d = {d} are not the delay's")
    decided = vd.decide([c for _, _, c, _ in comps], alpha=proto.alpha)
    rows = []
    for (s_, arm, _, sd), c in zip(comps, decided):
        pw = vd.comparison_power(c.n, sd, proto.margin, c.alpha_level) if c.n >= 2 else np.nan
        rows.append(dict(subclaim=s_, arm=arm, test="paired t", power=pw, **c.as_dict()))
    for s_, r, split in rates:
        pw = vd.rate_power(r.n, proto.failure_p0, r.direction, proto.alpha)
        rows.append(dict(subclaim=s_, arm="common", test="Clopper–Pearson", power=pw, name=r.name,
                         kind=f"rate {r.direction} p0", margin=np.nan, threshold=r.p0, n=r.n, estimate=r.rate,
                         lo=r.lo, hi=r.hi, verdict=vd.OUT_OF_SCOPE if s_ in premise else r.verdict,
                         premise=premise.get(s_, ""), diverged=split["diverged"], collapsed=split["collapsed"],
                         locked_in=split["locked_in"]))
    comp = pd.DataFrame(rows)
    if len(comp):
        comp["underpowered"] = (comp.verdict == vd.INCONCLUSIVE) & (comp.power < proto.power_target)
        if sat["saturated"]:
            comp["verdict"] = vd.OUT_OF_SCOPE
    sub = (comp.groupby("subclaim", sort=False)["verdict"].agg(lambda v: vd.combine(list(v))).reset_index()
           if len(comp) else pd.DataFrame(columns=["subclaim", "verdict"]))
    sub["regime"] = reg["regime"]
    sub["chi2_median"] = reg["chi2_learn_med"]
    for k in ("chi2_learn_mean", "chi2_learn_p90", "chi2_learn_max", "chi2_all_med"):
        sub[k] = reg[k]
    for k in ("nauc_d0", "zero_frac_d0", "saturated", "reason"):
        sub[k] = sat[k]
    return comp, sub
