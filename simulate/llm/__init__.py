"""The LLM validation harness: GRPO-family losses on a real causal LM with controlled staleness.

Re-checks C9 (THEORY §3) on a Qwen3-architecture language model with the same estimator
definitions as the theory and the simulators: trajectory-level weights from the registry's PyTorch
backend, token-level baselines from :mod:`asyncgrpo.estimators.token_level`, both through
``policy_loss``.

Commands (``python -m simulate.llm …``)::

    train --estimator gmc --delay 4 --steps 40          # tiny model on CPU, stale rollouts, minutes
    warmstart                                       # the cached supervised warm start only
    freeze-warmstart --protocol-version 6 --out F   # a protocol's warm start as a file its runs load (v7)
    experiment                                      # the pre-registered C9 protocol (protocol.py, v8)
    experiment --protocol gpu [--dry-run]           # the GPU protocol (bash gpu_run.sh runs it on a card)
    gpu-run --dry-run                               # a GPU plan: memory, time, chunks; one tiny step on CPU
    gpu-check [--dry-run]                           # parity, throughput, d ∈ {0, 8, 32} on one GPU

A protocol run, top to bottom (docs/llm.md, "How a run flows")::

    protocol.py ─► experiment.py ─► warmstart.py ─► batched.py ─► rollout_queue.py ─► analysis.py
    (registered     (run(): manifest,  (stage 1: one  (stage 2: a     (batches decoded    (the C9 rows,
     settings)       two engine        cell per warm  seed's forest,  when their θ is      verdicts)
                     stages)           start)         stacked_model)  current)

Modules, by stage::

    settings   config.py       frozen dataclasses: TrainConfig, TaskConfig, WarmStartConfig, PRESETS (size dial)
               protocol.py     the pre-registered LM protocols (seeds, delays, estimators, rules), hashed
    task       tokenizer.py    character tokenizer; adapter for a checkpoint's own + chat template
               tasks.py        procedural arithmetic, held-out split by stable hash, never-raising parser
               exact_j.py      exact expected reward under exact match, by teacher forcing
    model      model.py        Qwen3 build/load, KV-cached sampling recording log μ, log π recompute
               warmstart.py    supervised warm start (cached, or frozen), greedy held-out accuracy
    one run    train.py        a whole run on the serial engine (`train`; the tests' reference): delay schedule,
                               snapshots, checkpoints and resume (run_files.py)
               learner_step.py one step: behaviour version, rollouts, surrogate (registry / token_level), AdamW
               diagnostics.py  a step's log-ratio columns (ℓ, χ², ESS, clip fractions)
               tree.py         a seed's runs at several fixed delays as one forest, shared prefixes bit for bit
    batched    batched.py      the harness's engine: a forest's runs stepped together (stacked_model.py: R weight
                               sets at once); tree.train_forest dispatches to it (tree.HARNESS_ENGINE)
               rollout_queue.py  batches sampled when their behaviour version is current (no snapshots)
    protocol   experiment.py   estimators × delays × seeds through the sweep engine → tidy table
               analysis.py     the C9 rows and verdicts from that table (pure functions)
    GPU        gpu_plan.py     memory and time of a forest on a card, the fewest chunks that fit
               gpu_run.py      gpu-run: the plan, then the chunks; gpu_protocol.py + gpu_run.sh: the GPU protocol
               gpu_check.py    the prepared GPU check
    measure    throughput.py   sampler throughput; mfu.py: model FLOP utilisation per phase (python -m bench llm)
    portability/  kernel paths, deterministic setup (set_determinism: the one call a run makes), float64 models,
                  frozen warm starts, kernel fingerprints, the perturbation check (make verify)
"""
