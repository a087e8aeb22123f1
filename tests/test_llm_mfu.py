"""``python -m bench llm``'s per-phase model FLOP utilisation (simulate/llm/mfu.py): achieved FLOP/s of decoding
(2·p·tokens) and of the learner step (6·p·tokens) against the measured matmul peak of the same dtype."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_phase_mfu_is_model_flops_over_seconds_over_the_peak(dtype):
    from simulate.llm.mfu import lines, phase_mfu

    r = phase_mfu("tiny", dtype, runs=2, n_prompts=2, G=2, steps=1, T=4, peak_n=256)
    assert r["dtype"] == dtype and r["runs"] == 2 and r["N"] == 4 and r["peak_flops_per_s"] > 0
    for phase, per_token in (("decode", 2), ("learner", 6)):
        x = r[phase]
        assert x["tokens"] > 0 and x["seconds"] > 0
        assert x["flops_per_s"] == pytest.approx(per_token * r["params"] * x["tokens"] / x["seconds"])
        assert x["mfu"] == pytest.approx(x["flops_per_s"] / r["peak_flops_per_s"])
    text = "\n".join(lines([r]))
    assert f"tiny  {dtype}" in text and "decode :" in text and "learner:" in text and "MFU" in text


def test_bench_llm_prints_the_mfu_rows():
    from bench import bench_llm

    assert {(p, d) for p, d, _ in bench_llm.MFU_ROWS} >= {("tiny", "float32"), ("tiny", "float64")}
    assert "mfu_lines" in bench_llm.run.__code__.co_names
