"""Several start states ("prompts") in one learner (issue 33): the exact diagnostics of a policy whose
objective is the average over contexts, ``J(θ) = (1/C) Σ_c J_c(θ)`` with ``J_c`` the return from start ``c``.

Each group of a learner step is sampled from one context (as an LM's group shares one prompt); group ``g`` of
step ``k`` uses ``starts[(k·n_prompts + g) mod C]``, so a step with ``n_prompts`` groups sees that many distinct
contexts (when ``n_prompts ≤ C``) and no random number is spent on the choice (a single start reproduces the
one-prompt learner bit for bit: the functions below call the one-start kernels then).

Why one pass suffices: the DPs are linear in the initial state law, so starting them from the uniform law over
``starts`` (``d_0(s_c) = 1/C``) gives the average over contexts directly — ``J = Σ_s d_0(s) V_0(s)``,
``∂J/∂θ[t,s,a] = d_t(s) π(a|s)(Q_t(s,a) − V_t(s))`` with the averaged occupancy, and ``χ²(π‖μ) = (1/C) Σ_c χ²_c``
(the context law is the same under π and μ) — at the cost of one context, not ``C``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from simulate.instances import chi2_nb, exact_J_grad_steps_nb


@njit(cache=True)
def context_of_nb(starts, k, n_prompts, g):
    """Start state of group ``g`` at learner step ``k``: ``starts[(k·n_prompts + g) mod C]``."""
    return starts[(k * n_prompts + g) % starts.shape[0]]


@njit(cache=True)
def J_grad_starts_nb(logp, next_state, step_reward, reward, starts, grad_out, tmp):
    """``J = (1/C) Σ_c J_c`` (returned) and its exact gradient (into ``grad_out``) by one forward–backward DP
    from the uniform law over ``starts`` (module docstring). One start: exactly
    :func:`simulate.instances.exact_J_grad_steps_nb`. ``tmp`` is unused scratch kept for the signature."""
    C = starts.shape[0]
    if C == 1:
        return exact_J_grad_steps_nb(logp, next_state, step_reward, reward, starts[0], grad_out)
    T, S, V = logp.shape
    p = np.zeros((T + 1, S))
    for c in range(C):
        p[0, starts[c]] += 1.0 / C
    for t in range(T):
        for s in range(S):
            if p[t, s] > 0.0:
                for a in range(V):
                    p[t + 1, next_state[t, s, a]] += p[t, s] * math.exp(logp[t, s, a])
    val = np.zeros((T + 1, S))
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
            if p[t, s] == 0.0:
                for a in range(V):
                    grad_out[t, s, a] = 0.0
                continue
            for a in range(V):
                q = step_reward[t, s, a] + val[t + 1, next_state[t, s, a]]
                grad_out[t, s, a] = p[t, s] * math.exp(logp[t, s, a]) * (q - val[t, s])
    J = 0.0
    for c in range(C):
        J += val[0, starts[c]]
    return J / C


@njit(cache=True)
def chi2_starts_nb(logp, logq, next_state, starts):
    """``χ²(π‖μ)`` of the context mixture, ``(1/C) Σ_c χ²_c``, by one forward DP from the uniform law over
    ``starts`` (``f_{t+1}(s') = Σ f_t(s) π²/μ``, result ``Σ_s f_T(s) − 1``); one start: :func:`chi2_nb`."""
    C = starts.shape[0]
    if C == 1:
        return chi2_nb(logp, logq, next_state, starts[0])
    T, S, V = logp.shape
    f = np.zeros(S)
    for c in range(C):
        f[starts[c]] += 1.0 / C
    for t in range(T):
        g = np.zeros(S)
        for s in range(S):
            if f[s] != 0.0:
                for a in range(V):
                    g[next_state[t, s, a]] += f[s] * math.exp(2.0 * logp[t, s, a] - logq[t, s, a])
        f = g
    return f.sum() - 1.0
