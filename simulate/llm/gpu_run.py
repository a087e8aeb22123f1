"""``python -m simulate.llm gpu-run [--dry-run]``: print a GPU run's plan (:mod:`simulate.llm.gpu_plan`: the forest in
the fewest chunks of runs that fit the card), refuse it when not even one run fits, then run the chunks one after
another — or, with ``--dry-run``, a tiny forest of the same engine on CPU.

The dry run needs no GPU (tested on CPU): it prints the plan for the card, checks that it fits, and runs a tiny
forest (``tiny`` preset, two seeds in one batch, rollouts queued) under the memory profiler, to set the estimate
beside a measurement. **How the peak is measured**: the tensors alive before the forest (the warm start) plus the
largest running sum of the step's allocations and frees as ``torch.profiler`` records them
(``profile_memory=True``: every allocation of torch's CPU allocator, in time order). This counts tensor memory,
what ``torch.cuda.max_memory_allocated`` counts on a card; it leaves out the Python heap and the libraries'
own buffers, which on a card live outside the allocator as well (the :data:`~simulate.llm.gpu_plan.HEADROOM`).
On a card the run itself reports ``torch.cuda.max_memory_allocated`` against the estimate.
"""
from __future__ import annotations

import copy
import os
import time
from dataclasses import replace

from simulate.llm.gpu_plan import (
    GiB,
    GpuPlan,
    check_fits,
    chunking,
    chunks_of,
    describe,
    estimate_memory,
    estimate_seconds,
)

#: The dry run's forest: the engine's every part (two seeds sharing a batch, two estimators, a delay with
#: queued rollouts, a held-out evaluation in the last step) at a size a CPU runs in seconds.
TINY = GpuPlan(preset="tiny", precision="float32", card="cpu", estimators=("gmc", "tic"), delays=(0, 2), seeds=(0, 1),
               n_prompts=4, G=4, steps=4, eval_every=4, n_eval=16, digits=3)


def configs(plan: GpuPlan, device: str, out_dir: str, protocol=None) -> list:
    """One :class:`simulate.llm.config.TrainConfig` per run of the plan (a forest: they differ only per run; seeds ×
    :meth:`~simulate.llm.gpu_plan.GpuPlan.run_pairs`); the RL and warm-start settings are ``protocol``'s (default the
    registered GPU protocol, :data:`simulate.llm.protocol.PROTOCOL_GPU`), the warm start cut to 5 steps of 16 on CPU."""
    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
    from simulate.llm.protocol import PROTOCOL_GPU

    P = protocol or PROTOCOL_GPU
    cpu = device == "cpu"
    base = TrainConfig(preset=plan.preset, device=device, dtype="float32",  # autocast lowers products, not state
                       threads=1, steps=plan.steps, n_prompts=plan.n_prompts, G=plan.G, eval_every=plan.eval_every,
                       D=plan.D, max_new_tokens=plan.max_new_tokens, eta=P.eta, warmup_steps=P.warmup_steps,
                       adv_norm=P.adv_norm, length_normalize=P.length_normalize, warmstart_seed=P.warmstart_seed,
                       task=TaskConfig(task="arithmetic", digits=plan.digits, n_eval=plan.n_eval),
                       warmstart=WarmStartConfig(steps=5 if cpu else P.warmstart_steps,
                                                 batch_size=16 if cpu else P.warmstart_batch_size, eta=P.warmstart_eta),
                       cache_dir=os.path.join(out_dir, "cache"))
    return [base.replace(estimator=e, d=d, seed=s, out_dir=os.path.join(out_dir, "runs", f"s{s}-{e}-d{d}"))
            for s in plan.seeds for e, d in plan.run_pairs()]


def _autocast(plan: GpuPlan, device: str):
    import contextlib

    import torch

    if plan.precision == "bf16-autocast":
        return torch.autocast(device_type=device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _live_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a view or a shared tensor counted once)."""
    seen = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _state_tensors(states, model0):
    for st in states:
        for p in st.model.parameters():
            yield p
            if p.grad is not None:
                yield p.grad
        for s in st.opt.state.values():
            yield from (v for v in s.values() if hasattr(v, "untyped_storage"))
    yield from model0.parameters()


def _profiled_peak(fn) -> tuple[int, object]:
    """``(largest running sum of the allocations minus frees during fn(), its result)`` by ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _t, n in events:
        live += n
        peak = max(peak, live)
    return peak, out


