"""LM protocol v7 (issue 35): v6's runs in float64 from a frozen, committed warm start, on the CPU's own kernels.

What v7 may change is what its docstring lists (dtype, the frozen warm start, no pin, the perturbation paths);
every rule that decides a verdict is v6's. The float64 model must be float64 throughout (Qwen3's RMSNorm and
rotary tables included), its init must come from NumPy, and a run from the frozen warm start must give the
same discrete record on two ATen kernel paths (with float32 as the control that shows the check can fail).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from simulate.llm.portability import float64_model, frozen_warmstart, kernel_paths, perturbation
from simulate.llm.config import TrainConfig, WarmStartConfig, warmstart_key
from simulate.llm.experiment import protocol_base
from simulate.llm.model import build_model, generate
from simulate.llm.protocol import PROTOCOL_V6, PROTOCOL_V7, PROTOCOLS

PROTOCOL = PROTOCOL_V7  # the protocol these tests pin (v8, the report's, is tests/test_llm_v8.py's)
from simulate.llm.tokenizer import CharTokenizer
from simulate.llm.warmstart import freeze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The fields v7 changes (simulate/llm/protocol.py, "Version 7"); nothing else may differ from v6.
V7_CHANGES = {"version": 7, "dtype": "float64", "kernel_pin": "", "perturb_paths": ["avx2+COMPATIBLE", "default+COMPATIBLE"],
              "warmstart_frozen": "lm-v6.pt",
              "warmstart_frozen_sha256": "225ca7b89819a916ffe5ced07ecdb910bf7558da84c25eb80681d0eebe3a3c0c"}


def test_v7_is_registered_under_its_hash_and_v6_keeps_its_own():
    assert PROTOCOLS[7] is PROTOCOL and PROTOCOLS[6] is PROTOCOL_V6
    assert PROTOCOL.content_hash() == "000b4e0e75dc9b00"
    assert PROTOCOL_V6.content_hash() == "2cd06ee51e7bec7b"  # v6's report (commit 43ab277) stays reproducible
    assert "warmstart_frozen" not in PROTOCOL_V6.to_dict()


def test_v7_changes_only_the_numerics_and_the_kernel_paths():
    v6, v7 = PROTOCOL_V6.to_dict(), PROTOCOL.to_dict()
    assert set(v7) - set(v6) == {"warmstart_frozen", "warmstart_frozen_sha256"}
    assert {k: v7[k] for k in v7 if v7[k] != v6.get(k)} == V7_CHANGES
    for rule in ("margin", "alpha", "p0", "collapse_drop", "lockin_nJ", "lockin_grad_rel", "regime_level", "consensus",
                 "perturb_seeds", "min_gain", "rate_premise_d0", "seeds", "delays", "warmstart_steps", "n_prompts"):
        assert getattr(PROTOCOL, rule) == getattr(PROTOCOL_V6, rule), rule
    b = protocol_base(PROTOCOL)
    assert b.dtype == "float64" and b.kernels == "" and b.warmstart.frozen == "lm-v6.pt"
    assert protocol_base(PROTOCOL, quick=True).warmstart.frozen == ""  # the quick variant trains its short start


def test_committed_frozen_file_has_the_registered_sha256_and_v6s_weights():
    path = frozen_warmstart.resolve(PROTOCOL.warmstart_frozen)
    assert frozen_warmstart.file_sha256(path) == PROTOCOL.warmstart_frozen_sha256
    blob = torch.load(path, weights_only=True)
    import json

    info = json.loads(blob["info"])
    assert info["settings"]["kernels"] == PROTOCOL_V6.kernel_pin and info["steps"] == PROTOCOL_V6.warmstart_steps
    assert info["settings"]["dtype"] == "float32" and info["heldout_accuracy"] == 0.51


def _cfg(tmp_path, **ws) -> TrainConfig:
    b = protocol_base(PROTOCOL, cache_dir=str(tmp_path / "cache"))
    return b.replace(out_dir=str(tmp_path / "run"), warmstart=dataclasses.replace(b.warmstart, **ws))


def test_frozen_warm_start_loads_in_float64_and_a_changed_file_is_refused(tmp_path):
    from simulate.llm.warmstart import warm_start

    cfg = _cfg(tmp_path)
    model, _, info = warm_start(cfg, progress=False)
    assert info["frozen"] and info["file_sha256"] == PROTOCOL.warmstart_frozen_sha256
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert info["heldout_accuracy"] > 0.3  # v6's warm start (0.51 in float32), not a random init (≈ 0)
    bad = tmp_path / "bad.pt"
    shutil.copy(frozen_warmstart.resolve(PROTOCOL.warmstart_frozen), bad)
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 1
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256 .* is not the registered"):
        warm_start(_cfg(tmp_path, frozen=str(bad)), progress=False)
    with pytest.raises(ValueError, match="no such file"):
        warm_start(_cfg(tmp_path, frozen=str(tmp_path / "absent.pt")), progress=False)


def test_frozen_fields_are_validated_and_absent_from_older_configs_keys():
    with pytest.raises(ValueError, match="frozen_sha256 must be the 64"):
        WarmStartConfig(frozen="x.pt")
    with pytest.raises(ValueError, match="frozen .* is not"):
        WarmStartConfig(frozen_sha256="0" * 64)
    c = TrainConfig()
    assert "frozen" not in c.to_dict()["warmstart"]  # configs without one keep their hashes and cache keys
    assert warmstart_key(c) != warmstart_key(c.replace(warmstart=WarmStartConfig(frozen="a.pt", frozen_sha256="0" * 64)))


def test_freeze_refuses_to_overwrite(tmp_path):
    out = tmp_path / "w.pt"
    out.write_bytes(b"x")
    with pytest.raises(ValueError, match="never overwritten"):
        freeze(TrainConfig(), str(out), progress=False)


def test_float64_model_is_float64_throughout_and_float32_keeps_qwen3s_modules():
    tok = CharTokenizer()
    m64 = build_model("tiny", tok.vocab_size, 0, "float64")
    assert float64_model.narrow_ops(m64) == [] and {p.dtype for p in m64.parameters()} == {torch.float64}
    m32 = build_model("tiny", tok.vocab_size, 0, "float32")
    assert float64_model.narrow_ops(m32)  # the float32 model is transformers' own, unchanged
    ro = generate(m64, [tok.encode_prompt("1+2=")] * 3, max_new_tokens=4, eos_id=tok.eos_id, pad_id=tok.pad_id,
                  generator=torch.Generator().manual_seed(0))
    assert ro.logp_old.dtype == torch.float64
    # the wide norm is Qwen3's on float32 input, bit for bit
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    n = Qwen3RMSNorm(16)
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(1))
    y = n(x)
    n.__class__ = float64_model.WideRMSNorm
    assert torch.equal(n(x), y)
    # and keeps a float64 input in float64 (Qwen3's rounds it through float32)
    assert not torch.equal(n(x.double()), y.double())


def test_numpy_init_is_seeded_and_has_the_declared_law():
    tok = CharTokenizer()
    a, b, c = (build_model("tiny", tok.vocab_size, s, "float64") for s in (0, 0, 1))
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa) and not all(torch.equal(pa[k], pc[k]) for k in pa)
    emb = a.get_input_embeddings()
    assert torch.count_nonzero(emb.weight[emb.padding_idx]) == 0
    assert all(torch.all(p == 1) for k, p in pa.items() if k.endswith("norm.weight"))
    w = np.concatenate([p.detach().numpy().ravel() for k, p in pa.items() if not k.endswith("norm.weight")])
    w = w[w != 0]
    sigma, n = a.config.initializer_range, w.size
    # sample sd of n normal draws has standard error σ/√(2n); the mean σ/√n: 5 standard errors each
    assert abs(w.std() - sigma) < 5 * sigma / np.sqrt(2 * n) and abs(w.mean()) < 5 * sigma / np.sqrt(n)


def _run(tmp, name: str, kernels: str, dtype: str) -> pd.DataFrame:
    out = os.path.join(tmp, name)
    cmd = [sys.executable, "-m", "simulate.llm", "train", "--estimator", "gmc", "--delay", "2", "--max-delay", "2",
           "--steps", "6", "--n-prompts", "4", "--G", "8", "--eval-every", "3", "--n-eval", "60", "--dtype", dtype,
           "--warmstart-steps", str(PROTOCOL.warmstart_steps), "--warmstart-frozen", PROTOCOL.warmstart_frozen,
           "--warmstart-frozen-sha256", PROTOCOL.warmstart_frozen_sha256, "--out-dir", os.path.join(out, "run"),
           "--cache-dir", os.path.join(out, "cache"), "--kernels", kernels]
    env = {k: v for k, v in os.environ.items() if k not in (kernel_paths.MARK, "ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return pd.read_csv(os.path.join(out, "run", "metrics.csv"))


def test_a_float64_run_from_the_frozen_warm_start_does_not_move_with_the_kernel_path(tmp_path):
    """Same config on ATen's scalar (``default``) and AVX2 kernels: equal tokens' consequences (rewards,
    accuracies, skipped steps) and continuous numbers within 1e-10 relative in float64; in float32 the same
    two paths give numbers that differ by more than that (the control: the comparison can fail)."""
    runs = {f"{dt}-{p}": _run(tmp_path, f"{dt}-{p}", f"{p}+COMPATIBLE", dt)
            for dt in ("float64", "float32") for p in ("avx2", "default")}
    a, b = runs["float64-avx2"], runs["float64-default"]
    for col in ("reward_mean", "heldout_acc", "skipped"):
        if col in a:
            pd.testing.assert_series_equal(a[col], b[col], check_exact=True)
    # relative gap; χ̂² at a step with μ = π is pure round-off (~1e-30): gaps below 1e-20 count as 0
    rel = lambda x, y: float(((x - y).abs().where((x - y).abs() > 1e-20, 0.0) / x.abs().clip(lower=1e-20)).max())  # noqa: E731
    assert (a["chi2"] > 1e-6).sum() >= 3  # stale steps (d = 2) have a real χ̂², not round-off
    assert rel(a["chi2"], b["chi2"]) < 1e-10 and rel(a["loss"], b["loss"]) < 1e-10
    c, d = runs["float32-avx2"], runs["float32-default"]
    assert rel(c["chi2"], d["chi2"]) > 1e-10 or rel(c["loss"], d["loss"]) > 1e-10


def test_identity_counts_equal_runs_and_the_largest_gaps():
    cols = dict(estimator=["gmc", "gmc", "is"], d=[32, 32, 32], seed=[0, 1, 0])
    ref = pd.DataFrame(dict(**cols, initial_acc=0.5, final_acc=[0.7, 0.6, 0.65], auc=[0.6, 0.55, 0.6],
                            failure="none", chi2_learn_med=[1.0, 2.0, 0.5]))
    same = ref.copy()
    got = perturbation.identity(ref, same, [0, 1], [("gmc", 32), ("is", 32)])
    assert np.isnan(got.pop("max_abs_chi2_roundoff"))  # no run at round-off
    assert got == dict(runs=3, equal=3, max_abs_auc=0.0, max_rel_chi2=0.0)
    moved = ref.copy()
    moved.loc[1, "auc"] = 0.5
    moved.loc[1, "chi2_learn_med"] = 2.5
    got = perturbation.identity(ref, moved, [0, 1], [("gmc", 32), ("is", 32)])
    assert got["equal"] == 2 and got["max_abs_auc"] == pytest.approx(0.05) and got["max_rel_chi2"] == pytest.approx(0.25)
    assert perturbation.identity(ref, moved, [0], [("gmc", 32)])["runs"] == 1  # only the runs asked for


def test_identity_compares_round_off_chi2_absolutely():
    """Where μ = π (onpolicy at d = 0) χ̂² is round-off of 0 (~1e-30): two paths' round-off differs by tens of
    percent, which must not be reported as a relative χ̂² gap of the runs (the v7 report's 0.22 was that)."""
    cols = dict(estimator=["onpolicy", "gmc"], d=[0, 32], seed=[0, 0])
    ref = pd.DataFrame(dict(**cols, initial_acc=0.5, final_acc=0.7, auc=0.6, failure="none",
                            chi2_learn_med=[5.5e-30, 0.86]))
    other = ref.copy()
    other["chi2_learn_med"] = [4.3e-30, 0.86 * (1 + 1e-14)]
    got = perturbation.identity(ref, other, [0], [("onpolicy", 0), ("gmc", 32)])
    assert got["max_rel_chi2"] == pytest.approx(1e-14, rel=0.01)
    assert got["max_abs_chi2_roundoff"] == pytest.approx(1.2e-30)
    text = perturbation.chi2_gaps(got)
    assert "9.94e-15" in text and "1.2e-30" in text and "1e-12" in text
    assert perturbation.chi2_gaps(dict(max_rel_chi2=0.2)) == "largest relative |Δ χ̂²| 0.2"  # a pre-floor result


def test_report_section_names_the_frozen_warm_start_and_the_reference_path():
    from figures.fig_llm_delay import section

    pert = {"reference": "native", "native": "native", "pinned": False, "seeds": [0], "runs": ["gmc@d=32"],
            "method": "substituted", "fragile": [],
            "identity": {"default+COMPATIBLE": dict(runs=7, equal=7, max_abs_auc=0.0, max_rel_chi2=3e-14)},
            "paths": [dict(requested="default+COMPATIBLE", effective="default", ran=True, note="")],
            "parts": [dict(part="a", native="holds", **{"default+COMPATIBLE": "holds"}, fragile=False, reported="holds",
                           note="")]}
    gain = dict(n=16, mean=0.18, lo=0.16, hi=0.2, met=True, final=0.69, warm_start=0.51)
    sec = section(PROTOCOL, gain, "", pert, "GPU row: not run.", False, {"pin": "", "ran": {"aten": "avx512"}})
    text = " ".join(sec["paragraphs"])
    assert "frozen warm start lm-v6.pt" in text and "7 of 7 equal the reference run" in text
    assert "against the CPU's own path, native" in text and "0 fragile" in text
    assert sec["tables"][0]["columns"][1] == "native (reference)"


# ~20 s: the sweep here and one child process per perturbation path
def test_v7_sweep_and_perturbation_from_the_frozen_warm_start_remake_every_run_equal(tmp_path):
    from simulate.llm import experiment as ex
    from simulate.llm.protocol import LMProtocol

    proto = LMProtocol(version=7, estimators=("onpolicy", "gmc"), degrading=("onpolicy",), delays=(0, 2), seeds=(0, 1, 2),
                       arm_seeds=(), arm_delays=(), steps=4, n_prompts=2, G=4, eval_every=2, n_eval=40,
                       perturb_seeds=(0, 1), perturb_paths=("avx2+COMPATIBLE", "default+COMPATIBLE"), consensus=True,
                       dtype="float64", warmstart_frozen=PROTOCOL.warmstart_frozen,
                       warmstart_frozen_sha256=PROTOCOL.warmstart_frozen_sha256)
    sw = ex.protocol_sweep(proto, out_dir=str(tmp_path / "main"), cache_dir=str(tmp_path / "cache"))
    df = ex.run(sw, progress=False, backend="serial")
    assert (df["initial_acc"] > 0.3).all()  # every run starts from the frozen warm start
    res = perturbation.perturb(df, proto, str(tmp_path / "p"))
    assert res["reference"] == "native" and not res["pinned"] and res["fragile"] == []
    for spec in ("avx2+COMPATIBLE", "default+COMPATIBLE"):
        i = res["identity"][spec]
        assert i["runs"] == 2 * len(proto.runs()) and i["equal"] == i["runs"] and i["max_abs_auc"] == 0.0
    assert res["parts"] and all(r["reported"] == r["native"] for r in res["parts"])  # nothing fragile: reported as made
    assert "re-made runs equal the reference run" in perturbation.table(res)
