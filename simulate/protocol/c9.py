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
from scipy import stats

from simulate import verdicts as vd
from simulate.protocol.spec import Protocol

__all__ = ["SUBCLAIMS", "SUBCLAIMS_V2", "ARM_KINDS", "eval_values", "failures", "failure_split", "regime_of",
           "median_interval", "learning_regime", "saturation", "c9_instance", "c9_instance_v2", "c9_verdicts",
           "heldout_check", "sensitivity_table", "SENSITIVITY_KINDS"]

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
    """``local`` if the median χ² is at most ``local_chi2`` (the threshold itself is local), else ``far``."""
    if not np.isfinite(chi2_med):
        raise ValueError(f"chi2_med must be a finite number to name a regime, got {chi2_med!r}")
    return "local" if chi2_med <= proto.local_chi2 else "far"


def median_interval(x, level: float = 0.95) -> tuple[float, float, float]:
    """``(median, lo, hi)``: the distribution-free interval of a median from order statistics
    (``scipy.stats.binom``: ``x_(j) ≤ m ≤ x_(n+1−j)`` with ``P(Bin(n, ½) < j) ≤ (1 − level)/2``);
    ``(median, −inf, inf)`` when ``n`` is too small for that level."""
    v = np.sort(np.asarray(x, dtype=np.float64))
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.nan, np.nan, np.nan
    j = int(stats.binom.ppf((1 - level) / 2, v.size, 0.5))  # P(Bin ≤ j − 1) ≤ (1 − level)/2
    if j < 1:
        return float(np.median(v)), -np.inf, np.inf
    return float(np.median(v)), float(v[j - 1]), float(v[v.size - j])


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


#: The sensitivity line (v4): the verdicts at η·2^{sensitivity_step_log2} on each arm; the kinds are relabelled
#: so that the lower η plays the run's η and the run's η its neighbour above (one half-octave apart).
SENSITIVITY_KINDS = {"lower": "tuned", "tuned": "neighbour", "common-lower": "common", "common": "common-neighbour"}
_RUN_KEYS = ["instance", "estimator", "d", "eps", "G", "phase", "eta_kind", "eta", "seed"]


def c9_verdicts(table: pd.DataFrame, proto: Protocol, *, sensitivity: bool = True) -> dict:
    """C9 over every instance of ``table``: per-instance comparisons and sub-claims, the verdict
    matrix (sub-claim × instance), the aggregate per sub-claim and the overall verdict. A table with a
    repeated run (same cell, phase, η kind, η and seed) is refused: it would double n. Version 4 adds
    ``heldout`` (:func:`heldout_check`) and ``sensitivity`` (the same verdicts at η/√2 on both arms,
    :func:`sensitivity_table`)."""
    if "eta_kind" not in table:
        table = table.assign(eta_kind="tuned")
    keys = [k for k in _RUN_KEYS if k in table]
    dup = table.duplicated(keys)
    if dup.any():
        raise ValueError(f"table holds {int(dup.sum())} repeated run(s) (same {', '.join(keys)}): each run must "
                         f"appear once, or n is inflated; first: {table[dup].iloc[0][keys].to_dict()}")
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
    out = dict(comparisons=comp, subclaims=sub, matrix=matrix, aggregate=agg, verdict=overall)
    if proto.version >= 4:
        out["heldout"] = heldout_check(table, proto)
        if sensitivity and "lower" in set(table.eta_kind):
            out["sensitivity"] = sensitivity_table(table, proto)
    return out


def sensitivity_table(table: pd.DataFrame, proto: Protocol) -> dict:
    """C9's verdicts with every arm's η replaced by ``η·2^{sensitivity_step_log2}`` (:data:`SENSITIVITY_KINDS`):
    ``{matrix, aggregate, verdict}``."""
    ev = table[table.phase == "eval"]
    keep = ev[ev.eta_kind.isin(list(SENSITIVITY_KINDS))]
    t = pd.concat([table[table.phase != "eval"], keep.assign(eta_kind=keep.eta_kind.map(SENSITIVITY_KINDS))],
                  ignore_index=True)
    r = c9_verdicts(t, proto, sensitivity=False)
    return dict(matrix=r["matrix"], aggregate=r["aggregate"], verdict=r["verdict"])


