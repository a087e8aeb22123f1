"""The learner as one Numba kernel: a loop of named phases (:mod:`simulate.training.phases`) — exact diagnostics,
sampling from the stale behaviour policy, advantages, weights or token coefficients, ĝ and the update
(:mod:`simulate.training`)."""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from asyncgrpo.estimators.kernels import estimator_flags_nb
from simulate.instances import logratio_max_nb  # re-exported: C6's exact max |log ρ| (simulate.training.overlap)
from simulate.training.phases import (Record, Workspace, advantages_nb, behaviour_nb, diagnose_nb, finite_logits_nb,
                                      logits_nb, make_workspace_nb, map_coefficients_nb, record_theta_nb, restore_nb,
                                      sample_nb, score_nb, update_nb, weights_nb)
from simulate.training.problem import Problem, make_problem_nb


#: The per-run settings, one record per run (:func:`simulate.training.run.run_records` fills it from the
#: ``TrainConfig`` attribute of the same name; ``opt`` is the index in ``OPTIMIZERS``). A new learner option
#: is one field here and one line where the kernel reads it, not a change to every signature.
RUN_DTYPE = np.dtype([
    ("code", np.int64), ("eps", np.float64), ("eps_low", np.float64), ("eps_high", np.float64),
    ("tau_m2", np.float64), ("G", np.int64), ("n_prompts", np.int64), ("eta", np.float64), ("seed", np.int64),
    ("opt", np.int64), ("beta1", np.float64), ("beta2", np.float64), ("adam_eps", np.float64),
    ("adv_norm", np.bool_), ("collapse_frac", np.float64), ("theta_max", np.float64), ("zero_tol", np.float64),
    ("diagnostics", np.bool_),
])
#: ``RUN_DTYPE['zero_tol']`` of a run whose ``TrainConfig.zero_tol`` is ``None`` (v1–v3's exact rule).
ZERO_TOL_OFF = -1.0


@njit(cache=True)
def _train_one_nb(pb, w0, run, delays, rec):
    """One run of the learner loop (module docstring of :mod:`simulate.training`); returns the divergence step or −1.

    ``pb`` is the instance (:data:`~simulate.training.problem.Problem`: group ``g`` of step ``k`` starts at
    ``starts[(k·n_prompts + g) mod C]`` and J is the average over the ``C`` starts, :mod:`simulate.training.contexts`;
    a feature policy has logits ``θ = Φw``, else ``w`` are the logits; with ``bernoulli`` the learner sees
    ``R ~ Bernoulli(E R(τ))``), ``w0`` (p,) the initial parameters, ``run`` one record of :data:`RUN_DTYPE`,
    ``delays`` int64 (K,) with ``d_k ≤ k``. ``rec`` (:data:`~simulate.training.phases.Record`, overwritten, NaN
    after divergence): ``J``, ``gn2`` (K+1,) ``J(θ_k)`` and ``‖∇_w J‖²``; per step (K,): ``chi2`` ``χ²(π_k‖μ_k)``,
    ``clip``, ``ess``, ``ghat`` ``‖ĝ_k‖²`` in logits, ``zero`` (1 where every group had equal rewards, so ĝ_k = 0);
    ``theta`` (T,S,V) the last finite logits; C6's overlap ``dpar = ‖w_k − w_{k−d_k}‖₂``, ``lrmax = max_{τ ∈ supp
    μ_k} |log π_{θ_k}(τ) − log μ_k(τ)|`` (exact, :func:`logratio_max_nb`), ``gpar = ‖ĝ_k‖²`` in ``w``; issue 33's
    ``gdot = ⟨ĝ_k, ∇J(θ_k)⟩/‖∇J(θ_k)‖`` in ``w`` and ``gneg``, the same projection of the part of ĝ_k from
    negative-advantage tokens with ``π_θ(a_t|s_t) < μ_k(a_t|s_t)``; ``dpar``, ``lrmax``, ``gdot``, ``gneg`` stay NaN
    unless ``run.diagnostics``. No diagnostic draws a random number or feeds
    back into the run. Randomness: ``np.random.seed(seed)`` here, one uniform per token (alias tables of μ_k) and
    one per trajectory when ``bernoulli``, so a run depends only on its arguments.
    """
    np.random.seed(run.seed)
    K = delays.shape[0]
    B = 1  # ring buffer of log π_{θ_j}, j = k−B+1..k: μ_k's log-probabilities are those computed at step k − d
    for k in range(K):
        B = max(B, delays[k] + 1)
    ws = make_workspace_nb(pb, w0, run.G * run.n_prompts, run.G, B)
    for arr in (rec.J, rec.gn2, rec.chi2, rec.clip, rec.ess, rec.ghat, rec.zero, rec.dpar, rec.lrmax, rec.gpar,
                rec.gdot, rec.gneg):
        arr[:] = np.nan
    logits_nb(pb, ws)
    record_theta_nb(pb, ws.theta, rec.theta)
    flags = estimator_flags_nb(run.code)  # the registry's attributes: no estimator code is named here
    J0 = 0.0
    for k in range(K + 1):
        # rec.theta is written where the run stops, not every step: θ_k, or θ_{k−1} = Φw_{k−1} remade if θ_k is
        # not finite (w_{k−1} is still in the ring buffer)
        if not finite_logits_nb(pb, ws.theta, run.theta_max, k):
            if k > 0:
                restore_nb(pb, ws, k - 1)
                record_theta_nb(pb, ws.theta, rec.theta)
            return k
        logp = ws.histlp[k % B]
        Jk, g2 = diagnose_nb(pb, ws, k)
        rec.J[k] = Jk
        rec.gn2[k] = g2
        if k == 0:
            J0 = Jk
        elif not math.isfinite(Jk) or Jk < run.collapse_frac * J0:
            record_theta_nb(pb, ws.theta, rec.theta)
            return k
        if k == K:
            break
        logq = ws.histlp[(k - delays[k]) % B]
        behaviour_nb(pb, ws, k, delays[k], logp, logq, rec, run.diagnostics)
        sample_nb(pb, ws, k, run.n_prompts, run.G, logp, logq)
        advantages_nb(ws, run.n_prompts, run.G, run.zero_tol, run.adv_norm)
        map_coefficients_nb(run, flags, ws.tok_ell, ws.mask, ws.adv, ws.ell, ws.coef, ws.logw)
        weights_nb(ws, run, flags, k, rec)
        rec.ghat[k] = score_nb(pb, ws, run.diagnostics)
        if not math.isfinite(rec.ghat[k]):
            record_theta_nb(pb, ws.theta, rec.theta)
            return k
        update_nb(pb, ws, run, k, g2, rec)
    record_theta_nb(pb, ws.theta, rec.theta)
    return -1


