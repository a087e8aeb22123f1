"""Toy vs LM (issue 33): gmc − onpolicy along the ladder from the tabular learner to the LM-like toy.

The ladder (:mod:`simulate.bridge`, docs/bridge.md) adds one ingredient of the LM setting per rung; every rung
tunes onpolicy's η at d = 0 on tuning seeds (protocol v4's lower-confidence-bound rule) and evaluates onpolicy,
is, gmc and grpo on held-out seeds at d ∈ {0, 8, 32} at η₀ and η₀/4. Cells are cached by the sweep engine.
Drawn: gmc − onpolicy in nAUC (mean over held-out seeds, 95 % paired-t interval) per rung and delay; a filled
marker where onpolicy fails in ≥ 50 % of the runs. The sidecar's ``answer`` rows (group ``toy-ladder``)
and its "Toy vs LM" section are computed from the same table (:mod:`simulate.bridge.summary`). The transformer
rung (:mod:`simulate.bridge.transformer`: the LM harness's own model and learner on 1-digit sums, exact J, one
step size, the LM protocol's) is drawn at the right of every panel and has its own paragraph and table rows; it
does not enter the ``answer`` rows.
"""
from __future__ import annotations

import math
import time

import numpy as np

from figures import common, style

NAME = "fig_bridge"
TITLE = "Toy vs LM: where uncorrected stale training starts to fail"
CLAIMS = ()
COLOURS = {8: "#1f77b4", 32: "#d62728"}


def measure(quick: bool, sweep_opts: dict | None = None):
    """The eval rows of every rung (:func:`simulate.bridge.run.run_ladder`), the per-(arm, rung, d) table, the
    rungs' order and the transformer rung's table (:func:`transformer_table`)."""
    import os

    import pandas as pd

    from simulate.bridge.ladder import CONTROLS, RUNGS
    from simulate.bridge.run import run_ladder
    from simulate.bridge.summary import ladder_table

    opts = {k: v for k, v in (sweep_opts or {}).items() if k not in ("client", "scheduler", "dask_local")}
    opts.setdefault("backend", "local" if int(opts.get("n_workers") or os.cpu_count() or 1) > 1 else "serial")
    ev = run_ladder("quick" if quick else "standard", sweep_kw=opts)
    order = [r.name for r in RUNGS + CONTROLS]
    tab = pd.concat([ladder_table(ev[ev["arm"] == a], order).assign(arm=a) for a in ev["arm"].unique()],
                    ignore_index=True)
    return ev, tab, order, transformer_table(quick, opts)


def transformer_table(quick: bool, opts: dict):
    """The transformer rung's per-d table (:func:`simulate.bridge.summary.ladder_table` of its runs, plus the
    mean rate of sampled completions that the harness's lenient reward scores 1 and the strict one 0)."""
    import os

    from simulate.bridge.summary import ladder_table
    from simulate.bridge.transformer import ARM, CACHE_DIR, RUNG, run_rung

    # a figure run into another cell root (tests) keeps the LM warm start beside it, not in results/
    cache = os.path.join(os.path.dirname(str(opts["root"])), "bridge-llm-cache") if "root" in opts else CACHE_DIR
    ev = run_rung("quick" if quick else "standard", sweep_kw=opts, cache_dir=cache)
    tab = ladder_table(ev, [RUNG]).assign(arm=ARM)
    tab["gap_rate"] = tab["d"].map(ev.groupby("d")["gap_rate"].mean())
    for e in ("onpolicy", "is", "gmc", "grpo"):
        tab[f"J_final_{e}"] = tab["d"].map(ev[ev["estimator"] == e].groupby("d")["J_final"].mean())
    return tab


