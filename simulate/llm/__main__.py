"""``python -m simulate.llm train|warmstart|experiment|gpu-check|gpu-run|kernels``: the LLM validation harness.

The CLI mirrors :class:`simulate.llm.config.TrainConfig`: every field is a ``--flag`` of the same
name (``--G``, ``--eta``, ``--d``, ``--D``, ``--n-prompts``, …) whose default is read from the
dataclass, never restated. Every input is checked before a model is built: the config's own
checks, then :func:`simulate.llm.config.check_runtime` (CUDA present, output folders writable).
Example (tiny model, stale rollouts, CPU, a couple of minutes)::

    python -m simulate.llm train --estimator gmc --delay 4 --steps 40
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from asyncgrpo.estimators.aggregation import AGG_MODES
from asyncgrpo.estimators.token_level import CISPO_CLAMPS
from asyncgrpo.validation import parse_list
from simulate.commands import run_cli
from simulate.llm.config import (
    REGISTERED_ESTIMATORS,
    DELAY_MODES,
    DEVICES,
    PRESETS,
    TASKS,
    TaskConfig,
    TrainConfig,
    WarmStartConfig,
    check_runtime,
    check_writable,
)

#: Nested config fields exposed as flat flags: ``(flag dest, dataclass, field)``.
NESTED = (("task", TaskConfig, "task"), ("digits", TaskConfig, "digits"), ("n_eval", TaskConfig, "n_eval"),
          ("warmstart_steps", WarmStartConfig, "steps"), ("warmstart_eta", WarmStartConfig, "eta"),
          ("warmstart_batch_size", WarmStartConfig, "batch_size"), ("warmstart_frozen", WarmStartConfig, "frozen"),
          ("warmstart_frozen_sha256", WarmStartConfig, "frozen_sha256"))
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}
_CHOICES = {"estimator": REGISTERED_ESTIMATORS, "delay": DELAY_MODES, "preset": tuple(PRESETS), "device": DEVICES,
            "dtype": ("float32", "bfloat16", "float64"), "task": TASKS, "cispo_clamp": CISPO_CLAMPS,
            "loss_agg_mode": AGG_MODES}


def _flag_type(f: dataclasses.Field):
    """The argparse type of a field from its annotation (``int | None`` → ``int``)."""
    base = str(f.type).replace(" ", "").split("|")[0]
    return _TYPES[base]


#: One spelling per concept across every CLI of the project (``python -m simulate train``/``bias`` too):
#: ``--delay`` is the delay d, ``--max-delay`` the largest delay D, ``--delay-model`` the model.
_FLAGS = {"delay": "--delay-model", "d": "--delay", "D": "--max-delay"}


def _add_config_args(p: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("task", "warmstart"):
            continue
        default = getattr(d, f.name)
        flag = _FLAGS.get(f.name, "--" + f.name.replace("_", "-"))
        if f.name == "model_path":
            p.add_argument("--model", dest="model_path", default=default, metavar="PATH",
                           help="local checkpoint directory (config, weights, tokenizer); never downloaded")
        elif _flag_type(f) is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            p.add_argument(flag, dest=f.name, type=_flag_type(f), default=default, choices=_CHOICES.get(f.name),
                           metavar=f.name if f.name in ("d", "D") else None, help=f"(default {default})")
    for dest, cls, name in NESTED:
        f = next(x for x in dataclasses.fields(cls) if x.name == name)
        default = getattr(cls(), name)
        p.add_argument("--" + dest.replace("_", "-"), dest=dest, type=_flag_type(f), default=default,
                       choices=_CHOICES.get(dest), help=f"(default {default})")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Build the frozen config from parsed flags (validated by the dataclasses)."""
    kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if f.name not in ("task", "warmstart")}
    kw["task"] = TaskConfig(task=args.task, digits=args.digits, n_eval=args.n_eval)
    kw["warmstart"] = WarmStartConfig(steps=args.warmstart_steps, eta=args.warmstart_eta,
                                      batch_size=args.warmstart_batch_size, frozen=args.warmstart_frozen,
                                      frozen_sha256=args.warmstart_frozen_sha256)
    return TrainConfig(**kw)


