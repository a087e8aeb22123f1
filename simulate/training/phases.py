"""The phases of one learner step, each a separately jitted function (:func:`simulate.training.kernel._train_one_nb`
calls them in order; :mod:`simulate.training.profile` times them one by one).

Step ``k`` of a run: :func:`diagnose_nb` (``log π_{θ_k}``, exact ``J``, ``∇J``), :func:`behaviour_nb` (``μ_k`` and
the exact overlap diagnostics ``χ²``, ``‖w_k − w_{k−d}‖``, ``max |log ρ|``), :func:`sample_nb` (``N = n_prompts·G``
trajectories from ``μ_k`` and their returns), :func:`advantages_nb` (group-centred returns), :func:`weights_nb`
(stop-gradient coefficients, clip fraction, ESS), :func:`score_nb` (``ĝ_k``) and :func:`update_nb` (``w_{k+1}``,
``θ_{k+1}``). Every scratch array lives in one :data:`Workspace` made once per run, the instance's arrays in one
:data:`~simulate.training.problem.Problem` made once per batch, the recorded curves in one :data:`Record`.

Bit-identity (``tests/test_kernel_identity.py``): each phase evaluates the same IEEE operations in the same order
as the single-loop kernel it replaced. What is saved is work whose result was already known: ``π = exp(log π)``
once per step instead of once per use, alias rows only for the states the samples visit, no copy of ``log μ_k``
out of the ring buffer, ``Φ`` products over its nonzero entries only (a zero term ``0·x`` added to a sum
leaves it unchanged for finite ``x``; the sums still run in the same order), rows that share their logits
computed once and read at their source row (:mod:`simulate.training.problem`, :mod:`simulate.training.dp`: ``θ``,
``log π``, ``π``, the ``χ²`` terms and ``μ_k``'s alias rows), the DPs over the reachable rows only, and ``θ`` of
the rows that copy it written only when recorded; since 2026-12-07 (issue 59) also ``e^x`` inlined, bit for bit
glibc's (:mod:`simulate.training.vexp`), ``ĝ`` and its negative part zeroed, summed (``‖ĝ‖²``, ``‖Φᵀĝ‖²``, the ascent
dots of a tabular policy) and pushed through ``Φᵀ`` on the rows a sample visited only (every other row is exactly
0, and a sum from +0 that adds ±0 is unchanged), and the DPs' rows read through ``[t·S + s, a]`` views. Issue 59 changed one order on purpose (a re-made golden file):
``Φᵀg`` is summed per distinct feature block (:func:`simulate.training.params.to_params_nb`); feature policies'
recorded values move by ≤ 5.1e-14 relative over the golden grid (≤ 2.7e-12 in Adam runs, whose ``m/√v`` amplifies
them), no divergence step moves, and tabular runs are unchanged bit for bit.

The phases that take the :data:`Workspace` and :data:`~simulate.training.problem.Problem` tuples are compiled
without Numba's reference counting (``_nrt=False``): with it, each call increfs and decrefs every array of both
tuples (≈ 1 µs a call, 60 atomic pairs), more than most phases cost. They allocate nothing and call only functions
compiled the same way (a callee inherits the caller's flag and is cached under the same key, so a shared kernel
compiled without it would be loaded by callers that need it): the estimator's map runs in
:func:`map_coefficients_nb`, with reference counting.
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

from asyncgrpo.estimators.kernels import log_weights_nb
from asyncgrpo.estimators.token_level import token_coefficients_nb
from simulate.training.dp import J_grad_rows_nb, add_score_rows_nb, chi2_rows_nb, logratio_max_rows_nb
from simulate.training.params import (finite_logits_nb, logits_nb, record_theta_nb, restore_nb, to_params_nb,
                                      to_params_pair_nb)
from simulate.training.rows import alias_row_nb, chi2_terms_rows_nb, log_softmax_pi_rows_nb

#: The curves of one run (``kernel._train_one_nb`` documents each).
Record = namedtuple("Record", ["J", "gn2", "chi2", "clip", "ess", "ghat", "zero", "theta", "dpar", "lrmax",
                               "gpar", "gdot", "gneg"])
#: Per-run scratch: parameters, logits, the ring buffers of ``log π_{θ_j}`` and ``w_j`` (``B = max d + 1``
#: slots), the step's samples, coefficients and gradients, DP scratch and lazily built alias rows.
Workspace = namedtuple("Workspace", [
    "par", "theta", "histlp", "histw", "pi", "grad", "ghat", "gneg", "gw", "gJ", "gneg_w", "m1", "m2",
    "occ", "val", "f", "f2", "prob", "alias", "stamp", "scaled", "small", "large",
    "states", "actions", "final", "u", "ub", "tok_ell", "ell", "adv", "mask", "coef", "coefneg", "logw", "w2", "mp",
    "gblk", "xm", "xbuf", "seen", "hblk", "changed", "rowbuf"])


@njit(cache=True)
def make_workspace_nb(pb, w0, N, G, B):
    """A :data:`Workspace` for ``N`` trajectories in groups of ``G`` and a ring of ``B`` past iterates."""
    T, S, V = pb.step_reward.shape
    P = w0.shape[0]
    # zeros where a phase writes only the reachable rows or moving parameters (problem.BLOCK_MAPS, par_idx)
    theta = np.zeros((T, S, V))
    if not pb.use_phi:
        theta.reshape(T * S * V)[:] = w0
    return Workspace(
        w0.copy(), theta, np.zeros((B, T, S, V)), np.empty((B, P)), np.zeros((T, S, V)),
        np.zeros((T, S, V)), np.zeros((T, S, V)), np.zeros((T, S, V)), np.zeros(P), np.zeros(P), np.zeros(P),
        np.zeros(P), np.zeros(P), np.empty((T + 1, S)), np.empty((T + 1, S)), np.empty(S), np.empty(S),
        np.ones((T, S, V)), np.empty((T, S, V), dtype=np.int64), np.full((T, S), -1, dtype=np.int64), np.empty(V),
        np.empty(V, dtype=np.int64), np.empty(V, dtype=np.int64), np.empty((N, T), dtype=np.int64),
        np.empty((N, T), dtype=np.int64), np.empty(N, dtype=np.int64), np.empty((N, T)), np.empty(N),
        np.empty((N, T)), np.empty(N), np.empty(N), np.ones((N, T), dtype=np.bool_), np.empty((N, T)),
        np.empty((N, T)), np.empty(N), np.zeros((T, S, V)), np.empty((4, S)), np.empty((pb.blk_src.shape[0], V)),
        np.empty(T * S), np.empty(T * S * V), np.zeros(T * S, dtype=np.bool_),
        np.empty((pb.blk_src.shape[0], V)), np.zeros(T * S, dtype=np.bool_), np.empty(T * S, dtype=np.int64))


@njit(cache=True, _nrt=False)
def policy_nb(pb, ws, k):
    """``log π_{θ_k}`` into the ring slot ``ws.histlp[k mod B]`` and ``π = exp(log π)`` into ``ws.pi`` on ``pb.lp_rows``,
    the source rows of the reachable rows (:func:`simulate.training.rows.log_softmax_pi_rows_nb`); every reader takes
    a row's values at its source row (``pb.theta_src``), and no reader visits an unreachable row. A tabular policy
    after step 0 recomputes only the rows whose logits the last update changed (``ws.changed``, set by
    :func:`update_nb`); every other row's ``log π`` is the previous slot's (copied) and its ``π`` is already in
    ``ws.pi``: the same values, without their ``exp`` and ``log``."""
    B = ws.histlp.shape[0]
    logp = ws.histlp[k % B]
    if k == 0 or pb.use_phi:
        log_softmax_pi_rows_nb(ws.theta, pb.lp_rows, logp, ws.pi, ws.xm, ws.xbuf)
        return
    T, S, V = logp.shape
    cur = logp.reshape(T * S, V)
    prev = ws.histlp[(k - 1) % B].reshape(T * S, V)
    rows = pb.lp_rows
    n = 0
    for u in range(rows.shape[0]):
        r = rows[u]
        if ws.changed[r]:
            ws.changed[r] = False
            ws.rowbuf[n] = r
            n += 1
        elif B > 1:  # B = 1: the previous slot is this one
            for a in range(V):
                cur[r, a] = prev[r, a]
    log_softmax_pi_rows_nb(ws.theta, ws.rowbuf[:n], logp, ws.pi, ws.xm, ws.xbuf)


@njit(cache=True, _nrt=False)
def diagnose_nb(pb, ws, k):
    """``log π_{θ_k}`` into ``logp``, ``π = exp(log π)`` (:func:`policy_nb`), exact ``J(θ_k)`` and ``∇_θ J`` by one
    forward–backward DP from ``d₀`` (:func:`simulate.instances.J_grad_law_nb`; ``ws.scaled``, the alias rows' scratch,
    holds a row's ``Q`` values: no alias row is built in this phase), ``∇_w J = Φᵀ∇_θ J`` into ``gJ``; returns
    ``(J, ‖∇_w J‖²)``."""
    policy_nb(pb, ws, k)
    Jk = J_grad_rows_nb(ws.pi, pb.theta_src, pb.grad_rows, pb.next_state, pb.step_reward, pb.reward, pb.d0, pb.starts,
                        ws.grad, ws.occ, ws.val, ws.scaled)
    to_params_nb(pb, ws.grad, ws.gblk, ws.gJ, ws.seen, False)
    g2 = 0.0
    for u in range(pb.par_idx.shape[0]):  # ascending; the entries left out are 0
        g2 += ws.gJ[pb.par_idx[u]] * ws.gJ[pb.par_idx[u]]
    return Jk, g2


@njit(cache=True, _nrt=False)
def behaviour_nb(pb, ws, k, d, logp, logq, rec, diagnostics):
    """Exact overlap of ``π_{θ_k}`` and ``μ_k = π_{θ_{k−d}}`` (``logq``, a ring-buffer slot): ``χ²(π‖μ)`` of the
    start mixture and, with ``diagnostics``, ``‖w_k − w_{k−d}‖₂`` and ``max_{τ∈supp μ} |log π(τ) − log μ(τ)|``
    (largest over starts)."""
    B = ws.histw.shape[0]
    slot = ws.histw[k % B]
    for j in range(slot.shape[0]):
        slot[j] = ws.par[j]
    rec.chi2[k] = behaviour_chi2_nb(pb, ws, logp, logq)
    if diagnostics:
        overlap_nb(pb, ws, k, d, logp, logq, rec)


@njit(cache=True, _nrt=False)
def behaviour_chi2_nb(pb, ws, logp, logq):
    """``χ²(π‖μ)`` of the start mixture (:func:`simulate.instances.chi2_law_nb`), its terms ``π²/μ`` computed on
    ``pb.lp_rows`` (:func:`simulate.training.rows.chi2_terms_rows_nb`) and copied to the rows that share them
    (``μ_k``'s rows were made by :func:`policy_nb` with the same maps, so a copied row's term is the one it would
    compute). The DP reads terms only where its mass is nonzero, i.e. on reachable rows."""
    chi2_terms_rows_nb(logp, logq, pb.lp_rows, ws.w2, ws.xbuf)
    return chi2_rows_nb(ws.w2, pb.theta_src, pb.grad_rows, pb.next_state, pb.d0, ws.f, ws.f2)


@njit(cache=True, _nrt=False)
def overlap_nb(pb, ws, k, d, logp, logq, rec):
    """C6's overlap of step ``k`` (after ``w_k`` is in the ring buffer): ``‖w_k − w_{k−d}‖₂`` and
    ``max_{τ∈supp μ} |log π(τ) − log μ(τ)|`` (largest over the starts)."""
    B = ws.histw.shape[0]
    dw2 = 0.0
    old = ws.histw[(k - d) % B]
    for u in range(pb.par_idx.shape[0]):  # a parameter no step moves adds (w_0 − w_0)² = 0
        j = pb.par_idx[u]
        dw2 += (ws.par[j] - old[j]) * (ws.par[j] - old[j])
    rec.dpar[k] = math.sqrt(dw2)
    # the context law is shared by π and μ: the largest over the contexts, in one pass from all of them
    rec.lrmax[k] = logratio_max_rows_nb(logp, logq, pb.theta_src, pb.grad_rows, pb.next_state, pb.starts, ws.mp)


@njit(cache=True, _nrt=False)
def sample_nb(pb, ws, k, n_prompts, G, logp, logq):
    """``N`` trajectories from ``μ_k`` (group ``g`` from ``starts[(k·n_prompts + g) mod C]``), one uniform per
    token (then one per trajectory for a Bernoulli reward) drawn first, in the run's stream order; alias rows
    of ``μ_k`` built on first visit, one per source row of ``pb.theta_src`` (rows sharing ``log μ_k`` share it).
    Fills ``ℓ_{n,t} = log π − log μ`` of each token, ``ℓ_n = Σ_t ℓ_{n,t}``
    and the returns ``R_n = Σ_t r_t + R_T`` (or ``1{u_n < R_n}``) into ``adv``."""
    N, T = ws.u.shape
    C = pb.starts.shape[0]
    for n in range(N):
        for t in range(T):
            ws.u[n, t] = np.random.random()
        if pb.bernoulli:
            ws.ub[n] = np.random.random()
    S, V = logq.shape[1], logq.shape[2]
    # row views ([t·S + s, a]): a row's source is read without dividing by S, except to build its alias row
    lp2 = logp.reshape(T * S, V)
    lq2 = logq.reshape(T * S, V)
    prob2 = ws.prob.reshape(T * S, V)
    alias2 = ws.alias.reshape(T * S, V)
    stamp = ws.stamp.reshape(T * S)
    ns2 = pb.next_state.reshape(T * S, V)
    sr2 = pb.step_reward.reshape(T * S, V)
    for n in range(N):
        s = pb.starts[(k * n_prompts + n // G) % C]
        for t in range(T):
            row = t * S + s
            # the alias row of the row whose log μ_k this row copies (pb.theta_src): the same table
            r = pb.theta_src[row]
            if stamp[r] != k:  # μ_k's alias row, built once per step
                tr = r // S
                alias_row_nb(logq, tr, r - tr * S, ws.prob, ws.alias, ws.scaled, ws.small, ws.large)
                stamp[r] = k
            x = ws.u[n, t] * V
            j = int(x)
            if j >= V:
                j = V - 1
            a = j if x - j < prob2[r, j] else alias2[r, j]
            ws.states[n, t] = s
            ws.actions[n, t] = a
            s = ns2[row, a]
        ws.final[n] = s
    for n in range(N):
        ret = 0.0
        ws.ell[n] = 0.0
        for t in range(T):
            a_t = ws.actions[n, t]
            row = t * S + ws.states[n, t]
            r = pb.theta_src[row]  # log π and log μ are kept on source rows only
            ws.tok_ell[n, t] = lp2[r, a_t] - lq2[r, a_t]
            ret += sr2[row, a_t]
            ws.ell[n] += ws.tok_ell[n, t]
        ret += pb.reward[ws.final[n]]
        if pb.bernoulli:  # a verifier that pays 1 with probability E R(τ)
            ret = 1.0 if ws.ub[n] < ret else 0.0
        ws.adv[n] = ret


@njit(cache=True, _nrt=False)
def advantages_nb(ws, n_prompts, G, zero_tol, adv_norm):
    """``A_{g,i} = R_{g,i} − R̄_g`` (÷ ``(std_g R + 10⁻⁶)`` with ``adv_norm``); exactly 0 for a group whose
    rewards are equal within ``zero_tol·max(1, |R|)`` (``zero_tol ≥ 0``)."""
    adv = ws.adv
    for g in range(n_prompts):
        if zero_tol >= 0.0:  # equal within τ·scale: exactly zero advantages, not a mean's rounding error
            hi = adv[g * G]
            lo = adv[g * G]
            for i in range(1, G):
                hi = max(hi, adv[g * G + i])
                lo = min(lo, adv[g * G + i])
            if hi - lo <= zero_tol * max(1.0, abs(hi), abs(lo)):
                for i in range(G):
                    adv[g * G + i] = 0.0
                continue
        mean = 0.0
        for i in range(G):
            mean += adv[g * G + i]
        mean /= G
        var = 0.0
        for i in range(G):
            adv[g * G + i] -= mean
            var += adv[g * G + i] * adv[g * G + i]
        if adv_norm:
            sd = math.sqrt(var / G)
            for i in range(G):
                adv[g * G + i] /= sd + 1e-6


@njit(cache=True)
def map_coefficients_nb(run, flags, tok_ell, mask, adv, ell, coef, logw):
    """The estimator's map: token level, its coefficients into ``coef``; else ``log W_ε(ℓ)`` of each group into
    ``logw`` (N,). With reference counting (the maps are the registry's kernels, shared with other callers, and
    some allocate), so it takes arrays, not the :data:`Workspace`."""
    if flags[0]:
        token_coefficients_nb(run.code, tok_ell, mask, adv, run.eps_low, run.eps_high, run.tau_m2, coef)
        return
    G = run.G
    for g in range(run.n_prompts):
        log_weights_nb(run.code, ell[g * G:(g + 1) * G], run.eps, logw[g * G:(g + 1) * G])


@njit(cache=True, _nrt=False)
def weights_nb(ws, run, flags, k, rec):
    """Stop-gradient coefficients ``c[n,t]``: ``w_n = W_ε(ℓ)_n`` of the trajectory map per group (``log w`` already in
    ``ws.logw``), or (already in ``ws.coef``) the token map's coefficients (:func:`map_coefficients_nb`); the clip
    fraction, the ESS ``(Σ_i w_i)²/Σ_i w_i²`` (``w_i = Σ_t c[i,t]``, mean over
    groups) and the zero-gradient flag (every advantage 0)."""
    token_level, clip_ratio, reports_clip = flags
    N, T = ws.coef.shape
    G, n_prompts = run.G, run.n_prompts
    n_cut = 0
    if token_level:
        for n in range(N):
            seq = math.exp(ws.ell[n] / T)
            for t in range(T):
                # the coefficient's reference (registry.CLIP_RATIOS): 2 the sequence ratio, 3 one (a mask),
                # else the token ratio
                raw = seq if clip_ratio == 2 else (1.0 if clip_ratio == 3 else math.exp(ws.tok_ell[n, t]))
                # a zero-advantage token contributes nothing, so it is never "clipped" (verl/TRL count alike)
                if ws.adv[n] != 0.0 and ws.coef[n, t] * T < raw * (1.0 - 1e-9):
                    n_cut += 1
        rec.clip[k] = n_cut / (N * T) if clip_ratio != 0 else np.nan
    else:
        for n in range(N):  # ws.logw holds log W_ε(ℓ) of every group (map_coefficients_nb)
            w = math.exp(ws.logw[n])
            for t in range(T):
                ws.coef[n, t] = w
            if ws.logw[n] < ws.ell[n] - 1e-9:
                n_cut += 1
        rec.clip[k] = n_cut / N if reports_clip else np.nan
    ess_sum = 0.0
    for g in range(n_prompts):
        sw = 0.0
        sw2 = 0.0
        for i in range(G):
            w = 0.0
            for t in range(T):
                w += ws.coef[g * G + i, t]
            sw += w
            sw2 += w * w
        ess_sum += sw * sw / sw2 if sw2 > 0.0 else 0.0
    rec.ess[k] = ess_sum / n_prompts
    all_zero = 1.0
    for n in range(N):
        if ws.adv[n] != 0.0:
            all_zero = 0.0
            break
    rec.zero[k] = all_zero


@njit(cache=True, _nrt=False)
def score_nb(pb, ws, diagnostics):
    """``ĝ_k = (1/N) Σ_n A_n Σ_t c[n,t] (e_{a_t} − π(·|s_t))`` and, with ``diagnostics``, its part from
    negative-advantage tokens with ``π < μ`` (``gneg``); returns ``‖ĝ_k‖²`` in logit space. A zero-advantage
    trajectory adds nothing."""
    N, T = ws.coef.shape
    for n in range(N):
        for t in range(T):
            ws.coef[n, t] = 0.0 if ws.adv[n] == 0.0 else ws.adv[n] * ws.coef[n, t] / N
    V = ws.ghat.shape[2]
    rows = pb.grad_rows
    flat = ws.ghat.reshape(ws.ghat.size)
    # ĝ and gneg are 0 on entry: zeros from make_workspace_nb, and update_nb zeroes the rows this step writes
    add_score_rows_nb(ws.pi, pb.theta_src, ws.states, ws.actions, ws.coef, ws.ghat)
    if diagnostics:
        for n in range(N):
            for t in range(T):
                ws.coefneg[n, t] = ws.coef[n, t] if (ws.adv[n] < 0.0 and ws.tok_ell[n, t] < 0.0) else 0.0
        add_score_rows_nb(ws.pi, pb.theta_src, ws.states, ws.actions, ws.coefneg, ws.gneg)
    # ‖ĝ‖² over the rows a token with c ≠ 0 visited (ws.seen), ascending: every other row of ĝ is 0, and adding 0·0 = +0 to a
    # sum ≥ +0 leaves it unchanged, so the sum is the one over every reachable row, bit for bit, at a fraction of
    # its sequential additions
    S = ws.ghat.shape[1]
    for n in range(N):
        for t in range(T):
            if ws.coef[n, t] != 0.0:
                ws.seen[t * S + ws.states[n, t]] = True
    gh2 = 0.0
    for u in range(rows.shape[0]):
        r = rows[u]
        if ws.seen[r]:  # left marked for update_nb's Φᵀĝ, which clears it
            for a in range(V):
                gh2 += flat[r * V + a] * flat[r * V + a]
    return gh2


@njit(cache=True, _nrt=False)
def update_nb(pb, ws, run, k, g2, rec):
    """``ĝ`` in ``w`` (``Φᵀĝ``): ``‖ĝ‖²``, with ``run.diagnostics`` the ascent rates ``⟨ĝ, ∇J⟩/‖∇J‖`` of ĝ and of
    its ``gneg`` part; then ``w_{k+1} = w_k + η ĝ`` (SGD) or Adam's bias-corrected step, and ``θ_{k+1}``."""
    if run.diagnostics:  # Φᵀĝ and Φᵀ(its negative part) in one pass over Φ
        to_params_pair_nb(pb, ws.ghat, ws.gneg, ws.gblk, ws.hblk, ws.gw, ws.gneg_w, ws.seen)
    else:
        to_params_nb(pb, ws.ghat, ws.gblk, ws.gw, ws.seen, True)
    gw, par, m1, m2 = ws.gw, ws.par, ws.m1, ws.m2
    idx = pb.par_idx  # the parameters a step moves, ascending: every sum below skips only exact zeros
    if pb.use_phi:
        gp2 = 0.0
        for u in range(idx.shape[0]):
            gp2 += gw[idx[u]] * gw[idx[u]]
        rec.gpar[k] = gp2
    else:  # gw = ĝ on pb.par_idx (every entry of the visited rows): score_nb's ‖ĝ‖², the same sum in the same order
        rec.gpar[k] = rec.ghat[k]
    if run.diagnostics:
        gn = math.sqrt(g2)
        dot = 0.0
        dneg = 0.0
        if pb.use_phi:
            for u in range(idx.shape[0]):
                dot += gw[idx[u]] * ws.gJ[idx[u]]
                dneg += ws.gneg_w[idx[u]] * ws.gJ[idx[u]]
        else:  # the visited rows ascending (∇J is finite, so an entry with ĝ = 0 adds ±0, and a sum from +0 is never −0)
            Vg = ws.ghat.shape[2]
            rows = pb.grad_rows
            for u in range(rows.shape[0]):
                r = rows[u]
                if ws.seen[r]:
                    for a in range(Vg):
                        dot += gw[r * Vg + a] * ws.gJ[r * Vg + a]
                        dneg += ws.gneg_w[r * Vg + a] * ws.gJ[r * Vg + a]
        rec.gdot[k] = dot / gn if gn > 0.0 else 0.0
        rec.gneg[k] = dneg / gn if gn > 0.0 else 0.0
    N, T = ws.states.shape
    S, V = ws.ghat.shape[1], ws.ghat.shape[2]
    # tabular SGD moves only the parameters with ĝ ≠ 0, all on the visited rows: those are the rows policy_nb must
    # recompute (a visited row whose step rounds to nothing is recomputed to the same values)
    sgd_marks = not pb.use_phi and run.opt == 0
    for n in range(N):  # score_nb's marks cleared and the rows it wrote zeroed, for the next step
        for t in range(T):
            s = ws.states[n, t]
            if sgd_marks and ws.seen[t * S + s]:
                ws.changed[t * S + s] = True
            ws.seen[t * S + s] = False
            for a in range(V):
                ws.ghat[t, s, a] = 0.0
                ws.gneg[t, s, a] = 0.0
    bc1 = 1.0 - run.beta1 ** (k + 1)  # Adam's bias corrections (unused by SGD)
    bc2 = 1.0 - run.beta2 ** (k + 1)
    if not pb.use_phi and run.opt != 0:  # Adam moves every parameter with a moment: row by row, marking changes
        grows = pb.grad_rows  # pb.par_idx is these rows' entries, in this order
        for u in range(grows.shape[0]):
            r = grows[u]
            ch = False
            for a in range(V):
                j = r * V + a
                old = par[j]
                step_nb(run, j, gw, par, m1, m2, bc1, bc2)
                ch = ch or par[j] != old
            if ch:
                ws.changed[r] = True
    else:
        for u in range(idx.shape[0]):
            step_nb(run, idx[u], gw, par, m1, m2, bc1, bc2)
    logits_nb(pb, ws)


@njit(cache=True, inline="always", _nrt=False)
def step_nb(run, j, gw, par, m1, m2, bc1, bc2):
    """Parameter ``j``'s ascent step: SGD ``w_j += η g_j``, or Adam's with bias corrections ``bc1``, ``bc2``."""
    if run.opt == 0:
        par[j] += run.eta * gw[j]
    else:
        m1[j] = run.beta1 * m1[j] + (1.0 - run.beta1) * gw[j]
        m2[j] = run.beta2 * m2[j] + (1.0 - run.beta2) * gw[j] * gw[j]
        par[j] += run.eta * (m1[j] / bc1) / (math.sqrt(m2[j] / bc2) + run.adam_eps)


__all__ = ["Record", "Workspace", "advantages_nb", "behaviour_chi2_nb", "behaviour_nb", "diagnose_nb",
           "finite_logits_nb", "logits_nb", "make_workspace_nb", "map_coefficients_nb", "overlap_nb", "policy_nb",
           "record_theta_nb", "restore_nb", "sample_nb", "score_nb", "step_nb", "to_params_nb", "update_nb", "weights_nb"]