def plot(tab, order, tab_t=None):
    """One panel per arm: gmc − onpolicy (95 % paired t) per rung, d = 8 and 32 side by side; the transformer
    rung's ``tab_t`` (one step size) at the right of every panel."""
    import matplotlib.pyplot as plt
    import pandas as pd

    arms = list(dict.fromkeys(tab["arm"]))
    fig, axes = plt.subplots(len(arms), 1, figsize=(style.WIDTH_2COL, 2.1 * len(arms) + 0.9), sharex=True,
                             squeeze=False)
    extra = [] if tab_t is None or not len(tab_t) else list(dict.fromkeys(tab_t["rung"]))
    x = np.arange(len(order) + len(extra))
    for i, arm in enumerate(arms):
        ax = axes[i, 0]
        A = tab[tab["arm"] == arm]
        if extra:
            A = pd.concat([A, tab_t], ignore_index=True)
        A = A.set_index(["rung", "d"])
        for j, d in enumerate(STALE):
            sub = A.xs(d, level="d").reindex(order + extra)
            m, lo, hi = (sub[c].to_numpy(dtype=float) for c in ("d_onpolicy", "lo_onpolicy", "hi_onpolicy"))
            xs = x + (j - 0.5) * 0.28
            ax.errorbar(xs, m, yerr=[m - lo, hi - m], fmt="none", ecolor=COLOURS[d], lw=1.0, capsize=2)
            fails = (sub["fail_onpolicy"] >= 0.5 * sub["n"]).to_numpy()
            ax.scatter(xs[fails], m[fails], color=COLOURS[d], s=18, zorder=3, label=f"d = {d}, onpolicy fails ≥ 50 %")
            ax.scatter(xs[~fails], m[~fails], facecolor="white", edgecolor=COLOURS[d], s=18, zorder=3,
                       label=f"d = {d}, onpolicy fails < 50 %")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.axvline(len([r for r in order if not r.startswith("c-")]) - 0.5, color="grey", lw=0.6, ls=":")
        if extra:
            ax.axvline(len(order) - 0.5, color="grey", lw=0.6, ls=":")
        ax.set_ylabel(f"gmc − onpolicy, nAUC\n(arm {arm})", fontsize=7)
        ax.tick_params(labelsize=6.5)
    axes[-1, 0].set_xticks(x)
    axes[-1, 0].set_xticklabels(order + [f"{r} (LM η)" for r in extra], rotation=35, ha="right", fontsize=6.5)
    axes[0, 0].legend(fontsize=6, ncol=2, frameon=False, loc="upper left")
    fig.subplots_adjust(left=0.12, right=0.99, top=0.97, bottom=0.22, hspace=0.12)
    return fig, axes


from figures.bridge_findings import (  # noqa: E402,F401  (the section's words; tests import them here)
    STALE, _fmt, _arms, _row, _quote, _both, _j0, token_accuracy, _both_short, flips, REMOVES, LEARN_RATIO, _learned, _learns, _sign_check, necessity, _twin_note,
)


def answer_rows(tab, rungs: list[str], n_seeds: int) -> list[dict]:
    """The report's ``answer`` rows (group ``toy-ladder``): gmc − rival at d = 8, 32 on ``rungs``, both arms. The
    headline arm's rows (η₀/4, the first) carry the other arm's numbers and every arm's failure counts beside them:
    in their ``interval`` text (one text per rung, as the report shows the first arm of a group and lists each
    distinct interval text once) and as ``other_arms``."""
    rows = []
    # one arm per row of the report's table: the smaller step first (the report shows the first arm of a group;
    # at η₀ on the sparse-reward rungs gmc itself fails under delay, so η₀/4 is the arm where the LM's row is
    # comparable); the arm is named in the row, and the other arm's numbers are in the row's interval text
    sel = tab[tab["rung"].isin(rungs) & tab["d"].isin(STALE)]
    arms = _arms(sel)
    for arm in arms:
        for _, r in sel[sel["arm"] == arm].iterrows():
            head = arm == arms[0] and len(arms) > 1
            interval = f"95 % paired t, {n_seeds} held-out seeds"
            if head:
                interval += f"; {r['rung']} " + _twin_note(tab, arms, r["rung"])
            for rival in ("onpolicy", "is", "grpo"):
                m, lo, hi = float(r[f"d_{rival}"]), float(r[f"lo_{rival}"]), float(r[f"hi_{rival}"])
                fails = {e: int(r[f"fail_{e}"]) for e in ("onpolicy", rival, "gmc") if f"fail_{e}" in r}
                others = []
                for a in arms[1:] if head else []:
                    o = _row(tab, a, r["rung"], int(r["d"]))
                    if o is not None:
                        others.append(dict(arm=f"η = {a}", delta=float(o[f"d_{rival}"]), lo=float(o[f"lo_{rival}"]),
                                           hi=float(o[f"hi_{rival}"]),
                                           fails={e: int(o[f"fail_{e}"]) for e in fails if f"fail_{e}" in o}))
                rows.append(dict(group="toy-ladder", setting=str(r["rung"]), d=int(r["d"]),
                                 rival=rival, arm=f"η = {arm}", metric="nAUC", delta=m, lo=lo, hi=hi,
                                 interval=interval, n=int(r["n"]), fails=fails, other_arms=others))
    return rows


