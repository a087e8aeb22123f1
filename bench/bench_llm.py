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
bf16). The load average is printed with the table: other processes slow every row down.
"""
from __future__ import annotations

import os
import time

import numpy as np


def _batch(n: int, seed: int = 0):
    from simulate.llm import tasks
    from simulate.llm.config import TaskConfig
    from simulate.llm.tokenizer import CharTokenizer
    from simulate.llm.warmstart import prompt_ids

    tok = CharTokenizer()
    problems = tasks.draw_problems([seed, 1, 0], n, TaskConfig())
    return tok, [prompt_ids(tok, p) for p in problems]


def _harness(model, tok, prompts, T, device):
    import torch

    from simulate.llm.model import generate

    gen = torch.Generator(device=device).manual_seed(0)
    ro = generate(model, prompts, max_new_tokens=T, eos_id=tok.eos_id, pad_id=tok.pad_id, generator=gen)
    return int(ro.mask.sum())


def _hf(model, tok, prompts, T, device):
    import torch

    from simulate.llm.model import left_pad

    ids, attn = left_pad(prompts, tok.pad_id, device)
    torch.manual_seed(0)
    out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=T, do_sample=True, temperature=1.0,
                         top_k=0, top_p=1.0, pad_token_id=tok.pad_id, eos_token_id=tok.eos_id)
    comp = out[:, ids.shape[1]:]
    # real tokens: up to and including the first EOS of each row (generate pads after it)
    is_eos = (comp == tok.eos_id).int()
    before = (is_eos.cumsum(1) - is_eos) == 0
    return int(before.sum())


def _rate(fn, repeats: int, device: str) -> float:
    import torch

    fn()  # warm-up (allocations, kernel selection)
    best = np.inf
    n_tok = 0
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        n_tok = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return n_tok / best, n_tok, best


def measure(preset: str, N: int, T: int, device: str = "cpu", dtype: str = "float32", repeats: int = 3) -> dict:
    """One row: tokens/s of the harness sampler and of ``generate`` on the same model and batch."""
    import torch

    from simulate.llm.model import build_model

    tok, prompts = _batch(N)
    model = build_model(preset, tok.vocab_size, seed=0, dtype=dtype, device=device).eval()
    with torch.no_grad():
        h, h_tok, h_s = _rate(lambda: _harness(model, tok, prompts, T, device), repeats, device)
        g, g_tok, g_s = _rate(lambda: _hf(model, tok, prompts, T, device), repeats, device)
    return dict(device=device, preset=preset, dtype=dtype, N=N, T=T, harness_tok_s=h, generate_tok_s=g,
                harness_tokens=h_tok, generate_tokens=g_tok, ratio=h / g)


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


def table(rs: list[dict]) -> str:
    """The rows as a text table."""
    head = (f"{'device':<6} {'preset':<6} {'dtype':<9} {'N':>5} {'T':>3}  {'harness tok/s':>14} "
            f"{'generate tok/s':>15} {'harness/generate':>17}")
    lines = [head, "-" * len(head)]
    for r in rs:
        lines.append(f"{r['device']:<6} {r['preset']:<6} {r['dtype']:<9} {r['N']:>5} {r['T']:>3}  "
                     f"{r['harness_tok_s']:>14,.0f} {r['generate_tok_s']:>15,.0f} {r['ratio']:>16.2f}×")
    return "\n".join(lines)


def run(quick: bool = False) -> str:
    """Measure and return the table (module docstring)."""
    rs = rows(quick)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    note = (f"generated tokens/s (real completion tokens incl. EOS / wall s, best of repeats after a warm-up); "
            f"CPU at 1 thread; load average {load:.2f} on {os.cpu_count()} CPUs"
            + ("" if any(r["device"] == "cuda" for r in rs) else "; no CUDA device: CPU rows only"))
    return table(rs) + "\n" + note
