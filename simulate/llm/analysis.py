"""The C9 decision at LM scale from a results table: pure functions of the table (no torch, no runs).

Per-run failure modes (the tabular protocol's definition), the paired comparisons of the
pre-registered :class:`simulate.llm.protocol.LMProtocol` (Holm over the family,
:mod:`simulate.verdicts`), the Clopper–Pearson rate checks with v3's ``d = 0`` premise, the turning
points along the delay sweep, and the text tables. :mod:`simulate.llm.experiment` re-exports every name
(its callers use ``experiment.c9_result`` and friends); the runs themselves are made there.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulate import verdicts as vd
from simulate.llm.protocol import PROTOCOL, LMProtocol


def _with_arm(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with an ``lr_factor`` column (1.0 for tables written before the step-size arm existed)."""
    return df if "lr_factor" in df.columns else df.assign(lr_factor=1.0)


def arm(df: pd.DataFrame, lr_factor: float = 1.0) -> pd.DataFrame:
    """The runs of one step-size arm."""
    df = _with_arm(df)
    return df[np.isclose(df["lr_factor"].to_numpy(float), lr_factor)]


def summarise(df: pd.DataFrame, metric: str = PROTOCOL.metric, level: float = 0.95) -> pd.DataFrame:
    """Per (lr_factor, estimator, d): mean of ``metric`` over seeds with its Student-t interval
    (:func:`simulate.verdicts.t_interval`; ``lo = hi = NaN`` for a single run), and the same for the gain
    over the warm start."""
    rows = []
    for (f, name, d), g in _with_arm(df).groupby(["lr_factor", "estimator", "d"], sort=True):
        m, lo, hi = vd.t_interval(g[metric].to_numpy(float), level) if len(g) > 1 else (float(g[metric].iloc[0]), math.nan, math.nan)
        gm, glo, ghi = vd.t_interval(g["gain"].to_numpy(float), level) if len(g) > 1 else (float(g["gain"].iloc[0]), math.nan, math.nan)
        rows.append({"lr_factor": float(f), "estimator": name, "d": int(d), "n": len(g), "mean": m, "lo": lo, "hi": hi,
                     "gain_mean": gm, "gain_lo": glo, "gain_hi": ghi})
    return pd.DataFrame(rows)


