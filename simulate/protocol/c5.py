"""C5 in training as two pre-declared tests, judged only where its premise holds (docs/THEORY.md §3 C5).

The delay cost at group size G is ``Δ_s(G) = nauc_s(d = 0) − nauc_s(d)`` on evaluation seed ``s``
(paired by seed), at the protocol's ``[c5]`` delay ``d`` and ε.

- **Premise.** Local overlap: the median over gmc's evaluation runs at ``d`` (all C5 group sizes) of
  each run's median ``χ²(π_θ‖μ)`` is at most ``local_chi2``. Otherwise C5 is ``out of scope`` on that
  instance, with the measured χ² — a failed premise is never a refutation.
All C5 runs use the same number of learner steps ``K = c5.steps`` for every G (the bound's K; under
a fixed sample budget the bound's own delay term would grow as ``G^{2/5}``).

- **Test A (fixed η).** η fixed at gmc's tuned η of the cell ``(d = 0, G = middle C5 G)``. The change of
  Δ over the G range, ``slope(Δ on log₂G)·log₂(G_max/G_min)`` with a bootstrap interval over seeds:
  for gmc the claim is that it is below ``−flat_margin`` (the delay cost falls with G); for tic that
  it lies within ``±flat_margin`` (flat: holds if the interval is inside, refuted if it is entirely
  outside).
- **Test B (η re-tuned per G, paired by seed).** The slope of ``log Δ̄(G)`` against ``log G`` for gmc
  minus that for tic, bootstrapped jointly over seeds; the claim (GMC ``G^{−2/5}``, TIC ``G⁰``) is
  that it is below ``−slope_margin``. When ``Δ̄ ≤ 0`` at some G the log is undefined and test B is
  ``inconclusive`` with that reason. The measured gmc slope is reported next to the local exponent
  of the tuned bound at the same G (theory), for reference only.

**Version 4.** The premise is C9's regime of the same instance (gmc's learning-phase χ² at the primary cell,
:func:`simulate.protocol.c9.learning_regime`, with its interval): one χ² premise, computed once. Test B is
retired (``c5.test_b = "retired"``) with the reason :func:`test_b_retired` prints: the power it would have
at the theory's own prediction with the s.e. v3 measured, and the seeds power ``power_target`` would need.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from simulate import verdicts as vd
from simulate.protocol.c9 import eval_values
from simulate.protocol.spec import Protocol

__all__ = ["c5_premise", "delta_matrix", "test_a", "test_b", "test_b_retired", "c5_instance", "c5_verdicts",
           "fixed_eta"]


def fixed_eta(table: pd.DataFrame, proto: Protocol) -> float:
    """Test A's η: gmc's tuned η in C5's cell ``(d = 0, G = middle of c5.G)`` (tuning seeds only)."""
    Gs = sorted(proto.c5["G"])
    sel = table[(table.estimator == "gmc") & (table.d == 0) & (table.G == int(Gs[len(Gs) // 2]))
                & np.isclose(table.eps, float(proto.c5["eps"]))]
    if sel.empty:
        raise ValueError("the table has no gmc cell at d = 0 and the middle C5 G: run C5's cells first")
    return float(sel.eta_tuned.iloc[0])


def c5_premise(table: pd.DataFrame, proto: Protocol) -> tuple[bool, float]:
    """``(in scope, median χ²)`` of gmc's evaluation runs at the C5 delay (module docstring); under
    protocol v2 each run contributes its learning-phase median (``chi2_learn_med``), not the median over
    all steps, which converged steps pull towards 0."""
    c = proto.c5
    col = "chi2_learn_med" if proto.version >= 2 and "chi2_learn_med" in table else "chi2_med"
    vals = [eval_values(table, "gmc", int(c["d"]), float(c["eps"]), int(G), col).dropna() for G in c["G"]]
    chi2 = float(np.median(np.concatenate([v.to_numpy() for v in vals]))) if vals else math.nan
    return bool(chi2 <= proto.local_chi2), chi2


def delta_matrix(table: pd.DataFrame, estimator: str, proto: Protocol, eta_kind: str = "tuned") -> np.ndarray:
    """``Δ[s, j] = nauc_s(d=0, G_j) − nauc_s(d, G_j)`` over the seeds common to every cell."""
    c = proto.c5
    cols = []
    for G in c["G"]:
        a = eval_values(table, estimator, 0, float(c["eps"]), int(G), eta_kind=eta_kind)
        b = eval_values(table, estimator, int(c["d"]), float(c["eps"]), int(G), eta_kind=eta_kind)
        cols.append(a - b)
    seeds = sorted(set.intersection(*[set(x.dropna().index) for x in cols]))
    return np.column_stack([x[seeds].to_numpy() for x in cols])


def test_a(fixed: pd.DataFrame, proto: Protocol) -> pd.DataFrame:
    """Test A from the fixed-η runs (``phase = "fixed"`` rows): one row per estimator."""
    c = proto.c5
    x = np.log2(np.asarray(c["G"], dtype=float))
    span = float(x.max() - x.min())
    fm = float(c["flat_margin"])
    rows = []
    for e in c["estimators"]:
        D = delta_matrix(fixed, e, proto, eta_kind="fixed")
        slope, lo, hi = vd.bootstrap_slope(x, D, seed=0, level=1 - 2 * proto.alpha)
        ch, clo, chi = slope * span, lo * span, hi * span
        se = (chi - clo) / (2 * stats.norm.ppf(1 - proto.alpha))  # the percentile interval read as ±z·se
        if e == "gmc":
            verdict = vd.interval_verdict(clo, chi, -fm, above=False)
            claim = f"Δ falls by more than {fm} over G ∈ {list(c['G'])}"
        else:
            verdict = (vd.HOLDS if -fm < clo and chi < fm else vd.REFUTED if (clo > fm or chi < -fm)
                       else vd.INCONCLUSIVE)
            claim = f"Δ changes by less than ±{fm} over G ∈ {list(c['G'])}"
        # power: the alternatives "falls by 2·margin" and "flat" are 2·margin apart, the threshold halfway
        rows.append(dict(test="A", estimator=e, claim=claim, change=ch, lo=clo, hi=chi,
                         delta_by_G=list(np.round(D.mean(axis=0), 4)), n=D.shape[0], verdict=verdict,
                         power=vd.interval_power(2 * fm, se, proto.alpha)))
    return pd.DataFrame(rows)


def _log_slopes(D_gmc: np.ndarray, D_tic: np.ndarray, logG: np.ndarray, idx) -> tuple[float, float]:
    """Slopes of ``log Δ̄`` (mean over the seed rows ``idx``) on ``log G`` for gmc and tic."""
    w = vd.slope_weights(logG)
    mg = np.maximum(D_gmc[idx].mean(axis=0), 1e-9)  # Δ̄ → 0+ counts as its limit (slope → −∞)
    mt = np.maximum(D_tic[idx].mean(axis=0), 1e-9)
    return float(np.log(mg) @ w), float(np.log(mt) @ w)


def test_b(table: pd.DataFrame, proto: Protocol, local_exponent=None) -> dict:
    """Test B (module docstring); ``local_exponent(Gs) -> array`` optionally gives theory's local
    G-exponent of the tuned bound at the same G, reported next to the measured gmc slope."""
    c = proto.c5
    logG = np.log(np.asarray(c["G"], dtype=float))
    Dg, Dt = delta_matrix(table, "gmc", proto), delta_matrix(table, "tic", proto)
    n = min(len(Dg), len(Dt))
    Dg, Dt = Dg[:n], Dt[:n]
    threshold, predicted = -float(c["slope_margin"]), math.nan
    if c.get("slope_rule", "margin") == "theory":
        from theory.c5_local import tuned_bound_slope

        regime = c.get("theory_regime", "comparable")
        predicted = (tuned_bound_slope(list(c["G"]), regime, "gmc") - tuned_bound_slope(list(c["G"]), regime, "tic"))
        threshold = predicted / 2  # halfway between the theory's prediction and "no G-dependence"
        claim = (f"slope(gmc) − slope(tic) of log Δ̄ on log G below {threshold:+.3f} (half the {regime}-regime "
                 f"prediction {predicted:+.3f} over G ∈ {list(c['G'])})")
    else:
        claim = f"slope(gmc) − slope(tic) of log Δ̄ on log G below −{c['slope_margin']}"
    out = dict(test="B", claim=claim, threshold=threshold, predicted=predicted,
               delta_gmc=list(np.round(Dg.mean(axis=0), 4)), delta_tic=list(np.round(Dt.mean(axis=0), 4)), n=n)
    if local_exponent is not None:
        out["theory_local_exponent"] = [float(v) for v in np.atleast_1d(local_exponent(np.asarray(c["G"])))]
    bad = [G for G, m in zip(c["G"], Dg.mean(axis=0)) if m <= 0] + [G for G, m in zip(c["G"], Dt.mean(axis=0)) if m <= 0]
    sg, st = _log_slopes(Dg, Dt, logG, np.arange(n))
    out.update(slope_gmc=sg, slope_tic=st, diff=sg - st)
    if bad:
        out.update(lo=math.nan, hi=math.nan, verdict=vd.INCONCLUSIVE,
                   reason=f"mean Δ ≤ 0 at G = {sorted(set(bad))}: log Δ undefined")
        return out

    def stat(idx, axis=-1):
        idx = np.atleast_2d(idx)
        return np.array([np.subtract(*_log_slopes(Dg, Dt, logG, i)) for i in idx])

    res = stats.bootstrap((np.arange(n),), stat, n_resamples=2000, confidence_level=1 - 2 * proto.alpha,
                          method="percentile", vectorized=True, rng=np.random.default_rng(0))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    se = float(np.std(res.bootstrap_distribution, ddof=1))
    verdict = vd.interval_verdict(lo, hi, threshold, above=False)
    power = vd.interval_power(2 * threshold, se, proto.alpha) if math.isfinite(se) else math.nan
    reason = ""
    if verdict == vd.INCONCLUSIVE and power < proto.power_target:
        reason = f"underpowered: power {power:.2f} < {proto.power_target:g} at the bootstrap s.e. {se:.3g}"
    out.update(lo=lo, hi=hi, se=se, power=power, verdict=verdict, reason=reason)
    return out


def test_b_retired(proto: Protocol) -> dict:
    """Why test B is not run (v4): with the theory's predicted slope difference ``p`` over ``c5.G`` (regime
    ``c5.theory_regime``) and the threshold ``p/2``, the test's power at s.e. ``σ`` is
    ``Φ(|p/2|/σ − z_{1−α})`` (:func:`simulate.verdicts.interval_power`); power ``power_target`` needs
    ``σ ≤ |p/2|/(z_{1−α} + z_{power})``, and since ``σ ∝ 1/√n`` the v3 s.e. at ``n = 24`` sets the seeds needed."""
    from theory.c5_local import tuned_bound_slope

    c = proto.c5
    regime = c.get("theory_regime", "comparable")
    pred = tuned_bound_slope(list(c["G"]), regime, "gmc") - tuned_bound_slope(list(c["G"]), regime, "tic")
    se3, n3 = float(c.get("test_b_v3_se", math.nan)), 24
    need = abs(pred / 2) / (stats.norm.ppf(1 - proto.alpha) + stats.norm.ppf(proto.power_target))
    power = vd.interval_power(pred, se3, proto.alpha) if math.isfinite(se3) else math.nan
    n_need = int(math.ceil(n3 * (se3 / need) ** 2)) if math.isfinite(se3) else None
    reason = (f"retired: at the theory's predicted slope difference {pred:+.3f} ({regime} regime, G ∈ {list(c['G'])}) "
              f"the threshold is {pred / 2:+.3f}; with v3's measured bootstrap s.e. {se3:.3g} (n = {n3} seeds) its power "
              f"is {power:.2f}, and power {proto.power_target:g} needs s.e. ≤ {need:.3g}, i.e. ≈ {n_need} seeds")
    return dict(test="B", verdict=vd.OUT_OF_SCOPE, retired=True, predicted=pred, threshold=pred / 2, se_v3=se3,
                power=power, se_needed=need, n_needed=n_need, reason=reason)


def c5_instance(table: pd.DataFrame, fixed: pd.DataFrame | None, proto: Protocol, local_exponent=None,
                regime=None, saturated: str = "") -> dict:
    """C5 on one instance: premise, tests A and B, and the instance verdict. ``regime`` (v4): C9's
    sub-claim row of the instance, whose ``chi2_median``/``chi2_lo``/``chi2_hi`` are the premise;
    ``saturated`` (v4): C9's saturation reason for the instance — a saturated instance is out of scope for
    C5-T exactly as for C9 (one scope rule: a learner at its ceiling at d = 0 has no delay cost to measure)."""
    if saturated:
        return dict(in_scope=False, verdict=vd.OUT_OF_SCOPE, reason=saturated,
                    chi2_median=float(getattr(regime, "chi2_median", math.nan)) if regime is not None else math.nan,
                    premise_source="C9 saturation guard")
    if regime is not None:
        chi2 = float(regime.chi2_median)
        ok = bool(np.isfinite(chi2) and chi2 <= proto.local_chi2)
        lo, hi = float(getattr(regime, "chi2_lo", math.nan)), float(getattr(regime, "chi2_hi", math.nan))
        res = dict(in_scope=ok, chi2_median=chi2, chi2_lo=lo, chi2_hi=hi, premise_source="C9 regime (gmc, primary cell)")
        where = f"gmc at the primary cell (C9's regime), 95 % order-statistic interval [{lo:.3g}, {hi:.3g}]"
    else:
        ok, chi2 = c5_premise(table, proto)
        res = dict(in_scope=ok, chi2_median=chi2)
        where = f"d = {proto.c5['d']}"
    if not ok:
        phase = " over the learning phase" if proto.version >= 2 else ""
        res.update(verdict=vd.OUT_OF_SCOPE, reason=f"premise not met: median χ²(π_θ‖μ){phase} = {chi2:.3g} > "
                   f"{proto.local_chi2:g} at {where}")
        return res
    a = test_a(fixed, proto) if fixed is not None and len(fixed) else None
    b = test_b_retired(proto) if proto.c5.get("test_b", "run") == "retired" else test_b(table, proto, local_exponent)
    parts = ([] if a is None else list(a.verdict)) + [b["verdict"]]
    res.update(test_a=a, test_b=b, verdict=vd.combine(parts), reason="")
    return res


def c5_verdicts(table: pd.DataFrame, fixed: pd.DataFrame | None, proto: Protocol, local_exponent=None,
                regimes: dict | None = None, saturated: dict | None = None) -> dict:
    """C5 per instance and aggregated (:func:`simulate.verdicts.aggregate`); ``regimes`` (v4): C9's
    sub-claim row per instance, the premise; ``saturated`` (v4): ``{instance: reason}`` of C9's saturation
    guard, empty reason when not saturated (:func:`c5_instance`)."""
    per = {}
    for inst, t in table.groupby("instance", sort=False):
        f = None if fixed is None else fixed[fixed.instance == inst]
        per[inst] = c5_instance(t, f, proto, local_exponent, None if regimes is None else regimes[inst],
                                "" if saturated is None else saturated.get(inst, ""))
    agg = vd.aggregate([r["verdict"] for r in per.values()], proto.min_fraction) if per else vd.OUT_OF_SCOPE
    return dict(per_instance=per, verdict=agg)
