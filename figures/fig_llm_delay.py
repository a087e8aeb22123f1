"""Figure (C9 at LM scale): held-out accuracy of a Qwen3-architecture LM against the rollout delay.

Runs the pre-registered protocol :data:`simulate.llm.protocol.PROTOCOL` (its content hash is in the
sidecar): asynchronous RL from one shared cached warm start (tiny random-init model, 2-digit sums,
CPU; ``d = 0`` run once per seed and shared, since every map coincides there; every estimator at
every other delay). Left: the primary metric (accuracy AUC over a
fixed sample budget, ``simulate.llm.protocol``) per seed (points) and its mean with a 95 % Student-t
interval over seeds; the dashed line is the warm start. Right: the pre-declared paired comparisons
with the intervals their verdicts come from (``simulate.verdicts.decide``: Holm over the family,
each interval at its own Holm level, so ``holds`` ⇔ the interval lies above the threshold,
``refuted`` ⇔ below). Trajectory-level maps are length-normalised (``w_i/T_i``) so every estimator's
step has the scale of the token-level baselines'. The runs are cells of the project's sweep engine,
stored under the figure command's ``--cells`` root (default ``results/llm/<name>/cells``), so an
interrupted or repeated figure run reuses finished runs. The quick variant runs the same protocol on
fewer seeds and shorter runs and says "quick: not a verdict".

Cost: the v1 protocol (56 runs) took 270 CPU-seconds from empty caches; v2 runs 12 seeds × (1 + 6
estimators × 2 delays) = 156 runs of the same length (LOG.md has the measured time).
"""
from __future__ import annotations

import os
import time

import numpy as np

from figures import common, style

NAME = "fig_llm_delay"
TITLE = "LM held-out accuracy against delay (C9)"
CLAIMS = ("C9",)


def settings(quick: bool = False) -> dict:
    """The protocol's content (the figure's settings), plus which variant ran."""
    from simulate.llm.protocol import PROTOCOL

    return {**PROTOCOL.to_dict(), "variant": "quick" if quick else "default"}


def sweep(quick: bool = False, results_root: str = "results", protocol=None):
    """The protocol's sweep, stored under ``results_root/llm/``."""
    from simulate.llm import experiment as ex
    from simulate.llm.protocol import PROTOCOL

    return ex.protocol_sweep(protocol or PROTOCOL, quick,
                             out_dir=os.path.join(results_root, "llm", NAME + ("_quick" if quick else "")),
                             cache_dir=os.path.join(results_root, "llm", "cache"))


