"""LM protocol v3 (issue 25): its registered fields, the forest cells (bit-identical to separate runs),
the per-run diagnostics, the step-size arm, the turning points, the rate premise, and the throughput bench.

Every assertion on numbers is either a same-machine bit-identity (two computations in this process) or
a property that holds on any CPU (ranges, NaN where a quantity does not apply, synthetic tables)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simulate import verdicts as vd
from simulate.llm import experiment as ex
from simulate.llm.protocol import PROTOCOL_V2, PROTOCOLS, LMProtocol
from simulate.llm.protocol import PROTOCOL_V3 as PROTOCOL  # this file checks v3, reproducible under its hash


def test_v3_fields_and_v2_keeps_its_hash():
    assert PROTOCOL.version == 3 and PROTOCOLS[2] == PROTOCOL_V2 and PROTOCOLS[3] == PROTOCOL
    assert PROTOCOL.content_hash() == "416d2a849f48645d"  # the hash of the v3 report (commit 6ea58be)
    assert PROTOCOL.delays == (0, 2, 4, 8, 16, 32) and len(PROTOCOL.seeds) >= 12
    assert PROTOCOL.estimators == ("onpolicy", "is", "tis", "tic", "gmc", "grpo")
    assert PROTOCOL.arms() == ((1.0, PROTOCOL.seeds), (3.0, tuple(range(6))))
    main, arm = PROTOCOL.arm_runs()
    assert main == (1.0, PROTOCOL.runs()) and {d for _, d in arm[1]} == {0, 8, 32}  # arm: 0, d_max and 8
    full = PROTOCOL.variant(full=True)
    assert len(full.seeds) == 24 and full.arms()[1][1] == tuple(range(12)) and full.arm_runs()[1][1] == full.runs()
    # v2 reproduces under the hash its report printed; v3-only fields are not part of it
    assert PROTOCOL_V2.content_hash() == "f2493e03beb8c517" and PROTOCOL_V2.arms() == ((1.0, PROTOCOL_V2.seeds),)
    assert "arm_lr_factor" not in PROTOCOL_V2.to_dict() and "arm_lr_factor" in PROTOCOL.to_dict()
    with pytest.raises(ValueError, match="full"):
        PROTOCOL_V2.variant(full=True)
    with pytest.raises(ValueError, match="arm_seeds"):
        LMProtocol(arm_seeds=(99,))
    with pytest.raises(ValueError, match="arm_lr_factor"):
        LMProtocol(arm_lr_factor=1.0)


def test_v3_failure_rule_and_p0_are_the_tabular_protocols():
    from simulate.protocol.spec import load_protocol

    tab = load_protocol("simulate/protocol/protocol-v3.toml")
    assert PROTOCOL.p0 == tab.failure_p0 and PROTOCOL.margin == tab.margin and PROTOCOL.alpha == tab.alpha
    assert PROTOCOL.collapse_drop == tab.collapse_drop and PROTOCOL.lockin_nJ == tab.lockin_nJ
    assert PROTOCOL.lockin_grad_rel == tab.lockin_grad_rel and PROTOCOL.rate_premise_d0 == tab.rate_premise_d0


def test_protocol_sweep_has_both_arms_as_forest_cells(tmp_path):
    sw = ex.protocol_sweep(PROTOCOL, out_dir=str(tmp_path / "exp"), cache_dir=str(tmp_path / "cache"))
    eng = ex.to_sweep(sw)
    assert len(eng.cells) == 12 + 6  # one forest per seed and arm
    assert {c.settings["lr_factor"] for c in eng.cells} == {1.0, 3.0}
    assert all(len(c.settings["pairs"]) == (1 + 6 * 5 if c.settings["lr_factor"] == 1.0 else 1 + 6 * 2)
               for c in eng.cells)
    runs = ex.grid(sw)
    assert len(runs) == 12 * 31 + 6 * 13 and len({rid for rid, _ in runs}) == len(runs)
    etas = {round(cfg.eta / PROTOCOL.eta, 9) for _, cfg in runs}
    assert etas == {1.0, 3.0}


@pytest.fixture(scope="module")
def forest(tmp_path_factory):
    """A small forest (3 estimators × 3 delays × 2 step sizes) and the same runs trained one by one."""
    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
    from simulate.llm.train import train
    from simulate.llm.tree import train_forest

    tmp = tmp_path_factory.mktemp("forest")
    base = TrainConfig(steps=6, n_prompts=4, G=4, D=4, eval_every=2, length_normalize=True,
                       task=TaskConfig(n_eval=16, digits=1), warmstart=WarmStartConfig(steps=30, batch_size=32),
                       cache_dir=str(tmp / "cache"))
    cfgs = [base.replace(estimator=e, d=d, eta=eta, out_dir=str(tmp / "f" / f"{e}-{d}-{eta:g}"))
            for e in ("gmc", "grpo") for d in (0, 2, 4) for eta in (3e-4, 9e-4)]
    summaries = train_forest(cfgs, engine="serial")  # the serial tree's claim: bit for bit the separate runs
    for c in cfgs:
        train(c.replace(out_dir=c.out_dir.replace("/f/", "/s/")), progress=False)
    return cfgs, summaries


def _metrics(path: str) -> pd.DataFrame:
    m = pd.read_csv(f"{path}/metrics.csv")
    return m[[c for c in m.columns if "per_s" not in c]]  # wall-clock rates are the only timing columns


def test_forest_runs_equal_separate_runs_bit_for_bit(forest):
    cfgs, summaries = forest
    for c, s in zip(cfgs, summaries):
        pd.testing.assert_frame_equal(_metrics(c.out_dir), _metrics(c.out_dir.replace("/f/", "/s/")),
                                      check_exact=True, obj=f"{c.estimator} d={c.d} eta={c.eta}")
        assert s["d"] == c.d and s["steps_done"] == c.steps
    # non-vacuous: the delays and step sizes gave different runs
    m = {(c.estimator, c.d, c.eta): _metrics(c.out_dir) for c in cfgs}
    assert all(x["grad_norm"].gt(0).any() for x in m.values())  # the runs learn
    assert not m[("gmc", 0, 3e-4)]["chi2"].equals(m[("gmc", 4, 3e-4)]["chi2"])
    assert not m[("gmc", 4, 3e-4)]["chi2"].equals(m[("gmc", 4, 9e-4)]["chi2"])
    assert (m[("gmc", 4, 3e-4)]["behaviour_version"] == 0).sum() == 5  # steps 0..4 sample the warm start


def test_forest_rejects_configs_that_cannot_share(tmp_path):
    from simulate.llm.config import TrainConfig
    from simulate.llm.tree import train_forest

    a = TrainConfig(out_dir=str(tmp_path / "a"))
    with pytest.raises(ValueError, match="cfgs"):
        train_forest([a, a.replace(G=4, out_dir=str(tmp_path / "b"))])
    with pytest.raises(ValueError, match="fixed"):
        train_forest([a.replace(delay="uniform", D=2)])
    with pytest.raises(ValueError, match="own out_dir"):
        train_forest([a, a.replace(d=2)])


def test_run_rows_carry_the_diagnostics(forest):
    cfgs, summaries = forest
    rows = pd.DataFrame([ex.run_row(c, s, c.eta / 3e-4, 0.0) for c, s in zip(cfgs, summaries)])
    assert set(rows.columns) == set(ex.ROW_COLUMNS)
    traj = rows["estimator"].isin(["gmc"])
    # not applicable → NaN, by design; applicable → a number in [0, 1]
    assert rows.loc[rows.estimator == "gmc", "capped_frac_mean"].between(0, 1).all()
    assert rows.loc[rows.estimator != "gmc", "capped_frac_mean"].isna().all()
    assert rows.loc[~traj, "token_clip_frac_mean"].between(0, 1).all() and rows.loc[traj, "token_clip_frac_mean"].isna().all()
    assert rows["ess_mean"].between(0, 1 + 1e-12).all() and rows["ess_early"].between(0, 1 + 1e-12).all()
    assert rows["chi2_mean"].ge(0).all() and np.isfinite(rows["chi2_learn_med"]).all()
    # at d = 0 learner and behaviour coincide (sampler round-off only); a stale run drifts apart
    assert rows.loc[rows.d == 0, "chi2_mean"].max() < 1e-6 < rows.loc[rows.d == 4, "chi2_mean"].max()
    assert sorted(rows["lr_factor"].unique()) == [1.0, 3.0]


def _synthetic(gap_by_d: dict[int, float], seeds=range(12), lr_factor: float = 1.0, fail_d0: int = 0) -> pd.DataFrame:
    """A results table where gmc's AUC exceeds every rival's by ``gap_by_d[d]`` (plus seeded noise)."""
    rng = np.random.default_rng(0)
    rows = []
    for s in seeds:
        base = 0.5 + 0.05 * rng.standard_normal()
        rows.append(dict(estimator="onpolicy", d=0, seed=s, auc=base + 0.2, failed=s < fail_d0))
        for d, gap in gap_by_d.items():
            for e in PROTOCOL.estimators:
                rows.append(dict(estimator=e, d=d, seed=s, failed=False,
                                 auc=base + (gap if e == "gmc" else 0.0) + 0.003 * rng.standard_normal()))
    df = pd.DataFrame(rows)
    df["lr_factor"] = lr_factor
    df["skipped_steps"] = df.pop("failed").astype(int)
    df["collapsed"] = False
    df["locked_in"] = False
    df["initial_acc"] = 0.5
    df["final_acc"] = df["auc"]
    df["gain"] = df["final_acc"] - df["initial_acc"]
    return df


def test_turning_points_find_the_smallest_delay():
    # gmc is behind at small d, level at d = 8, ahead from d = 16: noninferiority holds from 8, refuted at 2
    df = _synthetic({2: -0.1, 4: -0.1, 8: 0.0, 16: 0.1, 32: 0.1})
    turns = {t["claim"]: t for t in ex.turning_points(df, PROTOCOL)}
    t = turns["gmc not worse than tic"]
    assert (t["first_holds"], t["first_refuted"]) == (8, 2)
    assert [p["d"] for p in t["per_d"]] == [2, 4, 8, 16, 32]
    assert all(p["lo"] <= p["estimate"] <= p["hi"] for p in t["per_d"])
    # onpolicy at d = 0 is 0.2 above every estimator at every d: degrades from the first d
    assert turns["onpolicy degrades from d=0"]["first_holds"] == 2
    assert "η×1 gmc not worse than tic: holds from d=8, refuted from d=2" in ex.turning_table(list(turns.values()))


def test_arms_are_decided_separately_and_the_main_arm_is_the_claim():
    df = pd.concat([_synthetic({8: 0.1, 32: 0.1}), _synthetic({8: -0.1, 32: -0.1}, seeds=range(6), lr_factor=3.0)])
    main, arm = ex.arm_results(df, PROTOCOL)
    assert (main.lr_factor, arm.lr_factor) == (1.0, 3.0) and (main.n_seeds, arm.n_seeds) == (12, 6)
    gmc_vs = {c.name: c.verdict for c in main.comparisons}
    assert gmc_vs["gmc not worse than tic at d=32"] == vd.HOLDS
    assert {c.name: c.verdict for c in arm.comparisons}["gmc not worse than tic at d=32"] == vd.REFUTED
    assert "step-size arm η×3" in arm.line and "step-size arm" not in main.line
    assert ex.c9_result(df, PROTOCOL).verdict == main.verdict  # the default is the main arm
    s = ex.summarise(df)
    assert set(s["lr_factor"]) == {1.0, 3.0} and s["lo"].le(s["mean"]).all()


def test_rate_premise_puts_rate_claims_out_of_scope_when_d0_fails():
    ok = ex.c9_result(_synthetic({32: 0.0}, fail_d0=3), PROTOCOL)  # 3/12 = 0.25: not more than p0
    assert all(r.verdict != vd.OUT_OF_SCOPE for r in ok.rates)
    bad = ex.c9_result(_synthetic({32: 0.0}, fail_d0=4), PROTOCOL)  # 4/12 > 0.25
    assert [r.verdict for r in bad.rates] == [vd.OUT_OF_SCOPE, vd.OUT_OF_SCOPE]
    assert any("already fails 4/12" in line for line in bad.lines)
    v2 = ex.c9_result(_synthetic({32: 0.0}, fail_d0=4), PROTOCOL_V2.__class__(**{**PROTOCOL_V2.__dict__, "delays": (0, 32)}))
    assert all(r.verdict != vd.OUT_OF_SCOPE for r in v2.rates)  # v2 had no such rule


def test_bench_llm_quick_prints_both_samplers():
    from bench import bench_llm

    r = bench_llm.measure("tiny", 8, 4, repeats=1)
    assert r["harness_tokens"] > 0 and r["generate_tokens"] > 0
    assert math.isfinite(r["harness_tok_s"]) and math.isfinite(r["generate_tok_s"])
    text = bench_llm.table([r])
    assert "harness tok/s" in text and "generate tok/s" in text and "tiny" in text
