"""Typed, frozen configuration of the LLM harness (STYLE §9): one size dial, one run config.

``PRESETS`` is the size dial for the random-init Qwen3-architecture models; ``--model PATH``
replaces it by a local checkpoint. ``TrainConfig`` holds every setting of one asynchronous RL
run in the notation of docs/THEORY.md §1–2 and of :class:`simulate.training.TrainConfig` where the
concept is the same: group size ``G``, groups per step ``n_prompts``, step size ``eta``, thresholds
``eps``/``eps_low``/``eps_high``/``tau_m2``, delay model ``delay`` with its parameters ``d``, ``D``,
``n_actors`` (the kinds of :mod:`simulate.delays`). Derived values are properties, never fields
filled in later. Checks that need the machine (CUDA present, ``out_dir`` writable) are in
:func:`check_runtime`, which every entry point calls before it builds a model.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field

from asyncgrpo.estimators.aggregation import check_loss_agg_mode
from asyncgrpo.estimators.token_level import CISPO_CLAMPS, TOKEN_ESTIMATORS
from simulate.llm.portability.kernel_paths import parse_path
from simulate.training.config import (  # one list of estimator names each (torch-free)
    ALL_ESTIMATORS,
    REGISTERED_ESTIMATORS,
)

#: Token-level baselines of docs/THEORY.md §2 (the registry's list; importing it does not import torch).
TOKEN_NAMES: tuple[str, ...] = TOKEN_ESTIMATORS
#: Delay models (kinds of :mod:`simulate.delays`): ``fixed`` uses ``d``, ``uniform`` uses ``D``,
#: ``queue`` uses ``n_actors`` (lognormal generation times, log-sd 1).
DELAY_MODES: tuple[str, ...] = ("fixed", "uniform", "queue")
TASKS: tuple[str, ...] = ("arithmetic", "countdown", "mixed")
DEVICES: tuple[str, ...] = ("cpu", "cuda")


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


def _check_int(obj, name: str, low: int) -> None:
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_positive(obj, name: str, *, allow_inf: bool = False) -> None:
    value = getattr(obj, name)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
          and (allow_inf or math.isfinite(value)))
    if not ok:
        what = "a number > 0 (inf allowed)" if allow_inf else "a finite number > 0"
        raise ValueError(f"{name} must be {what}, got {value!r}")


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
        if isinstance(self.digits, bool) or not isinstance(self.digits, int) or not 1 <= self.digits <= 6:
            raise ValueError(f"digits must be an integer in 1..6, got {self.digits!r}")
        if (isinstance(self.countdown_numbers, bool) or not isinstance(self.countdown_numbers, int)
                or not 2 <= self.countdown_numbers <= 5):
            raise ValueError(f"countdown_numbers must be an integer in 2..5, got {self.countdown_numbers!r}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction!r}")
        _check_int(self, "n_eval", 1)


@dataclass(frozen=True)
class WarmStartConfig:
    """Supervised warm start: cross-entropy on correct completions of training problems."""

    steps: int = 300
    """Optimiser steps of the supervised phase."""
    batch_size: int = 64
    """Problems per supervised step."""
    eta: float = 3e-3
    """AdamW step size ``η`` of the supervised phase."""
    frozen: str = ""
    """A frozen warm start: load these weights instead of training them (a file name under
    ``simulate/llm/warmstarts/`` or a path; :func:`simulate.llm.warmstart.load_frozen`). The supervised phase
    is chaotic (a 1e-13 difference grows to O(1) in 400 steps, LOG.md 2026-12-05), so a warm start made on
    another CPU or kernel path is another start; ``steps``/``batch_size``/``eta`` then say how it was made."""
    frozen_sha256: str = ""
    """SHA-256 of the frozen file's bytes (required with ``frozen``; a file that differs is refused)."""

    def __post_init__(self) -> None:
        _check_int(self, "steps", 0)
        _check_int(self, "batch_size", 1)
        _check_positive(self, "eta")
        if not isinstance(self.frozen, str) or not isinstance(self.frozen_sha256, str):
            raise ValueError(f"frozen and frozen_sha256 must be strings, got {self.frozen!r}, {self.frozen_sha256!r}")
        if self.frozen and not re.fullmatch(r"[0-9a-f]{64}", self.frozen_sha256):
            raise ValueError(f"frozen_sha256 must be the 64 lower-case hex digits of the frozen file's SHA-256, got "
                             f"{self.frozen_sha256!r}")
        if self.frozen_sha256 and not self.frozen:
            raise ValueError("frozen_sha256 is set but frozen (the file) is not")


