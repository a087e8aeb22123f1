"""C9's scope logic (simulate/protocol/c9.py) on small synthetic run tables: which runs a cell reads, failure counts
on each step-size arm, the overlap regime's threshold, the order-statistic interval of a median, the saturation
guard, the learning-phase regime and the held-out check (issue 55)."""
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from simulate import verdicts as vd
from simulate.protocol import c9
from simulate.protocol.spec import V2_PATH, V4_PATH, load_protocol

P4 = load_protocol(V4_PATH)
P2 = load_protocol(V2_PATH)


def run_rows(est="gmc", d=8, G=8, eps=0.2, kind="tuned", phase="eval", seeds=(1, 2, 3), **cols):
    rows = []
    for i, s in enumerate(seeds):
        r = dict(instance="i", estimator=est, d=d, G=G, eps=eps, eta_kind=kind, phase=phase, seed=s, eta=1.0,
                 nauc=0.5 + 0.1 * i, failed=False, failure="none", chi2_med=0.5, zero_frac=0.0)
        for k, v in cols.items():
            r[k] = v[i] if isinstance(v, (list, tuple)) else v
        rows.append(r)
    return rows


def T(*groups):
    return pd.DataFrame([r for g in groups for r in g])


# --- eval_values, failures, failure_split ------------------------------------------------------------------------------

def test_eval_values_select_one_cell_and_arm_sorted_by_seed():
    t = T(run_rows(seeds=(3, 1, 2)), run_rows(d=0), run_rows(G=4), run_rows(eps=0.5), run_rows(kind="common"),
          run_rows(est="tis"))
    v = c9.eval_values(t, "gmc", 8, 0.2 + 1e-12, 8)
    assert list(v.index) == [1, 2, 3] and list(v) == [0.6, 0.7, 0.5]
    assert len(c9.eval_values(t, "gmc", 8, 0.2, 8, eta_kind="common")) == 3
    assert list(c9.eval_values(t, "gmc", 8, 0.2, 8, column="chi2_med")) == [0.5] * 3


def test_failures_count_the_run_eta_and_its_neighbour_on_the_eval_seeds():
    t = T(run_rows(failed=[True, False, True]), run_rows(kind="neighbour", failed=[True, True, True]),
          run_rows(kind="common", failed=[True] * 3), run_rows(phase="tune", failed=[True] * 3),
          run_rows(d=0, failed=[True] * 3))
    assert c9.failures(t, "gmc", 8, 0.2, 8) == (5, 6)
    assert c9.failures(t, "gmc", 8, 0.2, 8, arm="common") == (3, 3)
    assert c9.failures(t, "tis", 8, 0.2, 8) == (0, 0)
    assert c9.ARM_KINDS == {"tuned": ("tuned", "neighbour"), "common": ("common", "common-neighbour")}


def test_failure_split_counts_each_mode():
    t = T(run_rows(failure=["diverged", "collapsed", "none"]),
          run_rows(kind="neighbour", failure=["locked_in", "locked_in", "diverged"]))
    assert c9.failure_split(t, "gmc", 8, 0.2, 8) == dict(n=6, diverged=2, collapsed=1, locked_in=2)
    t2 = t.drop(columns="failure")
    assert c9.failure_split(t2, "gmc", 8, 0.2, 8) == dict(n=6, diverged=0, collapsed=0, locked_in=0)


def test_arm_rows_of_a_table_without_eta_kind_are_tuned():
    t = T(run_rows(failed=[True, False, False])).drop(columns="eta_kind")
    assert c9.failures(t, "gmc", 8, 0.2, 8) == (1, 3)
    assert c9.failures(t, "gmc", 8, 0.2, 8, arm="common") == (0, 0)


# --- regime_of and median_interval ------------------------------------------------------------------------------------

def test_regime_threshold_itself_is_local():
    thr = P4.local_chi2
    assert c9.regime_of(thr, P4) == "local" and c9.regime_of(thr * (1 + 1e-9), P4) == "far"
    assert c9.regime_of(0.0, P4) == "local"
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="chi2_med must be a finite number"):
            c9.regime_of(bad, P4)