def checked_config(args: argparse.Namespace) -> TrainConfig:
    """:func:`config_from_args` plus the machine checks, all before any model is built."""
    cfg = config_from_args(args)
    check_runtime(cfg)
    return cfg


def cmd_train(args) -> int:
    cfg = checked_config(args)
    from simulate.llm.train import train

    print(f"delay model: {cfg.delay_label}" + (f", d_k capped at D={cfg.D}" if cfg.delay != "uniform" else ""),
          file=sys.stderr)
    force = tuple(parse_list(args.force, "--force", str, "config keys")) if args.force.strip() else ()
    s = train(cfg, resume=args.resume, force=force, overwrite=args.overwrite)
    print(f"held-out accuracy: start {s['initial_acc']} -> final {s['final_acc']:.3f} "
          f"(mean realised delay {s['mean_realised_delay']:.2f}, skipped steps {s['skipped_steps']}); "
          f"metrics in {cfg.out_dir}/metrics.csv")
    return 0


def cmd_warmstart(args) -> int:
    cfg = checked_config(args)
    from simulate.llm.warmstart import warm_start

    _, _, info = warm_start(cfg, use_cache=not args.no_cache)
    print(f"warm start: held-out accuracy {info['heldout_accuracy']:.3f}; cached at {info['path']}")
    return 0


def cmd_freeze_warmstart(args) -> int:
    from simulate.llm.experiment import protocol_base
    from simulate.llm.warmstart import freeze
    from simulate.llm.protocol import PROTOCOLS, draw_seeds

    key = int(args.protocol_version) if args.protocol_version.isdigit() else args.protocol_version
    if key not in PROTOCOLS:
        raise ValueError(f"--protocol-version must be one of {', '.join(map(str, PROTOCOLS))}, got {args.protocol_version!r}")
    cfg = protocol_base(PROTOCOLS[key], cache_dir=args.cache_dir)  # run on its pin (kernel_path_of re-executes)
    out = freeze(cfg, args.out)
    print(f"frozen warm start {out['path']}: held-out accuracy {out['info']['heldout_accuracy']:.3f} "
          f"({out['info']['settings']['kernels']}, {out['info']['cpu']})\nsha256 {out['sha256']}")
    return 0


def _checked_list(option: str, convert, what: str, empty_ok: bool = False):
    """An argparse ``type`` for a comma-list option: checked by :func:`asyncgrpo.validation.parse_list` (each value
    once, issue 56 item 8) when the command line is parsed, before any cell runs; the text itself is kept."""
    def check(text):
        if not (empty_ok and not str(text).strip()):
            try:
                parse_list(text, option, convert, what)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None
        return text
    return check


def _int_list(text, option: str) -> tuple[int, ...]:
    """A comma list of integers, each once (:func:`asyncgrpo.validation.parse_list`)."""
    return tuple(parse_list(text, option, int, "integers"))


