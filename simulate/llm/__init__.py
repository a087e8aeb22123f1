"""The LLM validation harness: GRPO-family losses on a real causal LM with controlled staleness.

Re-checks C9 (THEORY §3) on a Qwen3-architecture language model with the same estimator
definitions as the theory and the simulators: trajectory-level weights from the registry's PyTorch
backend, token-level baselines from :mod:`asyncgrpo.estimators.token_level`, both through
``policy_loss``.

Commands (``python -m simulate.llm …``)::

    train --estimator gmc --delay 4 --steps 40          # tiny model on CPU, stale rollouts, minutes
    warmstart                                       # the cached supervised warm start only
    freeze-warmstart --protocol-version 6 --out F   # a protocol's warm start as a file its runs load (v7)
    experiment                                      # the pre-registered C9 protocol (protocol.py)
    gpu-check [--dry-run]                           # < 5 min on one H200: parity, throughput, d ∈ {0, 8, 32}

Modules::

    config.py      frozen dataclasses: TrainConfig, TaskConfig, WarmStartConfig, PRESETS (size dial);
                   THEORY names (G, eta, eps, d, D); check_runtime (device, writable folders)
    protocol.py    the pre-registered LM C9 protocol (seeds, delays, estimators, metric, margin), hashed
    tokenizer.py   character tokenizer (random-init models); adapter for a checkpoint's own + chat template
    tasks.py       procedural arithmetic / countdown, held-out split by stable hash, never-raising parser
    model.py       Qwen3 build/load, KV-cached sampling recording log μ, float32 (float64) log π recompute
    warmstart.py   supervised warm start (cached under results/llm/cache), greedy held-out accuracy
    portability/   kernel paths, the run's deterministic setup (set_determinism: the one call a run makes),
                   float64 models, frozen warm starts, kernel fingerprints, the perturbation check
    train.py       the asynchronous RL loop, top to bottom (delays, snapshots, guarded update, metrics),
                   resume checks, output lock, fsync-ed metrics lines, weights-only checkpoints
    tree.py        a seed's runs at several delays as one forest: shared prefixes (every k ≤ d samples the
                   warm start) and warm-start batches computed once, bit for bit the separate runs
    experiment.py  accuracy against delay over estimators × delays × seeds (× step-size arms) → tidy
                   DataFrame; the C9 verdict per arm by simulate.verdicts (paired t, Holm, Clopper–Pearson),
                   turning points along d
    gpu_check.py   the prepared GPU check (CPU-vs-GPU parity, sampler throughput, delay sweep) and its CPU dry run
"""
