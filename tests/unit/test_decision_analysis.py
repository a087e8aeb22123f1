"""The C9 decision at LM scale (simulate/llm/analysis.py) on small synthetic result tables: failure modes, the
failure rules of each protocol version, the d = 0 premise, the overlap regime from an interval, the learning gain,
the Holm family of C9 and the answer rows (issue 55). Pure functions: no torch, no run."""
import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from simulate import verdicts as vd
from simulate.llm import analysis as an
from simulate.llm.protocol import PROTOCOL, PROTOCOL_V2, PROTOCOL_V3, PROTOCOL_V7


def metrics(acc, grad, chi2=None, ess_w=None, ess_rho=None):
    n = len(grad)
    return pd.DataFrame(dict(heldout_acc=acc, grad_norm=grad, chi2=chi2 if chi2 is not None else [0.5] * n,
                             ess_w=ess_w if ess_w is not None else [np.nan] * n,
                             ess_rho=ess_rho if ess_rho is not None else [0.9] * n))


# --- failure_modes -------------------------------------------------------------------------------------------------

def test_a_learning_run_has_no_failure():
    m = metrics([0.5, 0.7, 0.9, 1.0], [1.0, 1.0, 1.0, 1.0], chi2=[0.1, 0.2, 0.3, 0.4], ess_w=[4, 8, 2, 2])
    out = an.failure_modes(0.2, m, tail=2, skipped_steps=0)
    assert out == dict(chi2_learn_med=0.25, ess_early=4.0, collapsed=False, locked_in=False, failure="none")


def test_collapse_is_a_drop_of_more_than_collapse_drop_of_the_room_below_the_running_best():
    # a0 = 0.2: room 0.8, drop 0.5·0.8 = 0.4 below the best so far
    assert an.failure_modes(0.2, metrics([0.8, 0.41], [1, 1]), 1, 0)["collapsed"] is False  # 0.39 below 0.8
    out = an.failure_modes(0.2, metrics([0.8, 0.39], [1, 1]), 1, 0)
    assert out["collapsed"] is True and out["failure"] == "collapsed"
    assert an.failure_modes(0.2, metrics([0.8, 0.4], [1, 1]), 1, 0)["collapsed"] is False  # exactly 0.4: not below


def test_lock_in_needs_little_progress_and_a_vanished_gradient():
    p = PROTOCOL
    # progress (a_K − a_0)/(1 − a_0) < lockin_nJ = 0.95 and last grad ≤ 0.01 × first
    locked = an.failure_modes(0.5, metrics([0.6, 0.6], [1.0, 0.01]), tail=1, skipped_steps=0)
    assert locked["locked_in"] is True and locked["failure"] == "locked_in" and p.lockin_grad_rel == 0.01
    assert an.failure_modes(0.5, metrics([0.6, 0.6], [1.0, 0.0101]), 1, 0)["locked_in"] is False
    assert an.failure_modes(0.5, metrics([0.6, 0.99], [1.0, 0.0]), 1, 0)["locked_in"] is False  # progress 0.98
    assert an.failure_modes(0.5, metrics([0.6, 0.975], [1.0, 0.0]), 1, 0)["locked_in"] is False  # exactly 0.95
    assert an.failure_modes(0.5, metrics([0.6, 0.97], [1.0, 0.0]), 1, 0)["locked_in"] is True
    assert an.failure_modes(0.5, metrics([0.6, 0.6], [0.0, 0.0]), 1, 0)["locked_in"] is False  # g0 = 0: no scale
    assert an.failure_modes(0.5, metrics([0.6, 0.6], [np.nan, 0.0]), 1, 0)["locked_in"] is False
    # the tail is the mean of the last `tail` steps
    assert an.failure_modes(0.5, metrics([0.6, 0.6, 0.6], [1.0, 0.5, 0.0]), 2, 0)["locked_in"] is False
    assert an.failure_modes(0.5, metrics([0.6, 0.6, 0.6], [1.0, 0.5, 0.0]), 1, 0)["locked_in"] is True
    assert an.failure_modes(0.5, metrics([0.6, 0.6, 0.6], [1.0, 0.5, 0.0]), 0, 0)["locked_in"] is True  # at least 1


def test_divergence_comes_first_then_collapse_then_lock_in():
    m = metrics([0.9, 0.1], [1.0, 0.0])
    assert an.failure_modes(0.5, m, 1, 1)["failure"] == "diverged"
    assert an.failure_modes(0.5, m, 1, 0)["failure"] == "collapsed"


def test_chi2_over_live_steps_and_early_ess():
    m = metrics([0.5] * 8, [1, 0, 1, 1, 0, 1, 1, 1], chi2=[1, 100, 3, np.nan, 100, 5, 7, 9],
                ess_w=[2, 4, 6, 8, 10, 12, 14, 16])
    out = an.failure_modes(0.2, m, 1, 0)
    assert out["chi2_learn_med"] == 5.0      # steps with a gradient, finite χ² only: 1, 3, 5, 7, 9
    assert out["ess_early"] == 3.0           # the first quarter (2 steps) of ess_w
    m = metrics([0.5] * 3, [0, 0, 0], ess_rho=[0.5, 0.7, 0.9])
    out = an.failure_modes(0.2, m, 1, 0)
    assert math.isnan(out["chi2_learn_med"]) and out["ess_early"] == 0.5  # token maps: ess_rho; at least one step
    m = metrics([0.5], [1.0], ess_rho=[np.nan])
    assert math.isnan(an.failure_modes(0.2, m, 1, 0)["ess_early"])


