"""A pure-NumPy reference of the asynchronous learner (``simulate.training``), written for ``python -m bench training``.

It computes what the Numba kernel (:func:`simulate.training.kernel._train_one_nb`) computes, step for step,
with vectorised NumPy instead of loops, and shares no numerical helper with it (only the configuration
:class:`~simulate.training.TrainConfig`, for the delays ``d_k`` and the initial parameters ``w_0``, and the
NumPy weight maps of :mod:`asyncgrpo.estimators`). Two uses: a speed baseline for the benchmark, and an
independent statement of the learner that the tests compare with the kernel in distribution.

**Policy.** Logits ``θ ∈ R^{T×S×V}``, ``π_θ(a|s,t) = softmax(θ[t,s,:])_a``; tabular (``θ = w``) or
log-linear (``θ = Φw``, ``Φ ∈ R^{TSV×p}``, the instance's ``features``). The MDP is deterministic,
``s_{t+1} = next_state[t, s_t, a_t]``, with return ``R(τ) = Σ_t r_t(s_t,a_t) + R_T(s_T)`` (``step_reward``,
``reward``).

**One learner step** ``k = 0..K−1`` (and the checks and diagnostics at ``θ_K``):

1. divergence: stop at ``k`` if some ``|θ_k| > theta_max`` (or NaN), or (``k > 0``) if
   ``J(θ_k) < collapse_frac·J(θ_0)`` or non-finite;
2. exact ``J(θ_k)`` and ``∇_θ J`` by dynamic programming (:func:`exact_J_grad`): forward occupancy
   ``d_0 = δ_{s0}``, ``d_{t+1}(s') = Σ_{s,a: next(s,a)=s'} d_t(s) π(a|s)``; backward ``V_T = R_T``,
   ``Q_t(s,a) = r_t(s,a) + V_{t+1}(next(s,a))``, ``V_t(s) = Σ_a π(a|s) Q_t(s,a)``; then
   ``∂J/∂θ[t,s,a] = d_t(s) π(a|s)(Q_t(s,a) − V_t(s))``, ``J = V_0(s_0)``, and ``‖∇_w J‖²`` with
   ``∇_w J = Φᵀ∇_θ J`` for a feature policy;
3. the behaviour policy ``μ_k = π_{θ_{k−d_k}}`` and the exact ``χ²(π_{θ_k}‖μ_k) = Σ_τ π²(τ)/μ(τ) − 1``
   by a forward DP with step weights ``π(a|s)²/μ(a|s)`` (:func:`chi2`);
4. ``N = G·n_prompts`` trajectories from ``μ_k`` by inverse CDF, vectorised over ``N`` (one uniform per
   token from ``numpy.random.default_rng(seed)``, then one per trajectory for a Bernoulli reward
   ``R ~ Bernoulli(E R(τ))`` when the instance says so);
5. group-centred advantages ``A_n = R_n − R̄_group`` (optionally ``/(std + 1e-6)``), log-ratios
   ``ℓ_n = Σ_t log π_{θ_k}(a_t|s_t) − log μ_k(a_t|s_t)``, ``ρ_n = e^{ℓ_n}``, weights ``w_n`` from the
   NumPy weight map of the estimator (per group);
6. ``ĝ = (1/N) Σ_n A_n w_n s_θ(τ_n)`` with the tabular score ``s_θ(τ) = Σ_t (e_{a_t} − π_θ(·|s_t))`` on
   row ``(t, s_t)``: a scatter of ``c_n = A_n w_n/N`` onto ``(t, s_t, a_t)`` minus
   ``(Σ_n c_n 1{s_{n,t} = s}) π_θ(·|s)`` (:func:`score_sum`); ``ĝ_w = Φᵀ ĝ`` for a feature policy;
7. SGD ``w_{k+1} = w_k + η ĝ_w`` (or Adam ascent), ``θ_{k+1}`` from ``w_{k+1}``.

Per-step diagnostics as in the kernel: ``χ²``, clip fraction (``tis``/``tic``/``gmc``: fraction of
trajectories with ``w_n < ρ_n``), ESS ``(Σw)²/Σw²`` per group (mean over groups), ``‖ĝ‖²`` (logit space),
the zero-gradient flag (every ``A_n = 0``), C6's overlap diagnostics: ``‖w_k − w_{k−d_k}‖``,
``max_{τ∈supp μ_k} |log ρ(τ)|`` (max-plus DP, :func:`logratio_max`) and ``‖ĝ_w‖²``, and issue 33's ascent rates
``⟨ĝ_w, ∇_w J⟩/‖∇_w J‖`` of ``ĝ`` and of its part from negative-advantage tokens with ``π < μ``. The random stream differs from the kernel's, so runs are
equal in distribution, not bit for bit. Token-level estimators are not covered.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from asyncgrpo import estimators as est
from asyncgrpo.estimators import reference as est_reference

#: Maps whose weights can fall below ρ (the kernel reports a clip fraction only for these).
_CUTTING = ("tis", "tic", "gmc")


@dataclass(frozen=True)
class RefResult:
    """Curves of one reference run (same meaning and NaN conventions as :class:`simulate.training.TrainResult`)."""

    J: np.ndarray
    grad_norm2: np.ndarray
    chi2: np.ndarray
    clip_frac: np.ndarray
    ess: np.ndarray
    ghat_norm2: np.ndarray
    zero_grad: np.ndarray
    dtheta_norm: np.ndarray
    """``‖w_k − w_{k−d_k}‖₂`` in the trained parameter."""
    logratio_max: np.ndarray
    """``max_{τ ∈ supp μ_k} |log π_{θ_k}(τ) − log μ_k(τ)|`` (exact, :func:`logratio_max`)."""
    gpar_norm2: np.ndarray
    """``‖ĝ_k‖²`` in the trained parameter (``Φᵀĝ`` for a feature policy)."""
    gdot: np.ndarray
    """Issue 33's ascent rate ``⟨ĝ_k, ∇J(θ_k)⟩/‖∇J(θ_k)‖`` in the trained parameter."""
    gneg: np.ndarray
    """The same projection of the part of ``ĝ_k`` from negative-advantage tokens with ``π_θ(a_t|s_t) < μ_k(a_t|s_t)``."""
    delays: np.ndarray
    diverged_at: int | None
    theta: np.ndarray

    @property
    def steps_done(self) -> int:
        """Learner updates actually made (``K``, or the divergence step)."""
        return self.delays.size if self.diverged_at is None else self.diverged_at


