"""Where a learner step spends its time (issue 37): the kernel's loop (:func:`simulate.training.kernel._train_one_nb`)
run with the CPU's cycle counter read between its phases.

:func:`profile_phases` runs the same phase functions in the same order as the kernel (so the same run, the same
numbers: ``tests/test_bench_training.py`` checks it) with LLVM's ``readcyclecounter`` (the time-stamp counter, a
few nanoseconds per read, subtracted as ``overhead_ns``) read between them; cycles become nanoseconds by the
counter's rate measured against ``time.perf_counter`` over the whole call. Returns the mean time per learner step
of each phase.
"""
from __future__ import annotations

import math
import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from asyncgrpo.estimators.kernels import estimator_flags_nb
from simulate.training.dp import J_grad_rows_nb
from simulate.training.phases import (Record, advantages_nb, behaviour_chi2_nb, finite_logits_nb, logits_nb,
                                      make_workspace_nb, map_coefficients_nb, overlap_nb, policy_nb, sample_nb, score_nb,
                                      to_params_nb, update_nb, weights_nb)
from simulate.training.problem import make_problem_nb

#: Phase names, in the order of a step (the columns of :func:`profile_phases`).
PHASES = ("divergence check", "log-softmax + exp", "J/∇J DP", "Φᵀ∇J + ‖∇J‖²", "χ² DP",
          "overlap ‖Δw‖ + max-plus DP", "sample (alias rows, paths, returns)", "advantages", "weights / coefficients",
          "score ĝ, gneg",
          "update (Φᵀĝ, step, θ = Φw)")

@intrinsic
def _cycles(typingctx):
    """The CPU's cycle counter (``llvm.readcyclecounter``, rdtsc on x86), as uint64."""
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.uint64(), codegen


@njit(cache=True)
def _now(ts):
    return float(_cycles())


@njit(cache=True)
def cycles_nb():
    """The cycle counter now (a float)."""
    return float(_cycles())


@njit(cache=True)
def _profile_one_nb(pb, w0, run, delays, rec, acc):
    """:func:`simulate.training.kernel._train_one_nb` with a clock read after each phase; adds cycles into ``acc``."""
    ts = 0
    np.random.seed(run.seed)
    K = delays.shape[0]
    B = 1
    for k in range(K):
        B = max(B, delays[k] + 1)
    ws = make_workspace_nb(pb, w0, run.G * run.n_prompts, run.G, B)
    logits_nb(pb, ws)
    flags = estimator_flags_nb(run.code)
    J0 = 0.0
    steps = 0
    for k in range(K):
        c0 = _now(ts)
        if not finite_logits_nb(pb, ws.theta, run.theta_max, k):
            return steps
        c1 = _now(ts)
        logp = ws.histlp[k % B]
        policy_nb(pb, ws, k)
        c2 = _now(ts)
        Jk = J_grad_rows_nb(ws.pi, pb.theta_src, pb.grad_rows, pb.next_state, pb.step_reward, pb.reward, pb.d0,
                            pb.starts, ws.grad, ws.occ, ws.val, ws.scaled)
        c3 = _now(ts)
        to_params_nb(pb, ws.grad, ws.gblk, ws.gJ, ws.seen, False)
        g2 = 0.0
        for j in range(ws.gJ.shape[0]):
            g2 += ws.gJ[j] * ws.gJ[j]
        c4 = _now(ts)
        rec.J[k] = Jk
        rec.gn2[k] = g2
        if k == 0:
            J0 = Jk
        elif not math.isfinite(Jk) or Jk < run.collapse_frac * J0:
            return steps
        d = delays[k]
        logq = ws.histlp[(k - d) % B]
        ws.histw[k % B] = ws.par
        rec.chi2[k] = behaviour_chi2_nb(pb, ws, logp, logq)
        c5 = _now(ts)
        if run.diagnostics:
            overlap_nb(pb, ws, k, d, logp, logq, rec)
        c6 = _now(ts)
        sample_nb(pb, ws, k, run.n_prompts, run.G, logp, logq)
        c7 = _now(ts)
        advantages_nb(ws, run.n_prompts, run.G, run.zero_tol, run.adv_norm)
        c8 = _now(ts)
        map_coefficients_nb(run, flags, ws.tok_ell, ws.mask, ws.adv, ws.ell, ws.coef, ws.logw)
        weights_nb(ws, run, flags, k, rec)
        c9 = _now(ts)
        rec.ghat[k] = score_nb(pb, ws, run.diagnostics)
        c10 = _now(ts)
        if not math.isfinite(rec.ghat[k]):
            return steps
        update_nb(pb, ws, run, k, g2, rec)
        c11 = _now(ts)
        marks = (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11)
        for p in range(11):
            acc[p] += marks[p + 1] - marks[p]
        steps += 1
    return steps


@njit(cache=True)
def _clock_overhead_nb(n):
    ts = 0
    t0 = _now(ts)
    for _ in range(n):
        _now(ts)
    return (_now(ts) - t0) / (n + 1)


def profile_phases(inst, configs) -> dict:
    """Mean µs per learner step of each of :data:`PHASES` over ``configs`` (TrainConfigs on ``inst``, one
    ``steps``), serially; returns ``dict(phases={name: µs}, total_us, steps, overhead_ns, records)`` with
    ``records`` the runs' :data:`~simulate.training.phases.Record` (the same curves as the kernel's). A counter
    read's cost (``overhead_ns``) is subtracted from every phase."""
    from simulate.training.run import kernel_inputs, run_records

    next_state, reward, step, starts, phi, use_phi, bernoulli = kernel_inputs(inst)
    pb = make_problem_nb(next_state, reward, step, starts, phi, use_phi, bernoulli)
    P = phi.shape[1] if use_phi else int(np.prod(inst.theta_shape))
    runs = run_records(configs)
    acc = np.zeros(len(PHASES))
    steps = 0
    c_start, t_start = cycles_nb(), time.perf_counter()
    records = []
    for c, run in zip(configs, runs):
        K = c.steps
        w0 = c.theta0((P,)) + (0.0 if inst.w_init is None else np.asarray(inst.w_init, float))
        rec = Record(*(np.full(K + 1, np.nan) for _ in range(2)), *(np.full(K, np.nan) for _ in range(5)),
                     np.full(inst.theta_shape, np.nan), *(np.full(K, np.nan) for _ in range(5)))
        steps += _profile_one_nb(pb, w0, run, c.delays(), rec, acc)
        records.append(rec)
    per_ns = (cycles_nb() - c_start) / (time.perf_counter() - t_start) / 1e9  # cycles per nanosecond
    over = _clock_overhead_nb(10000) / per_ns
    us = {name: max(acc[i] / per_ns / max(steps, 1) - over, 0.0) / 1e3 for i, name in enumerate(PHASES)}
    return dict(phases=us, total_us=sum(us.values()), steps=steps, overhead_ns=over, records=records)


__all__ = ["PHASES", "profile_phases"]
