"""``train``: run one asynchronous-training configuration and print (and optionally save) its curve.

Every default is read from the configuration objects, never restated: learner options from
``simulate.training.TrainConfig()``, delay options from its ``DelaySpec()``, and the instance from
the protocol's control instance (:data:`EXP_INSTANCE`, the ``count-frac`` instance of ``simulate.protocol``). Delay names follow THEORY §1:
``--delay d`` is the fixed delay, ``--max-delay D`` the largest delay of the uniform model (and the
truncation of the geometric one); ``--delay-model`` picks the model.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from simulate import delays as dl
from simulate.training import OPTIMIZERS, InstanceSpec, TrainConfig, run_training
from simulate.training.config import REGISTERED_ESTIMATORS

NAME = "train"
HELP = "run one asynchronous GRPO training configuration on a bandit or token MDP; print its curve"

_CFG = TrainConfig()  # the learner's defaults
_DELAY = _CFG.delay  # the delay model's defaults (DelaySpec())
#: the default instance: the training protocol's control instance (count-frac, V = 3, T = 6)
EXP_INSTANCE = InstanceSpec(kind="token", V=3, T=6, state="count", reward="count_frac")
_INST = EXP_INSTANCE


class _Given(argparse.Action):
    """Store the value and remember that the user gave the option (a default cannot say so)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace._given = set(getattr(namespace, "_given", ())) | {self.dest}


def _given(args) -> set:
    return set(getattr(args, "_given", ()))


def add_instance_arguments(p: argparse.ArgumentParser) -> None:
    """Instance and delay-model options (reusable by any command that builds a ``TrainConfig``)."""
    g = p.add_argument_group("instance (defaults: the experiments' instance)")
    g.add_argument("--instance", choices=("bandit", "token"), default=_INST.kind, help="instance kind")
    g.add_argument("--arms", type=int, default=_INST.n_arms, help="bandit: number of arms")
    g.add_argument("--V", type=int, default=_INST.V, help="token MDP: vocabulary size")
    g.add_argument("--T", type=int, default=_INST.T, help="token MDP: horizon")
    g.add_argument("--state", choices=("count", "prev"), default=_INST.state, help="token MDP: state feature")
    g.add_argument("--reward", choices=("count_ge", "sum_mod", "count_frac"), default=_INST.reward,
                   help="token MDP: reward (count_frac: partial credit #0-tokens/T)")
    g.add_argument("--k", type=int, default=_INST.k, help="token MDP: count_ge threshold")
    g.add_argument("--m", type=int, default=_INST.m, help="token MDP: sum_mod modulus")
    g = p.add_argument_group("delay model (THEORY §1: d fixed delay, D maximum delay)")
    g.add_argument("--delay-model", choices=dl.KINDS, default=_DELAY.kind,
                   help="how the delay d_k of each step is drawn")
    g.add_argument("--max-delay", dest="D", metavar="D", type=int, default=_DELAY.D, action=_Given,
                   help="uniform: the largest delay D (must be given with uniform); geometric: truncation (0 = none)")
    g.add_argument("--p", type=float, default=_DELAY.p, help="geometric: success probability")
    g.add_argument("--actors", dest="n_actors", type=int, default=_DELAY.n_actors, action=_Given,
                   metavar="N", help="queue: number of parallel actors (must be given with queue)")
    g.add_argument("--gen-dist", choices=dl.GEN_DISTS, default=_DELAY.gen_dist, help="queue: generation-time law")
    g.add_argument("--gen-sigma", type=float, default=_DELAY.gen_sigma, help="queue: lognormal log-sd")


def instance_from(args) -> InstanceSpec:
    return InstanceSpec(kind=args.instance, n_arms=args.arms, V=args.V, T=args.T, state=args.state,
                        reward=args.reward, k=args.k, m=args.m)