def cmd_experiment(args) -> int:
    from simulate.llm import experiment as ex
    from simulate.llm.protocol import GPU_PROTOCOLS, PROTOCOLS, draw_seeds

    key = int(args.protocol_version) if str(args.protocol_version).isdigit() else args.protocol_version
    if key not in PROTOCOLS:
        raise ValueError(f"--protocol-version must be one of {', '.join(map(str, PROTOCOLS))}, got {args.protocol_version}")
    PROTOCOL = PROTOCOLS[key]
    if key in GPU_PROTOCOLS:
        from simulate.llm.gpu_protocol import main as gpu_main

        return gpu_main(out_dir=args.experiment_dir, dry_run=args.dry_run, card=args.card, limit_s=args.limit_s,
                        start=args.start, protocol=PROTOCOL)
    if key == "gpu-v1":
        raise ValueError("--protocol gpu-v1 is kept for its hash only (its serial path never finished on a card); "
                         "run --protocol gpu (v2, the batched engine in chunks)")
    base = checked_config(args)
    check_writable(args.experiment_dir, "--experiment-dir")
    if args.full:
        # the registered protocol on its --full seeds, every arm; no grid flag applies
        sweep = ex.protocol_sweep(PROTOCOL, full=True, out_dir=args.experiment_dir,
                                  cache_dir=base.cache_dir)
        df = ex.run(sweep, root=args.cells, backend=args.backend, overwrite=args.overwrite,
                    **({"n_workers": args.workers} if args.workers else {}))
        print(ex.table(df, PROTOCOL.metric))
        for r in ex.arm_results(df, PROTOCOL, full=True):
            print("\n".join(r.lines))
        print(ex.turning_table(sum((ex.turning_points(df, PROTOCOL, lr_factor=f) for f, _ in sweep.arm_list), [])))
        _perturb(args, df, PROTOCOL)
        print(f"tidy results: {sweep.out_dir}/results.csv")
        return 0
    estimators = tuple(parse_list(args.estimators, "--estimators", str, "estimator names"))
    bad = [e for e in estimators if e not in REGISTERED_ESTIMATORS]
    if bad:
        raise ValueError(f"--estimators must be a comma list among {', '.join(REGISTERED_ESTIMATORS)}, got "
                         f"{args.estimators!r}")
    delays = _int_list(args.delays, "--delays")
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    # a protocol whose seeds are drawn (v8) runs the first n of its draw; earlier ones seeds 0..n-1
    seeds = draw_seeds(PROTOCOL.seed_root, args.seeds) if PROTOCOL.seed_root else tuple(range(args.seeds))
    same_runs = base.replace(cache_dir="", out_dir="") == ex.protocol_base(PROTOCOL).replace(cache_dir="", out_dir="")
    is_protocol = same_runs and (estimators, delays, seeds) == (PROTOCOL.estimators, PROTOCOL.delays, PROTOCOL.seeds)
    arms = PROTOCOL.arms() if is_protocol else None
    if args.lr_factor is not None:
        if not args.lr_factor > 0:
            raise ValueError(f"--lr-factor must be > 0, got {args.lr_factor}")
        arms = ((1.0, seeds), (float(args.lr_factor), seeds)) if args.lr_factor != 1 else None
    sweep = ex.Sweep(estimators=estimators, delays=delays, seeds=seeds, base=base.replace(D=max(max(delays), base.D)),
                     out_dir=args.experiment_dir, pairs=PROTOCOL.runs() if is_protocol else None, arms=arms,
                     arm_pairs=PROTOCOL.arm_runs() if is_protocol else None)
    opts = {"backend": args.backend, "overwrite": args.overwrite}  # backend None: ex.run picks by device
    if args.workers is not None:
        if args.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {args.workers}")
        opts["n_workers"] = args.workers
    df = ex.run(sweep, root=args.cells, **opts)
    print(ex.table(df, PROTOCOL.metric))
    if not is_protocol:
        print("note: this grid differs from the pre-registered protocol (simulate/llm/protocol.py); "
              "the lines below apply its comparisons to the runs present")
    for r in ex.arm_results(df, PROTOCOL, quick=len(seeds) < len(PROTOCOL.seeds)):
        print("\n".join(r.lines))
    if PROTOCOL.version >= 4:
        from simulate.llm import analysis

        g = analysis.learning_gain(ex.arm(df, 1.0), PROTOCOL)
        print(f"learning at d=0: gain {g['mean']:+.3f} [{g['lo']:+.3f}, {g['hi']:+.3f}] ({g.get('interval', '')}, "
              f"n={g['n']}); target +{g['target']:g} " + ("met" if g["met"] else "not met"))
        print(analysis.regime_line(analysis.regime(ex.arm(df, 1.0), PROTOCOL), PROTOCOL.d_max))
    if args.perturb:
        if not is_protocol:
            raise ValueError("--perturb re-runs the registered protocol's comparisons; run it on the protocol's grid "
                             "(no grid flags)")
        _perturb(args, df, PROTOCOL)
    print(f"tidy results: {sweep.out_dir}/results.csv (cells: {args.cells or os.path.join(sweep.out_dir, 'cells')})")
    return 0


def _perturb(args, df, protocol) -> None:
    """``--perturb``: the protocol's comparisons under the other CPU kernel paths (:mod:`simulate.llm.portability.perturbation`)."""
    if not getattr(args, "perturb", False):
        return
    from simulate.llm.portability import perturbation

    perturbation.run_and_print(df, protocol, os.path.join(args.experiment_dir, "perturb"))


