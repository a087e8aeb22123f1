"""Model FLOP utilisation of the batched engine, phase by phase, against this machine's measured matrix-product peak.

A forest of ``R`` runs (one seed, rollouts of ``N = n_prompts·G`` sequences each) on the batched engine; per step
two phases are timed apart (wall seconds, after one untimed step):

- **decoding**: one stacked decode of every run's batch (:func:`simulate.llm.stacked_model.generate`: static KV
  cache, ``T`` new tokens), model FLOPs ``2·p·n_tok`` with ``n_tok`` the real prompt tokens (prefill) plus the
  generated tokens (up to and including EOS);
- **learner**: one stacked forward/backward and every run's AdamW step (:func:`simulate.llm.batched.learner_step`),
  model FLOPs ``6·p·n_tok`` (forward ``2p``, backward ``4p`` per token) over the batch's real prompt and
  completion tokens;

``p`` the parameter count (tied head once). Achieved FLOP/s = model FLOPs / seconds; MFU = that ÷ the peak, the
fastest of a few ``n×n×n`` products (``2n³`` FLOPs, ``n = 2048``) in the phase's dtype on the same device and
thread count (:func:`simulate.llm.throughput.matmul_peak`): what this machine's kernels reach on the densest work,
not a data-sheet number. The ``6p``/``2p`` counts leave out attention's ``L²`` terms and the padded positions the
stacked products also compute, so the MFU is a lower bound of the arithmetic done.
"""
from __future__ import annotations

import copy
import time


def phase_mfu(preset: str = "tiny", dtype: str = "float32", runs: int = 4, n_prompts: int = 8, G: int = 8,
              steps: int = 3, T: int = 8, device: str = "cpu", peak_n: int = 2048, cache_dir: str | None = None) -> dict:
    """The module docstring's measurement: ``{preset, dtype, runs, N, params, peak_flops_per_s, decode: {...},
    learner: {...}}``, each phase with ``seconds``, ``tokens``, ``flops_per_s`` and ``mfu``."""
    import tempfile

    import torch

    from simulate.llm import stacked_model as sm
    from simulate.llm.batched import learner_step
    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
    from simulate.llm.rollout_queue import RolloutQueue
    from simulate.llm.throughput import matmul_peak
    from simulate.llm.train import _loss_options, new_state
    from simulate.llm.warmstart import warm_start

    with tempfile.TemporaryDirectory() as tmp:
        base = TrainConfig(preset=preset, device=device, dtype=dtype, steps=steps + 1, n_prompts=n_prompts, G=G,
                           max_new_tokens=T, length_normalize=True, task=TaskConfig(n_eval=16),
                           warmstart=WarmStartConfig(steps=5, batch_size=16), cache_dir=cache_dir or tmp)
        model0, tok, _ = warm_start(base, progress=False)
    estimators = ("gmc", "grpo", "tis", "onpolicy")
    cfgs = [base.replace(estimator=estimators[r % len(estimators)], eta=1e-3 * (1 + r)) for r in range(runs)]
    states = [new_state(c, copy.deepcopy(model0), snapshots=False) for c in cfgs]
    names, arch = sm.weight_names(model0), sm.arch_of(model0)
    opts = [_loss_options(c) for c in cfgs]
    p = sum(x.numel() for x in model0.parameters())
    # d = 0 for every run: the engine's queue decodes step k's batches at the start of step k, so its decode and
    # the learner step can be timed apart (the engine's own decode, not a copy of it)
    queue = RolloutQueue(cfgs, [[0] * (steps + 1) for _ in cfgs], {}, tok, names, arch)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    acc = {"decode": [0.0, 0], "learner": [0.0, 0]}
    for k in range(steps + 1):
        sync()
        t0 = time.perf_counter()
        queue.sample(k, states)
        sync()
        t_dec = time.perf_counter() - t0
        got = [queue.pop(i, k) for i in range(runs)]
        # real prompt tokens (prefill) + generated ones, every run; a step-0 batch shared by the runs counts per run
        n_tok = sum(int(ro.attn[..., :ro.prompt_len].sum()) + int(ro.mask.sum()) for _b, ro, *_ in got)
        sync()
        t0 = time.perf_counter()
        learner_step(cfgs, states, got, names, arch, opts)
        sync()
        t_learn = time.perf_counter() - t0
        if k:  # the first step warms the allocator and the kernels (and decodes one shared batch): not timed
            for phase, sec in (("decode", t_dec), ("learner", t_learn)):
                acc[phase][0] += sec
                acc[phase][1] += n_tok
    peak = matmul_peak(device, dtype, n=peak_n, repeats=3)
    out = dict(preset=preset, dtype=dtype, runs=runs, N=n_prompts * G, params=p, peak_flops_per_s=peak,
               steps_timed=steps)
    for phase, per_token in (("decode", 2), ("learner", 6)):
        sec, n_tok = acc[phase]
        flops = per_token * p * n_tok / sec
        out[phase] = dict(seconds=sec, tokens=n_tok, flops_per_s=flops, mfu=flops / peak)
    return out


def lines(rows: list[dict]) -> list[str]:
    """:func:`phase_mfu` rows as the bench's text lines."""
    out = ["", "model FLOP utilisation per phase (batched engine, rollouts of one seed; achieved = 2·p·tokens/s "
               "decoding, 6·p·tokens/s learner step, real prompt + completion tokens; peak = the fastest 2048³ "
               "matmul in the same dtype, torch, same threads; a lower bound: attention and padding left out)"]
    for r in rows:
        for phase in ("decode", "learner"):
            x = r[phase]
            out.append(f"  {r['preset']:<5} {r['dtype']:<7} {r['runs']} runs × {r['N']} seqs, {phase:<7}: "
                       f"{x['flops_per_s'] / 1e9:7.3g} GFLOP/s of {r['peak_flops_per_s'] / 1e9:.3g} → MFU "
                       f"{x['mfu']:6.1%} ({x['tokens']:,} tokens in {x['seconds']:.2f} s, p = {r['params']:,})")
    return out