def tiny_step(plan: GpuPlan, out_dir: str) -> dict:
    """Run the plan's forest on CPU from its warm start to its last step under the profiler (module docstring);
    returns the measured peak, its parts and the last step's seconds."""
    from simulate.llm import stacked_model as sm
    from simulate.llm import tasks
    from simulate.llm.batched import forest_step
    from simulate.llm.portability import set_determinism
    from simulate.llm.rollout_queue import RolloutQueue
    from simulate.llm.train import _loss_options, delay_schedule, new_state
    from simulate.llm.warmstart import warm_start

    cfgs = configs(plan, "cpu", out_dir)
    set_determinism(cfgs[0])
    model0, tok, _info = warm_start(cfgs[0], progress=False)
    arch, names = sm.arch_of(model0), sm.weight_names(model0)
    sched, loss_opts = [delay_schedule(c) for c in cfgs], [_loss_options(c) for c in cfgs]
    evalset = tasks.eval_set(cfgs[0].task)
    before = _live_bytes(model0.parameters())  # allocated before the profiler starts, alive throughout
    seconds, queued = [], []

    def forest():
        # the states are made under the profiler too: a block it saw allocated is one it can see freed
        states = [new_state(c, copy.deepcopy(model0), snapshots=False) for c in cfgs]
        queue = RolloutQueue(cfgs, sched, {}, tok, names, arch)
        for k in range(plan.steps):
            t0 = time.perf_counter()
            with _autocast(plan, "cpu"):
                rows = forest_step(cfgs, states, queue, k, tok=tok, evalset=evalset, names=names, arch=arch,
                                   loss_opts=loss_opts)
            seconds.append(time.perf_counter() - t0)
            queued.append(queue.queued_bytes())
        return states, rows

    extra, (states, rows) = _profiled_peak(forest)
    return dict(resident=_live_bytes(_state_tensors(states, model0)), peak=before + extra, seconds=seconds[-1],
                queued_max=max(queued), runs=len(cfgs), rewards=[r["reward"] for r in rows],
                heldout_acc=[r["heldout_acc"] for r in rows])


def run_chunks(plan: GpuPlan, out_dir: str, sizes: list[int] | None = None, device: str = "cuda", *,
               chunks: list[list[int]] | None = None, protocol=None, go_on=None, on_chunk=None) -> dict:
    """The plan's forest on ``device`` in chunks, one after another (:func:`simulate.llm.batched.train_forest_batched`
    each): consecutive runs of ``sizes``, or ``chunks`` (lists of run indices, e.g.
    :func:`simulate.llm.gpu_plan.seed_chunks`). The warm start is trained (or loaded) first, in float32, and timed.
    ``go_on(j, chunk_seconds)``: asked before chunk ``j`` (``False`` stops the run there); ``on_chunk(j, done, got)``:
    called after it with the indices of every run done so far and ``{index: summary}``. A chunk that runs out of memory is tried again as
    two halves (``oom_splits`` counts them; one run that does not fit raises). Returns the wall times, the runs done (``done``:
    indices, ``summaries`` in that order, ``cfgs``: all configs) and, on CUDA, the measured peak
    (``torch.cuda.max_memory_allocated``, per chunk and over all)."""
    import torch

    from simulate.llm.batched import train_forest_batched, warm_starts
    from simulate.llm.config import warmstart_key
    from simulate.llm.warmstart import warm_start

    cfgs = configs(plan, device, out_dir, protocol)
    cuda = device == "cuda"
    t0 = time.perf_counter()
    infos = [warm_start(c, progress=False)[2]  # trained (or loaded) in float32 before any autocast:
             for c in {warmstart_key(c): c for c in cfgs}.values()]  # the cache key does not know autocast
    with _autocast(plan, device):  # loaded once for every chunk (held-out accuracy measured as the chunks would)
        warm = warm_starts(cfgs)
    ws_seconds = time.perf_counter() - t0
    groups = chunks if chunks is not None else chunks_of(list(range(len(cfgs))), sizes or [len(cfgs)])
    todo, done, got, chunk_s, peaks, stopped, splits = [list(g) for g in groups], [], {}, [], [], False, 0
    oom = getattr(torch, "OutOfMemoryError", RuntimeError)
    t0 = time.perf_counter()
    while todo:
        j, idx = len(chunk_s), todo.pop(0)
        if go_on is not None and not go_on(j, list(chunk_s)):
            stopped = True
            break
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t1 = time.perf_counter()
        try:
            with _autocast(plan, device):
                out = train_forest_batched([cfgs[i] for i in idx], warm=warm)
        except oom:  # the estimate was short: the chunk in two halves, tried again (a run's numbers do not change)
            if len(idx) == 1:
                raise
            half = (len(idx) + 1) // 2
            todo[:0] = [idx[:half], idx[half:]]
            splits += 1
            print(f"  chunk {j + 1}: out of memory with {len(idx)} runs after {time.perf_counter() - t1:.0f} s; "
                  f"split into {half} + {len(idx) - half}", flush=True)
            out = None
        if out is None:
            import gc

            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
            continue
        got.update(zip(idx, out))
        chunk_s.append(time.perf_counter() - t1)
        peaks.append(torch.cuda.max_memory_allocated() if cuda else None)
        done += list(idx)
        print(f"  chunk {j + 1}/{j + 1 + len(todo)}: {len(idx)} runs in {chunk_s[-1]:.1f} s, {time.perf_counter() - t0:.0f} "
              f"s so far" + (f", peak {peaks[-1] / GiB:.2f} GiB" if cuda else ""), flush=True)
        if on_chunk is not None:
            on_chunk(j, list(done), dict(got))
    done = sorted(done)
    return dict(peak=max(peaks) if cuda and peaks else None, chunk_peaks=peaks, seconds=time.perf_counter() - t0,
                chunk_seconds=chunk_s, warmstart_seconds=ws_seconds, warmstart_info=infos[0], done=done,
                summaries=[got[i] for i in done], cfgs=cfgs, stopped=stopped, chunks=len(chunk_s) + len(todo) + stopped,
                oom_splits=splits)


