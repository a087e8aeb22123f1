"""The GPU LM protocol (``python -m simulate.llm experiment --protocol gpu``; ``bash simulate/llm/gpu_run.sh``):
:data:`~simulate.llm.protocol.PROTOCOL_GPU` (v2) on one CUDA card, planned, guarded by a wall-clock limit, and its
results file for the report.

In order, printing as it goes:

1. **parity** (:func:`simulate.llm.gpu_check.parity`): CPU against the card on the same weights and batch;
2. **the plan** (:mod:`simulate.llm.gpu_plan`): the protocol's forest (16 seeds × 13 runs: the baseline at
   ``d = 0``, six estimators at ``d = 8`` and ``32``) on the batched engine in chunks of whole seeds
   (:func:`~simulate.llm.gpu_plan.seed_chunks`), each chunk's estimated peak memory within the card's usable memory
   (refused, naming the parameter, when not even one run fits), and the time: the warm start (its steps and FLOPs,
   :func:`~simulate.llm.gpu_plan.estimate_warmstart_seconds`), the chunks, and their sum against the limit;
3. **the warm start** (600 supervised steps of 256 in float32, shared by every seed), timed against its estimate;
4. **the chunks** (:func:`simulate.llm.gpu_run.run_chunks`, bf16 autocast), one after another; before each one the
   guard (:func:`next_chunk_fits`) predicts its time (the slowest chunk so far, else the plan's estimate) and stops
   the run when it would end past the limit, keeping :data:`RESERVE_S` for the analysis. After every chunk the
   results file is rewritten, so a run killed from outside still leaves the seeds it finished;
5. **the analysis** (:mod:`simulate.llm.analysis`, v8's rules: the Holm family at ``d_max``, the rate checks, the
   regime interval, the turning points) on the **complete seeds only** (every run of the seed finished); fewer
   than two complete seeds give no verdict.

Writes ``out_dir/llm_gpu.json`` (protocol and hash, device, plan and estimates, the seeds and chunks that ran,
``runs``: one :data:`simulate.llm.experiment.ROW_COLUMNS` row per run of a complete seed, verdict lines, timings,
peak memory, throughput and model FLOP utilisation) and ``parity.csv``. ``figures/fig_llm_delay.py`` merges it as the
report's "gpu-lm" answer group once it is committed as ``figures/out/llm_gpu.json``. ``dry_run``: the same path on
CPU (tiny preset, the protocol's quick variant, chunks of one seed) in seconds; its file says ``"dry_run": true`` and
the figure refuses it.
"""
from __future__ import annotations

import json
import math
import os
import time

from simulate.llm.gpu_plan import (
    CARDS,
    GiB,
    GpuPlan,
    check_fits,
    chunking,
    estimate_memory,
    estimate_seconds,
    estimate_warmstart_seconds,
    queue_lengths,
    seed_chunks,
    usable_bytes,
)
from simulate.llm.protocol import PROTOCOL_GPU

#: Name of the results file (in ``out_dir``; committed as ``figures/out/llm_gpu.json``).
RESULTS = "llm_gpu.json"
#: Seconds kept after the last chunk for the analysis and the results file.
RESERVE_S = 20.0


def plan_of(protocol=PROTOCOL_GPU, dry_run: bool = False, card: str = "h100") -> GpuPlan:
    """The protocol's forest as a :class:`~simulate.llm.gpu_plan.GpuPlan` (``dry_run``: its quick variant, tiny preset,
    on the CPU)."""
    q = protocol.variant(quick=dry_run)
    return GpuPlan(preset="tiny" if dry_run else q.preset, card="cpu" if dry_run else card,
                   precision="bf16-autocast" if q.autocast == "bfloat16" else "float32",
                   estimators=q.estimators, delays=q.delays, seeds=tuple(q.quick_seeds if dry_run else q.seeds),
                   n_prompts=q.quick_n_prompts if dry_run else q.n_prompts, G=q.G, max_new_tokens=q.max_new_tokens,
                   steps=q.quick_steps if dry_run else q.steps, eval_every=q.eval_every,
                   n_eval=q.quick_n_eval if dry_run else q.n_eval, digits=q.digits, pairs=q.runs())


def next_chunk_fits(now: float, deadline: float, chunk_seconds: list[float], estimate_s: float,
                    reserve_s: float = RESERVE_S) -> bool:
    """Whether the next chunk is predicted to end, with ``reserve_s`` to spare, by ``deadline``: its time is the
    slowest chunk so far (the first one carries the card's start-up), else ``estimate_s``."""
    predicted = max(chunk_seconds) if chunk_seconds else estimate_s
    return now + predicted + reserve_s <= deadline


