"""Sampler throughput of the LM harness: its KV-cached sampler against ``transformers``' ``generate``.

One measurement, imported downward by both :mod:`bench.bench_llm` (the ``python -m bench llm`` table)
and :mod:`simulate.llm.gpu_check` (the CUDA rows of the GPU check), so no module of ``simulate`` imports
``bench``. Both samplers draw from the same random-init Qwen3-architecture model
(:data:`simulate.llm.config.PRESETS`) on the same batch of left-padded arithmetic prompts, pure ancestral
sampling at temperature 1 (``generate(do_sample=True, top_k=0, top_p=1.0)``: no truncation, as the
harness samples), up to ``T`` new tokens, stopping when every row has emitted EOS. The rate is
**generated tokens per second**: real completion tokens (up to and including EOS) over wall time, best
of ``repeats`` calls after one warm-up call. The harness also records ``log μ`` of every sampled token
(what an RL step needs); ``generate`` does not, so the comparison favours ``generate``.
"""
from __future__ import annotations

import time

import numpy as np


def prompt_batch(n: int, seed: int = 0):
    """``(tokenizer, prompts)``: ``n`` arithmetic prompts of the default task as token ids."""
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


def best_rate(fn, repeats: int, device: str) -> tuple[float, int, float]:
    """``(tokens/s, tokens, seconds)`` of the fastest of ``repeats`` calls of ``fn`` (which returns its token
    count), after one warm-up call; CUDA is synchronised around each timed call."""
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

    tok, prompts = prompt_batch(N)
    model = build_model(preset, tok.vocab_size, seed=0, dtype=dtype, device=device).eval()
    with torch.no_grad():
        h, h_tok, _ = best_rate(lambda: _harness(model, tok, prompts, T, device), repeats, device)
        g, g_tok, _ = best_rate(lambda: _hf(model, tok, prompts, T, device), repeats, device)
    return dict(device=device, preset=preset, dtype=dtype, N=N, T=T, harness_tok_s=h, generate_tok_s=g,
                harness_tokens=h_tok, generate_tokens=g_tok, ratio=h / g)


def table(rs: list[dict]) -> str:
    """Rows of :func:`measure` as a text table."""
    head = (f"{'device':<6} {'preset':<6} {'dtype':<9} {'N':>5} {'T':>3}  {'harness tok/s':>14} "
            f"{'generate tok/s':>15} {'harness/generate':>17}")
    lines = [head, "-" * len(head)]
    for r in rs:
        lines.append(f"{r['device']:<6} {r['preset']:<6} {r['dtype']:<9} {r['N']:>5} {r['T']:>3}  "
                     f"{r['harness_tok_s']:>14,.0f} {r['generate_tok_s']:>15,.0f} {r['ratio']:>16.2f}×")
    return "\n".join(lines)