def transformer_paragraph(tab_t) -> str:
    """The transformer rung's finding, computed from its table (every number with its interval)."""
    from simulate.bridge.transformer import PROTOCOL

    parts = []
    for _, r in tab_t[tab_t["d"].isin(STALE)].iterrows():
        n = int(r["n"])
        parts.append(f"d = {int(r['d'])}: gmc − onpolicy {_fmt(r['d_onpolicy'])} [{_fmt(r['lo_onpolicy'])}, "
                     f"{_fmt(r['hi_onpolicy'])}], gmc − is {_fmt(r['d_is'])} [{_fmt(r['lo_is'])}, {_fmt(r['hi_is'])}], "
                     f"gmc − grpo {_fmt(r['d_grpo'])} [{_fmt(r['lo_grpo'])}, {_fmt(r['hi_grpo'])}]; fails onpolicy "
                     f"{int(r['fail_onpolicy'])}/{n}, is {int(r['fail_is'])}/{n}, gmc {int(r['fail_gmc'])}/{n}, grpo "
                     f"{int(r['fail_grpo'])}/{n}; final J onpolicy {r['J_final_onpolicy']:.3f}, gmc "
                     f"{r['J_final_gmc']:.3f}")
    r0 = tab_t.iloc[0]
    return (f"Rung {r0['rung']} (the LM harness's own tiny Qwen3, warm start and learner step on 1-digit sums, "
            f"strict exact-match reward, exact J by teacher forcing; J₀ = {r0['J0']:.3f}, one step size: the LM "
            f"protocol's η = {PROTOCOL['eta']:g}; nAUC, 95 % paired t over {int(r0['n'])} seeds) — "
            + "; ".join(parts) + f". The harness's lenient reward would have scored 1 on "
            f"{100 * float(tab_t['gap_rate'].max()):.2f} % of sampled completions that the strict reward scores 0 "
            "(at most, over delays).")


