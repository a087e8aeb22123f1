"""Protocol v4 (issue 32): zero gradient by tolerance, step sizes that survive held-out seeds, no rival
dropped, one step size = one step, stability on both arms, C5-T's premise and test B; and the C9 rules the
mutation run left alive (issue 39): the regime threshold, whose χ² sets the regime, the v2 table, the
χ² reductions, power at n = 2, permutation invariance and duplicated rows."""
from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from simulate import verdicts as vd
from simulate.protocol import cells as pc
from simulate.protocol import load_protocol
from simulate.protocol import c5 as c5mod
from simulate.protocol.c5 import c5_instance
from simulate.protocol.c9 import (c9_instance, c9_verdicts, heldout_check, learning_regime, median_interval,
                                  regime_of, sensitivity_table)
from simulate.protocol.instances import TrainingInstance
from simulate.protocol.spec import V2_PATH, V3_PATH

V4 = load_protocol()
V3 = load_protocol(V3_PATH)
D = V4.primary["d"]
KINDS = ("tuned", "neighbour", "lower", "common", "common-neighbour", "common-lower")


def _table(nauc: dict, failed: dict | None = None, chi2: dict | None = None, seeds=range(24), shift: dict | None = None,
           final: dict | None = None):
    """Evaluation rows on every η kind; ``shift[kind]`` adds to every nAUC of that kind."""
    rows, rng = [], np.random.default_rng(0)
    for (e, d), mean in nauc.items():
        noise = rng.normal(0, 0.01, len(seeds))
        for s, z in zip(seeds, noise):
            f = (failed or {}).get((e, d), 0.0) > (s % 10) / 10
            c = (chi2 or {}).get(e, 0.1)
            for kind in KINDS:
                rows.append(dict(phase="eval", eta_kind=kind, instance="toy", estimator=e, d=d, eps=0.2, G=8, seed=s,
                                 eta=1.0, nauc=mean + z + (shift or {}).get(kind, 0.0), failed=bool(f),
                                 failure="locked_in" if f else "none", chi2_med=c, chi2_learn_med=c, chi2_learn_mean=c,
                                 chi2_learn_p90=c, chi2_learn_max=c, zero_frac=0.1, eta_tuned=1.0, eta_at_edge=False,
                                 tune_nauc=mean + 0.01, tune_lcb=mean))
    return pd.DataFrame(rows)


GOOD = {("onpolicy", 0): 0.7, ("onpolicy", D): 0.4, ("tic", 0): 0.7, ("tic", D): 0.5, ("tis", 0): 0.7, ("tis", D): 0.5,
        ("gmc", 0): 0.7, ("gmc", D): 0.68, ("is", 0): 0.7, ("is", D): 0.3}


# ----------------------------------------------------------------------------- 1. zero gradient by tolerance
def _flat_instance(value: float) -> TrainingInstance:
    """Every path returns ``value``: every group is equal, so every step must be zero-gradient."""
    from simulate.instances import token_mdp

    m = token_mdp(3, 4, state="prev", reward="sum_mod", m=3, seed=0)
    return TrainingInstance("flat", "every return equal", m.next_state, np.full_like(m.reward, value), m.s0)


def test_fractional_equal_rewards_give_exactly_zero_gradient_under_v4():
    """Eight returns of 0.1 average to 0.09999999999999999 (not representable), so v3's exact rule counts the
    step as learning (A ≈ 1e−17) and θ drifts; v4's tolerance makes every advantage 0 and θ stays θ_0 (seen
    failing on v3's rule). The runs are the protocol's own configurations (:func:`cells._configs`)."""
    from simulate.training import run_many

    assert sum([0.1] * 8) / 8 != 0.1  # the premise of the test: the mean is one ulp off
    inst = _flat_instance(0.1)
    out = {}
    for name, p in (("v4", V4), ("v3", V3)):
        cfgs = pc._configs(inst, "onpolicy", 0, 0.2, 8, [4.0], (1000, 1001), replace(p, budget=256), None)
        out[name] = run_many(cfgs)
    for r in out["v4"]:
        assert (np.asarray(r.zero_grad) == 1.0).all() and (np.asarray(r.theta) == 0.0).all()
    for r in out["v3"]:  # v3's defect, kept reproducible under v3's hash
        assert np.asarray(r.zero_grad).mean() < 1.0 and np.abs(np.asarray(r.theta)).max() > 0.0


