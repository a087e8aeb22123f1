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

import os
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


def matmul_peak(device: str = "cpu", dtype: str = "float32", n: int = 1024, repeats: int = 5) -> float:
    """The stated peak for MFU: FLOP/s of the fastest of ``repeats`` ``n×n×n`` matrix products (``2n³``
    FLOPs) in ``dtype`` on ``device`` (CPU at the caller's thread count): what this machine's kernels reach
    on the densest work, not a data-sheet number."""
    import torch

    dt = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    _, _, best = best_rate(lambda: int((a @ b).shape[0]), repeats, device)
    return 2.0 * n ** 3 / best


def training(preset: str = "tiny", steps: int = 4, n_prompts: int = 8, G: int = 8, device: str = "cpu",
             dtype: str = "float32", cache_dir: str | None = None) -> dict:
    """Training throughput of one run (one-run-at-a-time, the harness's path): completion tokens per second
    of the learner steps (median over ``steps`` steps after a short warm start; sampling, learner forward
    and backward, AdamW, the held-out evaluation at the last step) and the model FLOP utilisation
    ``MFU = 6·N·(tokens of the learner batch, prompt and completion) / step time ÷`` :func:`matmul_peak`
    (``N`` parameters; ``6N`` per token is the forward + backward model FLOPs, sampling left out, so the
    MFU is a lower bound)."""
    import tempfile

    import pandas as pd

    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
    from simulate.llm.tree import train_forest

    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(preset=preset, device=device, dtype=dtype, steps=steps, n_prompts=n_prompts, G=G,
                          eval_every=1000, length_normalize=True, task=TaskConfig(n_eval=16),
                          warmstart=WarmStartConfig(steps=5, batch_size=16), cache_dir=cache_dir or tmp,
                          out_dir=os.path.join(tmp, "run"))
        train_forest([cfg], engine="serial")  # one run's own sampler and learner (mfu.py measures the batched engine)
        m = pd.read_csv(os.path.join(cfg.out_dir, "metrics.csv"))
        from simulate.llm.model import build_model
        from simulate.llm.tokenizer import CharTokenizer

        n_params = sum(p.numel() for p in build_model(preset, CharTokenizer().vocab_size, seed=0).parameters())
    step_s = m["completion_tokens"] / m["tokens_per_s"]
    seq_tokens = m["completion_tokens"] + n_prompts * G * 8  # + the prompt: BOS and "A12+34=" are 8 tokens a row
    flops = float((6.0 * n_params * seq_tokens / step_s).median())
    peak = matmul_peak(device, dtype)
    return dict(device=device, preset=preset, mode="one run", tokens_per_s=float(m["tokens_per_s"].median()),
                model_flops_per_s=flops, peak_flops_per_s=peak, mfu=flops / peak, params=n_params)


#: The bench's forest: the LM protocol's estimator families (trajectory-level and token-level) × delays.
FOREST_ESTIMATORS = ("onpolicy", "is", "tis", "gmc", "grpo", "cispo")


def forest_training(preset: str = "tiny", estimators=FOREST_ESTIMATORS, delays=(0, 2, 4), steps: int = 4,
                    n_prompts: int = 8, G: int = 8, device: str = "cpu", dtype: str = "float32",
                    cache_dir: str | None = None) -> dict:
    """Training throughput of one seed's forest (``estimators × delays`` runs), one run at a time against batched.

    Both engines train the same runs from the same short warm start for ``steps`` learner steps; the first
    step is a warm-up and is not timed; neither evaluates (the held-out evaluation is the same serial code in
    both). One run at a time: :func:`simulate.llm.train.rl_step` run by run, version-0 batches shared
    (:class:`simulate.llm.tree.Version0Batches`, as the serial forest does); batched:
    :func:`simulate.llm.batched.forest_step` (rollouts queued, :mod:`simulate.llm.rollout_queue`). Per engine:
    completion tokens trained per wall second and per
    CPU second of this process (``time.process_time``: less sensitive to other processes on a shared
    machine), and ``MFU = 6·N·(real prompt + completion tokens of the learner batches) / wall s ÷``
    :func:`matmul_peak` (sampling FLOPs left out: a lower bound)."""
    import copy
    import tempfile

    import torch

    from simulate.llm import batched, tasks
    from simulate.llm import stacked_model as sm
    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
    from simulate.llm.rollout_queue import RolloutQueue
    from simulate.llm.train import _loss_options, delay_schedule, new_state, rl_step, step_problems
    from simulate.llm.tree import Version0Batches
    from simulate.llm.warmstart import prompt_ids, warm_start

    with tempfile.TemporaryDirectory() as tmp:
        base = TrainConfig(preset=preset, device=device, dtype=dtype, steps=steps + 1, n_prompts=n_prompts, G=G,
                           D=max(delays), eval_every=10 ** 6, length_normalize=True, task=TaskConfig(n_eval=16),
                           warmstart=WarmStartConfig(steps=5, batch_size=16), cache_dir=cache_dir or tmp)
        model0, tok, _ = warm_start(base, progress=False)
    cfgs = [base.replace(estimator=e, d=d) for e in estimators for d in delays]
    evalset = tasks.eval_set(base.task)
    sched = [delay_schedule(c) for c in cfgs]
    opts = [_loss_options(c) for c in cfgs]
    prompt_tok = [sum(len(prompt_ids(tok, p)) for p in step_problems(base, k)) for k in range(steps)]
    n_params = sum(p.numel() for p in model0.parameters())

    def timed(step_fn, snapshots: bool) -> dict:
        states = [new_state(c, copy.deepcopy(model0), snapshots=snapshots) for c in cfgs]
        step_fn(states, 0)  # warm-up (allocations, kernel selection): not timed
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        for k in range(1, steps):
            step_fn(states, k)
        sync()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        comp = sum(r["completion_tokens"] for st in states for r in st.rows[1:])
        seq = comp + len(cfgs) * sum(prompt_tok[1:])
        return dict(tokens=comp, tokens_per_s=comp / wall, tokens_per_cpu_s=comp / cpu, seconds=wall, cpu_seconds=cpu,
                    model_flops_per_s=6.0 * n_params * seq / wall)

    v0 = Version0Batches(base, model0, tok)

    def serial(states, k):
        for c, st, s, o in zip(cfgs, states, sched, opts):
            rl_step(c, st, k, tok=tok, evalset=evalset, delays=s, loss_opts=o, batch_source=v0)

    names, arch = sm.weight_names(model0), sm.arch_of(model0)
    queue = RolloutQueue(cfgs, sched, {}, tok, names, arch)

    def stacked(states, k):
        batched.forest_step(cfgs, states, queue, k, tok=tok, evalset=evalset, names=names, arch=arch, loss_opts=opts)

    one, many = timed(serial, True), timed(stacked, False)
    peak = matmul_peak(device, dtype)
    return dict(device=device, preset=preset, dtype=dtype, runs=len(cfgs), steps_timed=steps - 1, params=n_params,
                peak_flops_per_s=peak, serial=one, batched=many, ratio=many["tokens_per_s"] / one["tokens_per_s"],
                ratio_cpu=many["tokens_per_cpu_s"] / one["tokens_per_cpu_s"],
                mfu_serial=one["model_flops_per_s"] / peak, mfu_batched=many["model_flops_per_s"] / peak)
