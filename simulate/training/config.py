"""Configuration and results of one asynchronous training run: :class:`InstanceSpec`, :class:`TrainConfig`,
:class:`TrainResult` (see :mod:`simulate.training` for the learner loop they describe)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from asyncgrpo.estimators import ESTIMATORS, TRAJECTORY_ESTIMATORS, registry
from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS
from asyncgrpo.validation import check_eps, check_group_size, is_integral, is_real_number
from simulate.delays import DelaySpec

#: The toolkit's own estimators: THEORY's six trajectory maps and the token-level baselines.
ALL_ESTIMATORS: tuple[str, ...] = ESTIMATORS + tuple(n for n in TOKEN_ESTIMATORS if not registry.entry(n).peer)
#: Every registered estimator (asyncgrpo.estimators.registry: also the peers' corrections and any module of
#: $ASYNCGRPO_ESTIMATORS), trajectory level first: what a TrainConfig accepts.
REGISTERED_ESTIMATORS: tuple[str, ...] = TRAJECTORY_ESTIMATORS + TOKEN_ESTIMATORS
OPTIMIZERS = ("sga", "adam")

@dataclass(frozen=True)
class InstanceSpec:
    """Which tabular instance to build (``simulate.instances``); hashable, so it can key a sweep."""

    kind: str = "bandit"
    """``bandit`` (T = 1, ``n_arms`` arms) or ``token`` (token MDP)."""
    n_arms: int = 5
    """bandit: number of arms ``K``."""
    rewards: tuple[float, ...] | None = None
    """bandit: reward table ``R ∈ [0,1]^K``; ``None`` lets ``instances.bandit`` draw it from ``seed``."""
    V: int = 3
    """token MDP: vocabulary size."""
    T: int = 4
    """token MDP: horizon."""
    state: str = "count"
    """token MDP: state ``count`` (running count of token 0) or ``prev`` (previous token)."""
    reward: str = "count_ge"
    """token MDP: reward ``count_ge`` (count of token 0 ≥ k), ``sum_mod`` (sum ≡ 0 mod m) or ``count_frac``
    (partial credit ``R(τ) = #{t: a_t = 0}/T``, see :func:`count_frac_mdp`)."""
    k: int = 2
    """token MDP: threshold of ``count_ge``."""
    m: int = 3
    """token MDP: modulus of ``sum_mod``."""
    seed: int = 0
    """seed of the instance's own randomness (random rewards)."""

    def build(self):
        """The :class:`simulate.instances.TabularMDP` this spec names."""
        from simulate import instances

        if self.kind == "bandit":
            rewards = None if self.rewards is None else np.asarray(self.rewards, dtype=np.float64)
            return instances.bandit(self.n_arms, rewards=rewards, seed=self.seed)
        if self.kind == "token" and self.reward == "count_frac":
            return count_frac_mdp(self.V, self.T, state=self.state)
        if self.kind == "token":
            return instances.token_mdp(self.V, self.T, state=self.state, reward=self.reward, k=self.k, m=self.m,
                                       seed=self.seed)
        raise ValueError(f"instance kind must be 'bandit' or 'token', got {self.kind!r}")

    @property
    def label(self) -> str:
        """Short string id for result tables."""
        if self.kind == "bandit":
            return f"bandit(K={self.n_arms})"
        if self.reward == "count_frac":
            return f"token(V={self.V},T={self.T},{self.state},count_frac)"
        extra = f"k={self.k}" if self.reward == "count_ge" else f"m={self.m}"
        return f"token(V={self.V},T={self.T},{self.state},{self.reward},{extra})"


def count_frac_mdp(V: int, T: int, state: str = "count"):
    """Token MDP with the partial-credit reward ``R(τ) = #{t : a_t = 0} / T ∈ [0, 1]`` (``J* = 1``).

    Why it exists: with a 0/1 reward on a deterministic single-prompt MDP one huge step that clones
    any rewarded sample is optimal (the tuned η runs to the top of every grid and no delay costs
    anything, measured). With partial credit a cloned sample locks in its own, mediocre, reward, so
    step size, noise and staleness matter. Built from ``instances.token_mdp(V, T, state,
    "count_ge", k=T)``, whose state carries the exact count; the count of each reachable state is
    recovered by a forward pass over ``next_state`` (no assumption on the state layout).
    """
    from simulate import instances

    base = instances.token_mdp(V, T, state=state, reward="count_ge", k=T)
    count = np.full(base.S, -1, dtype=np.int64)
    count[base.s0] = 0
    frontier = [base.s0]
    for t in range(base.T):
        nxt = set()
        for s in frontier:
            for a in range(base.V):
                s2 = int(base.next_state[t, s, a])
                c = count[s] + (a == 0)
                if count[s2] not in (-1, c):
                    raise ValueError(f"state {s2} reached with counts {count[s2]} and {c}: the state must carry the count")
                count[s2] = c
                nxt.add(s2)
        frontier = sorted(nxt)
    reward = np.where(count >= 0, np.maximum(count, 0) / T, 0.0)  # unreachable states never pay
    return instances.TabularMDP(f"token-mdp-V{V}-T{T}-{state}-count_frac", base.next_state, reward, base.s0)


def optimal_J(mdp) -> float:
    """``J* = max_θ J(θ) = max_τ R(τ)``: the best terminal reward reachable from ``s0`` (deterministic MDP).

    An instance that knows its own optimum (``mdp.J_star``, e.g. with per-step rewards) returns it.
    """
    if getattr(mdp, "J_star", None) is not None:
        return float(mdp.J_star)
    reach = {int(mdp.s0)}
    for t in range(mdp.T):
        reach = {int(x) for x in np.unique(mdp.next_state[t, sorted(reach), :])}
    return float(np.max(np.asarray(mdp.reward)[sorted(reach)]))


@dataclass(frozen=True)
class TrainConfig:
    """One training run of the asynchronous learner (module docstring)."""

    instance: InstanceSpec = field(default_factory=InstanceSpec)
    """the tabular instance (bandit or token MDP)."""
    estimator: str = "gmc"
    """weight map: one of ``onpolicy, is, tis, tic, gmc, snis`` or token-level ``grpo, gspo, cispo, m2po``."""
    eps: float = 0.2
    """trajectory-level threshold ε (``1+ε`` caps ρ or ρ̄)."""
    eps_low: float = 0.2
    """token-level lower clip ε_low (``grpo``, ``gspo``)."""
    eps_high: float = 0.28
    """token-level upper clip ε_high (``grpo``, ``gspo``, ``cispo``)."""
    tau_m2: float = 0.04
    """``m2po`` threshold τ_M2 on the batch mean of ``(log r)²``."""
    G: int = 8
    """group size: trajectories per prompt."""
    n_prompts: int = 1
    """groups per learner step (all from the single prompt ``s0``)."""
    eta: float = 0.5
    """step size η."""
    steps: int = 200
    """number of learner steps K."""
    delay: DelaySpec = field(default_factory=DelaySpec)
    """delay model of ``d_k`` (``simulate.delays``); delays are drawn with seed ``[seed, 1]``."""
    seed: int = 0
    """seed of the run (trajectory sampling inside the kernel, delays, random init)."""
    optimizer: str = "sga"
    """``sga`` (θ += ηĝ) or ``adam`` (Adam ascent with ``beta1``, ``beta2``, ``adam_eps``)."""
    beta1: float = 0.9
    """Adam first-moment decay."""
    beta2: float = 0.999
    """Adam second-moment decay."""
    adam_eps: float = 1e-8
    """Adam denominator offset."""
    adv_norm: bool = False
    """GRPO advantages ``(R − R̄)/(std(R) + 1e-6)`` instead of ``R − R̄``."""
    zero_tol: float | None = None
    """zero-gradient tolerance τ: a group whose returns satisfy ``max − min ≤ τ·max(1, |max|, |min|)`` has
    every advantage set to exactly 0 (no std-normalisation), so no rounding-level gradient is applied and
    ``zero_grad`` is exact. ``None``: the exact rule of protocols v1–v3 (only bit-equal returns centre to 0)."""
    init_scale: float = 0.0
    """θ_0 ~ N(0, init_scale²) per logit (0: the uniform policy)."""
    collapse_frac: float = 0.1
    """divergence: ``J(θ_k) < collapse_frac·J(θ_0)`` marks a collapse (0 disables)."""
    theta_max: float = 1e3
    """divergence: ``max|θ_k| > theta_max`` marks a logit overflow."""
    diagnostics: bool = True
    """record C6's overlap (``dtheta_norm``, ``logratio_max``) and issue 33's ascent rates (``gdot``, ``gneg``).
    ``False`` leaves them NaN and skips their cost (a max-plus DP, a second score and a second ``Φᵀ`` product per
    step, 15–20 % of a step on the LM-like instances); every other curve is bit-identical either way."""

    def __post_init__(self):
        if self.estimator not in REGISTERED_ESTIMATORS:
            raise ValueError(f"estimator must be one of {', '.join(REGISTERED_ESTIMATORS)}, got {self.estimator!r}")
        if not callable(getattr(self.instance, "build", None)):
            raise ValueError(f"instance must be an InstanceSpec or a simulate.protocol.TrainingInstance (anything with "
                             f".build()), got {type(self.instance).__name__}; a TabularMDP m becomes one as "
                             "TrainingInstance(name, description, m.next_state, m.reward, m.s0)")
        # adam_eps too: Adam divides by sqrt(v̂) + adam_eps, and v̂ = 0 for a parameter no gradient reached yet
        for name in ("eps", "eps_high", "tau_m2", "eta", "theta_max", "adam_eps"):
            check_eps(getattr(self, name), name)
        if not 0.0 < self.eps_low < 1.0:
            raise ValueError(f"eps_low must be in (0, 1), got {self.eps_low!r}")
        check_group_size(self.G, "G")
        check_group_size(self.n_prompts, "n_prompts")
        check_group_size(self.steps, "steps")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be 'sga' or 'adam', got {self.optimizer!r}")
        for name in ("beta1", "beta2"):
            v = getattr(self, name)
            if not (is_real_number(v) and 0.0 <= v < 1.0):
                raise ValueError(f"{name} must be a number in [0, 1), got {v!r}")
        s = self.seed  # an integer (8 or 8.0), never truncated: 1.5 is an error, not seed 1
        if not (is_integral(s) and 0 <= s < 2**32):
            raise ValueError(f"seed must be an integer in [0, 2**32), got {self.seed!r}")
        if not (0.0 <= self.collapse_frac < 1.0):
            raise ValueError(f"collapse_frac must be in [0, 1), got {self.collapse_frac!r}")
        if self.zero_tol is not None and not (isinstance(self.zero_tol, (int, float)) and not isinstance(self.zero_tol, bool)
                                              and math.isfinite(self.zero_tol) and self.zero_tol >= 0):
            raise ValueError(f"zero_tol must be None or a finite number >= 0, got {self.zero_tol!r}")
        if not (math.isfinite(self.init_scale) and self.init_scale >= 0):
            raise ValueError(f"init_scale must be a finite number >= 0, got {self.init_scale!r}")
        if not isinstance(self.diagnostics, (bool, np.bool_)):
            raise ValueError(f"diagnostics must be True or False, got {self.diagnostics!r}")
        if not isinstance(self.delay, DelaySpec):
            raise ValueError(f"delay must be a simulate.delays.DelaySpec, got {type(self.delay).__name__}")

    @property
    def code(self) -> int:
        """Kernel id of the estimator (:func:`asyncgrpo.estimators.registry.code`)."""
        return registry.code(self.estimator)

    def delays(self) -> np.ndarray:
        """The realised delays ``d_0..d_{K−1}`` of this run, ``ndarray(int64, (K,))``."""
        return self.delay.sample(self.steps, seed=[int(self.seed), 1])

    def theta0(self, theta_shape) -> np.ndarray:
        """Initial logits θ_0 (zeros, or N(0, init_scale²) drawn with seed ``[seed, 2]``)."""
        if self.init_scale == 0.0:
            return np.zeros(theta_shape)
        return self.init_scale * np.random.default_rng([int(self.seed), 2]).standard_normal(theta_shape)

    def replace(self, **changes) -> "TrainConfig":
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return replace(self, **changes)


def require_diagnostics(result, curves: str) -> None:
    """Refuse ``result`` (a :class:`TrainResult` or any object with a ``config``) when its run was made with
    ``TrainConfig(diagnostics=False)``: its ``curves`` (named in the message) are NaN by design, and read as data
    they would say "no step qualifies"."""
    if not getattr(getattr(result, "config", None), "diagnostics", True):
        raise ValueError(f"this run was made with TrainConfig(diagnostics=False): it has no {curves}; run it with "
                         "diagnostics=True")


@dataclass(frozen=True)
class TrainResult:
    """Curves of one run; arrays have length ``K+1`` (J, grad_norm2: θ_0..θ_K) or ``K`` (per step)."""

    config: TrainConfig
    J: np.ndarray
    """``J(θ_k)``, k = 0..K (exact)."""
    grad_norm2: np.ndarray
    """``‖∇J(θ_k)‖²``, k = 0..K (exact)."""
    chi2: np.ndarray
    """``χ²(π_{θ_k}‖μ_k)``, k = 0..K−1 (exact DP)."""
    clip_frac: np.ndarray
    """fraction of trajectories (token-level: tokens) whose weight was cut below its ratio; NaN for maps that never cut."""
    ess: np.ndarray
    """weight ESS ``(Σw)²/Σw²`` per group, averaged over groups (token-level: ``w_i = Σ_t c_{i,t}``)."""
    ghat_norm2: np.ndarray
    """``‖ĝ_k‖²``: heavy tails here are C9's "unstable" (summary: ``ghat_tail = max/mean``)."""
    zero_grad: np.ndarray
    """1 where every group of step k had equal rewards (all ``A_i = 0``, so ``ĝ_k = 0``), else 0."""
    delays: np.ndarray
    """realised delays ``d_k`` (int64)."""
    diverged_at: int | None
    """first step flagged as diverged (module docstring), or ``None``."""
    theta: np.ndarray
    """final logits (last finite iterate if diverged)."""
    J_star: float = math.nan
    """``J* = max_θ J(θ)`` of the instance (:func:`optimal_J`)."""
    dtheta_norm: np.ndarray | None = None
    """C6: ``‖w_k − w_{k−d_k}‖₂``, k = 0..K−1, in the trained parameter ``w`` (the logits θ of a tabular policy,
    the feature weights of a log-linear one ``θ = Φw``): the distance between the current and the behaviour
    policy's parameters (:mod:`simulate.training.overlap`)."""
    logratio_max: np.ndarray | None = None
    """C6: ``max_{τ ∈ supp μ_k} |log π_{θ_k}(τ) − log μ_k(τ)|``, k = 0..K−1 (exact max-plus DP,
    :func:`simulate.training.kernel.logratio_max_nb`), so ``|ρ − 1| ≤ expm1(logratio_max)`` on every path."""
    gpar_norm2: np.ndarray | None = None
    """C6: ``‖ĝ_k‖²`` in the trained parameter ``w`` (``‖Φᵀĝ_k‖²`` for a feature policy; equal to
    ``ghat_norm2``, which is in logit space, for a tabular one): the sample of ``M₂ = E‖ĝ‖²``."""
    gdot: np.ndarray | None = None
    """issue 33: ``⟨ĝ_k, ∇J(θ_k)⟩/‖∇J(θ_k)‖`` in ``w``, k = 0..K−1: the step's first-order ascent rate (< 0: downhill)."""
    gneg: np.ndarray | None = None
    """issue 33: the same projection of the part of ĝ_k from negative-advantage tokens with ``π_θ(a_t|s_t) <
    μ_k(a_t|s_t)`` (stale samples already pushed down; an importance weight would damp them)."""

    @property
    def diverged(self) -> bool:
        """Whether the run diverged."""
        return self.diverged_at is not None

    @property
    def avg_grad_norm2(self) -> float:
        """C5's left side ``(1/K) Σ_{k<K} ‖∇J(θ_k)‖²``; ``inf`` for a diverged run."""
        return math.inf if self.diverged else float(np.mean(self.grad_norm2[:-1]))

    @property
    def avg_regret(self) -> float:
        """``(1/K) Σ_{k<K} (J* − J(θ_k))``: suboptimality along the run; ``inf`` for a diverged run.

        Unlike ``(1/K)Σ‖∇J‖²`` it does not reward collapse: a saturated wrong policy has ``∇J ≈ 0``
        but a large regret.
        """
        return math.inf if self.diverged else float(self.J_star - np.mean(self.J[:-1]))

    @property
    def final_J(self) -> float:
        """``J(θ_K)``; for a diverged run the last finite value of J."""
        finite = self.J[np.isfinite(self.J)]
        return float(finite[-1]) if finite.size else math.nan

    def summary(self) -> dict:
        """Scalar results of the run (a row of a tidy table)."""
        with np.errstate(all="ignore"):
            return dict(
                avg_grad_norm2=self.avg_grad_norm2,
                avg_regret=self.avg_regret,
                final_J=self.final_J,
                diverged=self.diverged,
                diverged_at=-1 if self.diverged_at is None else self.diverged_at,
                mean_delay=float(np.mean(self.delays)),
                max_delay=int(np.max(self.delays)),
                mean_chi2=float(np.nanmean(self.chi2)) if np.isfinite(self.chi2).any() else math.nan,
                mean_clip_frac=float(np.nanmean(self.clip_frac)) if np.isfinite(self.clip_frac).any() else math.nan,
                mean_ess=float(np.nanmean(self.ess)) if np.isfinite(self.ess).any() else math.nan,
                ghat_tail=_tail_ratio(self.ghat_norm2),
                zero_grad_frac=float(np.nanmean(self.zero_grad)) if np.isfinite(self.zero_grad).any() else math.nan,
            )

    def to_frame(self):
        """Per-step tidy table: k, d_k, J, ‖∇J‖², χ², clip fraction, ESS, ‖ĝ‖², and C6's ‖w_k − w_{k−d_k}‖ and
        max |log ρ| when recorded. Row ``k = K`` is the final
        iterate θ_K, where no update is made: its per-update columns are missing (``<NA>``/NaN), not −1."""
        import pandas as pd

        K = self.delays.size
        cols = dict(
            k=np.arange(K + 1), delay=pd.array([*map(int, self.delays), None], dtype="Int64"), J=self.J,
            grad_norm2=self.grad_norm2,
            chi2=np.append(self.chi2, np.nan), clip_frac=np.append(self.clip_frac, np.nan),
            ess=np.append(self.ess, np.nan), ghat_norm2=np.append(self.ghat_norm2, np.nan),
        )
        for name in ("dtheta_norm", "logratio_max"):
            if getattr(self, name) is not None:
                cols[name] = np.append(getattr(self, name), np.nan)
        return pd.DataFrame(cols)


def _tail_ratio(x: np.ndarray) -> float:
    """``max_k ‖ĝ_k‖² / mean_k ‖ĝ_k‖²`` over the finite steps: large means heavy-tailed steps (C9)."""
    x = x[np.isfinite(x)]
    if x.size == 0 or not np.any(x > 0):
        return math.nan
    return float(np.max(x) / np.mean(x))


# exact DP kernels (log_softmax_nb, exact_J_grad_nb, chi2_nb) live in simulate.instances: one definition.