# ----------------------------------------------------------------------------- 2. step sizes that survive
def test_lcb_rule_prefers_the_steady_step_and_matches_scipy():
    tune = pd.DataFrame([dict(eta=eta, seed=s, nauc=v) for eta, vals in
                         ((2.0, [0.60 + 0.001 * s for s in range(16)]),  # steady
                          (4.0, [0.95 if s % 2 else 0.30 for s in range(16)]))  # higher mean, half the seeds fail
                         for s, v in zip(range(16), vals)])
    mean, lcb = pc.tuning_scores(tune, V4)
    x = tune[tune.eta == 4.0].nauc.to_numpy()
    want = x.mean() - stats.t.ppf(V4.eta_lcb_level, 15) * x.std(ddof=1) / 4
    assert math.isclose(lcb[4.0], want, rel_tol=1e-12) and mean[4.0] > mean[2.0]
    assert lcb.idxmax() == 2.0 and mean.idxmax() == 4.0  # v4 picks 2, v3's rule (best mean) picks 4


def test_heldout_check_flags_a_step_that_did_not_survive():
    t = _table(GOOD)
    t.loc[(t.estimator == "is") & (t.d == D), "tune_nauc"] = 0.3 + V4.heldout_margin + 0.05
    h = heldout_check(t, V4).set_index(["estimator", "d"])
    assert h.loc[("is", D), "flagged"] and not h.loc[("gmc", D), "flagged"]
    assert math.isclose(h.loc[("is", D), "gap"], h.loc[("is", D), "heldout_nauc"] - h.loc[("is", D), "tune_nauc"])


def test_sensitivity_line_judges_at_the_lower_step():
    """At η/√2 gmc falls far behind: the sensitivity line's gmc-best-or-tied is refuted while η's holds."""
    t = _table(GOOD)
    low = (t.estimator == "gmc") & (t.d == D) & t.eta_kind.isin(["lower", "common-lower"])
    t.loc[low, "nauc"] -= 0.3
    r = c9_verdicts(t, V4)
    assert r["matrix"].loc["gmc-best-or-tied (tuned η)", "toy"] == vd.HOLDS
    s = sensitivity_table(t, V4)
    assert s["matrix"].loc["gmc-best-or-tied (tuned η)", "toy"] == vd.REFUTED
    assert r["sensitivity"]["verdict"] == s["verdict"]


def test_saturation_is_judged_on_its_lower_bound_with_an_interval():
    t = _table({**GOOD, ("onpolicy", 0): 0.952})  # mean just above 0.95, one-sided lower bound below
    x = t[(t.estimator == "onpolicy") & (t.d == 0) & (t.eta_kind == "tuned")].nauc.to_numpy()
    lb = x.mean() - stats.t.ppf(1 - V4.alpha, x.size - 1) * stats.sem(x)
    assert lb < V4.saturation_nauc < x.mean()  # the case the rule decides
    _, sub = c9_instance(t, V4)
    row = sub.iloc[0]
    assert not row.saturated and row.nauc_d0_lo < x.mean() < row.nauc_d0_hi
    _, sub3 = c9_instance(t, V3)  # v3 read the point estimate
    assert sub3.iloc[0].saturated