def sized(plan: GpuPlan, dry_run: bool) -> dict:
    """The chunks of whole seeds and their estimates: ``{chunks, sizes, est, seconds, fit}`` (``est``: the
    largest chunk's memory terms, ``seconds``: :func:`~simulate.llm.gpu_plan.estimate_seconds` over the chunks);
    ``ValueError`` when not even one run fits. The dry run cuts chunks of one seed (the multi-chunk path on a CPU)."""
    ch = chunking(plan)
    check_fits(plan, ch)
    fit = min(ch["fit"], len(plan.run_pairs())) if dry_run else ch["fit"]
    chunks = seed_chunks(plan, fit)
    kept = queue_lengths(plan)
    ests = [estimate_memory(plan, [kept[i] for i in c]) for c in chunks]
    est = max(ests, key=lambda e: e["peak"])
    sizes = [len(c) for c in chunks]
    return dict(chunks=chunks, sizes=sizes, est=est, fit=fit, seconds=estimate_seconds(plan, sizes))


def describe_run(plan: GpuPlan, sz: dict, ws: dict, parity_s: float, limit_s: float, parity: str = "measured") -> str:
    """The plan's lines (:func:`~simulate.llm.gpu_plan.describe`) and the warm start's and the whole run's time."""
    from simulate.llm.gpu_plan import describe

    ch = dict(chunks=len(sz["chunks"]), size=max(sz["sizes"]), est=sz["est"])
    sec = sz["seconds"]
    per = len(plan.run_pairs())
    total = parity_s + ws["total_s"] + sec["total_s"]
    return "\n".join([
        describe(plan, ch, sec).replace("; warm start not included)", ")"),
        f"  chunks: {len(sz['chunks'])} of whole seeds ({per} runs per seed, at most {sz['fit']} runs per chunk), "
        f"{sec['total_s'] / len(sz['chunks']):.1f} s each estimated",
        f"  warm start estimate: {ws['steps']} steps x {ws['step_s'] * 1e3:.0f} ms ({ws['flops'] / 1e15:.2f} PFLOP in "
        f"float32) + held-out evaluation {ws['eval_s']:.1f} s = {ws['total_s']:.0f} s",
        f"  total estimate: parity {parity_s:.0f} s ({parity}) + warm start {ws['total_s']:.0f} s + chunks "
        f"{sec['total_s']:.0f} s = {total:.0f} s; limit {limit_s:.0f} s (the guard stops before a chunk predicted to "
        f"end past it)",
    ])


def _complete(plan: GpuPlan, cfgs: list, done: list[int]) -> list[int]:
    """The seeds every run of which is done."""
    from collections import Counter

    n_done, per = Counter(cfgs[i].seed for i in done), len(plan.run_pairs())
    return [s for s in plan.seeds if n_done[s] == per]


def _rows(cfgs, summaries, done, seeds, chunk_seconds) -> list[dict]:
    from simulate.llm import experiment as ex

    per_run = sum(chunk_seconds) / max(len(done), 1)
    return [ex.run_row(cfgs[i], s, 1.0, per_run) for i, s in zip(done, summaries) if cfgs[i].seed in seeds]


def analyse(rows: list[dict], dry_run: bool, protocol=PROTOCOL_GPU) -> dict:
    """The verdict lines and tables of the complete seeds' rows (v8's rules), or a line saying why there are none."""
    import pandas as pd

    from simulate.llm import analysis

    df = pd.DataFrame(rows)
    if df.empty or df["seed"].nunique() < 2:
        return dict(c9_lines=[f"C9 at LM scale: no verdict ({df['seed'].nunique() if len(df) else 0} complete seeds; "
                              "the paired comparisons need 2)"], verdict="not run")
    res = analysis.c9_result(df, protocol, quick=dry_run)
    q = protocol.variant(quick=dry_run)
    return dict(c9_lines=res.lines, verdict=res.verdict, table=analysis.table(df, protocol.metric),
                learning_gain=analysis.learning_gain(df, q), regime=analysis.regime(df, q),
                turning_points=analysis.turning_points(df, protocol, quick=dry_run))


def results_name(protocol=PROTOCOL_GPU) -> str:
    """The results file of ``protocol``: :data:`RESULTS` for the GPU protocol v2 (the report's "gpu-lm" row),
    ``llm_gpu-<name>.json`` for another preset (kept apart: it never feeds that row)."""
    return RESULTS if protocol.name == PROTOCOL_GPU.name else f"llm_gpu-{protocol.name}.json"


