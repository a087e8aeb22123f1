"""Several start states ("prompts") in one learner (issue 33): the exact diagnostics of a policy whose
objective is the average over contexts, ``J(θ) = (1/C) Σ_c J_c(θ)`` with ``J_c`` the return from start ``c``.

Each group of a learner step is sampled from one context (as an LM's group shares one prompt); group ``g`` of
step ``k`` uses ``starts[(k·n_prompts + g) mod C]``, so a step with ``n_prompts`` groups sees that many distinct
contexts (when ``n_prompts ≤ C``) and no random number is spent on the choice (a single start is the one-prompt
learner: ``d₀ = δ_{s0}`` exactly, the same DP kernel).

Why one pass suffices: the DPs are linear in the initial state law, so starting them from the uniform law over
``starts`` (``d_0(s_c) = 1/C``) gives the average over contexts directly — ``J = Σ_s d_0(s) V_0(s)``,
``∂J/∂θ[t,s,a] = d_t(s) π(a|s)(Q_t(s,a) − V_t(s))`` with the averaged occupancy, and ``χ²(π‖μ) = (1/C) Σ_c χ²_c``
(the context law is the same under π and μ) — at the cost of one context, not ``C``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from simulate.instances import J_grad_law_nb, chi2_law_nb, exp_nb, start_law_nb


@njit(cache=True)
def context_of_nb(starts, k, n_prompts, g):
    """Start state of group ``g`` at learner step ``k``: ``starts[(k·n_prompts + g) mod C]``."""
    return starts[(k * n_prompts + g) % starts.shape[0]]


@njit(cache=True)
def J_grad_starts_nb(logp, next_state, step_reward, reward, starts, grad_out, tmp):
    """``J = (1/C) Σ_c J_c`` (returned) and its exact gradient (into ``grad_out``) by one forward–backward DP
    from the uniform law over ``starts`` (module docstring; :func:`simulate.instances.J_grad_law_nb`, the one DP
    kernel, with ``d₀`` from :func:`simulate.instances.start_law_nb`). ``tmp`` is unused scratch kept for the
    signature."""
    T, S, V = logp.shape
    return J_grad_law_nb(exp_nb(logp), next_state, step_reward, reward, start_law_nb(starts, S), starts, grad_out,
                         np.empty((T + 1, S)), np.empty((T + 1, S)))


@njit(cache=True)
def chi2_starts_nb(logp, logq, next_state, starts):
    """``χ²(π‖μ)`` of the context mixture, ``(1/C) Σ_c χ²_c``, by one forward DP from the uniform law over
    ``starts`` (``f_{t+1}(s') = Σ f_t(s) π²/μ``, result ``Σ_s f_T(s) − 1``; :func:`simulate.instances.chi2_law_nb`)."""
    S = logp.shape[1]
    return chi2_law_nb(logp, logq, next_state, start_law_nb(starts, S), np.empty(S), np.empty(S))