def test_accuracy_at_the_warm_start_1_does_not_divide_by_zero():
    out = an.failure_modes(1.0, metrics([1.0, 1.0], [1.0, 1.0]), 1, 0)
    assert out["failure"] == "none"


# --- failed / stable / rate premise --------------------------------------------------------------------------------

def runs(**cols):
    n = len(next(iter(cols.values())))
    base = dict(skipped_steps=[0] * n, collapsed=[False] * n, locked_in=[False] * n, final_acc=[0.5] * n,
                initial_acc=[0.5] * n)
    base.update(cols)
    return pd.DataFrame(base)


def test_failed_v2_is_any_failure_mode():
    df = runs(skipped_steps=[0, 1, 0, 0], collapsed=[False, False, True, False], locked_in=[False, False, False, 1])
    assert an.failed(df, PROTOCOL).tolist() == [False, True, True, True]


def test_failed_v1_is_a_skipped_update_or_a_final_accuracy_below_half_the_warm_start():
    v1 = dataclasses.replace(PROTOCOL_V2, version=1)
    df = runs(skipped_steps=[0, 2, 0, 0], final_acc=[0.25, 0.5, 0.2499, 0.9], initial_acc=[0.5, 0.5, 0.5, 0.5],
              collapsed=[True, False, False, False])
    assert an.failed(df, v1).tolist() == [False, True, True, False]
    assert an.stable(df, 0.5).tolist() == [True, False, False, True]
    assert an.stable(df).tolist() == an.stable(df, PROTOCOL.collapse_fraction).tolist()


def _premise_df(nfail, n=4, est="onpolicy"):
    return pd.DataFrame(dict(d=[0] * n, estimator=[est] * n, skipped_steps=[1] * nfail + [0] * (n - nfail),
                             collapsed=[False] * n, locked_in=[False] * n))


def test_rate_premise_out_of_scope_when_the_d0_learner_fails_more_than_p0():
    assert PROTOCOL.p0 == 0.25
    assert an.rate_premise(_premise_df(1), PROTOCOL) == ""            # 1/4 = p0: not more
    msg = an.rate_premise(_premise_df(2), PROTOCOL)
    assert msg == ("out of scope: the d = 0 learner (onpolicy) already fails 2/4 (> p0 = 0.25), so failures at d > 0 "
                   "are not the delay's")
    assert an.rate_premise(_premise_df(4, est="gmc"), PROTOCOL) == ""  # not the baseline's runs
    assert an.rate_premise(_premise_df(4), PROTOCOL_V2) == ""          # the rule starts at v3
    assert an.rate_premise(_premise_df(4), dataclasses.replace(PROTOCOL_V3, rate_premise_d0=False)) == ""
    assert an.rate_premise(_premise_df(4), PROTOCOL_V3) != ""


# --- regime ------------------------------------------------------------------------------------------------------------

def _chi(vals, est="gmc", d=32):
    return pd.DataFrame(dict(estimator=[est] * len(vals), d=[d] * len(vals), chi2_learn_med=vals))


def test_regime_from_the_interval_of_the_geometric_mean():
    r = an.regime(_chi([0.5, 0.6, 0.7, 0.55]), PROTOCOL)
    assert r["label"] == "local" and r["hi"] <= 1 and r["n"] == 4
    m, lo, hi = (math.exp(v) for v in vd.t_interval(np.log([0.5, 0.6, 0.7, 0.55]), PROTOCOL.regime_level))
    assert (r["estimate"], r["lo"], r["hi"]) == pytest.approx((m, lo, hi))
    assert r["interval"] == "95% t-interval of the geometric mean over 4 seeds"
    assert an.regime(_chi([2.0, 3.0, 2.5]), PROTOCOL)["label"] == "far"
    assert an.regime(_chi([0.5, 2.0]), PROTOCOL)["label"] == vd.INCONCLUSIVE


def test_regime_boundaries_are_one():
    assert an.regime(_chi([1.0, 1.0]), PROTOCOL)["label"] == "local"   # hi = 1: local (≤ 1)
    r = an.regime(_chi([1.0 + 1e-9, 1.0 + 1e-9]), PROTOCOL)
    assert r["label"] == "far"


def test_regime_needs_two_finite_positive_values():
    r = an.regime(_chi([0.5, 0.0, np.nan, np.inf]), PROTOCOL)
    assert r["label"] == vd.INCONCLUSIVE and r["n"] == 1 and r["lo"] is None and math.isnan(r["estimate"])
    assert r["interval"] == "fewer than 2 of 4 runs have a finite χ̂² > 0"
    r = an.regime(_chi([0.5, 0.6], est="tis"), PROTOCOL)
    assert r["n"] == 0 and r["interval"] == "fewer than 2 of 0 runs have a finite χ̂² > 0"
    assert an.regime(_chi([0.5, 0.51], est="tis"), PROTOCOL, estimator="tis")["label"] == "local"
    assert an.regime(_chi([0.5, 0.6], d=8), PROTOCOL)["n"] == 0


