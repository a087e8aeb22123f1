"""C9's scope logic (simulate/protocol/c9.py), second file: the held-out check's edge cases and the per-instance
comparisons on small synthetic tables (issue 55; tests written against mutation survivors, from the docstrings)."""
import math

import numpy as np
import pandas as pd
import pytest

from simulate.protocol import c9
from simulate.protocol.spec import V4_PATH, load_protocol

P4 = load_protocol(V4_PATH)


def rows(est="gmc", d=8, G=8, eps=0.2, kind="tuned", phase="eval", seeds=(1, 2, 3), **cols):
    out = []
    for i, s in enumerate(seeds):
        r = dict(instance="i", estimator=est, d=d, G=G, eps=eps, eta_kind=kind, phase=phase, seed=s, eta=1.0,
                 nauc=0.5 + 0.1 * i, failed=False, failure="none", chi2_med=0.5, zero_frac=0.0)
        for k, v in cols.items():
            r[k] = v[i] if isinstance(v, (list, tuple)) else v
        out.append(r)
    return out


def T(*groups):
    return pd.DataFrame([r for g in groups for r in g])


def test_heldout_check_refuses_a_cell_whose_value_is_missing_on_one_row():
    # NaN counts as a value of its own: [0.5, 0.5, NaN] are two values (a damaged table), not one
    t = T(rows(eta_tuned=0.5, tune_nauc=[0.6, 0.6, np.nan], tune_lcb=0.5, eta_at_edge=False))
    with pytest.raises(ValueError, match=r"tune_nauc must take one value per tuned cell"):
        c9.heldout_check(t, P4)


def test_heldout_check_without_tuning_columns_reads_nan():
    t = T(rows(eta_tuned=0.5, eta_at_edge=False))
    h = c9.heldout_check(t, P4).iloc[0]
    assert math.isnan(h["tune_nauc"]) and math.isnan(h["tune_lcb"]) and math.isnan(h["gap"])
    assert h["flagged"] == False  # noqa: E712  (m < NaN is False)
    assert h["heldout_nauc"] == pytest.approx(0.6)


def test_heldout_check_rows_are_sorted_by_cell():
    t = T(rows(est="tis", eta_tuned=0.5, tune_nauc=0.6, tune_lcb=0.5, eta_at_edge=False),
          rows(est="gmc", d=16, eta_tuned=0.5, tune_nauc=0.6, tune_lcb=0.5, eta_at_edge=False),
          rows(est="gmc", eta_tuned=0.5, tune_nauc=0.6, tune_lcb=0.5, eta_at_edge=False))
    h = c9.heldout_check(t, P4)
    assert list(zip(h.estimator, h.d)) == [("gmc", 8), ("gmc", 16), ("tis", 8)]


# --- whole instances ----------------------------------------------------------------------------------------------

from simulate.protocol.spec import V1_PATH, V2_PATH  # noqa: E402

P1 = load_protocol(V1_PATH)
P2 = load_protocol(V2_PATH)
KINDS4 = ("tuned", "neighbour", "common", "common-neighbour")
#: (estimator, d) -> mean nAUC; seeds add 0, 0.01, 0.03, 0.02 (a paired s.d. that is not zero)
BASE = {("onpolicy", 0): 0.8, ("onpolicy", 8): 0.6, ("is", 0): 0.8, ("is", 8): 0.5, ("tic", 0): 0.8, ("tic", 8): 0.79,
        ("tis", 0): 0.8, ("tis", 8): 0.7, ("gmc", 0): 0.8, ("gmc", 8): 0.75}
JIT = (0.0, 0.01, 0.03, 0.02)


def instance(inst="i", kinds=KINDS4, base=None, fail=(), seeds=(1, 2, 3, 4), fail_kinds=KINDS4, fail_seeds=None):
    """One instance's evaluation runs at the primary cell (ε 0.2, G 8) and d = 0; ``fail``: (estimator, d) whose
    every run at an η kind of ``fail_kinds`` (and a seed of ``fail_seeds``, default all) failed."""
    out = []
    for (est, d), mu in (base or BASE).items():
        for kind in kinds:
            for i, s in enumerate(seeds):
                j = JIT[i % len(JIT)]
                f = (est, d) in fail and kind in fail_kinds and (fail_seeds is None or s in fail_seeds)
                out.append(dict(instance=inst, estimator=est, d=d, G=8, eps=0.2, eta_kind=kind, phase="eval", seed=s,
                                eta=1.0, nauc=mu + j * (1 + 0.5 * (est == "gmc")), failed=f,
                                failure="diverged" if f else "none", chi2_med=0.5, zero_frac=0.0,
                                chi2_learn_med=0.5, chi2_learn_mean=0.5, chi2_learn_p90=0.6, chi2_learn_max=0.9,
                                eta_tuned=1.0, tune_nauc=mu, tune_lcb=mu - 0.05, eta_at_edge=False))
    return out


