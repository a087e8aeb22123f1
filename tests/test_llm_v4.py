"""LM protocol v4 (issue 35): registered fields with v2/v3 keeping their hashes, the regime label from an
interval, the learning gain, the report's answer rows, the perturbation check (a real subprocess under
``ATEN_CPU_CAPABILITY=default``), and the GPU protocol's dry run end to end into the figure's merge.

Numbers are either synthetic tables (exact expectations from scipy's t quantiles) or properties that hold
on any CPU; no assertion depends on which kernels the machine has."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from simulate import verdicts as vd
from simulate.llm import analysis
from simulate.llm.protocol import PROTOCOL_V4 as PROTOCOL  # this file checks v4, reproducible under its hash
from simulate.llm.protocol import PROTOCOL_GPU_V1, PROTOCOL_V2, PROTOCOL_V3, PROTOCOLS, LMProtocol


def test_v4_is_registered_and_older_versions_keep_their_hashes():
    assert PROTOCOL.version == 4 and PROTOCOLS[4] is PROTOCOL and PROTOCOLS["gpu-v1"] is PROTOCOL_GPU_V1
    assert PROTOCOL_V2.content_hash() == "f2493e03beb8c517" and PROTOCOL_V3.content_hash() == "416d2a849f48645d"
    assert "warmup_steps" not in PROTOCOL_V3.to_dict() and "perturb_seeds" in PROTOCOL.to_dict()
    assert PROTOCOL.delays == (0, 2, 8, 32) and len(PROTOCOL.seeds) == 12 and PROTOCOL.arms() == ((1.0, PROTOCOL.seeds),)
    assert set(PROTOCOL.perturb_seeds) <= set(PROTOCOL.seeds) and PROTOCOL.perturb_capabilities == ("default", "avx2", "avx512")
    assert PROTOCOL_GPU_V1.delays == (0, 2, 4, 8, 16, 32) and len(PROTOCOL_GPU_V1.seeds) >= 12
    assert PROTOCOL_GPU_V1.preset == "gpu" and PROTOCOL_GPU_V1.content_hash() == "7e40e25ed4fb4cc8"
    # the runs carry v4's settings
    from simulate.llm.experiment import protocol_base

    b = protocol_base(PROTOCOL)
    assert (b.warmup_steps, b.adv_norm, b.warmstart.steps) == (10, True, 800)
    assert protocol_base(PROTOCOL_V3).warmup_steps == 0 and protocol_base(PROTOCOL_V3).warmstart.steps == 400
    g = protocol_base(PROTOCOL_GPU_V1)
    assert (g.device, g.dtype, g.preset, g.task.digits) == ("cuda", "bfloat16", "gpu", 3)
    with pytest.raises(ValueError, match="perturb_seeds"):
        dataclasses.replace(PROTOCOL, perturb_seeds=(99,))
    with pytest.raises(ValueError, match="perturb_capabilities"):
        dataclasses.replace(PROTOCOL, perturb_capabilities=("sse9",))


def _runs(chi, d=32, est="gmc"):
    return pd.DataFrame({"estimator": est, "d": d, "seed": range(len(chi)), "chi2_learn_med": chi})


def test_regime_label_comes_from_the_interval_not_the_point():
    """v3 read the median (0.846 on one CPU, 1.26 on another); v4 labels from a t-interval of the geometric
    mean, so a sample straddling 1 is inconclusive rather than a coin flip."""
    chi = np.array([0.5, 0.8, 1.3, 1.6, 0.9, 1.1])
    r = analysis.regime(_runs(chi), PROTOCOL)
    m, lo, hi = vd.t_interval(np.log(chi), 0.95)
    assert r["label"] == "inconclusive" and r["estimate"] == pytest.approx(math.exp(m))
    assert (r["lo"], r["hi"]) == pytest.approx((math.exp(lo), math.exp(hi)))
    assert analysis.regime(_runs(chi * 0.3), PROTOCOL)["label"] == "local"
    assert analysis.regime(_runs(chi * 4.0), PROTOCOL)["label"] == "far"
    # v3 kept its point rule: the median of this sample (1.0) is "local"
    assert analysis.regime(_runs(chi), PROTOCOL_V3)["label"] == "local"
    assert analysis.regime(_runs([0.0, float("nan"), 0.5]), PROTOCOL)["label"] == "inconclusive"
    assert "interval" in analysis.regime_line(r, 32)


def _table(seeds=6):
    """gmc ahead of onpolicy by 0.1 at d = 8 and 32 with spread; the d = 0 runs gain 0.2 ± noise."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(seeds):
        rows.append(dict(estimator="onpolicy", d=0, seed=s, auc=0.7, final_acc=0.75 + 0.02 * rng.standard_normal(),
                         initial_acc=0.55, skipped_steps=0, collapsed=False, locked_in=False))
        for d in (8, 32):
            for x, base in (("gmc", 0.6), ("onpolicy", 0.5), ("is", 0.6), ("tis", 0.58), ("tic", 0.55), ("grpo", 0.6)):
                rows.append(dict(estimator=x, d=d, seed=s, auc=base + 0.03 * rng.standard_normal(), final_acc=base,
                                 initial_acc=0.55, skipped_steps=0, collapsed=False, locked_in=False,
                                 chi2_learn_med=0.5))
    df = pd.DataFrame(rows)
    return df