def _write(out_dir: str, report: dict, name: str = RESULTS) -> None:
    """The results file, replaced atomically (the sweep cache's write: temp file, fsync, rename)."""
    from pathlib import Path

    from sweep.cache import atomic_write_bytes

    atomic_write_bytes(Path(out_dir) / name, json.dumps(report, indent=1, default=float).encode())


def main(out_dir: str = "results/llm/gpu_protocol", dry_run: bool = False, card: str = "h100",
         limit_s: float = 500.0, start: float | None = None, protocol=PROTOCOL_GPU) -> int:
    """Run a GPU protocol (module docstring; ``protocol``: :data:`~simulate.llm.protocol.PROTOCOL_GPU` or another
    registered GPU preset, :data:`~simulate.llm.protocol.GPU_PROTOCOLS`); ``limit_s`` counts from ``start`` (epoch
    seconds; default now: the shell passes its own start, so its checks count). Returns 0, or 1 when the parity
    fails."""
    import pandas as pd
    import torch

    from simulate.llm.gpu_check import PARITY_RTOL, parity
    from simulate.llm.gpu_run import run_chunks

    if not dry_run and not torch.cuda.is_available():
        raise ValueError(f"--protocol {protocol.name} needs a CUDA device (torch.cuda.is_available() is False); add "
                         "--dry-run on CPU")
    if not (isinstance(limit_s, (int, float)) and limit_s > 0):
        raise ValueError(f"--limit-s must be a number > 0, got {limit_s!r}")
    start = time.time() if start is None else float(start)
    deadline = start + limit_s
    device = "cpu" if dry_run else "cuda"
    plan = plan_of(protocol, dry_run, card)
    os.makedirs(out_dir, exist_ok=True)
    name = results_name(protocol)
    report = {"device": torch.cuda.get_device_name(0) if not dry_run else "cpu (dry run)", "torch": torch.__version__,
              "dry_run": dry_run, "protocol": protocol.to_dict(), "protocol_hash": protocol.content_hash(),
              "engine": "batched (simulate/llm/batched.py), rollouts queued, chunks of whole seeds",
              "precision": plan.precision, "card": CARDS[plan.card]["name"], "limit_s": limit_s,
              "seeds_planned": list(plan.seeds), "seeds_done": [], "status": "started"}
    print(f"device: {report['device']}; torch {torch.__version__}; protocol {protocol.name} "
          f"{report['protocol_hash']}", flush=True)

    t0 = time.perf_counter()
    par = parity(device, presets=("tiny",) if dry_run else ("tiny", "small"), n=16 if dry_run else 64)
    report.update(parity=par, parity_ok=all(r["ok"] for r in par), parity_seconds=time.perf_counter() - t0)
    print(f"CPU-vs-{device} parity (tolerance {PARITY_RTOL:g}): " + ("pass" if report["parity_ok"] else "FAIL")
          + f"; largest relative difference {max(r['rel_diff'] for r in par):.2g}", flush=True)
    pd.DataFrame(par).to_csv(os.path.join(out_dir, "parity.csv"), index=False)

    sz = sized(plan, dry_run)
    from simulate.llm.gpu_run import configs

    got_cfgs = configs(plan, device, out_dir)
    ws = estimate_warmstart_seconds(plan, got_cfgs[0].warmstart.steps, got_cfgs[0].warmstart.batch_size)
    print(describe_run(plan, sz, ws, report["parity_seconds"], limit_s), flush=True)
    if dry_run:  # what the card will run, for the record (its parity is measured there)
        card_plan = plan_of(protocol, False, card)
        ws_card = estimate_warmstart_seconds(card_plan, protocol.warmstart_steps, protocol.warmstart_batch_size)
        report["card_plan"] = describe_run(card_plan, sized(card_plan, False), ws_card, 0.0, limit_s, "not included")
        print(f"the card's plan ({card}), for the record:\n" + report["card_plan"], flush=True)
    sec = sz["seconds"]
    report.update(plan=dict(runs=plan.runs, runs_per_seed=len(plan.run_pairs()), chunks=len(sz["chunks"]),
                            chunk_sizes=sz["sizes"], fit=sz["fit"], peak_estimate_bytes=sz["est"]["peak"],
                            usable_bytes=usable_bytes(plan), chunks_estimate_s=sec["total_s"],
                            warmstart_estimate_s=ws["total_s"],
                            total_estimate_s=report["parity_seconds"] + ws["total_s"] + sec["total_s"]))
    _write(out_dir, report, name)
    per_chunk = sec["total_s"] / len(sz["chunks"])

    def go_on(j, chunk_s):
        if next_chunk_fits(time.time(), deadline, chunk_s, per_chunk):
            return True
        print(f"guard: chunk {j + 1} of {len(sz['chunks'])} would end past the limit ({time.time() - start:.0f} s "
              f"used of {limit_s:.0f} s; a chunk takes up to {max(chunk_s or [per_chunk]):.0f} s): stopping", flush=True)
        return False

    def on_chunk(j, done, summaries):  # the results so far: a run killed from outside keeps the seeds it finished
        seeds = _complete(plan, got_cfgs, done)
        for i in sorted(done):
            if got_cfgs[i].seed in seeds and i not in rows_of:
                rows_of[i] = _rows(got_cfgs, [summaries[i]], [i], {got_cfgs[i].seed}, [0.0])[0]
        report.update(chunks_done=j + 1, seeds_done=seeds, runs=[rows_of[i] for i in sorted(rows_of)],
                      status=f"partial: written after chunk {j + 1}; the run did not reach its end")
        _write(out_dir, report, name)

    rows_of: dict = {}

    from simulate.llm.warmstart import warm_start

    t0 = time.perf_counter()  # trained here (float32, before any autocast) and cached: the chunks load it
    info = warm_start(got_cfgs[0], progress=False)[2]
    report.update(warmstart_seconds=time.perf_counter() - t0, warmstart_accuracy=info["heldout_accuracy"])
    print(f"warm start: {report['warmstart_seconds']:.1f} s (estimate {ws['total_s']:.0f} s), held-out accuracy "
          f"{info['heldout_accuracy']:.3f}", flush=True)
    _write(out_dir, report, name)
    got = run_chunks(plan, out_dir, device=device, chunks=sz["chunks"], go_on=go_on, on_chunk=on_chunk)
    seeds = _complete(plan, got["cfgs"], got["done"])
    rows = _rows(got["cfgs"], got["summaries"], got["done"], set(seeds), got["chunk_seconds"])
    n_chunks = len(got["chunk_seconds"])
    L = sz["est"]["P"] + sz["est"]["T"]
    flops = 8 * plan.shape().params * plan.n_prompts * plan.G * L * plan.steps * len(got["done"])
    peak_fl = CARDS[plan.card]["float32" if plan.precision == "float32" else "bf16"]
    tps = float(pd.concat([pd.read_csv(os.path.join(got["cfgs"][i].out_dir, "metrics.csv")) for i in got["done"]])
                ["tokens_per_s"].median()) if got["done"] else math.nan
    report.update(status="stopped by the time limit" if got["stopped"] else "complete", seeds_done=seeds,
                  chunks_done=n_chunks, oom_splits=got["oom_splits"], runs_done=len(got["done"]), runs=rows,
                  chunk_seconds=got["chunk_seconds"],
                  runs_seconds=got["seconds"], peak_bytes=got["peak"], chunk_peak_bytes=got["chunk_peaks"],
                  train_tokens_per_s=tps, mfu=flops / max(sum(got["chunk_seconds"]), 1e-9) / peak_fl if n_chunks else None,
                  mfu_note="8·p·N·L FLOPs per run-step (learner 6, decode 2; evaluations left out) over the chunks' "
                           f"wall time, against the card's dense {'float32' if plan.precision == 'float32' else 'bf16'} peak")
    report.update(analyse(rows, dry_run, protocol))
    report["total_seconds"] = time.time() - start
    if "table" in report:
        print(report["table"])
    print("\n".join(report["c9_lines"] if not dry_run else ["dry run: " + ln for ln in report["c9_lines"]]))
    if "regime" in report:
        from simulate.llm import analysis

        print(analysis.regime_line(report["regime"], protocol.variant(quick=dry_run).d_max))
        g = report["learning_gain"]
        print(f"learning at d=0: gain {g['mean']:+.3f} [{g['lo']:+.3f}, {g['hi']:+.3f}] (n={g['n']})")
    peak = f"peak {got['peak'] / GiB:.2f} GiB (estimate {sz['est']['peak'] / GiB:.2f}); " if got["peak"] else ""
    print(f"throughput: {tps:.0f} completion tokens/s per learner step; model FLOP utilisation "
          f"{report['mfu'] or math.nan:.1%} of the dense peak; {peak}")
    print(f"total {report['total_seconds']:.1f} s (parity {report['parity_seconds']:.0f}, warm start "
          f"{report['warmstart_seconds']:.0f}, chunks {got['seconds']:.0f}); {report['status']}: seeds {len(seeds)} of "
          f"{len(plan.seeds)}, chunks {n_chunks} of {got['chunks']}" + (f" ({got['oom_splits']} split after running out of "
          "memory)" if got["oom_splits"] else ""), flush=True)
    _write(out_dir, report, name)
    return 0 if report["parity_ok"] else 1
