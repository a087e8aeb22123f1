"""``train``: run one asynchronous-training configuration and print (and optionally save) its curve."""
from __future__ import annotations

import argparse

from simulate import delays as dl
from simulate.experiments import EXP_INSTANCE
from simulate.training import ALL_ESTIMATORS, InstanceSpec, TrainConfig, run_training

NAME = "train"
HELP = "run one asynchronous GRPO training configuration on a bandit or token MDP; print its curve"


def add_instance_arguments(p: argparse.ArgumentParser) -> None:
    """Instance and delay options shared with ``tune``."""
    p.add_argument("--instance", choices=("bandit", "token"), default="token", help="instance kind (default token)")
    p.add_argument("--arms", type=int, default=5, help="bandit: number of arms")
    d = EXP_INSTANCE  # defaults: the experiments' instance (simulate.experiments, "The regime")
    p.add_argument("--V", type=int, default=d.V, help=f"token MDP: vocabulary size (default {d.V})")
    p.add_argument("--T", type=int, default=d.T, help=f"token MDP: horizon (default {d.T})")
    p.add_argument("--state", choices=("count", "prev"), default=d.state, help=f"token MDP: state feature (default {d.state})")
    p.add_argument("--reward", choices=("count_ge", "sum_mod", "count_frac"), default=d.reward,
                   help=f"token MDP: reward (default {d.reward}: partial credit #0-tokens/T)")
    p.add_argument("--k", type=int, default=2, help="count_ge threshold")
    p.add_argument("--m", type=int, default=3, help="sum_mod modulus")
    p.add_argument("--delay", choices=dl.KINDS, default="fixed", help="delay model (default fixed)")
    p.add_argument("--D", type=int, default=0, help="uniform: max delay; geometric: truncation")
    p.add_argument("--p", type=float, default=0.5, help="geometric success probability")
    p.add_argument("--actors", type=int, default=4, help="queue: number of actors")
    p.add_argument("--gen-dist", choices=dl.GEN_DISTS, default="lognormal", help="queue: generation-time law")
    p.add_argument("--gen-sigma", type=float, default=1.0, help="queue: lognormal log-sd")


def instance_from(args) -> InstanceSpec:
    return InstanceSpec(kind=args.instance, n_arms=args.arms, V=args.V, T=args.T, state=args.state,
                        reward=args.reward, k=args.k, m=args.m)


def delay_from(args, d: int) -> dl.DelaySpec:
    return dl.DelaySpec(kind=args.delay, d=d, D=args.D, p=args.p, n_actors=args.actors, gen_dist=args.gen_dist,
                        gen_sigma=args.gen_sigma)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_instance_arguments(p)
    p.add_argument("--estimator", choices=ALL_ESTIMATORS, default="gmc")
    p.add_argument("--d", type=int, default=8, help="fixed delay d (default 8)")
    p.add_argument("--eps", type=float, default=0.2, help="trajectory threshold ε")
    p.add_argument("--G", type=int, default=8, help="group size")
    p.add_argument("--prompts", type=int, default=1, help="groups per step")
    p.add_argument("--eta", type=float, default=16.0, help="step size η (default 16)")
    p.add_argument("--steps", type=int, default=200, help="learner steps K")
    p.add_argument("--optimizer", choices=("sga", "adam"), default="sga")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=10, help="print every n-th step")
    p.add_argument("--out", default=None, help="write the per-step table to this CSV file")


def main(args) -> int:
    cfg = TrainConfig(instance=instance_from(args), estimator=args.estimator, eps=args.eps, G=args.G,
                      n_prompts=args.prompts, eta=args.eta, steps=args.steps, delay=delay_from(args, args.d),
                      seed=args.seed, optimizer=args.optimizer)
    res = run_training(cfg)
    df = res.to_frame()
    print(f"{cfg.instance.label}  estimator={cfg.estimator}  eps={cfg.eps:g}  G={cfg.G}  eta={cfg.eta:g}  "
          f"delay={cfg.delay.label}  K={cfg.steps}  seed={cfg.seed}")
    print(df.iloc[:: max(1, args.every)].to_string(index=False, float_format=lambda x: f"{x:.5g}"))
    s = res.summary()
    print("summary: " + "  ".join(f"{k}={v:.5g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()))
    if args.out:
        df.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0