def cmd_gpu_check(args) -> int:
    from simulate.llm.gpu_check import main as gpu_main

    return gpu_main(dry_run=args.dry_run, out_dir=args.experiment_dir, budget_s=args.budget_s)


def _experiment_defaults(p: argparse.ArgumentParser, protocol=None) -> None:
    """The experiment's run settings default to the pre-registered protocol's (read, not restated): the one
    ``--protocol-version`` names, else the current one."""
    from simulate.llm.experiment import protocol_base
    from simulate.llm.protocol import PROTOCOL

    b = protocol_base(protocol or PROTOCOL)
    p.set_defaults(**{f.name: getattr(b, f.name) for f in dataclasses.fields(TrainConfig)
                      if f.name not in ("task", "warmstart", "cache_dir")},
                   task=b.task.task, digits=b.task.digits, n_eval=b.task.n_eval, warmstart_steps=b.warmstart.steps,
                   warmstart_eta=b.warmstart.eta, warmstart_batch_size=b.warmstart.batch_size,
                   warmstart_frozen=b.warmstart.frozen, warmstart_frozen_sha256=b.warmstart.frozen_sha256)


def _named_protocol(argv):
    """The protocol ``--protocol-version``/``--protocol`` names in ``argv`` (``None``: the default or unknown,
    which the command reports)."""
    from simulate.llm.protocol import PROTOCOLS

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--protocol-version", "--protocol", dest="v", default=None)
    v = pre.parse_known_args(list(argv or []))[0].v
    return PROTOCOLS.get(int(v) if v and v.isdigit() else v) if v else None