# ----------------------------------------------------------------------------- 3. no rival dropped
def test_a_rival_with_frequent_high_J_lockins_stays_in_the_comparison():
    """onpolicy fails (locked in) in 60 % of its runs but ends above gmc: v3 dropped it from "gmc best or
    tied" (and the sub-claim held); v4 compares it and the sub-claim is refuted (seen failing on v3)."""
    t = _table({**GOOD, ("onpolicy", D): 0.81}, failed={("onpolicy", D): 0.6})
    comp3, sub3 = c9_instance(t, V3)
    assert not comp3.name.str.contains("gmc − onpolicy").any()
    comp, sub = c9_instance(t, V4)
    rows = comp[comp.name.str.startswith("gmc − onpolicy")]
    assert set(rows.arm) == {"tuned", "common"} and (rows.rival_fail_rate > 0.5).all()
    assert dict(zip(sub.subclaim, sub.verdict))["gmc-best-or-tied (tuned η)"] == vd.REFUTED


def test_lockin_needs_a_low_final_J():
    """A run stuck (‖∇J‖ tiny) at normalised J 0.81 is locked in under v3 (< 0.95) but not under v4 (< 0.5)."""
    K = 10
    J = np.linspace(0.0, 0.81, K + 1)
    g2 = np.r_[1.0, np.full(K, 1e-8)]
    r = SimpleNamespace(J=J, chi2=np.full(K, 0.1), zero_grad=np.zeros(K), diverged=False, grad_norm2=g2,
                        ess=np.full(K, 8.0))
    kw = dict(lockin_grad_rel=0.01, learning_gap=0.9)
    assert pc.run_metrics(r, 1.0, 0.5, lockin_nJ=V3.lockin_nJ, **kw)["locked_in"]
    assert not pc.run_metrics(r, 1.0, 0.5, lockin_nJ=V4.lockin_nJ, **kw)["locked_in"]
    r.J = np.linspace(0.0, 0.3, K + 1)
    assert pc.run_metrics(r, 1.0, 0.5, lockin_nJ=V4.lockin_nJ, **kw)["failure"] == "locked_in"


# ----------------------------------------------------------------------------- 4. one step size, one step
def _pow2_instance() -> TrainingInstance:
    from simulate.instances import token_mdp

    m = token_mdp(3, 4, state="prev", reward="sum_mod", m=3, seed=1)
    return TrainingInstance("pow2", "T = 4", m.next_state, m.reward, m.s0, bernoulli=True)


@pytest.mark.slow
def test_every_comparison_at_d0_is_exactly_zero_on_both_arms():
    """At d = 0 every map's weight is 1: trajectory maps at η and token-level maps at T·η take the same step,
    so every tuned η and every held-out nAUC coincide on both arms and at η/√2 (T = 4, a power of two, so
    1/T is exact; seen failing on v3's separate token grid)."""
    from simulate.protocol import run_protocol

    ests = ("onpolicy", "is", "tis", "tic", "gmc", "snis", "grpo", "gspo", "cispo", "verl_tok_tis", "trl_seq_mask")
    p = replace(V4, instances=("count-frac",), estimators=ests, budget=256, tune_seeds=(0, 1, 2),
                eval_seeds=(1000, 1001, 1002), eta_log2=(2.0, 3.0), max_widen=1)
    res = run_protocol(p, instances=[_pow2_instance()], progress=False)
    ev = res.table[(res.table.phase == "eval") & (res.table.d == 0)]
    for kind in KINDS:
        w = ev[ev.eta_kind == kind].pivot_table(index="seed", columns="estimator", values="nauc")
        assert (w.sub(w.onpolicy, axis=0) == 0.0).all().all(), kind
    assert len(ev.groupby("estimator").eta_tuned.first().unique()) == 1
    comp = res.c9["comparisons"]  # and no comparison is computed from a mismatched pair
    assert comp.estimate.notna().all()


def test_token_level_step_is_T_times_eta():
    inst = _pow2_instance()
    assert pc.step_eta(inst, "grpo", 2.0, V4) == 8.0 and pc.step_eta(inst, "gmc", 2.0, V4) == 2.0
    assert pc.step_eta(inst, "grpo", 2.0, V3) == 2.0  # v3: its own grid, no scaling


