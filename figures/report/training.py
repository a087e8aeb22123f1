"""The training claims' tables: C9's sub-claim matrix and comparisons, every estimator at the primary cell,
C5-T per instance, the regime map's boundary and mechanism columns, the LM row's tables. Small tables go to
the main report (:func:`main_blocks`), big ones to the appendix REPORT-details.md (:func:`detail_blocks`).
Qualifiers (underpowered, broken arm) go to a note column, never into a verdict cell."""
from __future__ import annotations

from figures.report import lm_runs
from figures.report.data import f, n, per_G
from figures.report.findings import _mechanism
from simulate import verdicts as vd


def training_blocks(rep: dict) -> list:
    """The training claims' blocks; ``details`` blocks are the appendix's, the others the main report's."""
    b = []
    pm = rep.get("protocol")
    if not pm:
        return b
    b += [("h2", "Training claims under the pre-registered protocol"),
          ("p", f"Protocol `{pm['name']}` (registered {pm['registered']}), sha256 `{pm['sha256']}`"
                + (" — **quick: not a verdict**" if pm.get("quick") else "") + f". Instances: {', '.join(pm['instances'])}. "
                f"η tuned per cell on seeds {pm['tune_seeds']}; every number below is on the held-out seeds "
                f"{pm['eval_seeds'][0]}…{pm['eval_seeds'][-1]} ({len(pm['eval_seeds'])}). Metric: normalised area under "
                f"the learning curve over {pm['budget']} sampled trajectories; margin δ = {pm['margin']}, α = {pm['alpha']} "
                f"(one-sided, Holm), failure rate p₀ = {pm['failure_p0']}, local overlap χ² ≤ {pm['local_chi2']}"
                + (f" over the learning phase; failure = divergence | collapse | lock-in (final nJ < {pm.get('lockin_nJ')} "
                   f"with ‖∇J‖ ≤ {pm.get('lockin_grad_rel')}·‖∇J(θ₀)‖); step-size arms: tuned per cell, and common (the η "
                   f"tuned at d = 0, shared by every estimator); saturation: nAUC(d=0) > {pm.get('saturation_nauc')} or "
                   f"zero-gradient fraction > {pm.get('saturation_zero')} is out of scope"
                   if pm.get("version", 1) >= 2 else "")
                + ("; normalised J = (J − J₀)/(J_class − J₀) with J_class the optimum of the instance's policy class (J* "
                   "for tabular policies); a failure-rate sub-claim is out of scope when the same estimator already fails "
                   "above p₀ at d = 0; judged grid d ∈ " + str(pm.get("delays")) + f", G = {pm.get('G')}, ε = {pm.get('eps')} "
                   "(the other delays, step sizes, G and ε are the regime map's)"
                   if pm.get("version", 1) >= 3 else "") + ". Protocol: docs/protocol.md.")]
    c9 = rep.get("c9")
    if c9:
        insts = list(next(iter(c9["matrix"].values()), {}).keys())
        rows = [[s, *[c9["matrix"][s].get(i) or "—" for i in insts], c9["aggregate"][s]] for s in c9["matrix"]]
        regime = {r["instance"]: (f"{r['regime']} (learning-phase χ² median {f(r['chi2_median'], 2)}, mean "
                                  f"{f(r.get('chi2_learn_mean'), 2)}, max {f(r.get('chi2_learn_max'), 2)}; over all "
                                  f"steps {f(r.get('chi2_all_med'), 2)}; nAUC(d=0) {f(r.get('nauc_d0'), 3)}, "
                                  f"zero-gradient {f(r.get('zero_frac_d0'), 2)}"
                                  + (", saturated" if r.get("saturated") else "") + ")")
                  if "chi2_learn_mean" in r else f"{r['regime']} (χ² {f(r['chi2_median'], 2)})"
                  for r in c9["subclaims"]}
        b += [("h3", f"C9 — {c9['verdict']}"),
              ("p", f"Primary cell ε = {pm['primary']['eps']}, G = {pm['primary']['G']}, d = {pm['primary']['d']} "
                    f"against d = 0. Regime of the primary cell per instance (median realised χ² of gmc's runs): "
                    + "; ".join(f"{i}: {regime.get(i, '—')}" for i in insts) + f". η at a grid edge after widening in "
                    f"{c9['n_edge']} of {c9['n_cells']} cells."),
              ("table", ["sub-claim", *insts, "aggregate"], rows)]
        comp = [[c["instance"], c["subclaim"], c.get("name", ""), f(c["estimate"]), f"[{f(c['lo'])}, {f(c['hi'])}]",
                 f(c["threshold"]), f(c.get("power"), 2), c["verdict"], "underpowered" if c.get("underpowered") else ""]
                for c in c9["comparisons"]]
        b += [("details", "C9 comparisons (held-out seeds; paired t-interval at each test's Holm level, Clopper–Pearson "
                          "for rates; power at the alternatives one margin beyond the threshold)",
               ["instance", "sub-claim", "comparison", "estimate", "interval", "threshold", "power", "verdict", "note"],
               comp)]
        pe, pG, pd_ = pm["primary"]["eps"], pm["primary"]["G"], pm["primary"]["d"]
        prim = [c for c in c9.get("cells", []) if c["G"] == pG and c["d"] in (0, pd_)
                and abs(c["eps"] - pe) < 1e-12]
        prim.sort(key=lambda c: (c["instance"], c["estimator"], c["d"]))
        b += [("details", "Every estimator at the primary cell: secondary metrics (held-out seeds, tuned η; "
                          "failure split and nAUC also at the common η)",
               ["instance", "estimator", "d", "nAUC", "nAUC (common η)", "final nJ", "zero-gradient steps",
                "failures: diverged/collapsed/locked in (tuned; common)", "learning-phase χ² median (max)",
                "ESS/G, first 25 %", "lock-in step (median)", "final entropy (nats/token)", "η tuned",
                "η window (octaves within δ)", "η at grid edge"],
               [[c["instance"], c["estimator"], c["d"], f(c["nauc"]), f(c.get("nauc_common")), f(c["final_nJ"]),
                 f(c["zero_frac"], 2),
                 f"{c.get('n_diverged', '—')}/{c.get('n_collapsed', '—')}/{c.get('n_locked_in', '—')}; "
                 f"{c.get('n_diverged_common', '—')}/{c.get('n_collapsed_common', '—')}/{c.get('n_locked_in_common', '—')} "
                 f"of {c.get('n_runs', '—')}",
                 f"{f(c.get('chi2_learn_med'), 2)} ({f(c.get('chi2_learn_max'), 2)})",
                 f(per_G(c.get("ess_early"), c.get("G")), 2),
                 f(c.get("lockin_step")), f(c.get("entropy_final"), 2), f(c["eta_tuned"]),
                 f(c["window_octaves"], 2), "yes" if c["eta_at_edge"] else "no"] for c in prim])]
        mech = _mechanism(prim, pd_)
        if mech:
            b.append(("p", mech))
        edge = [c for c in c9.get("cells", []) if c.get("eta_at_edge")]
        if edge:
            b.append(("p", "Cells whose tuned η is still at a grid edge after widening: " + "; ".join(
                f"{c['instance']}/{c['estimator']} d={c['d']} ε={c['eps']} G={c['G']} (η={f(c['eta_tuned'])})"
                for c in edge) + "."))
    c5 = rep.get("c5")
    if c5:
        rows = []
        for inst, r in c5["per_instance"].items():
            a = {x["estimator"]: x for x in (r.get("test_a") or [])}
            tb = r.get("test_b") or {}
            rows.append([inst, f(r.get("chi2_median"), 2), "yes" if r.get("in_scope") else "no",
                         " / ".join(f"{e}: {f(x['change'])} [{f(x['lo'])}, {f(x['hi'])}] {x['verdict']}"
                                    for e, x in a.items()) or "—",
                         (f"{f(tb.get('diff'))} [{f(tb.get('lo'))}, {f(tb.get('hi'))}] vs {f(tb.get('threshold'))}, "
                          f"power {f(tb.get('power'), 2)}: {tb.get('verdict', '')}"
                          + (f"; {tb['reason']}" if tb.get("reason") else "")) if tb else "—",
                         (f"{f(tb.get('slope_gmc'))} vs theory "
                          + "/".join(f"{x:+.2f}" for x in tb.get("theory_local_exponent") or [])) if tb else "—",
                         r["verdict"], r.get("reason") or ""])
        theory_b = pm["c5"].get("slope_rule") == "theory"
        tb_rule = (f"must lie below half the theory's prediction for the {pm['c5'].get('theory_regime')} regime "
                   "(theory.c5_local.tuned_bound_slope over the same G; the threshold is printed per instance)"
                   if theory_b else f"must lie below −{pm['c5']['slope_margin']}")
        b += [("h3", f"C5-T (training implication of C5) — {c5['verdict']}"),
              ("p", f"C5 is a theorem about the tuned bound, checked symbolically (verdict table). C5-T asks whether "
                    f"training shows it: Δ(G) = nAUC(d=0) − nAUC(d={pm['c5']['d']}) at K = {pm['c5']['steps']} steps "
                    f"for every G ∈ {pm['c5']['G']}. Premise: local overlap (median χ² ≤ {pm['local_chi2']}"
                    + (" over the learning phase" if pm.get("version", 1) >= 2 else "") + "). Test A: change of Δ "
                    f"over the G range at a fixed η (gmc must fall below −{pm['c5']['flat_margin']}, tic must stay "
                    f"within ±{pm['c5']['flat_margin']}; bootstrap percentile interval at 90 %). Test B: slope of "
                    f"log Δ̄ on log G, gmc minus tic, {tb_rule}; the power of each test is at its alternatives "
                    "(for test B: the theory's prediction and no G-dependence)."),
              ("table", ["instance", "median χ²", "premise met", "test A (change of Δ over G)",
                         "test B (slope gmc − tic)", "gmc slope vs local exponent of the tuned bound at each G",
                         "verdict", "note"], rows)]
    rm = rep.get("regime_map")
    if rm and rm.get("boundary"):
        st = rm.get("settings") or {}
        rows = [[r["instance"], r["G"], r["eps"], r.get("arm", "common"),
                 "tuned" if r.get("arm") == "tuned" else f(r["eta_factor"]), r.get("gmc_ahead") or "—",
                 r.get("onpolicy_ahead") or "—"] for r in rm["boundary"]]
        facs = ", ".join(f(float(x)) for x in st.get("eta_factors", []))
        b += [("h3", "Regime map: where does gmc help?"),
              ("p", f"gmc − onpolicy in nAUC over d ∈ {st.get('delays')} on {len(st.get('instances', []))} instances, "
                    f"paired over the {len(st.get('seeds', []))} held-out seeds: the common-η arm at η₀·{{{facs}}} "
                    "(η₀: onpolicy's η tuned at d = 0, shared by every estimator), the tuned arm (η tuned per estimator "
                    "and d, for " + ", ".join(st.get("tuned_arm") or ["—"]) + f"), and slices at η₀ over G ∈ {st.get('G')} "
                    f"and ε ∈ {st.get('eps')}. Each entry is the smallest d at which one side is significantly ahead "
                    "(95 % paired t-interval excludes 0, no multiplicity correction: a map, not a verdict). Figures "
                    "fig_regime_map and fig_regime_slices; module simulate.protocol.regime_map."),
              ("details", "Boundary per instance, G, ε, step-size arm and η factor",
               ["instance", "G", "ε", "arm", "η/η₀", "gmc significantly ahead from", "onpolicy significantly ahead from"],
               rows)]
        comp = [c for c in rm.get("comparisons") or [] if c.get("comparison") == "gmc − onpolicy"
                and (st.get("primary_G") is None or int(c["G"]) == int(st["primary_G"]))
                and (st.get("primary_eps") is None or abs(float(c["eps"]) - float(st["primary_eps"])) < 1e-12)
                and abs(float(c["eta_factor"]) - 1.0) < 1e-12]
        if comp:
            mrows = [[c["instance"], c.get("arm", "common"), c["d"],
                      f"{c['estimate']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]" if c.get("estimate") is not None else "—",
                      f(c.get("chi2_learn_gmc"), 2), f(c.get("chi2_learn_rival"), 2),
                      f(per_G(c.get("ess_early_gmc"), c.get("G")), 2),
                      f"{n(c.get('gmc_locked_in'))} / {n(c.get('onpolicy_locked_in'))}",
                      f"{n(c.get('gmc_collapsed'))} / {n(c.get('onpolicy_collapsed'))}",
                      f"{f(c.get('entropy_final_gmc'), 2)} / {f(c.get('entropy_final_rival'), 2)}"] for c in comp]
            b += [("details", "Mechanism columns at η₀ and with η tuned (primary G, ε): gmc − onpolicy with its 95 % "
                              "paired t-interval, learning-phase χ² (median over runs; gmc, onpolicy), gmc's weight ESS/G "
                              "over the first 25 % of steps, lock-ins and collapses (gmc / onpolicy, of n), final "
                              "entropy (nats/token; gmc / onpolicy)",
                   ["instance", "arm", "d", "gmc − onpolicy [95 % t]", "χ² gmc", "χ² onpolicy", "ESS/G gmc",
                    "locked in", "collapsed", "entropy"], mrows)]
    if rep.get("lm"):
        meta = rep.get("lm_meta") or {}
        parts = [ev for ev in rep["lm"] if "all parts" not in ev.get("quantity", "")]
        b += [("h3", "LM row: the C9 parts at LM scale"),
              ("p", "Small language model (simulate/llm), paired over seeds, same rule"
                    + (f"; protocol hash `{meta.get('protocol_hash')}`" if meta.get("protocol_hash") else "")
                    + ". Each part has its own verdict; a part about one estimator (e.g. 'is unstable') says nothing "
                      "about gmc, so no single LM word is headlined. Failed runs at d = 32 (of n, base η): "
                    + lm_runs.lm_failures(rep, 32) + "."),
              ("table", ["quantity", "at", "estimate", "verdict", "interval and rule"],
               # the estimate alone: its interval (t, at the comparison's Holm level) is in the note, so no
               # second, differently computed interval can disagree with the verdict
               [[ev.get("quantity", "").removeprefix("LM scale: "), ev.get("point", ""), f(ev.get("measured")),
                 ev.get("verdict", ""), ev.get("note", "")] for ev in parts])]
        if meta.get("diagnostics"):
            b += [("p", "LM diagnostics: " + (meta.get("regime") or "") + "."),
                  ("details", "LM runs per estimator and delay: accuracy AUC (95 % t-interval over seeds), failure split, "
                              "learning-phase χ² (median over runs of each run's median over steps with ĝ ≠ 0), "
                              "weight ESS/G over the first 25 % of steps",
                   ["estimator", "d", "n", "AUC", "diverged/collapsed/locked in", "χ² learning phase", "ESS/G early"],
                   [[r["estimator"], r["d"], r["n"], f"{f(r['auc'])} [{f(r['lo'])}, {f(r['hi'])}]",
                     f"{r['diverged']}/{r['collapsed']}/{r['locked_in']}", f(r.get("chi2_learn_med"), 2),
                     f(r.get("ess_early"), 2)] for r in meta["diagnostics"]])]
        auc = meta.get("auc_vs_d") or []
        if auc:
            ests = list(dict.fromkeys(r["estimator"] for r in auc))
            for fac in dict.fromkeys(float(r.get("lr_factor", 1.0)) for r in auc):
                sel = [r for r in auc if float(r.get("lr_factor", 1.0)) == fac]
                ds = sorted({int(r["d"]) for r in sel})
                cell = {(r["estimator"], int(r["d"])): f"{f(r['mean'])} [{f(r['lo'])}, {f(r['hi'])}]" for r in sel}
                b += [("details", f"LM accuracy AUC against d, η×{fac:g} (mean and 95 % t-interval over seeds)",
                       ["estimator", *[f"d = {d}" for d in ds]],
                       [[e, *[cell.get((e, d), "—") for d in ds]] for e in ests])]
        turns = meta.get("turning_points") or []
        if turns:
            b += [("details", "LM turning points: smallest d at which each part holds / is refuted (per-d paired t at the "
                              "protocol's level, no multiplicity correction), per step-size arm",
                   ["η factor", "part", "first d holds", "first d refuted"],
                   [[f(float(t.get("lr_factor", 1.0))), t["claim"], n(t.get("first_holds")), n(t.get("first_refuted"))]
                    for t in turns])]
        broken = lm_runs.broken_arms(meta)
        for a in meta.get("arms") or []:
            fac = float(a.get("lr_factor", 1.0))
            if fac != 1.0 and a.get("lines"):
                word = vd.OUT_OF_SCOPE if fac in broken else a.get("verdict")
                why = f" (broken arm: {broken[fac]})" if fac in broken else ""
                if fac in broken:
                    b += [("p", f"LM step-size arm η×{fac:g}: {word}{why}; its comparisons are not verdicts.")]
                b += [("details", f"LM step-size arm η×{fac:g}: {word}{why}", ["comparison"],
                       [[ln.replace("→ ", "→ (arm broken: not a verdict) ") if fac in broken else ln]
                        for ln in a["lines"]])]
        b += [("p", "LM on a GPU: " + ("see results/llm/gpu_check/gpu_check.md" if meta.get("gpu_check") else
                                       "not run (no device lent to the session that wrote this report; "
                                       "`python -m simulate.llm gpu-check` is the prepared script).") )]
    return b