def test_a_table_without_eta_kind_is_all_tuned_runs():
    t = T(instance(kinds=("tuned",)))
    a = c9.c9_verdicts(t.drop(columns="eta_kind"), P1)
    b = c9.c9_verdicts(t, P1)
    assert a["verdict"] == b["verdict"] and a["aggregate"] == b["aggregate"]
    pd.testing.assert_frame_equal(a["comparisons"], b["comparisons"])
    assert set(a["comparisons"].n) == {4}  # every seed paired


def test_a_repeated_run_is_refused_even_with_other_values_and_the_keys_are_named():
    t = T(instance(kinds=("tuned",)))
    rep = t.iloc[[0]].assign(nauc=0.123, failed=True)  # the same run, another result
    with pytest.raises(ValueError, match=r"table holds 1 repeated run\(s\) \(same instance, estimator, d, eps, G, phase, "
                                         r"eta_kind, eta, seed\): each run must appear once"):
        c9.c9_verdicts(pd.concat([t, rep], ignore_index=True), P1)
    ok = pd.concat([t, rep.assign(seed=99)], ignore_index=True)  # another seed: a run of its own
    c9.c9_verdicts(ok, P1)


@pytest.mark.parametrize("proto", [P1, P4], ids=["v1", "v4"])
def test_an_instance_without_any_c9_estimator_is_out_of_scope(proto):
    t = T(instance(base={("grpo", 0): 0.8, ("grpo", 8): 0.7}))
    r = c9.c9_verdicts(t, proto)
    assert r["aggregate"] == {} and r["verdict"] == "out of scope" and len(r["comparisons"]) == 0


def _rows(r, **sel):
    c = r["comparisons"]
    for k, v in sel.items():
        c = c[c[k] == v]
    return c


def test_v4_compares_gmc_with_every_rival_on_both_arms_and_prints_the_rivals_failure_rate():
    t = T(instance(fail={("tis", 8)}))
    r = c9.c9_verdicts(t, P4, sensitivity=False)
    best = _rows(r, test="paired t")
    best = best[best.subclaim.str.startswith("gmc-best")]
    assert sorted(set(best.subclaim)) == ["gmc-best-or-tied (common η)", "gmc-best-or-tied (tuned η)"]
    assert list(_rows(r, subclaim="gmc-best-or-tied (tuned η)").rival) == ["is", "onpolicy", "tic", "tis"]
    tis = _rows(r, subclaim="gmc-best-or-tied (common η)", rival="tis").iloc[0]
    assert tis["rival_fail_rate"] == 1.0 and tis["name"] == "gmc − tis (d=8, common η)"
    assert _rows(r, subclaim="gmc-best-or-tied (tuned η)", rival="tic").iloc[0]["rival_fail_rate"] == 0.0
    # v2: a rival failing in more than p0 of its runs is not compared; no rival columns
    r2 = c9.c9_verdicts(t, P2)
    assert "tis" not in " ".join(_rows(r2, subclaim="gmc-best-or-tied (tuned η)").name)
    assert len(_rows(r2, subclaim="gmc-best-or-tied (tuned η)")) == 3 and "rival" not in r2["comparisons"]


def test_v2_degrades_on_the_common_arm_and_rates_on_the_common_arm_only():
    t = T(instance())
    r = c9.c9_verdicts(t, P2)
    deg = _rows(r, subclaim="tic-degrades").iloc[0]
    assert deg["arm"] == "common" and deg["name"] == "tic(d=0) − tic(d=8), common η" and deg["n"] == 4
    assert deg["kind"] == "superiority" and deg["estimate"] == pytest.approx(0.01)
    rates = _rows(r, test="Clopper–Pearson")
    assert list(zip(rates.subclaim, rates.arm)) == [("is-unstable", "common"), ("gmc-stable", "common")]
    assert list(rates.name) == ["is-unstable", "gmc-stable"] and list(rates.kind) == ["rate above p0", "rate below p0"]
    r4 = c9.c9_verdicts(t, P4, sensitivity=False)
    rates = _rows(r4, test="Clopper–Pearson")
    assert list(zip(rates.subclaim, rates.arm)) == [("is-unstable", "tuned"), ("is-unstable", "common"),
                                                    ("gmc-stable", "tuned"), ("gmc-stable", "common")]
    assert list(rates.name) == ["is-unstable (tuned η)", "is-unstable (common η)", "gmc-stable (tuned η)",
                                "gmc-stable (common η)"]
    assert set(rates.n) == {8} and set(rates.diverged) == {0} and set(rates.premise) == {""}


