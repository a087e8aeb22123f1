"""Exact quantities of a :class:`~simulate.instances.mdp.TabularMDP` by dynamic programming over ``(t, s)``.

``J``, ``∇J`` (forward occupancy × backward values), ``χ²`` and moments of ``ρ = π_θ(τ)/μ(τ)``
(``ρ^k`` factorises over steps), path enumeration for small instances, and stale behaviour
policies. The Numba kernels here are the one definition used by the wrappers, the Monte Carlo
engine and the training simulator (docs/THEORY.md §1).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from numba import njit

from simulate.instances.mdp import MAX_ENUM_PATHS, TabularMDP


@njit(cache=True)
def log_softmax_nb(theta, out):
    """``out[t,s,a] = log π_θ(a|s,t) = θ[t,s,a] − logsumexp_b θ[t,s,b]``; ``θ``, ``out``: ``ndarray(float64, (T,S,V))``.

    Returns ``out``. No randomness.
    """
    T, S, V = theta.shape
    for t in range(T):
        for s in range(S):
            log_softmax_row_nb(theta, out, t, s)
    return out


@njit(cache=True)
def log_softmax_row_nb(theta, out, t, s):
    """One row of :func:`log_softmax_nb`: ``out[t,s,:] = θ[t,s,:] − (m + log Σ_a exp(θ[t,s,a] − m))``,
    ``m = max_a θ[t,s,a]`` (the same operations in the same order whichever rows a caller computes)."""
    V = theta.shape[2]
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


@njit(cache=True)
def exact_J_grad_nb(logp, next_state, reward, s0, grad_out):
    """Exact ``J(θ)`` (returned) and ``∇J(θ)`` (written into ``grad_out``) for a terminal reward:
    :func:`exact_J_grad_steps_nb` with no per-step reward."""
    return exact_J_grad_steps_nb(logp, next_state, np.zeros(logp.shape), reward, s0, grad_out)


@njit(cache=True)
def start_law_nb(starts, S):
    """``d₀(s) = Σ_c 1{starts[c] = s}/C``, ``ndarray(float64, (S,))``: the uniform law over the start states
    (``δ_{s0}`` exactly for one start)."""
    d0 = np.zeros(S)
    C = starts.shape[0]
    for c in range(C):
        d0[starts[c]] += 1.0 / C
    return d0


@njit(cache=True)
def J_grad_law_nb(pi, next_state, step_reward, reward, d0, starts, grad_out, occ, val):
    """Exact ``J = (1/C) Σ_c V_0(starts[c])`` (returned) and ``∇_θ J`` (into ``grad_out``) by one forward–backward
    DP from the start law ``d0`` (:func:`start_law_nb` of ``starts``): the one DP of the package.

    ``pi = π_θ = exp(log π_θ)`` ``(T,S,V)`` (computed once by the caller); forward occupancy ``occ[0] = d₀``,
    ``occ[t+1](s') = Σ_{s,a: next(s,a)=s'} occ[t](s) π(a|s)``; backward ``val[T] = R_T``,
    ``Q_t(s,a) = r_t(s,a) + val[t+1](next(s,a))``, ``val[t](s) = Σ_a π(a|s) Q_t(s,a)``;
    ``∂J/∂θ[t,s,a] = occ[t](s) π(a|s) (Q_t(s,a) − val[t](s))`` (0 where ``occ[t](s) = 0``). ``occ``, ``val``:
    scratch ``(T+1, S)``. The DPs are linear in ``d₀``, so several starts cost one pass (simulate.training.contexts).
    """
    T, S, V = pi.shape
    for s in range(S):
        occ[0, s] = d0[s]
    for t in range(1, T + 1):
        for s in range(S):
            occ[t, s] = 0.0
    for t in range(T):
        for s in range(S):
            if occ[t, s] > 0.0:
                for a in range(V):
                    occ[t + 1, next_state[t, s, a]] += occ[t, s] * pi[t, s, a]
    for s in range(S):
        val[T, s] = reward[s]
    for t in range(T - 1, -1, -1):
        for s in range(S):
            v = 0.0
            for a in range(V):
                v += pi[t, s, a] * (step_reward[t, s, a] + val[t + 1, next_state[t, s, a]])
            val[t, s] = v
    for t in range(T):
        for s in range(S):
            if occ[t, s] == 0.0:
                for a in range(V):
                    grad_out[t, s, a] = 0.0
                continue
            for a in range(V):
                q = step_reward[t, s, a] + val[t + 1, next_state[t, s, a]]
                grad_out[t, s, a] = occ[t, s] * pi[t, s, a] * (q - val[t, s])
    C = starts.shape[0]
    if C == 1:
        return val[0, starts[0]]
    J = 0.0
    for c in range(C):
        J += val[0, starts[c]]
    return J / C


@njit(cache=True)
def exp_nb(logp):
    """``exp(logp)`` elementwise, a new array of the same shape."""
    T, S, V = logp.shape
    out = np.empty((T, S, V))
    for t in range(T):
        for s in range(S):
            for a in range(V):
                out[t, s, a] = math.exp(logp[t, s, a])
    return out


@njit(cache=True)
def exact_J_grad_steps_nb(logp, next_state, step_reward, reward, s0, grad_out):
    """Exact ``J(θ)`` (returned) and ``∇J(θ)`` (written into ``grad_out``) by forward–backward DP.

    Return ``R(τ) = Σ_t r_t(s_t, a_t) + R_T(s_T)``: ``step_reward (T,S,V)`` is ``r_t`` (zeros for a
    terminal-only reward), ``reward (S,)`` is ``R_T``; ``logp = log π_θ`` ``(T,S,V)``,
    ``next_state (T,S,V)`` int, ``grad_out (T,S,V)``.
    Forward occupancy ``d_0 = δ_{s0}``, ``d_{t+1}(s') = Σ_{s,a: next(s,a)=s'} d_t(s) π(a|s)``;
    backward ``V_T = R_T``, ``Q_t(s,a) = r_t(s,a) + V_{t+1}(next(s,a))``, ``V_t(s) = Σ_a π(a|s) Q_t(s,a)``;
    ``∂J/∂θ[t,s,a] = d_t(s) π(a|s) (Q_t(s,a) − V_t(s))`` and ``J = V_0(s_0)`` (:func:`J_grad_law_nb`).
    """
    T, S, V = logp.shape
    starts = np.array([s0], dtype=np.int64)
    return J_grad_law_nb(exp_nb(logp), next_state, step_reward, reward, start_law_nb(starts, S), starts, grad_out,
                         np.empty((T + 1, S)), np.empty((T + 1, S)))


@njit(cache=True)
def chi2_law_nb(logp, logq, next_state, d0, f, g, w2=None):
    """``χ²(π‖μ)`` of paths from the start law ``d0``: ``Σ_c χ²_c / C`` for the uniform law over ``C`` starts
    (the start law is shared by π and μ). Forward ``f_0 = d₀``, ``f_{t+1}(s') = Σ_{s,a: next(s,a)=s'} f_t(s)
    π(a|s)²/μ(a|s)``, result ``Σ_s f_T(s) − 1``; ``f``, ``g``: scratch ``(S,)``. The terms ``π²/μ`` are computed
    where ``f_t(s) ≠ 0``, or read from ``w2`` ``(T,S,V)`` when given (:func:`chi2_terms_row_nb`: a caller whose
    rows share terms computes each once; the sums are the same)."""
    T, S, V = logp.shape
    for s in range(S):
        f[s] = d0[s]
    for t in range(T):
        for s in range(S):
            g[s] = 0.0
        for s in range(S):
            if f[s] != 0.0:
                for a in range(V):
                    if w2 is None:
                        term = math.exp(2.0 * logp[t, s, a] - logq[t, s, a])
                    else:
                        term = w2[t, s, a]
                    # a zero term adds nothing: skipping it is exact for finite f (f·0 = +0) and keeps an f that
                    # overflowed to inf from making inf·0 = NaN (χ² then reads inf, which it is in float64)
                    if term != 0.0:
                        g[next_state[t, s, a]] += f[s] * term
        f, g = g, f
    tot = 0.0
    for s in range(S):
        tot += f[s]
    return tot - 1.0


@njit(cache=True)
def chi2_terms_row_nb(logp, logq, w2, t, s):
    """``w2[t,s,a] = π(a|s)²/μ(a|s) = exp(2 log π − log μ)``, one row (the terms of :func:`chi2_law_nb`)."""
    for a in range(logp.shape[2]):
        w2[t, s, a] = math.exp(2.0 * logp[t, s, a] - logq[t, s, a])


@njit(cache=True)
def chi2_nb(logp, logq, next_state, s0):
    """``χ²(π‖μ) = E_μ[ρ²] − 1 = Σ_τ π(τ)²/μ(τ) − 1`` by a forward DP (``ρ²`` factorises over steps).

    ``f_0 = δ_{s0}``, ``f_{t+1}(s') = Σ_{s,a: next(s,a)=s'} f_t(s) π(a|s)²/μ(a|s)``, result ``Σ_s f_T(s) − 1``;
    ``logp = log π``, ``logq = log μ``, both ``(T,S,V)``. Not clipped at 0 (round-off may give −1e−16).
    """
    S = logp.shape[1]
    return chi2_law_nb(logp, logq, next_state, start_law_nb(np.array([s0], dtype=np.int64), S), np.empty(S),
                       np.empty(S))


@njit(cache=True)
def logratio_max_nb(logp, logq, next_state, s0):
    """``max_{τ: μ(τ) > 0} |log π(τ) − log μ(τ)|`` exactly, by a forward max-plus DP over ``(t, s)``.

    ``log π(τ) − log μ(τ) = Σ_t x_t(s_t, a_t)`` with ``x = logp − logq`` and deterministic transitions, so
    the largest and the smallest sum reaching each state obey ``hi_{t+1}(s') = max_{s,a→s'} hi_t(s) + x_t(s,a)``
    (``lo`` with min), ``hi_0 = lo_0 = 0`` at ``s0``; the result is ``max_s max(hi_T(s), −lo_T(s))``. An action
    with ``logq = −inf`` is outside μ's support and skipped. ``logp, logq (T,S,V)``. Cost ``O(T·S·V)``, as
    :func:`chi2_nb` (:func:`logratio_max_starts_nb` with one start).
    """
    return logratio_max_starts_nb(logp, logq, next_state, np.array([s0], dtype=np.int64),
                                  np.empty((4, logp.shape[1])))


@njit(cache=True)
def logratio_max_starts_nb(logp, logq, next_state, starts, scratch):
    """The largest :func:`logratio_max_nb` over the start states ``starts`` (int64 (C,)) in one pass: the DP starts
    from ``hi_0 = lo_0 = 0`` at every start, so ``hi_T(s)`` is the largest sum over paths from any start (the
    max-plus recursion distributes over the starts, and rounding is monotone, ``fl(max_c a_c + x) = max_c fl(a_c + x)``:
    the same number as one DP per start, at the cost of one). ``scratch``: ``(4, S)``, overwritten."""
    T, S, V = logp.shape
    hi, lo, nh, nl = scratch[0], scratch[1], scratch[2], scratch[3]
    hi[:] = -np.inf
    lo[:] = np.inf
    for c in range(starts.shape[0]):
        hi[starts[c]] = 0.0
        lo[starts[c]] = 0.0
    for t in range(T):
        nh[:] = -np.inf
        nl[:] = np.inf
        for s in range(S):
            if hi[s] == -np.inf:  # not reached along μ's support
                continue
            for a in range(V):
                q = logq[t, s, a]
                if q == -np.inf:
                    continue
                x = logp[t, s, a] - q
                if x != x:  # NaN: say so rather than let the comparisons below drop it
                    return np.nan
                s2 = next_state[t, s, a]
                if hi[s] + x > nh[s2]:
                    nh[s2] = hi[s] + x
                if lo[s] + x < nl[s2]:
                    nl[s2] = lo[s] + x
        hi, nh = nh, hi
        lo, nl = nl, lo
    out = 0.0
    for s in range(S):
        if hi[s] != -np.inf:
            out = max(out, max(hi[s], -lo[s]))
    return out


def log_policy(theta) -> np.ndarray:
    """``log π_θ(a|s, t) = θ[t,s,a] − logsumexp_b θ[t,s,b]`` over the last axis (:func:`log_softmax_nb`)."""
    th = np.asarray(theta, dtype=np.float64)
    if th.ndim == 0:
        raise ValueError("theta must have at least one axis (the actions)")
    flat = np.ascontiguousarray(th.reshape(1, -1, th.shape[-1]))
    return log_softmax_nb(flat, np.empty_like(flat)).reshape(th.shape)


def state_distribution(mdp: TabularMDP, q: np.ndarray) -> np.ndarray:
    """``d_{t}(s) = Σ_{s',a} d_{t-1}(s') q[t-1,s',a] 1{next(s',a)=s}``, ``d_0 = δ_{s0}``; shape ``(T+1, S)``."""
    T, S, _ = mdp.theta_shape
    d = np.zeros((T + 1, S))
    d[0, mdp.s0] = 1.0
    for t in range(T):
        d[t + 1] = np.bincount(mdp.next_state[t].ravel(), weights=(d[t][:, None] * q[t]).ravel(), minlength=S)
    return d


def backward_values(mdp: TabularMDP, q: np.ndarray, terminal: np.ndarray):
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
    d = state_distribution(mdp, q)
    Vv, Q = backward_values(mdp, q, terminal)
    return d[:-1, :, None] * (q * Q - Vv[:-1, :, None] * pi)


def exact_grad_J(mdp: TabularMDP, theta) -> np.ndarray:
    """``∇J(θ)[t,s,a] = d_t(s) π_θ(a|s) (Q_t(s,a) − V_t(s))``, shape ``theta_shape`` (:func:`exact_J_grad_nb`)."""
    return exact_J_grad(mdp, theta)[1]


def ratio_moment(mdp: TabularMDP, theta, theta_mu, k: float) -> float:
    """``E_μ[ρ^k] = Σ_τ Π_t π_θ(a_t|s_t)^k μ(a_t|s_t)^{1−k}`` by DP (``ρ^k`` factorises over steps)."""
    lp = log_policy(mdp.check_theta(theta))
    lm = log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    with np.errstate(over="ignore", invalid="ignore"):
        Vv, _ = backward_values(mdp, np.exp(k * lp + (1.0 - k) * lm), np.ones(mdp.S))
    out = float(Vv[0, mdp.s0])
    if not math.isnan(out):
        return out
    # a step weight overflowed where a later one underflowed (inf·0): the same DP in log space
    from scipy.special import logsumexp

    logv = np.zeros(mdp.S)
    lq = k * lp + (1.0 - k) * lm
    for t in range(mdp.T - 1, -1, -1):
        logv = logsumexp(lq[t] + logv[mdp.next_state[t]], axis=1)
    with np.errstate(over="ignore"):
        return float(np.exp(logv[mdp.s0]))


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
        ell = _path_log_prob(lp, states, actions) - log_mu
        with np.errstate(over="ignore", invalid="ignore"):
            rho = np.exp(ell)
            mu = np.exp(log_mu)
            x = rho - 1.0
            out = dict(
                sigma2=float(np.sum(mu * x * x)),
                mu4=float(np.sum(mu * x**4)),
                m_tic=float(np.sum(mu * rho * x**4)),
            )
        if all(math.isfinite(v) for v in out.values()):
            return out
        return _path_moments_log(ell, log_mu)  # a ρ overflowed where μ underflowed: inf·0 = NaN above
    e = {k: ratio_moment(mdp, theta, theta_mu, float(k)) for k in (2, 3, 4, 5)}
    # E ρ^k grows with k, so an overflowed E ρ^k makes every moment that contains it +inf (never inf − inf)
    return dict(
        sigma2=max(e[2] - 1.0, 0.0),
        mu4=math.inf if e[4] == math.inf else max(e[4] - 4 * e[3] + 6 * e[2] - 3.0, 0.0),
        m_tic=math.inf if e[5] == math.inf else max(e[5] - 4 * e[4] + 6 * e[3] - 4 * e[2] + 1.0, 0.0),
    )


def _path_moments_log(ell: np.ndarray, log_mu: np.ndarray) -> dict:
    """``ratio_moments``' path sums in log space: ``Σ μ|ρ−1|^m ρ^j = Σ exp(log μ + m·log|ρ−1| + j·ℓ)``, with
    ``log|ρ−1| = ℓ + log(1 − e^{−ℓ})`` (ℓ > 0) or ``log(1 − e^ℓ)`` (ℓ ≤ 0); paths with ``μ = 0`` add nothing."""
    from scipy.special import logsumexp

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lx = np.where(ell > 0, ell + np.log(-np.expm1(-np.abs(ell))), np.log(-np.expm1(-np.abs(ell))))
        live = np.isfinite(log_mu)

        def total(v):
            v = np.where(live, v, -np.inf)
            return float(np.exp(logsumexp(v))) if np.any(v > -np.inf) else 0.0

        return dict(sigma2=total(log_mu + 2 * lx), mu4=total(log_mu + 4 * lx), m_tic=total(log_mu + ell + 4 * lx))


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


__all__ = ["log_softmax_nb", "log_softmax_row_nb", "exact_J_grad_nb", "exact_J_grad_steps_nb", "chi2_nb", "start_law_nb", "J_grad_law_nb",
           "chi2_law_nb", "chi2_terms_row_nb", "exp_nb", "logratio_max_nb", "logratio_max_starts_nb", "log_policy", "exact_J_grad", "exact_J", "expected_score", "exact_grad_J", "state_distribution", "backward_values", "ratio_moment", "chi2", "enumerate_paths", "ratio_moments", "stale_pair"]