def log_softmax(theta: np.ndarray) -> np.ndarray:
    """``log π_θ(a|s,t) = θ[t,s,a] − logsumexp_b θ[t,s,b]`` (max-shifted, so large logits do not overflow)."""
    z = theta - theta.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _forward(step_w: np.ndarray, next_state: np.ndarray, s0: int) -> np.ndarray:
    """``f_0 = δ_{s0}``, ``f_{t+1}(s') = Σ_{s,a: next(s,a)=s'} f_t(s) step_w[t,s,a]``; shape ``(T+1, S)``.

    With ``step_w = π`` it is the state occupancy ``d_t``; with ``π²/μ`` its last row sums to ``E_μ ρ²``.
    ``np.bincount`` over the flattened ``next_state[t]`` is the scatter-add of one time step."""
    T, S, _ = step_w.shape
    f = np.zeros((T + 1, S))
    f[0, s0] = 1.0
    for t in range(T):
        f[t + 1] = np.bincount(next_state[t].ravel(), weights=(f[t][:, None] * step_w[t]).ravel(), minlength=S)
    return f


def exact_J_grad(logp: np.ndarray, next_state: np.ndarray, step_reward: np.ndarray, reward: np.ndarray,
                 s0: int) -> tuple[float, np.ndarray]:
    """``(J(θ), ∇_θ J(θ))`` by forward occupancy × backward values (module docstring, step 2)."""
    T, S, _ = logp.shape
    pi = np.exp(logp)
    d = _forward(pi, next_state, s0)
    Vv = np.empty((T + 1, S))
    Q = np.empty(logp.shape)
    Vv[T] = reward
    for t in range(T - 1, -1, -1):
        Q[t] = step_reward[t] + Vv[t + 1][next_state[t]]
        Vv[t] = (pi[t] * Q[t]).sum(axis=1)
    grad = d[:-1, :, None] * pi * (Q - Vv[:-1, :, None])
    return float(Vv[0, s0]), grad


