"""Experiments of the training simulator (simulate/experiments.py) and their commands, at quick size."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from simulate import delays as dl
from simulate.__main__ import main as cli
from simulate.experiments import (
    best_eta,
    c9_verdict,
    REGIMES,
    g_scaling_experiment,
    get_regime,
    mean_ci,
    regime_criteria,
    robustness_experiment,
    theory_g_exponents,
    tune,
)
from simulate.training import InstanceSpec, TrainConfig

TOKEN = InstanceSpec(kind="token", V=3, T=3, state="prev", reward="sum_mod", m=3)


def test_mean_ci_matches_t_formula_and_covers():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    m, lo, hi = mean_ci(x, 0.9)
    h = stats.t.ppf(0.95, 3) * x.std(ddof=1) / 2
    assert (m, lo, hi) == pytest.approx((3.5, 3.5 - h, 3.5 + h))
    # coverage of the 95% interval on normal samples, n = 5, 2000 replicates: 0.95 ± 4·√(0.95·0.05/2000)
    rng = np.random.default_rng(0)
    cover = np.mean([lo <= 0 <= hi for _, lo, hi in (mean_ci(rng.normal(size=5)) for _ in range(2000))])
    assert abs(cover - 0.95) <= 4 * math.sqrt(0.95 * 0.05 / 2000)
    assert mean_ci([1.0, math.inf]) == (math.inf, math.inf, math.inf)
    assert math.isnan(mean_ci([2.0])[1])
    with pytest.raises(ValueError, match="level"):
        mean_ci(x, 1.5)


def test_tune_table_and_tuned_eta():
    grid = {"estimator": ["gmc", "is"], "delay": [dl.fixed(0), dl.fixed(6)]}
    base = TrainConfig(instance=TOKEN, G=4, steps=30)
    df = tune(grid, seeds=range(3), etas=(1.0, 4.0, 1e9), base=base, progress=False)
    assert len(df) == 4 * 3 and set(df["n_seeds"]) == {3}
    huge = df[df["eta"] == 1e9]
    assert (huge["div_rate"] > 0).all() and np.isinf(huge["score"]).all()  # η = 1e9 overflows the logits
    best = best_eta(df)
    assert len(best) == 4 and (best["eta"] < 1e9).all()
    for _, grp in df.groupby("setting"):
        assert grp["is_best"].sum() == 1
        assert grp.loc[grp["is_best"], "score"].iloc[0] == grp["score"].min()
    assert (df["score_lo"] <= df["score"]).all() or np.isinf(df["score"]).any()
    with pytest.raises(ValueError, match="grid keys"):
        tune({"nope": [1]}, progress=False)
    # tuning on the regret picks the least mean regret, and the regret is the J* − mean J of the runs
    reg = tune(grid, seeds=range(3), etas=(1.0, 4.0), base=base, progress=False, score="avg_regret")
    for _, grp in reg.groupby("setting"):
        assert grp.loc[grp["is_best"], "regret"].iloc[0] == grp["regret"].min()
    assert ((reg["regret"] > 0) & (reg["regret"] < 1)).all()
    with pytest.raises(ValueError, match="score"):
        tune(grid, seeds=range(1), etas=(1.0,), base=base, progress=False, score="nope")


@pytest.fixture(scope="module")
def far_quick():
    """The quick G experiment in the default (far) regime, shared by two tests."""
    return g_scaling_experiment(quick=True, progress=False, n_boot=200)


def test_g_scaling_quick_runs_and_reports_fit(far_quick):
    df, fit = far_quick
    assert len(df) == 2 * 3 and {"delta", "delta_lo", "delta_hi", "eta_d", "eta_0", "edge_d", "edge_0"} <= set(df.columns)
    np.testing.assert_allclose(df["delta"], df["tuned_score_d"] - df["tuned_score_0"])
    assert fit["score"] == "avg_regret" and fit["n_cells"] == 2 * 3 * 2
    assert fit["n_edge"] == int(df["edge_d"].sum() + df["edge_0"].sum())
    assert ((df["tuned_score_0"] > 0) & (df["tuned_score_0"] < 1)).all()  # regret of a [0,1] reward
    for e in ("gmc", "tic"):
        assert set(fit[e]) == {"slope", "lo", "hi", "n_points", "n_boot_ok", "theory"}
    th = theory_g_exponents()
    assert th["gmc"] == pytest.approx(-0.4) and th["tic"] == pytest.approx(0.0)
    assert fit["regime"] == "far" and fit["d"] == 16 and fit["steps"] == 60  # the default is unchanged
    assert (df["delta_se"] > 0).all() and (df["chi2_d"] >= 0).all()


def test_local_regime_reaches_config_and_lowers_chi2(far_quick):
    """``regime="local"`` sets instance, K and d; its realised χ² is far below the far regime's.

    Not a statistical tolerance: the two medians differ by orders of magnitude (far ~10², local
    ≲ 1 at quick size), so a factor 10 separates them with a wide margin; fixed seeds.
    """
    df, fit = g_scaling_experiment(quick=True, progress=False, n_boot=100, regime="local")
    reg = REGIMES["local"]
    assert fit["regime"] == "local" and fit["d"] == reg.c5_d == 8 and fit["steps"] == reg.quick_steps
    assert fit["instance"] == reg.instance.label and "T=4" in fit["instance"]
    assert set(df["eta_d"]) | set(df["eta_0"]) <= set(reg.quick_etas)
    far_chi2 = far_quick[1]["chi2_median_d"]
    assert fit["chi2_median_d"] < far_chi2 / 10, (fit["chi2_median_d"], far_chi2)
    assert fit["chi2_median_d"] == pytest.approx(float(np.median(df["chi2_d"])))
    # C9 in the local regime: the regime's delays and instance reach every row
    tab = robustness_experiment(quick=True, progress=False, regime="local", estimators=("onpolicy", "gmc"),
                                seeds=range(3))
    assert set(tab["d"]) == set(reg.quick_c9_ds) and (tab["regime"] == "local").all()
    assert tab["setting"].str.contains(reg.instance.label, regex=False).all()
    assert tab.loc[tab["d"] > 0, "chi2"].max() < far_chi2
    with pytest.raises(ValueError, match="regime must be one of far, local"):
        get_regime("near")
    assert get_regime(reg) is reg


def test_regime_criteria_read_the_numbers():
    """Criteria (a)–(c) on hand-made C9 and C5 tables: all met, then each one broken."""
    rows = []
    for e, (J0, J1) in {"onpolicy": (.9, .85), "gmc": (.9, .899)}.items():
        for d, J, chi2 in ((0, J0, 0.0), (4, J1, 0.5)):
            rows.append(dict(estimator=e, d=d, final_J=J, final_J_se=0.01, chi2=chi2, edge=False))
    tab = pd.DataFrame(rows)
    c = regime_criteria(tab)
    assert all(p["holds"] for p in c.values())
    assert c["delay_cost"]["value"] == pytest.approx(0.05 / math.hypot(0.01, 0.01))
    assert c["chi2"]["value"] == pytest.approx(0.5) and c["interior"]["value"] == 1.0
    bad = tab.assign(chi2=tab["chi2"] * 10, edge=[True, False, False, False],
                     final_J=[.9, .89, .9, .9])  # χ² 5, 3/4 interior, cost 0.7 s.e.
    c = regime_criteria(bad)
    assert not any(p["holds"] for p in c.values())
    g = pd.DataFrame(dict(estimator=["gmc", "gmc"], G=[2, 4], d=8, chi2_d=[0.04, 0.06], edge_d=False, edge_0=False,
                          delta=[0.01, 0.03], delta_se=[0.01, 0.01]))
    c = regime_criteria(g)
    assert c["chi2"]["value"] == pytest.approx(0.05) and c["chi2"]["holds"]
    assert c["delay_cost"]["value"] == pytest.approx(3.0) and c["delay_cost"]["holds"] and "G=4" in c["delay_cost"]["detail"]


def test_robustness_quick_and_verdict():
    tab = robustness_experiment(quick=True, progress=False, estimators=("onpolicy", "is", "tis", "tic", "gmc"))
    assert len(tab) == 5 * 3
    assert {"final_J", "final_J_lo", "final_J_hi", "score", "regret", "div_rate_any", "tail_any", "tail_rel_any",
            "edge"} <= set(tab.columns)
    # at d = 0 the tail is compared with itself at every η
    np.testing.assert_allclose(tab.loc[tab["d"] == 0, "tail_rel_any"], 1.0)
    v = c9_verdict(tab)
    assert set(v) == {"is_unstable", "onpolicy_worse", "tic_tis_degrade", "gmc_best_stable"}
    assert all(isinstance(p["holds"], bool) and p["detail"] for p in v.values())


def test_c9_verdict_reads_the_numbers():
    """A hand-made table where every part holds, then one where gmc is beaten."""
    rows = []
    for e, J0, J1, div in [("onpolicy", .9, .6, 0), ("is", .9, .5, .5), ("tis", .9, .7, 0), ("tic", .9, .65, 0),
                           ("gmc", .9, .85, 0)]:
        rows.append(dict(estimator=e, d=0, final_J=J0, final_J_lo=J0 - .01, final_J_hi=J0 + .01, div_rate=0,
                         div_rate_any=0, tail_any=3.0))
        rows.append(dict(estimator=e, d=8, final_J=J1, final_J_lo=J1 - .01, final_J_hi=J1 + .01, div_rate=div,
                         div_rate_any=div, tail_any=30.0))
    tab = pd.DataFrame(rows)
    assert all(p["holds"] for p in c9_verdict(tab).values())
    tab.loc[(tab.estimator == "tis") & (tab.d == 8), ["final_J", "final_J_lo", "final_J_hi"]] = [.95, .94, .96]
    v = c9_verdict(tab)
    assert not v["gmc_best_stable"]["holds"] and "tis" in v["gmc_best_stable"]["detail"]


def test_commands_run(capsys, tmp_path):
    out = tmp_path / "curve.csv"
    assert cli(["train", "--steps", "20", "--d", "3", "--out", str(out)]) == 0
    assert pd.read_csv(out).shape[0] == 21
    assert cli(["tune", "--quick", "--seeds", "2", "--ds", "0,4", "--steps", "20"]) == 0
    assert "gmc" in capsys.readouterr().out
    assert cli(["gscaling", "--quick", "--regime", "local", "--seeds", "2", "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "regime local" in out and "T=4" in out and "interior:" in out and "median realised χ²" in out
    assert cli(["train", "--G", "0"]) == 2  # bad input: one clear error line, exit code 2
    assert "G must" in capsys.readouterr().err