def test_regime_before_v4_is_the_median():
    r = an.regime(_chi([0.5, 3.0, 0.9]), PROTOCOL_V3)
    assert r == dict(label="local", estimate=0.9, lo=None, hi=None, n=3, interval=None)
    assert an.regime(_chi([1.0]), PROTOCOL_V3)["label"] == "local"
    assert an.regime(_chi([1.5, 3.0]), PROTOCOL_V3)["label"] == "far"
    assert an.regime(_chi([]), PROTOCOL_V3)["label"] == vd.INCONCLUSIVE


def test_regime_line_texts():
    assert an.regime_line(dict(label="local", estimate=0.9, interval=None, lo=None), 32) == \
        "at d = 32 gmc's runs are in the local overlap regime (median learning-phase χ̂²(π_θ‖μ) on the sampled batch 0.9)"
    assert an.regime_line(dict(label="inconclusive", estimate=math.nan, lo=None, hi=None, interval="few"), 8, "tis") == \
        "at d = 8 tis's overlap regime is inconclusive (few)"
    r = dict(label="far", estimate=2.0, lo=1.5, hi=3.0, interval="IV", note="n.b.")
    assert an.regime_line(r, 32) == ("at d = 32 gmc's overlap regime is far: learning-phase χ̂²(π_θ‖μ) geometric mean 2 "
                                     "[1.5, 3] (IV; local iff the interval lies below 1, far iff above; n.b.)")
    assert an.regime_line(dict(r, note=""), 32).endswith("far iff above)")


# --- learning gain ---------------------------------------------------------------------------------------------------

def test_learning_gain_of_the_shared_d0_runs_against_min_gain():
    df = pd.DataFrame(dict(d=[0, 0, 0, 8], estimator=["onpolicy"] * 3 + ["gmc"], initial_acc=[0.3, 0.3, 0.3, 0.3],
                           final_acc=[0.4, 0.5, 0.6, 0.9]))
    g = an.learning_gain(df, PROTOCOL)
    m, lo, hi = vd.t_interval(np.array([0.1, 0.2, 0.3]), 0.95)
    assert (g["mean"], g["lo"], g["hi"], g["n"]) == pytest.approx((m, lo, hi, 3))
    assert g["target"] == PROTOCOL.min_gain == 0.15 and g["met"] is True
    assert g["warm_start"] == pytest.approx(0.3) and g["final"] == pytest.approx(0.5)
    assert g["interval"] == "95 % Student-t over seeds"
    df2 = df.assign(final_acc=[0.45, 0.45, 0.45, 0.9])
    assert an.learning_gain(df2, PROTOCOL)["met"] is True    # exactly min_gain: met
    df3 = df.assign(final_acc=[0.44, 0.44, 0.44, 0.9])
    assert an.learning_gain(df3, PROTOCOL)["met"] is False
    e = an.learning_gain(df[df.d == 8], PROTOCOL)
    assert e["n"] == 0 and e["met"] is False and math.isnan(e["mean"])


# --- turning points ----------------------------------------------------------------------------------------------------

def test_turn_finds_the_smallest_delay_of_each_verdict():
    per = [dict(d=2, verdict=vd.INCONCLUSIVE), dict(d=8, verdict=vd.HOLDS), dict(d=16, verdict=vd.REFUTED),
           dict(d=32, verdict=vd.HOLDS)]
    t = an._turn("c", "q", 3, per)
    assert t == dict(claim="c", quantity="q", lr_factor=3.0, first_holds=8, first_refuted=16, per_d=per)
    t = an._turn("c", "q", 1, [])
    assert t["first_holds"] is None and t["first_refuted"] is None


def test_turning_table_text():
    t = an._turn("gmc stable", "failure rate", 1.0, [dict(d=8, estimate=0.1, lo=0.0, hi=0.3, verdict=vd.HOLDS)])
    txt = an.turning_table([t])
    assert txt.splitlines()[1] == "  η×1 gmc stable: holds from d=8, refuted from d=None — d=8: +0.100 [+0.000, +0.300] holds"


# --- c9_result on a synthetic table ------------------------------------------------------------------------------------

def table(n=4, gap=0.0, fail=()):
    """Runs of every estimator at d ∈ {0, 32}: auc 0.5 (+ gap for gmc at d = 32) with a small per-seed wiggle."""
    rows = []
    for e in PROTOCOL.estimators:
        for d in (0, 32):
            for s in range(n):
                auc = 0.5 + 0.01 * ((s * 7 + len(e)) % 3) + (gap if (e == "gmc" and d == 32) else 0.0)
                rows.append(dict(estimator=e, d=d, seed=s, auc=auc, final_acc=auc, initial_acc=0.3, lr_factor=1.0,
                                 skipped_steps=int((e, d, s) in fail), collapsed=False, locked_in=False,
                                 chi2_learn_med=0.5, gain=auc - 0.3))
    return pd.DataFrame(rows)