def main(plan: GpuPlan, *, dry_run: bool, out_dir: str = "results/llm/gpu_run", tiny: GpuPlan = TINY) -> int:
    """Print the plan, refuse it if it does not fit (``ValueError`` naming the parameter), then run it (or, with
    ``dry_run``, the tiny step on CPU with its estimate beside the measured peak)."""
    import torch

    ch = chunking(plan)
    sec = estimate_seconds(plan, ch["sizes"] or [1])
    print(describe(plan, ch, sec), flush=True)
    check_fits(plan, ch)
    print(f"  fits: yes, in {ch['chunks']} chunk{'s' * (ch['chunks'] > 1)} of {ch['size']} runs or one fewer"
          if ch["chunks"] > 1 else "  fits: yes, in one batch", flush=True)
    est = ch["est"]
    if not dry_run:
        if not torch.cuda.is_available():
            raise ValueError("gpu-run needs a CUDA device (torch.cuda.is_available() is False); add --dry-run on CPU")
        got = run_chunks(plan, out_dir, ch["sizes"])
        print(f"ran: peak {got['peak'] / GiB:.2f} GiB (estimate {est['peak'] / GiB:.2f}), {got['seconds']:.0f} s "
              f"(estimate {sec['total_s']:.0f} s)")
        return 0
    tiny = replace(tiny, precision=plan.precision)
    t_est = estimate_memory(tiny)
    print(f"dry run: a tiny forest on CPU ({tiny.preset} preset, {t_est['runs']} runs = "
          f"{len(tiny.seeds)} seeds x {len(tiny.estimators)} estimators x {len(tiny.delays)} delays, "
          f"{tiny.precision})", flush=True)
    got = tiny_step(tiny, out_dir)
    ratio = t_est["peak"] / got["peak"]
    print(f"  step {tiny.steps - 1}: {got['seconds']:.2f} s; mean reward {sum(got['rewards']) / len(got['rewards']):.3f}")
    print(f"  memory: estimate {t_est['peak'] / 2**20:.1f} MiB, measured peak {got['peak'] / 2**20:.1f} MiB "
          f"(resident after the run {got['resident'] / 2**20:.1f}, queued rollouts at most "
          f"{got['queued_max'] / 2**20:.2f} (estimate {t_est['queued'] / 2**20:.2f}); estimate resident "
          f"{t_est['resident'] / 2**20:.1f} + {t_est['worst_phase']} {t_est['phases'][t_est['worst_phase']] / 2**20:.1f}"
          f"); estimate / measured = {ratio:.2f}")
    return 0


def add_parser(sub) -> None:
    """The ``gpu-run`` subcommand (``python -m simulate.llm gpu-run --help``); defaults are :class:`GpuPlan`'s."""
    from simulate.llm.gpu_plan import CARDS, PRECISIONS

    d = GpuPlan()
    p = sub.add_parser("gpu-run", help="plan, size and run the LM forest on one GPU in one batch (--dry-run: CPU)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its fit, then one tiny step on CPU")
    p.add_argument("--card", choices=tuple(CARDS), default=d.card)
    p.add_argument("--precision", choices=PRECISIONS, default=d.precision)
    p.add_argument("--preset", default=d.preset)
    p.add_argument("--estimators", default=",".join(d.estimators))
    p.add_argument("--delays", default=",".join(map(str, d.delays)))
    p.add_argument("--seeds", type=int, default=len(d.seeds), help="seeds 0..n-1, all in one batch")
    for name in ("n_prompts", "G", "max_new_tokens", "steps", "eval_every", "n_eval", "digits"):
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=getattr(d, name))
    p.add_argument("--experiment-dir", default="results/llm/gpu_run")
    p.set_defaults(_main=cmd)


def cmd(args) -> int:
    from asyncgrpo.validation import parse_list

    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    plan = GpuPlan(preset=args.preset, precision=args.precision, card=args.card,
                   estimators=tuple(parse_list(args.estimators, "--estimators", str, "estimator names")),
                   delays=tuple(parse_list(args.delays, "--delays", int, "integers")), seeds=tuple(range(args.seeds)),
                   n_prompts=args.n_prompts, G=args.G, max_new_tokens=args.max_new_tokens, steps=args.steps,
                   eval_every=args.eval_every, n_eval=args.n_eval, digits=args.digits)
    return main(plan, dry_run=args.dry_run, out_dir=args.experiment_dir)