def failure_modes(initial_acc: float, metrics: pd.DataFrame, tail: int, skipped_steps: int,
                  protocol: LMProtocol = PROTOCOL) -> dict:
    """The tabular protocol's diagnostics and failure modes for one LM run (:mod:`simulate.llm.protocol`):

    - ``chi2_learn_med``: median over the steps with a non-zero gradient of the batch's sequence-level
      ``χ̂² = mean_i (ρ_i − 1)²`` (converged or all-equal-reward steps would pull it towards 0);
    - ``ess_early``: mean weight ESS/G over the first quarter of the steps (``ess_w``; ``ess_rho`` for
      token-level maps, whose weights are per token);
    - ``collapsed``: accuracy ``a_k < max_{j≤k} a_j − collapse_drop·(1 − a_0)``;
    - ``locked_in``: ``(a_K − a_0)/(1 − a_0) < lockin_nJ`` and the mean gradient norm of the last ``tail``
      steps ≤ ``lockin_grad_rel`` × the first step's;
    - ``failure``: the first of ``diverged`` (a skipped update), ``collapsed``, ``locked_in`` that applies.
    """
    acc = np.concatenate([[float(initial_acc)], metrics["heldout_acc"].dropna().to_numpy(dtype=float)])
    span = max(1.0 - float(initial_acc), 1e-12)
    collapsed = bool(np.any(acc < np.maximum.accumulate(acc) - protocol.collapse_drop * span))
    gn = metrics["grad_norm"].to_numpy(dtype=float)
    g0 = gn[0] if gn.size and np.isfinite(gn[0]) else np.nan
    last = gn[-max(1, int(tail)):]
    locked = bool((acc[-1] - acc[0]) / span < protocol.lockin_nJ and g0 > 0
                  and np.nanmean(last) <= protocol.lockin_grad_rel * g0)
    live = metrics.loc[metrics["grad_norm"] > 0, "chi2"].to_numpy(dtype=float)
    live = live[np.isfinite(live)]
    ess_col = metrics["ess_w"] if metrics["ess_w"].notna().any() else metrics["ess_rho"]
    early = ess_col.to_numpy(dtype=float)[: max(1, len(metrics) // 4)]
    diverged = int(skipped_steps) > 0
    failure = "diverged" if diverged else "collapsed" if collapsed else "locked_in" if locked else "none"
    return dict(chi2_learn_med=float(np.median(live)) if live.size else math.nan,
                ess_early=float(np.nanmean(early)) if np.isfinite(early).any() else math.nan,
                collapsed=collapsed, locked_in=locked, failure=failure)


def failed(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL) -> pd.Series:
    """Per run: the protocol's failure rule (v2: divergence | collapse | lock-in; v1: a skipped update or
    final accuracy below ``collapse_fraction`` × the warm start's)."""
    if protocol.version >= 2:
        return (df["skipped_steps"] > 0) | df["collapsed"].astype(bool) | df["locked_in"].astype(bool)
    return ~stable(df, protocol.collapse_fraction)


def stable(df: pd.DataFrame, collapse_fraction: float = PROTOCOL.collapse_fraction) -> pd.Series:
    """Version 1's rule per run: no skipped (non-finite) update and final accuracy ≥ ``collapse_fraction`` ×
    the warm start's."""
    return (df["skipped_steps"] == 0) & (df["final_acc"] >= collapse_fraction * df["initial_acc"])


@dataclass(frozen=True)
class C9Result:
    """C9 at LM scale under a protocol: the Holm family of paired comparisons, the rate checks, and
    the claim's verdict (:func:`simulate.verdicts.combine` of the parts). ``quick``: a path check on
    fewer seeds; its lines say "quick: not a verdict"."""

    verdict: str
    comparisons: tuple[vd.Comparison, ...]
    rates: tuple[vd.RateCheck, ...]
    metric: str
    d_max: int
    n_seeds: int
    protocol_hash: str
    quick: bool = False
    skipped: tuple[str, ...] = ()
    lr_factor: float = 1.0
    """The step-size arm (``η·lr_factor``); the claim's registered verdict is the main arm's (1.0)."""
    notes: tuple[str, ...] = ()
    """v5's consensus rule: one note per part whose verdict moved on a perturbed kernel path
    (:func:`simulate.llm.portability.perturbation.apply_consensus`)."""

    @property
    def lines(self) -> list[str]:
        """One line per part, then the claim's line (each states the interval its verdict comes from)."""
        pre = "quick: not a verdict — " if self.quick else ""
        out = []
        for c in self.comparisons:
            pw = vd.comparison_power(c.n, c.se * math.sqrt(c.n), c.margin, c.alpha_level) if c.n >= 2 else math.nan
            out.append(f"{pre}{c.name}: Δ{self.metric} = {c.estimate:+.3f}, {1 - 2 * c.alpha_level:.1%} t-interval "
                       f"[{c.lo:+.3f}, {c.hi:+.3f}] vs threshold {c.threshold:+.3f} ({c.kind}, n={c.n}, power "
                       f"{pw:.2f}) → {c.verdict}")
        for r in self.rates:
            sign = ">" if r.direction == "above" else "<"
            pw = vd.rate_power(r.n, r.p0, r.direction)
            out.append(f"{pre}{r.name}: {r.failures}/{r.n} failed (divergence, collapse or lock-in), "
                       f"{1 - 2 * vd.ALPHA:.0%} Clopper–Pearson [{r.lo:.3f}, {r.hi:.3f}] vs rate {sign} {r.p0:g} "
                       f"(power {pw:.2f}) → {r.verdict}")
        for why in self.skipped:
            out.append(f"{pre}not compared: {why}")
        for note in self.notes:
            out.append(f"{pre}note: {note}")
        armtxt = "" if self.lr_factor == 1.0 else f", step-size arm η×{self.lr_factor:g}"
        out.append(f"{pre}C9 at LM scale (d={self.d_max}, {self.n_seeds} seeds{armtxt}, metric {self.metric}, protocol "
                   f"{self.protocol_hash}): {self.verdict}")
        return out

    @property
    def line(self) -> str:
        """The claim's one-line verdict."""
        return self.lines[-1]


def _paired(df: pd.DataFrame, metric: str, side: tuple[str, int]) -> pd.Series:
    name, d = side
    return df[(df["estimator"] == name) & (df["d"] == d)].set_index("seed")[metric].sort_index()


def c9_result(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False, lr_factor: float = 1.0,
              full: bool = False) -> C9Result:
    """Decide C9 at LM scale from the results table by the protocol's pre-declared comparisons, on the runs
    of the step-size arm ``lr_factor`` (default the main arm, whose verdict is the registered one).

    Each comparison pairs the two sides by seed (seeds present on both sides only; at least 2);
    ``decide`` applies Holm over those that can be made. A comparison whose data are not in the table
    (a sub-grid from the CLI) is listed as not compared, never silently dropped.
    """
    registered = protocol.content_hash()
    protocol = protocol.variant(quick, full)
    df = arm(df, lr_factor)
    metric = protocol.metric
    built, skipped = [], []
    for name, kind, a_side, b_side in protocol.comparisons():
        a, b = _paired(df, metric, a_side), _paired(df, metric, b_side)
        common = a.index.intersection(b.index)
        if len(common) < 2:
            skipped.append(f"{name} (needs ≥ 2 seeds of {a_side[0]}@d={a_side[1]} and {b_side[0]}@d={b_side[1]})")
            continue
        built.append(vd.paired_comparison(a[common], b[common], kind=kind, margin=protocol.margin, name=name,
                                          alpha=protocol.alpha))
    family = vd.decide(built, alpha=protocol.alpha) if built else []
    at = df[df["d"] == protocol.d_max]
    rates = []
    premise = rate_premise(df, protocol)
    for name, direction in (("is", "above"), ("gmc", "below")):
        runs = at[at["estimator"] == name]
        if len(runs):
            bad = int(failed(runs, protocol).sum())
            what = "unstable" if direction == "above" else "stable"
            r = vd.rate_check(bad, len(runs), p0=protocol.p0, direction=direction, alpha=protocol.alpha,
                              name=f"{name} {what} at d={protocol.d_max}")
            if premise:
                r = dataclasses.replace(r, verdict=vd.OUT_OF_SCOPE)
                skipped.append(f"{r.name}: {premise}")
            rates.append(r)
    parts = [c.verdict for c in family] + [r.verdict for r in rates]
    verdict = vd.combine(parts) if parts else vd.OUT_OF_SCOPE
    n_seeds = int(df["seed"].nunique()) if len(df) else 0
    return C9Result(verdict, tuple(family), tuple(rates), metric, protocol.d_max, n_seeds, registered,
                    quick, tuple(skipped), float(lr_factor))


def rate_premise(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL) -> str:
    """v3 (the tabular protocol's ``rate_premise_d0``): the failure-rate sub-claims need a stable learner at
    ``d = 0``; if the shared ``d = 0`` runs (every map coincides there) fail in more than ``p0`` of the seeds,
    a failure at ``d_max`` cannot be put down to the delay. Returns the reason they are out of scope, or
    ``""`` when the premise holds (or the protocol predates the rule, or there are no ``d = 0`` runs)."""
    if protocol.version < 3 or not protocol.rate_premise_d0:
        return ""
    runs = df[(df["d"] == 0) & (df["estimator"] == protocol.baseline)]
    if not len(runs):
        return ""
    nf = int(failed(runs, protocol).sum())
    if nf / len(runs) > protocol.p0:
        return (f"out of scope: the d = 0 learner ({protocol.baseline}) already fails {nf}/{len(runs)} "
                f"(> p0 = {protocol.p0:g}), so failures at d > 0 are not the delay's")
    return ""


def arm_results(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False,
                full: bool = False) -> list[C9Result]:
    """:func:`c9_result` for every step-size arm present in ``df`` (main arm first)."""
    factors = sorted(_with_arm(df)["lr_factor"].unique(), key=lambda f: (f != 1.0, f))
    return [c9_result(df, protocol, quick, float(f), full) for f in factors]


def turning_points(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False,
                   lr_factor: float = 1.0) -> list[dict]:
    """Where each sub-claim turns along the delay sweep (protocol docstring, v3): for every pre-declared
    comparison and rate check, re-made at each ``d > 0`` of the arm ``lr_factor`` with the same kind, margin
    and ``α`` but **no multiplicity correction** (a map, not a verdict): the one-sided level-``α`` paired
    t-test (interval at two-sided level ``1 − 2α``) or Clopper–Pearson bound. Returns one dict per
    sub-claim: ``claim``, ``lr_factor``, ``first_holds`` / ``first_refuted`` (the smallest ``d`` at which it
    holds / is refuted, ``None`` if never) and ``per_d`` (``d``, estimate, ``lo``, ``hi``, ``n``, verdict).
    """
    protocol = protocol.variant(quick)
    df = arm(df, lr_factor)
    metric = protocol.metric
    out = []
    specs = [(f"gmc not worse than {x}", "noninferiority", lambda d, x=x: (("gmc", d), (x, d)))
             for x in protocol.estimators if x != "gmc"]
    specs += [(f"{x} degrades from d=0", "superiority", lambda d, x=x: ((protocol.baseline, 0), (x, d)))
              for x in protocol.degrading]
    delays = [d for d in sorted(protocol.delays) if d > 0]
    for name, kind, sides in specs:
        per = []
        for d in delays:
            a_side, b_side = sides(d)
            a, b = _paired(df, metric, a_side), _paired(df, metric, b_side)
            common = a.index.intersection(b.index)
            if len(common) < 2:
                continue
            c = vd.paired_comparison(a[common], b[common], kind=kind, margin=protocol.margin, name=name,
                                     alpha=protocol.alpha)
            per.append(dict(d=int(d), estimate=c.estimate, lo=c.lo, hi=c.hi, n=c.n, verdict=c.verdict))
        out.append(_turn(name, "Δ" + metric, lr_factor, per))
    premise = rate_premise(df, protocol)
    for x, direction in (("is", "above"), ("gmc", "below")):
        per = []
        for d in delays:
            runs = df[(df["estimator"] == x) & (df["d"] == d)]
            if not len(runs):
                continue
            r = vd.rate_check(int(failed(runs, protocol).sum()), len(runs), p0=protocol.p0, direction=direction,
                              alpha=protocol.alpha)
            per.append(dict(d=int(d), estimate=r.rate, lo=r.lo, hi=r.hi, n=r.n,
                            verdict=vd.OUT_OF_SCOPE if premise else r.verdict, failures=r.failures))
        out.append(_turn(f"{x} {'unstable' if direction == 'above' else 'stable'}", "failure rate", lr_factor, per))
    return out


def _turn(claim: str, quantity: str, lr_factor: float, per: list[dict]) -> dict:
    first = {w: next((p["d"] for p in per if p["verdict"] == w), None) for w in (vd.HOLDS, vd.REFUTED)}
    return dict(claim=claim, quantity=quantity, lr_factor=float(lr_factor), first_holds=first[vd.HOLDS],
                first_refuted=first[vd.REFUTED], per_d=per)


def turning_table(turns: list[dict]) -> str:
    """:func:`turning_points` as text: one line per sub-claim and arm."""
    lines = ["smallest d at which each sub-claim holds / is refuted (per-d test at the protocol's α, no "
             "multiplicity correction: a map, not a verdict):"]
    for t in turns:
        at = "; ".join(f"d={p['d']}: {p['estimate']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}] {p['verdict']}"
                       for p in t["per_d"])
        lines.append(f"  η×{t['lr_factor']:g} {t['claim']}: holds from d={t['first_holds']}, refuted from "
                     f"d={t['first_refuted']} — {at}")
    return "\n".join(lines)


def c9_verdict(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, quick: bool = False) -> str:
    """:func:`c9_result`'s lines, one per comparison and one for the claim."""
    return "\n".join(c9_result(df, protocol, quick).lines)


def _wide(s: pd.DataFrame, col: str) -> str:
    wide = s.pivot(index="estimator", columns="d", values=col).fillna("—")
    wide.columns = [f"d={c}" for c in wide.columns]
    return wide.to_string()


def table(df: pd.DataFrame, metric: str = PROTOCOL.metric) -> str:
    """Accuracy-against-delay tables, one block per step-size arm: rows estimators, columns delays, cells
    ``mean [lo, hi]`` (95 % Student-t over seeds) of ``metric``, of the final held-out accuracy, and of the
    gain over the warm start."""
    df = _with_arm(df)
    factors = sorted(df["lr_factor"].unique(), key=lambda f: (f != 1.0, f))
    if len(factors) == 1:
        return _table_one(df, metric)
    return "\n".join(f"== step-size arm η×{f:g} ==\n" + _table_one(arm(df, f), metric) for f in factors)


def _table_one(df: pd.DataFrame, metric: str) -> str:
    init = df.groupby("seed")["initial_acc"].first()
    parts = [f"warm-start held-out accuracy per seed: {', '.join(f'{v:.3f}' for v in init.values)}"]
    for m in [metric] + [x for x in ("final_acc",) if x != metric]:
        s = summarise(df, m)
        s["cell"] = [f"{a:.3f} [{lo:.3f}, {hi:.3f}]" if n > 1 else f"{a:.3f} (n=1)"
                     for a, lo, hi, n in zip(s["mean"], s["lo"], s["hi"], s["n"])]
        parts += [f"{m}, mean [95% t-interval] over {int(s['n'].max())} seeds:", _wide(s, "cell")]
    s = summarise(df, "final_acc")
    s["cell"] = [f"{a:+.3f} [{lo:+.3f}, {hi:+.3f}]" if n > 1 else f"{a:+.3f} (n=1)"
                 for a, lo, hi, n in zip(s["gain_mean"], s["gain_lo"], s["gain_hi"], s["n"])]
    parts += ["final accuracy gain over the warm start (paired), mean [95% t-interval]:", _wide(s, "cell")]
    at0 = sorted(df.loc[df["d"] == 0, "estimator"].unique())
    if len(at0) == 1:
        parts.append(f"d=0 is one shared run per seed ({at0[0]}): at d=0 every map coincides (protocol docstring)")
    return "\n".join(parts)


def regime(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL, estimator: str = "gmc") -> dict:
    """The overlap regime of ``estimator``'s runs at ``d_max`` (v4: from an interval, not a point).

    Per run the learning-phase ``χ̂²`` (``chi2_learn_med``); over seeds the geometric mean with the
    Student-t interval of the mean of ``log χ̂²`` at ``protocol.regime_level``, exponentiated. Label:
    ``local`` when the interval's upper end is ≤ 1, ``far`` when its lower end is > 1, ``inconclusive``
    when it contains 1 (or fewer than 2 runs have a finite, positive ``χ̂²``). Versions < 4 label from
    the median over runs (``interval`` is then ``None``), as v3 did.
    """
    at = df[(df["estimator"] == estimator) & (df["d"] == protocol.d_max)]
    chi = at["chi2_learn_med"].to_numpy(float) if len(at) else np.array([])
    if protocol.version < 4:
        med = float(np.median(chi)) if chi.size else math.nan
        label = "local" if med <= 1.0 else "far" if math.isfinite(med) else vd.INCONCLUSIVE
        return dict(label=label, estimate=med, lo=None, hi=None, n=int(chi.size), interval=None)
    ok = chi[np.isfinite(chi) & (chi > 0)]
    if ok.size < 2:
        return dict(label=vd.INCONCLUSIVE, estimate=math.nan, lo=None, hi=None, n=int(ok.size),
                    interval=f"fewer than 2 of {chi.size} runs have a finite χ̂² > 0")
    m, lo, hi = (math.exp(v) for v in vd.t_interval(np.log(ok), protocol.regime_level))
    label = "local" if hi <= 1.0 else "far" if lo > 1.0 else vd.INCONCLUSIVE
    return dict(label=label, estimate=m, lo=lo, hi=hi, n=int(ok.size),
                interval=f"{protocol.regime_level:.0%} t-interval of the geometric mean over {ok.size} seeds")


def regime_line(r: dict, d_max: int, estimator: str = "gmc") -> str:
    """:func:`regime` as one sentence."""
    if r["interval"] is None:
        return (f"at d = {d_max} {estimator}'s runs are in the {r['label']} overlap regime (median learning-phase "
                f"χ̂²(π_θ‖μ) on the sampled batch {r['estimate']:.3g})")
    note = f"; {r['note']}" if r.get("note") else ""
    if r["lo"] is None:
        return f"at d = {d_max} {estimator}'s overlap regime is {r['label']} ({r['interval']}{note})"
    return (f"at d = {d_max} {estimator}'s overlap regime is {r['label']}: learning-phase χ̂²(π_θ‖μ) geometric mean "
            f"{r['estimate']:.3g} [{r['lo']:.3g}, {r['hi']:.3g}] ({r['interval']}; local iff the interval lies "
            f"below 1, far iff above{note})")


def learning_gain(df: pd.DataFrame, protocol: LMProtocol = PROTOCOL) -> dict:
    """The shared ``d = 0`` runs' final held-out accuracy minus the warm start's: mean over seeds with its 95 %
    Student-t interval, against the protocol's target ``min_gain`` (v4; reported, decides no verdict)."""
    g = df[(df["d"] == 0) & (df["estimator"] == protocol.baseline)]
    x = (g["final_acc"] - g["initial_acc"]).to_numpy(float)
    if not x.size:
        return dict(n=0, mean=math.nan, lo=math.nan, hi=math.nan, target=protocol.min_gain, met=False)
    m, lo, hi = vd.t_interval(x, 0.95)
    return dict(n=int(x.size), mean=m, lo=lo, hi=hi, target=protocol.min_gain, met=bool(m >= protocol.min_gain),
                warm_start=float(g["initial_acc"].mean()), final=float(g["final_acc"].mean()),
                interval="95 % Student-t over seeds")


#: Rivals and delays of the report's answer table (figures/REPORT.md's first table).
ANSWER_RIVALS: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "grpo")
ANSWER_DELAYS: tuple[int, ...] = (8, 32)


def answer_rows(df: pd.DataFrame, protocol: LMProtocol, group: str, setting: str, result: C9Result | None = None,
                quick: bool = False) -> list[dict]:
    """The report's answer rows: ``gmc − rival`` in ``protocol.metric``, paired over seeds, with the 95 % paired
    t-interval (:func:`simulate.verdicts.t_interval` of the per-seed differences). Versions < 8: the rivals
    :data:`ANSWER_RIVALS` at :data:`ANSWER_DELAYS`; from v8 every estimator of the protocol at every delay, ``d = 0``
    from the shared baseline run (every map coincides there, so ``gmc − X`` is exactly 0 on every seed), and each row
    marked ``confirmatory``. At ``d_max`` the verdict is the registered Holm family's (``gmc not worse than X``); at
    other delays it is left out (a per-d test is a map, not a verdict). ``result``: the reported C9 result when it is
    not the table's own (v5: after the consensus rule). ``quick``: a path check, never marked confirmatory."""
    res = c9_result(df, protocol) if result is None else result
    holm = {c.name: c.verdict for c in res.comparisons}
    v8 = protocol.version >= 8
    rivals = tuple(x for x in protocol.estimators if x != "gmc") if v8 else ANSWER_RIVALS
    metric = "accuracy AUC" if protocol.metric == "auc" else "final accuracy"
    out = []
    for d in (sorted(protocol.delays) if v8 else ANSWER_DELAYS):
        for x in rivals:
            row = dict(group=group, setting=setting, d=int(d), rival=x, arm="", metric=metric)
            if d == 0 and v8:  # one shared run stands for every map (module docstring of simulate.llm.protocol)
                n = int(_paired(df, protocol.metric, (protocol.baseline, 0)).size)
                if n < 2:
                    continue
                row.update(delta=0.0, lo=0.0, hi=0.0, n=n,
                           interval=f"d = 0: one shared {protocol.baseline} run per seed ({n} seeds); every map "
                                    "coincides there (ρ = 1)")
            else:
                a, b = _paired(df, protocol.metric, ("gmc", d)), _paired(df, protocol.metric, (x, d))
                common = a.index.intersection(b.index)
                if len(common) < 2:
                    continue
                m, lo, hi = vd.t_interval((a[common] - b[common]).to_numpy(float), 0.95)
                row.update(delta=m, lo=lo, hi=hi, interval=f"95 % paired t, {len(common)} seeds", n=int(len(common)))
            verdict = holm.get(f"gmc not worse than {x} at d={d}") if d == protocol.d_max else None
            if verdict:
                row["verdict"] = verdict
            if v8 and protocol.confirmatory and not quick:
                row["confirmatory"] = True
            out.append(row)
    return out
