"""The GPU LM protocol v2 (issue 60): registered under its own hash with fresh seeds before any run; its plan on an H100
(chunks of whole seeds, memory and time within the limit, the warm start counted); the wall-clock guard; and
``bash simulate/llm/gpu_run.sh --dry-run``, the card's exact path on CPU, end to end into the figure, which refuses
the dry run's file as the GPU row and merges a real one as the "gpu-lm" answer group."""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace

import pytest

from simulate.llm import gpu_protocol as gp
from simulate.llm.gpu_plan import GpuPlan, estimate_memory, queue_lengths, seed_chunks, usable_bytes
from simulate.llm.protocol import (
    GPU_ESTIMATORS,
    GPU_PROTOCOLS,
    PROTOCOL_GPU,
    PROTOCOL_GPU_D256,
    PROTOCOL_GPU_V1,
    PROTOCOL_V8,
    PROTOCOLS,
    USED_SEEDS,
    draw_seeds,
)

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "simulate", "llm", "gpu_run.sh")


def test_v2_is_registered_with_fresh_seeds_and_the_earlier_hashes_stay():
    assert PROTOCOLS["gpu"] is PROTOCOL_GPU and PROTOCOLS["gpu-v1"] is PROTOCOL_GPU_V1
    assert PROTOCOL_GPU.content_hash() == "df39f84dca1cd321" and PROTOCOL_GPU.name == "lm-c9-gpu-v2"
    assert PROTOCOL_GPU_V1.content_hash() == "7e40e25ed4fb4cc8" and PROTOCOL_V8.content_hash() == "16ad78f70dadbc89"
    assert "autocast" not in PROTOCOL_V8.to_dict() and PROTOCOL_GPU.to_dict()["autocast"] == "bfloat16"
    assert PROTOCOL_GPU.seeds == draw_seeds("lm-c9-gpu-v2", 16) and len(set(PROTOCOL_GPU.seeds)) == 16
    assert not set(PROTOCOL_GPU.seeds) & (USED_SEEDS | set(PROTOCOL_V8.seeds))
    assert PROTOCOL_GPU.delays == (0, 8, 32) and PROTOCOL_GPU.estimators == GPU_ESTIMATORS
    assert (PROTOCOL_GPU.preset, PROTOCOL_GPU.device, PROTOCOL_GPU.dtype) == ("gpu", "cuda", "float32")
    assert PROTOCOL_GPU.version == 8 and PROTOCOL_GPU.confirmatory and len(PROTOCOL_GPU.runs()) == 13
    # v8's pre-declared family: gmc against every rival at d_max, and the degrading maps from the shared d = 0
    assert len(PROTOCOL_GPU.comparisons()) == 5 + 3
    with pytest.raises(ValueError, match="autocast"):
        replace(PROTOCOL_GPU, autocast="fp8")
    with pytest.raises(ValueError, match="seeds must be draw_seeds"):
        replace(PROTOCOL_GPU, seeds=tuple(range(16)))