def test_c9_result_holm_family_rates_and_claim_line():
    r = an.c9_result(table(gap=0.2))
    names = [c.name for c in r.comparisons]
    assert names == [n for n, *_ in PROTOCOL.comparisons()]
    assert all(c.verdict == vd.HOLDS for c in r.comparisons if c.name.startswith("gmc not worse"))
    assert [x.name for x in r.rates] == ["is unstable at d=32", "gmc stable at d=32"]
    assert r.d_max == 32 and r.n_seeds == 4 and r.metric == "auc" and r.lr_factor == 1.0 and r.skipped == ()
    assert r.protocol_hash == PROTOCOL.content_hash() and r.quick is False
    assert r.line.startswith("C9 at LM scale (d=32, 4 seeds, metric auc, protocol ") and r.line.endswith(r.verdict)
    assert r.verdict == vd.combine([c.verdict for c in r.comparisons] + [x.verdict for x in r.rates])


def test_c9_result_lists_comparisons_without_two_paired_seeds_as_not_compared():
    df = table()
    df = df[~((df.estimator == "grpo") & (df.seed > 0))]
    r = an.c9_result(df)
    assert "gmc not worse than grpo at d=32 (needs ≥ 2 seeds of gmc@d=32 and grpo@d=32)" in r.skipped
    assert "not compared: gmc not worse than grpo at d=32 (needs ≥ 2 seeds of gmc@d=32 and grpo@d=32)" in \
        "\n".join(r.lines)


def test_c9_result_rates_out_of_scope_when_the_premise_fails():
    fails = {("onpolicy", 0, s) for s in range(3)}
    r = an.c9_result(table(fail=fails))
    assert all(x.verdict == vd.OUT_OF_SCOPE for x in r.rates)
    assert any(s.startswith("is unstable at d=32: out of scope: the d = 0 learner (onpolicy) already fails 3/4")
               for s in r.skipped)


def test_c9_result_of_an_empty_arm_is_out_of_scope():
    r = an.c9_result(table(), lr_factor=3.0)
    assert r.verdict == vd.OUT_OF_SCOPE and r.n_seeds == 0 and r.comparisons == () and r.rates == ()
    assert "step-size arm η×3" in r.line


def test_c9_lines_quick_prefix_and_notes():
    r = dataclasses.replace(an.c9_result(table()), quick=True, notes=("moved",))
    assert all(x.startswith("quick: not a verdict — ") for x in r.lines)
    assert "quick: not a verdict — note: moved" in r.lines


def test_arm_results_main_arm_first():
    df = pd.concat([table(), table().assign(lr_factor=0.5), table().assign(lr_factor=3.0)])
    assert [r.lr_factor for r in an.arm_results(df)] == [1.0, 0.5, 3.0]


def test_arm_and_with_arm():
    df = table().drop(columns="lr_factor")
    assert len(an.arm(df)) == len(df) and len(an.arm(df, 3.0)) == 0
    assert (an._with_arm(df).lr_factor == 1.0).all()


# --- summarise and the answer rows ---------------------------------------------------------------------------------------

def test_summarise_means_and_t_intervals_per_cell():
    df = table(n=3)
    s = an.summarise(df)
    row = s[(s.estimator == "gmc") & (s.d == 32)].iloc[0]
    vals = df[(df.estimator == "gmc") & (df.d == 32)].auc.to_numpy()
    m, lo, hi = vd.t_interval(vals, 0.95)
    assert (row["mean"], row["lo"], row["hi"], row["n"]) == pytest.approx((m, lo, hi, 3))
    one = an.summarise(table(n=1))
    assert one["lo"].isna().all() and one["gain_hi"].isna().all() and (one["n"] == 1).all()


def test_answer_rows_paired_differences_with_the_holm_verdict_at_d_max_only():  # v < 8 (v8: test_llm_v8.py)
    df = table(gap=0.1)
    df = pd.concat([df, df[df.d == 32].assign(d=8)])
    rows = an.answer_rows(df, PROTOCOL_V7, "cpu-lm", "tiny")
    assert [(r["d"], r["rival"]) for r in rows] == [(d, x) for d in (8, 32) for x in an.ANSWER_RIVALS]
    r32 = next(r for r in rows if r["d"] == 32 and r["rival"] == "is")
    assert r32["verdict"] == vd.HOLDS
    diff = (df[(df.estimator == "gmc") & (df.d == 32)].set_index("seed").auc
            - df[(df.estimator == "is") & (df.d == 32)].set_index("seed").auc).to_numpy()
    assert (r32["delta"], r32["lo"], r32["hi"]) == pytest.approx(vd.t_interval(diff, 0.95))
    assert r32["metric"] == "accuracy AUC" and r32["interval"] == "95 % paired t, 4 seeds" and r32["n"] == 4
    assert r32["group"] == "cpu-lm" and r32["setting"] == "tiny" and r32["arm"] == ""
    assert all("verdict" not in r for r in rows if r["d"] == 8)
    final = dataclasses.replace(PROTOCOL_V7, metric="final_acc")
    assert an.answer_rows(df, final, "g", "s")[0]["metric"] == "final accuracy"