def delay_from(args, d: int) -> dl.DelaySpec:
    """The :class:`~simulate.delays.DelaySpec` of the options, with fixed delay ``d``.

    A model whose parameter has no meaningful default is refused without it: ``uniform`` needs
    ``--max-delay`` (its default 0 would silently mean no delay), ``queue`` needs ``--actors``
    (its default 1 is synchronous).
    """
    given = _given(args)
    if args.delay_model == "uniform" and "D" not in given:
        raise ValueError("--delay-model uniform needs --max-delay D (the largest delay, d_k ~ U{0..D}); "
                         "--delay d applies to the fixed model only")
    if args.delay_model == "queue" and "n_actors" not in given:
        raise ValueError("--delay-model queue needs --actors N (number of parallel actors; 1 means no delay)")
    return dl.DelaySpec(kind=args.delay_model, d=d, D=args.D, p=args.p, n_actors=args.n_actors,
                        gen_dist=args.gen_dist, gen_sigma=args.gen_sigma)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_instance_arguments(p)
    g = p.add_argument_group("learner (defaults: simulate.training.TrainConfig)")
    g.add_argument("--delay", dest="d", metavar="d", type=int, default=_DELAY.d, action=_Given,
                   help="fixed model: the delay d of every step")
    g.add_argument("--estimator", choices=REGISTERED_ESTIMATORS, default=_CFG.estimator, help="weight map")
    g.add_argument("--eps", type=float, default=_CFG.eps, help="trajectory threshold ε")
    g.add_argument("--eps-low", type=float, default=_CFG.eps_low, help="token-level lower clip ε_low")
    g.add_argument("--eps-high", type=float, default=_CFG.eps_high, help="token-level upper clip ε_high")
    g.add_argument("--tau-m2", type=float, default=_CFG.tau_m2, help="m2po threshold τ_M2")
    g.add_argument("--G", type=int, default=_CFG.G, help="group size")
    g.add_argument("--prompts", dest="n_prompts", type=int, default=_CFG.n_prompts, help="groups per step")
    g.add_argument("--eta", type=float, default=_CFG.eta, help="step size η")
    g.add_argument("--steps", type=int, default=_CFG.steps, help="learner steps K")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default=_CFG.optimizer, help="update rule")
    g.add_argument("--adv-norm", action=argparse.BooleanOptionalAction, default=_CFG.adv_norm,
                   help="GRPO advantages (R − R̄)/(std(R) + 1e-6)")
    g.add_argument("--init-scale", type=float, default=_CFG.init_scale, help="θ_0 ~ N(0, init_scale²) per logit")
    g.add_argument("--seed", type=int, default=_CFG.seed, help="seed of the run")
    g = p.add_argument_group("output")
    g.add_argument("--every", type=int, default=10, help="print every n-th step")
    g.add_argument("--out", default=None, help="write the per-step table to this CSV file")


def config_from(args) -> TrainConfig:
    """The :class:`TrainConfig` the options describe (validated by ``TrainConfig`` itself)."""
    if args.delay_model != "fixed" and "d" in _given(args):
        raise ValueError(f"--delay d is the fixed model's delay; --delay-model {args.delay_model} takes "
                         "--max-delay D (uniform, geometric) or --actors N (queue)")
    return TrainConfig(instance=instance_from(args), estimator=args.estimator, eps=args.eps, eps_low=args.eps_low,
                       eps_high=args.eps_high, tau_m2=args.tau_m2, G=args.G, n_prompts=args.n_prompts, eta=args.eta,
                       steps=args.steps, delay=delay_from(args, args.d), seed=args.seed, optimizer=args.optimizer,
                       adv_norm=args.adv_norm, init_scale=args.init_scale)


def main(args) -> int:
    if args.every < 1:
        raise ValueError(f"--every must be an integer >= 1, got {args.every}")
    if args.out:  # refuse now, not after the run
        parent = Path(args.out).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ValueError(f"--out {args.out}: directory {parent} does not exist or is not writable")
    cfg = config_from(args)
    res = run_training(cfg)
    df = res.to_frame()
    print(f"{cfg.instance.label}  estimator={cfg.estimator}  eps={cfg.eps:g}  G={cfg.G}  eta={cfg.eta:g}  "
          f"delay={cfg.delay.label}  K={cfg.steps}  seed={cfg.seed}")
    shown = df.iloc[:: args.every].copy()
    shown["delay"] = shown["delay"].astype(object).where(shown["delay"].notna(), "—")
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.5g}", na_rep="—"))
    print(f"(row k = {cfg.steps} is the final iterate θ_K: no update there, so its per-update columns are —)")
    s = res.summary()
    print("summary: " + "  ".join(f"{k}={v:.5g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()))
    print("  ghat_tail = max_k ‖ĝ_k‖² / mean_k ‖ĝ_k‖² (heavy-tailed steps when large); diverged_at = −1: never")
    if args.out:
        df.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0
