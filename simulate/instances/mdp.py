"""The tabular token MDP type and its constructors: bandit, token MDP, random logits (docs/THEORY.md §1).

See :mod:`simulate.instances` for the model; exact quantities are in :mod:`simulate.instances.dp`,
sampling kernels in :mod:`simulate.instances.sampling`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from asyncgrpo.validation import check_finite, check_index, check_index_array, check_real_array, is_integral

#: Largest ``V^T`` for which :func:`simulate.instances.dp.enumerate_paths` (and enumeration-based exact values) run.
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
        # Copies, not views: the caller's arrays stay writable and the instance never follows them.
        shape = np.shape(self.next_state)
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"next_state must have shape (T, S, V) with T, S, V >= 1, got {shape}")
        S = shape[1]
        ns = check_index_array(self.next_state, "next_state", S, "state indices")
        r = np.array(check_real_array(self.reward, "reward"), dtype=np.float64, copy=True)
        if r.shape != (S,):
            raise ValueError(f"reward must have shape (S,) = ({S},), got {r.shape}")
        check_finite(r, "reward")
        if r.min() < 0.0 or r.max() > 1.0:
            raise ValueError("reward must lie in [0, 1] (THEORY §1: R(τ) ∈ [0,1])")
        s0 = check_index(self.s0, "s0", S, "state index")
        ns.setflags(write=False)
        r.setflags(write=False)
        object.__setattr__(self, "next_state", ns)
        object.__setattr__(self, "reward", r)
        object.__setattr__(self, "s0", s0)

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
    if not (is_integral(K) and K >= 2):
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
      default ``k = min(⌈T/V⌉ + 1, T)``); ``reward="sum_mod"``: ``R = 1{Σ_t a_t ≡ 0 (mod m)}``
      (statistic: the running sum mod ``m``).

    When feature and statistic coincide (``count`` with ``count_ge``) the state is the count alone.
    ``seed`` is unused (the instance is deterministic) and kept for a uniform constructor signature.
    """
    for val, nm, lo in ((V, "V", 2), (T, "T", 1), (m, "m", 2)):
        if not (is_integral(val) and val >= lo):
            raise ValueError(f"{nm} must be an integer >= {lo}, got {val!r}")
    V, T, m = int(V), int(T), int(m)
    if state not in ("count", "prev"):
        raise ValueError(f"state must be 'count' or 'prev', got {state!r}")
    if reward not in ("count_ge", "sum_mod"):
        raise ValueError(f"reward must be 'count_ge' or 'sum_mod', got {reward!r}")
    if reward == "sum_mod":
        k = 1  # unused: sum_mod's statistic is the running sum mod m
    elif k is None:
        k = min(-(-T // V) + 1, T)  # ⌈T/V⌉ + 1 exceeds T only at T = 1
    if not ((is_integral(k) and k >= 1) and k <= T):
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