def test_the_card_plan_fits_an_h100_in_chunks_of_whole_seeds_and_within_the_limit():
    plan = gp.plan_of(PROTOCOL_GPU, dry_run=False, card="h100")
    assert plan.runs == 16 * 13 and plan.precision == "bf16-autocast" and plan.preset == "gpu"
    sz = gp.sized(plan, dry_run=False)
    assert [len(c) for c in sz["chunks"]] == [13] * 16 and sz["est"]["peak"] <= usable_bytes(plan)
    seeds = [{plan.seeds[i // 13] for i in c} for c in sz["chunks"]]
    assert all(len(s) == 1 for s in seeds)  # a chunk is one seed's forest (its forks find their trunk)
    ws = gp.estimate_warmstart_seconds(plan, PROTOCOL_GPU.warmstart_steps, PROTOCOL_GPU.warmstart_batch_size)
    assert 30 < ws["total_s"] < 200 and ws["flops"] > 1e15
    total = ws["total_s"] + sz["seconds"]["total_s"]
    assert total + gp.RESERVE_S <= 0.65 * 500  # the estimate leaves a third of the default limit for the guessed MFU
    # the v8 rival set (23 runs per seed) would not fit one chunk per seed and would take longer than the limit allows
    big = replace(plan, estimators=PROTOCOL_V8.estimators,
                  pairs=replace(PROTOCOL_GPU, estimators=PROTOCOL_V8.estimators).runs())
    szb = gp.sized(big, dry_run=False)
    assert szb["fit"] < 23 and ws["total_s"] + szb["seconds"]["total_s"] > 1.5 * total


def test_seed_chunks_hold_whole_seeds_or_cut_a_seed_into_parts():
    plan = GpuPlan(card="h200", seeds=(0, 1, 2), delays=(0, 8), n_prompts=8)  # 12 runs per seed
    assert seed_chunks(plan, 12) == [list(range(0, 12)), list(range(12, 24)), list(range(24, 36))]
    assert seed_chunks(plan, 36) == [list(range(36))]
    assert seed_chunks(plan, 25) == [list(range(0, 24)), list(range(24, 36))]
    cut = seed_chunks(plan, 5)  # 12 runs in parts of 4
    assert [len(c) for c in cut] == [4] * 9 and sum(cut, []) == list(range(36))
    kept = queue_lengths(plan)
    assert all(estimate_memory(plan, [kept[i] for i in c])["peak"] > 0 for c in cut)
    with pytest.raises(ValueError, match="fit"):
        seed_chunks(plan, 0)


def test_the_guard_predicts_the_next_chunk_from_the_slowest_so_far():
    assert gp.next_chunk_fits(now=100, deadline=200, chunk_seconds=[], estimate_s=50, reserve_s=20)
    assert not gp.next_chunk_fits(now=100, deadline=200, chunk_seconds=[], estimate_s=90, reserve_s=20)
    assert not gp.next_chunk_fits(now=100, deadline=200, chunk_seconds=[30, 85, 10], estimate_s=1, reserve_s=20)
    assert gp.next_chunk_fits(now=100, deadline=200, chunk_seconds=[30, 80], estimate_s=500, reserve_s=20)


def test_a_run_stopped_by_the_guard_writes_its_complete_seeds_only(tmp_path, monkeypatch, capsys):
    asked = []

    def guard(now, deadline, chunk_seconds, estimate_s, reserve_s=gp.RESERVE_S):
        asked.append(list(chunk_seconds))
        return not chunk_seconds  # the first chunk runs, the second is predicted to end past the limit

    monkeypatch.setattr(gp, "next_chunk_fits", guard)
    assert gp.main(out_dir=str(tmp_path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "guard: chunk 2 of 2 would end past the limit" in out and "stopped by the time limit" in out
    rep = json.loads((tmp_path / gp.RESULTS).read_text())
    assert rep["status"] == "stopped by the time limit" and rep["seeds_done"] == [0] and rep["chunks_done"] == 1
    assert {r["seed"] for r in rep["runs"]} == {0} and len(rep["runs"]) == 7 and len(asked) == 2
    assert rep["verdict"] == "not run" and "no verdict (1 complete seeds" in rep["c9_lines"][0]


def test_a_run_killed_mid_way_leaves_the_file_of_its_complete_seeds(tmp_path, monkeypatch):
    """The file is rewritten after every chunk: a run that dies in chunk 2 (the script's hard timeout, a crash)
    still leaves seed 0's rows, marked partial."""
    from simulate.llm import batched

    real, calls = batched.train_forest_batched, []

    def dies_second(cfgs, **kw):
        calls.append(len(cfgs))
        if len(calls) == 2:
            raise RuntimeError("killed (test)")
        return real(cfgs, **kw)

    monkeypatch.setattr(batched, "train_forest_batched", dies_second)
    with pytest.raises(RuntimeError, match="killed"):
        gp.main(out_dir=str(tmp_path), dry_run=True)
    rep = json.loads((tmp_path / gp.RESULTS).read_text())
    assert rep["status"].startswith("partial: written after chunk 1") and rep["seeds_done"] == [0]
    assert {r["seed"] for r in rep["runs"]} == {0} and len(rep["runs"]) == 7 and rep["parity_ok"]


def test_a_chunk_out_of_memory_is_tried_again_in_halves(tmp_path, monkeypatch, capsys):
    """The memory estimate is unmeasured on a card: a chunk that runs out of memory is run as two halves (a run's
    numbers do not depend on its chunk, tests/test_llm_gpu_run.py), and the seeds still complete."""
    import torch

    from simulate.llm import batched

    real, sizes = batched.train_forest_batched, []

    def small_card(cfgs, **kw):
        sizes.append(len(cfgs))
        if len(cfgs) > 4:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return real(cfgs, **kw)

    monkeypatch.setattr(batched, "train_forest_batched", small_card)
    assert gp.main(out_dir=str(tmp_path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "out of memory with 7 runs" in out and "split into 4 + 3" in out
    rep = json.loads((tmp_path / gp.RESULTS).read_text())
    assert sizes == [7, 4, 3, 7, 4, 3] and rep["oom_splits"] == 2 and rep["chunks_done"] == 4
    assert rep["status"] == "complete" and rep["seeds_done"] == [0, 1] and len(rep["runs"]) == 14


def test_gpu_run_sh_dry_run_end_to_end_and_the_figure_merge(tmp_path, monkeypatch):
    """The one command on CPU: parity, then the plan (chunks, memory, the warm start's and the chunks' time), the warm
    start, the chunks, the analysis, $OUT/llm_gpu.json; the figure refuses it as the GPU row."""
    from figures import fig_llm_delay

    env = {**os.environ, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work")}
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(["bash", SCRIPT, "--dry-run"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    log = (tmp_path / "out" / "log.txt").read_text()
    order = ["parity (tolerance", "plan: preset tiny", "memory estimate per chunk", "warm start estimate:",
             "total estimate:", "the card's plan (h100)", "208 runs = 16 seeds x 6 estimators", "warm start:",
             "chunk 1/2: 7 runs", "chunk 2/2: 7 runs", "C9 at LM scale", "complete: seeds 2 of 2, chunks 2 of 2"]
    at = [log.find(s) for s in order]
    assert all(a >= 0 for a in at) and at == sorted(at), list(zip(order, at))
    assert {"timings.txt", "parity.csv", "llm_gpu.json", "log.txt", "runs.tar.gz"} <= set(os.listdir(tmp_path / "out"))
    assert "measured against the plan: complete | seeds 2 of 2" in (tmp_path / "out" / "timings.txt").read_text()
    rep = json.loads((tmp_path / "out" / "llm_gpu.json").read_text())
    assert rep["dry_run"] is True and rep["parity_ok"] and rep["status"] == "complete"
    assert rep["protocol_hash"] == PROTOCOL_GPU.content_hash() and rep["seeds_done"] == [0, 1]
    assert rep["plan"]["chunk_sizes"] == [7, 7] and rep["chunks_done"] == 2 and len(rep["chunk_seconds"]) == 2
    assert len(rep["runs"]) == 2 * len(PROTOCOL_GPU.variant(quick=True).runs()) and rep["precision"] == "bf16-autocast"
    assert {"warmstart_seconds", "warmstart_accuracy", "mfu", "train_tokens_per_s", "total_seconds"} <= set(rep)
    assert rep["plan"]["warmstart_estimate_s"] >= 0 and "16 chunks of at most 13 runs" in rep["card_plan"]

    monkeypatch.setattr(fig_llm_delay, "GPU_RESULTS", str(tmp_path / "out" / "llm_gpu.json"))
    rows, line = fig_llm_delay.gpu_rows()
    assert rows == [] and "dry run" in line
    # as the card writes it after the guard stopped it (the dry run's quick delays lack d = 8 and 32)
    rep.update(dry_run=False, seeds_planned=list(PROTOCOL_GPU.seeds), status="stopped by the time limit")
    for r in rep["runs"]:
        r["d"] = {0: 0, 2: 8}[r["d"]]
    rep["runs"] += [{**r, "d": 32} for r in rep["runs"] if r["d"] == 8]
    (tmp_path / "real.json").write_text(json.dumps(rep))
    monkeypatch.setattr(fig_llm_delay, "GPU_RESULTS", str(tmp_path / "real.json"))
    rows, line = fig_llm_delay.gpu_rows()
    assert rows and {r["group"] for r in rows} == {"gpu-lm"} and {r["d"] for r in rows} == {0, 8, 32}
    assert line.startswith("GPU row (") and "2 seeds of 16 planned (stopped by the time limit)" in line
    rep["runs"] = [r for r in rep["runs"] if r["seed"] == 0]  # stopped before a second seed was complete
    (tmp_path / "real.json").write_text(json.dumps(rep))
    assert fig_llm_delay.gpu_rows() == ([], "GPU row: not run (figures/out/llm_gpu.json holds 1 complete seeds; "
                                             "the paired comparisons need 2).")


def test_the_d256_preset_is_registered_exploratory_and_fits_one_card_budget():
    """The second preset (issue 60, M2PO's anchor): d up to 256 over 300 steps, fresh seeds, never the headline; its
    plan fits an H100 in chunks of whole seeds, warm start included, within the default 500 s limit."""
    p = PROTOCOL_GPU_D256
    assert PROTOCOLS["gpu-d256"] is p and GPU_PROTOCOLS == ("gpu", "gpu-d256")
    assert p.content_hash() == "12b5dbb76cf58075" and PROTOCOL_GPU.content_hash() == "df39f84dca1cd321"
    assert p.delays == (0, 32, 256) and p.d_max == 256 and p.steps == 300 > p.d_max and not p.confirmatory
    assert p.seeds == draw_seeds("lm-c9-gpu-d256-v1", 4)
    assert not set(p.seeds) & (USED_SEEDS | set(PROTOCOL_V8.seeds) | set(PROTOCOL_GPU.seeds))
    plan = gp.plan_of(p, dry_run=False, card="h100")
    sz = gp.sized(plan, dry_run=False)
    assert plan.runs == 4 * 13 and [len(c) for c in sz["chunks"]] == [13] * 4 and sz["est"]["peak"] <= usable_bytes(plan)
    ws = gp.estimate_warmstart_seconds(plan, p.warmstart_steps, p.warmstart_batch_size)
    assert ws["total_s"] + sz["seconds"]["total_s"] + gp.RESERVE_S <= 500
    assert gp.results_name(p) == "llm_gpu-lm-c9-gpu-d256-v1.json" and gp.results_name(PROTOCOL_GPU) == gp.RESULTS


def test_the_d256_preset_runs_its_dry_run_into_its_own_results_file(tmp_path):
    """``PROTOCOL=gpu-d256 gpu_run.sh --dry-run``: the same path on CPU, writing the preset's own file, not the
    report's GPU row."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), "PROTOCOL": "gpu-d256"}
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(["bash", SCRIPT, "--dry-run"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = set(os.listdir(tmp_path / "out"))
    assert "llm_gpu-lm-c9-gpu-d256-v1.json" in out and "llm_gpu.json" not in out
    rep = json.loads((tmp_path / "out" / "llm_gpu-lm-c9-gpu-d256-v1.json").read_text())
    assert rep["protocol_hash"] == PROTOCOL_GPU_D256.content_hash() and rep["status"] == "complete"
    assert "52 runs = 4 seeds x 6 estimators" in rep["card_plan"]
    assert "measured against the plan: complete" in (tmp_path / "out" / "timings.txt").read_text()