def chi2(logp: np.ndarray, logq: np.ndarray, next_state: np.ndarray, s0: int) -> float:
    """``χ²(π‖μ) = Σ_τ π(τ)²/μ(τ) − 1`` by the forward DP with step weights ``π²/μ`` (``ρ²`` factorises over
    steps); not clipped at 0, like the kernel's."""
    return float(_forward(np.exp(2.0 * logp - logq), next_state, s0)[-1].sum() - 1.0)


def sample(logq: np.ndarray, next_state: np.ndarray, s0: int, u: np.ndarray):
    """Trajectories from ``μ = exp(logq)`` by inverse CDF, vectorised over the ``N`` rows of ``u (N, T)``:
    ``a_t = #{b : F(b|s_t) ≤ u_t}`` with ``F`` the cumulative ``μ(·|s_t)``. Returns ``(states (N,T),
    actions (N,T), final states (N,))``; ``states[:, t]`` is the state in which ``a_t`` is chosen."""
    N, T = u.shape
    V = logq.shape[2]
    cdf = np.cumsum(np.exp(logq), axis=-1)
    states = np.empty((N, T), dtype=np.int64)
    actions = np.empty((N, T), dtype=np.int64)
    s = np.full(N, s0, dtype=np.int64)
    for t in range(T):
        states[:, t] = s
        # the CDF may end a rounding error below 1: a uniform above it takes the last token
        a = np.minimum((cdf[t, s] <= u[:, t, None]).sum(axis=1), V - 1)
        actions[:, t] = a
        s = next_state[t, s, a]
    return states, actions, s


