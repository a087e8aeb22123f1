"""A GPU run's plan, sized before it runs: the forest on the batched engine in the fewest chunks of runs that
fit the card, its peak memory and time estimated from the model size, the batch and the sequence lengths.

The run is the batched forest (:mod:`simulate.llm.batched`, :mod:`simulate.llm.stacked_model`, rollouts queued by
:mod:`simulate.llm.rollout_queue`): ``R`` runs (seeds × estimators × delays) step together; each step decodes
every run's ``N = n_prompts·G`` completions (prompt ``P`` tokens, ``T = max_new_tokens`` new ones), takes one
stacked forward/backward over ``L = P + T`` tokens, and every ``eval_every`` steps decodes ``n_eval`` held-out
prompts per run. Memory, in bytes, with ``p`` parameters, ``b_w`` bytes per weight and ``b_a`` per activation
(``float32``: 4 and 4; ``bf16-autocast``: float32 weights, bf16 products: 4 and 2, plus a bf16 copy of the
stacked weights):

- **resident** (between steps, :class:`simulate.llm.learner_step.RunState`): per run the weights, their
  gradient and AdamW's two moments (``4·b_w·p``) and its queued batches, at most ``s = min(D, d, K−1) + 1`` of
  ``N·(16·L + 5·T + 8)`` bytes each (token ids and attention mask int64, completion mask, float32 ``log μ``,
  float64 rewards); one warm start ``b_w·p`` per forest. No weight snapshots: a batch is sampled while its
  behaviour policy is the current one;
- **learner** (on top, gradients freed first): the stacked weights ``R·p·b_w`` and the activations kept for
  the backward, ``R·N·L·(n_layers·a + 2h + V)·b_a + R·N·T·V·8`` with ``a = 4h + 4I + 10·H·d + 4·K·d + H·L``
  elements per token and layer (counted in :func:`simulate.llm.stacked_model._block`: norms, q/k paths with
  RoPE, grouped keys repeated, the math attention's probabilities, the MLP), or the gradients coming back;
- **decode** (sampling, at most ``R`` entries per decode, and held-out evaluation): the stacked current weights
  ``R·p·b_w``, the static KV cache ``2·n_layers·R·N·K·L·d·b_w`` and one layer's prefill;

the peak is the resident memory plus the largest phase. **Chunks**: when the whole forest's peak exceeds the
card's usable memory, the runs are split into the fewest chunks whose peak fits (:func:`chunking`), trained one
after another, each its own forest (``R`` above is a chunk's runs; the chunks' sizes differ by at most one).
Time: ``6·p·R·N·L`` FLOPs for the learner, ``2·p·R·N·L`` for the decode, at :data:`MFU` of the card's dense
peak — a guess until a card measures it — or, when more, one kernel launch of :data:`LAUNCH_S` per op (the
decode runs ``T`` steps of ``n_layers`` layers one after another, once per group of queued batches, about one
per delay); plus :data:`OPS_PER_RUN_STEP` launches per run and step (loss, metrics, clipping, AdamW) and
:data:`HOST_S_PER_SEQ` of Python per sequence sampled or evaluated; summed over the chunks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

GiB = 2 ** 30
#: Usable memory and dense peak FLOP/s (float32 without TF32, bf16 tensor cores) of the cards a plan targets.
CARDS = {"h100": dict(name="NVIDIA H100 80GB", memory=78 * GiB, float32=67e12, bf16=989e12),
         "h200": dict(name="NVIDIA H200", memory=139 * GiB, float32=67e12, bf16=989e12),
         "cpu": dict(name="CPU (dry run)", memory=16 * GiB, float32=1e11, bf16=1e11)}
#: Memory kept free for the CUDA context, the allocator's fragmentation and the library workspaces.
HEADROOM = 0.10
#: The share of the dense peak a forest of small matrix products reaches (a guess until a card measures it).
MFU = 0.25
#: Seconds per kernel launch (Python and the CUDA launch), the floor of a step of many small ops.
LAUNCH_S = 10e-6
#: Kernel launches per layer: forward ≈ 30 ops, backward ≈ 2× that.
OPS_FORWARD, OPS_BACKWARD = 30, 60
#: Launches per run and step outside the stacked products (its loss, metrics row, clipping, AdamW; a guess).
OPS_PER_RUN_STEP = 300
#: Host seconds per sampled or evaluated sequence: its prompt drawn and tokenised, its completion decoded and
#: rewarded in Python (16 us measured on the 2-core CPU of 2026-12-07; the card waits meanwhile).
HOST_S_PER_SEQ = 16e-6
PRECISIONS = ("float32", "bf16-autocast")


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a Qwen3-architecture preset the estimate needs."""

    V: int
    h: int
    n_layers: int
    H: int
    K: int
    d: int
    I: int  # noqa: E741  (the MLP's intermediate size, as Qwen3Config names it)

    @classmethod
    def of(cls, preset: str, vocab_size: int) -> "ModelShape":
        from simulate.llm.config import PRESETS

        p = PRESETS[preset]
        return cls(vocab_size, p.hidden_size, p.num_hidden_layers, p.num_attention_heads, p.num_key_value_heads,
                   p.head_dim, p.intermediate_size)

    @property
    def params(self) -> int:
        """Parameters (tied output head counted once, as :func:`simulate.llm.stacked_model.weight_names`)."""
        h, H, K, d, I = self.h, self.H, self.K, self.d, self.I
        layer = h * H * d + 2 * h * K * d + H * d * h + 2 * d + 3 * h * I + 2 * h
        return self.V * h + self.n_layers * layer + h

    def act_per_token_layer(self, L: int) -> int:
        """Activation elements one token keeps for the backward in one layer (module docstring's ``a``)."""
        return 4 * self.h + 4 * self.I + 10 * self.H * self.d + 4 * self.K * self.d + self.H * L


