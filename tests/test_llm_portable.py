"""LM protocol v5 (issue 35): the pinned CPU kernel path (``ATEN_CPU_CAPABILITY=avx2``, ``MKL_CBWR=COMPATIBLE``)
gives the same numbers whatever the CPU would choose by itself, and the consensus rule reports a part whose
verdict moves on another kernel path as ``inconclusive``.

"Another CPU" is emulated on this one by the variables through which a CPU's features reach the kernels:
ATen's capability (``ATEN_CPU_CAPABILITY=default``: the scalar kernels a CPU without AVX2 runs), MKL's
instruction ceiling (``MKL_ENABLE_INSTRUCTIONS=SSE4_2``, honoured by MKL on Intel CPUs) and MKL's own branch
(``MKL_CBWR=AUTO``). The check needs a CPU with AVX2 (the pin's coverage); elsewhere it is skipped with
that reason. No assertion depends on which kernels this machine has beyond that."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pandas as pd
import pytest

from simulate import verdicts as vd
from simulate.llm.portability import kernel_paths
from simulate.llm.config import TrainConfig, warmstart_key
from simulate.llm.protocol import PROTOCOL, PROTOCOL_V4, PROTOCOL_V5, PROTOCOL_V6, PROTOCOLS, LMProtocol

ROOT = os.path.join(os.path.dirname(__file__), "..")
#: An environment that makes the kernels choose as another CPU would (module docstring).
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "MKL_CBWR": "AUTO"}
#: Columns of metrics.csv that are wall-clock measurements, not functions of the run.
TIMING = ("gen_tokens_per_s", "tokens_per_s")


def test_v5_is_registered_and_v4_keeps_its_hash():
    assert PROTOCOLS[5] is PROTOCOL_V5 and PROTOCOLS[4] is PROTOCOL_V4
    assert PROTOCOL_V4.content_hash() == "5be17b59f04d88a2"  # the v4 report's (commit ca54025)
    assert PROTOCOL_V5.content_hash() == "e8138cb65bae3fd2"  # the v5 report's (commit ff80b7d)
    assert "kernel_pin" not in PROTOCOL_V4.to_dict() and PROTOCOL_V5.kernel_pin == kernel_paths.PIN == "avx2+COMPATIBLE"
    assert PROTOCOL_V5.consensus and PROTOCOL_V5.perturb_paths == ("native", "default+COMPATIBLE")
    # v5 changes the kernels and the reporting rule, nothing of v4's runs or comparisons
    same = {k: v for k, v in PROTOCOL_V5.to_dict().items() if k not in ("version", "kernel_pin", "perturb_paths",
                                                                        "consensus", "perturb_capabilities")}
    assert same == {k: v for k, v in PROTOCOL_V4.to_dict().items() if k in same}
    from simulate.llm.experiment import protocol_base

    assert protocol_base(PROTOCOL_V5).kernels == "avx2+COMPATIBLE" and protocol_base(PROTOCOL_V4).kernels == ""
    assert protocol_base(PROTOCOL_V6).kernels == "avx2+COMPATIBLE"  # v6 keeps the pin
    assert protocol_base(PROTOCOL).kernels == ""  # v7: float64 from a frozen warm start, no pin
    with pytest.raises(ValueError, match="perturb_paths must differ"):
        dataclasses.replace(PROTOCOL_V6, perturb_paths=("avx2+COMPATIBLE",))
    with pytest.raises(ValueError, match="perturb_paths must differ"):
        dataclasses.replace(PROTOCOL, perturb_paths=("native",))
    with pytest.raises(ValueError, match="kernel path"):
        dataclasses.replace(PROTOCOL, kernel_pin="avx3+COMPATIBLE")


def test_kernel_paths_parse_set_and_key_the_warm_start():
    assert kernel_paths.parse_path("avx2+COMPATIBLE") == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
    assert kernel_paths.parse_path("native") == {"ATEN_CPU_CAPABILITY": None, "MKL_CBWR": None}
    for bad in ("avx3", "avx2+SSE9", "+COMPATIBLE"):
        with pytest.raises(ValueError, match="aten in native, default, avx2, avx512"):
            kernel_paths.parse_path(bad)
    env = kernel_paths.path_env("native", {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AUTO", "PATH": "/bin"})
    assert "ATEN_CPU_CAPABILITY" not in env and "MKL_CBWR" not in env and env["PATH"] == "/bin"
    assert kernel_paths.env_matches("avx2+COMPATIBLE", kernel_paths.path_env("avx2+COMPATIBLE", {}))
    assert not kernel_paths.env_matches("avx2+COMPATIBLE", {"ATEN_CPU_CAPABILITY": "avx2"})
    c = TrainConfig()
    pinned = c.replace(kernels="avx2+COMPATIBLE")
    assert "kernels" not in c.to_dict() and pinned.to_dict()["kernels"] == "avx2+COMPATIBLE"
    assert warmstart_key(pinned) != warmstart_key(c) != warmstart_key(c.replace(kernels="native"))
    with pytest.raises(ValueError, match="kernel path"):
        TrainConfig(kernels="sse2")
    with pytest.raises(ValueError, match="device cpu only"):
        TrainConfig(kernels="avx2+COMPATIBLE", device="cuda")


def test_a_run_is_refused_by_a_process_that_does_not_run_its_kernel_path():
    """The pin is read when torch/MKL initialise: a process started without it must not make a pinned run."""
    from simulate.llm.portability import set_determinism

    spec = next(s for s in ("avx2+COMPATIBLE", "default+AUTO") if not kernel_paths.env_matches(s))
    with pytest.raises(RuntimeError, match="kernel path"):
        set_determinism(TrainConfig(kernels=spec))


def _train(tmp, runs: dict[str, tuple[str, dict]]) -> dict[str, pd.DataFrame]:
    """Tiny runs through the CLI (which re-executes itself on ``--kernels``), each in a fresh process, all
    at once: ``{name: (kernel path, extra environment)}`` → ``{name: metrics without timing columns}``."""
    procs = {}
    base = {k: v for k, v in os.environ.items() if k not in (*OTHER_CPU, kernel_paths.MARK)}
    for name, (kernels, env) in runs.items():
        out = os.path.join(tmp, name)
        cmd = [sys.executable, "-m", "simulate.llm", "train", "--estimator", "gmc", "--delay", "1", "--max-delay",
               "1", "--steps", "3", "--n-prompts", "4", "--G", "8", "--eval-every", "3", "--n-eval", "20",
               "--warmstart-steps", "40", "--warmstart-batch-size", "16", "--out-dir", os.path.join(out, "run"),
               "--cache-dir", os.path.join(out, "cache"), "--kernels", kernels]
        procs[name] = subprocess.Popen(cmd, cwd=ROOT, env={**base, **env}, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    got = {}
    for name, p in procs.items():
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
        got[name] = pd.read_csv(os.path.join(tmp, name, "run", "metrics.csv")).drop(columns=list(TIMING))
    return got


def test_pinned_numbers_do_not_change_under_an_emulated_other_cpu(tmp_path):
    import torch

    if torch.backends.cpu.get_cpu_capability().lower() == "default":
        pytest.skip("this CPU has no AVX2: the kernel pin (x86-64 with AVX2) does not cover it")
    m = _train(tmp_path, {"pinned": (kernel_paths.PIN, {}), "pinned-other": (kernel_paths.PIN, OTHER_CPU),
                          "native": ("", {}), "other": ("", OTHER_CPU)})  # "": no path recorded, none set
    pd.testing.assert_frame_equal(m["pinned"], m["pinned-other"], check_exact=True)  # bit for bit
    assert (m["pinned"]["chi2"] > 0).all()  # float-sensitive numbers (sampler vs learner log-probs), not a no-op
    # control: without the pin the emulated CPU gives other numbers (so the comparison above can fail)
    assert not m["native"].equals(m["other"])


def _result(verdicts: dict[str, str]):
    comps = tuple(vd.Comparison(name=n, kind="noninferiority", margin=0.02, threshold=-0.02, n=12, estimate=0.0,
                                se=0.01, p_holds=0.5, p_refutes=0.5, verdict=v) for n, v in verdicts.items())
    from simulate.llm.analysis import C9Result

    return C9Result(vd.combine(verdicts.values()), comps, (), "auc", 32, 12, "h")


def test_consensus_rule_reports_a_part_that_moves_as_inconclusive():
    from simulate.llm.portability import perturbation

    res = _result({"a": "holds", "b": "holds"})
    pert = {"parts": perturbation.compare({"pin": {"a": "holds", "b": "holds", perturbation.REGIME_PART: "local"},
                                      "native": {"a": "holds", "b": "inconclusive", perturbation.REGIME_PART: "far"}}, "pin")}
    for r in pert["parts"]:  # as perturb_v5 marks them
        moved = [(c, r[c]) for c in ("native",) if r[c] != r["pin"]]
        r["reported"] = "inconclusive" if moved else r["pin"]
        r["note"] = "; ".join(f"kernel-fragile: {c} gives {v}" for c, v in moved)
    out, reg = perturbation.apply_consensus(res, {"label": "local", "interval": "x", "lo": None}, pert)
    assert [c.verdict for c in out.comparisons] == ["holds", "inconclusive"] and out.verdict == "inconclusive"
    assert any("kernel-fragile: native gives inconclusive" in line for line in out.lines)
    assert reg["label"] == "inconclusive" and reg["note"] == "kernel-fragile: native gives far"
    assert res.verdict == "holds"  # the pinned result itself is left as it was


def test_substitute_replaces_exactly_the_perturbed_runs():
    from simulate.llm.portability import perturbation

    t = pd.DataFrame({"estimator": ["gmc", "gmc", "is", "gmc"], "d": [32, 32, 32, 8], "seed": [0, 1, 0, 0],
                      "auc": [0.1, 0.2, 0.3, 0.4]})
    p = pd.DataFrame({"estimator": ["gmc", "is", "gmc"], "d": [32, 32, 32], "seed": [0, 0, 1], "auc": [9.0, 8.0, 7.0]})
    got = perturbation.substitute(t, p, (0,), (("gmc", 32), ("is", 32))).sort_values(["seed", "d", "estimator"])
    assert got["auc"].tolist() == [0.4, 9.0, 8.0, 0.2]  # seed 1 and d = 8 kept, seed 0 at d = 32 replaced
    with pytest.raises(ValueError, match="runs to substitute"):
        perturbation.substitute(t, p.iloc[:1], (0,), (("gmc", 32), ("is", 32)))


def _tiny_v5(**kw) -> LMProtocol:
    return LMProtocol(version=5, estimators=("onpolicy", "gmc"), degrading=("onpolicy",), delays=(0, 2),
                      seeds=(0, 1, 2), arm_seeds=(), arm_delays=(), steps=3, n_prompts=2, G=4, eval_every=100,
                      n_eval=8, warmstart_steps=3, warmstart_batch_size=8, perturb_seeds=(0, 1),
                      kernel_pin=kernel_paths.PIN, perturb_paths=("default+COMPATIBLE",), consensus=True, **kw)


@pytest.mark.slow  # ~40 s on an idle 2-core machine: three child processes with their own torch and warm start
def test_v5_sweep_runs_pinned_in_a_child_and_the_perturbation_substitutes(tmp_path):
    from simulate.llm import experiment as ex
    from simulate.llm.portability import perturbation

    proto = _tiny_v5()
    sw = ex.protocol_sweep(proto, out_dir=str(tmp_path / "main"), cache_dir=str(tmp_path / "cache"))
    df = ex.run(sw, progress=False, backend="serial")  # this process is not pinned: a child runs it
    assert set(df["kernels"]) == {kernel_paths.PIN} and len(df) == 3 * len(proto.runs())
    ran = pd.read_json(tmp_path / "main" / "kernels.json", typ="series")
    assert ran["aten"] == "avx2" and ran["MKL_CBWR"] == "COMPATIBLE"
    res = perturbation.perturb(df, proto, str(tmp_path / "p"))
    assert res["reference"] == kernel_paths.PIN and res["seeds"] == [0, 1]
    assert [p["requested"] for p in res["paths"] if p["ran"]] == ["default+COMPATIBLE"]
    sub = pd.read_csv(tmp_path / "p" / "default_COMPATIBLE" / "results.csv")
    assert set(sub["kernels"]) == {"default+COMPATIBLE"} and set(sub["seed"]) == {0, 1}
    for r in res["parts"]:
        assert r["reported"] == (vd.INCONCLUSIVE if r["fragile"] else r[kernel_paths.PIN])
    assert "fragile parts" in perturbation.table(res)


def test_report_section_prints_the_pin_paths_parts_and_fragile_count():
    from figures.fig_llm_delay import section

    pert = {"reference": "avx2+COMPATIBLE", "native": "avx2+COMPATIBLE", "seeds": [0, 1], "runs": ["gmc@d=32"],
            "method": "substituted", "fragile": ["b"],
            "paths": [dict(requested="native", effective="avx512", ran=True, note=""),
                      dict(requested="default+COMPATIBLE", effective="default", ran=True, note="")],
            "parts": [dict(part="a", **{"avx2+COMPATIBLE": "holds", "native": "holds", "default+COMPATIBLE": "holds"},
                           fragile=False, reported="holds", note=""),
                      dict(part="b", **{"avx2+COMPATIBLE": "holds", "native": "refuted", "default+COMPATIBLE": "holds"},
                           fragile=True, reported="inconclusive", note="kernel-fragile: native gives refuted")]}
    gain = dict(n=12, mean=0.2, lo=0.18, hi=0.22, met=True, final=0.75, warm_start=0.55)
    kernels = {"pin": "avx2+COMPATIBLE", "covers": "x86-64 CPUs with AVX2",
               "ran": {"aten": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "torch": "2"}}
    sec = section(PROTOCOL_V6, gain, "", pert, "GPU row: not run.", False, kernels)
    text = " ".join(sec["paragraphs"])
    assert "pinned to avx2+COMPATIBLE" in text and "not covered" in text
    assert "kernel paths native, default+COMPATIBLE" in text and "2 parts compared, 1 fragile: b" in text
    tab, = sec["tables"]
    assert tab["columns"] == ["part", "avx2+COMPATIBLE (pinned)", "native", "default+COMPATIBLE", "fragile",
                              "reported", "note"]
    assert tab["rows"][1][-3:] == ["yes", "inconclusive", "kernel-fragile: native gives refuted"]


def test_cli_reexecutes_on_the_kernel_path_its_command_asks_for():
    from simulate.llm.__main__ import kernel_path_of

    assert kernel_path_of(["experiment"]) == PROTOCOL.kernel_pin
    assert kernel_path_of(["experiment", "--protocol", "4"]) == "" and kernel_path_of(["experiment", "--protocol", "gpu"]) == ""
    assert kernel_path_of(["train", "--kernels", "avx2+COMPATIBLE"]) == "avx2+COMPATIBLE" and kernel_path_of(["train"]) == ""
    assert kernel_path_of(["experiment", "--device", "cuda"]) == ""
