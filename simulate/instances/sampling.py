"""Sampling kernels: Walker/Vose alias tables, a xoshiro256+ uniform stream, paths, groups, scores.

One uniform ``u`` per token: ``j = ⌊uV⌋``, accept ``j`` if ``uV − j < prob[j]`` else take ``alias[j]``.
Uniforms come from Numba's ``np.random`` (:func:`sample_groups_nb`) or, in the Monte Carlo kernel,
from the faster xoshiro256+ stream :func:`rng_uniform_nb` seeded per chunk by :func:`rng_seed_nb`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit


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
            alias_row_nb(logp, t, s, prob, alias, scaled, small, large)
    return prob, alias


@njit(cache=True)
def alias_row_nb(logp, t, s, prob, alias, scaled, small, large):
    """Row ``(t, s)`` of :func:`alias_tables` into ``prob``/``alias`` (overwritten); ``scaled``, ``small``,
    ``large``: scratch ``(V,)``. A row depends on ``logp[t, s]`` only, so rows may be built lazily, on the first
    visit of ``(t, s)`` by a sample, with the same bits."""
    V = logp.shape[2]
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
        prob[t, s, a] = 1.0
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
    """``grad_out += Σ_i Σ_t c_{i,t} (e_{a_{i,t}} − π(·|s_{i,t}))`` on row ``(t, s_{i,t})``: per-token coefficients ``coef (n, T)``.

    A trajectory-level coefficient ``c_i`` (``ĝ = Σ_i c_i ∇log π(τ_i)``) is ``c_{i,t} = c_i`` for every ``t``;
    a zero coefficient adds nothing (its row is skipped, so a non-finite ``π`` there cannot leak in).
    """
    n, T = actions.shape
    V = logp.shape[2]
    for i in range(n):
        for t in range(T):
            c = coef[i, t]
            if c == 0.0:
                continue
            s = states[i, t]
            for b in range(V):
                grad_out[t, s, b] -= c * math.exp(logp[t, s, b])
            grad_out[t, s, actions[i, t]] += c
    return grad_out


@njit(cache=True)
def add_score_pi_nb(pi, states, actions, coef, grad_out):
    """:func:`add_score_nb` from ``π = exp(log π)`` already computed (the same bits, one ``exp`` fewer per use)."""
    n, T = actions.shape
    V = pi.shape[2]
    for i in range(n):
        for t in range(T):
            c = coef[i, t]
            if c == 0.0:
                continue
            s = states[i, t]
            for b in range(V):
                grad_out[t, s, b] -= c * pi[t, s, b]
            grad_out[t, s, actions[i, t]] += c
    return grad_out

__all__ = ["alias_tables", "alias_row_nb", "add_score_pi_nb", "rng_seed_nb", "rng_uniform_nb", "sample_token_nb", "sample_paths_nb", "sample_groups_nb", "traj_log_prob_nb", "add_score_nb"]