def test_rate_split_counts_the_failure_modes_and_the_v4_premise_at_d0():
    t = T(instance(fail={("is", 8), ("is", 0)}))
    r = c9.c9_verdicts(t, P4, sensitivity=False)
    rates = _rows(r, subclaim="is-unstable")
    assert set(rates.diverged) == {8} and set(rates.collapsed) == {0} and set(rates.locked_in) == {0}
    assert set(rates.verdict) == {"out of scope"}
    assert rates.iloc[0]["premise"].startswith("out of scope: is at d = 0 already fails 8/8, 90% Clopper–Pearson [")
    assert rates.iloc[0]["premise"].endswith("(> p0 = 0.25), so failures at d = 8 are not the delay's")
    assert r["aggregate"]["is-unstable"] == "out of scope"
    # without the d = 0 failures the premise holds and the rate is judged
    r = c9.c9_verdicts(T(instance(fail={("is", 8)})), P4, sensitivity=False)
    assert set(_rows(r, subclaim="is-unstable").verdict) == {"holds"}


def test_a_comparison_needs_two_paired_seeds():
    t = T(instance())
    keep = ~((t.estimator == "tic") & (t.d == 0) & (t.seed > 1))  # tic at d = 0: one seed left
    r = c9.c9_verdicts(t[keep], P4, sensitivity=False)
    assert len(_rows(r, subclaim="tic-degrades")) == 0 and len(_rows(r, subclaim="tis-degrades")) == 1
    keep = ~((t.estimator == "tic") & (t.d == 0) & (t.seed > 2))  # two seeds: compared
    assert _rows(c9.c9_verdicts(t[keep], P4, sensitivity=False), subclaim="tic-degrades").iloc[0]["n"] == 2


def test_a_saturated_instance_is_out_of_scope_in_every_row_with_the_reason():
    base = {**BASE, ("onpolicy", 0): 0.99}
    r = c9.c9_verdicts(T(instance(base=base)), P4, sensitivity=False)
    c = r["comparisons"]
    assert set(c.verdict) == {"out of scope"} and r["verdict"] == "out of scope"
    assert all(p.startswith("saturated: nAUC(onpolicy, d=0) = ") for p in c.premise)
    s = r["subclaims"].iloc[0]
    assert bool(s["saturated"]) is True and s["nauc_d0"] == pytest.approx(0.99 + 0.015)
    r = c9.c9_verdicts(T(instance()), P4, sensitivity=False)
    assert bool(r["subclaims"].iloc[0]["saturated"]) is False and "out of scope" not in set(r["comparisons"].verdict)


def test_power_and_underpowered_flags():
    r = c9.c9_verdicts(T(instance()), P4, sensitivity=False)
    c = r["comparisons"]
    assert ((c.verdict == "inconclusive") & (c.power < P4.power_target)).equals(c.underpowered)
    assert c.power.between(0, 1).all()
    s = r["subclaims"].iloc[0]
    assert s["regime"] == "local" and s["chi2_median"] == 0.5 and s["chi2_learn_max"] == 0.9
    assert s["chi2_learn_p90"] == 0.6 and s["chi2_all_med"] == 0.5


