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

Layout: :mod:`~simulate.instances.mdp` (the type and constructors), :mod:`~simulate.instances.dp`
(exact quantities), :mod:`~simulate.instances.sampling` (sampling kernels); every public name is
re-exported here.
"""
from __future__ import annotations

from simulate.instances.dp import (backward_values, state_distribution, 
    chi2,
    chi2_nb,
    enumerate_paths,
    exact_grad_J,
    exact_J,
    exact_J_grad,
    exact_J_grad_nb,
    exact_J_grad_steps_nb,
    exp_nb,
    expected_score,
    J_grad_law_nb,
    chi2_law_nb,
    chi2_terms_row_nb,
    logratio_max_nb,
    logratio_max_starts_nb,
    start_law_nb,
    log_policy,
    log_softmax_nb,
    log_softmax_row_nb,
    ratio_moment,
    ratio_moments,
    stale_pair,
)
from simulate.instances.mdp import (
    MAX_ENUM_PATHS,
    TabularMDP,
    bandit,
    random_theta,
    token_mdp,
)
from simulate.instances.sampling import (
    add_score_nb,
    add_score_pi_nb,
    alias_row_nb,
    alias_tables,
    rng_seed_nb,
    rng_uniform_nb,
    sample_groups_nb,
    sample_paths_nb,
    sample_token_nb,
    traj_log_prob_nb,
)

__all__ = [
    "state_distribution",
    "backward_values",
    "expected_score",
    "MAX_ENUM_PATHS",
    "TabularMDP",
    "bandit",
    "token_mdp",
    "log_policy",
    "log_softmax_nb",
    "log_softmax_row_nb",
    "exact_J_grad_nb",
    "exact_J_grad_steps_nb",
    "chi2_nb",
    "start_law_nb",
    "J_grad_law_nb",
    "chi2_law_nb",
    "chi2_terms_row_nb",
    "exp_nb",
    "logratio_max_nb",
    "logratio_max_starts_nb",
    "alias_row_nb",
    "add_score_pi_nb",
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
