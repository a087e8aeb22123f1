"""Rollout throughput of the LM harness (issue 25): its KV-cached sampler against ``transformers``' ``generate``.

Both sample the same random-init Qwen3-architecture model (:data:`simulate.llm.config.PRESETS`) on the
same batch of left-padded arithmetic prompts, pure ancestral sampling at temperature 1
(``generate(do_sample=True, top_k=0, top_p=1.0)``: no truncation, as the harness samples), up to
``T`` new tokens, stopping when every row has emitted EOS. The rate is **generated tokens per second**:
real completion tokens (up to and including EOS) over wall time, best of ``repeats`` calls after one
warm-up call. The harness also records ``log μ`` of every sampled token (what an RL step needs);
``generate`` does not (``output_scores`` would cost more), so the comparison favours ``generate``.

Rows: CPU at one thread (the harness's setting, :attr:`simulate.llm.config.TrainConfig.threads`),
presets ``tiny`` and ``small`` (``tiny`` only with ``quick``), batches of 64 and 256 rows, ``T = 8`` (the
protocol's) and 32; the same on CUDA when ``torch.cuda.is_available()`` (plus the ``gpu`` preset in
bf16). The load average is printed with the table: other processes slow every row down. The
measurement itself is :mod:`simulate.llm.throughput` (shared with the GPU check, which imports it from there).
Then the training rows, the batched-forest table (:func:`forest_lines`) and the model FLOP utilisation per phase
(:func:`mfu_lines`, :mod:`simulate.llm.mfu`): achieved FLOP/s of decoding (``2·p·tokens``) and of a learner step
(``6·p·tokens``) against the measured float32 and float64 matmul peak of this CPU.
"""
from __future__ import annotations

import os

from simulate.llm.throughput import forest_training, measure, table, training  # shared with the GPU check

__all__ = ["FOREST_ROWS", "MFU_ROWS", "forest_lines", "measure", "mfu_lines", "rows", "run", "table", "training"]

#: Batched forest vs one run at a time (issue 35): ``(device, preset, dtype, estimators, delays, n_prompts, G,
#: steps, in quick mode)``. The target is on training tokens per wall second, batched ÷ one run at a time.
FOREST_ROWS = (
    ("cpu", "tiny", "float32", 6, (0, 2, 4), 8, 8, 4, True),
    ("cpu", "tiny", "float32", 6, (0, 2, 4), 2, 4, 4, False),
    ("cpu", "small", "float32", 2, (0, 2), 4, 8, 3, False),
    ("cuda", "gpu", "bfloat16", 6, (0, 8, 32), 32, 8, 4, True),
)
#: Pre-stated targets of issue 35 (batched ÷ one run at a time, training tokens per wall second).
FOREST_TARGET = {"cpu": 3.0, "cuda": 10.0}


def rows(quick: bool = False) -> list[dict]:
    """Every measured row (see the module docstring)."""
    import torch

    before = torch.get_num_threads()
    out = []
    try:
        torch.set_num_threads(1)
        presets = ("tiny",) if quick else ("tiny", "small")
        shapes = ((64, 8),) if quick else ((64, 8), (256, 8), (64, 32))
        for p in presets:
            for N, T in shapes:
                out.append(measure(p, N, T, repeats=3 if quick else 5))
        if torch.cuda.is_available():
            for p, dt in (("tiny", "float32"), ("gpu", "bfloat16")):
                for N, T in ((256, 8), (1024, 32)):
                    out.append(measure(p, N, T, device="cuda", dtype=dt, repeats=3))
    finally:
        torch.set_num_threads(before)
    return out


def run(quick: bool = False) -> str:
    """Measure and return the table (module docstring)."""
    rs = rows(quick)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    note = (f"generated tokens/s (real completion tokens incl. EOS / wall s, best of repeats after a warm-up); "
            f"CPU at 1 thread; load average {load:.2f} on {os.cpu_count()} CPUs"
            + ("" if any(r["device"] == "cuda" for r in rs) else "; no CUDA device: CPU rows only"))
    tr = []
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        tr.append(training("tiny", steps=3 if quick else 6))
        if torch.cuda.is_available():
            tr.append(training("gpu", steps=6, n_prompts=32, device="cuda", dtype="bfloat16"))
    finally:
        torch.set_num_threads(before)
    lines = ["", "training (one run at a time): completion tokens/s per "
             "learner step (median) and MFU = 6·N·(batch tokens)/step time ÷ the measured peak of an n×n matrix "
             "product on the same device and dtype (sampling FLOPs left out: a lower bound)"]
    lines += [f"  {r['device']:<5} {r['preset']:<5} {r['mode']}: {r['tokens_per_s']:,.0f} tokens/s, "
              f"{r['model_flops_per_s'] / 1e9:.3g} GFLOP/s of {r['peak_flops_per_s'] / 1e9:.3g} → MFU {r['mfu']:.2%} "
              f"(N = {r['params']:,} parameters)" for r in tr]
    return (table(rs) + "\n" + note + "\n".join(lines) + "\n" + "\n".join(forest_lines(quick)) + "\n"
            + "\n".join(mfu_lines(quick)))


