"""The GPU LM protocol (``python -m simulate.llm experiment --protocol gpu``): :data:`PROTOCOL_GPU` on one CUDA
device within a wall-time budget, and its results file for the report.

Same rules as the CPU protocol (:mod:`simulate.llm.protocol`: the Holm family of paired comparisons at
``d_max``, the rate checks, the regime label from an interval, the turning points), on the ``gpu`` preset
(~85M parameters, bf16 weights, float32 log-probs, 3-digit sums) at ``d ∈ {0, 2, 4, 8, 16, 32}``. One warm
start is shared by every seed (``warmstart_seed``) and computed first; the seeds' forests
(:mod:`simulate.llm.tree`) then run ``workers`` (default 6) at a time as separate processes on the one device (the
harness is Python-bound: a forest keeps the card ~1 % busy, issue 35), batch after batch while the next
batch is predicted to fit in ``budget_s``. The seeds that ran are stated in the results; the verdicts use
those seeds (12 planned).

Determinism: :func:`simulate.llm.portability.set_determinism` asks for deterministic algorithms
(``warn_only``), sets ``CUBLAS_WORKSPACE_CONFIG`` and holds attention to its math kernel; the CPU-vs-GPU
parity (:func:`simulate.llm.gpu_check.parity`, relative tolerance ``PARITY_RTOL``) runs first. Writes
``out_dir/llm_gpu.json`` (protocol, runs, verdict lines, timings, throughput, parity), which
``figures/fig_llm_delay.py`` merges as the "gpu-lm" answer group once it is committed as
``figures/out/llm_gpu.json``. ``dry_run``: the same path on CPU with the tiny preset and the quick
variant in seconds (tested); its file says ``"dry_run": true`` and the figure refuses it.
"""
from __future__ import annotations

import json
import math
import os
import time

from simulate.llm.protocol import PROTOCOL_GPU

#: Name of the results file (in ``out_dir``; committed as ``figures/out/llm_gpu.json``).
RESULTS = "llm_gpu.json"


def base_config(dry_run: bool, out_dir: str):
    """The runs' settings: the protocol's (``dry_run``: its quick variant on CPU, tiny preset)."""
    from simulate.llm import experiment as ex

    base = ex.protocol_base(PROTOCOL_GPU, quick=dry_run, cache_dir=os.path.join(out_dir, "cache"))
    if dry_run:
        base = base.replace(device="cpu", preset="tiny", threads=1)
    return base


def _fresh_tokens_per_s(sweep, fresh_seeds) -> float:
    """Median completion tokens/s per learner step over the runs computed in this call (cached cells'
    metrics were measured earlier and are left out); NaN when none ran here."""
    import pandas as pd

    from simulate.llm import experiment as ex

    frames = [pd.read_csv(os.path.join(cfg.out_dir, "metrics.csv")) for _, cfg in ex.grid(sweep)
              if cfg.seed in fresh_seeds and os.path.exists(os.path.join(cfg.out_dir, "metrics.csv"))]
    return float(pd.concat(frames)["tokens_per_s"].median()) if frames else math.nan