def test_answer_rows_skip_rivals_without_two_paired_seeds():
    df = table()
    df = df[~((df.estimator == "tic") & (df.seed > 0))]
    rows = an.answer_rows(df, PROTOCOL_V7, "g", "s")
    assert "tic" not in {r["rival"] for r in rows} and len(rows) == 4


# --- against the mutmut survivors (issue 55) -------------------------------------------------------------------------

from simulate.llm.protocol import PROTOCOL_V4  # noqa: E402


def test_failed_version_2_is_the_failure_mode_rule_and_version_3_too():
    df = runs(skipped_steps=[0, 0], collapsed=[True, False], final_acc=[0.5, 0.1], initial_acc=[0.5, 0.5])
    for v in (2, 3):
        assert an.failed(df, dataclasses.replace(PROTOCOL_V2, version=v)).tolist() == [True, False]
    v1 = dataclasses.replace(PROTOCOL_V2, version=1, collapse_fraction=0.1)
    assert an.failed(df, v1).tolist() == [False, False]  # the protocol's own collapse_fraction, not the default


def test_learning_gain_meets_a_target_it_equals_and_reads_only_the_shared_d0_baseline_runs():
    p = dataclasses.replace(PROTOCOL, min_gain=0.45 - 0.3)
    df = pd.DataFrame(dict(d=[0, 0, 0, 8], estimator=["onpolicy", "onpolicy", "gmc", "onpolicy"],
                           initial_acc=[0.3] * 4, final_acc=[0.45, 0.45, 0.0, 0.0]))
    g = an.learning_gain(df, p)
    assert g["n"] == 2 and g["met"] is True and g["target"] == p.min_gain
    assert set(an.learning_gain(df[df.d == 8].assign(estimator="gmc"), p)) == {"n", "mean", "lo", "hi", "target", "met"}
    e = an.learning_gain(df.iloc[:0], p)
    assert math.isnan(e["lo"]) and math.isnan(e["hi"]) and e["target"] == p.min_gain


def test_regime_version_4_uses_the_interval_and_v3_threshold_is_one():
    r = an.regime(_chi([0.5, 0.6, 0.7]), PROTOCOL_V4)
    assert r["interval"] is not None and r["lo"] is not None
    assert an.regime(_chi([1.5]), PROTOCOL_V3)["label"] == "far"
    r = an.regime(_chi([0.5]), PROTOCOL)
    assert "hi" in r and r["hi"] is None and r["lo"] is None
    lvl = dataclasses.replace(PROTOCOL, regime_level=0.5)
    wide, narrow = an.regime(_chi([0.5, 0.9, 0.7]), PROTOCOL), an.regime(_chi([0.5, 0.9, 0.7]), lvl)
    assert narrow["hi"] < wide["hi"] and narrow["interval"].startswith("50% t-interval")


def test_summarise_rows_sorted_two_runs_get_an_interval_and_the_level_is_used():
    df = table(n=2)
    s = an.summarise(df)
    assert list(zip(s.estimator, s.d)) == sorted(zip(s.estimator, s.d))
    assert s["lo"].notna().all() and s["gain_lo"].notna().all()
    s90 = an.summarise(df, level=0.9)
    assert (s90["hi"] - s90["lo"] <= s["hi"] - s["lo"] + 1e-15).all() and (s90["hi"] - s90["lo"] < s["hi"] - s["lo"]).any()
    assert (s90["gain_hi"] - s90["gain_lo"] < s["gain_hi"] - s["gain_lo"]).any()


def test_answer_rows_with_two_seeds_and_a_given_result():
    df = table(n=2)
    rows = an.answer_rows(df, PROTOCOL_V7, "g", "s")
    assert len(rows) == len(an.ANSWER_RIVALS) and all(r["n"] == 2 for r in rows)
    res = dataclasses.replace(an.c9_result(df, PROTOCOL_V7), comparisons=())
    assert all("verdict" not in r for r in an.answer_rows(df, PROTOCOL_V7, "g", "s", result=res))


def test_c9_result_uses_the_protocols_alpha_and_failure_rule():
    fails = {("is", 32, s) for s in range(3)}
    df = table(fail=fails)
    strict = dataclasses.replace(PROTOCOL, alpha=0.001)
    r, r2 = an.c9_result(df), an.c9_result(df, strict)
    assert r.rates[0].hi != r2.rates[0].hi
    assert r.comparisons[0].alpha_level != r2.comparisons[0].alpha_level
    v1 = dataclasses.replace(PROTOCOL_V2, version=1)
    assert an.c9_result(df.assign(final_acc=0.0), v1).rates[0].failures == 4  # v1: final accuracy below half


def test_c9_result_a_missing_comparison_does_not_stop_the_others_and_n_seeds_of_an_empty_table():
    df = table()
    df = df[~((df.estimator == "onpolicy") & (df.d == 32))]
    r = an.c9_result(df)
    assert len(r.comparisons) == len(PROTOCOL.comparisons()) - 2  # onpolicy vs gmc and onpolicy degrades
    assert an.c9_result(df.iloc[:0]).n_seeds == 0


