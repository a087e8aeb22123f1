"""``python -m simulate.llm gpu-check``: the prepared check for one GPU (target: < 5 min on one H200).

What it does: the ``gpu`` preset (Qwen3 architecture, ~85M parameters with the character
vocabulary) in bf16 on ``cuda``; a cached supervised warm start; then, for ``gmc``, ``tic``, ``is``
and ``onpolicy`` at delays ``0`` and ``8``, one seed of asynchronous RL; it prints the training
throughput (completion tokens per second, sampling and learner together) and a short
accuracy-against-delay table with the protocol's C9 lines, marked "quick: not a verdict" (one seed:
a throughput and path check; the verdict is the CPU protocol's). Log-probs stay float32 (see :mod:`model`).

``--dry-run`` (alias ``--tiny``) runs the same code path on CPU with the ``tiny`` preset and a few
steps, in seconds, so the script is tested where no GPU exists. Timings of the full check were
sized, not measured (no GPU in the session that wrote it): 8 runs × 40 steps × 512 rollouts.
"""
from __future__ import annotations

import os
import time

from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig


def settings(dry_run: bool, out_dir: str):
    """``(base config, estimators, delays)`` of the check."""
    if dry_run:
        base = TrainConfig(preset="tiny", device="cpu", dtype="float32", steps=3, n_prompts=4, G=4,
                           eval_every=1000, D=2, task=TaskConfig(n_eval=16), length_normalize=True,
                           warmstart=WarmStartConfig(steps=5, batch_size=16),
                           cache_dir=os.path.join(out_dir, "cache"))
        return base, ("gmc", "tic"), (0, 2)
    base = TrainConfig(preset="gpu", device="cuda", dtype="bfloat16", threads=8, steps=40, n_prompts=64,
                       G=8, eta=1e-4, eval_every=1000, D=8, max_new_tokens=8, length_normalize=True,
                       task=TaskConfig(task="arithmetic", digits=3, n_eval=500),
                       warmstart=WarmStartConfig(steps=600, batch_size=256, eta=1e-3),
                       cache_dir=os.path.join(out_dir, "cache"))
    return base, ("onpolicy", "is", "tic", "gmc"), (0, 8)


def main(dry_run: bool = False, out_dir: str = "results/llm/gpu_check") -> int:
    """Run the check and print throughput and the table; returns a process exit code."""
    import pandas as pd
    import torch

    from simulate.llm import experiment as ex
    from simulate.llm.warmstart import warm_start

    if not dry_run and not torch.cuda.is_available():
        raise ValueError("gpu-check needs a CUDA device (torch.cuda.is_available() is False); use --dry-run on CPU")
    base, estimators, delays = settings(dry_run, out_dir)
    t_all = time.time()
    if not dry_run:
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    t0 = time.time()
    _, _, info = warm_start(base, progress=True)
    print(f"warm start: {base.warmstart.steps} steps, held-out accuracy {info['heldout_accuracy']:.3f} "
          f"({time.time() - t0:.1f} s incl. cache)")
    sweep = ex.Sweep(estimators=estimators, delays=delays, seeds=(base.seed,), base=base,
                     out_dir=os.path.join(out_dir, "dry" if dry_run else "full"))
    df = ex.run(sweep)
    metrics = pd.concat([pd.read_csv(os.path.join(cfg.out_dir, "metrics.csv")) for _, cfg in ex.grid(sweep)])
    print(f"throughput: {metrics['tokens_per_s'].median():.0f} completion tokens/s per learner step (median), "
          f"sampling alone {metrics['gen_tokens_per_s'].median():.0f} tokens/s")
    print(ex.table(df))
    print(ex.c9_verdict(df, quick=True))  # one seed, two delays: a path and throughput check, not a verdict
    print(f"total {time.time() - t_all:.1f} s")
    return 0