# ----------------------------------------------------------------------------- 5. stability on both arms
def test_stability_is_judged_on_both_arms_side_by_side():
    t = _table(GOOD, failed={("is", D): 0.6})
    t.loc[(t.estimator == "is") & t.eta_kind.isin(["common", "common-neighbour"]), "failed"] = False
    comp, sub = c9_instance(t, V4)
    rows = comp[comp.subclaim == "is-unstable"].set_index("arm")
    assert rows.loc["tuned", "verdict"] == vd.HOLDS and rows.loc["common", "verdict"] == vd.REFUTED
    assert dict(zip(sub.subclaim, sub.verdict))["is-unstable"] == vd.REFUTED  # one arm refutes the claim
    comp3, sub3 = c9_instance(t, V3)  # v3 looked at the common arm only, and missed the tuned arm's failures
    assert set(comp3[comp3.subclaim == "is-unstable"].arm) == {"common"}
    assert dict(zip(sub3.subclaim, sub3.verdict))["is-unstable"] == vd.REFUTED


def test_d0_premise_needs_the_interval_above_p0():
    """v4: out of scope only when the d = 0 failure rate's Clopper–Pearson interval lies above p0."""
    t = _table(GOOD, failed={("is", D): 0.6})
    t.loc[(t.estimator == "is") & (t.d == 0) & (t.seed < 7), "failed"] = True  # 14/48 = 0.29 > p0, CP interval not
    comp, _ = c9_instance(t, V4)
    r = comp[(comp.subclaim == "is-unstable")]
    assert (r.premise == "").all()
    comp3, _ = c9_instance(t, V3)
    assert (comp3[comp3.subclaim == "is-unstable"].verdict == vd.OUT_OF_SCOPE).all()
    t = _table(GOOD, failed={("is", D): 0.6, ("is", 0): 0.8})
    comp, _ = c9_instance(t, V4)
    why = comp[comp.subclaim == "is-unstable"].premise.iloc[0]
    assert "Clopper–Pearson [" in why and "/48" in why


# ----------------------------------------------------------------------------- 6. C5-T
def test_c5_test_b_is_retired_with_its_power_printed():
    b = c5mod.test_b_retired(V4)
    assert b["verdict"] == vd.OUT_OF_SCOPE and b["power"] < V4.power_target
    # the seeds that power 0.8 would need, from σ ∝ 1/√n
    assert b["n_needed"] == math.ceil(24 * (V4.c5["test_b_v3_se"] / b["se_needed"]) ** 2)
    assert vd.interval_power(b["predicted"], b["se_needed"], V4.alpha) == pytest.approx(V4.power_target, abs=1e-9)
    assert "retired" in b["reason"] and f"{b['power']:.2f}" in b["reason"]


def test_c5_premise_is_c9_regime():
    """One χ² premise: C5-T reads C9's regime row, so the two can never disagree (seen: v3 had 0.14 vs 1.32)."""
    _, sub = c9_instance(_table(GOOD, chi2={"gmc": 1.32, "onpolicy": 0.1}), V4)
    row = next(sub.itertuples(index=False))
    r = c5_instance(pd.DataFrame(), None, V4, regime=row)
    assert not r["in_scope"] and r["chi2_median"] == row.chi2_median == 1.32 and "C9's regime" in r["reason"]


def test_c5_t_is_out_of_scope_where_c9_finds_the_instance_saturated():
    """One scope rule: an instance C9 calls saturated is out of scope for C5-T too, whatever its χ² (seen in the
    v4 run: count-frac, prev-random-1/2 and feature-loglinear were saturated for C9 and judged by C5-T)."""
    _, sub = c9_instance(_table(GOOD, chi2={"gmc": 0.2, "onpolicy": 0.1}), V4)
    row = next(sub.itertuples(index=False))
    why = "saturated: zero-gradient fraction 0.62 [0.56, 0.68]"
    r = c5_instance(pd.DataFrame(), None, V4, regime=row, saturated=why)
    assert not r["in_scope"] and r["verdict"] == vd.OUT_OF_SCOPE and r["reason"] == why
    assert c5_instance(pd.DataFrame(), None, V4, regime=row, saturated="")["in_scope"]