def test_v1_instance_rules():
    t = T(instance(kinds=("tuned", "neighbour"), fail={("tis", 8)}))
    r = c9.c9_verdicts(t, P1)
    c = r["comparisons"]
    assert list(c.subclaim) == ["onpolicy-degrades", "tic-degrades", "tis-degrades", "gmc-best-or-tied",
                                "gmc-best-or-tied", "gmc-best-or-tied", "is-unstable", "gmc-stable"]
    assert list(c.name[3:6]) == ["gmc − is (d=8)", "gmc − onpolicy (d=8)", "gmc − tic (d=8)"]  # tis fails: left out
    assert list(c.test) == ["paired t"] * 6 + ["Clopper–Pearson"] * 2
    assert c.iloc[6]["n"] == 8 and c.iloc[6]["kind"] == "rate above p0" and c.iloc[6]["threshold"] == P1.failure_p0
    assert r["subclaims"].iloc[0]["regime"] == "local" and r["subclaims"].iloc[0]["chi2_median"] == 0.5
    far = t.assign(chi2_med=np.where(t.estimator == "gmc", 3.0, 0.1))
    assert c9.c9_verdicts(far, P1)["subclaims"].iloc[0]["regime"] == "far"  # gmc's χ², not the rivals'
    r = c9.c9_verdicts(t[t.estimator != "gmc"].assign(chi2_med=np.where(t[t.estimator != "gmc"].estimator == "is",
                                                                        3.0, 0.1)), P1)
    assert r["subclaims"].iloc[0]["regime"] == "far"  # no gmc: the first estimator by name ("is")


def test_v2_regime_without_gmc_is_the_first_estimators():
    t = T(instance())
    t = t[t.estimator != "gmc"].assign(chi2_learn_med=np.where(t[t.estimator != "gmc"].estimator == "is", 3.0, 0.1))
    s = c9.c9_verdicts(t, P4, sensitivity=False)["subclaims"].iloc[0]
    assert s["regime"] == "far" and s["chi2_median"] == 3.0


def test_v4_a_rival_without_runs_on_one_arm_is_compared_on_the_other_only():
    t = T(instance())
    t = t[~((t.estimator == "tic") & t.eta_kind.str.startswith("common"))]
    r = c9.c9_verdicts(t, P4, sensitivity=False)
    assert list(_rows(r, rival="tic").arm) == ["tuned"] and "tic" not in set(_rows(r, arm="common").rival)


def test_failure_rates_are_counted_on_their_own_arm():
    t = T(instance(fail={("is", 8)}, fail_kinds=("common", "common-neighbour")))
    rates = _rows(c9.c9_verdicts(t, P2), test="Clopper–Pearson")
    assert rates.iloc[0]["name"] == "is-unstable" and rates.iloc[0]["estimate"] == 1.0  # v2: the common arm
    rates = _rows(c9.c9_verdicts(t, P4, sensitivity=False), subclaim="is-unstable")
    assert list(zip(rates.arm, rates.estimate)) == [("tuned", 0.0), ("common", 1.0)]
    # an arm without runs is skipped, the other still judged
    t = T(instance())
    t = t[~((t.estimator == "is") & t.eta_kind.isin(["tuned", "neighbour"]))]
    rates = _rows(c9.c9_verdicts(t, P4, sensitivity=False), subclaim="is-unstable")
    assert list(rates.arm) == ["common"]


def test_rates_and_the_premise_at_the_protocols_alpha():
    from dataclasses import replace

    from scipy import stats
    p = replace(P4, alpha=0.1)
    t = T(instance(fail={("is", 8), ("is", 0)}, fail_kinds=("common", "common-neighbour")))
    rates = _rows(c9.c9_verdicts(t, p, sensitivity=False), subclaim="is-unstable").set_index("arm")
    ci = stats.binomtest(8, 8).proportion_ci(confidence_level=0.8, method="exact")
    assert (rates.loc["common", "lo"], rates.loc["common", "hi"]) == pytest.approx((ci.low, ci.high))
    assert rates.loc["common", "premise"] == (f"out of scope: is at d = 0 already fails 8/8, 80% Clopper–Pearson "
                                              f"[{ci.low:.2f}, {ci.high:.2f}] (> p0 = 0.25), so failures at d = 8 "
                                              f"are not the delay's")
    assert rates.loc["tuned", "premise"] == "" and rates.loc["tuned", "verdict"] != "out of scope"
    from simulate import verdicts as vd
    t16 = T(instance(seeds=tuple(range(1, 9))))
    rates = _rows(c9.c9_verdicts(t16, p, sensitivity=False), subclaim="is-unstable")
    assert rates.iloc[0]["power"] == vd.rate_power(16, 0.25, "above", 0.1) != vd.rate_power(16, 0.25, "above")
    # the d = 0 runs of one arm missing: that arm's premise is not checked, the other arm still judged
    t = t[~((t.estimator == "is") & (t.d == 0) & t.eta_kind.isin(["tuned", "neighbour"]))]
    rates = _rows(c9.c9_verdicts(t, p, sensitivity=False), subclaim="is-unstable")
    assert list(rates.arm) == ["tuned", "common"] and list(rates.premise != "") == [False, True]