def plot(df, result, metric: str = "auc"):
    """Two panels: ``metric`` against delay (per-seed points, mean and t-interval) and the comparisons
    of ``result`` (a :class:`simulate.llm.experiment.C9Result`); returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from simulate.llm import experiment as ex

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(style.WIDTH_2COL, 2.8), gridspec_kw={"width_ratios": [1.0, 1.2]},
                                 dpi=150)
    names = style.ordered(df["estimator"].unique())
    delays = sorted(df["d"].unique())
    span = max(delays) - min(delays) or 1
    # d=0 is one shared run per seed (every map coincides there): draw it as each line's start
    at0 = df[df["d"] == 0]
    if at0["estimator"].nunique() == 1:
        df = pd.concat([df[df["d"] != 0]] + [at0.assign(estimator=x) for x in names], ignore_index=True)
    s = ex.summarise(df, metric)
    for j, name in enumerate(names):
        off = (j - (len(names) - 1) / 2) * 0.035 * span
        runs = df[df.estimator == name]
        ax.scatter(runs["d"] + off, runs[metric], s=7, color=style.color(name), alpha=0.5, lw=0)
        r = s[s.estimator == name].sort_values("d")
        ax.errorbar(r["d"] + off, r["mean"], yerr=[r["mean"] - r["lo"], r["hi"] - r["mean"]], color=style.color(name),
                    marker=style.marker(name), ms=3, capsize=2, lw=1, label=name)
    ax.axhline(float(df.groupby("seed")["initial_acc"].first().mean()), color=style.REFERENCE, ls="--", lw=0.8,
               label="warm start")
    ax.set_xticks(delays)
    ax.set_xlabel("delay $d$ (policy versions)")
    ax.set_ylabel("accuracy AUC" if metric == "auc" else "final held-out accuracy")
    ax.legend(loc="best", fontsize=5.5)
    comps = list(result.comparisons)
    if not comps:
        common.placeholder(bx, "no pre-declared comparison could be made on this grid")
    else:
        y = np.arange(len(comps))[::-1]
        for yi, c in zip(y, comps):
            col = {"holds": "#1b7837", "refuted": "#b2182b"}.get(c.verdict, "#555555")
            bx.errorbar([c.estimate], [yi], xerr=[[c.estimate - c.lo], [c.hi - c.estimate]], fmt="o", ms=3,
                        color=col, capsize=2)
            bx.plot([c.threshold, c.threshold], [yi - 0.35, yi + 0.35], color=style.REFERENCE, lw=1)
            bx.annotate(c.verdict, (c.hi, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=5.5,
                        color=col)
        bx.axvline(0.0, color="#BBBBBB", lw=0.6, zorder=0)
        bx.set_yticks(y)
        bx.set_yticklabels([c.name for c in comps], fontsize=5.5)
        bx.set_ylabel("pre-declared comparison", fontsize=6)
        bx.set_xlabel(f"paired Δ {metric} (ticks: threshold ±δ)")
        bx.margins(x=0.25)
    title = f"C9 at LM scale: {result.verdict}"
    if result.rates:  # the rate checks are parts of the claim too: say them where the verdict is
        title += "\n" + " · ".join(f"{r.name}: {r.failures}/{r.n} → {r.verdict}" for r in result.rates)
    if result.quick:
        title = "quick: not a verdict — " + title
    bx.set_title(title, fontsize=7)
    return fig, (ax, bx)


def evidence(result) -> list[common.Evidence]:
    """One row per pre-declared comparison (its estimate, SE and verdict) and one for the claim."""
    where = f"tiny Qwen3, d={result.d_max}, {result.n_seeds} seeds, protocol {result.protocol_hash}"
    rows = [common.Evidence("C9", f"LM scale: {c.name} (Δ{result.metric})", where, c.estimate, c.se, None,
                            c.verdict, NAME, note=line)
            for c, line in zip(result.comparisons, result.lines)]
    rows += [common.Evidence("C9", f"LM scale: {r.name} (rate of unstable runs)", where, r.rate, None, None,
                             r.verdict, NAME, note=line)
             for r, line in zip(result.rates, result.lines[len(result.comparisons):])]
    rows.append(common.Evidence("C9", "LM scale: C9 (all parts)", where, None, None, None, result.verdict, NAME,
                                note=result.line))
    return rows


def diagnostics(df, protocol) -> tuple[list[dict], str]:
    """Per (estimator, d): runs, accuracy AUC with its 95 % t-interval over seeds, the failure split of the
    tabular protocol's definition, learning-phase χ² and early ESS; and one line placing the largest delay
    in an overlap regime (median over gmc's runs of the learning-phase χ², local iff ≤ 1)."""
    import math

    from simulate import verdicts as vd

    rows = []
    for (e, d), g in df.groupby(["estimator", "d"], sort=True):
        m, lo, hi = vd.t_interval(g["auc"].to_numpy(), 0.95)
        rows.append(dict(estimator=e, d=int(d), n=int(len(g)), auc=m, lo=lo, hi=hi,
                         diverged=int((g["skipped_steps"] > 0).sum()), collapsed=int(g["collapsed"].astype(bool).sum()),
                         locked_in=int(g["locked_in"].astype(bool).sum()),
                         chi2_learn_med=float(g["chi2_learn_med"].median()), ess_early=float(g["ess_early"].mean())))
    at = df[(df["estimator"] == "gmc") & (df["d"] == protocol.d_max)]
    if not len(at):
        return rows, ""
    chi = float(at["chi2_learn_med"].median())
    word = "local" if chi <= 1.0 else "far" if math.isfinite(chi) else "unknown"
    return rows, (f"at d = {protocol.d_max} gmc's runs are in the {word} overlap regime (median learning-phase "
                  f"χ̂²(π_θ‖μ) on the sampled batch {chi:.3g})")


def caption(protocol, result, quick: bool) -> str:
    """The figure's caption: what ran, the metric, and the verdict with its protocol hash."""
    q = "Quick variant (fewer seeds, shorter runs): not a verdict. " if quick else ""
    return (f"{q}Predicted by C9: gmc not worse than any stable rival at the largest delay, onpolicy/tis/tic "
            f"degrading from d = 0, is unstable and gmc stable. "
            f"Tiny Qwen3-architecture LM, {result.n_seeds} seeds, delays {list(protocol.delays)}; left: accuracy "
            f"AUC per seed (points) and mean with 95 % t-interval, dashed: warm start; right: pre-declared paired "
            f"comparisons (margin δ = {protocol.margin}) with the Holm-level intervals their verdicts come from. "
            f"C9 at LM scale: {result.verdict} (protocol {result.protocol_hash}).")


def main(out_dir, quick: bool = False, *, results_root: str = "results", sweep_opts: dict | None = None,
         protocol=None) -> common.FigureResult:
    """Run (or reuse) the protocol's sweep, draw the figure, save PNG+PDF+JSON, return the C9 evidence.

    Per-run metrics and the warm-start cache live under ``results_root/llm/`` (git-ignored);
    ``sweep_opts`` (from ``python -m figures``: cells ``root``, ``n_workers``, Dask ``client``,
    ``progress``) go to the sweep engine. ``protocol`` defaults to the committed one.
    """
    from simulate.llm import experiment as ex
    from simulate.llm.protocol import PROTOCOL

    t0 = time.perf_counter()
    style.apply()
    protocol = protocol or PROTOCOL
    sw = sweep(quick, results_root, protocol)
    opts = dict(sweep_opts or {})
    if "root" in opts:
        opts["root"] = str(opts["root"])
    df = ex.run(sw, **opts)
    result = ex.c9_result(df, protocol, quick=quick)
    fig, _ = plot(df, result, protocol.metric)
    fig.tight_layout()
    ev = evidence(result)
    meta = common.sidecar(NAME, quick=quick, settings={**protocol.to_dict(), "variant": "quick" if quick else "default"},
                          seeds=list(sw.seeds), sweeps=[sw.out_dir], evidence=ev)
    # keys named lm_* so the report never mistakes them for the tabular protocol's c9/protocol blocks
    meta["verdict"] = ("quick: not a verdict — " if quick else "") + result.verdict
    meta["protocol_hash"] = result.protocol_hash
    meta["lm_protocol"] = protocol.to_dict()
    meta["metric"] = protocol.metric
    meta["comparisons"] = [c.as_dict() for c in result.comparisons]
    meta["rates"] = [r.as_dict() for r in result.rates]
    meta["table"] = ex.table(df, protocol.metric)
    meta["lm_c9"] = "\n".join(result.lines)
    meta["runs"] = df[[c for c in ex.ROW_COLUMNS if c != "seconds"]].to_dict(orient="records")
    meta["diagnostics"], meta["regime"] = diagnostics(df, protocol.variant(quick))
    meta["caption"] = caption(protocol, result, quick)
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
