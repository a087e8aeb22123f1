"""Typed, frozen configuration of the LLM harness (STYLE §9): one size dial, one run config.

``PRESETS`` is the size dial for the random-init Qwen3-architecture models; ``--model PATH``
replaces it by a local checkpoint. ``TrainConfig`` holds every setting of one asynchronous RL
run (THEORY §1: group size ``G``, delay model for ``d_k``, estimator and its thresholds).
Derived values are properties, never fields filled in later.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from asyncgrpo import estimators as est

#: Token-level baselines of THEORY §2 (mirrors ``asyncgrpo.estimators.token_level.TOKEN_ESTIMATORS``
#: so that the CLI can list them before torch is imported).
TOKEN_NAMES: tuple[str, ...] = ("grpo", "gspo", "cispo", "m2po")
ALL_ESTIMATORS: tuple[str, ...] = tuple(est.ESTIMATORS) + TOKEN_NAMES
DELAY_MODES: tuple[str, ...] = ("fixed", "random", "actors")
TASKS: tuple[str, ...] = ("arithmetic", "countdown", "mixed")


@dataclass(frozen=True)
class ModelPreset:
    """Shape of a random-init Qwen3-architecture model (``Qwen3Config`` fields)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int = 128


#: The one size dial. ``tiny`` trains on a laptop CPU in minutes; ``small`` is a slow-CPU/fast-GPU
#: middle; ``gpu`` (~85M parameters with the character vocabulary) is the H200 check in bf16.
PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(64, 2, 4, 2, 16, 256),
    "small": ModelPreset(256, 4, 4, 2, 64, 768),
    "gpu": ModelPreset(768, 12, 12, 4, 64, 2304),
}