@dataclass(frozen=True)
class GpuPlan:
    """What a GPU run will do: the model, precision, card, and the forest (every seed in one batch)."""

    preset: str = "gpu"
    precision: str = "bf16-autocast"  # float32 needs ~13x the time (67 vs 989 TFLOP/s dense on an H100)
    card: str = "h100"
    estimators: tuple = ("onpolicy", "is", "tis", "tic", "gmc", "grpo")
    delays: tuple = (0, 8, 32)
    seeds: tuple = tuple(range(16))
    n_prompts: int = 32
    G: int = 8
    max_new_tokens: int = 8
    steps: int = 40
    eval_every: int = 10
    n_eval: int = 500
    digits: int = 3
    pairs: tuple = ()
    """``(estimator, d)`` pairs run for every seed (a protocol's :meth:`~simulate.llm.protocol.LMProtocol.runs`: the
    baseline alone at ``d = 0``); empty: every estimator at every delay."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        from simulate.llm.config import PRESETS

        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.card not in CARDS:
            raise ValueError(f"card must be one of {', '.join(CARDS)}, got {self.card!r}")
        for name in ("n_prompts", "G", "max_new_tokens", "steps", "eval_every", "n_eval", "digits"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("estimators", "delays", "seeds"):
            v = tuple(getattr(self, name))
            if not v or len(set(v)) != len(v):
                raise ValueError(f"{name} must be a non-empty list without repeats, got {v!r}")
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in self.delays):
            raise ValueError(f"delays must be integers >= 0, got {self.delays!r}")

    def run_pairs(self) -> tuple:
        """The ``(estimator, d)`` pairs of every seed, in run order (:attr:`pairs`, else estimators × delays)."""
        return tuple(self.pairs) or tuple((e, d) for e in self.estimators for d in self.delays)

    @property
    def runs(self) -> int:
        return len(self.seeds) * len(self.run_pairs())

    @property
    def D(self) -> int:
        return max(self.delays)

    def sequence_lengths(self) -> tuple[int, int]:
        """``(P, T)``: the longest prompt of the task (tokenised, as the sampler pads to it) and the new tokens."""
        from simulate.llm import tasks
        from simulate.llm.config import TaskConfig
        from simulate.llm.tokenizer import CharTokenizer
        from simulate.llm.warmstart import prompt_ids

        tok = CharTokenizer()
        probe = tasks.draw_problems([0, 1, 0], 256, TaskConfig(digits=self.digits))
        return max(len(prompt_ids(tok, p)) for p in probe), self.max_new_tokens

    def shape(self) -> ModelShape:
        from simulate.llm.tokenizer import CharTokenizer

        return ModelShape.of(self.preset, CharTokenizer().vocab_size)

    def bytes_per(self) -> tuple[int, int]:
        """``(b_w, b_a)``: bytes per weight and per activation."""
        return (4, 4) if self.precision == "float32" else (4, 2)


def queue_lengths(plan: GpuPlan) -> list[int]:
    """Each run's most queued batches ``s = min(D, d, K − 1) + 1`` (runs in the order seeds × :meth:`GpuPlan.run_pairs`;
    a run never waits on more than its ``K`` steps' batches)."""
    return [min(plan.D, d, plan.steps - 1) + 1 for _s in plan.seeds for _e, d in plan.run_pairs()]


