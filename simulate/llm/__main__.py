"""``python -m simulate.llm train|warmstart|experiment|gpu-check``: the LLM validation harness.

The CLI mirrors :class:`simulate.llm.config.TrainConfig`: every field is a ``--flag`` with its
docstring default. Example (tiny model, stale rollouts, CPU, a couple of minutes)::

    python -m simulate.llm train --estimator gmc --delay 4 --steps 40
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from simulate.commands import run_cli

from simulate.llm.config import ALL_ESTIMATORS, DELAY_MODES, PRESETS, TASKS, TaskConfig, TrainConfig, WarmStartConfig


def _add_config_args(p: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("task", "warmstart"):
            continue
        default = getattr(d, f.name)
        flag = "--" + f.name.replace("_", "-")
        if f.name == "model_path":
            p.add_argument("--model", dest="model_path", default=None, metavar="PATH",
                           help="local checkpoint directory (config, weights, tokenizer); never downloaded")
        elif isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            kw = {"type": int if default is None else type(default), "default": default}
            if f.name == "estimator":
                kw["choices"] = ALL_ESTIMATORS
            if f.name == "delay_mode":
                kw["choices"] = DELAY_MODES
            if f.name == "preset":
                kw["choices"] = tuple(PRESETS)
            p.add_argument(flag, help=f"(default {default})", **kw)
    p.add_argument("--task", choices=TASKS, default=TaskConfig.task)
    p.add_argument("--digits", type=int, default=TaskConfig.digits)
    p.add_argument("--n-eval", type=int, default=TaskConfig.n_eval)
    p.add_argument("--warmstart-steps", type=int, default=WarmStartConfig.steps)
    p.add_argument("--warmstart-lr", type=float, default=WarmStartConfig.lr)
    p.add_argument("--warmstart-batch-size", type=int, default=WarmStartConfig.batch_size)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Build the frozen config from parsed flags (validated by the dataclasses)."""
    kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if f.name not in ("task", "warmstart")}
    kw["task"] = TaskConfig(task=args.task, digits=args.digits, n_eval=args.n_eval)
    kw["warmstart"] = WarmStartConfig(steps=args.warmstart_steps, lr=args.warmstart_lr,
                                      batch_size=args.warmstart_batch_size)
    return TrainConfig(**kw)


def cmd_train(args) -> int:
    from simulate.llm.train import train

    cfg = config_from_args(args)
    s = train(cfg, resume=args.resume)
    print(f"held-out accuracy: start {s['initial_acc']} -> final {s['final_acc']:.3f} "
          f"(mean realised delay {s['mean_realised_delay']:.2f}, skipped steps {s['skipped_steps']}); "
          f"metrics in {cfg.out_dir}/metrics.csv")
    return 0


def cmd_warmstart(args) -> int:
    from simulate.llm.warmstart import warm_start

    _, _, info = warm_start(config_from_args(args), use_cache=not args.no_cache)
    print(f"warm start: held-out accuracy {info['heldout_accuracy']:.3f}; cached at {info['path']}")
    return 0


def cmd_experiment(args) -> int:
    from simulate.llm import experiment as ex

    base = config_from_args(args)
    sweep = ex.Sweep(estimators=tuple(args.estimators.split(",")), delays=tuple(int(x) for x in args.delays.split(",")),
                     seeds=tuple(range(args.seeds)), base=base, out_dir=args.experiment_dir)
    bad = [e for e in sweep.estimators if e not in ALL_ESTIMATORS]
    if bad:
        raise ValueError(f"estimators must be among {', '.join(ALL_ESTIMATORS)}, got {bad}")
    opts = {"backend": args.backend}  # None: ex.run picks by device
    if args.workers is not None:
        opts["n_workers"] = args.workers
    df = ex.run(sweep, root=args.cells, **opts)
    print(ex.table(df))
    print(ex.c9_verdict(df))
    print(f"tidy results: {sweep.out_dir}/results.csv (cells: {args.cells or os.path.join(sweep.out_dir, 'cells')})")
    return 0


def cmd_gpu_check(args) -> int:
    from simulate.llm.gpu_check import main as gpu_main

    return gpu_main(dry_run=args.dry_run, out_dir=args.experiment_dir)


def build_parser() -> argparse.ArgumentParser:
    from simulate.llm import experiment as ex_defaults  # light: torch is imported only by the cells

    parser = argparse.ArgumentParser(prog="python -m simulate.llm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("train", help="one asynchronous RL run (warm start cached)")
    _add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue from OUT_DIR/checkpoint.pt")
    p.set_defaults(_main=cmd_train)
    p = sub.add_parser("warmstart", help="the supervised warm start only (cached)")
    _add_config_args(p)
    p.add_argument("--no-cache", action="store_true")
    p.set_defaults(_main=cmd_warmstart)
    p = sub.add_parser("experiment", help="held-out accuracy against delay, estimators x delays x seeds (C9)")
    _add_config_args(p)
    # length-normalised trajectory maps: like-for-like step sizes with the token-level baselines
    p.set_defaults(steps=30, lr=3e-4, eval_every=1000, max_delay=8, length_normalize=True)
    p.add_argument("--estimators", default=",".join(ex_defaults.MAIN_ESTIMATORS))
    p.add_argument("--delays", default="0,4,8")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds 0..n-1")
    p.add_argument("--experiment-dir", default="results/llm/experiment")
    p.add_argument("--backend", choices=("serial", "local"), default=None,
                   help=f"sweep engine backend (default {ex_defaults.DEFAULT_BACKEND} on CPU, serial on CUDA)")
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: CPUs)")
    p.add_argument("--cells", default=None, help="sweep cell store (default EXPERIMENT_DIR/cells); resume reuses it")
    p.set_defaults(_main=cmd_experiment)
    p = sub.add_parser("gpu-check", help="< 5 min on one H200: bf16 Qwen3 'gpu' preset, throughput + accuracy-vs-delay")
    p.add_argument("--dry-run", "--tiny", dest="dry_run", action="store_true",
                   help="tiny preset on CPU, a few steps: checks the script end to end in seconds")
    p.add_argument("--experiment-dir", default="results/llm/gpu_check")
    p.set_defaults(_main=cmd_gpu_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
