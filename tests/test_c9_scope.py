"""C9's scope logic on hand-made tables whose right answer is known (issue 39, second round).

Written from the specification (simulate/protocol/c9.py's docstrings, docs/protocol.md), one rule per test:
whose χ² names the regime under v1; when the claim-level word is ``out of scope``; that saturation's interval
needs two held-out values; that each comparison's power is the paired t-test's at the sample s.d. (n − 1); that
the d = 0 premise prints the level of its own Clopper–Pearson interval; that a v2/v3 rival failing in exactly
p₀ of its runs is still a stable rival ("at most p₀"). Seen failing: each against the mutant of c9.py that the
seeded sample (``mutation/run.py --sample 16 --seed 39``) left alive.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from scipy import stats

from simulate import verdicts as vd
from simulate.protocol import load_protocol
from simulate.protocol.c9 import c9_instance, c9_verdicts, saturation
from simulate.protocol.spec import V1_PATH, V3_PATH

P = load_protocol()
V1 = load_protocol(V1_PATH)
V3 = load_protocol(V3_PATH)
KINDS = ("tuned", "neighbour", "lower", "common", "common-neighbour", "common-lower")


def _rows(means: dict, seeds=range(12), failed=None, chi2=None, zero=0.1, kinds=KINDS, spread=0.01):
    """Evaluation rows: ``means[(estimator, d)]`` plus seeded noise; ``failed[(e, d)]`` = set of failing seeds."""
    rng = np.random.default_rng(7)
    rows = []
    for (e, d), m in means.items():
        for s, z in zip(seeds, rng.normal(0, spread, len(seeds))):
            f = s in (failed or {}).get((e, d), ())
            c = (chi2 or {}).get(e, 0.1)
            for k in kinds:
                rows.append(dict(phase="eval", eta_kind=k, instance="toy", estimator=e, d=d, eps=0.2, G=8, seed=s,
                                 eta=1.0, nauc=m + z, failed=f, failure="locked_in" if f else "none", chi2_med=c,
                                 chi2_learn_med=c, chi2_learn_mean=c, chi2_learn_p90=c, chi2_learn_max=c,
                                 zero_frac=zero, eta_tuned=1.0, eta_at_edge=False, tune_nauc=m, tune_lcb=m))
    return pd.DataFrame(rows)


def _means(p, gmc=0.68):
    d = p.primary["d"]
    return {("onpolicy", 0): 0.7, ("onpolicy", d): 0.4, ("tic", 0): 0.7, ("tic", d): 0.5, ("tis", 0): 0.7,
            ("tis", d): 0.5, ("gmc", 0): 0.7, ("gmc", d): gmc, ("is", 0): 0.7, ("is", d): 0.3}


def test_v1_regime_is_named_by_gmcs_chi2_when_gmc_runs_else_by_the_first_estimator():
    d = V1.primary["d"]
    means = {**_means(V1), ("cispo", 0): 0.7, ("cispo", d): 0.6}  # "cispo" sorts before "gmc"
    # cispo (first by name) far, tis (last by name) local: the fallback must be the first, not any other
    chi2 = {"gmc": 0.5, "cispo": 50.0, "is": 50.0, "onpolicy": 50.0, "tic": 50.0, "tis": 0.3}
    _, sub = c9_instance(_rows(means, chi2=chi2, kinds=("tuned", "neighbour")), V1)
    assert set(sub.regime) == {"local"} and set(sub.chi2_median) == {0.5}
    no_gmc = {k: v for k, v in means.items() if k[0] != "gmc"}
    _, sub = c9_instance(_rows(no_gmc, chi2=chi2, kinds=("tuned", "neighbour")), V1)
    assert set(sub.regime) == {"far"} and set(sub.chi2_median) == {50.0}  # cispo's, the first by name


def test_the_claim_word_is_out_of_scope_only_when_no_subclaim_is_in_scope():
    r = c9_verdicts(_rows(_means(P)), P, sensitivity=False)
    scoped = [v for v in r["aggregate"].values() if v != vd.OUT_OF_SCOPE]
    assert scoped and r["verdict"] == vd.combine(scoped) != vd.OUT_OF_SCOPE
    sat = c9_verdicts(_rows(_means(P), zero=0.99), P, sensitivity=False)  # every group equal: saturated
    assert set(sat["aggregate"].values()) == {vd.OUT_OF_SCOPE} and sat["verdict"] == vd.OUT_OF_SCOPE


def test_saturation_has_no_interval_from_one_held_out_value():
    s = saturation(_rows(_means(P), seeds=[0]), P)
    assert math.isnan(s["nauc_d0_lo"]) and math.isnan(s["zero_frac_d0_hi"])
    s2 = saturation(_rows(_means(P), seeds=[0, 1]), P)
    assert np.isfinite([s2["nauc_d0_lo"], s2["nauc_d0_hi"]]).all() and s2["nauc_d0_lo"] < s2["nauc_d0_hi"]


def test_each_comparisons_power_is_the_paired_t_power_at_the_sample_sd():
    t = _rows(_means(P), spread=0.05)
    comp, _ = c9_instance(t, P)
    row = comp[comp.name == f"gmc − tis (d={P.primary['d']}, tuned η)"].iloc[0]
    d = P.primary["d"]
    sel = t[t.eta_kind == "tuned"]
    a = sel[(sel.estimator == "gmc") & (sel.d == d)].set_index("seed").nauc.sort_index()
    b = sel[(sel.estimator == "tis") & (sel.d == d)].set_index("seed").nauc.sort_index()
    sd = float(np.std((a - b).to_numpy(), ddof=1))
    assert math.isclose(row.power, vd.comparison_power(int(row.n), sd, P.margin, row.alpha_level), rel_tol=1e-12)
    sd0 = float(np.std((a - b).to_numpy(), ddof=0))
    assert not math.isclose(row.power, vd.comparison_power(int(row.n), sd0, P.margin, row.alpha_level), rel_tol=1e-9)


def test_the_d0_premise_prints_its_clopper_pearson_level_and_bounds():
    d = P.primary["d"]
    fails = set(range(12))  # is fails in every d = 0 run: the premise's interval lies above p₀
    t = _rows(_means(P), failed={("is", 0): fails, ("is", d): fails})
    comp, _ = c9_instance(t, P)
    prem = comp[(comp.subclaim == "is-unstable") & (comp.arm == "tuned")].premise.iloc[0]
    level = 1 - 2 * P.alpha
    n = 24  # 12 seeds × (η, neighbour η)
    ci = stats.binomtest(n, n, P.failure_p0).proportion_ci(confidence_level=level, method="exact")
    assert f"{level:.0%} Clopper–Pearson [{ci.low:.2f}, {ci.high:.2f}]" in prem, prem
    assert re.search(r"fails 24/24", prem)


def test_v3_rival_failing_in_exactly_p0_of_its_runs_is_still_compared():
    d = V3.primary["d"]
    n_seeds = 8  # runs at the common η and its neighbour: 16; p₀·16 of them fail
    k = V3.failure_p0 * 2 * n_seeds
    assert float(k).is_integer()  # the premise of the test: p₀·n is a whole number of runs
    failing = set(range(int(k) // 2))  # failing seeds fail on both η kinds
    t = _rows(_means(V3), seeds=range(n_seeds), failed={("tic", d): failing}, kinds=("tuned", "neighbour", "common",
                                                                                      "common-neighbour"))
    comp, _ = c9_instance(t, V3)
    names = set(comp.name)
    assert f"gmc − tic (d={d}, common η)" in names  # fails exactly p₀: stable, compared
    more = set(range(int(k) // 2 + 1))
    comp2, _ = c9_instance(_rows(_means(V3), seeds=range(n_seeds), failed={("tic", d): more},
                                 kinds=("tuned", "neighbour", "common", "common-neighbour")), V3)
    assert f"gmc − tic (d={d}, common η)" not in set(comp2.name)  # above p₀: v3 drops it


def test_heldout_check_reads_the_cells_own_tuning_values_even_from_one_run():
    """η, the tuning mean and its lower bound are per-cell values (run_cell writes them on every row); a cell with
    one held-out run (a user's partial table) still gets its row, with those values and n = 1."""
    from simulate.protocol.c9 import heldout_check

    t = _rows(_means(P), seeds=[0], kinds=("tuned",))
    t["eta_tuned"], t["tune_lcb"] = 2.0, t.tune_nauc - 0.05
    h = heldout_check(t, P)
    assert len(h) == len(_means(P)) and set(h.n) == {1}
    for _, r in h.iterrows():
        src = t[(t.estimator == r.estimator) & (t.d == r.d)].iloc[0]
        assert (r.eta_tuned, r.tune_nauc, r.tune_lcb) == (2.0, src.tune_nauc, src.tune_lcb)


def test_a_cell_without_any_learning_phase_has_an_unknown_regime():
    from simulate.protocol.c9 import learning_regime

    t = _rows(_means(P))
    t["chi2_learn_med"] = np.nan  # every run solved at once: no learning-phase step
    assert learning_regime(t, "gmc", P.primary["d"], 0.2, 8, P)["regime"] == "unknown"
    # the whole-run χ² is still reported: the median over the cell's runs of their chi2_med (not NaN) …
    sel = (t.phase == "eval") & (t.eta_kind == "tuned") & (t.estimator == "gmc") & (t.d == P.primary["d"]) & (t.G == 8)
    t.loc[sel, "chi2_med"] = np.arange(sel.sum(), dtype=float) + 1.0
    r = learning_regime(t, "gmc", P.primary["d"], 0.2, 8, P)
    assert r["regime"] == "unknown" and r["chi2_all_med"] == float(np.median(np.arange(sel.sum()) + 1.0))
    assert math.isnan(r["chi2_learn_med"])
    # … and NaN for a cell with no run at all
    assert math.isnan(learning_regime(t, "gmc", P.primary["d"] + 1000, 0.2, 8, P)["chi2_all_med"])


def test_no_sensitivity_line_when_it_is_not_asked_for():
    t = _rows(_means(P))
    assert "lower" in set(t.eta_kind)
    assert "sensitivity" not in c9_verdicts(t, P, sensitivity=False)
    assert "sensitivity" in c9_verdicts(t, P)


def test_a_rivals_printed_failure_rate_is_its_share_of_failed_runs():
    d = P.primary["d"]
    comp, _ = c9_instance(_rows(_means(P), failed={("tic", d): {0, 1, 2}}), P)
    row = comp[comp.name == f"gmc − tic (d={d}, tuned η)"].iloc[0]
    assert row.rival_fail_rate == 6 / 24  # 3 seeds fail at η and at its neighbour: 6 of 24 runs


def test_v3_saturation_needs_the_zero_gradient_fraction_strictly_above_its_threshold():
    at = saturation(_rows(_means(V3), zero=V3.saturation_zero, kinds=("tuned", "neighbour")), V3)
    above = saturation(_rows(_means(V3), zero=np.nextafter(V3.saturation_zero, 1.0), kinds=("tuned", "neighbour")), V3)
    assert not at["saturated"] and above["saturated"]


def test_instances_keep_their_table_order_and_comparisons_a_unique_index():
    a = _rows(_means(P)).assign(instance="zeta")
    b = _rows(_means(P)).assign(instance="alpha")
    r = c9_verdicts(pd.concat([a, b], ignore_index=True), P, sensitivity=False)
    assert list(r["matrix"].columns) == ["zeta", "alpha"]
    assert r["comparisons"].index.is_unique and r["subclaims"].index.is_unique


def test_v4_saturation_is_not_shown_by_one_held_out_value_however_high():
    """v4+ judges saturation on the one-sided lower t-bound, which one value does not give: one seed at
    nAUC 0.999 (> 0.95) is not saturated; two seeds at 0.999 ± 0.0001 are."""
    high = {**_means(P), ("onpolicy", 0): 0.999}
    assert not saturation(_rows(high, seeds=[0], spread=1e-4), P)["saturated"]
    assert saturation(_rows(high, seeds=[0, 1], spread=1e-4), P)["saturated"]


def test_v4_d0_premise_needs_the_clopper_pearson_lower_bound_strictly_above_p0():
    """"Out of scope when the d = 0 learner is shown unstable": lower bound > p₀. With p₀ set to exactly the
    lower bound of is's d = 0 failures the rate sub-claim stays in scope; a hair below it, it is out."""
    import dataclasses

    from simulate.protocol.c9 import failures

    d = P.primary["d"]
    t = _rows(_means(P), failed={("is", 0): set(range(8)), ("is", d): set(range(8))})
    nf0, n0 = failures(t, "is", 0, 0.2, 8, "tuned")
    lo = vd.rate_check(nf0, n0, p0=P.failure_p0, direction="above", alpha=P.alpha).lo

    def premise(p0):
        comp, _ = c9_instance(t, dataclasses.replace(P, failure_p0=p0))
        return str(comp[(comp.subclaim == "is-unstable") & (comp.arm == "tuned")].premise.iloc[0])

    assert 0 < lo < 1 and "out of scope" not in premise(lo)
    assert "out of scope" in premise(lo * (1 - 1e-9))


def test_a_saturating_hand_written_mdp_names_saturated_with_the_measurement_in_every_row():
    """Issue 58: an own MDP that saturates gets out-of-scope rows that say why (premise column filled), never NaN."""
    import dataclasses

    from simulate.instances import token_mdp
    from simulate.protocol import run_c9
    from simulate.protocol.spec import load_protocol

    p = dataclasses.replace(load_protocol(quick=True), estimators=("onpolicy", "is", "tis", "tic", "gmc"))
    _, comp = run_c9(instance=token_mdp(2, 2, state="count", reward="count_ge", k=1), protocol=p, progress=False)
    assert len(comp) and set(comp.verdict) == {"out of scope"}
    assert all(isinstance(x, str) and x.startswith("saturated: nAUC(onpolicy, d=0) = ") and "zero-gradient fraction"
               in x for x in comp.premise)
