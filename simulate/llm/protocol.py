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

**Versions.** Each registered version is a frozen instance below (:data:`PROTOCOLS`), reproducible under its hash;
what each changed and why (v3: six delays and a step-size arm; v4: a task where RL learns, perturbation check; v5:
pinned kernels and the consensus rule; v6: a weaker warm start and 16 seeds; v7: float64 from a frozen warm start;
v8: fresh seeds drawn by hash, the full rival set, confirmatory) is in docs/llm.md, one section per version, and
the text each version was registered with is in this file's git history.

**Version 8** (issue 53; :data:`PROTOCOL`; registered before any v8 run). v7's runs and rules with:

- *Fresh seeds drawn by hash* (``seed_root``): ``seeds`` are :func:`draw_seeds` of ``seed_root`` (SHA-256; in
  ``[10⁶, 2·10⁶)``, disjoint from every seed any earlier LM protocol, the ladder or the bridge used: 0–23,
  100–115, 1000–1023), and the dataclass refuses seeds that are not that draw, so no seed can be picked after a
  result is seen. The warm start is v7's frozen checkpoint (a given starting model, as post-training has).
- *The full rival set* of the tabular protocol v6: onpolicy, is, tis, tic, grpo and the peers' corrections
  verl_tok_tis, verl_seq_tis, verl_seq_rs, verl_geo_rs, trl_seq_mask, every one at every ``d > 0``; at ``d = 0``
  every map coincides (``ρ = 1``), so the shared run stands for each and its ``gmc − X`` entry is exactly 0.
- *Confirmatory* (``confirmatory``): its answer rows (``gmc − X`` at each ``d``, 95 % paired t over seeds) feed
  the report's headline; v3–v7 are exploratory (appendix).
- *The kernel-path check leaves the run* (issue 59): float64 from the frozen start made v7's 56 re-made runs equal
  to the reference, so the check could no longer fail there; ``consensus = False``, and ``make verify`` re-runs
  ``perturb_seeds`` on ``perturb_paths`` and stamps the report with its date and result.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass


def draw_seeds(root: str, n: int) -> tuple[int, ...]:
    """``n`` distinct RL seeds in ``[10⁶, 2·10⁶)``: the ``i``-th from the first 8 hex digits of SHA-256(``root/i``),
    skipping repeats, so the seeds are fixed by the name alone, before any run."""
    if not isinstance(root, str) or not root:
        raise ValueError(f"root must be a non-empty string, got {root!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    out: list[int] = []
    i = 0
    while len(out) < n:
        s = 10**6 + int(hashlib.sha256(f"{root}/{i}".encode()).hexdigest()[:8], 16) % 10**6
        if s not in out:
            out.append(s)
        i += 1
    return tuple(out)


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
    """Frozen warm start every run loads (:mod:`simulate.llm.portability.frozen_warmstart`; ``""``: each path trains its own)."""
    warmstart_frozen_sha256: str = ""
    """SHA-256 of that file's bytes (a file that differs is refused)."""
    # version 8 (absent from the hash of versions < 8)
    seed_root: str = ""
    """``seeds`` must be :func:`draw_seeds` ``(seed_root, len(seeds))`` (``""``: seeds as given, versions < 8)."""
    confirmatory: bool = False
    """Its answer rows feed the report's headline (v8); earlier versions are exploratory."""
    # the GPU protocol v2 (absent from the canonical JSON while empty, as in every protocol before it)
    autocast: str = ""
    """``"bfloat16"``: the runs' products under ``torch.autocast`` (float32 weights, AdamW state and log-probs); ``""``: none."""

    def __post_init__(self) -> None:
        if self.seed_root and tuple(self.seeds) != draw_seeds(self.seed_root, len(self.seeds)):
            raise ValueError(f"seeds must be draw_seeds({self.seed_root!r}, {len(self.seeds)}) "
                             f"= {draw_seeds(self.seed_root, len(self.seeds))!r}, got {tuple(self.seeds)!r}")
        if self.confirmatory and not self.seed_root:
            raise ValueError("confirmatory needs seed_root (seeds drawn before any result, not chosen)")
        if self.autocast not in ("", "bfloat16"):
            raise ValueError(f"autocast must be '' or 'bfloat16', got {self.autocast!r}")
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
            from simulate.llm.portability.kernel_paths import parse_path

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
            seeds = draw_seeds(self.seed_root, self.full_seeds) if self.seed_root else tuple(range(self.full_seeds))
            return dataclasses.replace(self, seeds=seeds,
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
                  + (V5_FIELDS if self.version < 5 else ()) + (V7_FIELDS if self.version < 7 else ())
                  + (V8_FIELDS if self.version < 8 else ())):
            out.pop(f)
        for f in LATER_FIELDS:
            if out[f] == "":
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
#: Fields added by version 8 (absent from the canonical JSON, hence the hash, of earlier versions).
V8_FIELDS: tuple[str, ...] = ("seed_root", "confirmatory")
#: Fields added after version 8, absent from the canonical JSON (hence the hash) while empty: every earlier protocol.
LATER_FIELDS: tuple[str, ...] = ("autocast",)
#: Seeds any LM protocol (v1-v7, --full), the ladder or the bridge used: a drawn seed never falls here.
USED_SEEDS: frozenset[int] = frozenset(range(24)) | frozenset(range(100, 116)) | frozenset(range(1000, 1024))
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
#: The rival set of the tabular protocol v6 (simulate/protocol/protocol-v6.toml) with gmc: every one at every d > 0.
V8_ESTIMATORS: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "gmc", "grpo", "verl_tok_tis", "verl_seq_tis",
                                  "verl_seq_rs", "verl_geo_rs", "trl_seq_mask")
