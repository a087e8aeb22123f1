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
clip/cap fraction, the weight ESS ``(Σ_i w_i)²/Σ_i w_i²`` (mean over groups) and ``‖ĝ_k‖²``; for C6
(:mod:`simulate.training.overlap`): ``‖w_k − w_{k−d_k}‖`` in the trained parameter, the exact
``max_τ |log ρ(τ)|`` over μ_k's support (max-plus DP) and ``‖ĝ_k‖²`` in that parameter.

Divergence never raises: a run is marked diverged at the first step ``k`` where ``θ_k`` or ``ĝ_k``
is not finite, ``max|θ_k| > theta_max`` (logit overflow), or ``J(θ_k) < collapse_frac · J(θ_0)``
(objective collapse); later entries of the curves are NaN.

Layout: :class:`TrainConfig` (frozen, one docstring per field) → :func:`run_training` →
:class:`TrainResult`. :func:`run_many` runs a list of configs sharing one instance in one parallel
Numba kernel (``prange`` over runs, one seed per run, seeded inside the kernel), so results do not
depend on the batch they run in. The pure kernel :func:`_train_one_nb` owns the whole loop, as a loop of named phases
(:mod:`simulate.training.phases`).

Layout: :mod:`~simulate.training.config` (instance spec, config, result), :mod:`~simulate.training.kernel`
(the Numba learner), :mod:`~simulate.training.run` (batching); every public name is re-exported here.
"""
from __future__ import annotations

from simulate.instances import chi2_nb, exact_J_grad, exact_J_grad_nb, log_softmax_nb
from simulate.training.config import (ALL_ESTIMATORS, OPTIMIZERS, InstanceSpec, TrainConfig, TrainResult, count_frac_mdp,
                                      optimal_J)
from simulate.training.run import run_many, run_training

__all__ = ["ALL_ESTIMATORS", "OPTIMIZERS", "InstanceSpec", "count_frac_mdp", "optimal_J", "TrainConfig", "TrainResult",
           "run_training", "run_many", "exact_J_grad", "exact_J_grad_nb", "chi2_nb", "log_softmax_nb"]
