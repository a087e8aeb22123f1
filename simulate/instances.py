"""Synthetic instances with exactly known ``J(θ)`` and ``∇J(θ)`` (THEORY.md §1).

Both instances are one object, a **tabular token MDP with deterministic transitions**
(:class:`TabularMDP`): at step ``t`` in state ``s_t`` the policy picks a token
``a_t ∼ π_θ(·|s_t, t) = softmax(θ[t, s_t, :])``, the state moves to
``s_{t+1} = next_state[t, s_t, a_t]`` and after ``T`` tokens the terminal reward is
``R(τ) = reward[s_T] ∈ [0, 1]``.

- **bandit** (:func:`bandit`): ``T = 1``, one state, ``K`` arms; ``reward[k]`` is arm ``k``'s reward.
  "Token MDP with ``T = 1`` is the bandit" therefore holds by construction.
- **token MDP** (:func:`token_mdp`): vocabulary ``V``, horizon ``T``; the state is the policy's
  feature (``"count"``: how many 0-tokens so far; ``"prev"``: the previous token) paired with
  whatever the verifiable reward needs (``"count_ge"``: ``R = 1{#0-tokens ≥ k}``;
  ``"sum_mod"``: ``R = 1{Σ_t a_t ≡ 0 mod m}``).

Exact quantities come from dynamic programming over ``(t, s)``, defined once as Numba kernels
(:func:`log_softmax_nb`, :func:`exact_J_grad_nb`, :func:`chi2_nb`) that the NumPy-facing
wrappers (:func:`log_policy`, :func:`exact_J`, :func:`exact_grad_J`, :func:`chi2`) and the
training simulator both call: the state distribution
``d_t(s)`` under a policy (forward) and the values ``V_t(s)``, ``Q_t(s,a) = V_{t+1}(s')``
(backward). For tabular softmax the score of one step is ``e_{a_t} − π_θ(·|s_t)`` on row
``(t, s_t)``, so

    ∂J/∂θ[t,s,a] = d_t(s) π_θ(a|s) (Q_t(s,a) − V_t(s)).

Moments of ``ρ = π_θ(τ)/μ(τ)`` under ``μ`` use the same recursion with the unnormalised
step weights ``μ(a|s)·r(a|s)^k = π_θ(a|s)^k μ(a|s)^{1−k}``, because ``ρ^k`` factorises over
time steps: ``E_μ[ρ^k] = Σ_τ Π_t π_θ^k μ^{1−k}``.

Sampling uses Walker/Vose alias tables (:func:`alias_tables`): one uniform ``u`` per token,
``j = ⌊uV⌋``, accept ``j`` if ``uV − j < prob[j]`` else take ``alias[j]``. The uniforms come from
Numba's ``np.random`` (:func:`sample_groups_nb`) or, in the Monte Carlo kernel, from the faster
xoshiro256+ stream :func:`rng_uniform_nb` seeded per chunk by :func:`rng_seed_nb`.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from asyncgrpo.validation import check_finite

__all__ = [
    "TabularMDP",
    "bandit",
    "token_mdp",
    "log_policy",
    "log_softmax_nb",
    "exact_J_grad_nb",
    "exact_J_grad_steps_nb",
    "chi2_nb",
    "random_theta",
    "exact_J",
    "exact_J_grad",
    "exact_grad_J",
    "chi2",
    "ratio_moment",
    "ratio_moments",
    "stale_pair",
    "enumerate_paths",
    "alias_tables",
    "rng_seed_nb",
    "rng_uniform_nb",
    "sample_token_nb",
    "sample_paths_nb",
    "sample_groups_nb",
    "traj_log_prob_nb",
    "add_score_nb",
]

#: Largest ``V^T`` for which :func:`enumerate_paths` (and enumeration-based exact values) run.
MAX_ENUM_PATHS = 1 << 20


@dataclass(frozen=True, eq=False)
class TabularMDP:
    """A deterministic tabular token MDP; policy logits ``θ`` have shape ``(T, S, V)``.

    ``eq=False``: instances hold arrays, so identity is the only meaningful equality.
    """

    name: str
    """Short id used in tables (e.g. ``"bandit-K3"``, ``"token-mdp-V4-T8-count-count_ge3"``)."""
    next_state: np.ndarray
    """``ndarray(int64, (T, S, V))``: ``s_{t+1} = next_state[t, s_t, a_t]``."""
    reward: np.ndarray
    """``ndarray(float64, (S,))``: terminal reward ``R(τ) = reward[s_T] ∈ [0, 1]``."""
    s0: int
    """Initial state ``s_0``."""

    def __post_init__(self):
        ns = np.ascontiguousarray(self.next_state, dtype=np.int64)
        r = np.ascontiguousarray(self.reward, dtype=np.float64)
        if ns.ndim != 3 or min(ns.shape) < 1:
            raise ValueError(f"next_state must have shape (T, S, V) with T, S, V >= 1, got {ns.shape}")
        if r.shape != (ns.shape[1],):
            raise ValueError(f"reward must have shape (S,) = ({ns.shape[1]},), got {r.shape}")
        if ns.min() < 0 or ns.max() >= ns.shape[1]:
            raise ValueError(f"next_state entries must lie in [0, S-1] = [0, {ns.shape[1] - 1}]")
        check_finite(r, "reward")
        if r.min() < 0.0 or r.max() > 1.0:
            raise ValueError("reward must lie in [0, 1] (THEORY §1: R(τ) ∈ [0,1])")
        if not 0 <= int(self.s0) < ns.shape[1]:
            raise ValueError(f"s0 must lie in [0, S-1] = [0, {ns.shape[1] - 1}], got {self.s0}")
        ns.setflags(write=False)
        r.setflags(write=False)
        object.__setattr__(self, "next_state", ns)
        object.__setattr__(self, "reward", r)
        object.__setattr__(self, "s0", int(self.s0))

    @property
    def T(self) -> int:
        """Horizon (tokens per trajectory)."""
        return self.next_state.shape[0]

    @property
    def S(self) -> int:
        """Number of states."""
        return self.next_state.shape[1]

    @property
    def V(self) -> int:
        """Vocabulary size (actions per state)."""
        return self.next_state.shape[2]

    @property
    def theta_shape(self) -> tuple[int, int, int]:
        """Shape ``(T, S, V)`` of the logits ``θ``."""
        return (self.T, self.S, self.V)

    @property
    def n_params(self) -> int:
        """``T·S·V``."""
        return self.T * self.S * self.V

    def check_theta(self, theta, name: str = "theta") -> np.ndarray:
        """Return ``theta`` as float64 of shape :attr:`theta_shape`, or raise ValueError."""
        th = np.asarray(theta, dtype=np.float64)
        if th.shape != self.theta_shape:
            raise ValueError(f"{name} must have shape (T, S, V) = {self.theta_shape}, got {th.shape}")
        check_finite(th, name)
        return th


# --------------------------------------------------------------------------- constructors


def bandit(K: int, rewards=None, seed: int = 0) -> TabularMDP:
    """``K``-armed bandit as a one-step token MDP: ``S = K + 1`` (start state 0, arm ``k`` → state ``k+1``).

    ``rewards`` (length ``K``, in ``[0,1]``) defaults to ``Uniform(0,1)`` draws from ``seed``.
    """
    if isinstance(K, bool) or int(K) != K or K < 2:
        raise ValueError(f"K must be an integer >= 2 (number of arms), got {K!r}")
    K = int(K)
    if rewards is None:
        rewards = np.random.default_rng(seed).uniform(0.0, 1.0, size=K)
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.shape != (K,):
        raise ValueError(f"rewards must have shape (K,) = ({K},), got {rewards.shape}")
    ns = (1 + np.arange(K, dtype=np.int64)).reshape(1, 1, K)
    ns = np.concatenate([ns, np.zeros((1, K, K), dtype=np.int64)], axis=1)  # states 1..K are terminal
    return TabularMDP(f"bandit-K{K}", ns, np.concatenate([[0.0], rewards]), 0)


def token_mdp(
    V: int = 4,
    T: int = 8,
    state: str = "count",
    reward: str = "count_ge",
    k: int | None = None,
    m: int = 3,
    seed: int = 0,
) -> TabularMDP:
    """Token MDP over vocabulary ``V`` and horizon ``T`` with a verifiable 0/1 terminal reward.

    The state is the pair (policy feature, reward statistic), flattened:

    - ``state="count"``: feature ``c_t`` = number of 0-tokens in ``a_<t`` (``T+1`` values);
      ``state="prev"``: feature = previous token, ``V`` meaning "none yet" (``V+1`` values).
    - ``reward="count_ge"``: ``R = 1{#0-tokens ≥ k}`` (statistic: the count, capped at ``k``;
      default ``k = ⌈T/V⌉ + 1``); ``reward="sum_mod"``: ``R = 1{Σ_t a_t ≡ 0 (mod m)}``
      (statistic: the running sum mod ``m``).

    When feature and statistic coincide (``count`` with ``count_ge``) the state is the count alone.
    ``seed`` is unused (the instance is deterministic) and kept for a uniform constructor signature.
    """
    for val, nm, lo in ((V, "V", 2), (T, "T", 1), (m, "m", 2)):
        if isinstance(val, bool) or int(val) != val or val < lo:
            raise ValueError(f"{nm} must be an integer >= {lo}, got {val!r}")
    V, T, m = int(V), int(T), int(m)
    if state not in ("count", "prev"):
        raise ValueError(f"state must be 'count' or 'prev', got {state!r}")
    if reward not in ("count_ge", "sum_mod"):
        raise ValueError(f"reward must be 'count_ge' or 'sum_mod', got {reward!r}")
    if k is None:
        k = -(-T // V) + 1
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= T:
        raise ValueError(f"k must be an integer in [1, T] = [1, {T}], got {k!r}")
    k = int(k)

    n_feat = T + 1 if state == "count" else V + 1
    n_stat = k + 1 if reward == "count_ge" else m
    shared = state == "count" and reward == "count_ge"

    def feat_next(f, a):
        if state == "count":
            return min(f + (a == 0), T)
        return a

    def stat_next(z, a):
        if reward == "count_ge":
            return min(z + (a == 0), k)
        return (z + a) % m

    if shared:
        S = T + 1
        ns = np.empty((T, S, V), dtype=np.int64)
        for s in range(S):
            for a in range(V):
                ns[:, s, a] = feat_next(s, a)
        rew = (np.arange(S) >= k).astype(np.float64)
        s0 = 0
    else:
        S = n_feat * n_stat
        ns = np.empty((T, S, V), dtype=np.int64)
        rew = np.empty(S)
        for f in range(n_feat):
            for z in range(n_stat):
                s = f * n_stat + z
                rew[s] = float(z >= k) if reward == "count_ge" else float(z == 0)
                for a in range(V):
                    ns[:, s, a] = feat_next(f, a) * n_stat + stat_next(z, a)
        s0 = (0 if state == "count" else V) * n_stat
    rtag = f"count_ge{k}" if reward == "count_ge" else f"sum_mod{m}"
    return TabularMDP(f"token-mdp-V{V}-T{T}-{state}-{rtag}", ns, rew, s0)


def random_theta(mdp: TabularMDP, scale: float = 0.5, seed: int = 0) -> np.ndarray:
    """Logits ``θ ∼ N(0, scale²)`` of shape ``mdp.theta_shape`` (a generic current policy)."""
    if not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    return np.random.default_rng(seed).normal(0.0, scale, size=mdp.theta_shape)


# --------------------------------------------------------------------------- exact quantities


@njit(cache=True)
def log_softmax_nb(theta, out):
    """``out[t,s,a] = log π_θ(a|s,t) = θ[t,s,a] − logsumexp_b θ[t,s,b]``; ``θ``, ``out``: ``ndarray(float64, (T,S,V))``.

    Returns ``out``. No randomness.
    """
    T, S, V = theta.shape
    for t in range(T):
        for s in range(S):
            m = theta[t, s, 0]
            for a in range(1, V):
                if theta[t, s, a] > m:
                    m = theta[t, s, a]
            z = 0.0
            for a in range(V):
                z += math.exp(theta[t, s, a] - m)
            lz = m + math.log(z)
            for a in range(V):
                out[t, s, a] = theta[t, s, a] - lz
    return out


@njit(cache=True)
def exact_J_grad_nb(logp, next_state, reward, s0, grad_out):
    """Exact ``J(θ)`` (returned) and ``∇J(θ)`` (written into ``grad_out``) for a terminal reward:
    :func:`exact_J_grad_steps_nb` with no per-step reward."""
    return exact_J_grad_steps_nb(logp, next_state, np.zeros(logp.shape), reward, s0, grad_out)


@njit(cache=True)
def exact_J_grad_steps_nb(logp, next_state, step_reward, reward, s0, grad_out):
    """Exact ``J(θ)`` (returned) and ``∇J(θ)`` (written into ``grad_out``) by forward–backward DP.

    Return ``R(τ) = Σ_t r_t(s_t, a_t) + R_T(s_T)``: ``step_reward (T,S,V)`` is ``r_t`` (zeros for a
    terminal-only reward), ``reward (S,)`` is ``R_T``; ``logp = log π_θ`` ``(T,S,V)``,
    ``next_state (T,S,V)`` int, ``grad_out (T,S,V)``.
    Forward occupancy ``d_0 = δ_{s0}``, ``d_{t+1}(s') = Σ_{s,a: next(s,a)=s'} d_t(s) π(a|s)``;
    backward ``V_T = R_T``, ``Q_t(s,a) = r_t(s,a) + V_{t+1}(next(s,a))``, ``V_t(s) = Σ_a π(a|s) Q_t(s,a)``;
    ``∂J/∂θ[t,s,a] = d_t(s) π(a|s) (Q_t(s,a) − V_t(s))`` and ``J = V_0(s_0)``.
    """
    T, S, V = logp.shape
    p = np.zeros((T + 1, S))
    p[0, s0] = 1.0
    for t in range(T):
        for s in range(S):
            if p[t, s] > 0.0:
                for a in range(V):
                    p[t + 1, next_state[t, s, a]] += p[t, s] * math.exp(logp[t, s, a])
    val = np.empty((T + 1, S))
    for s in range(S):
        val[T, s] = reward[s]
    for t in range(T - 1, -1, -1):
        for s in range(S):
            v = 0.0
            for a in range(V):
                v += math.exp(logp[t, s, a]) * (step_reward[t, s, a] + val[t + 1, next_state[t, s, a]])
            val[t, s] = v
    for t in range(T):
        for s in range(S):
            for a in range(V):
                q = step_reward[t, s, a] + val[t + 1, next_state[t, s, a]]
                grad_out[t, s, a] = p[t, s] * math.exp(logp[t, s, a]) * (q - val[t, s])
    return val[0, s0]


@njit(cache=True)
def chi2_nb(logp, logq, next_state, s0):
    """``χ²(π‖μ) = E_μ[ρ²] − 1 = Σ_τ π(τ)²/μ(τ) − 1`` by a forward DP (``ρ²`` factorises over steps).

    ``f_0 = δ_{s0}``, ``f_{t+1}(s') = Σ_{s,a: next(s,a)=s'} f_t(s) π(a|s)²/μ(a|s)``, result ``Σ_s f_T(s) − 1``;
    ``logp = log π``, ``logq = log μ``, both ``(T,S,V)``. Not clipped at 0 (round-off may give −1e−16).
    """
    T, S, V = logp.shape
    f = np.zeros(S)
    f[s0] = 1.0
    for t in range(T):
        g = np.zeros(S)
        for s in range(S):
            if f[s] != 0.0:
                for a in range(V):
                    g[next_state[t, s, a]] += f[s] * math.exp(2.0 * logp[t, s, a] - logq[t, s, a])
        f = g
    return f.sum() - 1.0


def log_policy(theta) -> np.ndarray:
    """``log π_θ(a|s, t) = θ[t,s,a] − logsumexp_b θ[t,s,b]`` over the last axis (:func:`log_softmax_nb`)."""
    th = np.asarray(theta, dtype=np.float64)
    if th.ndim == 0:
        raise ValueError("theta must have at least one axis (the actions)")
    flat = np.ascontiguousarray(th.reshape(1, -1, th.shape[-1]))
    return log_softmax_nb(flat, np.empty_like(flat)).reshape(th.shape)


def _forward(mdp: TabularMDP, q: np.ndarray) -> np.ndarray:
    """``d_{t}(s) = Σ_{s',a} d_{t-1}(s') q[t-1,s',a] 1{next(s',a)=s}``, ``d_0 = δ_{s0}``; shape ``(T+1, S)``."""
    T, S, _ = mdp.theta_shape
    d = np.zeros((T + 1, S))
    d[0, mdp.s0] = 1.0
    for t in range(T):
        d[t + 1] = np.bincount(mdp.next_state[t].ravel(), weights=(d[t][:, None] * q[t]).ravel(), minlength=S)
    return d


def _backward(mdp: TabularMDP, q: np.ndarray, terminal: np.ndarray):
    """``V_T = terminal``, ``Q_t(s,a) = V_{t+1}(next(s,a))``, ``V_t(s) = Σ_a q[t,s,a] Q_t(s,a)``."""
    T, S, _ = mdp.theta_shape
    Vv = np.zeros((T + 1, S))
    Q = np.zeros(mdp.theta_shape)
    Vv[T] = terminal
    for t in range(T - 1, -1, -1):
        Q[t] = Vv[t + 1][mdp.next_state[t]]
        Vv[t] = (q[t] * Q[t]).sum(axis=1)
    return Vv, Q


def exact_J_grad(mdp: TabularMDP, theta) -> tuple[float, np.ndarray]:
    """``(J(θ), ∇J(θ))`` by forward–backward DP (:func:`exact_J_grad_nb`); ``∇J`` has shape ``theta_shape``."""
    th = np.ascontiguousarray(mdp.check_theta(theta))
    grad = np.empty_like(th)
    J = exact_J_grad_nb(log_softmax_nb(th, np.empty_like(th)), mdp.next_state, mdp.reward, mdp.s0, grad)
    return float(J), grad


def exact_J(mdp: TabularMDP, theta) -> float:
    """``J(θ) = E_{τ∼π_θ} R(τ) = V_0(s_0)`` by DP (:func:`exact_J_grad_nb`)."""
    return exact_J_grad(mdp, theta)[0]


def expected_score(mdp: TabularMDP, q: np.ndarray, terminal: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """``Σ_τ Π_t q(a_t|s_t) · f(s_T) · s_θ(τ)`` with ``s_θ`` the score of the softmax policy ``pi``.

    ``q`` are step weights ``(T,S,V)`` (a policy, or ``π^k μ^{1−k}`` for moments), ``f = terminal``
    ``(S,)``. Row ``(t,s)`` of the score is ``e_a − π(·|s)``, so the result is
    ``d_t(s) q(a|s) Q_t(s,a) − d_t(s) V_t(s) π(a|s)``. With ``q = π_θ``, ``f = R`` it is ``∇J(θ)``.
    """
    d = _forward(mdp, q)
    Vv, Q = _backward(mdp, q, terminal)
    return d[:-1, :, None] * (q * Q - Vv[:-1, :, None] * pi)


def exact_grad_J(mdp: TabularMDP, theta) -> np.ndarray:
    """``∇J(θ)[t,s,a] = d_t(s) π_θ(a|s) (Q_t(s,a) − V_t(s))``, shape ``theta_shape`` (:func:`exact_J_grad_nb`)."""
    return exact_J_grad(mdp, theta)[1]


def ratio_moment(mdp: TabularMDP, theta, theta_mu, k: float) -> float:
    """``E_μ[ρ^k] = Σ_τ Π_t π_θ(a_t|s_t)^k μ(a_t|s_t)^{1−k}`` by DP (``ρ^k`` factorises over steps)."""
    lp = log_policy(mdp.check_theta(theta))
    lm = log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    Vv, _ = _backward(mdp, np.exp(k * lp + (1.0 - k) * lm), np.ones(mdp.S))
    return float(Vv[0, mdp.s0])


def chi2(mdp: TabularMDP, theta, theta_mu) -> float:
    """``χ²(π_θ‖μ) = E_μ[ρ²] − 1 = Var_μ ρ`` by DP (:func:`chi2_nb`), clipped at 0 against round-off."""
    lp = log_policy(mdp.check_theta(theta))
    lm = log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    return max(float(chi2_nb(lp, lm, mdp.next_state, mdp.s0)), 0.0)


def enumerate_paths(mdp: TabularMDP, max_paths: int = MAX_ENUM_PATHS):
    """All ``V^T`` token sequences: ``(actions (N,T) int64, states (N,T) int64, final_state (N,))``.

    ``states[:, t] = s_t`` (the state in which ``a_t`` is chosen). Raises ValueError past ``max_paths``.
    """
    N = mdp.V**mdp.T
    if N > max_paths:
        raise ValueError(f"enumeration needs V^T <= {max_paths} paths, got V^T = {mdp.V}^{mdp.T} = {N}")
    actions = np.array(list(itertools.product(range(mdp.V), repeat=mdp.T)), dtype=np.int64).reshape(N, mdp.T)
    states = np.empty_like(actions)
    s = np.full(N, mdp.s0, dtype=np.int64)
    for t in range(mdp.T):
        states[:, t] = s
        s = mdp.next_state[t, s, actions[:, t]]
    return actions, states, s


def _path_log_prob(logp: np.ndarray, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    t = np.arange(actions.shape[1])
    return logp[t[None, :], states, actions].sum(axis=1)


def ratio_moments(mdp: TabularMDP, theta, theta_mu, method: str = "auto") -> dict:
    """Moments of ``ρ`` under ``μ`` used by theory/'s bounds (THEORY C4).

    Returns ``dict(sigma2, mu4, m_tic)`` with ``σ² = Var_μ ρ = χ²``, ``μ₄ = E_μ(ρ−1)⁴`` and
    ``m_tic = E_μ[ρ(ρ−1)⁴]``. ``method="enum"`` sums over all ``V^T`` paths directly (no
    cancellation); ``"dp"`` expands the powers, ``μ₄ = E ρ⁴ − 4Eρ³ + 6Eρ² − 3`` and
    ``m_tic = E ρ⁵ − 4Eρ⁴ + 6Eρ³ − 4Eρ² + 1`` (using ``E_μ ρ = 1``), each ``E ρ^k`` by DP;
    ``"auto"`` enumerates when ``V^T ≤ 2^16``.
    """
    if method not in ("auto", "enum", "dp"):
        raise ValueError(f"method must be 'auto', 'enum' or 'dp', got {method!r}")
    if method == "auto":
        method = "enum" if mdp.V**mdp.T <= (1 << 16) else "dp"
    if method == "enum":
        lp = log_policy(mdp.check_theta(theta))
        lm = log_policy(mdp.check_theta(theta_mu, "theta_mu"))
        actions, states, _ = enumerate_paths(mdp)
        log_mu = _path_log_prob(lm, states, actions)
        rho = np.exp(_path_log_prob(lp, states, actions) - log_mu)
        mu = np.exp(log_mu)
        x = rho - 1.0
        return dict(
            sigma2=float(np.sum(mu * x * x)),
            mu4=float(np.sum(mu * x**4)),
            m_tic=float(np.sum(mu * rho * x**4)),
        )
    e = {k: ratio_moment(mdp, theta, theta_mu, float(k)) for k in (2, 3, 4, 5)}
    return dict(
        sigma2=max(e[2] - 1.0, 0.0),
        mu4=max(e[4] - 4 * e[3] + 6 * e[2] - 3.0, 0.0),
        m_tic=max(e[5] - 4 * e[4] + 6 * e[3] - 4 * e[2] + 1.0, 0.0),
    )


def stale_pair(mdp: TabularMDP, theta, d: float, eta: float, direction: str = "grad", seed: int = 0) -> np.ndarray:
    """Behaviour logits ``θ_μ = θ − d·η·u`` at distance ``‖θ − θ_μ‖ = dη`` (controlled staleness).

    ``u = ∇J(θ)/‖∇J(θ)‖`` (``direction="grad"``: as if ``d`` ascent steps of length ``η`` had
    happened since ``μ``) or a uniform random unit vector (``"random"``, drawn from ``seed``).
    """
    th = mdp.check_theta(theta)
    if not (math.isfinite(d) and d >= 0):
        raise ValueError(f"d must be a finite number >= 0 (the delay), got {d!r}")
    if not (math.isfinite(eta) and eta >= 0):
        raise ValueError(f"eta must be a finite number >= 0 (the step size), got {eta!r}")
    if direction == "grad":
        u = exact_grad_J(mdp, th)
    elif direction == "random":
        u = np.random.default_rng(seed).normal(size=mdp.theta_shape)
    else:
        raise ValueError(f"direction must be 'grad' or 'random', got {direction!r}")
    norm = np.linalg.norm(u)
    if norm == 0.0:
        raise ValueError("the gradient is zero at theta: no 'grad' direction; use direction='random'")
    return th - d * eta * (u / norm)


# --------------------------------------------------------------------------- sampling kernels


@njit(cache=True)
def alias_tables(logp):
    """Walker/Vose alias tables of each row of ``exp(logp)`` (``(T,S,V)``): ``(prob float64, alias int64)``.

    Column ``j`` keeps itself with probability ``prob[j]`` and otherwise yields ``alias[j]``;
    drawing ``j`` uniformly gives ``P(a) = (prob[a] + Σ_{j: alias[j]=a} (1 − prob[j]))/V = π(a)``.
    """
    T, S, V = logp.shape
    prob = np.ones((T, S, V))
    alias = np.empty((T, S, V), dtype=np.int64)
    scaled = np.empty(V)
    small = np.empty(V, dtype=np.int64)
    large = np.empty(V, dtype=np.int64)
    for t in range(T):
        for s in range(S):
            m = logp[t, s, 0]
            for a in range(1, V):
                m = max(m, logp[t, s, a])
            tot = 0.0
            for a in range(V):
                scaled[a] = math.exp(logp[t, s, a] - m)
                tot += scaled[a]
            ns = 0
            nl = 0
            for a in range(V):
                scaled[a] *= V / tot
                alias[t, s, a] = a
                if scaled[a] < 1.0:
                    small[ns] = a
                    ns += 1
                else:
                    large[nl] = a
                    nl += 1
            while ns > 0 and nl > 0:
                ns -= 1
                j = small[ns]
                nl -= 1
                g = large[nl]
                prob[t, s, j] = scaled[j]
                alias[t, s, j] = g
                scaled[g] = (scaled[g] + scaled[j]) - 1.0
                if scaled[g] < 1.0:
                    small[ns] = g
                    ns += 1
                else:
                    large[nl] = g
                    nl += 1
            # leftovers are 1 up to round-off: keep themselves (prob = 1, alias = self)
    return prob, alias


@njit(cache=True)
def rng_seed_nb(seed):
    """State ``ndarray(uint64, (4,))`` of a xoshiro256+ stream for ``seed``, spread by SplitMix64.

    The Monte Carlo kernel's per-chunk generator: ~1 ns per uniform against ~10 ns for Numba's
    Mersenne Twister (``np.random.random``), whose cost dominated the per-token work. Independent
    streams come from distinct seeds (one per chunk, from ``np.random.SeedSequence``).
    """
    st = np.empty(4, dtype=np.uint64)
    z = np.uint64(seed)
    for k in range(4):
        z += np.uint64(0x9E3779B97F4A7C15)
        x = z
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        st[k] = x ^ (x >> np.uint64(31))
    return st


@njit(cache=True, inline="always")
def rng_uniform_nb(st):
    """Next ``u ∈ [0, 1)`` (53 bits, multiples of ``2^-53``) of the xoshiro256+ stream ``st`` (advanced in place)."""
    s0, s1, s2, s3 = st[0], st[1], st[2], st[3]
    res = s0 + s3
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = (s3 << np.uint64(45)) | (s3 >> np.uint64(19))
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3
    return (res >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def sample_token_nb(u, prob_row, alias_row):
    """One token from an alias row with one uniform ``u ∈ [0,1)``."""
    V = prob_row.shape[0]
    x = u * V
    j = int(x)
    if j >= V:  # u rounds up to 1 only if u*V == V in float: stay in range
        j = V - 1
    return j if x - j < prob_row[j] else alias_row[j]


@njit(cache=True)
def sample_paths_nb(prob, alias, next_state, s0, u, actions, states):
    """Trajectories from pre-drawn uniforms ``u (n, T)``; fills ``actions``/``states``; returns ``s_T (n,)``."""
    n, T = u.shape
    final = np.empty(n, dtype=np.int64)
    for i in range(n):
        s = s0
        for t in range(T):
            a = sample_token_nb(u[i, t], prob[t, s], alias[t, s])
            states[i, t] = s
            actions[i, t] = a
            s = next_state[t, s, a]
        final[i] = s
    return final


@njit(cache=True)
def sample_groups_nb(logp_mu, next_state, reward, s0, n_traj, seed):
    """``n_traj`` i.i.d. trajectories from ``μ = exp(logp_mu)``, seeded inside (Numba's own RNG).

    Returns ``(actions (n,T) int64, states (n,T) int64, rewards (n,) float64)`` with
    ``rewards[i] = reward[s_T]``; consecutive blocks of ``G`` rows form the groups.
    """
    np.random.seed(seed)
    T = logp_mu.shape[0]
    prob, alias = alias_tables(logp_mu)
    u = np.empty((n_traj, T))
    for i in range(n_traj):
        for t in range(T):
            u[i, t] = np.random.random()
    actions = np.empty((n_traj, T), dtype=np.int64)
    states = np.empty((n_traj, T), dtype=np.int64)
    final = sample_paths_nb(prob, alias, next_state, s0, u, actions, states)
    rewards = np.empty(n_traj)
    for i in range(n_traj):
        rewards[i] = reward[final[i]]
    return actions, states, rewards


@njit(cache=True)
def traj_log_prob_nb(logp, states, actions):
    """``log π(τ_i) = Σ_t logp[t, s_{i,t}, a_{i,t}]`` for each row; shape ``(n,)``."""
    n, T = actions.shape
    out = np.zeros(n)
    for i in range(n):
        acc = 0.0
        for t in range(T):
            acc += logp[t, states[i, t], actions[i, t]]
        out[i] = acc
    return out


@njit(cache=True)
def add_score_nb(logp, states, actions, coef, grad_out):
    """``grad_out += Σ_i coef_i ∇_θ log π_θ(τ_i)``; row ``(t, s_t)`` gets ``coef_i (e_{a_t} − π(·|s_t))``."""
    n, T = actions.shape
    V = logp.shape[2]
    for i in range(n):
        c = coef[i]
        if c == 0.0:
            continue
        for t in range(T):
            s = states[i, t]
            for b in range(V):
                grad_out[t, s, b] -= c * math.exp(logp[t, s, b])
            grad_out[t, s, actions[i, t]] += c
    return grad_out