@pytest.mark.parametrize("fail_kinds, fail_seeds, v3_out, v4_out", [
    (("common",), (1,), False, False),                    # 1/8 = 0.125 ≤ p0
    (("common", "common-neighbour"), (1,), False, False),  # 2/8 = p0 exactly: not above it
    (("common",), None, True, False),                     # 4/8 > p0, but the 90 % CP lower bound 0.19 is not
    (("common", "common-neighbour"), None, True, True),   # 8/8
])
def test_the_d0_premise_v3_on_the_rate_v4_on_its_lower_bound(fail_kinds, fail_seeds, v3_out, v4_out):
    from simulate.protocol.spec import V3_PATH
    P3 = load_protocol(V3_PATH)
    t = T(instance(fail={("is", 0), ("is", 8)}, fail_kinds=fail_kinds, fail_seeds=fail_seeds))
    r3 = _rows(c9.c9_verdicts(t, P3), subclaim="is-unstable")
    assert list(r3.arm) == ["common"] and (r3.iloc[0]["verdict"] == "out of scope") == v3_out
    r4 = _rows(c9.c9_verdicts(t, P4, sensitivity=False), subclaim="is-unstable", arm="common")
    assert (r4.iloc[0]["verdict"] == "out of scope") == v4_out


def test_comparisons_are_holm_corrected_at_the_protocols_alpha_and_powered_from_two_seeds():
    from dataclasses import replace
    t = T(instance())
    a = _rows(c9.c9_verdicts(t, P4, sensitivity=False), test="paired t")
    b = _rows(c9.c9_verdicts(t, replace(P4, alpha=0.1), sensitivity=False), test="paired t")
    same = (a.verdict == b.verdict).to_numpy()
    assert same.sum() >= 10
    assert np.allclose(b.alpha_level.to_numpy()[same], 2 * a.alpha_level.to_numpy()[same])
    two = T(instance(seeds=(1, 2)))
    c = _rows(c9.c9_verdicts(two, P4, sensitivity=False), test="paired t")
    assert set(c.n) == {2} and c.power.notna().all()


@pytest.mark.parametrize("proto", [P1, P4], ids=["v1", "v4"])
def test_an_instance_with_rates_only_has_a_nan_margin_column(proto):
    t = T(instance(base={("is", 0): 0.8, ("is", 8): 0.5}))
    c = c9.c9_verdicts(t, proto, sensitivity=False)["comparisons"]
    assert set(c.test) == {"Clopper–Pearson"} and c["margin"].dtype == np.float64 and c["margin"].isna().all()


def test_saturation_keeps_a_rows_own_premise_and_works_without_rate_rows():
    base = {**BASE, ("onpolicy", 0): 0.99}
    t = T(instance(base=base, fail={("is", 0), ("is", 8)}))
    c = c9.c9_verdicts(t, P4, sensitivity=False)["comparisons"]
    own = _rows({"comparisons": c}, subclaim="is-unstable")
    assert all(p.startswith("out of scope: is at d = 0 already fails") for p in own.premise)
    assert all(p.startswith("saturated: ") for p in _rows({"comparisons": c}, subclaim="gmc-stable").premise)
    t = T(instance(base={("onpolicy", 0): 0.99, ("onpolicy", 8): 0.6, ("tic", 0): 0.8, ("tic", 8): 0.7}))
    c = c9.c9_verdicts(t, P4, sensitivity=False)["comparisons"]
    assert set(c.test) == {"paired t"} and all(p.startswith("saturated: ") for p in c.premise)


def test_underpowered_needs_power_strictly_below_the_target():
    from dataclasses import replace
    c = c9.c9_verdicts(T(instance()), P4, sensitivity=False)["comparisons"]
    row = c[c.verdict == "inconclusive"].iloc[0]
    c2 = c9.c9_verdicts(T(instance()), replace(P4, power_target=float(row["power"])), sensitivity=False)["comparisons"]
    assert not c2.loc[row.name, "underpowered"]
    c3 = c9.c9_verdicts(T(instance()), replace(P4, power_target=float(row["power"]) + 1e-9),
                        sensitivity=False)["comparisons"]
    assert c3.loc[row.name, "underpowered"]


def test_median_interval_reads_missing_values_as_nan():
    assert c9.median_interval([3, None, 1, 2]) == (2.0, -np.inf, np.inf)  # None → NaN → dropped
    assert c9.median_interval(pd.Series([3, 1, None, 2], dtype=object))[0] == 2.0