def section(tab, order, tab_t=None, token_acc: dict | None = None) -> dict:
    """The "Toy vs LM" section: the arms, the first failing rung, the controls (which ingredient is necessary, as
    measured), the mechanism diagnostic, the LM-faithful rung(s), and the transformer rung (``tab_t``,
    :func:`transformer_table`) when given. Every ladder number is given at each arm (η₀/4 first), with failure
    counts. ``token_acc``: ``{rung: (per-token accuracy, argmax share)}`` of the warm starts (:func:`token_accuracy`),
    quoted with the controls."""
    from simulate.bridge.summary import first_failure, lm_faithful

    ladder = [r for r in order if not r.startswith("c-")]
    arms = _arms(tab)
    paras, found = [], {}
    for arm in arms:
        A = tab[tab["arm"] == arm]
        found[arm] = (first_failure(A, ladder), lm_faithful(A))
    main_arm = arms[0]
    first = found[main_arm][0]
    if first is None:
        first = next((f for f, _ in found.values() if f is not None), None)
    for arm in arms:
        if found[arm][0] is None:
            paras.append(f"Arm η = {arm}: no rung flips the sign — gmc − onpolicy at d ≥ 8 never has its 95 % "
                         f"interval above 0 with onpolicy failing in ≥ 50 % of runs, on any of the {len(ladder)} "
                         "rungs measured (table).")
    if first is not None:
        F = tab[(tab["rung"] == first) & tab["d"].isin(STALE) & (tab["arm"] == main_arm)]
        if not len(F):
            F = tab[(tab["rung"] == first) & tab["d"].isin(STALE)]
        d0 = int(F.loc[F["d_onpolicy"].idxmax()]["d"])
        if len(arms) > 1:
            # why the headline arm is η₀/4: gmc's own failures at the other arm(s), on the first failing rung
            other = [f"at η = {a} on {first}, d = {d0}, gmc itself fails {int(r['fail_gmc'])}/{int(r['n'])} "
                     f"(onpolicy {int(r['fail_onpolicy'])}/{int(r['n'])}, is {int(r['fail_is'])}/{int(r['n'])})"
                     for a in arms[1:] if (r := _row(tab, a, first, d0)) is not None]
            paras.append(f"Two step sizes per rung, η₀ (onpolicy's best at d = 0) and η₀/4; every ladder number below "
                         f"is given at both, with failure counts. η = {main_arm} is the headline arm because "
                         + "; ".join(other) + ": the step the undelayed learner likes is too large for every stale "
                         "learner there.")
        k = ladder.index(first)
        prev = ladder[k - 1] if k > 0 else None
        where = ", ".join(f"η = {a}: {found[a][0] or 'none'}" for a in arms)
        txt = (f"Uncorrected stale training first fails at rung {first} ({where}): at d = {d0} gmc − onpolicy "
               f"(nAUC, 95 % paired t, n = {int(F.iloc[0]['n'])}) — {_both(tab, arms, first, d0)}")
        if prev is not None:
            txt += f". One rung earlier ({prev}): {_both(tab, arms, prev, d0)}"
        paras.append(txt + ".")
        # the controls: which ingredient the flip needs, as measured (issue 54)
        present = [c for c in REMOVES if len(tab[tab["rung"] == c]) and len(tab[tab["rung"] == REMOVES[c][0]])]
        parts, verdicts = [], {}
        for c in present:
            parent, what = REMOVES[c]
            verdicts[c] = {a: necessity(tab, c, parent, a) for a in arms}
            start = ""
            if token_acc and c in token_acc and parent in token_acc:
                start = f", accuracy {token_acc[c][0]:.3f} vs {token_acc[parent][0]:.3f}"
            parts.append(f"{c} ({parent} without {what.split(' (')[0]}{start}): {_both_short(tab, arms, c, d0)}; "
                         f"learns {_learns(tab, c, arms)} vs {_learns(tab, parent, arms)} → "
                         + ", ".join(f"{a} {verdicts[c][a]}" for a in arms))
        if parts:
            summary = []
            for word in ("necessary", "not necessary", "inconclusive"):
                items = [f"{REMOVES[c][1].split(' (')[0]} (η = {', '.join(a for a in arms if verdicts[c][a] == word)})"
                         for c in present if word in verdicts[c].values()]
                summary.append(f"{word}: {'; '.join(items) or 'none'}")
            paras.append(f"Controls: gmc − onpolicy at d = {d0} (95 % paired t; onpolicy/gmc failures of "
                         f"{int(F.iloc[0]['n'])}) at η = {' and '.join(arms)}. A flip: the interval above 0 with onpolicy "
                         "failing in ≥ 50 % of runs at some d ≥ 8. An ingredient is necessary at an arm when the rung "
                         "with it flips and the rung without it does not while learning at least "
                         f"{LEARN_RATIO:g}× as much at d = 0 (gmc's final normalised J, η = {' / '.join(arms)}), "
                         "inconclusive when it learns less, not necessary when the rung without it flips; accuracy: the "
                         "warm start's per-token accuracy, its mean probability of the right answer token. "
                         + "; ".join(parts) + ". As measured — " + ". ".join(summary) + ".")
        # the mechanism: the stale push-down's projection on ∇J, at the failing rung, the rung before and the controls
        parts = []
        for rung in dict.fromkeys([prev, first] + [c for c in REMOVES if c in order]):
            if rung is None:
                continue
            vals = [(a, r) for a in arms if (r := _row(tab, a, rung, d0)) is not None]
            if vals:
                parts.append(f"{rung}: onpolicy " + " / ".join(_fmt(r["gneg_onpolicy"], 4) for _, r in vals)
                             + ", is " + " / ".join(_fmt(r["gneg_is"], 4) for _, r in vals))
        paras.append("Mechanism (targeted diagnostic on the same runs, first quarter of each run, d = "
                     f"{d0}, at η = {' / '.join(arms)}): the part of the applied step from negative-advantage tokens "
                     "that the current policy already holds below the behaviour policy (π_θ(a|s) < μ(a|s)), projected "
                     "on ∇J/‖∇J‖ (negative = downhill) — " + "; ".join(parts) + ". " + _sign_check(tab, arms, d0)
                     + " Uncorrected, those stale samples are pushed down at full weight; through the shared unembedding "
                     "that lowers the answer token of other contexts, which an importance weight (ρ < 1) damps and a "
                     "tabular policy cannot do.")
    lmf = []
    for arm in arms:
        A = tab[tab["arm"] == arm]
        per_d = ", ".join(f"d = {d} alone: {', '.join(lm_faithful(A, d)) or 'none'}" for d in STALE)
        lmf.append(f"η = {arm}: {', '.join(found[arm][1]) or 'none'} ({per_d})")
    paras.append("LM-faithful rung (onpolicy fails in ≥ 50 % at every d ≥ 8 while is and gmc fail in ≤ 25 % and end "
                 "above their start, 95 % t) — " + "; ".join(lmf) + ".")
    if tab_t is not None and len(tab_t):
        paras.append(transformer_paragraph(tab_t))
    rows = []
    S = tab[tab["d"].isin(STALE)]
    for rung in dict.fromkeys(S["rung"]):
        for d in STALE:
            cells = []
            for a in arms:
                r = _row(tab, a, rung, d)
                cells += (["—"] * 2 if r is None else
                          [f"{_fmt(r['d_onpolicy'])} [{_fmt(r['lo_onpolicy'])}, {_fmt(r['hi_onpolicy'])}]",
                           f"{int(r['fail_onpolicy'])}/{int(r['fail_gmc'])}"])
            if any(c != "—" for c in cells):
                rows.append([rung, d, *cells])
    if tab_t is not None and len(tab_t):
        for _, r in tab_t[tab_t["d"].isin(STALE)].iterrows():  # one step size (the LM's): the first arm's columns
            rows.append([f"{r['rung']} (LM η)", int(r["d"]), f"{_fmt(r['d_onpolicy'])} [{_fmt(r['lo_onpolicy'])}, "
                         f"{_fmt(r['hi_onpolicy'])}]", f"{int(r['fail_onpolicy'])}/{int(r['fail_gmc'])}",
                         *(["—"] * 2 * (len(arms) - 1))])
    cols = ["rung", "d"]
    for a in arms:
        cols += [f"gmc − onpolicy, η = {a} [95 % paired t]", f"fails onpolicy/gmc of {int(tab['n'].max())}, η = {a}"]
    table = {"title": "gmc − onpolicy (nAUC) per rung at d = 8, 32, both step-size arms side by side (η per rung: the "
                      "appendix table)",
             "columns": cols, "rows": rows,
             "note": "docs/bridge.md; controls c-*: c-no-shared and c-one-prompt remove one ingredient from rung 7, "
                     "c-warm-only is rung 2 + warm start, c-dense-warm6 / c-sparse-warm5 are rung 6 with the dense "
                     "reward at rung 6's per-token accuracy / with rung 5's per-token accuracy (issue 54); "
                     "9-transformer: the LM harness's model and learner at the LM's η (one arm, 12 seeds); the push-down "
                     "diagnostic per rung and arm: the appendix table (gneg_*)"}
    return {"title": "Toy vs LM", "paragraphs": paras, "tables": [table]}, found


