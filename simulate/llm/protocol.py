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
    version: int = 2
    estimators: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "gmc", "grpo")
    """Compared maps: THEORY's trajectory-level ones and the token-level GRPO baseline."""
    baseline: str = "onpolicy"
    """The one estimator run at ``d = 0`` (module docstring: all maps coincide there)."""
    delays: tuple[int, ...] = (0, 8, 32)
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
    n_prompts: int = 16
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

    def variant(self, quick: bool) -> "LMProtocol":
        """The protocol a run uses: itself, or for ``quick`` the same rules at ``quick_delays``."""
        return dataclasses.replace(self, delays=self.quick_delays) if quick else self

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

    def runs(self) -> tuple[tuple[str, int], ...]:
        """The ``(estimator, d)`` pairs run for every seed: the baseline at ``d = 0``, every estimator at
        every other delay."""
        return ((self.baseline, 0),) + tuple((x, d) for d in sorted(self.delays) if d > 0 for x in self.estimators)

    def to_dict(self) -> dict:
        """Plain dict (JSON-serialisable, tuples as lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def content_hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the canonical JSON of every field."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


#: The protocol of the committed report.
PROTOCOL = LMProtocol()