def test_an_unknown_regime_has_every_field_nan():
    t = T(rows(chi2_learn_med=np.nan, chi2_med=[0.1, 0.3, 0.2]))
    r = c9.learning_regime(t, "gmc", 8, 0.2, 8, P4)
    assert set(r) == {"regime", "chi2_learn_med", "chi2_lo", "chi2_hi", "chi2_learn_mean", "chi2_learn_p90",
                      "chi2_learn_max", "chi2_all_med"} and r["regime"] == "unknown"
    for k in ("chi2_learn_med", "chi2_lo", "chi2_hi", "chi2_learn_mean", "chi2_learn_p90", "chi2_learn_max"):
        assert isinstance(r[k], float) and math.isnan(r[k]), k
    t2 = T(rows(chi2_learn_med=[0.1, 0.2, 0.3], chi2_learn_mean=0.2, chi2_learn_p90=0.4, chi2_learn_max=0.5))
    assert set(c9.learning_regime(t2, "gmc", 8, 0.2, 8, P4)) == set(r)


def test_learning_max_skips_missing_values_of_an_object_column():
    t = T(rows(chi2_learn_med=[0.1, 0.2, 0.3], chi2_learn_mean=0.2, chi2_learn_p90=0.4, chi2_learn_max=[5.0, None, 2.0]))
    t["chi2_learn_max"] = pd.Series([5.0, None, 2.0], dtype=object, index=t.index)  # a merged table: None where a
    # run had no value
    assert c9.learning_regime(t, "gmc", 8, 0.2, 8, P4)["chi2_learn_max"] == 5.0


def test_v4_saturation_is_judged_on_the_one_sided_1_minus_alpha_bound():
    from dataclasses import replace
    p = replace(P4, saturation_nauc=0.9, saturation_zero=0.5)
    t = T(rows(est="onpolicy", d=0, nauc=[0.92, 0.94, 0.96]))
    s = c9.saturation(t, p)  # 90 % two-sided lower bound 0.906 > 0.9; the 95 % one, 0.890, is not
    assert s["saturated"] is True and "lower bound 0.906" in s["reason"]


def test_v1_uses_the_protocols_alpha_for_holm_and_rates():
    from dataclasses import replace

    from scipy import stats
    t = T(instance(kinds=("tuned", "neighbour"), fail={("is", 8)}))
    a = c9.c9_verdicts(t, P1)["comparisons"]
    b = c9.c9_verdicts(t, replace(P1, alpha=0.1))["comparisons"]
    pt = (a.test == "paired t") & (a.verdict == b.verdict)
    assert pt.sum() >= 4 and np.allclose(b.alpha_level[pt], 2 * a.alpha_level[pt])
    ci = stats.binomtest(8, 8).proportion_ci(confidence_level=0.8, method="exact")
    r = b[b.subclaim == "is-unstable"].iloc[0]
    assert (r["lo"], r["hi"]) == pytest.approx((ci.low, ci.high))


def test_v1_regime_is_unknown_without_the_regime_estimators_runs_at_d():
    base = {("grpo", 0): 0.8, ("onpolicy", 0): 0.8, ("onpolicy", 8): 0.6}  # no gmc: grpo's, which has no d = 8 run
    s = c9.c9_verdicts(T(instance(kinds=("tuned", "neighbour"), base=base)), P1)["subclaims"].iloc[0]
    assert s["regime"] == "unknown" and math.isnan(s["chi2_median"])


def test_c9_verdicts_takes_sensitivity_by_keyword_only():
    t = T(instance(base={("is", 0): 0.8, ("is", 8): 0.5}))
    assert c9.c9_verdicts(table=t, proto=P4, sensitivity=False)["verdict"] in ("holds", "refuted", "inconclusive")
    with pytest.raises(TypeError):
        c9.c9_verdicts(t, P4, False)


def test_the_repeated_run_message_names_the_first_repeat():
    t = T(instance(kinds=("tuned",)))
    reps = t.iloc[[0, 5]]  # two runs repeated: the message shows the first
    with pytest.raises(ValueError, match=r"table holds 2 repeated run\(s\).*first: \{'instance': 'i', 'estimator': "
                                         r"'onpolicy', 'd': 0, .*'seed': 1\}"):
        c9.c9_verdicts(pd.concat([t, reps], ignore_index=True), P1)