def test_arm_results_pass_quick_on():
    df = table()
    assert [r.quick for r in an.arm_results(df)] == [False]
    assert [r.quick for r in an.arm_results(df, quick=True)] == [True]


def test_c9_result_quick_and_full_variants():
    df = table()
    df = pd.concat([df, df[df.d == 32].assign(d=8)])
    q = an.c9_result(df, quick=True)
    assert q.d_max == PROTOCOL.variant(quick=True).d_max == 8 and q.quick is True
    assert an.c9_result(df, full=True).d_max == 32
    with pytest.raises(ValueError, match="no --full variant"):
        an.c9_result(df, PROTOCOL_V2, full=True)
    with pytest.raises(ValueError, match="exclude each other"):
        an.c9_result(df, quick=True, full=True)
    with pytest.raises(ValueError, match="no --full variant"):
        an.arm_results(df, PROTOCOL_V2, full=True)


def test_failure_modes_read_object_columns_as_numbers():
    # a metrics table read back from JSON can hold object columns (None for a missing value)
    m = metrics([0.5, 0.7, 0.9, 1.0], [1.0, 1.0, 1.0, 0.0], chi2=[0.1, 0.2, 0.3, 0.4], ess_w=[4, 8, 2, 2])
    want = an.failure_modes(0.2, m, tail=1, skipped_steps=0)
    assert an.failure_modes(0.2, m.astype(object), tail=1, skipped_steps=0) == want


# --- against the second round of mutmut survivors (issue 55) ----------------------------------------------------------

def test_turning_points_entries_and_the_protocols_alpha_and_p0():
    df = table(n=4, gap=0.05, fail={("is", 32, 0), ("is", 32, 1)})
    turns = an.turning_points(df)
    comp = turns[0]["per_d"][0]
    assert set(comp) == {"d", "estimate", "lo", "hi", "n", "verdict"} and comp["n"] == 4 and comp["d"] == 32
    rate = next(t for t in turns if t["claim"] == "is unstable")["per_d"][0]
    assert set(rate) == {"d", "estimate", "lo", "hi", "n", "verdict", "failures"}
    assert rate["n"] == 4 and rate["failures"] == 2 and rate["estimate"] == 0.5
    strict = dataclasses.replace(PROTOCOL, alpha=0.001)
    t2 = an.turning_points(df, strict)
    assert t2[0]["per_d"][0]["lo"] < comp["lo"]
    assert next(t for t in t2 if t["claim"] == "is unstable")["per_d"][0]["lo"] < rate["lo"]


def test_turning_points_skip_a_delay_without_runs_and_go_on():
    df = table(n=4)
    df = pd.concat([df, df[df.d == 32].assign(d=8)])
    df = df[~((df.estimator == "is") & (df.d == 8))]
    p = dataclasses.replace(PROTOCOL, delays=(0, 8, 32))
    t = next(x for x in an.turning_points(df, p) if x["claim"] == "is unstable")
    assert [e["d"] for e in t["per_d"]] == [32]


def test_turning_points_premise_of_the_given_protocol():
    fails = {("onpolicy", 0, s) for s in range(3)}
    df = table(fail=fails)
    off = dataclasses.replace(PROTOCOL, rate_premise_d0=False)
    t_on = next(x for x in an.turning_points(df) if x["claim"] == "gmc stable")
    t_off = next(x for x in an.turning_points(df, off) if x["claim"] == "gmc stable")
    assert t_on["per_d"][0]["verdict"] == vd.OUT_OF_SCOPE and t_off["per_d"][0]["verdict"] != vd.OUT_OF_SCOPE
    assert all(r.verdict != vd.OUT_OF_SCOPE for r in an.c9_result(df, off).rates)


def test_c9_verdict_passes_quick():
    df = table()
    df = pd.concat([df, df[df.d == 32].assign(d=8)])
    assert an.c9_verdict(df, quick=True) == "\n".join(an.c9_result(df, quick=True).lines)
    assert an.c9_verdict(df, quick=True).startswith("quick: not a verdict")


def test_answer_rows_read_the_verdicts_of_the_given_protocol():
    df = table(gap=0.1)
    df = pd.concat([df, df[df.d == 32].assign(d=8)])
    p8 = dataclasses.replace(PROTOCOL, delays=(0, 8))
    rows = an.answer_rows(df, p8, "g", "s")
    assert all(r.get("verdict") == vd.HOLDS for r in rows if r["d"] == 8)


def test_lock_in_scale_is_the_first_gradient():
    # g0 = 2: the tail must be ≤ 0.01·2 = 0.02 (not 0.01/2)
    assert an.failure_modes(0.5, metrics([0.6, 0.6], [2.0, 0.015]), 1, 0)["locked_in"] is True


def test_summarise_columns_and_two_run_table_cells():
    s = an.summarise(table(n=2))
    assert list(s.columns) == ["lr_factor", "estimator", "d", "n", "mean", "lo", "hi", "gain_mean", "gain_lo", "gain_hi"]
    txt = an.table(table(n=2))
    assert "(n=1)" not in txt and "over 2 seeds" in txt


