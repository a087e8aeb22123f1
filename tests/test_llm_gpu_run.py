"""``python -m simulate.llm gpu-run --dry-run`` on CPU (issue 60): the plan, its memory estimate against the measured
peak (simulate/llm/gpu_run.py's method: live tensors before + the profiler's largest running sum of allocations),
the refusal of a plan that does not fit, naming the parameter, and one tiny step of the batched engine."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from simulate.llm.gpu_plan import GpuPlan, ModelShape, check_fits, estimate_memory, usable_bytes
from simulate.llm.gpu_run import TINY, tiny_step

#: A gpu-preset plan that fits an H200: one seed, two delays, 8 prompts per step.
FITS = ["--card", "h200", "--seeds", "1", "--delays", "0,8", "--n-prompts", "8"]


def test_dry_run_prints_the_plan_fits_and_runs_one_tiny_step(tmp_path, capsys):
    from simulate.llm.__main__ import main

    assert main(["gpu-run", "--dry-run", *FITS, "--experiment-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "preset gpu (82.6M parameters), float32 weights and products, on NVIDIA H200" in out
    assert "12 runs = 1 seeds x 6 estimators" in out and "batched engine" in out
    assert "memory estimate: peak" in out and "time estimate:" in out and "fits: yes" in out
    ratio = float(re.search(r"estimate / measured = ([0-9.]+)", out).group(1))
    assert 0.75 <= ratio <= 1.25, out  # the bound: the estimate within 25 % of the measured peak


def test_a_plan_that_does_not_fit_is_refused_naming_the_parameter(capsys):
    from simulate.llm.__main__ import main

    # the target on one H100: 16 seeds x 3 delays x 6 estimators of the gpu preset in float32
    assert main(["gpu-run", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error: the plan does not fit NVIDIA H100 80GB" in err and "--delays" in err
    with pytest.raises(ValueError, match="--n-prompts: not even one seed fits at 32 prompts per step; one seed fits at"):
        check_fits(GpuPlan(seeds=(0,), delays=(0, 8)))
    with pytest.raises(ValueError, match=r"--seeds: at most \d+ of the 8 seeds fit in one batch"):
        check_fits(GpuPlan(card="h200", seeds=tuple(range(8)), delays=(0, 2), n_prompts=4))


def test_the_estimate_grows_with_each_parameter_and_the_fit_follows_it():
    base = GpuPlan(card="h200", seeds=(0,), delays=(0, 8), n_prompts=8)
    e0 = estimate_memory(base)
    assert e0["peak"] <= usable_bytes(base)
    check_fits(base)
    for change in (dict(seeds=(0, 1)), dict(delays=(0, 16)), dict(n_prompts=16), dict(max_new_tokens=16)):
        assert estimate_memory(replace(base, **change))["peak"] > e0["peak"], change
    # bf16 autocast lowers the activations, not the float32 state
    b = estimate_memory(replace(base, precision="bf16-autocast"))
    assert b["resident"] == e0["resident"] and b["activations"] < e0["activations"]


def test_the_parameter_count_is_the_models():
    import torch

    from simulate.llm.model import build_model
    from simulate.llm.tokenizer import CharTokenizer

    V = CharTokenizer().vocab_size
    for preset in ("tiny", "small"):
        model = build_model(preset, V, seed=0)
        assert ModelShape.of(preset, V).params == sum(p.numel() for p in model.parameters()), preset
        assert all(p.dtype == torch.float32 for p in model.parameters())


def test_invalid_plans_are_refused_before_anything_runs():
    for bad, msg in ((dict(precision="fp8"), "precision"), (dict(card="a100"), "card"), (dict(n_prompts=0), "n_prompts"),
                     (dict(delays=(0, 0)), "delays"), (dict(preset="huge"), "preset")):
        with pytest.raises(ValueError, match=msg):
            GpuPlan(**bad)


@pytest.mark.slow
def test_the_estimate_holds_where_activations_dominate(tmp_path):
    """Another point than the dry run's: 64 sequences per run, three delays (activations ≈ 6× the state)."""
    plan = replace(TINY, n_prompts=8, G=8, delays=(0, 1, 3))
    est, got = estimate_memory(plan), tiny_step(plan, str(tmp_path))
    assert 0.75 <= est["peak"] / got["peak"] <= 1.25, (est["peak"], got["peak"])
    assert abs(est["resident"] - got["resident"]) <= 0.05 * got["resident"]