def estimate_memory(plan: GpuPlan, runs_kept: list[int] | None = None) -> dict:
    """The module docstring's terms in bytes for one chunk, ``peak`` their sum at the largest phase; ``runs_kept``:
    each of the chunk's runs' queue length ``s`` (default: the whole forest's, :func:`queue_lengths`)."""
    m, (P, T) = plan.shape(), plan.sequence_lengths()
    p, L, N = m.params, P + T, plan.n_prompts * plan.G
    bw, ba = plan.bytes_per()
    kept = runs_kept if runs_kept is not None else queue_lengths(plan)
    R = len(kept)
    batch = N * (16 * L + 5 * T + 8)  # one queued batch: ids + attention int64, mask bool, log mu f32, rewards f64
    queued = batch * sum(kept)
    resident = R * bw * p * 4 + bw * p + queued  # weights, gradient, AdamW's two moments; the warm start
    grads = R * bw * p
    stacked = R * p * bw + (R * p * 2 if plan.precision == "bf16-autocast" else 0)
    acts = R * N * (L * (m.n_layers * m.act_per_token_layer(L) + 2 * m.h + m.V) * ba + T * m.V * 8)
    learner = stacked - grads + max(acts, grads)

    def decode(n):  # stacked current weights, the KV cache, one layer's prefill (activations and attention scores)
        return R * p * bw + 2 * m.n_layers * R * n * m.K * L * m.d * bw + R * n * P * (m.act_per_token_layer(P)
                                                                                        + m.V) * ba
    sample, evaluate = decode(N), decode(plan.n_eval)
    phases = dict(learner=learner, sample=sample, evaluate=evaluate)
    worst = max(phases, key=phases.get)
    return dict(params=p, runs=R, P=P, T=T, N=N, resident=resident, queued=queued, batch_bytes=batch,
                activations=acts, stacked_weights=stacked, kv_sample=sample - R * p * bw,
                kv_eval=evaluate - R * p * bw, phases=phases, worst_phase=worst, peak=resident + phases[worst])