def heldout_check(table: pd.DataFrame, proto: Protocol) -> pd.DataFrame:
    """Per tuned cell: the chosen η, its tuning mean and lower bound (tuning seeds), the held-out mean
    nAUC at that η with its 95 % t-interval, ``gap = held-out − tuning`` and ``flagged`` when the held-out
    mean is more than ``heldout_margin`` below the tuning mean (an η that did not survive new seeds). The per-cell
    values (η, tuning mean and bound, edge flag) must agree on every row of a cell, else ``ValueError``."""
    keys = ["instance", "estimator", "d", "eps", "G"]
    ev = table[(table.phase == "eval") & (table.eta_kind == "tuned")]
    rows = []
    for k, s in ev.groupby(keys, sort=True):
        for col in ("eta_tuned", "tune_nauc", "tune_lcb", "eta_at_edge"):  # one value per cell (run_cell writes it)
            if col in s and s[col].nunique(dropna=False) > 1:
                raise ValueError(f"{col} must take one value per tuned cell; {dict(zip(keys, k))} has "
                                 f"{sorted(s[col].unique().tolist())} (a damaged or merged table)")
        m, lo, hi = vd.t_interval(s.nauc.to_numpy())
        tn = float(s.tune_nauc.iloc[0]) if "tune_nauc" in s else np.nan
        rows.append(dict(zip(keys, k), eta_tuned=float(s.eta_tuned.iloc[0]), tune_nauc=tn,
                         tune_lcb=float(s.tune_lcb.iloc[0]) if "tune_lcb" in s else np.nan, heldout_nauc=m,
                         heldout_lo=lo, heldout_hi=hi, n=len(s), gap=m - tn,
                         flagged=bool(m < tn - proto.heldout_margin), eta_at_edge=bool(s.eta_at_edge.iloc[0])))
    return pd.DataFrame(rows)


def learning_regime(table: pd.DataFrame, estimator: str, d: int, eps: float, G: int, proto: Protocol,
                    arm: str = "tuned") -> dict:
    """The overlap regime of one cell from its learning phase (v2): over the evaluation runs at the
    arm's η, the median of each run's learning-phase median χ²(π_θ‖μ) (with its 95 % order-statistic
    interval, :func:`median_interval`), the mean of their means, the median of their 90th percentiles and
    the largest value, and ``local`` iff that median ≤ ``local_chi2``. C9 and C5-T take the regime of
    **gmc's** cell (the claim's estimator), whatever the rivals' χ². A cell whose runs have no
    learning-phase step (solved at once) is ``unknown``."""
    sel = table[(table.phase == "eval") & (table.eta_kind == ARM_KINDS[arm][0]) & (table.estimator == estimator)
                & (table.d == d) & (table.G == G) & np.isclose(table.eps, eps)]
    if "chi2_learn_med" not in sel or sel.chi2_learn_med.notna().sum() == 0:
        return dict(regime="unknown", chi2_learn_med=np.nan, chi2_lo=np.nan, chi2_hi=np.nan, chi2_learn_mean=np.nan,
                    chi2_learn_p90=np.nan, chi2_learn_max=np.nan,
                    chi2_all_med=float(sel.chi2_med.median()) if len(sel) else np.nan)
    med, lo, hi = median_interval(sel.chi2_learn_med)
    return dict(regime=regime_of(med, proto), chi2_learn_med=med, chi2_lo=lo, chi2_hi=hi,
                chi2_learn_mean=float(sel.chi2_learn_mean.mean()), chi2_learn_p90=float(sel.chi2_learn_p90.median()),
                chi2_learn_max=float(np.nanmax(sel.chi2_learn_max.to_numpy(dtype=float))),
                chi2_all_med=float(sel.chi2_med.median()))