def test_learning_gain_and_answer_rows():
    df = _table()
    proto = dataclasses.replace(PROTOCOL, seeds=tuple(range(6)), perturb_seeds=())
    g = analysis.learning_gain(df, proto)
    x = (df.query("d == 0")["final_acc"] - 0.55).to_numpy()
    assert g["n"] == 6 and g["mean"] == pytest.approx(x.mean()) and g["met"] is bool(x.mean() >= 0.15)
    half = stats.t.ppf(0.975, 5) * x.std(ddof=1) / math.sqrt(6)
    assert (g["lo"], g["hi"]) == pytest.approx((x.mean() - half, x.mean() + half))
    rows = analysis.answer_rows(df, proto, "cpu-lm", "tiny LM")
    assert {(r["rival"], r["d"]) for r in rows} == {(x, d) for x in analysis.ANSWER_RIVALS for d in (8, 32)}
    r = next(r for r in rows if r["rival"] == "onpolicy" and r["d"] == 32)
    diff = (df.query("estimator == 'gmc' and d == 32")["auc"].to_numpy()
            - df.query("estimator == 'onpolicy' and d == 32")["auc"].to_numpy())
    assert r["delta"] == pytest.approx(diff.mean()) and r["lo"] < r["delta"] < r["hi"] and r["n"] == 6
    assert r["verdict"] == "holds" and r["group"] == "cpu-lm" and r["metric"] == "accuracy AUC"
    assert all("verdict" not in r for r in rows if r["d"] == 8)  # no registered verdict below d_max
    assert all(r["interval"] == "95 % paired t, 6 seeds" for r in rows)


def test_fragile_parts_are_those_that_differ_under_some_path():
    from simulate.llm.portability.perturbation import compare

    rows = compare({"avx512": {"a": "holds", "b": "inconclusive"}, "avx2": {"a": "holds", "b": "refuted"},
                    "default": {"a": "holds", "b": "inconclusive"}}, "avx512")
    assert [(r["part"], r["fragile"]) for r in rows] == [("a", False), ("b", True)]
    assert rows[1]["avx2"] == "refuted"


def _tiny_protocol(**kw) -> LMProtocol:
    return LMProtocol(version=4, estimators=("onpolicy", "gmc"), degrading=("onpolicy",), delays=(0, 2),
                      seeds=(0, 1), arm_seeds=(), arm_delays=(), steps=3, n_prompts=2, G=4, eval_every=100,
                      n_eval=8, warmstart_steps=3, warmstart_batch_size=8, perturb_seeds=(0, 1),
                      perturb_capabilities=("default",), **kw)


@pytest.mark.slow  # ~30 s on an idle 2-core machine (three torch imports in subprocesses, a warm start); the
# rule itself is test_fragile_parts_are_those_that_differ_under_some_path
def test_perturbation_reruns_under_another_kernel_path(tmp_path):
    """A real subprocess with ATEN_CPU_CAPABILITY=default (every x86 CPU has it): its runs are made under that
    path (the subprocess checks and records it) and every part gets a verdict under both paths."""
    from simulate.llm import experiment as ex
    from simulate.llm.portability import perturbation

    proto = _tiny_protocol()
    native = ex.run(perturbation.perturb_sweep(proto, str(tmp_path / "nat")), progress=False, backend="serial")
    here = perturbation.effective_capability()
    res = perturbation.perturb(native, proto, str(tmp_path / "p"), capabilities=("default",))
    assert res["native"] == here and res["seeds"] == [0, 1]
    if here == "default":  # the machine runs the default path itself: nothing else to compare
        assert res["paths"][0]["note"] == "the native run"
        return
    assert res["paths"] == [dict(requested="default", effective="default", ran=True, note="")]
    assert (tmp_path / "p" / "default" / "capability.txt").read_text().strip() == "default"
    parts = {r["part"]: r for r in res["parts"]}
    assert set(parts) >= {"gmc not worse than onpolicy at d=2", "C9 (all parts)", perturbation.REGIME_PART}
    assert all(r[here] in vd.VERDICTS + ("local", "far") and r["default"] in vd.VERDICTS + ("local", "far")
               for r in res["parts"])
    assert res["fragile"] == [r["part"] for r in res["parts"] if r[here] != r["default"]]
    assert "fragile parts" in perturbation.table(res)
    sub = pd.read_csv(tmp_path / "p" / "default" / "results.csv")
    assert sorted(zip(sub["estimator"], sub["d"])) == sorted([("onpolicy", 0), ("gmc", 2), ("onpolicy", 2)] * 2)


def test_gpu_run_script_fails_fast_without_torch(tmp_path):
    """The device machine may be bare: without a python that imports torch the script says so and exits 3."""
    import os
    import subprocess

    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexit 1\n")  # a python that can import nothing (and pip that cannot install)
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "w")}
    cwd = tmp_path / "repo"
    cwd.mkdir()  # no .venv here: the script must not find the project's environment
    script = os.path.join(os.path.dirname(__file__), "..", "simulate", "llm", "gpu_run.sh")
    p = subprocess.run(["bash", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "cannot import torch" in p.stderr


def test_bench_llm_training_row_reports_tokens_and_mfu():
    from simulate.llm.throughput import training

    r = training("tiny", steps=2, n_prompts=2, G=4)
    assert r["tokens_per_s"] > 0 and r["params"] > 0 and r["peak_flops_per_s"] > 0
    assert 0 < r["mfu"] < 1  # 6N FLOPs per token leave sampling out: a lower bound of a fraction of the peak
