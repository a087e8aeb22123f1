"""The pre-registered protocol of the LM-scale C9 check (docs/THEORY.md §3 C9, §4).

Everything that decides the LM row of the report is fixed here, before any result is looked at:
seeds, delays, estimators, the metric, the margin, the comparisons and the run settings. The
figure's sidecar prints :meth:`LMProtocol.content_hash` (SHA-256 of this dataclass as canonical
JSON), so a reader can tell which protocol produced a verdict; any edit to this file's values is a
new hash.

**Metric** (``metric="auc"``): the area under the held-out accuracy curve over a fixed sample budget,
``AUC = (1/K) ∫_0^K acc(k) dk`` (trapezoid over the greedy held-out accuracy at ``k = 0`` and after
every ``eval_every`` updates; every run samples the same ``K·n_prompts·G`` trajectories whatever its
delay). It is cheap here (one held-out evaluation costs ~0.05 s) and less noisy than the final
accuracy, which is reported as the secondary metric. Accuracy is already on ``[0, 1]`` with the
optimum 1, and every run of a seed shares one warm start, so the margin is in accuracy units.

**Grid.** At ``d = 0`` every map coincides (``ρ_i = 1`` ⇒ ``w_i = 1`` for every trajectory-level map,
and every token ratio ``r_t = 1`` lies inside every clip, so with length normalisation all give the
same gradient up to sampler round-off), so ``d = 0`` is run once per seed, with
:attr:`LMProtocol.baseline` (``onpolicy``), and is the shared reference; every estimator runs at every
other delay. This halves the cost without losing a comparison.

**Comparisons** (one Holm family, :func:`simulate.verdicts.decide`), paired over seeds:

- ``gmc`` is best or tied at the largest delay ``d_max``: non-inferiority
  ``AUC_gmc(d_max) − AUC_X(d_max) > −δ`` for every other estimator ``X``;
- the uncorrected and the truncated maps degrade with the delay: superiority
  ``AUC(0) − AUC_X(d_max) > +δ`` for ``X`` in :attr:`LMProtocol.degrading` (``AUC(0)`` the shared
  ``d = 0`` run).

**Rates** (Clopper–Pearson, :func:`simulate.verdicts.rate_check`, outside the Holm family): ``is`` is
predicted unstable (rate > ``p0``) and ``gmc`` stable (rate < ``p0``) at ``d_max``. Version 2 uses the
tabular protocol's failure definition and ``p0`` (``training-claims-v2``): a run *failed* if it
**diverged** (skipped a non-finite update), **collapsed** (held-out accuracy fell below its running
maximum by more than ``collapse_drop·(1 − acc_0)``; accuracy's optimum is 1) or **locked in** (final
normalised accuracy below ``lockin_nJ`` with the last steps' gradient norm at most ``lockin_grad_rel``
of the first step's). Version 1 (the first committed report) counted a run unstable if it skipped an
update or ended below ``collapse_fraction`` of its warm-start accuracy, with ``p0 = 0.5``.

**Version 3** (issue 25; :data:`PROTOCOL`, fixed before any of its runs was looked at). What changes
and why:

- *Delays* ``d ∈ {0, 2, 4, 8, 16, 32}`` instead of ``{0, 8, 32}``: the claim is about large delays, and
  a reader needs to see *where* the ordering turns, not one point. The Holm family and the rate checks
  stay at ``d_max = 32`` (the registered verdicts); at every other ``d`` the same comparisons and rates
  are computed without multiplicity correction and reported as *turning points* (the smallest ``d``
  at which each sub-claim's one-sided level-``α`` interval lies wholly above / below its threshold): a
  map of the sweep, not a verdict.
- *Step-size arm*: the sweep again at ``η·arm_lr_factor`` (×3) on ``arm_seeds`` (6 seeds, the first
  six of the main arm, so the arms pair by seed too) at ``arm_delays = (0, 8, 32)``: every delay the
  registered comparisons and rates use (``0`` and ``d_max``) plus the middle one. It gets the same
  comparisons and rates, reported per arm; the claim's verdict is the main arm's (the arm has half the
  seeds, so its ``inconclusive`` is expected more often and is not a contradiction). Its purpose is to
  show whether a stability conclusion survives a 3× larger step, not to re-decide C9. With 6 seeds
  ``gmc stable`` cannot hold in the arm (0/6 failures: 90 % Clopper–Pearson upper limit 0.39 > p₀); the
  arm can refute it or find ``is`` unstable. ``--full`` runs the arm on 12 seeds at every delay.
  Why not every delay by default: one seed's forest of 31 runs costs ~70 CPU-s on this machine's
  cores, so 12 + 6 full forests are ~1270 CPU-s, over the 10-minute budget on 2 cores; the arm at
  three delays costs ~45 % of a full forest.
- *Groups per step* ``n_prompts = 8`` (``G = 8`` unchanged, 64 trajectories per step) instead of 16:
  the sweep grows from 156 to 558 runs and the LM part of ``make run`` has a 10-minute budget on 2 cores
  (issue 25). The group size ``G`` — the quantity the group-level maps act on — is unchanged, and the
  per-step gradient gets noisier, which makes a difference between estimators harder, not easier, to
  show. Everything else (``K = 40`` updates, η, the warm start, ``n_eval``, the margin, ``α``, ``p₀``, the
  failure definition) is v2's.
- *Rate premise*: the tabular protocol's v3 rule (``rate_premise_d0``, adopted so that the LM row keeps
  "the same verdict rule"): ``is unstable`` / ``gmc stable`` at ``d`` are ``out of scope`` when the shared
  ``d = 0`` runs already fail in more than ``p₀`` of the seeds (a failure at ``d`` is then not the delay's).
- *Exact sharing* (no change in any number, :mod:`simulate.llm.tree`): the runs of one seed and step
  size are computed as trees whose common prefixes (every ``k ≤ d`` samples the warm start) are run
  once, and batches drawn from the warm start are drawn once per seed.

``--full`` (``full_seeds``: 24 seeds in the main arm, 12 in the step-size arm) is the same protocol on
more seeds, for a machine with time; its verdicts use the same rule.

**Version 4** (issue 35; :data:`PROTOCOL_V4`). v3's row barely learnt (accuracy AUC ≈ 0.50 at ``d = 0`` from
a 0.48 warm start), so it measured collapse-avoidance, not learning, and two of its statements flipped
with the CPU's SIMD kernels. What changes and why:

- *A task where RL learns*: the warm start runs 800 steps instead of 400 (held-out accuracy 0.555), the
  RL step size ramps up linearly over the first ``warmup_steps = 10`` updates (AdamW's first updates move
  every weight by ~η whatever the gradient's signal-to-noise, and undid part of the warm start), and the
  advantages are group-normalised (``adv_norm``, GRPO's option). Chosen from exploratory runs of the
  ``d = 0`` learner alone (onpolicy, seeds 0–6, final held-out accuracy − warm start +0.135 … +0.25,
  2026-12-04); no comparison between estimators was looked at before this version was fixed.
  ``min_gain = 0.15`` is the target the sidecar reports against (mean gain of the ``d = 0`` runs with its
  95 % t-interval); it decides no verdict.
- *Delays* ``(0, 2, 8, 32)`` and *no step-size arm* (``arm_seeds = ()``): the perturbation check below
  re-runs the registered comparisons, and the LM part of ``make run`` has 8 minutes on 2 cores.
- *The regime label from an interval* (``regime_level``): gmc's runs at ``d_max`` are in the *local*
  overlap regime when the upper end of the 95 % t-interval of the geometric mean (over seeds) of their
  learning-phase ``χ̂²`` is ≤ 1, *far* when its lower end is > 1, otherwise ``inconclusive`` — v3 read a
  point (the median, 0.846 on one CPU and 1.26 on another).
- *Perturbation* (``perturb_capabilities``, ``perturb_seeds``): the registered comparisons and rates at
  ``d_max`` and the regime label are re-made under every other ATen CPU kernel path the machine has
  (``ATEN_CPU_CAPABILITY``, warm start included, in subprocesses) on ``perturb_seeds`` (4 seeds, the
  budget) and compared with the native run on the same seeds; a part whose verdict or label differs is
  *fragile* (:mod:`simulate.llm.perturb`).

**Version 5** (issue 35; :data:`PROTOCOL`; fixed before any v5 run, as the response to v4's measured
fragility: on seeds 0–3, 2 of 12 parts differed between native avx512 and the default/avx2 paths — "gmc not
worse than tis" inconclusive natively, holds under both; the regime label inconclusive natively, local under
both). v4's task, runs, seeds, delays, comparisons, rates and regime interval are unchanged. What changes:

- *Pinned kernels* (``kernel_pin = "avx2+COMPATIBLE"``, :mod:`simulate.llm.determinism`): every run, warm
  start included, is made with ``ATEN_CPU_CAPABILITY=avx2`` and ``MKL_CBWR=COMPATIBLE``, so the row's
  numbers are the same on every x86-64 CPU with AVX2 (CPUs without AVX2 and other architectures are not
  covered: a run there is refused). Measured on the AMD EPYC of 2026-12-04 (tiny model, 150 warm-start and
  8 RL steps): unpinned, ATen avx512 / avx2 / default give three different runs, and so do MKL with CNR off /
  ``AUTO`` / ``COMPATIBLE``; pinned, the run is bit for bit the same with ``MKL_ENABLE_INSTRUCTIONS`` =
  AVX512, AVX2 or SSE4_2 (a ceiling MKL honours on Intel CPUs; on this AMD CPU it changed nothing even
  unpinned) and whatever ``ATEN_CPU_CAPABILITY`` the caller had set. Cost: +13–18 % CPU time.
- *Perturbation as a sensitivity check* (``perturb_paths``): the runs the registered parts need are re-made on
  ``perturb_seeds`` under other kernel paths — ``native`` (no pin: the CPU's own ATen and MKL paths) and
  ``default+COMPATIBLE`` (ATen's scalar kernels) — and substituted for the pinned runs of those seeds in the
  full table; every part is re-decided on each substituted table.
- *Consensus rule* (``consensus``): a part's reported verdict (or the regime label) is the pinned table's only
  where every substituted table gives the same; otherwise it is reported as ``inconclusive`` with the note
  "kernel-fragile: <path> gives <verdict>". The claim's verdict is :func:`simulate.verdicts.combine` of the
  reported parts. So a verdict that a last-bit change on a third of the seeds moves is not reported as a
  finding, and the reported row is the same on every covered CPU.

**Version 6** (issue 35; :data:`PROTOCOL`; fixed before any v6 run). Measured on v5's row: the pin did not make it
the same across CPU vendors (warm start 0.685 on an AMD EPYC, 0.700 on an Intel Xeon), the ``d = 0`` learner
gained +0.131 / +0.087 (target +0.15: missed on both), and "is unstable" was kernel-fragile on the Intel CPU
(0 of 12 failures pinned, 1 on a perturbed path). What changes and why:

- *A task where RL learns*: the warm start runs ``warmstart_steps = 400`` updates (held-out accuracy 0.51 pinned on
  the Intel Xeon) and a step has ``n_prompts = 16`` groups (``G = 8`` unchanged: 128 trajectories per step, 40
  steps). Chosen from exploratory runs of the ``d = 0`` learner alone (onpolicy, pinned, seeds 100–105, outside
  every registered seed set; no other estimator and no delay > 0 was run), 2026-12-05; final held-out accuracy
  minus warm start, mean of 6 seeds: v5's settings +0.094 after 80 steps (a plateau ≈ 0.80 from a 0.70 start),
  at η × 2 +0.049 and at η × 3.3 −0.151; 400 warm-start steps with 8 groups +0.158 after 80 steps; 400
  warm-start steps with 16 groups +0.182 after 40 steps (every seed ≥ +0.145). A weaker start leaves RL room to
  show; the failure rule's collapse drop ``collapse_drop·(1 − acc₀)`` grows from 0.15 to 0.245 with it, about 5
  standard errors of the difference of two held-out accuracies (``n_eval = 200``), so evaluation noise alone
  rarely makes a run fail.
- *Seeds and delays*: 16 seeds (``0..15``) at ``d ∈ {0, 8, 32}``: with 16 groups a run costs ≈ 1.7× v5's, and
  more seeds make a rate verdict move less when one seed's failure does (Clopper–Pearson at 90 %: 0 of 12 has
  upper limit 0.221, 1 of 12 0.339; 0 of 16 0.171). ``d = 2`` is dropped to pay for them: the registered
  comparisons use ``d = 0`` and ``d_max``, ``d = 8`` keeps one middle point, and v3's and v5's reports keep the
  finer delay map.
- Everything else is v5's: the pin, the perturbation paths and seeds 0–3, the consensus rule, the comparisons,
  rates, margin, ``p₀``, the regime interval and ``min_gain = 0.15``.

**Version 7** (issue 35; :data:`PROTOCOL`; fixed before any v7 run). Measured on v6 (LOG.md 2026-12-05, tenth
session): v6's one fragile part ("gmc not worse than grpo") came from the *warm start*, not from RL. Each
perturbed path trained its own warm start, and the supervised phase is chaotic — two float64 warm starts whose
kernels differ in the last bit differ by 2e-13 after 1 step, 5e-11 after 50, 3e-3 after 200 and O(1) after 400
(held-out 0.46 vs 0.33) — so v6's perturbed seeds started from policies at 0.365 (native) and 0.48
(default+COMPATIBLE) against the pinned 0.51, and none of their 56 runs matched the pinned run's AUC. From one
shared warm start, 40 RL steps of gmc at ``d = 32`` gave the same held-out accuracies on avx2+COMPATIBLE,
default+COMPATIBLE and native, with χ̂² agreeing to 1e-5 in float32 and 1e-13 in float64. What changes and why:

- *A frozen warm start* (``warmstart_frozen``, :mod:`simulate.llm.frozen`): v6's own warm start (the pinned
  400-step one, held-out 0.51; bit-identical to v6's cache) is committed as ``simulate/llm/warmstarts/lm-v6.pt``
  and every run, on every path and every CPU, loads it after checking its SHA-256 — as post-training starts
  from a given checkpoint;
- *float64 RL* (``dtype = "float64"``, :mod:`simulate.llm.wide`: Qwen3's RMSNorm and rotary tables in float64
  too, log-probs in float64): kernel round-off ~1e-16 instead of ~1e-7, so no sampled token or greedy argmax
  moves with the kernels over 40 steps;
- *no pin* (``kernel_pin = ""``): the runs use the CPU's own kernels, and the perturbation check re-runs
  ``perturb_seeds`` on ``avx2+COMPATIBLE`` and ``default+COMPATIBLE`` (from the same frozen warm start) and
  also reports, per path, how many re-made runs equal the reference run in every held-out accuracy
  (:func:`simulate.llm.perturb.identity`). float64 on the native path costs what float32 on the pin did
  (one gmc run at ``d = 32``: 6.0 s vs 5.9 s; float64 pinned 10.4 s).
- Everything else is v6's: seeds 0–15, delays, runs, comparisons, rates, margin, ``p₀``, the regime interval, the
  consensus rule. The ``d = 0`` learner from the frozen warm start in float64 (onpolicy, seeds 100–105, before
  registration; no other estimator or delay run): mean gain +0.182, every seed ≥ +0.145.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class LMProtocol:
    """Pre-declared settings of the LM C9 comparison (module docstring). Frozen: change = new hash."""

    name: str = "lm-c9"
    version: int = 3
    estimators: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "gmc", "grpo")
    """Compared maps: THEORY's trajectory-level ones and the token-level GRPO baseline."""
    baseline: str = "onpolicy"
    """The one estimator run at ``d = 0`` (module docstring: all maps coincide there)."""
    delays: tuple[int, ...] = (0, 2, 4, 8, 16, 32)
    """Fixed delays ``d``; ``d_max = max(delays)`` is where gmc is compared."""
    seeds: tuple[int, ...] = tuple(range(12))
    """RL seeds (prompts, sampling); the warm start is shared (``warmstart_seed``), so runs pair by seed."""
    degrading: tuple[str, ...] = ("onpolicy", "tis", "tic")
    """Estimators that C9 predicts degrade as ``d`` grows (no correction; truncation)."""
    metric: str = "auc"
    """Primary metric: ``auc`` (module docstring); ``final_acc`` is reported as secondary."""
    margin: float = 0.02
    """Practical margin ``δ`` in accuracy units."""
    alpha: float = 0.05
    """One-sided family-wise level (Holm)."""
    p0: float = 0.25
    """Failure-rate threshold of the rate checks: the tabular protocol's (v2), one p₀ for both."""
    collapse_fraction: float = 0.5
    """Version 1 only: a run collapsed if its final accuracy is below this fraction of its warm start's."""
    collapse_drop: float = 0.5
    """Collapse (v2): accuracy below its running maximum by more than ``collapse_drop·(1 − acc_0)``."""
    lockin_nJ: float = 0.95
    """Lock-in (v2): final normalised accuracy ``(acc_K − acc_0)/(1 − acc_0)`` below this …"""
    lockin_grad_rel: float = 0.01
    """… and the mean gradient norm of the last ``eval_every`` steps at most this fraction of the first step's."""
    power_target: float = 0.8
    """An ``inconclusive`` comparison below this power is marked underpowered (as in the tabular protocol)."""
    # the runs (TrainConfig fields; every run of a seed starts from the same cached warm start)
    steps: int = 40
    n_prompts: int = 8
    G: int = 8
    eta: float = 3e-4
    eval_every: int = 5
    length_normalize: bool = True
    """Trajectory maps carry ``1/T_i`` like the token-level baselines, so steps compare like for like."""
    preset: str = "tiny"
    task: str = "arithmetic"
    digits: int = 2
    n_eval: int = 200
    warmstart_steps: int = 400
    warmstart_seed: int = 0
    threads: int = 1
    # the quick variant: the same protocol on fewer seeds and shorter runs — a path check, not a verdict
    quick_seeds: tuple[int, ...] = (0, 1)
    quick_delays: tuple[int, ...] = (0, 8)
    quick_steps: int = 10
    quick_n_prompts: int = 8
    quick_warmstart_steps: int = 200
    quick_n_eval: int = 100
    # version 3: the step-size arm and the --full seeds (absent from the hash of versions < 3)
    arm_lr_factor: float = 3.0
    """Step-size arm: the same sweep at ``eta·arm_lr_factor``."""
    arm_seeds: tuple[int, ...] = tuple(range(6))
    """Seeds of the step-size arm (a prefix of ``seeds``: the arms pair by seed)."""
    arm_delays: tuple[int, ...] = (0, 8, 32)
    """Delays of the step-size arm (must hold 0 and ``d_max``: the registered comparisons use them)."""
    full_seeds: int = 24
    """``--full``: seeds ``0..full_seeds−1`` in the main arm and ``0..full_seeds/2−1`` in the step-size arm."""
    quick_arm_seeds: tuple[int, ...] = (0,)
    """Quick variant: the step-size arm on these seeds (a path check)."""
    rate_premise_d0: bool = True
    """The tabular v3 rule (``training-claims-v3``): the failure-rate sub-claims are out of scope when the
    ``d = 0`` learner already fails in more than ``p0`` of its runs (here the shared ``d = 0`` run)."""
    # version 4 (absent from the hash of versions < 4)
    warmup_steps: int = 0
    """Linear RL step-size warm-up over this many updates (:attr:`simulate.llm.config.TrainConfig.warmup_steps`)."""
    adv_norm: bool = False
    """Group-normalised advantages ``(R_i − R̄)/(std R + δ)``."""
    warmstart_batch_size: int = 64
    warmstart_eta: float = 3e-3
    device: str = "cpu"
    dtype: str = "float32"
    max_new_tokens: int = 8
    min_gain: float = 0.15
    """Target: mean final held-out accuracy gain of the ``d = 0`` runs over the warm start (reported, decides nothing)."""
    regime_level: float = 0.95
    """Two-sided level of the interval the overlap-regime label is read from."""
    perturb_capabilities: tuple[str, ...] = ()
    """ATen CPU kernel paths (``ATEN_CPU_CAPABILITY``) the perturbation check re-runs under (those the CPU has)."""
    perturb_seeds: tuple[int, ...] = ()
    """Seeds of the perturbation check (a prefix of ``seeds``)."""
    # version 5 (absent from the hash of versions < 5)
    kernel_pin: str = ""
    """CPU kernel path of every run (``"<aten>+<mkl>"``, :mod:`simulate.llm.determinism`); ``""``: the process's."""
    perturb_paths: tuple[str, ...] = ()
    """Kernel paths the perturbation check re-runs ``perturb_seeds`` under (v5; v4 used ``perturb_capabilities``)."""
    consensus: bool = False
    """A part whose verdict moves on some perturbed path is reported ``inconclusive`` (v5, module docstring)."""
    # version 7 (absent from the hash of versions < 7)
    warmstart_frozen: str = ""
    """Frozen warm start every run loads (:mod:`simulate.llm.frozen`; ``""``: each path trains its own)."""
    warmstart_frozen_sha256: str = ""
    """SHA-256 of that file's bytes (a file that differs is refused)."""

    def __post_init__(self) -> None:
        if self.metric not in ("auc", "final_acc"):
            raise ValueError(f"metric must be 'auc' or 'final_acc', got {self.metric!r}")
        if "gmc" not in self.estimators:
            raise ValueError("estimators must include gmc (the comparisons are gmc against the others)")
        if len(self.delays) < 2 or 0 not in self.delays:
            raise ValueError(f"delays must include 0 and a larger delay, got {self.delays!r}")
        if self.baseline not in self.estimators:
            raise ValueError(f"baseline {self.baseline!r} must be among estimators {self.estimators!r}")
        if not set(self.degrading) <= set(self.estimators):
            raise ValueError(f"degrading {self.degrading!r} must be among estimators {self.estimators!r}")
        if len(set(self.seeds)) < 2:
            raise ValueError("seeds must hold at least 2 distinct seeds (paired t over seeds)")

        if self.version >= 5:
            from simulate.llm.determinism import parse_path

            for spec in (self.kernel_pin, *self.perturb_paths):
                if spec:
                    parse_path(spec)
            if self.kernel_pin in self.perturb_paths:
                raise ValueError(f"perturb_paths must differ from kernel_pin {self.kernel_pin!r}, got {self.perturb_paths!r}")
            if self.kernel_pin and self.device != "cpu":
                raise ValueError(f"kernel_pin applies to device cpu only, got device {self.device!r}")
            if not self.kernel_pin and "native" in self.perturb_paths:
                raise ValueError(f"perturb_paths must differ from the runs' own path (native: no kernel_pin), got "
                                 f"{self.perturb_paths!r}")
        if self.version >= 4:
            if not set(self.perturb_seeds) <= set(self.seeds):
                raise ValueError(f"perturb_seeds {self.perturb_seeds!r} must be among seeds {self.seeds!r}")
            bad = [c for c in self.perturb_capabilities if c not in CPU_CAPABILITIES]
            if bad:
                raise ValueError(f"perturb_capabilities must be among {', '.join(CPU_CAPABILITIES)}, got {bad!r}")
            if not 0 < self.regime_level < 1:
                raise ValueError(f"regime_level must be in (0, 1), got {self.regime_level!r}")
        if self.version >= 3:
            if not (isinstance(self.arm_lr_factor, (int, float)) and self.arm_lr_factor > 0 and self.arm_lr_factor != 1):
                raise ValueError(f"arm_lr_factor must be a number > 0 other than 1, got {self.arm_lr_factor!r}")
            if not set(self.arm_seeds) <= set(self.seeds):
                raise ValueError(f"arm_seeds {self.arm_seeds!r} must be among seeds (the arms pair by seed)")
            if not all(isinstance(d, int) and d >= 0 for d in self.arm_delays):
                raise ValueError(f"arm_delays must be integers >= 0, got {self.arm_delays!r}")
            if self.full_seeds < len(self.seeds):
                raise ValueError(f"full_seeds must be >= len(seeds)={len(self.seeds)}, got {self.full_seeds!r}")

    def variant(self, quick: bool = False, full: bool = False) -> "LMProtocol":
        """The protocol a run uses: itself; for ``quick`` the same rules at ``quick_delays`` (quick seeds are
        read by :meth:`arms`); for ``full`` (v3) the same rules on ``full_seeds`` seeds."""
        if quick and full:
            raise ValueError("quick and full exclude each other")
        if quick:
            return dataclasses.replace(self, delays=self.quick_delays, arm_delays=self.quick_delays)
        if full:
            if self.version < 3:
                raise ValueError(f"full: protocol version {self.version} has no --full variant (v3 and later)")
            return dataclasses.replace(self, seeds=tuple(range(self.full_seeds)),
                                       arm_seeds=tuple(range(self.full_seeds // 2)) if self.arm_seeds else (),
                                       arm_delays=self.delays)
        return self

    def arms(self, quick: bool = False) -> tuple[tuple[float, tuple[int, ...]], ...]:
        """``((lr_factor, seeds), …)``: the main arm at ``η`` and, from version 3, the step-size arm."""
        main = (1.0, self.quick_seeds if quick else self.seeds)
        if self.version < 3 or not self.arm_seeds:  # v4: no step-size arm
            return (main,)
        return (main, (float(self.arm_lr_factor), self.quick_arm_seeds if quick else self.arm_seeds))

    @property
    def d_max(self) -> int:
        """The largest delay."""
        return max(self.delays)

    def comparisons(self) -> list[tuple[str, str, tuple[str, int], tuple[str, int]]]:
        """The Holm family: ``(name, kind, (estimator, d) of a, (estimator, d) of b)``, effect ``a − b``."""
        out = [(f"gmc not worse than {x} at d={self.d_max}", "noninferiority", ("gmc", self.d_max), (x, self.d_max))
               for x in self.estimators if x != "gmc"]
        out += [(f"{x} degrades from d=0 to d={self.d_max}", "superiority", (self.baseline, 0), (x, self.d_max))
                for x in self.degrading]
        return out

    def runs(self, delays: tuple[int, ...] | None = None) -> tuple[tuple[str, int], ...]:
        """The ``(estimator, d)`` pairs run for every seed: the baseline at ``d = 0``, every estimator at
        every other delay (of ``delays``, default the protocol's)."""
        delays = self.delays if delays is None else delays
        return ((self.baseline, 0),) + tuple((x, d) for d in sorted(delays) if d > 0 for x in self.estimators)

    def arm_runs(self) -> tuple[tuple[float, tuple[tuple[str, int], ...]], ...]:
        """``((lr_factor, pairs), …)``: the runs of each arm (v3's step-size arm at ``arm_delays``)."""
        return tuple((f, self.runs(None if f == 1.0 else self.step_arm_delays)) for f, _ in self.arms())

    @property
    def step_arm_delays(self) -> tuple[int, ...]:
        """The step-size arm's delays: ``arm_delays`` that the protocol has, always with ``0`` and ``d_max``
        (the registered comparisons use them)."""
        return tuple(sorted({d for d in self.arm_delays if d in self.delays} | {0, self.d_max}))

    def to_dict(self) -> dict:
        """Plain dict (JSON-serialisable, tuples as lists). Versions < 3 leave out the fields v3 added, so
        :data:`PROTOCOL_V2` keeps the hash it was registered under."""
        out = json.loads(json.dumps(dataclasses.asdict(self)))
        for f in ((V3_FIELDS if self.version < 3 else ()) + (V4_FIELDS if self.version < 4 else ())
                  + (V5_FIELDS if self.version < 5 else ()) + (V7_FIELDS if self.version < 7 else ())):
            out.pop(f)
        return out

    def content_hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the canonical JSON of every field."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


#: Fields added by version 3 (absent from the canonical JSON, hence the hash, of earlier versions).
V3_FIELDS: tuple[str, ...] = ("arm_lr_factor", "arm_seeds", "arm_delays", "full_seeds", "quick_arm_seeds", "rate_premise_d0")

#: Fields added by version 4 (absent from the canonical JSON, hence the hash, of earlier versions).
V4_FIELDS: tuple[str, ...] = ("warmup_steps", "adv_norm", "warmstart_batch_size", "warmstart_eta", "device", "dtype",
                              "max_new_tokens", "min_gain", "regime_level", "perturb_capabilities", "perturb_seeds")
#: Fields added by version 5 (absent from the canonical JSON, hence the hash, of earlier versions).
V5_FIELDS: tuple[str, ...] = ("kernel_pin", "perturb_paths", "consensus")
#: Fields added by version 7 (absent from the canonical JSON, hence the hash, of earlier versions).
V7_FIELDS: tuple[str, ...] = ("warmstart_frozen", "warmstart_frozen_sha256")
#: ATen's CPU kernel paths (``ATEN_CPU_CAPABILITY`` values), slowest first.
CPU_CAPABILITIES: tuple[str, ...] = ("default", "avx2", "avx512")

#: Version 2 (the report of commit 33b6c64), reproducible under its registered hash ``f2493e03beb8c517``:
#: three delays, 16 groups per step, no step-size arm.
PROTOCOL_V2 = LMProtocol(version=2, delays=(0, 8, 32), n_prompts=16)
#: Version 3 (the report of commit 6ea58be), reproducible under its hash.
PROTOCOL_V3 = LMProtocol()
#: Version 4 (the report of commit ca54025), reproducible under its hash ``5be17b59f04d88a2``.
PROTOCOL_V4 = LMProtocol(version=4, delays=(0, 2, 8, 32), arm_seeds=(), arm_delays=(), warmstart_steps=800,
                      warmup_steps=10, adv_norm=True, perturb_capabilities=CPU_CAPABILITIES,
                      perturb_seeds=tuple(range(4)))
#: Version 5 (the report of commit ff80b7d), reproducible under its hash ``e8138cb65bae3fd2``: v4's runs on pinned
#: kernels with the consensus rule.
PROTOCOL_V5 = dataclasses.replace(PROTOCOL_V4, version=5, perturb_capabilities=(), kernel_pin="avx2+COMPATIBLE",
                                  perturb_paths=("native", "default+COMPATIBLE"), consensus=True)
#: Version 6 (the report of commit 43ab277), reproducible under its hash ``2cd06ee51e7bec7b``: v5's rules on a task
#: where the d = 0 learner learns.
PROTOCOL_V6 = dataclasses.replace(PROTOCOL_V5, version=6, warmstart_steps=400, n_prompts=16, delays=(0, 8, 32),
                                  seeds=tuple(range(16)))
#: Version 7 (module docstring): v6's runs in float64 from v6's warm start, frozen in a committed file, on the CPU's
#: own kernels; the perturbation check re-runs seeds 0-3 on avx2+COMPATIBLE and default+COMPATIBLE.
PROTOCOL_V7 = dataclasses.replace(PROTOCOL_V6, version=7, dtype="float64", kernel_pin="",
                                  perturb_paths=("avx2+COMPATIBLE", "default+COMPATIBLE"), warmstart_frozen="lm-v6.pt",
                                  warmstart_frozen_sha256="225ca7b89819a916ffe5ced07ecdb910bf7558da84c25eb80681d0eebe3a3c0c")
#: The protocol of the report.
PROTOCOL = PROTOCOL_V7
#: The GPU protocol (``experiment --protocol gpu``, :mod:`simulate.llm.gpu_protocol`): the same rules on the
#: ``gpu`` preset (~85M parameters, bf16, 3-digit sums) at v3's six delays; seeds run while the budget lasts.
PROTOCOL_GPU = LMProtocol(name="lm-c9-gpu", version=4, delays=(0, 2, 4, 8, 16, 32), arm_seeds=(), arm_delays=(),
                          preset="gpu", device="cuda", dtype="bfloat16", digits=3, n_prompts=32, eta=1e-4,
                          warmstart_steps=600, warmstart_batch_size=256, warmstart_eta=1e-3, n_eval=500, threads=1,
                          quick_seeds=(0, 1), quick_delays=(0, 2), quick_steps=3, quick_n_prompts=4,
                          quick_warmstart_steps=5, quick_n_eval=16)
#: Registered protocols (``python -m simulate.llm experiment --protocol-version``).
PROTOCOLS: dict = {2: PROTOCOL_V2, 3: PROTOCOL_V3, 4: PROTOCOL_V4, 5: PROTOCOL_V5, 6: PROTOCOL_V6, 7: PROTOCOL_V7,
                   "gpu": PROTOCOL_GPU}