def saturation(table: pd.DataFrame, proto: Protocol) -> dict:
    """Ceiling check of the primary G (v2): ``nAUC`` and zero-gradient fraction of the reference learner
    (onpolicy, else the first estimator) at ``d = 0``, tuned η, on the held-out seeds; ``saturated`` when
    ``nAUC > saturation_nauc`` or the zero-gradient fraction exceeds ``saturation_zero``. v4 judges each on
    its one-sided ``1 − alpha`` lower t-bound (saturation shown, not suggested) and reports the two-sided
    95 % t-intervals (``*_lo``, ``*_hi``)."""
    p = proto.primary
    ests = sorted(set(table.estimator))
    ref = "onpolicy" if "onpolicy" in ests else ests[0]
    nauc = eval_values(table, ref, 0, float(p["eps"]), int(p["G"]))
    zero = eval_values(table, ref, 0, float(p["eps"]), int(p["G"]), "zero_frac")
    n_, z_ = float(nauc.mean()) if len(nauc) else np.nan, float(zero.mean()) if len(zero) else np.nan
    out = dict(reference=ref, nauc_d0=n_, zero_frac_d0=z_)
    if proto.version >= 4:
        (_, nlo, nhi), (_, zlo, zhi) = (vd.t_interval(v.to_numpy()) if len(v) >= 2 else (np.nan,) * 3
                                        for v in (nauc, zero))
        (_, nb, _), (_, zb, _) = (vd.t_interval(v.to_numpy(), 1 - 2 * proto.alpha) if len(v) >= 2 else (np.nan,) * 3
                                  for v in (nauc, zero))
        sat = bool(nb > proto.saturation_nauc or zb > proto.saturation_zero)
        out.update(nauc_d0_lo=nlo, nauc_d0_hi=nhi, zero_frac_d0_lo=zlo, zero_frac_d0_hi=zhi)
        why = (f"saturated: nAUC({ref}, d=0) = {n_:.3f} [95 % t {nlo:.3f}, {nhi:.3f}], lower bound {nb:.3f} "
               f"(> {proto.saturation_nauc:g}?); zero-gradient fraction {z_:.3f} [{zlo:.3f}, {zhi:.3f}], lower bound "
               f"{zb:.3f} (> {proto.saturation_zero:g}?) at G = {p['G']}, held-out seeds") if sat else ""
    else:
        sat = bool(n_ > proto.saturation_nauc or z_ > proto.saturation_zero)
        why = (f"saturated: nAUC({ref}, d=0) = {n_:.3f} (> {proto.saturation_nauc:g}?) and zero-gradient fraction "
               f"{z_:.2f} (> {proto.saturation_zero:g}?) at G = {p['G']}") if sat else ""
    return dict(out, saturated=sat, reason=why)


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
      ``d = 0`` (common arm) already fails in more than ``p0`` of its runs; ``premise`` says so with the count;
    - v4: *gmc best or tied* compares gmc with **every** other estimator (no rival dropped: a failed run
      keeps its nAUC; the rival's failure rate is printed beside); the failure-rate sub-claims are judged on
      **both arms** (rows per arm, combined), and the d = 0 premise of each arm fails only when the
      Clopper–Pearson interval of the d = 0 failure rate lies above ``p0`` (printed with the interval).
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
    v4 = proto.version >= 4
    rival_rate = {}
    if "gmc" in ests:
        for arm in ("tuned", "common"):
            for x in sorted(ests - {"gmc"}):
                nf, n = failures(table, x, d, eps, G, arm)
                rival_rate[(arm, x)] = nf / n if n else np.nan
                if v4 or (n and nf / n <= proto.failure_p0):  # v2/v3: only stable rivals ("among the stable")
                    diff("gmc", d, x, d, "noninferiority", f"gmc-best-or-tied ({arm} η)", f"gmc − {x} (d={d}, {arm} η)",
                         arm)
    premise = {}
    for e, direction, name in (("is", "above", "is-unstable"), ("gmc", "below", "gmc-stable")):
        for arm in (("tuned", "common") if v4 else ("common",)):
            if e not in ests:
                continue
            nf, n = failures(table, e, d, eps, G, arm)
            if not n:
                continue
            split = failure_split(table, e, d, eps, G, arm)
            rates.append((name, arm, vd.rate_check(nf, n, p0=proto.failure_p0, direction=direction, name=name,
                                                   alpha=proto.alpha), split))
            if proto.rate_premise_d0:  # v3: a failure at d is the delay's only if the d = 0 learner is stable
                nf0, n0 = failures(table, e, 0, eps, G, arm)
                if not n0:
                    continue
                r0 = vd.rate_check(nf0, n0, p0=proto.failure_p0, direction="above", alpha=proto.alpha)
                if (r0.lo > proto.failure_p0) if v4 else (nf0 / n0 > proto.failure_p0):
                    ci = f", {1 - 2 * proto.alpha:.0%} Clopper–Pearson [{r0.lo:.2f}, {r0.hi:.2f}]" if v4 else ""
                    premise[(name, arm)] = (f"out of scope: {e} at d = 0 already fails {nf0}/{n0}{ci} "
                                            f"(> p0 = {proto.failure_p0:g}), so failures at d = {d} are not the delay's")
    decided = vd.decide([c for _, _, c, _ in comps], alpha=proto.alpha)
    rows = []
    for (s_, arm, c0, sd), c in zip(comps, decided):
        pw = vd.comparison_power(c.n, sd, proto.margin, c.alpha_level) if c.n >= 2 else np.nan
        rival = c0.name.split(" − ", 1)[1].split(" (", 1)[0] if s_.startswith("gmc-best") else ""
        extra = dict(rival=rival, rival_fail_rate=rival_rate.get((arm, rival), np.nan)) if v4 and rival else {}
        rows.append(dict(subclaim=s_, arm=arm, test="paired t", power=pw, **c.as_dict(), **extra))
    for s_, arm, r, split in rates:
        pw = vd.rate_power(r.n, proto.failure_p0, r.direction, proto.alpha)
        out = premise.get((s_, arm), "")
        rows.append(dict(subclaim=s_, arm=arm, test="Clopper–Pearson", power=pw, name=f"{r.name} ({arm} η)" if v4
                         else r.name, kind=f"rate {r.direction} p0", margin=np.nan, threshold=r.p0, n=r.n,
                         estimate=r.rate, lo=r.lo, hi=r.hi, verdict=vd.OUT_OF_SCOPE if out else r.verdict,
                         premise=out, diverged=split["diverged"], collapsed=split["collapsed"],
                         locked_in=split["locked_in"]))
    comp = pd.DataFrame(rows)
    if len(comp):
        comp["underpowered"] = (comp.verdict == vd.INCONCLUSIVE) & (comp.power < proto.power_target)
        if sat["saturated"]:  # every row says which premise failed, with its measurement (issue 58)
            comp["verdict"] = vd.OUT_OF_SCOPE
            own = comp["premise"] if "premise" in comp else pd.Series([""] * len(comp), index=comp.index)
            comp["premise"] = [x if isinstance(x, str) and x else sat["reason"] for x in own]
    sub = (comp.groupby("subclaim", sort=False)["verdict"].agg(lambda v: vd.combine(list(v))).reset_index()
           if len(comp) else pd.DataFrame(columns=["subclaim", "verdict"]))
    sub["regime"] = reg["regime"]
    sub["chi2_median"] = reg["chi2_learn_med"]
    for k in ("chi2_lo", "chi2_hi", "chi2_learn_mean", "chi2_learn_p90", "chi2_learn_max", "chi2_all_med"):
        sub[k] = reg[k]
    for k in ("nauc_d0", "zero_frac_d0", "saturated", "reason", "nauc_d0_lo", "nauc_d0_hi", "zero_frac_d0_lo",
              "zero_frac_d0_hi"):
        if k in sat:
            sub[k] = sat[k]
    return comp, sub