#: Version 8 (module docstring): v7's runs on 16 seeds drawn by hash, the full rival set, confirmatory; the
#: kernel-path check is `make verify`'s, not the run's (consensus off).
PROTOCOL_V8 = dataclasses.replace(PROTOCOL_V7, version=8, estimators=V8_ESTIMATORS, seed_root="lm-c9-v8",
                                  seeds=draw_seeds("lm-c9-v8", 16), perturb_seeds=draw_seeds("lm-c9-v8", 16)[:4],
                                  consensus=False, confirmatory=True)
#: The protocol of the report.
PROTOCOL = PROTOCOL_V8
#: The first GPU protocol (registered for the serial forests, 6 processes at a time; never produced a result:
#: out of memory or out of time on an H200, LOG.md 2026-12-07), kept under its hash ``7e40e25ed4fb4cc8``.
PROTOCOL_GPU_V1 = LMProtocol(name="lm-c9-gpu", version=4, delays=(0, 2, 4, 8, 16, 32), arm_seeds=(), arm_delays=(),
                             preset="gpu", device="cuda", dtype="bfloat16", digits=3, n_prompts=32, eta=1e-4,
                             warmstart_steps=600, warmstart_batch_size=256, warmstart_eta=1e-3, n_eval=500, threads=1,
                             quick_seeds=(0, 1), quick_delays=(0, 2), quick_steps=3, quick_n_prompts=4,
                             quick_warmstart_steps=5, quick_n_eval=16)
#: The issue-60 estimator set of the GPU protocol v2 (the planner's choice over v8's rivals: docs/llm.md, GPU section).
GPU_ESTIMATORS: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "gmc", "grpo")
#: The GPU protocol v2 (``experiment --protocol gpu``, :mod:`simulate.llm.gpu_protocol`; issue 60; registered before
#: any run of it): v8's rules (the Holm family at ``d_max``, the rate checks, the regime interval, confirmatory answer
#: rows) on 16 fresh seeds drawn from ``lm-c9-gpu-v2`` (disjoint from v8's and from :data:`USED_SEEDS`), the ``gpu``
#: preset (82.6M parameters) with float32 weights and bf16-autocast products, 3-digit sums, ``d ∈ {0, 8, 32}``, the six
#: estimators of :data:`GPU_ESTIMATORS` (13 runs per seed), its own supervised warm start (600 steps of 256, float32),
#: on the batched engine in chunks of whole seeds (:mod:`simulate.llm.gpu_plan`).
PROTOCOL_GPU = dataclasses.replace(PROTOCOL_V8, name="lm-c9-gpu-v2", estimators=GPU_ESTIMATORS, delays=(0, 8, 32),
                                   seed_root="lm-c9-gpu-v2", seeds=draw_seeds("lm-c9-gpu-v2", 16), perturb_seeds=(),
                                   perturb_paths=(), warmstart_frozen="", warmstart_frozen_sha256="", preset="gpu",
                                   device="cuda", dtype="float32", autocast="bfloat16", digits=3, n_prompts=32,
                                   eta=1e-4, warmstart_steps=600, warmstart_batch_size=256, warmstart_eta=1e-3,
                                   n_eval=500, quick_seeds=(0, 1), quick_delays=(0, 2), quick_steps=4,
                                   quick_n_prompts=4, quick_warmstart_steps=5, quick_n_eval=16)
#: The GPU protocol's second preset (issue 60; registered before any run of it): delays up to 256 stale updates (M2PO's
#: anchor: training said to stay stable with 256), ``d ∈ {0, 32, 256}`` over 300 steps (so 44 steps learn from
#: 256-step-old rollouts), evaluation every 25 steps, the six estimators, 4 seeds drawn from ``lm-c9-gpu-d256-v1``;
#: everything else the GPU protocol v2's. Sized by the planner to one lent card's budget (H100: 4 chunks of 13 runs,
#: ≈ 370 s at an assumed 25 % MFU + the 73 s warm start), so 4 seeds: **exploratory** (``confirmatory=False``, never
#: the headline) — paired t on 4 seeds and Clopper–Pearson on 4 runs can refute or support a large effect only.
PROTOCOL_GPU_D256 = dataclasses.replace(PROTOCOL_GPU, name="lm-c9-gpu-d256-v1", delays=(0, 32, 256), steps=300,
                                        eval_every=25, seed_root="lm-c9-gpu-d256-v1",
                                        seeds=draw_seeds("lm-c9-gpu-d256-v1", 4), confirmatory=False)
#: Registered protocols (``python -m simulate.llm experiment --protocol-version``).
PROTOCOLS: dict = {2: PROTOCOL_V2, 3: PROTOCOL_V3, 4: PROTOCOL_V4, 5: PROTOCOL_V5, 6: PROTOCOL_V6, 7: PROTOCOL_V7,
                   8: PROTOCOL_V8,
                   "gpu": PROTOCOL_GPU, "gpu-d256": PROTOCOL_GPU_D256, "gpu-v1": PROTOCOL_GPU_V1}
#: The GPU protocols ``experiment --protocol`` runs through :mod:`simulate.llm.gpu_protocol` (on one CUDA card).
GPU_PROTOCOLS: tuple[str, ...] = ("gpu", "gpu-d256")
