"""Train a tiny Qwen3 with TRL on stale rollouts, weighting trajectories by group-mass capping (GMC).

    python examples/trl_gmc.py                       # gmc, eps 0.2, about a minute on 2 CPU cores
    python examples/trl_gmc.py --estimator tic       # any registry estimator: gmc tic tis snis is onpolicy

The rollouts are stale on purpose: one generation batch is reused for ``steps_per_generation ×
num_iterations`` optimizer steps, so later steps learn from completions sampled by an older policy
(``traj_is/staleness/max`` in the log). TRL records the sampling policy's per-token log-probs
(``old_per_token_logps``); the trainer forms ``ℓ_i = Σ_t (log π_θ − log μ)`` per completion, the
registry's weight map turns each group's ``ℓ`` into ``w`` (stop-gradient), and the loss is
``asyncgrpo.estimators.token_level.policy_loss``. Toy task: the reward is the fraction of ``a`` in
the completion, which a random-init model learns to raise within a few dozen steps.

Swap ``tiny_qwen3`` for ``AutoModelForCausalLM.from_pretrained(...)`` and your tokenizer, and the
reward for yours, and this is the whole recipe.
"""
import argparse
import time

from datasets import Dataset
from trl import GRPOConfig

from asyncgrpo.integrations.trl import AsyncGRPOTrainer, tiny_qwen3


def reward_fraction_of_a(completions, **kwargs):
    """Fraction of the characters that are 'a' (0 for an empty completion)."""
    return [c.count("a") / max(len(c), 1) for c in completions]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--estimator", default="gmc", help="registry estimator (default gmc)")
    p.add_argument("--eps", type=float, default=0.2, help="threshold eps > 0 (default 0.2)")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps (default 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", default="results/examples/trl_gmc")
    args = p.parse_args(argv)

    model, tok = tiny_qwen3(seed=args.seed, hidden_size=64, num_hidden_layers=2)
    prompts = ["write: ", "say: ", "go: ", "now: "] * 64
    config = GRPOConfig(
        output_dir=args.output_dir,
        per_device_train_batch_size=16,   # must be a multiple of num_generations (whole groups)
        num_generations=8,                # G
        steps_per_generation=2,           # one generation feeds 2 micro-batches ...
        num_iterations=2,                 # ... twice: rollouts up to 3 optimizer steps stale
        max_completion_length=12,
        max_steps=args.steps,
        learning_rate=3e-3,
        temperature=1.0,
        beta=0.0,                         # no KL term: not part of ĝ
        logging_steps=5,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=args.seed,
    )
    trainer = AsyncGRPOTrainer(
        model=model,
        reward_funcs=reward_fraction_of_a,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok,
        estimator=args.estimator,
        eps=args.eps,
    )
    t0 = time.perf_counter()
    trainer.train()
    print(f"\n{args.estimator} (eps={args.eps}): {args.steps} steps in {time.perf_counter() - t0:.0f} s")
    print(f"{'step':>5} {'reward':>7} {'cap_frac':>8} {'removed':>8} {'chi2':>8} {'ess_frac':>8} {'stale':>5}")
    for h in trainer.state.log_history:
        if "reward" in h:
            print(f"{h['step']:>5} {h['reward']:>7.3f} {h['traj_is/cap_frac']:>8.3f} "
                  f"{h['traj_is/removed_mass/mean']:>8.3g} {h['traj_is/chi2/mean']:>8.3g} "
                  f"{h['traj_is/ess_frac/mean']:>8.3f} {h['traj_is/staleness/max']:>5.0f}")
    return trainer


if __name__ == "__main__":
    main()
