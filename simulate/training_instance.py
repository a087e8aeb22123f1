"""The training instance as a type: a deterministic tabular MDP with its exact ``J``, ``∇J``, ``J*`` and ``J_class``
(docs/protocol.md). Every instance a protocol runs on is one of these, whoever builds it: the registry of named
problems (:mod:`simulate.protocol.instances`), the ladder's prompt–answer rungs (:mod:`simulate.bridge.rungs`), the
drawn families (:mod:`simulate.protocol.families`). The type lives below both packages so the builders can
import it while the registry imports the builders (no circle, issue 60).

A :class:`TrainingInstance` has

- a return ``R(τ) = Σ_t r_t(s_t, a_t) + R_T(s_T) ∈ [0, 1]`` (per-step and terminal parts),
- optionally **Bernoulli rewards**: the learner sees ``R ~ Bernoulli(E R(τ))`` (a noisy verifier),
  while ``J(θ)`` stays the exact expected return,
- optionally a **feature (log-linear) policy** ``π_w(a|s,t) ∝ exp(Σ_j Φ[(t,s,a), j] w_j)``: the
  logits are ``θ = Φw``, so one update moves every state that shares features, as in a language
  model. Its score is ``Φᵀ(e_{a_t} − π(·|s_t))`` per token and ``∇_w J = Φᵀ ∇_θ J`` (chain rule);
  ``J`` and ``∇J`` stay exact by dynamic programming over the state.

``J*`` is the largest return of any path (a DP over the state), the optimum of the tabular class;
for a feature policy it is only an upper bound on ``sup_w J``. ``J_class`` is the optimum of the
instance's own policy class: ``J*`` for a tabular policy (approached as the logits grow), and for a
feature policy the best ``J(w)`` that exact-gradient L-BFGS reaches from fixed starts
(:func:`class_optimum`) — a property of the instance, computed before any learner runs. Protocol v1/v2
normalise by ``J*``; v3 by ``J_class`` (a run that converges inside the class is then not "locked in").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from asyncgrpo.validation import check_index_array
from simulate import instances as tab
from simulate.instances.products import phi_t_g, phi_w
from simulate.training.contexts import J_grad_starts_nb

__all__ = ["TrainingInstance", "exact_J_grad_w", "class_optimum", "REPORT_GROUPS", "CLASS_STARTS"]


#: The answer-table rows an instance may report to (:attr:`TrainingInstance.report_group`).
REPORT_GROUPS = ("tabular", "toy-lm-faithful", "lm-like")


@dataclass(frozen=True, eq=False)
class TrainingInstance:
    """One named training problem (module docstring). Identity is the only equality (holds arrays)."""

    name: str
    """Registry id, e.g. ``"count-frac"``."""
    description: str
    """One sentence for tables and the report."""
    next_state: np.ndarray
    """``ndarray(int64, (T, S, V))``: ``s_{t+1} = next_state[t, s_t, a_t]``."""
    reward: np.ndarray
    """``ndarray(float64, (S,))``: terminal part ``R_T(s_T)``."""
    s0: int
    """Initial state."""
    step_reward: np.ndarray | None = None
    """``ndarray(float64, (T, S, V))`` per-step part ``r_t(s, a)``, or ``None``."""
    features: np.ndarray | None = None
    """``ndarray(float64, (T·S·V, p))`` feature matrix ``Φ`` of a log-linear policy, or ``None`` (tabular)."""
    bernoulli: bool = False
    """The learner sees ``R ~ Bernoulli(E R(τ))`` instead of ``R(τ)``."""
    starts: np.ndarray | None = None
    """``ndarray(int64, (C,))`` start states (contexts, "prompts"; ``starts[0] == s0``): ``J = (1/C) Σ_c J_c``
    and each learner group samples one context (:mod:`simulate.training.contexts`); ``None``: ``s0`` only."""
    w_init: np.ndarray | None = None
    """``ndarray(float64, (n_params,))`` warm-start parameters (e.g. a supervised fit): the learner starts at
    ``w_init`` (plus the config's ``init_scale`` noise); ``None``: ``w = 0``, the uniform policy."""
    report_group: str = "tabular"
    """The row of the report's answer table the instance's results go to: ``"tabular"`` (toy MDPs) or
    ``"toy-lm-faithful"`` (the LM-faithful toy, issue 33) or ``"lm-like"`` (protocol v6's LM-like family,
    :mod:`simulate.protocol.families`), so an LM-like instance never widens the toy range."""
    J_star: float = field(init=False, default=math.nan)
    """Largest return of any path (computed)."""

    def __post_init__(self):
        if not isinstance(self.bernoulli, (bool, np.bool_)):
            raise ValueError(f"bernoulli must be True or False, got {self.bernoulli!r}")
        if self.report_group not in REPORT_GROUPS:
            raise ValueError(f"report_group must be one of {REPORT_GROUPS}, got {self.report_group!r}")
        mdp = tab.TabularMDP(self.name, self.next_state, self.reward, self.s0)  # validates the shapes
        object.__setattr__(self, "next_state", mdp.next_state)
        object.__setattr__(self, "reward", mdp.reward)
        object.__setattr__(self, "s0", mdp.s0)
        shape = mdp.theta_shape
        if self.step_reward is not None:
            r = np.ascontiguousarray(self.step_reward, dtype=np.float64)
            if r.shape != shape:
                raise ValueError(f"step_reward must have shape (T, S, V) = {shape}, got {r.shape}")
            if not np.all(np.isfinite(r)) or r.min() < 0:
                raise ValueError("step_reward must be finite and >= 0")
            r.setflags(write=False)
            object.__setattr__(self, "step_reward", r)
        if self.features is not None:
            phi = np.ascontiguousarray(self.features, dtype=np.float64)
            if phi.ndim != 2 or phi.shape[0] != mdp.n_params or phi.shape[1] < 1:
                raise ValueError(f"features must have shape (T·S·V, p) = ({mdp.n_params}, p >= 1), got {phi.shape}")
            if not np.all(np.isfinite(phi)):
                raise ValueError("features must be finite")
            phi.setflags(write=False)
            object.__setattr__(self, "features", phi)
        if self.starts is not None:
            # integers only (2 or 2.0): a state 1.7 is an error, never state 1
            st = check_index_array(np.ravel(self.starts), "starts", mdp.S, "state indices").ravel()
            if st.size < 1 or st[0] != mdp.s0:
                raise ValueError(f"starts must be state indices in [0, {mdp.S}) with starts[0] == s0 = {mdp.s0}, "
                                 f"got {self.starts!r}")
            st.setflags(write=False)
            object.__setattr__(self, "starts", st)
        if self.w_init is not None:
            w = np.array(self.w_init, dtype=np.float64)
            if w.shape != (self.n_params,) or not np.all(np.isfinite(w)):
                raise ValueError(f"w_init must be a finite array of shape (n_params,) = ({self.n_params},), "
                                 f"got shape {w.shape}")
            w.setflags(write=False)
            object.__setattr__(self, "w_init", w)
        J_star = _best_return(self)
        if not 0.0 <= J_star <= 1.0 + 1e-12:
            raise ValueError(f"the largest return must lie in [0, 1] (docs/THEORY.md §1), got {J_star}")
        object.__setattr__(self, "J_star", float(J_star))

    # the TabularMDP-like surface the training simulator reads
    @property
    def T(self) -> int:
        """Horizon."""
        return self.next_state.shape[0]

    @property
    def S(self) -> int:
        """Number of states."""
        return self.next_state.shape[1]

    @property
    def V(self) -> int:
        """Vocabulary size."""
        return self.next_state.shape[2]

    @property
    def theta_shape(self) -> tuple[int, int, int]:
        """Shape ``(T, S, V)`` of the logits."""
        return (self.T, self.S, self.V)

    @property
    def n_params(self) -> int:
        """Number of trainable parameters: ``p`` for a feature policy, ``T·S·V`` for a tabular one."""
        return self.features.shape[1] if self.features is not None else self.T * self.S * self.V

    def build(self) -> "TrainingInstance":
        """Itself (the training simulator calls ``config.instance.build()``)."""
        return self

    def logits(self, w) -> np.ndarray:
        """``θ = Φw`` (feature policy) or ``w`` reshaped to ``(T, S, V)`` (tabular)."""
        w = np.asarray(w, dtype=np.float64)
        if w.shape != (self.n_params,):
            raise ValueError(f"w must have shape (n_params,) = ({self.n_params},), got {w.shape}")
        # a fixed summation order, not BLAS: θ is the same on every CPU (simulate.instances.products)
        return (phi_w(self.features, w) if self.features is not None else w).reshape(self.theta_shape)

    def exact_J_grad(self, w) -> tuple[float, np.ndarray]:
        """``(J(w), ∇_w J(w))`` exactly (:func:`exact_J_grad_w`)."""
        return exact_J_grad_w(self, w)

    @property
    def J_class(self) -> float:
        """``sup_w J(π_w)`` over the instance's policy class: ``J*`` for a tabular policy, else
        :func:`class_optimum` (computed once per instance object)."""
        if self.features is None:
            return self.J_star
        cached = self.__dict__.get("_J_class")
        if cached is None:
            cached = class_optimum(self)
            object.__setattr__(self, "_J_class", cached)
        return cached

    @property
    def label(self) -> str:
        """The registry id (tables use it)."""
        return self.name


def exact_J_grad_w(inst: TrainingInstance, w) -> tuple[float, np.ndarray]:
    """Exact ``J(w)`` and ``∇_w J = Φᵀ ∇_θ J`` by forward–backward DP over the state
    (``simulate.instances.exact_J_grad_steps_nb``); ``w`` has shape ``(n_params,)``."""
    theta = inst.logits(w)
    logp = tab.log_softmax_nb(theta, np.empty_like(theta))
    grad = np.empty_like(theta)
    step = np.zeros(theta.shape) if inst.step_reward is None else inst.step_reward
    if inst.starts is None:
        J = tab.exact_J_grad_steps_nb(logp, inst.next_state, step, inst.reward, inst.s0, grad)
    else:  # the average over contexts, J = (1/C) Σ_c J_c
        J = J_grad_starts_nb(logp, inst.next_state, step, inst.reward, inst.starts, grad, np.empty_like(theta))
    g = phi_t_g(inst.features, grad) if inst.features is not None else grad.ravel()
    return float(J), g


#: Starts of :func:`class_optimum`: ``w = 0`` and this many ``N(0, 1)`` draws from a fixed seed.
CLASS_STARTS = 8


def class_optimum(inst: TrainingInstance, starts: int = CLASS_STARTS, seed: int = 0, maxiter: int = 3000) -> float:
    """``Ĵ_class = max_j J(w_j)`` where ``w_j`` is L-BFGS ascent on the exact ``J(w)`` (gradient
    ``∇_w J = Φᵀ∇_θ J`` by DP) from ``w = 0``, ``starts`` Gaussian starts (``seed`` fixed) and the instance's
    warm start ``w_init`` when it has one (so ``Ĵ_class ≥ J(w_init)``: the learner's own start is in the class). A lower
    bound on ``sup_w J`` (J is not concave in w) and at most ``J*``; a learner's J above it is possible
    and is reported as a normalised value above 1, not clipped. Deterministic on one machine."""
    from scipy.optimize import minimize

    if inst.features is None:
        return inst.J_star
    p = inst.n_params
    rng = np.random.default_rng(seed)
    inits = [np.zeros(p)] + [rng.standard_normal(p) for _ in range(int(starts))]
    if inst.w_init is not None:  # from 0 and random starts ascent can stop far below a supervised warm start
        inits.append(np.array(inst.w_init, dtype=np.float64))

    def neg(w):
        J, g = exact_J_grad_w(inst, w)
        return -J, -g

    best = -math.inf
    for w0 in inits:
        r = minimize(neg, w0, jac=True, method="L-BFGS-B", options=dict(maxiter=int(maxiter), gtol=1e-12, ftol=1e-15))
        if math.isfinite(r.fun):
            best = max(best, -float(r.fun))
    if not math.isfinite(best):
        raise RuntimeError(f"class_optimum: no finite J on instance {inst.name!r}")
    return float(min(best, inst.J_star))


def _best_return(inst: TrainingInstance) -> float:
    """``max_τ R(τ)`` by a backward max-DP: ``B_T = R_T``, ``B_t(s) = max_a r_t(s,a) + B_{t+1}(next)``."""
    best = np.asarray(inst.reward, dtype=np.float64).copy()
    step = np.zeros(inst.theta_shape) if inst.step_reward is None else inst.step_reward
    for t in range(inst.T - 1, -1, -1):
        best = np.max(step[t] + best[inst.next_state[t]], axis=1)
    return float(best[inst.s0] if inst.starts is None else np.mean(best[inst.starts]))