def test_table_arms_main_first_then_ascending():
    df = pd.concat([table(n=2).assign(lr_factor=f) for f in (3.0, 1.0, 0.5)])
    heads = [ln for ln in an.table(df).splitlines() if ln.startswith("== step-size arm")]
    assert heads == ["== step-size arm η×1 ==", "== step-size arm η×0.5 ==", "== step-size arm η×3 =="]


def test_c9_result_two_paired_seeds_are_enough():
    r = an.c9_result(table(n=2))
    assert len(r.comparisons) == len(PROTOCOL.comparisons()) and r.skipped == ()


def test_failed_is_a_boolean_series_for_integer_flags():
    df = runs(skipped_steps=[0, 0], collapsed=[1, 0], locked_in=[0, 0])
    out = an.failed(df, PROTOCOL)
    assert out.dtype == bool and out.tolist() == [True, False]
    df = runs(skipped_steps=[0, 0], collapsed=[0, 0], locked_in=[0, 1])
    assert an.failed(df, PROTOCOL).dtype == bool


def test_failure_modes_of_a_run_without_a_logged_step():
    out = an.failure_modes(0.2, metrics([], []), 1, 0)
    assert out["failure"] == "none" and math.isnan(out["chi2_learn_med"]) and math.isnan(out["ess_early"])


def test_turning_points_quantities_delays_from_one_and_quick():
    df = table(n=2)
    df = pd.concat([df, df[df.d == 32].assign(d=1), df[df.d == 32].assign(d=8)])
    p = dataclasses.replace(PROTOCOL, delays=(0, 1, 32))
    turns = an.turning_points(df, p)
    assert turns[0]["quantity"] == "Δauc" and turns[-1]["quantity"] == "failure rate"
    assert [e["d"] for e in turns[0]["per_d"]] == [1, 32] and turns[0]["per_d"][0]["n"] == 2
    assert [e["d"] for e in an.turning_points(df, quick=True)[0]["per_d"]] == [8]


# --- v8's answer rows (the confirmatory LM row), from answer_rows' docstring (issue 55, second round) ---------------

def _v8_table(p, n=3, baseline_seeds=None, gmc_gap=0.05):
    """The baseline at d = 0 and every estimator at each d > 0 of ``p``: distinct per-estimator levels, a seed wiggle."""
    rows = []
    base = dict(initial_acc=0.3, lr_factor=1.0, skipped_steps=0, collapsed=False, locked_in=False, chi2_learn_med=0.5)
    for s in (range(n) if baseline_seeds is None else baseline_seeds):
        rows.append(dict(base, estimator=p.baseline, d=0, seed=s, auc=0.6 + 0.01 * s, final_acc=0.6))
    for d in sorted(p.delays):
        if d == 0:
            continue
        for i, e in enumerate(p.estimators):
            for s in range(n):
                auc = 0.5 - 0.02 * i - 0.001 * d + 0.01 * ((s * 7 + len(e)) % 3) + (gmc_gap if e == "gmc" else 0.0)
                rows.append(dict(base, estimator=e, d=d, seed=s, auc=auc, final_acc=auc))
    return pd.DataFrame(rows)


P8 = dataclasses.replace(PROTOCOL, delays=(0, 4, 32))


def test_v8_answer_rows_every_rival_at_every_delay_d0_from_the_shared_baseline_and_marked_confirmatory():
    assert PROTOCOL.version == 8 and PROTOCOL.confirmatory
    df = _v8_table(P8)
    rows = an.answer_rows(df, P8, "g", "s")
    rivals = [x for x in P8.estimators if x != "gmc"]
    assert [(r["d"], r["rival"]) for r in rows] == [(d, x) for d in (0, 4, 32) for x in rivals]
    for r in rows:
        assert r["confirmatory"] is True
        if r["d"] == 0:
            assert r == dict(group="g", setting="s", d=0, rival=r["rival"], arm="", metric="accuracy AUC", delta=0.0,
                             lo=0.0, hi=0.0, n=3, confirmatory=True,
                             interval="d = 0: one shared onpolicy run per seed (3 seeds); every map coincides there "
                                      "(ρ = 1)")
        else:
            a = df[(df.estimator == "gmc") & (df.d == r["d"])].set_index("seed").auc
            b = df[(df.estimator == r["rival"]) & (df.d == r["d"])].set_index("seed").auc
            assert (r["delta"], r["lo"], r["hi"]) == pytest.approx(vd.t_interval((a - b).to_numpy(), 0.95))
            assert r["delta"] != 0 and r["n"] == 3 and r["interval"] == "95 % paired t, 3 seeds"
            assert ("verdict" in r) == (r["d"] == 32)


def test_v8_answer_rows_d0_needs_two_baseline_seeds():
    rows = an.answer_rows(_v8_table(P8, n=2), P8, "g", "s")
    assert [r["n"] for r in rows if r["d"] == 0] == [2] * (len(P8.estimators) - 1)   # two seeds are enough
    rows = an.answer_rows(_v8_table(P8, baseline_seeds=[0]), P8, "g", "s")
    assert {r["d"] for r in rows} == {4, 32}                                              # one: no d = 0 row