def main(out_dir: str = "results/llm/gpu_protocol", budget_s: float = 420.0, dry_run: bool = False,
         workers: int | None = None, overwrite: bool = False) -> int:
    """Run the GPU protocol (module docstring); print its tables and verdict lines and write
    :data:`RESULTS`. Returns 0, or 1 when the CPU-vs-GPU parity fails."""
    import pandas as pd
    import torch
    from sweep import load_cells

    from simulate.llm import analysis
    from simulate.llm import experiment as ex
    from simulate.llm.gpu_check import PARITY_RTOL, parity

    if not dry_run and not torch.cuda.is_available():
        raise ValueError("--protocol gpu needs a CUDA device (torch.cuda.is_available() is False); add --dry-run on CPU")
    if not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise ValueError(f"--budget-s must be a number > 0, got {budget_s!r}")
    t_all = time.perf_counter()
    protocol = PROTOCOL_GPU.variant(quick=dry_run)
    seeds = tuple(PROTOCOL_GPU.quick_seeds if dry_run else PROTOCOL_GPU.seeds)
    workers = workers or (1 if dry_run else 6)  # ~11 GB of snapshots and states per process on the gpu preset
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    device = "cpu" if dry_run else "cuda"
    os.makedirs(out_dir, exist_ok=True)
    report = {"device": torch.cuda.get_device_name(0) if not dry_run else "cpu (dry run)", "torch": torch.__version__,
              "dry_run": dry_run, "protocol": PROTOCOL_GPU.to_dict(), "protocol_hash": PROTOCOL_GPU.content_hash(),
              "budget_s": budget_s, "workers": workers, "seeds_planned": list(seeds)}
    print(f"device: {report['device']}; torch {torch.__version__}; protocol {PROTOCOL_GPU.name} "
          f"{report['protocol_hash']}", flush=True)

    t0 = time.perf_counter()
    par = parity(device, presets=("tiny",) if dry_run else ("tiny", "small"), n=16 if dry_run else 64)
    report.update(parity=par, parity_ok=all(r["ok"] for r in par), parity_seconds=time.perf_counter() - t0)
    print(f"CPU-vs-{device} parity (tolerance {PARITY_RTOL:g}): " + ("pass" if report["parity_ok"] else "FAIL")
          + f"; largest relative difference {max(r['rel_diff'] for r in par):.2g}", flush=True)

    base = base_config(dry_run, out_dir)
    runs_dir = os.path.join(out_dir, "runs-dry" if dry_run else "runs")
    whole = ex.Sweep(estimators=protocol.estimators, delays=protocol.delays, seeds=seeds, base=base, out_dir=runs_dir,
                     pairs=protocol.runs())
    t0 = time.perf_counter()
    infos = ex.prepare_warm_starts(whole, progress=False)
    report.update(warmstart_seconds=time.perf_counter() - t0, warmstart_accuracy=infos[0]["heldout_accuracy"])
    print(f"warm start: {base.warmstart.steps} steps, held-out accuracy {infos[0]['heldout_accuracy']:.3f} "
          f"({report['warmstart_seconds']:.1f} s incl. cache)", flush=True)

    t_runs = time.perf_counter()
    done, fresh, batch_s = [], [], []
    for i in range(0, len(seeds), workers):
        batch = seeds[i:i + workers]
        used = time.perf_counter() - t_runs
        if batch_s and used + max(batch_s) > budget_s:
            print(f"budget: seeds {list(seeds[i:])} left out ({used:.0f} s used of {budget_s:.0f} s; a batch took "
                  f"up to {max(batch_s):.0f} s)", flush=True)
            break
        sw = ex.Sweep(estimators=protocol.estimators, delays=protocol.delays, seeds=batch, base=base, out_dir=runs_dir,
                      pairs=protocol.runs())
        cached = set(load_cells(ex.to_sweep(sw), os.path.join(runs_dir, "cells")))
        t0 = time.perf_counter()
        ex.run(sw, progress=False, backend="serial" if workers == 1 else "local", overwrite=overwrite,
               **({} if workers == 1 else {"n_workers": min(workers, len(batch))}))
        batch_s.append(time.perf_counter() - t0)
        done += list(batch)
        fresh += [s for s in batch if f"s{s}" not in cached]
        print(f"seeds {list(batch)}: {batch_s[-1]:.0f} s" + (f" (cached: {sorted(cached)})" if cached else ""), flush=True)
    final = ex.Sweep(estimators=protocol.estimators, delays=protocol.delays, seeds=tuple(done), base=base,
                     out_dir=runs_dir, pairs=protocol.runs())
    df = ex.run(final, progress=False, backend="serial", overwrite=overwrite)  # every cell is stored: loads only
    res = analysis.c9_result(df, PROTOCOL_GPU, quick=dry_run)
    tps = _fresh_tokens_per_s(final, set(fresh))
    report.update(seeds_done=done, seeds_measured_here=fresh, runs_seconds=time.perf_counter() - t_runs,
                  batch_seconds=batch_s, train_tokens_per_s=tps,
                  train_tokens_per_s_note=("median over the runs computed in this call" if fresh else
                                           "cached: every run was computed by an earlier call, not measured now"),
                  c9_lines=res.lines, verdict=res.verdict, table=analysis.table(df, PROTOCOL_GPU.metric),
                  learning_gain=analysis.learning_gain(df, protocol), regime=analysis.regime(df, protocol),
                  turning_points=analysis.turning_points(df, PROTOCOL_GPU, quick=dry_run),
                  runs=df[[c for c in ex.ROW_COLUMNS if c != "seconds"]].to_dict("records"))
    print(report["table"])
    print("\n".join(res.lines if not dry_run else ["dry run: " + ln for ln in res.lines]))
    print(analysis.regime_line(report["regime"], protocol.d_max))
    g = report["learning_gain"]
    print(f"learning at d=0: gain {g['mean']:+.3f} [{g['lo']:+.3f}, {g['hi']:+.3f}] (n={g['n']})")
    print(f"throughput: {tps:.0f} completion tokens/s per learner step ({report['train_tokens_per_s_note']})")
    report["total_seconds"] = time.perf_counter() - t_all
    print(f"total {report['total_seconds']:.1f} s (parity {report['parity_seconds']:.0f}, warm start "
          f"{report['warmstart_seconds']:.0f}, runs {report['runs_seconds']:.0f}); seeds {done} of {list(seeds)}")
    with open(os.path.join(out_dir, RESULTS), "w") as f:
        json.dump(report, f, indent=1, default=float)
    pd.DataFrame(par).to_csv(os.path.join(out_dir, "parity.csv"), index=False)
    return 0 if report["parity_ok"] else 1