CAPTION = ("gmc − onpolicy in nAUC (mean over held-out seeds, 95 % paired-t interval) per ladder rung (one LM "
           "ingredient added per rung; controls c-*: one ingredient removed or its warm start matched, docs/bridge.md), at "
           "d = 8 (blue) and 32 (red); filled: "
           "onpolicy fails (J drops by half its gap below its running maximum) in ≥ 50 % of runs. Top: the η tuned "
           "for onpolicy at d = 0 (protocol v4's lower-bound rule), where on the sparse-reward rungs gmc and is fail at "
           "d ≥ 8 too (the section's table); bottom: a quarter of it. Right of the dotted line: the LM harness's "
           "own transformer on 1-digit sums with exact J, at the LM protocol's η (the same point in both panels). "
           "Positive = gmc better.")


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    """Run (or load) the ladder, draw the figure, write the sidecar with its answer rows and section."""
    from simulate.bridge.run import settings

    t0 = time.perf_counter()
    style.apply()
    from simulate.bridge import transformer as tr

    ev, tab, order, tab_t = measure(quick, sweep_opts)
    fig, _ = plot(tab, order, tab_t)
    acc = token_accuracy([r for r in order if r in ("5-warm", "6-sparse", "7-grpo-norm") or r in REMOVES])
    sec, found = section(tab, order, tab_t, acc)
    s = settings("quick" if quick else "standard")
    mode = "quick" if quick else "standard"
    picked = sorted({r for first, faithful in found.values() for r in (faithful or ([first] if first else []))})
    meta = common.sidecar(NAME, quick=quick, settings={"rungs": order, **s, "transformer": {**tr.PROTOCOL,
                                                                                            **tr.settings(mode)}},
                          seeds=list(s["eval_seeds"]),
                          sweeps=[f"bridge-tune-{mode}", f"bridge-eval-{mode}", f"bridge-transformer-{mode}"])
    meta["caption"] = CAPTION
    meta["answer"] = answer_rows(tab, picked, len(s["eval_seeds"]))
    meta["sections"] = [sec]
    meta["appendix_tables"] = [{"title": "Ladder (issue 33): every rung, arm and delay", "columns": list(tab.columns),
                                "rows": tab.round(4).astype(object).where(tab.notna(), "—").values.tolist(),
                                "note": "simulate.bridge.summary.ladder_table"},
                               {"title": "Ladder (issue 33): the transformer rung, per delay",
                                "columns": list(tab_t.columns),
                                "rows": tab_t.round(4).astype(object).where(tab_t.notna(), "—").values.tolist(),
                                "note": "figures.fig_bridge.transformer_table (simulate.bridge.transformer)"}]
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), [], [], time.perf_counter() - t0)
