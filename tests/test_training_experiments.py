"""Experiments of the training simulator (simulate/experiments.py) and their commands, at quick size."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from simulate import delays as dl
from simulate.__main__ import main as cli
from simulate.experiments import (
    QUICK_ETAS,
    _fit_slope,
    _nominal_delay,
    _setting_id,
    best_eta,
    c9_verdict,
    reference_eta,
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
    fin = np.isfinite(df["score"])
    assert fin.sum() == 4 * 2 and (df.loc[fin, "score_lo"] <= df.loc[fin, "score"]).all()
    assert (df.loc[fin, "score_hi"] >= df.loc[fin, "score"]).all()
    with pytest.raises(ValueError, match="grid keys"):
        tune({"nope": [1]}, progress=False)
    # tuning on the regret picks the least mean regret, and the regret is the J* − mean J of the runs
    reg = tune(grid, seeds=range(3), etas=(1.0, 4.0), base=base, progress=False, score="avg_regret")
    for _, grp in reg.groupby("setting"):
        assert grp.loc[grp["is_best"], "regret"].iloc[0] == grp["regret"].min()
    assert ((reg["regret"] > 0) & (reg["regret"] < 1)).all()
    with pytest.raises(ValueError, match="score"):
        tune(grid, seeds=range(1), etas=(1.0,), base=base, progress=False, score="nope")


def test_setting_id_separates_every_field_but_eta_and_seed():
    """Review finding: adv_norm × init_scale gave one row with n_seeds = 8; each setting is its own row."""
    df = tune({"adv_norm": [False, True], "init_scale": [0, 1]}, seeds=range(2), etas=(4.0,), progress=False)
    assert len(df) == 4 and set(df["n_seeds"]) == {2} and df["setting"].nunique() == 4
    assert df["setting"].str.contains("adv_norm=True").sum() == 2 and df["setting"].str.contains("init_scale=1").sum() == 2
    base = TrainConfig(instance=TOKEN)
    variants = [base.replace(beta1=0.5), base.replace(beta2=0.9), base.replace(adam_eps=1e-6),
                base.replace(collapse_frac=0.0), base.replace(theta_max=1e4), base.replace(tau_m2=0.1),
                base.replace(instance=InstanceSpec(kind="bandit", rewards=(0.1, 0.2, 0.3, 0.4, 0.5))),
                base.replace(instance=InstanceSpec(kind="bandit", seed=1)), base.replace(instance=InstanceSpec(kind="bandit")),
                base.replace(delay=dl.geometric(0.5, D=4)), base.replace(delay=dl.geometric(0.5, D=5))]
    ids = [_setting_id(c) for c in [base] + variants]
    assert len(set(ids)) == len(ids)
    assert _setting_id(base.replace(eta=3.0, seed=7)) == _setting_id(base)
    assert ids[0].startswith(TOKEN.label + "|gmc|eps=0.2|G=8")


def test_nominal_delay_is_the_mean_of_the_sampled_delays():
    """Truncated geometric ``min(X, D)``: formula vs the delays the learner draws (n = 200 000, z = 4)."""
    for spec in (dl.geometric(0.3, D=4), dl.geometric(0.3), dl.geometric(1.0, D=3), dl.uniform(6), dl.fixed(5)):
        x = spec.sample(200_000, seed=3)[50:]  # d_k ≤ k clips the first steps only
        assert abs(x.mean() - _nominal_delay(spec)) <= 4 * x.std(ddof=1) / math.sqrt(x.size) + 1e-12, spec
    assert _nominal_delay(dl.geometric(0.3, D=4)) == pytest.approx(sum(0.7 ** (j + 1) for j in range(4)))


def test_slope_fit_keeps_one_g_set_and_reports_unmeasurable_cells():
    Gs = (2, 4, 8, 16, 32)
    delta = 0.3 * np.asarray(Gs, dtype=float) ** -0.4
    rng = np.random.default_rng(0)
    boot = delta * np.exp(rng.normal(0, 0.05, (400, 5)))
    f = _fit_slope(Gs, delta, boot, 0.95)
    assert f["slope"] == pytest.approx(-0.4, abs=1e-12) and f["lo"] < -0.4 < f["hi"] and f["n_points"] == 5
    assert f["n_boot_ok"] == 400 and f["reason"] == "" and f["not_measurable_G"] == []
    # a cell with Δ ≤ 0 is reported, not silently dropped; the slope uses the other four in every replicate
    d2 = delta.copy()
    d2[1] = -0.01
    f = _fit_slope(Gs, d2, boot, 0.95)
    assert (f["n_points"], f["n_not_measurable"], f["not_measurable_G"]) == (4, 1, [4])
    assert f["slope"] == pytest.approx(-0.4, abs=1e-12)
    # replicates with Δ_b ≤ 0 at a fitted G count as the limit Δ_b → 0+: at G = 8 (= mean log G) the side is
    # undetermined, so 10% of them make the 95% interval unbounded at both ends
    b2 = boot.copy()
    b2[:40, 2] = -1.0
    f = _fit_slope(Gs, delta, b2, 0.95)
    assert f["n_boot_ok"] == 360 and f["lo"] == -np.inf and f["hi"] == np.inf and "40/400" in f["reason"]
    # at the largest G the slope tends to −∞: only the lower end goes
    b2 = boot.copy()
    b2[:40, 4] = 0.0
    f = _fit_slope(Gs, delta, b2, 0.95)
    assert f["lo"] == -np.inf and f["hi"] == pytest.approx(_fit_slope(Gs, delta, boot, 0.95)["hi"], abs=0.05)
    assert f["hi"] < -0.3
    b2 = boot.copy()
    b2[:4, 2] = -1.0  # 1%: the interval stays finite but widens
    f2 = _fit_slope(Gs, delta, b2, 0.95)
    f0 = _fit_slope(Gs, delta, boot[4:], 0.95)
    assert np.isfinite([f2["lo"], f2["hi"]]).all() and f2["lo"] <= f0["lo"] and f2["hi"] >= f0["hi"]
    # fewer than three measurable G: no slope, and the reason says why
    d3 = delta.copy()
    d3[:3] = 0.0
    f = _fit_slope(Gs, d3, boot, 0.95)
    assert math.isnan(f["slope"]) and "only 2 G" in f["reason"] and f["not_measurable_G"] == [2, 4, 8]


def test_regime_criteria_ignore_a_zero_standard_error():
    g = pd.DataFrame(dict(estimator="gmc", G=[2, 4], d=8, chi2_d=0.5, edge_d=False, edge_0=False,
                          delta=[0.01, 0.03], delta_se=[0.0, 0.0]))
    c = regime_criteria(g)
    assert not c["delay_cost"]["holds"] and math.isnan(c["delay_cost"]["value"])


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
        assert set(fit[e]) == {"slope", "lo", "hi", "n_points", "n_not_measurable", "not_measurable_G", "n_boot_ok",
                               "boot_fail_frac", "reason", "theory"}
        rows = df[df["estimator"] == e]
        assert fit[e]["n_points"] + fit[e]["n_not_measurable"] == 3
        assert fit[e]["n_points"] == int(rows["measurable"].sum()) == int((rows["delta"] > 0).sum())
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


def test_robustness_quick_and_verdict(tmp_path):
    tab = robustness_experiment(quick=True, progress=False, estimators=("onpolicy", "is", "tis", "tic", "gmc"))
    assert len(tab) == 5 * 3
    assert {"final_J", "final_J_lo", "final_J_hi", "score", "regret", "div_rate_any", "tail_any", "tail_rel_any",
            "edge", "eta_ref", "tail_ref", "tail_rel_ref", "div_ref", "seeds", "final_J_seeds"} <= set(tab.columns)
    # at d = 0 the tail is compared with itself at every η
    np.testing.assert_allclose(tab.loc[tab["d"] == 0, "tail_rel_any"], 1.0)
    np.testing.assert_allclose(tab.loc[tab["d"] == 0, "tail_rel_ref"], 1.0)
    assert reference_eta(QUICK_ETAS) == 64.0 and (tab["eta_ref"] == 64.0).all()
    # the per-seed values are the runs behind the mean
    for r in tab.itertuples():
        x = np.array([float(v) for v in r.final_J_seeds.split(";")])
        assert r.seeds == "0;1;2;3;4" and np.nanmean(x) == pytest.approx(r.final_J, rel=1e-12)
    v = c9_verdict(tab)
    assert set(v) == {"is_unstable", "onpolicy_worse", "tic_tis_degrade", "gmc_best_stable"}
    assert all(p["holds"] in (True, False, None) and p["detail"] for p in v.values())
    assert "paired t over 5 seeds" in v["onpolicy_worse"]["detail"]
    # a CSV round trip (the figures' cache) gives the same verdicts
    tab.to_csv(tmp_path / "t.csv", index=False, float_format="%.17g")
    assert c9_verdict(pd.read_csv(tmp_path / "t.csv")) == v


def _c9_table(J, seeds=range(6), noise=0.05, tail_rel=None, div_any=None):
    """A robustness table as :func:`robustness_experiment` writes it, from per-seed final J.

    ``J[(estimator, d)]`` is an offset added to a seed effect shared by every setting (seed ``s`` is
    one delay draw and init for all of them), so paired differences are exactly the offsets while the
    per-setting spread is ``noise``. Only states that occur: the tuned η has no diverged seed
    (``div_rate = 0``); divergence shows at other η (``div_rate_any``).
    """
    seeds = list(seeds)
    common = np.random.default_rng(7).normal(0.0, noise, len(seeds))
    rows = []
    for (e, d), off in J.items():
        x = off + common
        m, lo, hi = mean_ci(x)
        rel = (tail_rel or {}).get((e, d), 1.0)
        rows.append(dict(estimator=e, d=d, G=8, eps=0.2, n_seeds=len(seeds), eta=16.0, eta_ref=32.0, div_rate=0.0,
                         div_rate_any=(div_any or {}).get((e, d), 0.0), div_ref=0.0, tail_ref=5.0 * rel,
                         tail_rel_ref=rel, tail_any=50.0, tail_rel_any=max(rel, 3.0), final_J=m, final_J_lo=lo,
                         final_J_hi=hi, final_J_se=x.std(ddof=1) / math.sqrt(len(seeds)), edge=False, chi2=0.5,
                         seeds=";".join(map(str, seeds)), final_J_seeds=";".join(repr(float(v)) for v in x)))
    return pd.DataFrame(rows)


BASE_J = {("onpolicy", 0): .9, ("is", 0): .9, ("tis", 0): .9, ("tic", 0): .9, ("gmc", 0): .9,
          ("onpolicy", 8): .80, ("is", 8): .70, ("tis", 8): .85, ("tic", 8): .84, ("gmc", 8): .88}
IS_TAIL = {("is", 8): 3.0}


def test_c9_verdict_holds_on_a_table_where_every_part_holds():
    v = c9_verdict(_c9_table(BASE_J, tail_rel=IS_TAIL))
    assert all(p["holds"] is True for p in v.values()), v
    assert "not stable: is@8 (unstable)" in v["gmc_best_stable"]["detail"]


def test_c9_verdict_pairs_seeds_and_corrects_for_multiplicity():
    from scipy import stats

    # gmc beaten by 0.004 at every seed: invisible unpaired (seed spread 0.05), certain paired
    J = {**BASE_J, **{("tis", 8): .884}}
    v = c9_verdict(_c9_table(J, tail_rel=IS_TAIL))
    assert v["gmc_best_stable"]["holds"] is False and "tis" in v["gmc_best_stable"]["detail"]
    t = _c9_table(J, tail_rel=IS_TAIL).drop(columns=["seeds", "final_J_seeds"])  # unpaired fallback
    assert c9_verdict(t)["gmc_best_stable"]["holds"] is True
    # the same rival diverging at some other η of the grid is not a stable rival
    v = c9_verdict(_c9_table(J, tail_rel=IS_TAIL, div_any={("tis", 8): 1 / 13}))
    assert v["gmc_best_stable"]["holds"] is True and "tis@8 (diverged" in v["gmc_best_stable"]["detail"]
    # onpolicy above gmc by less than its paired noise: not "worse" (means alone would say it is)
    n = 6
    x = np.array([.01, -.01, .02, -.02, .015, -.014])  # gmc − onpolicy per seed, mean ≈ 0.0002 > 0
    t = _c9_table(BASE_J, tail_rel=IS_TAIL)
    g = np.array([float(s) for s in t.loc[(t.estimator == "gmc") & (t.d == 8), "final_J_seeds"].iloc[0].split(";")])
    i = t.index[(t.estimator == "onpolicy") & (t.d == 8)][0]
    t.loc[i, "final_J_seeds"] = ";".join(repr(float(v)) for v in g - x)
    t.loc[i, "final_J"] = float(np.mean(g - x))
    assert t.loc[i, "final_J"] < t.loc[(t.estimator == "gmc") & (t.d == 8), "final_J"].iloc[0]
    assert c9_verdict(t)["onpolicy_worse"]["holds"] is False
    # Bonferroni: a paired difference significant at 95% but not at 1 − 0.05/m is not "better"
    m = 4  # rivals at d = 8 once is is excluded: onpolicy, tis, tic … and snis
    J2 = {**BASE_J, **{("snis", 0): .9, ("snis", 8): .80}}
    t = _c9_table(J2, tail_rel=IS_TAIL)
    g = np.array([float(s) for s in t.loc[(t.estimator == "gmc") & (t.d == 8), "final_J_seeds"].iloc[0].split(";")])
    diff = np.array([.004, .001, .006, .002, .005, -.001])  # t = 2.63: between 2.57 (95%) and 3.81 (Bonferroni)
    q95, qb = stats.t.ppf(0.975, n - 1), stats.t.ppf(1 - 0.025 / m, n - 1)
    lo95 = diff.mean() - q95 * diff.std(ddof=1) / math.sqrt(n)
    lob = diff.mean() - qb * diff.std(ddof=1) / math.sqrt(n)
    assert lo95 > 0 > lob  # the example sits between the two levels
    j = t.index[(t.estimator == "tis") & (t.d == 8)][0]
    t.loc[j, "final_J_seeds"] = ";".join(repr(float(v)) for v in g + diff)
    t.loc[j, "final_J"] = float(np.mean(g + diff))
    v = c9_verdict(t)
    assert v["gmc_best_stable"]["holds"] is True and f"{m} comparisons" in v["gmc_best_stable"]["detail"]
    assert c9_verdict(t, level=1 - 0.05 * m)["gmc_best_stable"]["holds"] is False  # same data, per-test 95%


def test_c9_instability_needs_the_fixed_eta_and_a_control():
    # a large tail somewhere on the grid (tail_rel_any) but not at η_ref: not unstable
    v = c9_verdict(_c9_table(BASE_J, tail_rel={("is", 8): 1.5}))
    assert v["is_unstable"]["holds"] is False and "×1.5" in v["is_unstable"]["detail"]
    # the control flagged too: the test cannot tell is from onpolicy
    v = c9_verdict(_c9_table(BASE_J, tail_rel={("is", 8): 3.0, ("onpolicy", 8): 2.5}))
    assert v["is_unstable"]["holds"] is None and "control" in v["is_unstable"]["detail"]
    # gmc itself failing the test makes "gmc best among the stable" fail
    v = c9_verdict(_c9_table(BASE_J, tail_rel={("is", 8): 3.0, ("gmc", 8): 2.2}))
    assert v["gmc_best_stable"]["holds"] is False and "gmc stable: no, unstable at d=8" in v["gmc_best_stable"]["detail"]
    # divergence at η_ref at d that did not happen at d = 0 counts as unstable
    t = _c9_table(BASE_J)
    t.loc[(t.estimator == "is") & (t.d == 8), "div_ref"] = 0.25
    assert c9_verdict(t)["is_unstable"]["holds"] is True
    # degradation: a drop within the paired noise is not a degradation
    J = {**BASE_J, **{("tic", 8): .9}}
    assert c9_verdict(_c9_table(J, tail_rel=IS_TAIL))["tic_tis_degrade"]["holds"] is False


def test_c9_verdict_prints_enough_digits():
    """In the local regime final J differ at 1e-4: the notes must show them apart."""
    J = {k: (.9999 if k[1] == 0 else v) for k, v in {**BASE_J, ("onpolicy", 8): .99996, ("gmc", 8): .99953}.items()}
    d = c9_verdict(_c9_table(J, noise=1e-8, tail_rel=IS_TAIL))["onpolicy_worse"]["detail"]
    assert "0.99953" in d and "0.99996" in d


def test_commands_run(capsys, tmp_path):
    out = tmp_path / "curve.csv"
    assert cli(["train", "--steps", "20", "--delay", "3", "--out", str(out)]) == 0
    assert pd.read_csv(out).shape[0] == 21
    assert cli(["tune", "--quick", "--seeds", "2", "--ds", "0,4", "--steps", "20"]) == 0
    assert "gmc" in capsys.readouterr().out
    assert cli(["gscaling", "--quick", "--regime", "local", "--seeds", "2", "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "regime local" in out and "T=4" in out and "interior:" in out and "median realised χ²" in out
    assert cli(["train", "--G", "0"]) == 2  # bad input: one clear error line, exit code 2
    assert "G must" in capsys.readouterr().err


@pytest.mark.parametrize("argv, word", [
    (["tune", "--seeds", "0"], "seeds must be an integer >= 1"),
    (["robustness", "--seeds", "0"], "seeds must be an integer >= 1"),
    (["gscaling", "--seeds", "0"], "seeds must be an integer >= 1"),
    (["gscaling", "--seeds", "1"], "seeds must be at least 2"),
    (["robustness", "--seeds", "1"], "seeds must be at least 2"),
    (["robustness", "--steps", "0"], "steps must be an integer >= 1"),
    (["gscaling", "--steps", "0"], "steps must be an integer >= 1"),
    (["tune", "--steps", "0"], "steps must be an integer >= 1"),
    (["robustness", "--ds=-1,4"], "ds must be"),
    (["gscaling", "--d=-1"], "d must be an integer >= 0"),
    (["tune", "--etas", "0,1"], "etas must be a finite number > 0"),
    (["tune", "--Gs", "0"], "G must be an integer >= 1"),
    (["tune", "--ds=-2"], "d must be an integer >= 0"),
])
def test_commands_reject_bad_input(capsys, argv, word):
    assert cli(argv) == 2
    assert word in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, word", [
    (dict(Gs=()), "Gs must be"), (dict(Gs=(0, 2)), "Gs must be"), (dict(etas=()), "etas must be"),
    (dict(n_prompts=0), "n_prompts must be"), (dict(seeds=[1, 1]), "seeds must be"), (dict(n_boot=1), "n_boot"),
])
def test_g_scaling_rejects_bad_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        g_scaling_experiment(quick=True, progress=False, **kwargs)
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        robustness_experiment(quick=True, progress=False, steps=0)