def build_parser(protocol=None) -> argparse.ArgumentParser:
    # light: torch is imported only by the cells
    from simulate.llm import experiment as ex_defaults
    from simulate.llm.protocol import PROTOCOL

    parser = argparse.ArgumentParser(prog="python -m simulate.llm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("train", help="one asynchronous RL run (warm start cached)")
    _add_config_args(p)
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT_DIR/checkpoint.pt (refused if missing or if the config differs)")
    p.add_argument("--force", default="", metavar="KEYS", type=_checked_list("--force", str, "config keys", empty_ok=True),
                   help="with --resume: comma-separated config keys whose change is accepted (e.g. steps,eta); "
                        "any other difference is still refused")
    p.add_argument("--overwrite", action="store_true",
                   help="start a new run in an OUT_DIR that already holds one, replacing it")
    p.set_defaults(_main=cmd_train)
    p = sub.add_parser("warmstart", help="the supervised warm start only (cached)")
    _add_config_args(p)
    p.add_argument("--no-cache", action="store_true")
    p.set_defaults(_main=cmd_warmstart)
    p = sub.add_parser("freeze-warmstart", help="write a protocol's warm start to a file its runs can load "
                                                "(simulate/llm/portability/frozen_warmstart.py)")
    p.add_argument("--protocol-version", "--protocol", dest="protocol_version", default=str(PROTOCOL.version))
    p.add_argument("--out", required=True, help="the file to write (never overwritten)")
    p.add_argument("--cache-dir", default="results/llm/cache")
    p.set_defaults(_main=cmd_freeze_warmstart)
    p = sub.add_parser("experiment", help="C9 at LM scale: the pre-registered protocol (estimators x delays x seeds)")
    _add_config_args(p)
    _experiment_defaults(p, protocol)
    PROTOCOL = protocol or PROTOCOL
    p.add_argument("--estimators", default=",".join(PROTOCOL.estimators),
                   type=_checked_list("--estimators", str, "estimator names"))
    p.add_argument("--delays", default=",".join(str(d) for d in PROTOCOL.delays), type=_checked_list("--delays", int, "integers"))
    p.add_argument("--seeds", type=int, default=len(PROTOCOL.seeds), help="number of seeds: the first n of the protocol's drawn seeds (v8), else 0..n-1")
    p.add_argument("--experiment-dir", default="results/llm/experiment")
    p.add_argument("--backend", choices=("serial", "local"), default=None,
                   help=f"sweep engine backend (default {ex_defaults.DEFAULT_BACKEND} on CPU, serial on CUDA)")
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: CPUs)")
    p.add_argument("--cells", default=None, help="sweep cell store (default EXPERIMENT_DIR/cells); resume reuses it")
    p.add_argument("--protocol-version", "--protocol", dest="protocol_version", default=str(PROTOCOL.version),
                   help=f"registered LM protocol whose comparisons apply: 2 to 8, gpu or gpu-v1 (default {PROTOCOL.version}; "
                        f"2, 3 and 4 reproduce the v2, v3 and v4 reports; 5 runs on pinned CPU kernels; gpu: the GPU "
                        f"protocol, simulate/llm/gpu_protocol.py)")
    p.add_argument("--perturb", action="store_true",
                   help="re-make the registered comparisons under other CPU kernel paths and list every fragile verdict "
                        "(v4: ATEN_CPU_CAPABILITY; v5: the protocol's perturb_paths with the consensus rule; "
                        "simulate/llm/portability/perturbation.py)")
    p.add_argument("--limit-s", type=float, default=500.0,
                   help="--protocol gpu: wall-clock limit from --start; no chunk starts that is predicted to end past it")
    p.add_argument("--start", type=float, default=None,
                   help="--protocol gpu: epoch seconds the limit counts from (default: now; gpu_run.sh passes its start)")
    p.add_argument("--card", choices=("h100", "h200"), default="h100", help="--protocol gpu: the card the plan sizes for")
    p.add_argument("--dry-run", action="store_true",
                   help="--protocol gpu: the same path on CPU with the tiny preset in seconds")
    p.add_argument("--full", action="store_true",
                   help="run the registered protocol on its --full seeds (v3: 24 seeds, step-size arm 12); grid flags are ignored")
    p.add_argument("--lr-factor", type=float, default=None,
                   help="also run every seed at eta x this factor (a step-size arm); the protocol grid has its own")
    p.add_argument("--overwrite", action="store_true",
                   help="run into an EXPERIMENT_DIR that holds runs of other settings, replacing their folders")
    p.set_defaults(_main=cmd_experiment)
    p = sub.add_parser("gpu-check", help="< 5 min on one H200: bf16 Qwen3 'gpu' preset, throughput + accuracy-vs-delay")
    p.add_argument("--dry-run", "--tiny", dest="dry_run", action="store_true",
                   help="tiny preset on CPU, a few steps: checks the script end to end in seconds")
    p.add_argument("--experiment-dir", default="results/llm/gpu_check")
    p.add_argument("--budget-s", type=float, default=240.0,
                   help="seconds for the delay sweep: seeds are run one by one while the next one fits (default 240)")
    p.set_defaults(_main=cmd_gpu_check)
    from simulate.llm import gpu_run  # the plan, its memory and time estimate, the fit check (simulate/llm/gpu_plan.py)

    gpu_run.add_parser(sub)
    from simulate.llm.portability import fingerprint  # the kernels command

    fingerprint.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_cli(build_parser(_named_protocol(argv)), argv)


def kernel_path_of(argv: list[str]) -> str:
    """The CPU kernel path a command line asks for: ``--kernels``, else (``experiment``) its protocol's pin."""
    from simulate.llm.protocol import PROTOCOL

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--kernels", default=None)
    pre.add_argument("--device", default="cpu")
    a = pre.parse_known_args(list(argv))[0]
    if a.kernels is not None or a.device != "cpu":
        return a.kernels or ""
    if argv and argv[0] in ("experiment", "freeze-warmstart"):
        return getattr(_named_protocol(argv) or PROTOCOL, "kernel_pin", "")
    return ""


if __name__ == "__main__":
    # the kernel path must be in the environment before torch/MKL initialise: re-execute with it (the
    # experiment's workers and warm starts inherit it; simulate/llm/portability/kernel_paths.py)
    from simulate.llm.portability.kernel_paths import reexec_argv

    reexec_argv(kernel_path_of(sys.argv[1:]), sys.argv[1:])
    sys.exit(main())