@njit(cache=True, parallel=True)
def _train_batch_nb(next_state, reward, step_reward, starts, phi, use_phi, bernoulli, share_rows, w0, runs, delays,
                    J_out, gn2_out, chi2_out, clip_out, ess_out, ghat_out, zero_out, theta_out, dpar_out, lrmax_out,
                    gpar_out, gdot_out, gneg_out, div_out):
    """:func:`_train_one_nb` for runs ``r = 0..R−1`` in parallel; ``runs`` is a :data:`RUN_DTYPE` array and
    per-run arrays carry a leading ``R`` axis. Inputs: ``next_state`` int64 (T,S,V), ``reward`` (S,) terminal
    ``R_T``, ``step_reward`` (T,S,V) per-step ``r_t``, ``starts`` int64 (C,), ``phi`` (T·S·V, p) features used
    when ``use_phi``, ``share_rows`` whether rows share their computed logits
    (:func:`~simulate.training.problem.row_maps_nb`); outputs as :data:`~simulate.training.phases.Record`'s fields,
    ``div_out`` the divergence step.

    Each run seeds Numba's (per-thread) generator itself, so its numbers do not depend on the
    thread or on the other runs of the batch.
    """
    pb = make_problem_nb(next_state, reward, step_reward, starts, phi, use_phi, bernoulli, share_rows)
    outs = (J_out, gn2_out, chi2_out, clip_out, ess_out, ghat_out, zero_out, theta_out, dpar_out, lrmax_out,
            gpar_out, gdot_out, gneg_out)
    # the prange body sees plain arrays only (a namedtuple crossing into Numba's parallel gufunc is not typed)
    arrays = (pb.d0, pb.phi, pb.phiT, pb.row_ptr, pb.row_col, pb.row_val, pb.col_ptr, pb.col_row, pb.col_val,
              pb.theta_rows, pb.theta_src, pb.lp_rows, pb.copy_rows, pb.grad_rows, pb.grad_blk, pb.blk_src, pb.par_idx)
    sparse = pb.sparse
    for r in prange(runs.shape[0]):
        div_out[r] = _run_nb(next_state, reward, step_reward, starts, use_phi, bernoulli, sparse, arrays, w0[r],
                             runs[r], delays[r], outs, r)
    return div_out


@njit(cache=True)
def _run_nb(next_state, reward, step_reward, starts, use_phi, bernoulli, sparse, arrays, w0, run, delays, outs, r):
    """Run ``r`` of :func:`_train_batch_nb`: its :data:`~simulate.training.problem.Problem` and :data:`~simulate.training.phases.Record` views, then
    :func:`_train_one_nb`."""
    (d0, phi, phiT, rp, rc, rv, cp, cr, cv, theta_rows, theta_src, lp_rows, copy_rows, grad_rows, grad_blk,
     blk_src, par_idx) = arrays
    pb = Problem(next_state, reward, step_reward, starts, d0, use_phi, bernoulli, phi, phiT, sparse, rp, rc, rv, cp,
                 cr, cv, theta_rows, theta_src, lp_rows, copy_rows, grad_rows, grad_blk, blk_src, par_idx)
    J, gn2, chi2, clip, ess, ghat, zero, theta, dpar, lrmax, gpar, gdot, gneg = outs
    rec = Record(J[r], gn2[r], chi2[r], clip[r], ess[r], ghat[r], zero[r], theta[r], dpar[r], lrmax[r], gpar[r],
                 gdot[r], gneg[r])
    return _train_one_nb(pb, w0, run, delays, rec)


__all__ = ["RUN_DTYPE", "ZERO_TOL_OFF", "logratio_max_nb", "Problem", "Record", "Workspace"]