def warmstart_dict(ws: WarmStartConfig) -> dict:
    """``ws`` as a dict; the frozen fields only when set, so configs without a frozen warm start keep their
    hashes and cache keys."""
    out = dataclasses.asdict(ws)
    if not ws.frozen:
        out.pop("frozen")
        out.pop("frozen_sha256")
    return out


@dataclass(frozen=True)
class TrainConfig:
    """One asynchronous RL run (docs/THEORY.md §1–2); names as in :class:`simulate.training.TrainConfig`."""

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
    loss_agg_mode: str | None = None
    """Aggregation of per-token terms in ``policy_loss`` (verl names ``token-mean``, ``seq-mean-token-mean``,
    ``seq-mean-token-sum``, ``seq-mean-token-sum-norm``; TRL aliases ``grpo``, ``bnpo``, ``dapo``, ``dr_grpo``).
    ``None``: the loss's own default (THEORY's ``ĝ`` for trajectory-level maps)."""
    clip_ratio_c: float | None = None
    """Dual clip: for ``A < 0`` the token ratio is capped at ``clip_ratio_c`` (verl's default 3.0);
    ``None``: off."""
    cispo_clamp: str | None = None
    """cispo's clamp convention (``upper``: ``[0, 1+ε_high]``, the default here; ``two-sided``: verl's
    ``[1−ε_low, 1+ε_high]``; ``absolute``: TRL's ``ε_high`` as the cap itself). ``None``: the loss's default."""
    G: int = 8
    """Group size: trajectories per prompt."""
    n_prompts: int = 16
    """Groups per learner step."""
    steps: int = 40
    """Learner updates ``K``."""
    eta: float = 3e-4
    """AdamW step size ``η`` of the RL phase (1e-3 collapsed the tiny model's accuracy in one trial)."""
    weight_decay: float = 0.0
    """AdamW weight decay of the RL phase."""
    warmup_steps: int = 0
    """Linear step-size warm-up: update ``j`` (``j = 0, 1, …``) uses ``η·min(1, (j+1)/warmup_steps)``. AdamW's
    first updates move every weight by about ``η`` whatever the gradient's signal-to-noise (its moments
    start empty), which on RL's noisy gradients first undoes part of the warm start; ``0``: off (v3)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (inf disables it); the pre-clip norm is logged."""
    length_normalize: bool = False
    """Divide the trajectory-level coefficients ``c_{i,t} = w_i`` by the completion length ``T_i``
    (``policy_loss(length_normalize=True)``), the same per-sequence ``1/T_i`` the token-level baselines
    carry, so that with AdamW and the grad-norm clip all estimators take steps of comparable size.
    ``False`` is THEORY's ``ĝ`` (``Σ_t``, no ``1/T_i``); token-level estimators are unaffected."""
    adv_norm: bool = False
    """``A_i = (R_i−R̄)/(std R + δ)`` (GRPO option) instead of ``R_i − R̄`` (THEORY §1)."""
    delay: str = "fixed"
    """Delay model of ``d_k`` (:mod:`simulate.delays`): ``fixed`` (``d_k = d``), ``uniform``
    (``d_k ~ U{0..D}``) or ``queue`` (actor–learner queue with ``n_actors`` actors)."""
    d: int = 0
    """``fixed``: the delay of every step. Only the ``fixed`` model reads it (another model with
    ``d > 0`` is refused, so a parameter never goes silently unused)."""
    D: int = 8
    """Largest delay: ``uniform`` draws ``d_k`` in ``0..D``; snapshots of the last ``D`` versions are kept
    and every model's ``d_k`` is capped at ``D``."""
    n_actors: int = 4
    """``queue``: concurrent rollout workers; staleness emerges from the queue."""
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
    """Model dtype: ``float32``, ``bfloat16`` (log-probs in float32) or ``float64`` (log-probs in float64: CPU
    kernel round-off ~1e-16, so a run does not move with the CPU's kernel path; LM protocol v7)."""
    device: str = "cpu"
    """``cpu`` or ``cuda``."""
    threads: int = 1
    """``torch.set_num_threads`` on CPU. Fixed (not "all cores") because CPU kernels may sum in a
    thread-count-dependent order: one thread per run gives the same numbers on every machine, and
    avoids oversubscribing a shared one, where intra-op threads contend badly."""
    out_dir: str = "results/llm/runs/default"
    """Where metrics (JSONL, CSV), the config and checkpoints go."""
    task: TaskConfig = field(default_factory=TaskConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    cache_dir: str = "results/llm/cache"
    """Warm-start cache."""
    kernels: str = ""
    """CPU kernel path ``"<aten>+<mkl>"`` the run must be made on (:mod:`simulate.llm.portability.kernel_paths`; LM protocol
    v5 pins ``avx2+COMPATIBLE``): a process that does not run it refuses the run. ``""``: whatever the process
    runs, not recorded (before v5; left out of :meth:`to_dict`, so earlier configs and caches keep their keys)."""

    def __post_init__(self) -> None:
        if self.kernels:
            parse_path(self.kernels)
            if self.device != "cpu":
                raise ValueError(f"kernels (a CPU kernel path) applies to device cpu only, got device {self.device!r}")
        if self.estimator not in REGISTERED_ESTIMATORS:  # the peers' corrections too (asyncgrpo.estimators.registry)
            raise ValueError(f"estimator must be one of {', '.join(REGISTERED_ESTIMATORS)}, got {self.estimator!r}")
        for name in ("eps", "eps_low", "eps_high", "tau_m2", "eta", "temperature"):
            _check_positive(self, name)
        _check_positive(self, "max_grad_norm", allow_inf=True)
        if self.eps_low >= 1:
            raise ValueError(f"eps_low must be in (0, 1), got {self.eps_low!r}")
        if self.clip_ratio_c is not None:
            _check_positive(self, "clip_ratio_c")
            if self.clip_ratio_c <= 1:
                raise ValueError(f"clip_ratio_c must be a finite number > 1 (dual-clip cap), got {self.clip_ratio_c!r}")
        if self.loss_agg_mode is not None:
            check_loss_agg_mode(self.loss_agg_mode)
        if self.cispo_clamp is not None and self.cispo_clamp not in CISPO_CLAMPS:
            raise ValueError(f"cispo_clamp must be one of {', '.join(CISPO_CLAMPS)}, got {self.cispo_clamp!r}")
        if self.cispo_clamp is not None and self.estimator != "cispo":
            raise ValueError(f"cispo_clamp applies to estimator cispo only, not {self.estimator!r}")
        for name, low in (("G", 1), ("n_prompts", 1), ("steps", 1), ("d", 0), ("D", 0), ("n_actors", 1),
                          ("max_new_tokens", 1), ("eval_every", 1), ("checkpoint_every", 0), ("threads", 1),
                          ("seed", 0), ("warmup_steps", 0)):
            _check_int(self, name, low)
        if self.warmstart_seed is not None:
            _check_int(self, "warmstart_seed", 0)
        if not (isinstance(self.weight_decay, (int, float)) and math.isfinite(self.weight_decay)
                and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        if self.delay not in DELAY_MODES:
            raise ValueError(f"delay must be one of {', '.join(DELAY_MODES)}, got {self.delay!r}")
        if self.delay == "fixed" and self.d > self.D:
            raise ValueError(f"d must be in 0..D={self.D} (snapshots kept), got {self.d}")
        if self.delay != "fixed" and self.d != 0:
            need = "D (d_k ~ U{0..D})" if self.delay == "uniform" else "n_actors"
            raise ValueError(f"d={self.d} is the fixed model's parameter; delay={self.delay} does not read it "
                             f"(it uses {need}): drop d or use delay=fixed")
        if self.preset not in PRESETS and self.model_path is None:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.dtype not in ("float32", "bfloat16", "float64"):
            raise ValueError(f"dtype must be float32, bfloat16 or float64, got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")

    @property
    def n_traj(self) -> int:
        """Trajectories per learner step ``N = n_prompts·G``."""
        return self.n_prompts * self.G

    @property
    def init_seed(self) -> int:
        """Seed of the random init and the supervised warm start."""
        return self.seed if self.warmstart_seed is None else self.warmstart_seed

    @property
    def token_level(self) -> bool:
        """Whether the estimator is a token-level baseline (not in the registry of §2)."""
        return self.estimator in TOKEN_NAMES

    @property
    def delay_label(self) -> str:
        """Short id of the delay model, e.g. ``fixed(d=4)``, ``uniform(D=8)``, ``queue(n=4)``."""
        return {"fixed": f"fixed(d={self.d})", "uniform": f"uniform(D={self.D})",
                "queue": f"queue(n={self.n_actors})"}[self.delay]

    def to_dict(self) -> dict:
        """Plain nested dict (JSON-serialisable); ``kernels`` only when set (configs before v5 keep their form)."""
        out = dataclasses.asdict(self)
        out["warmstart"] = warmstart_dict(self.warmstart)
        if not self.kernels:
            out.pop("kernels")
        return out

    def replace(self, **changes) -> TrainConfig:
        """A copy with ``changes`` (nested ``task=``/``warmstart=`` take dataclasses)."""
        return dataclasses.replace(self, **changes)


def config_diff(saved: dict, current: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """``[(key, saved value, current value)]`` for every differing key of two nested config dicts."""
    out = []
    for k in sorted(set(saved) | set(current)):
        a, b = saved.get(k, "<absent>"), current.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append((f"{prefix}{k}", a, b))
    return out


def check_writable(path: str, name: str = "out_dir") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``path`` is, or can be created as, a writable directory.

    Probes by creating (and deleting) a temporary file in the deepest existing ancestor, which also
    catches read-only file systems where permission bits say yes (``root``); creates nothing else.
    """
    import tempfile

    p = os.path.abspath(path)
    if os.path.exists(p) and not os.path.isdir(p):
        raise ValueError(f"{name} {path!r} exists and is not a directory")
    probe = p
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ValueError(f"{name} {path!r} cannot be created: {probe!r} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise ValueError(f"{name} {path!r} is not writable ({probe!r}: {exc.strerror or exc})") from None


def check_runtime(cfg: TrainConfig) -> None:
    """Checks that need the machine, done before any model is built: the device exists and
    ``out_dir``/``cache_dir`` are writable. Raises ``ValueError`` naming the option."""
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False on this machine; "
                             "use --device cpu")
    check_writable(cfg.out_dir, "out_dir")
    check_writable(cfg.cache_dir, "cache_dir")


def _source_hash(modules: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for m in modules:
        with open(os.path.join(here, m), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


#: Source files that determine the warm start's weights: a change in them is a new cache entry, so a
#: stale cache from older code can never give different numbers than a fresh run of this commit.
#: float64_model.py sets the float64 warm start's init (numpy_init): an edit there must move the key too.
WARMSTART_SOURCES: tuple[str, ...] = ("model.py", "warmstart.py", "tasks.py", "tokenizer.py", "portability/float64_model.py")


def warmstart_key(cfg: TrainConfig) -> str:
    """Cache key of the warm start: everything that determines its weights (settings and code), nothing else."""
    payload = {
        "task": dataclasses.asdict(cfg.task),
        "warmstart": warmstart_dict(cfg.warmstart),
        "preset": dataclasses.asdict(PRESETS[cfg.preset]) if cfg.model_path is None else None,
        "model_path": cfg.model_path,
        "dtype": cfg.dtype,
        "seed": cfg.init_seed,
        "max_new_tokens": cfg.max_new_tokens,
        "code": _source_hash(WARMSTART_SOURCES),
        "version": 2,
    }
    if cfg.kernels:  # v5: the warm start is made on the run's kernel path (other paths give other weights)
        payload["kernels"] = cfg.kernels
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
