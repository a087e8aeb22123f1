"""Asynchronous GRPO training simulator on the tabular instances (THEORY.md §1, C5, C9).

Learner loop, for ``k = 0 … K−1`` (plain stochastic gradient ascent; Adam optional)::

    μ_k   = π_{θ_{k−d_k}}                       (behaviour policy, delay d_k from simulate.delays)
    τ_{g,i} ~ μ_k,  g = 1..n_prompts, i = 1..G   (n_prompts groups of G trajectories)
    A_{g,i} = R_{g,i} − R̄_g                     (or /(std_g(R) + δ) with adv_norm)
    ĝ_k   = (1/n_prompts) Σ_g (1/G) Σ_i A_{g,i} Σ_t c_{g,i,t} ∇log π_{θ_k}(a_t|s_t)
    θ_{k+1} = θ_k + η ĝ_k

where the stop-gradient coefficients ``c`` are ``c_{i,t} = w_i`` for a trajectory-level weight map
``w = W_ε(ℓ)`` of the registry (``onpolicy, is, tis, tic, gmc, snis``; Numba kernel
``weights_nb``), computed from the trajectory log-ratios ``ℓ_i = Σ_t log π_{θ_k}(a_t|s_t) − log μ_k(a_t|s_t)``,
or the token-level ``grpo, gspo, cispo, m2po`` coefficients (``token_coefficients_nb``).
For the tabular softmax ``π_θ(a|s_t=s, t) = softmax(θ[t, s, :])`` the score adds
``e_{a_t} − π_θ(·|s_t)`` to row ``(t, s_t, :)``.

Exact diagnostics at every step (dynamic programming over the state, no sampling):
``J(θ_k)``, ``‖∇J(θ_k)‖²``, the realised ``χ²(π_{θ_k}‖μ_k) = E_μ[ρ²] − 1``; from the batch: the
clip/cap fraction, the weight ESS ``(Σ_i w_i)²/Σ_i w_i²`` (mean over groups) and ``‖ĝ_k‖²``.

Divergence never raises: a run is marked diverged at the first step ``k`` where ``θ_k`` or ``ĝ_k``
is not finite, ``max|θ_k| > theta_max`` (logit overflow), or ``J(θ_k) < collapse_frac · J(θ_0)``
(objective collapse); later entries of the curves are NaN.

Layout: :class:`TrainConfig` (frozen, one docstring per field) → :func:`run_training` →
:class:`TrainResult`. :func:`run_many` runs a list of configs sharing one instance in one parallel
Numba kernel (``prange`` over runs, one seed per run, seeded inside the kernel), so results do not
depend on the batch they run in. The pure kernel :func:`_train_one_nb` owns the whole loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from numba import njit, prange

from asyncgrpo.estimators import ESTIMATORS
from asyncgrpo.estimators.kernels import log_weights_nb
from asyncgrpo.estimators.reference import CODES
from asyncgrpo.estimators.token_level import TOKEN_CODES, TOKEN_ESTIMATORS, token_coefficients_nb
from asyncgrpo.validation import check_eps, check_group_size
from simulate.delays import DelaySpec
from simulate.instances import (alias_tables, chi2_nb, exact_J_grad, exact_J_grad_nb, exact_J_grad_steps_nb, log_softmax_nb,
                                sample_token_nb)

ALL_ESTIMATORS: tuple[str, ...] = ESTIMATORS + TOKEN_ESTIMATORS
OPTIMIZERS = ("sga", "adam")
_CUTTERS = frozenset({"tis", "tic", "gmc"})  # trajectory maps whose weights can be cut below ρ_i


# --------------------------------------------------------------------------- configuration
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
    init_scale: float = 0.0
    """θ_0 ~ N(0, init_scale²) per logit (0: the uniform policy)."""
    collapse_frac: float = 0.1
    """divergence: ``J(θ_k) < collapse_frac·J(θ_0)`` marks a collapse (0 disables)."""
    theta_max: float = 1e3
    """divergence: ``max|θ_k| > theta_max`` marks a logit overflow."""

    def __post_init__(self):
        if self.estimator not in ALL_ESTIMATORS:
            raise ValueError(f"estimator must be one of {', '.join(ALL_ESTIMATORS)}, got {self.estimator!r}")
        for name in ("eps", "eps_high", "tau_m2", "eta", "theta_max"):
            check_eps(getattr(self, name), name)
        if not 0.0 < self.eps_low < 1.0:
            raise ValueError(f"eps_low must be in (0, 1), got {self.eps_low!r}")
        check_group_size(self.G, "G")
        check_group_size(self.n_prompts, "n_prompts")
        check_group_size(self.steps, "steps")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be 'sga' or 'adam', got {self.optimizer!r}")
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ValueError(f"beta1, beta2 must be in [0, 1), got {self.beta1!r}, {self.beta2!r}")
        if not (0 <= int(self.seed) < 2**32):
            raise ValueError(f"seed must be an integer in [0, 2**32), got {self.seed!r}")
        if not (0.0 <= self.collapse_frac < 1.0):
            raise ValueError(f"collapse_frac must be in [0, 1), got {self.collapse_frac!r}")
        if not (math.isfinite(self.init_scale) and self.init_scale >= 0):
            raise ValueError(f"init_scale must be a finite number >= 0, got {self.init_scale!r}")
        if not isinstance(self.delay, DelaySpec):
            raise ValueError(f"delay must be a simulate.delays.DelaySpec, got {type(self.delay).__name__}")

    @property
    def code(self) -> int:
        """Kernel id: ``CODES`` (0–5) for trajectory maps, ``TOKEN_CODES`` (10–13) for token-level ones."""
        return CODES[self.estimator] if self.estimator in CODES else TOKEN_CODES[self.estimator]

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
        """Per-step tidy table: k, d_k, J, ‖∇J‖², χ², clip fraction, ESS, ‖ĝ‖²."""
        import pandas as pd

        K = self.delays.size
        return pd.DataFrame(dict(
            k=np.arange(K + 1), delay=np.append(self.delays, -1), J=self.J, grad_norm2=self.grad_norm2,
            chi2=np.append(self.chi2, np.nan), clip_frac=np.append(self.clip_frac, np.nan),
            ess=np.append(self.ess, np.nan), ghat_norm2=np.append(self.ghat_norm2, np.nan),
        ))


def _tail_ratio(x: np.ndarray) -> float:
    """``max_k ‖ĝ_k‖² / mean_k ‖ĝ_k‖²`` over the finite steps: large means heavy-tailed steps (C9)."""
    x = x[np.isfinite(x)]
    if x.size == 0 or not np.any(x > 0):
        return math.nan
    return float(np.max(x) / np.mean(x))


# exact DP kernels (log_softmax_nb, exact_J_grad_nb, chi2_nb) live in simulate.instances: one definition.
# --------------------------------------------------------------------------- the learner kernel
@njit(cache=True)
def _train_one_nb(next_state, reward, step_reward, s0, phi, use_phi, bernoulli, w0, code, eps, eps_low, eps_high,
                  tau_m2, G, n_prompts, eta, delays, seed, opt, beta1, beta2, adam_eps, adv_norm, collapse_frac,
                  theta_max, J_out, gn2_out, chi2_out, clip_out, ess_out, ghat_out, zero_out, theta_out):
    """One run of the learner loop (module docstring); returns the divergence step or −1.

    Inputs: ``next_state`` int64 (T,S,V), ``reward`` float64 (S,) terminal ``R_T``, ``step_reward``
    float64 (T,S,V) per-step ``r_t`` (zeros for terminal-only), ``phi`` float64 (T·S·V, p) features
    with logits ``θ = Φw`` when ``use_phi`` (else ``w`` are the logits and ``phi`` is ignored),
    ``w0`` float64 (p,) initial parameters, ``bernoulli``: the learner sees ``R ~ Bernoulli(E R(τ))``
    instead of ``R(τ)``; ``delays`` int64 (K,) with ``d_k ≤ k``. Outputs (overwritten, NaN after
    divergence): ``J_out``, ``gn2_out`` (K+1,) with ``‖∇_w J‖²``; ``chi2_out``, ``clip_out``,
    ``ess_out``, ``ghat_out``, ``zero_out`` (K,; 1 where every group had equal rewards, so ĝ_k = 0);
    ``theta_out`` (T,S,V) final logits. Randomness: ``np.random.seed(seed)`` here, one uniform per
    token (alias tables of μ_k) and one per trajectory when ``bernoulli``, so a run depends only on
    its arguments.
    """
    np.random.seed(seed)
    T, S, V = step_reward.shape
    P = w0.shape[0]
    par = w0.copy()
    gw = np.empty(P)
    theta0 = np.empty((T, S, V))
    if use_phi:
        _features_nb(phi, par, theta0)
    else:
        theta0[:] = par.reshape((T, S, V))
    K = delays.shape[0]
    N = G * n_prompts
    B = 1
    for k in range(K):
        if delays[k] + 1 > B:
            B = delays[k] + 1
    hist = np.empty((B, T, S, V))  # ring buffer θ_{k−B+1..k}
    theta = theta0.copy()
    logp = np.empty((T, S, V))
    logq = np.empty((T, S, V))
    grad = np.empty((T, S, V))
    ghat = np.empty((T, S, V))
    m1 = np.zeros(P)
    m2 = np.zeros(P)
    states = np.empty((N, T), dtype=np.int64)
    actions = np.empty((N, T), dtype=np.int64)
    tok_ell = np.empty((N, T))
    mask = np.ones((N, T), dtype=np.bool_)
    coef = np.empty((N, T))
    ell = np.empty(N)
    adv = np.empty(N)
    logw = np.empty(G)
    for i in range(J_out.shape[0]):
        J_out[i] = np.nan
        gn2_out[i] = np.nan
    for i in range(K):
        chi2_out[i] = np.nan
        clip_out[i] = np.nan
        ess_out[i] = np.nan
        ghat_out[i] = np.nan
        zero_out[i] = np.nan
    theta_out[:] = theta0
    token_level = code >= 10
    J0 = 0.0
    for k in range(K + 1):
        # --- divergence checks on θ_k, then exact diagnostics
        bad = False
        for idx in np.ndindex(T, S, V):
            x = theta[idx]
            if not (abs(x) <= theta_max):  # also catches NaN
                bad = True
                break
        if bad:
            return k
        log_softmax_nb(theta, logp)
        Jk = exact_J_grad_steps_nb(logp, next_state, step_reward, reward, s0, grad)
        g2 = 0.0
        if use_phi:  # ∇_w J = Φᵀ ∇_θ J (chain rule through θ = Φw)
            _features_T_nb(phi, grad, gw)
            for j in range(P):
                g2 += gw[j] * gw[j]
        else:
            for idx in np.ndindex(T, S, V):
                g2 += grad[idx] * grad[idx]
        J_out[k] = Jk
        gn2_out[k] = g2
        theta_out[:] = theta
        if k == 0:
            J0 = Jk
        elif not math.isfinite(Jk) or Jk < collapse_frac * J0:
            return k
        if k == K:
            break
        hist[k % B] = theta
        d = delays[k]
        log_softmax_nb(hist[(k - d) % B], logq)
        chi2_out[k] = chi2_nb(logp, logq, next_state, s0)
        # --- sample N trajectories from μ_k (alias tables of simulate.instances, one uniform per token)
        prob, alias = alias_tables(logq)
        for n in range(N):
            s = s0
            ret = 0.0
            for t in range(T):
                a_t = sample_token_nb(np.random.random(), prob[t, s], alias[t, s])
                states[n, t] = s
                actions[n, t] = a_t
                tok_ell[n, t] = logp[t, s, a_t] - logq[t, s, a_t]
                ret += step_reward[t, s, a_t]
                s = next_state[t, s, a_t]
            ell[n] = 0.0
            for t in range(T):
                ell[n] += tok_ell[n, t]
            ret += reward[s]
            if bernoulli:  # a verifier that pays 1 with probability E R(τ) (draw after the tokens)
                ret = 1.0 if np.random.random() < ret else 0.0
            adv[n] = ret  # centred per group below
        for g in range(n_prompts):
            mean = 0.0
            for i in range(G):
                mean += adv[g * G + i]
            mean /= G
            var = 0.0
            for i in range(G):
                adv[g * G + i] -= mean
                var += adv[g * G + i] * adv[g * G + i]
            if adv_norm:
                sd = math.sqrt(var / G)
                for i in range(G):
                    adv[g * G + i] /= sd + 1e-6
        # --- stop-gradient coefficients c[n, t], clip fraction and ESS
        n_cut = 0
        ess_sum = 0.0
        if token_level:
            token_coefficients_nb(code, tok_ell, mask, adv, eps_low, eps_high, tau_m2, coef)
            for n in range(N):
                seq = math.exp(ell[n] / T)
                for t in range(T):
                    raw = seq if code == 11 else math.exp(tok_ell[n, t])
                    # a zero-advantage token contributes nothing, so it is never "clipped" (verl/TRL count alike)
                    if adv[n] != 0.0 and coef[n, t] * T < raw * (1.0 - 1e-9):
                        n_cut += 1
            clip_out[k] = n_cut / (N * T)
        else:
            for g in range(n_prompts):
                log_weights_nb(code, ell[g * G:(g + 1) * G], eps, logw)
                for i in range(G):
                    w = math.exp(logw[i])
                    for t in range(T):
                        coef[g * G + i, t] = w
                    if logw[i] < ell[g * G + i] - 1e-9:
                        n_cut += 1
            clip_out[k] = n_cut / N if (code == 2 or code == 3 or code == 4) else np.nan
        for g in range(n_prompts):
            sw = 0.0
            sw2 = 0.0
            for i in range(G):
                w = 0.0
                for t in range(T):
                    w += coef[g * G + i, t]
                sw += w
                sw2 += w * w
            ess_sum += sw * sw / sw2 if sw2 > 0.0 else 0.0
        ess_out[k] = ess_sum / n_prompts
        all_zero = 1.0
        for n in range(N):
            if adv[n] != 0.0:
                all_zero = 0.0
                break
        zero_out[k] = all_zero
        # --- ĝ_k = (1/N) Σ_n A_n Σ_t c[n,t] (e_{a_t} − π_θ(·|s_t))
        ghat[:] = 0.0
        for n in range(N):
            if adv[n] == 0.0:
                continue
            for t in range(T):
                cf = adv[n] * coef[n, t] / N
                if cf == 0.0:
                    continue
                s = states[n, t]
                for a in range(V):
                    ghat[t, s, a] -= cf * math.exp(logp[t, s, a])
                ghat[t, s, actions[n, t]] += cf
        gh2 = 0.0
        for idx in np.ndindex(T, S, V):
            gh2 += ghat[idx] * ghat[idx]
        ghat_out[k] = gh2
        if not math.isfinite(gh2):
            return k
        # --- update w_{k+1} (ĝ in parameter space: Φᵀĝ_θ for a feature policy), then θ_{k+1}
        if use_phi:
            _features_T_nb(phi, ghat, gw)
        else:
            gw[:] = ghat.reshape(P)
        if opt == 0:
            for j in range(P):
                par[j] += eta * gw[j]
        else:
            bc1 = 1.0 - beta1 ** (k + 1)
            bc2 = 1.0 - beta2 ** (k + 1)
            for j in range(P):
                m1[j] = beta1 * m1[j] + (1.0 - beta1) * gw[j]
                m2[j] = beta2 * m2[j] + (1.0 - beta2) * gw[j] * gw[j]
                par[j] += eta * (m1[j] / bc1) / (math.sqrt(m2[j] / bc2) + adam_eps)
        if use_phi:
            _features_nb(phi, par, theta)
        else:
            theta[:] = par.reshape((T, S, V))
    return -1


@njit(cache=True)
def _features_nb(phi, w, theta_out):
    """Logits of a feature policy: ``θ[t,s,a] = Σ_j Φ[(t,s,a), j] w_j``; ``phi (T·S·V, p)``."""
    T, S, V = theta_out.shape
    flat = theta_out.reshape(T * S * V)
    for i in range(T * S * V):
        x = 0.0
        for j in range(w.shape[0]):
            x += phi[i, j] * w[j]
        flat[i] = x


@njit(cache=True)
def _features_T_nb(phi, g_theta, out):
    """Chain rule through ``θ = Φw``: ``out = Φᵀ g_θ`` (``g_θ`` of shape (T,S,V), ``out`` (p,))."""
    T, S, V = g_theta.shape
    flat = g_theta.reshape(T * S * V)
    for j in range(out.shape[0]):
        out[j] = 0.0
    for i in range(T * S * V):
        gi = flat[i]
        if gi != 0.0:
            for j in range(out.shape[0]):
                out[j] += phi[i, j] * gi


@njit(cache=True, parallel=True)
def _train_batch_nb(next_state, reward, step_reward, s0, phi, use_phi, bernoulli, w0, codes, eps, eps_low, eps_high,
                    tau_m2, G, n_prompts, eta, delays, seeds, opt, beta1, beta2, adam_eps, adv_norm, collapse_frac,
                    theta_max, J_out, gn2_out, chi2_out, clip_out, ess_out, ghat_out, zero_out, theta_out, div_out):
    """:func:`_train_one_nb` for runs ``r = 0..R−1`` in parallel; per-run arrays carry a leading ``R`` axis.

    Each run seeds Numba's (per-thread) generator itself, so its numbers do not depend on the
    thread or on the other runs of the batch.
    """
    R = codes.shape[0]
    for r in prange(R):
        div_out[r] = _train_one_nb(
            next_state, reward, step_reward, s0, phi, use_phi, bernoulli, w0[r], codes[r], eps[r], eps_low[r],
            eps_high[r], tau_m2[r], G[r], n_prompts[r], eta[r], delays[r], seeds[r], opt[r], beta1[r], beta2[r],
            adam_eps[r], adv_norm[r], collapse_frac[r], theta_max[r], J_out[r], gn2_out[r], chi2_out[r],
            clip_out[r], ess_out[r], ghat_out[r], zero_out[r], theta_out[r])
    return div_out


# --------------------------------------------------------------------------- public API
def run_training(config: TrainConfig, mdp=None) -> TrainResult:
    """Run one configuration; ``mdp`` (built from ``config.instance`` if ``None``) may be passed to skip rebuilding."""
    return run_many([config], mdp=mdp)[0]


def run_many(configs, mdp=None, progress: bool = False, chunk: int | None = None, desc: str = "runs"):
    """Run many configurations; returns a list of :class:`TrainResult` in the same order.

    Configs are grouped by ``(instance, steps)``; each group runs in the parallel kernel, in chunks
    of ``chunk`` runs (default ``8 × threads``) so that ``progress`` can show a tqdm bar. ``mdp``
    overrides the instance of every config (for tests with hand-built instances).
    """
    import numba

    configs = list(configs)
    results: list[TrainResult | None] = [None] * len(configs)
    groups: dict = {}
    for j, c in enumerate(configs):
        groups.setdefault((c.instance, c.steps), []).append(j)
    chunk = chunk or 8 * numba.get_num_threads()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(configs), desc=desc, unit="run")
    built: dict = {}
    for (inst, K), idx in groups.items():
        m = mdp if mdp is not None else built.setdefault(inst, inst.build())
        for start in range(0, len(idx), chunk):
            part = [configs[j] for j in idx[start:start + chunk]]
            for j, res in zip(idx[start:start + chunk], _run_batch(part, m, K)):
                results[j] = res
            if bar is not None:
                bar.update(len(part))
    if bar is not None:
        bar.close()
    return results


def _run_batch(configs, mdp, K) -> list[TrainResult]:
    next_state = np.ascontiguousarray(mdp.next_state, dtype=np.int64)
    reward = np.ascontiguousarray(mdp.reward, dtype=np.float64)
    shape = tuple(next_state.shape)
    R = len(configs)
    # Optional parts of a protocol instance (simulate.protocol.instances): per-step rewards, a
    # feature policy θ = Φw, and Bernoulli rewards; a plain TabularMDP has none of them.
    step_reward = getattr(mdp, "step_reward", None)
    step_reward = np.zeros(shape) if step_reward is None else np.ascontiguousarray(step_reward, dtype=np.float64)
    phi = getattr(mdp, "features", None)
    use_phi = phi is not None
    phi = np.zeros((1, 1)) if phi is None else np.ascontiguousarray(phi, dtype=np.float64)
    P = phi.shape[1] if use_phi else int(np.prod(shape))
    bernoulli = bool(getattr(mdp, "bernoulli", False))

    def arr(name, dtype):
        return np.array([getattr(c, name) for c in configs], dtype=dtype)

    delays = np.stack([c.delays() for c in configs])
    J_star = optimal_J(mdp)
    w0 = np.stack([c.theta0((P,)) for c in configs])
    J = np.empty((R, K + 1))
    gn2 = np.empty((R, K + 1))
    chi2, clip, ess, ghat, zero = (np.empty((R, K)) for _ in range(5))
    theta = np.empty((R,) + shape)
    div = np.empty(R, dtype=np.int64)
    with np.errstate(all="ignore"):
        _train_batch_nb(
            next_state, reward, step_reward, int(mdp.s0), phi, use_phi, bernoulli, w0,
            np.array([c.code for c in configs], dtype=np.int64),
            arr("eps", np.float64), arr("eps_low", np.float64), arr("eps_high", np.float64),
            arr("tau_m2", np.float64), arr("G", np.int64), arr("n_prompts", np.int64), arr("eta", np.float64),
            delays, arr("seed", np.int64), np.array([OPTIMIZERS.index(c.optimizer) for c in configs], dtype=np.int64),
            arr("beta1", np.float64), arr("beta2", np.float64), arr("adam_eps", np.float64),
            arr("adv_norm", np.bool_), arr("collapse_frac", np.float64), arr("theta_max", np.float64),
            J, gn2, chi2, clip, ess, ghat, zero, theta, div,
        )
    return [
        TrainResult(config=c, J=J[r], grad_norm2=gn2[r], chi2=chi2[r], clip_frac=clip[r], ess=ess[r],
                    ghat_norm2=ghat[r], zero_grad=zero[r], delays=delays[r],
                    diverged_at=None if div[r] < 0 else int(div[r]), theta=theta[r], J_star=J_star)
        for r, c in enumerate(configs)
    ]


__all__ = ["ALL_ESTIMATORS", "InstanceSpec", "count_frac_mdp", "optimal_J", "TrainConfig", "TrainResult", "run_training", "run_many",
           "exact_J_grad", "exact_J_grad_nb", "chi2_nb", "log_softmax_nb"]