@dataclass(frozen=True)
class TaskConfig:
    """Procedural tasks with verifiable rewards (see :mod:`simulate.llm.tasks`)."""

    task: str = "arithmetic"
    """``arithmetic`` (``a+b``), ``countdown`` (reach a target with given numbers) or ``mixed``."""
    digits: int = 2
    """Operands of ``arithmetic`` are uniform in ``[0, 10^digits)``."""
    countdown_numbers: int = 3
    """How many numbers (each in 1..9) a ``countdown`` prompt offers."""
    heldout_fraction: float = 0.2
    """Share of the problem space reserved for held-out evaluation (split by a stable hash)."""
    n_eval: int = 200
    """Held-out problems used for greedy accuracy."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if not 1 <= self.digits <= 6:
            raise ValueError(f"digits must be an integer in 1..6, got {self.digits!r}")
        if not 2 <= self.countdown_numbers <= 5:
            raise ValueError(f"countdown_numbers must be an integer in 2..5, got {self.countdown_numbers!r}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction!r}")
        if self.n_eval < 1:
            raise ValueError(f"n_eval must be >= 1, got {self.n_eval!r}")


@dataclass(frozen=True)
class WarmStartConfig:
    """Supervised warm start: cross-entropy on correct completions of training problems."""

    steps: int = 300
    """Optimiser steps of the supervised phase."""
    batch_size: int = 64
    """Problems per supervised step."""
    lr: float = 3e-3
    """AdamW learning rate of the supervised phase."""

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"warm-start steps must be >= 0, got {self.steps!r}")
        if self.batch_size < 1:
            raise ValueError(f"warm-start batch_size must be >= 1, got {self.batch_size!r}")
        if not self.lr > 0:
            raise ValueError(f"warm-start lr must be > 0, got {self.lr!r}")


@dataclass(frozen=True)
class TrainConfig:
    """One asynchronous RL run (THEORY §1–2)."""

    estimator: str = "gmc"
    """Trajectory-level (``onpolicy, is, tis, tic, gmc, snis``) or token-level (``grpo, gspo, cispo, m2po``)."""
    eps: float = 0.2
    """Trajectory ratio threshold ε (``1+ε`` caps ``ρ_i`` or ``ρ̄``)."""
    eps_low: float = 0.2
    """Token-level PPO clip below: ``r_t ≥ 1−ε_low``."""
    eps_high: float = 0.28
    """Token-level clip above: ``r_t ≤ 1+ε_high`` (grpo, gspo, cispo)."""
    tau_m2: float = 0.04
    """m2po: mask tokens until the batch mean of ``(log r_t)²`` is ≤ ``τ_M2``."""
    group_size: int = 8
    """``G``: trajectories per prompt (one group)."""
    prompts_per_step: int = 16
    """Groups per learner step (``n_groups``)."""
    steps: int = 40
    """Learner updates ``K``."""
    lr: float = 3e-4
    """AdamW learning rate ``η`` of the RL phase (1e-3 collapsed the tiny model's accuracy in one trial)."""
    weight_decay: float = 0.0
    """AdamW weight decay of the RL phase."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (inf disables it); the pre-clip norm is logged."""
    length_normalize: bool = False
    """Divide the trajectory-level coefficients ``c_{i,t} = w_i`` by the completion length ``T_i``
    (``policy_loss(length_normalize=True)``), the same per-sequence ``1/T_i`` the token-level baselines
    carry, so that with AdamW and the grad-norm clip all estimators take steps of comparable size.
    ``False`` is THEORY's ``ĝ`` (``Σ_t``, no ``1/T_i``); token-level estimators are unaffected."""
    normalize_adv: bool = False
    """``A_i = (R_i−R̄)/(std R + δ)`` (GRPO option) instead of ``R_i − R̄`` (THEORY §1)."""
    delay_mode: str = "fixed"
    """``fixed`` (``d_k = d``), ``random`` (uniform on ``0..max_delay``) or ``actors`` (actor–learner queue)."""
    delay: int = 0
    """``d`` for ``fixed``; ignored otherwise."""
    max_delay: int = 8
    """``D``: largest delay kept in the snapshot store (``random`` draws up to it; ``actors`` is capped at it)."""
    n_actors: int = 4
    """``actors`` mode: concurrent rollout workers; staleness emerges from the queue."""
    temperature: float = 1.0
    """Sampling temperature; ``π`` and ``μ`` are both the tempered softmax so ``ℓ`` stays exact."""
    max_new_tokens: int = 8
    """Completion length cap ``T`` (a completion without EOS by then is truncated, reward from its text)."""
    eval_every: int = 10
    """Greedy held-out accuracy every this many steps (and at the start and the end)."""
    checkpoint_every: int = 0
    """Save a resumable checkpoint every this many steps (0: only at the end)."""
    seed: int = 0
    """Seeds the prompts, the delays and the sampling (and the init and warm start unless ``warmstart_seed``)."""
    warmstart_seed: int | None = None
    """Seed of the model init and the warm start; ``None``: ``seed``. Fix it to share one warm start across seeds."""
    preset: str = "tiny"
    """Size dial for random-init models (``PRESETS``); ignored with ``model_path``."""
    model_path: str | None = None
    """Local checkpoint directory (config, weights, tokenizer); never downloaded."""
    dtype: str = "float32"
    """Model dtype: ``float32`` or ``bfloat16`` (log-probs are always float32)."""
    device: str = "cpu"
    """``cpu`` or ``cuda``."""
    threads: int = 1
    """``torch.set_num_threads`` on CPU (1: the tiny model gains little from more, and one thread per run
    avoids oversubscribing a shared machine, where intra-op threads contend badly)."""
    out_dir: str = "results/llm/runs/default"
    """Where metrics (JSONL, CSV), the config and checkpoints go."""
    task: TaskConfig = field(default_factory=TaskConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    cache_dir: str = "results/llm/cache"
    """Warm-start cache."""

    def __post_init__(self) -> None:
        if self.estimator not in ALL_ESTIMATORS:
            raise ValueError(f"estimator must be one of {', '.join(ALL_ESTIMATORS)}, got {self.estimator!r}")
        for name in ("eps", "eps_low", "eps_high", "tau_m2", "lr", "temperature", "max_grad_norm"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if self.eps_low >= 1:
            raise ValueError(f"eps_low must be in (0, 1), got {self.eps_low!r}")
        for name, low in (("group_size", 1), ("prompts_per_step", 1), ("steps", 0), ("delay", 0),
                          ("max_delay", 0), ("n_actors", 1), ("max_new_tokens", 1), ("eval_every", 1),
                          ("checkpoint_every", 0), ("threads", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.delay_mode not in DELAY_MODES:
            raise ValueError(f"delay_mode must be one of {', '.join(DELAY_MODES)}, got {self.delay_mode!r}")
        if self.delay_mode == "fixed" and self.delay > self.max_delay:
            raise ValueError(f"delay must be in 0..max_delay={self.max_delay} (snapshots kept), got {self.delay}")
        if self.preset not in PRESETS and self.model_path is None:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")

    @property
    def n_traj(self) -> int:
        """Trajectories per learner step ``N = n_groups·G``."""
        return self.prompts_per_step * self.group_size

    @property
    def init_seed(self) -> int:
        """Seed of the random init and the supervised warm start."""
        return self.seed if self.warmstart_seed is None else self.warmstart_seed

    @property
    def token_level(self) -> bool:
        """Whether the estimator is a token-level baseline (not in the registry of §2)."""
        return self.estimator in TOKEN_NAMES

    def to_dict(self) -> dict:
        """Plain nested dict (JSON-serialisable)."""
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "TrainConfig":
        """A copy with ``changes`` (nested ``task=``/``warmstart=`` take dataclasses)."""
        return dataclasses.replace(self, **changes)


def warmstart_key(cfg: TrainConfig) -> str:
    """Cache key of the warm start: everything that determines its weights, nothing else."""
    payload = {
        "task": dataclasses.asdict(cfg.task),
        "warmstart": dataclasses.asdict(cfg.warmstart),
        "preset": dataclasses.asdict(PRESETS[cfg.preset]) if cfg.model_path is None else None,
        "model_path": cfg.model_path,
        "dtype": cfg.dtype,
        "seed": cfg.init_seed,
        "max_new_tokens": cfg.max_new_tokens,
        "version": 1,
    }
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