#: The per-phase MFU rows (:mod:`simulate.llm.mfu`): ``(preset, dtype, in quick mode)``, CPU at one thread.
MFU_ROWS = (("tiny", "float32", True), ("tiny", "float64", True), ("small", "float32", False),
            ("small", "float64", False))


def mfu_lines(quick: bool = False) -> list[str]:
    """Model FLOP utilisation of the batched engine per phase, decoding and learner step, against the measured
    float32 and float64 matmul peaks of this CPU at one thread (the harness's setting), and on CUDA in bf16 when
    a device is present."""
    import torch

    from simulate.llm.mfu import lines, phase_mfu

    before = torch.get_num_threads()
    rs = []
    try:
        torch.set_num_threads(1)
        for preset, dtype, in_quick in MFU_ROWS:
            if in_quick or not quick:
                rs.append(phase_mfu(preset, dtype, steps=2 if quick else 3))
        if torch.cuda.is_available():
            rs.append(phase_mfu("gpu", "bfloat16", runs=18, n_prompts=32, device="cuda"))
    finally:
        torch.set_num_threads(before)
    return lines(rs) + [f"  {_uptime()}"]


def _uptime() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return f"load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (1, 5, 15 min) on {os.cpu_count()} CPUs"


def forest_lines(quick: bool = False) -> list[str]:
    """The batched-forest table (:func:`simulate.llm.throughput.forest_training`), CPU at one thread (the
    harness's setting) and CUDA when available, with PASS/FAIL against :data:`FOREST_TARGET` and the load."""
    import torch

    from simulate.llm.throughput import FOREST_ESTIMATORS

    out = ["", "forest training, batched (simulate/llm/batched.py) vs one run at a time (rl_step run by run, version-0 "
           "batches shared), same runs and steps (first step untimed, no evaluation); tokens = completion tokens "
           "trained; tok/cpu-s = per CPU second of this process (robust to a shared machine); MFU = 6·N·(prompt + "
           "completion tokens)/wall s ÷ the stated peak (CPU: measured n×n float32 matmul at 1 thread; CUDA: the "
           "measured bf16 matmul), sampling FLOPs left out",
           f"  before: {_uptime()}"]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        for dev, preset, dt, n_est, delays, n_prompts, G, steps, in_quick in FOREST_ROWS:
            if (quick and not in_quick) or (dev == "cuda" and not torch.cuda.is_available()):
                continue
            r = forest_training(preset, FOREST_ESTIMATORS[:n_est], delays, steps=steps - (quick and dev == "cpu"),
                                n_prompts=n_prompts, G=G, device=dev, dtype=dt)
            target = FOREST_TARGET[dev]
            s1, sb = r["serial"], r["batched"]
            out.append(f"  {dev:<4} {preset:<5} {r['runs']:>2} runs × {n_prompts * G:>3} rows, {r['steps_timed']} steps: "
                       f"one-at-a-time {s1['tokens_per_s']:,.0f} tok/s ({s1['tokens_per_cpu_s']:,.0f} tok/cpu-s, "
                       f"MFU {r['mfu_serial']:.1%}) | batched {sb['tokens_per_s']:,.0f} tok/s "
                       f"({sb['tokens_per_cpu_s']:,.0f} tok/cpu-s, MFU {r['mfu_batched']:.1%}) | ratio "
                       f"{r['ratio']:.2f}× wall, {r['ratio_cpu']:.2f}× cpu-s | target ≥{target:g}×: "
                       f"{'PASS' if r['ratio'] >= target else 'FAIL'} | peak {r['peak_flops_per_s'] / 1e9:.3g} GFLOP/s, "
                       f"N = {r['params']:,}")
    finally:
        torch.set_num_threads(before)
    if not torch.cuda.is_available():
        out.append("  no CUDA device: the GPU target (≥10×) not measured")
    out.append(f"  after: {_uptime()}")
    return out