# ----------------------------------------------------------------------------- 10. C9 survivors (issue 39)
def test_regime_at_exactly_the_threshold_is_local():
    assert regime_of(V4.local_chi2, V4) == "local"
    assert regime_of(np.nextafter(V4.local_chi2, np.inf), V4) == "far"
    with pytest.raises(ValueError, match="chi2_med"):
        regime_of(float("nan"), V4)


def test_gmc_chi2_sets_the_regime_when_rivals_differ():
    t = _table(GOOD, chi2={"gmc": 0.5, "onpolicy": 5.0, "is": 9.0, "tis": 3.0, "tic": 2.0})
    _, sub = c9_instance(t, V4)
    assert set(sub.regime) == {"local"} and set(sub.chi2_median) == {0.5}
    t = _table(GOOD, chi2={"gmc": 5.0, "onpolicy": 0.1, "is": 0.1, "tis": 0.1, "tic": 0.1})
    assert set(c9_instance(t, V4)[1].regime) == {"far"}


def test_chi2_learn_max_is_the_largest_run_value_and_the_median_has_its_interval():
    t = _table(GOOD)
    sel = (t.estimator == "gmc") & (t.d == D) & (t.eta_kind == "tuned")
    t.loc[sel, "chi2_learn_max"] = np.arange(sel.sum(), dtype=float)
    t.loc[sel, "chi2_learn_med"] = np.arange(sel.sum(), dtype=float)
    r = learning_regime(t, "gmc", D, 0.2, 8, V4)
    assert r["chi2_learn_max"] == sel.sum() - 1  # the max over runs, not a median
    m, lo, hi = median_interval(np.arange(24.0))
    assert m == 11.5 and (lo, hi) == (6.0, 17.0)  # order statistics 7 and 18 of 24 (binomial, 95 %)
    assert stats.binom.cdf(6, 24, 0.5) <= 0.025 < stats.binom.cdf(7, 24, 0.5)
    assert r["chi2_lo"] == lo and r["chi2_hi"] == hi


def test_c9_verdicts_on_a_v2_table():
    v2 = load_protocol(V2_PATH)
    t = _table(GOOD, failed={("is", D): 0.6})
    t = t[t.eta_kind.isin(["tuned", "neighbour", "common", "common-neighbour"])]
    r = c9_verdicts(t, v2)
    assert "heldout" not in r and "sensitivity" not in r
    assert r["matrix"].loc["is-unstable", "toy"] == vd.HOLDS and r["verdict"] in vd.VERDICTS


def test_power_with_two_seeds_is_finite():
    t = _table(GOOD, seeds=range(2))
    comp, _ = c9_instance(t, V4)
    tcomp = comp[comp.test == "paired t"]
    assert len(tcomp) and np.isfinite(tcomp.power.to_numpy(dtype=float)).all()


def test_duplicated_rows_are_refused():
    t = _table(GOOD)
    with pytest.raises(ValueError, match="repeated run"):
        c9_verdicts(pd.concat([t, t.iloc[:1]], ignore_index=True), V4)


@settings(max_examples=8, deadline=None)
@given(st.permutations(["onpolicy", "is", "tis", "tic", "snis"]), st.randoms(use_true_random=False))
def test_permuting_rivals_never_changes_a_verdict(order, rnd):
    base = {**GOOD, ("snis", 0): 0.7, ("snis", D): 0.69}
    t = _table(base, failed={("is", D): 0.6})
    ref = c9_verdicts(t, V4, sensitivity=False)["matrix"]
    rows = pd.concat([t[t.estimator == e] for e in ["gmc", *order]], ignore_index=True)
    rows = rows.sample(frac=1.0, random_state=rnd.randrange(2 ** 31)).reset_index(drop=True)
    got = c9_verdicts(rows, V4, sensitivity=False)["matrix"]
    pd.testing.assert_frame_equal(ref, got)