def test_answer_rows_confirmatory_only_for_a_confirmatory_v8_protocol_outside_quick():
    df = _v8_table(P8)
    assert not any("confirmatory" in r for r in an.answer_rows(df, P8, "g", "s", quick=True))
    off = dataclasses.replace(P8, confirmatory=False)
    assert not any("confirmatory" in r for r in an.answer_rows(df, off, "g", "s"))
    v7 = dataclasses.replace(PROTOCOL_V7, estimators=PROTOCOL_V7.estimators + ("verl_seq_tis",))
    df7 = pd.concat([table(), table()[lambda t: t.d == 32].assign(d=8)])
    rows = an.answer_rows(df7, v7, "g", "s")
    assert [(r["d"], r["rival"]) for r in rows] == [(d, x) for d in an.ANSWER_DELAYS for x in an.ANSWER_RIVALS]
    assert not any("confirmatory" in r for r in rows)


def test_regime_lower_end_exactly_one_is_not_far():
    from scipy import stats
    q = stats.t.ppf(0.975, 1)
    for i in range(1, 200):                     # two χ̂² whose 95 % interval of the geometric mean starts at 1.0
        a = 0.001 * i
        chi = [math.exp(a), math.exp(a * (q + 1) / (q - 1))]
        r = an.regime(_chi(chi), PROTOCOL)
        if r["lo"] == 1.0:
            break
    assert r["lo"] == 1.0 and r["hi"] > 1.0 and r["label"] == vd.INCONCLUSIVE       # far iff lo > 1


def test_regime_and_arm_read_object_columns_as_numbers():
    chi = _chi([0.5, 0.6, 0.7]).astype({"chi2_learn_med": object})
    assert an.regime(chi, PROTOCOL) == an.regime(_chi([0.5, 0.6, 0.7]), PROTOCOL)
    df = table(n=2).astype({"lr_factor": object})
    assert len(an.arm(df, 1.0)) == len(df)


def test_turning_points_rates_use_the_protocols_failure_rule():
    df = table().assign(final_acc=0.0)                 # v1: a final accuracy below half the warm start fails
    v1 = dataclasses.replace(PROTOCOL_V2, version=1)
    turns = an.turning_points(df, v1)
    rate = next(t for t in turns if t["claim"] == "is unstable")
    assert rate["per_d"][0]["failures"] == 4


# --- cosmic-ray survivors (issue 55, twentieth session) ------------------------------------------------------------

def test_the_first_steps_gradient_norm_is_the_lock_in_scale_even_when_the_last_is_not_finite():
    """``g0`` is the first step's norm when that one is finite, whatever the last step's is (nanmean skips it)."""
    m = metrics([0.6, 0.6, 0.6], [1.0, 0.001, np.nan])
    assert an.failure_modes(0.5, m, tail=2, skipped_steps=0)["locked_in"] is True


def _result(**kw):
    c = vd.Comparison("gmc not worse than is at d=32", "noninferiority", 0.02, -0.02, 2, 0.01, 0.005, 0.01, 0.99,
                      alpha_level=0.05, lo=-0.05, hi=0.07, verdict="inconclusive")
    return an.C9Result(verdict="inconclusive", comparisons=(c,), rates=(), metric="auc", d_max=32, n_seeds=2,
                       protocol_hash="x", **kw)


def test_a_c9_result_is_a_verdict_of_the_main_arm_by_default_and_immutable():
    r = _result()
    assert r.quick is False and r.lr_factor == 1.0 and r.skipped == () and r.notes == ()
    assert not r.lines[0].startswith("quick")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.verdict = "holds"


def test_power_is_stated_from_two_seeds_and_nan_below():
    """Two seeds are the fewest a paired t-test takes: their power is a number; one seed's is nan (no raise)."""
    pw = vd.comparison_power(2, 0.005 * math.sqrt(2), 0.02, 0.05)
    assert f"power {pw:.2f}) → inconclusive" in _result().lines[0] and not math.isnan(pw)
    one = dataclasses.replace(_result().comparisons[0], n=1)
    assert "power nan) → inconclusive" in dataclasses.replace(_result(), comparisons=(one,)).lines[0]


def test_a_perfect_warm_start_still_has_a_finite_progress_scale():
    """``span = max(1 − a₀, 1e-12)``: from a perfect warm start (a₀ = 1) that stays perfect while the gradient fades, the
    progress ratio is 0 (not 0/0), so the run is locked in."""
    out = an.failure_modes(1.0, metrics([1.0, 1.0], [1.0, 0.001]), tail=1, skipped_steps=0)
    assert out["locked_in"] is True and out["collapsed"] is False


def test_ess_early_is_the_first_quarter_of_the_steps():
    """``ess_early``: the mean weight ESS/G over the first ⌊K/4⌋ steps (12 steps: the first 3, not 4)."""
    ess = [1.0, 1.0, 1.0, 0.2] + [0.5] * 8
    out = an.failure_modes(0.2, metrics([0.5] * 12, [1.0] * 12, ess_w=ess), tail=2, skipped_steps=0)
    assert out["ess_early"] == 1.0