def test_median_interval_order_statistics():
    x = np.arange(1.0, 21.0)[::-1]  # n = 20: j from binom.ppf(0.025, 20, ½) = 6
    j = int(stats.binom.ppf(0.025, 20, 0.5))
    assert j == 6
    assert c9.median_interval(x) == (10.5, 6.0, 15.0)
    assert c9.median_interval(np.append(x, [np.nan, np.inf])) == (10.5, 6.0, 15.0)  # non-finite dropped
    m, lo, hi = c9.median_interval([1.0, 2.0, 3.0, 4.0, 5.0])  # n = 5: j = 0 < 1
    assert (m, lo, hi) == (3.0, -np.inf, np.inf)
    assert all(math.isnan(v) for v in c9.median_interval([np.nan]))
    assert c9.median_interval(np.arange(1.0, 21.0), level=0.5) == (10.5, float(int(stats.binom.ppf(0.25, 20, 0.5))),
                                                                   float(21 - int(stats.binom.ppf(0.25, 20, 0.5))))


def test_median_interval_smallest_n_with_an_interval():
    # n = 6: P(Bin(6, ½) ≤ 0) = 1/64 ≤ 0.025, so j = 1: [x(1), x(6)]
    assert c9.median_interval([6.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == (3.5, 1.0, 6.0)


# --- saturation -----------------------------------------------------------------------------------------------------

def sat_table(nauc, zero, est="onpolicy"):
    return T(run_rows(est=est, d=0, nauc=nauc, zero_frac=zero, seeds=tuple(range(len(nauc)))))


def test_saturation_v4_on_the_one_sided_lower_bound():
    p = replace(P4, saturation_nauc=0.9, saturation_zero=0.5)
    s = c9.saturation(sat_table([0.95, 0.96, 0.97], [0.0, 0.0, 0.0]), p)
    _, nb, _ = vd.t_interval(np.array([0.95, 0.96, 0.97]), 1 - 2 * p.alpha)
    assert s["saturated"] is True and nb > 0.9 and s["reference"] == "onpolicy"
    assert s["reason"].startswith("saturated: nAUC(onpolicy, d=0) = 0.960 [95 % t ")
    s = c9.saturation(sat_table([0.85, 0.95, 0.99], [0.0, 0.0, 0.0]), p)  # mean above, lower bound below 0.9
    assert s["saturated"] is False and s["reason"] == "" and s["nauc_d0"] == pytest.approx(0.93)
    s = c9.saturation(sat_table([0.5, 0.5, 0.5], [0.6, 0.61, 0.62]), p)
    assert s["saturated"] is True
    lo95 = vd.t_interval(np.array([0.6, 0.61, 0.62]))[1]
    assert s["zero_frac_d0_lo"] == pytest.approx(lo95)


def test_saturation_v2_on_the_means_and_the_reference_learner():
    p = replace(P2, saturation_nauc=0.9, saturation_zero=0.5)
    assert c9.saturation(sat_table([0.85, 0.95, 0.99], [0.0] * 3), p)["saturated"] is True   # mean 0.93 > 0.9
    assert c9.saturation(sat_table([0.9, 0.9, 0.9], [0.5] * 3), p)["saturated"] is False       # equal: not above
    s = c9.saturation(sat_table([0.95] * 3, [0.0] * 3, est="gmc"), p)
    assert s["reference"] == "gmc" and s["reason"].startswith("saturated: nAUC(gmc, d=0) = 0.950 (> 0.9?)")
    s = c9.saturation(sat_table([0.5], [0.0]), P4)
    assert s["saturated"] is False and math.isnan(s["nauc_d0_lo"])


# --- learning_regime -------------------------------------------------------------------------------------------------

def test_learning_regime_from_gmcs_learning_phase_chi2():
    vals = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    t = T(run_rows(seeds=tuple(range(6)), chi2_learn_med=vals, chi2_learn_mean=[1.0] * 6,
                   chi2_learn_p90=[2, 2, 2, 3, 3, 3], chi2_learn_max=[5, 9, np.nan, 1, 1, 1], chi2_med=0.7))
    r = c9.learning_regime(t, "gmc", 8, 0.2, 8, P4)
    m, lo, hi = c9.median_interval(vals)
    assert (r["chi2_learn_med"], r["chi2_lo"], r["chi2_hi"]) == (m, lo, hi)
    assert r["regime"] == c9.regime_of(m, P4) and r["chi2_learn_mean"] == 1.0 and r["chi2_learn_p90"] == 2.5
    assert r["chi2_learn_max"] == 9.0 and r["chi2_all_med"] == 0.7
    assert c9.learning_regime(t, "gmc", 8, 0.2, 8, P4, arm="common")["regime"] == "unknown"


def test_learning_regime_unknown_without_a_learning_step():
    t = T(run_rows(chi2_learn_med=np.nan, chi2_med=[0.1, 0.3, 0.2]))
    r = c9.learning_regime(t, "gmc", 8, 0.2, 8, P4)
    assert r["regime"] == "unknown" and math.isnan(r["chi2_learn_med"]) and r["chi2_all_med"] == 0.2
    r = c9.learning_regime(T(run_rows()), "tis", 8, 0.2, 8, P4)
    assert r["regime"] == "unknown" and math.isnan(r["chi2_all_med"])


# --- heldout_check ------------------------------------------------------------------------------------------------------

def test_heldout_check_flags_an_eta_that_does_not_survive_new_seeds():
    p = replace(P4, heldout_margin=0.05)
    t = T(run_rows(nauc=[0.5, 0.6, 0.7], eta_tuned=0.5, tune_nauc=0.65, tune_lcb=0.6, eta_at_edge=False),
          run_rows(est="tis", nauc=[0.5, 0.6, 0.7], eta_tuned=0.25, tune_nauc=0.66, tune_lcb=0.6, eta_at_edge=True),
          run_rows(est="tic", nauc=[0.5, 0.6, 0.7], eta_tuned=0.25, tune_nauc=0.6501, tune_lcb=0.6, eta_at_edge=False),
          run_rows(kind="neighbour", nauc=[0.0] * 3, eta_tuned=0.5, tune_nauc=0.65, tune_lcb=0.6, eta_at_edge=False))
    h = c9.heldout_check(t, p).set_index("estimator")
    assert h.loc["gmc", "flagged"] == False and h.loc["gmc", "gap"] == pytest.approx(-0.05)  # noqa: E712  (exactly)
    assert h.loc["tis", "flagged"] == True and bool(h.loc["tis", "eta_at_edge"]) is True  # noqa: E712
    assert h.loc["tic", "flagged"] == True  # noqa: E712
    m, lo, hi = vd.t_interval(np.array([0.5, 0.6, 0.7]))
    assert (h.loc["gmc", "heldout_nauc"], h.loc["gmc", "heldout_lo"], h.loc["gmc", "heldout_hi"]) == pytest.approx((m, lo, hi))
    assert h.loc["gmc", "n"] == 3 and h.loc["gmc", "eta_tuned"] == 0.5 and h.loc["gmc", "tune_lcb"] == 0.6


def test_heldout_check_refuses_a_cell_with_two_chosen_etas():
    t = T(run_rows(eta_tuned=[0.5, 0.5, 0.25], tune_nauc=0.6, tune_lcb=0.5, eta_at_edge=False))
    with pytest.raises(ValueError, match="eta_tuned must take one value per tuned cell"):
        c9.heldout_check(t, P4)


# --- c9_verdicts: repeated runs -------------------------------------------------------------------------------------

def test_c9_verdicts_refuses_a_repeated_run():
    t = T(run_rows(), run_rows(seeds=(1,)))
    with pytest.raises(ValueError, match=r"table holds 1 repeated run\(s\)"):
        c9.c9_verdicts(t, P4)


def test_sensitivity_kinds_relabel_the_lower_eta_as_the_run_eta():
    assert c9.SENSITIVITY_KINDS == {"lower": "tuned", "tuned": "neighbour", "common-lower": "common",
                                    "common": "common-neighbour"}