def chunking(plan: GpuPlan) -> dict:
    """The fewest chunks of runs whose estimated peak fits the card: ``{chunks, size, sizes, est, fit}`` (``est``: the
    largest chunk's :func:`estimate_memory`, its runs those with the longest queues; ``fit``: the most runs a chunk
    may hold), ``chunks = 0`` when not even one run fits. The largest fitting chunk size ``c`` gives ``n = ⌈R/c⌉`` chunks of ``⌈R/n⌉`` or one fewer."""
    kept = sorted(queue_lengths(plan), reverse=True)
    have, R = usable_bytes(plan), len(kept)
    lo, hi = 0, R  # the largest size that fits, by bisection (the peak grows with the chunk's runs)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_memory(plan, kept[:mid])["peak"] <= have:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return dict(chunks=0, size=0, sizes=[], est=estimate_memory(plan, kept[:1]), fit=0)
    n = -(-R // lo)
    size = -(-R // n)
    sizes = [R // n + (j < R % n) for j in range(n)]
    return dict(chunks=n, size=size, sizes=sizes, est=estimate_memory(plan, kept[:size]), fit=lo)


def chunks_of(items: list, sizes: list[int]) -> list[list]:
    """``items`` cut into consecutive chunks of ``sizes`` (seeds × estimators × delays order: a chunk holds whole
    seeds' forests where the size allows, so forked branches find their trunk)."""
    out, at = [], 0
    for n in sizes:
        out.append(items[at:at + n])
        at += n
    return out


def seed_chunks(plan: GpuPlan, fit: int) -> list[list[int]]:
    """Chunks of run indices (seeds × :meth:`GpuPlan.run_pairs` order) that hold whole seeds: as many seeds per chunk
    as ``fit`` runs allow, balanced over the fewest chunks, so a run stopped between chunks leaves complete seeds
    (a seed's forest keeps its forks: its trunks are in its chunk). When one seed's runs exceed ``fit``, each seed is
    cut into the fewest consecutive parts that fit (a branch without its trunk is then computed, not forked)."""
    per, S = len(plan.run_pairs()), len(plan.seeds)
    if fit < 1:
        raise ValueError("fit must be >= 1: not even one run fits (check_fits names the parameter)")
    if per > fit:
        parts = -(-per // fit)
        cuts = [per // parts + (j < per % parts) for j in range(parts)]
        return [list(range(s * per + sum(cuts[:j]), s * per + sum(cuts[:j + 1]))) for s in range(S) for j in range(parts)]
    n = -(-S // (fit // per))
    sizes = [S // n + (j < S % n) for j in range(n)]
    return [list(range(sum(sizes[:j]) * per, sum(sizes[:j + 1]) * per)) for j in range(n)]


def estimate_warmstart_seconds(plan: GpuPlan, steps: int, batch_size: int) -> dict:
    """The supervised warm start on the plan's card (:func:`simulate.llm.warmstart.warm_start`: ``steps`` AdamW steps
    of ``batch_size`` problems, prompt ``P`` + solution tokens, **float32** products, trained before any autocast),
    then its held-out accuracy (``n_eval`` prompts, greedy, in batches of 256): ``6·p·B·L`` FLOPs per step at
    :data:`MFU` of the float32 peak or the launch floor, plus :data:`HOST_S_PER_SEQ` per problem drawn."""
    m, (P, T) = plan.shape(), plan.sequence_lengths()
    L = P + plan.digits + 2  # the solution: at most digits + 1 characters and the end token
    peak = CARDS[plan.card]["float32"] * MFU
    per_step = max(6 * m.params * batch_size * L / peak, m.n_layers * (OPS_FORWARD + OPS_BACKWARD) * LAUNCH_S)
    per_step += OPS_PER_RUN_STEP * LAUNCH_S + batch_size * HOST_S_PER_SEQ
    batches = math.ceil(plan.n_eval / 256)
    evaluate = batches * max(2 * m.params * 256 * (P + T) / peak, T * m.n_layers * OPS_FORWARD * LAUNCH_S)
    evaluate += plan.n_eval * HOST_S_PER_SEQ
    return dict(step_s=per_step, steps=steps, eval_s=evaluate, total_s=steps * per_step + evaluate,
                flops=6 * m.params * batch_size * L * steps)


def estimate_seconds(plan: GpuPlan, sizes: list[int] | None = None) -> dict:
    """Seconds per step and for the run on the plan's card (module docstring), summed over chunks of ``sizes`` runs
    (default: one chunk): FLOPs at :data:`MFU`, or launches, per chunk."""
    m, (P, T) = plan.shape(), plan.sequence_lengths()
    p, L, N = m.params, P + T, plan.n_prompts * plan.G
    sizes = sizes or [plan.runs]
    peak = CARDS[plan.card]["float32" if plan.precision == "float32" else "bf16"] * MFU
    evals = math.ceil(plan.steps / plan.eval_every)
    decode_launch = T * m.n_layers * OPS_FORWARD * LAUNCH_S
    learn = sample = evaluate = 0.0
    for R in sizes:
        learn += max(6 * p * R * N * L / peak, m.n_layers * (OPS_FORWARD + OPS_BACKWARD) * LAUNCH_S)
        learn += R * OPS_PER_RUN_STEP * LAUNCH_S
        sample += max(2 * p * R * N * L / peak, len(plan.delays) * decode_launch) + R * N * HOST_S_PER_SEQ
        evaluate += max(2 * p * R * plan.n_eval * L / peak, decode_launch) + R * plan.n_eval * HOST_S_PER_SEQ
    step = learn + sample
    return dict(learner_s=learn, sample_s=sample, eval_s=evaluate, step_s=step, chunks=len(sizes),
                total_s=plan.steps * step + evals * evaluate, flops_per_step=8 * p * plan.runs * N * L)


def usable_bytes(plan: GpuPlan) -> float:
    return CARDS[plan.card]["memory"] * (1 - HEADROOM)


def check_fits(plan: GpuPlan, chunks: dict | None = None) -> None:
    """``ValueError`` naming the parameter to change when not even one run fits the card's usable memory: the
    prompts per step when fewer would fit one run, else the preset (the state of one run alone is too large)."""
    ch = chunks or chunking(plan)
    if ch["chunks"]:
        return
    card, have, est = CARDS[plan.card], usable_bytes(plan), ch["est"]
    one = replace(plan, seeds=tuple(plan.seeds[:1]), estimators=tuple(plan.estimators[:1]), delays=(plan.D,), pairs=())
    prompts = [2 ** k for k in range(int(math.log2(plan.n_prompts)) + 1)
               if estimate_memory(replace(one, n_prompts=2 ** k))["peak"] <= have]
    if prompts:
        hint = (f"--n-prompts: one run fits at {prompts[-1]} prompts per step (activations of "
                f"{prompts[-1] * plan.G} sequences)")
    else:
        hint = (f"--preset: one run's state (weights, gradient, AdamW moments: {4 * 4 * est['params'] / GiB:.1f} GiB) "
                f"with one prompt per step does not fit; choose a smaller preset or a larger --card")
    raise ValueError(f"the plan does not fit {card['name']}: not even one run fits; estimated peak of one run "
                     f"{est['peak'] / GiB:.1f} GiB > {have / GiB:.1f} GiB usable ({card['memory'] / GiB:.0f} GiB, "
                     f"{HEADROOM:.0%} kept free; resident {est['resident'] / GiB:.1f} GiB + {est['worst_phase']} "
                     f"{est['phases'][est['worst_phase']] / GiB:.1f} GiB); {hint}")


def describe(plan: GpuPlan, ch: dict, sec: dict) -> str:
    """The plan in a few lines (what ``gpu-run`` prints before it runs); ``ch``: :func:`chunking`, ``sec``:
    :func:`estimate_seconds` over its chunks."""
    card, est = CARDS[plan.card], ch["est"]
    prec = ("float32 weights and products" if plan.precision == "float32" else
            "float32 weights, bf16 autocast products (log-probs float32)")
    how = ("in one batch" if ch["chunks"] == 1 else
           f"in {ch['chunks']} chunks of at most {ch['size']} runs, one after another")
    lines = [
        f"plan: preset {plan.preset} ({est['params'] / 1e6:.1f}M parameters), {prec}, on {card['name']}",
        f"  forest on the batched engine (simulate/llm/batched.py + stacked_model.py, rollouts queued): {plan.runs} "
        f"runs = {len(plan.seeds)} seeds x {len(plan.estimators)} estimators ({', '.join(plan.estimators)}) x delays "
        f"{', '.join(map(str, plan.delays))}, {how}" if ch["chunks"] else
        f"  forest on the batched engine: {plan.runs} runs; not even one run fits",
        f"  per step: {plan.n_prompts} prompts x G = {plan.G} = {est['N']} sequences per run, P = {est['P']} prompt + "
        f"T = {est['T']} new tokens; {plan.steps} steps, held-out evaluation ({plan.n_eval} prompts) every "
        f"{plan.eval_every}",
        f"  memory estimate per chunk ({est['runs']} runs): peak {est['peak'] / GiB:.2f} GiB = resident "
        f"{est['resident'] / GiB:.2f} GiB (weights, gradients, AdamW moments; queued rollouts "
        f"{est['queued'] / 2**20:.1f} MiB, no weight snapshots) + {est['worst_phase']} "
        f"{est['phases'][est['worst_phase']] / GiB:.2f} GiB; usable {usable_bytes(plan) / GiB:.1f} GiB",
        f"  time estimate: {sec['step_s']:.3g} s per step over all chunks (learner {sec['learner_s']:.3g} s, decode "
        f"{sec['sample_s']:.3g} s), {sec['total_s']:.0f} s for the run (at an assumed {MFU:.0%} of the card's dense "
        f"{'float32' if plan.precision == 'float32' else 'bf16'} peak, or {LAUNCH_S * 1e6:.0f} us per kernel launch "
        f"when that is more; the MFU is a guess until a card measures it; warm start not included)",
    ]
    return "\n".join(lines)