def score_sum(logp: np.ndarray, states: np.ndarray, actions: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``Σ_n c_n s_θ(τ_n)`` with ``s_θ(τ) = Σ_t (e_{a_t} − π_θ(·|s_t))`` on row ``(t, s_t)``; ``c`` per trajectory
    ``(N,)`` or per token ``(N, T)`` (then ``Σ_{n,t} c_{n,t} (e_{a_t} − π_θ(·|s_t))``).

    Two scatters: ``E[t,s,a] = Σ_n c_n 1{s_{n,t}=s, a_{n,t}=a}`` and ``M[t,s] = Σ_n c_n 1{s_{n,t}=s}``,
    then ``E − M·π`` (``np.bincount`` on flat indices: the same sum as ``np.add.at``, faster)."""
    T, S, V = logp.shape
    N = states.shape[0]
    cc = np.broadcast_to(c[:, None] if c.ndim == 1 else c, (N, T)).ravel()
    row = (np.arange(T)[None, :] * S + states).ravel()
    E = np.bincount(row * V + actions.ravel(), weights=cc, minlength=T * S * V).reshape(T, S, V)
    M = np.bincount(row, weights=cc, minlength=T * S).reshape(T, S)
    return E - M[:, :, None] * np.exp(logp)


def negative_part(coef: np.ndarray, A: np.ndarray, tok_ell: np.ndarray) -> np.ndarray:
    """Per-token coefficients ``(N, T)`` of ``ĝ``'s negative part: ``c_n`` on the tokens of negative-advantage
    trajectories with ``log π − log μ < 0``, else 0."""
    return np.where((A[:, None] < 0.0) & (tok_ell < 0.0), coef[:, None], 0.0)


def advantages(R: np.ndarray, adv_norm: bool = False) -> np.ndarray:
    """Group-centred advantages ``A_n = R_n − R̄`` per row (group) of ``R (n_prompts, G)``; with ``adv_norm``
    GRPO's ``(R_n − R̄)/(std(R) + 1e-6)`` (population std)."""
    A = R - R.mean(axis=1, keepdims=True)
    if adv_norm:
        A = A / (np.sqrt((A * A).mean(axis=1, keepdims=True)) + 1e-6)
    return A


def scatter_plan(next_state: np.ndarray) -> tuple:
    """``(order, src, starts, dest)``: per step ``t``, the edges ``(s, a)`` (flat index ``s·V + a``) sorted by
    destination, ``order[t]``, their source states ``src[t]``, and the runs beginning at ``starts[t]`` that
    all lead to state ``dest[t][i]``. A scatter-max is then one ``np.maximum.reduceat`` per step (faster
    than ``np.maximum.at`` or a dense mask, measured)."""
    T, S, V = next_state.shape
    order, src, starts, dest = [], [], [], []
    for t in range(T):
        dst = next_state[t].ravel()
        o = np.argsort(dst, kind="stable")
        sd = dst[o]
        st = np.flatnonzero(np.r_[True, sd[1:] != sd[:-1]])
        order.append(t * S * V + o)
        src.append(o // V)
        starts.append(st)
        dest.append(sd[st])
    return np.concatenate(order), src, starts, dest


def logratio_max(logp: np.ndarray, logq: np.ndarray, next_state: np.ndarray, s0: int, plan: list | None = None) -> float:
    """``max_{τ: μ(τ)>0} |log π(τ) − log μ(τ)|`` by a forward max-plus DP over ``(t, s)``.

    With ``x = logp − logq``, ``hi_{t+1}(s') = max_{s,a→s'} hi_t(s) + x_t(s,a)`` and the same for
    ``−lo`` with ``−x`` (the smallest sum), from ``hi_0 = lo_0 = 0`` at ``s0``; the result is
    ``max_s max(hi_T(s), −lo_T(s))``. Actions with ``μ = 0`` (``logq = −inf``) are skipped. ``plan`` is
    :func:`scatter_plan` of ``next_state`` (computed if not given)."""
    T, S, V = logp.shape
    plan = scatter_plan(next_state) if plan is None else plan
    support = np.isfinite(logq)
    x = logp - logq
    if np.isnan(x[support]).any():
        return math.nan
    x2 = np.stack([x, -x]).reshape(2, T * S * V)
    if not support.all():
        x2[:, ~support.ravel()] = -np.inf
    order, src, starts, dest = plan
    x2 = x2[:, order].reshape(2, T, S * V)  # every step's edges in destination order, one gather
    # row 0 carries hi with +x, row 1 carries −lo with −x: both are max-plus recursions
    h = np.full((2, S), -np.inf)
    h[:, s0] = 0.0
    for t in range(T):
        vals = h[:, src[t]] + x2[:, t]
        h = np.full((2, S), -np.inf)
        h[:, dest[t]] = np.maximum.reduceat(vals, starts[t], axis=1)
    reached = np.isfinite(h[0])
    return float(max(0.0, h[:, reached].max()))


def train(config, mdp) -> RefResult:
    """One run of the learner (module docstring) for a :class:`simulate.training.TrainConfig` on ``mdp``
    (a :class:`simulate.protocol.instances.TrainingInstance` or a :class:`simulate.instances.TabularMDP`).

    ``config.delays()`` and ``config.theta0`` give ``d_k`` and ``w_0`` exactly as for the kernel; the
    trajectories come from ``numpy.random.default_rng(config.seed)``."""
    if config.estimator not in est.TRAJECTORY_ESTIMATORS:
        raise ValueError(f"the reference learner covers trajectory-level estimators only, got {config.estimator!r}")
    est.get(config.estimator, config.eps)  # validates name and ε
    next_state = np.asarray(mdp.next_state, dtype=np.int64)
    reward = np.asarray(mdp.reward, dtype=np.float64)
    T, S, V = next_state.shape
    s0 = int(mdp.s0)
    step_reward = getattr(mdp, "step_reward", None)
    step_reward = np.zeros((T, S, V)) if step_reward is None else np.asarray(step_reward, dtype=np.float64)
    phi = getattr(mdp, "features", None)
    bernoulli = bool(getattr(mdp, "bernoulli", False))
    P = phi.shape[1] if phi is not None else T * S * V
    G, n_prompts = int(config.G), int(config.n_prompts)
    N = G * n_prompts
    K = int(config.steps)
    delays = config.delays()
    par = config.theta0((P,)).astype(np.float64)
    rng = np.random.default_rng(config.seed)
    logits = (lambda w: (phi @ w).reshape(T, S, V)) if phi is not None else (lambda w: w.reshape(T, S, V).copy())
    t_idx = np.arange(T)[None, :]
    plan = scatter_plan(next_state)

    J = np.full(K + 1, np.nan)
    gn2 = np.full(K + 1, np.nan)
    c2, clip, ess, gh2, zero, dpar, lrmax, gpar, gdot, gneg = (np.full(K, np.nan) for _ in range(10))
    m1 = np.zeros(P)
    m2 = np.zeros(P)
    hist: dict[int, tuple] = {}  # (log π_{θ_j}, w_j) for the j a later step may still use as μ
    B = int(delays.max()) + 1 if K else 1
    theta = logits(par)
    theta_out = theta.copy()
    J0 = math.nan

    def done(k):
        return RefResult(J, gn2, c2, clip, ess, gh2, zero, dpar, lrmax, gpar, gdot, gneg, delays, k, theta_out)

    with np.errstate(all="ignore"):  # overflow is detected below and reported as divergence, as in the kernel
        for k in range(K + 1):
            if not np.all(np.abs(theta) <= config.theta_max):  # also catches NaN
                return done(k)
            logp = log_softmax(theta)
            Jk, grad = exact_J_grad(logp, next_state, step_reward, reward, s0)
            gw = phi.T @ grad.ravel() if phi is not None else grad.ravel()
            J[k], gn2[k] = Jk, gw @ gw
            gJ = gw
            theta_out = theta.copy()
            if k == 0:
                J0 = Jk
            elif not math.isfinite(Jk) or Jk < config.collapse_frac * J0:
                return done(k)
            if k == K:
                break
            hist[k] = (logp, par)
            hist.pop(k - B, None)
            logq, par_mu = hist[k - int(delays[k])]  # μ_k = π_{θ_{k−d_k}}
            c2[k] = chi2(logp, logq, next_state, s0)
            dpar[k] = np.linalg.norm(par - par_mu)
            lrmax[k] = logratio_max(logp, logq, next_state, s0, plan)

            u = rng.random((N, T))
            ub = rng.random(N) if bernoulli else None
            states, actions, final = sample(logq, next_state, s0, u)
            ret = step_reward[t_idx, states, actions].sum(axis=1) + reward[final]
            if bernoulli:  # a verifier that pays 1 with probability E R(τ)
                ret = (ub < ret).astype(np.float64)
            A = advantages(ret.reshape(n_prompts, G), config.adv_norm)
            tok_ell = logp[t_idx, states, actions] - logq[t_idx, states, actions]
            ell = tok_ell.sum(axis=1).reshape(n_prompts, G)
            logw = est_reference.log_weights(config.estimator, ell, config.eps)  # the NumPy weight map, per group
            w = np.exp(logw)
            clip[k] = np.mean(logw < ell - 1e-9) if config.estimator in _CUTTING else np.nan
            sw, sw2 = w.sum(axis=1), (w * w).sum(axis=1)
            ess[k] = np.mean(np.where(sw2 > 0, sw * sw / np.where(sw2 > 0, sw2, 1.0), 0.0))
            zero[k] = float(np.all(A == 0.0))
            # a zero-advantage trajectory adds nothing, even where its weight overflowed
            coef = np.where(A != 0.0, A * w / N, 0.0).ravel()
            ghat = score_sum(logp, states, actions, coef)
            gh2[k] = float((ghat * ghat).sum())
            if not math.isfinite(gh2[k]):
                return done(k)
            g = phi.T @ ghat.ravel() if phi is not None else ghat.ravel()
            gpar[k] = g @ g
            # ascent rates: ĝ and its negative-advantage, π < μ part projected on ∇J (0 where ∇J = 0)
            neg = score_sum(logp, states, actions, negative_part(coef, A.ravel(), tok_ell))
            gn = math.sqrt(gn2[k])
            negw = phi.T @ neg.ravel() if phi is not None else neg.ravel()
            gdot[k] = g @ gJ / gn if gn > 0.0 else 0.0
            gneg[k] = negw @ gJ / gn if gn > 0.0 else 0.0
            if config.optimizer == "sga":
                par = par + config.eta * g
            else:
                m1 = config.beta1 * m1 + (1.0 - config.beta1) * g
                m2 = config.beta2 * m2 + (1.0 - config.beta2) * g * g
                bc1, bc2 = 1.0 - config.beta1 ** (k + 1), 1.0 - config.beta2 ** (k + 1)
                par = par + config.eta * (m1 / bc1) / (np.sqrt(m2 / bc2) + config.adam_eps)
            theta = logits(par)
    return done(None)


__all__ = ["RefResult", "log_softmax", "exact_J_grad", "chi2", "logratio_max", "scatter_plan", "sample", "advantages", "negative_part", "score_sum", "train"]
