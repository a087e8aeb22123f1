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
leaves it unchanged for finite ``x``; the sums still run in the same order), and rows that share their logits
computed once (:mod:`simulate.training.problem`: ``θ``, ``log π``, ``π``, the ``χ²`` terms and ``μ_k``'s alias
rows).
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

from asyncgrpo.estimators.kernels import log_weights_nb
from asyncgrpo.estimators.token_level import token_coefficients_nb
from simulate.instances import (J_grad_law_nb, add_score_pi_nb, alias_row_nb, chi2_law_nb, chi2_terms_row_nb,
                                log_softmax_row_nb, logratio_max_starts_nb)

#: The curves of one run (``kernel._train_one_nb`` documents each).
Record = namedtuple("Record", ["J", "gn2", "chi2", "clip", "ess", "ghat", "zero", "theta", "dpar", "lrmax",
                               "gpar", "gdot", "gneg"])
#: Per-run scratch: parameters, logits, the ring buffers of ``log π_{θ_j}`` and ``w_j`` (``B = max d + 1``
#: slots), the step's samples, coefficients and gradients, DP scratch and lazily built alias rows.
Workspace = namedtuple("Workspace", [
    "par", "theta", "histlp", "histw", "pi", "grad", "ghat", "gneg", "gw", "gJ", "gneg_w", "m1", "m2",
    "occ", "val", "f", "f2", "prob", "alias", "stamp", "scaled", "small", "large",
    "states", "actions", "final", "u", "ub", "tok_ell", "ell", "adv", "mask", "coef", "coefneg", "logw", "w2", "mp"])


@njit(cache=True)
def make_workspace_nb(pb, w0, N, G, B):
    """A :data:`Workspace` for ``N`` trajectories in groups of ``G`` and a ring of ``B`` past iterates."""
    T, S, V = pb.step_reward.shape
    P = w0.shape[0]
    return Workspace(
        w0.copy(), np.empty((T, S, V)), np.zeros((B, T, S, V)), np.empty((B, P)), np.zeros((T, S, V)),
        np.empty((T, S, V)), np.empty((T, S, V)), np.empty((T, S, V)), np.empty(P), np.empty(P), np.empty(P),
        np.zeros(P), np.zeros(P), np.empty((T + 1, S)), np.empty((T + 1, S)), np.empty(S), np.empty(S),
        np.ones((T, S, V)), np.empty((T, S, V), dtype=np.int64), np.full((T, S), -1, dtype=np.int64), np.empty(V),
        np.empty(V, dtype=np.int64), np.empty(V, dtype=np.int64), np.empty((N, T), dtype=np.int64),
        np.empty((N, T), dtype=np.int64), np.empty(N, dtype=np.int64), np.empty((N, T)), np.empty(N),
        np.empty((N, T)), np.empty(N), np.empty(N), np.ones((N, T), dtype=np.bool_), np.empty((N, T)),
        np.empty((N, T)), np.empty(G), np.zeros((T, S, V)), np.empty((4, S)))


@njit(cache=True)
def logits_nb(pb, ws):
    """``θ = Φw`` (``θ[i] = Σ_j Φ_ij w_j``, j ascending for every i) for a feature policy, else ``θ = w``. Only the
    rows of ``pb.theta_rows`` are summed; every other row is a copy of its source row, whose features (hence sum)
    are bit-equal (:func:`simulate.training.problem.row_maps_nb`)."""
    T, S, V = ws.theta.shape
    flat = ws.theta.reshape(T * S * V)
    if not pb.use_phi:
        flat[:] = ws.par
        return
    rows = pb.theta_rows
    for u in range(rows.shape[0]):
        base = rows[u] * V
        for a in range(V):
            flat[base + a] = 0.0
    for j in range(ws.par.shape[0]):
        wj = ws.par[j]
        if pb.sparse:
            for e in range(pb.col_ptr[j], pb.col_ptr[j + 1]):
                flat[pb.col_row[e]] += pb.col_val[e] * wj
        else:  # a row's entries in the inner loop (vectorised), each θ_i still summed over j = 0..p−1 in order
            row = pb.phiT[j]
            for u in range(rows.shape[0]):
                base = rows[u] * V
                for a in range(V):
                    flat[base + a] += row[base + a] * wj
    src = pb.theta_src
    for r in range(T * S):
        if src[r] != r:
            for a in range(V):
                flat[r * V + a] = flat[src[r] * V + a]


@njit(cache=True)
def policy_nb(pb, ws, logp):
    """``log π_θ`` into ``logp`` and ``π = exp(log π)`` into ``ws.pi`` on the rows anything reads: computed on
    ``pb.lp_rows`` (:func:`simulate.instances.log_softmax_row_nb`), copied to the reachable rows that share their
    logits. An unreachable row is never written (its zeros are read only by J's value pass, whose values there
    feed no reachable row: :mod:`simulate.training.problem`)."""
    S, V = logp.shape[1], logp.shape[2]
    rows = pb.lp_rows
    for u in range(rows.shape[0]):
        t = rows[u] // S
        s = rows[u] - t * S
        log_softmax_row_nb(ws.theta, logp, t, s)
        for a in range(V):
            ws.pi[t, s, a] = math.exp(logp[t, s, a])
    copy_rows_nb(pb, logp)
    copy_rows_nb(pb, ws.pi)


@njit(cache=True)
def copy_rows_nb(pb, x):
    """``x[r] = x[theta_src[r]]`` for every row ``r`` of ``pb.copy_rows`` (``x``: ``(T,S,V)``, rows ``r = t·S + s``):
    a reachable row takes what its source row computed."""
    T, S, V = x.shape
    flat = x.reshape(T * S * V)
    for i in range(pb.copy_rows.shape[0]):
        dst = pb.copy_rows[i] * V
        src = pb.theta_src[pb.copy_rows[i]] * V
        for a in range(V):
            flat[dst + a] = flat[src + a]


@njit(cache=True)
def to_params_nb(pb, g_theta, out):
    """Chain rule through ``θ = Φw``: ``out = Φᵀ g_θ`` (i ascending for every j); tabular: ``out = g_θ``."""
    T, S, V = g_theta.shape
    flat = g_theta.reshape(T * S * V)
    if not pb.use_phi:
        out[:] = flat
        return
    for j in range(out.shape[0]):
        out[j] = 0.0
    for i in range(T * S * V):
        gi = flat[i]
        if gi != 0.0:
            if pb.sparse:
                for e in range(pb.row_ptr[i], pb.row_ptr[i + 1]):
                    out[pb.row_col[e]] += pb.row_val[e] * gi
            else:
                for j in range(out.shape[0]):
                    out[j] += pb.phi[i, j] * gi


@njit(cache=True)
def finite_logits_nb(theta, theta_max):
    """``max|θ| ≤ θ_max`` and no NaN (the divergence check on ``θ_k``)."""
    flat = theta.reshape(theta.size)
    for i in range(flat.shape[0]):
        if not (abs(flat[i]) <= theta_max):  # also catches NaN
            return False
    return True


@njit(cache=True)
def diagnose_nb(pb, ws, logp):
    """``log π_{θ_k}`` into ``logp``, ``π = exp(log π)`` (:func:`policy_nb`), exact ``J(θ_k)`` and ``∇_θ J`` by one
    forward–backward DP from ``d₀`` (:func:`simulate.instances.J_grad_law_nb`), ``∇_w J = Φᵀ∇_θ J`` into ``gJ``; returns
    ``(J, ‖∇_w J‖²)``."""
    policy_nb(pb, ws, logp)
    Jk = J_grad_law_nb(ws.pi, pb.next_state, pb.step_reward, pb.reward, pb.d0, pb.starts, ws.grad, ws.occ, ws.val)
    to_params_nb(pb, ws.grad, ws.gJ)
    g2 = 0.0
    for j in range(ws.gJ.shape[0]):
        g2 += ws.gJ[j] * ws.gJ[j]
    return Jk, g2


@njit(cache=True)
def behaviour_nb(pb, ws, k, d, logp, logq, rec, diagnostics):
    """Exact overlap of ``π_{θ_k}`` and ``μ_k = π_{θ_{k−d}}`` (``logq``, a ring-buffer slot): ``χ²(π‖μ)`` of the
    start mixture and, with ``diagnostics``, ``‖w_k − w_{k−d}‖₂`` and ``max_{τ∈supp μ} |log π(τ) − log μ(τ)|``
    (largest over starts)."""
    B = ws.histw.shape[0]
    ws.histw[k % B] = ws.par
    rec.chi2[k] = behaviour_chi2_nb(pb, ws, logp, logq)
    if diagnostics:
        overlap_nb(pb, ws, k, d, logp, logq, rec)


@njit(cache=True)
def behaviour_chi2_nb(pb, ws, logp, logq):
    """``χ²(π‖μ)`` of the start mixture (:func:`simulate.instances.chi2_law_nb`). Where rows share logits
    (``pb.copy_rows``), the terms ``π²/μ`` are computed on ``pb.lp_rows`` and copied (``μ_k``'s rows were made by
    :func:`policy_nb` with the same maps, so a copied row's term is the one it would compute); else inline."""
    if pb.copy_rows.shape[0] == 0:
        return chi2_law_nb(logp, logq, pb.next_state, pb.d0, ws.f, ws.f2)
    S = logp.shape[1]
    rows = pb.lp_rows
    for u in range(rows.shape[0]):
        t = rows[u] // S
        chi2_terms_row_nb(logp, logq, ws.w2, t, rows[u] - t * S)
    copy_rows_nb(pb, ws.w2)
    return chi2_law_nb(logp, logq, pb.next_state, pb.d0, ws.f, ws.f2, ws.w2)


@njit(cache=True)
def overlap_nb(pb, ws, k, d, logp, logq, rec):
    """C6's overlap of step ``k`` (after ``w_k`` is in the ring buffer): ``‖w_k − w_{k−d}‖₂`` and
    ``max_{τ∈supp μ} |log π(τ) − log μ(τ)|`` (largest over the starts)."""
    B = ws.histw.shape[0]
    dw2 = 0.0
    old = ws.histw[(k - d) % B]
    for j in range(ws.par.shape[0]):
        dw2 += (ws.par[j] - old[j]) * (ws.par[j] - old[j])
    rec.dpar[k] = math.sqrt(dw2)
    # the context law is shared by π and μ: the largest over the contexts, in one pass from all of them
    rec.lrmax[k] = logratio_max_starts_nb(logp, logq, pb.next_state, pb.starts, ws.mp)


@njit(cache=True)
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
    for n in range(N):
        s = pb.starts[(k * n_prompts + n // G) % C]
        for t in range(T):
            # the alias row of the row whose log μ_k this row copies (pb.theta_src): the same table
            r = pb.theta_src[t * S + s]
            tr, sr = t, s
            if r != t * S + s:  # a copied row (no division on the rows that are their own source)
                tr = r // S
                sr = r - tr * S
            if ws.stamp[tr, sr] != k:  # μ_k's alias row, built once per step
                alias_row_nb(logq, tr, sr, ws.prob, ws.alias, ws.scaled, ws.small, ws.large)
                ws.stamp[tr, sr] = k
            x = ws.u[n, t] * V
            j = int(x)
            if j >= V:
                j = V - 1
            a = j if x - j < ws.prob[tr, sr, j] else ws.alias[tr, sr, j]
            ws.states[n, t] = s
            ws.actions[n, t] = a
            s = pb.next_state[t, s, a]
        ws.final[n] = s
    for n in range(N):
        ret = 0.0
        ws.ell[n] = 0.0
        for t in range(T):
            s = ws.states[n, t]
            a_t = ws.actions[n, t]
            ws.tok_ell[n, t] = logp[t, s, a_t] - logq[t, s, a_t]
            ret += pb.step_reward[t, s, a_t]
            ws.ell[n] += ws.tok_ell[n, t]
        ret += pb.reward[ws.final[n]]
        if pb.bernoulli:  # a verifier that pays 1 with probability E R(τ)
            ret = 1.0 if ws.ub[n] < ret else 0.0
        ws.adv[n] = ret


@njit(cache=True)
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
def weights_nb(ws, run, flags, k, rec):
    """Stop-gradient coefficients ``c[n,t]``: ``w_n = W_ε(ℓ)_n`` of the trajectory map per group, or the token
    map's coefficients; the clip fraction, the ESS ``(Σ_i w_i)²/Σ_i w_i²`` (``w_i = Σ_t c[i,t]``, mean over
    groups) and the zero-gradient flag (every advantage 0)."""
    token_level, clip_ratio, reports_clip = flags
    N, T = ws.coef.shape
    G, n_prompts = run.G, run.n_prompts
    n_cut = 0
    if token_level:
        token_coefficients_nb(run.code, ws.tok_ell, ws.mask, ws.adv, run.eps_low, run.eps_high, run.tau_m2, ws.coef)
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
        for g in range(n_prompts):
            log_weights_nb(run.code, ws.ell[g * G:(g + 1) * G], run.eps, ws.logw)
            for i in range(G):
                w = math.exp(ws.logw[i])
                for t in range(T):
                    ws.coef[g * G + i, t] = w
                if ws.logw[i] < ws.ell[g * G + i] - 1e-9:
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


@njit(cache=True)
def score_nb(ws, diagnostics):
    """``ĝ_k = (1/N) Σ_n A_n Σ_t c[n,t] (e_{a_t} − π(·|s_t))`` and, with ``diagnostics``, its part from
    negative-advantage tokens with ``π < μ`` (``gneg``); returns ``‖ĝ_k‖²`` in logit space. A zero-advantage
    trajectory adds nothing."""
    N, T = ws.coef.shape
    for n in range(N):
        for t in range(T):
            ws.coef[n, t] = 0.0 if ws.adv[n] == 0.0 else ws.adv[n] * ws.coef[n, t] / N
    ws.ghat[:] = 0.0
    add_score_pi_nb(ws.pi, ws.states, ws.actions, ws.coef, ws.ghat)
    if diagnostics:
        for n in range(N):
            for t in range(T):
                ws.coefneg[n, t] = ws.coef[n, t] if (ws.adv[n] < 0.0 and ws.tok_ell[n, t] < 0.0) else 0.0
        ws.gneg[:] = 0.0
        add_score_pi_nb(ws.pi, ws.states, ws.actions, ws.coefneg, ws.gneg)
    gh2 = 0.0
    flat = ws.ghat.reshape(ws.ghat.size)
    for i in range(flat.shape[0]):
        gh2 += flat[i] * flat[i]
    return gh2


@njit(cache=True)
def update_nb(pb, ws, run, k, g2, rec):
    """``ĝ`` in ``w`` (``Φᵀĝ``): ``‖ĝ‖²``, with ``run.diagnostics`` the ascent rates ``⟨ĝ, ∇J⟩/‖∇J‖`` of ĝ and of
    its ``gneg`` part; then ``w_{k+1} = w_k + η ĝ`` (SGD) or Adam's bias-corrected step, and ``θ_{k+1}``."""
    to_params_nb(pb, ws.ghat, ws.gw)
    gw, par, m1, m2 = ws.gw, ws.par, ws.m1, ws.m2
    P = par.shape[0]
    gp2 = 0.0
    for j in range(P):
        gp2 += gw[j] * gw[j]
    rec.gpar[k] = gp2
    if run.diagnostics:
        to_params_nb(pb, ws.gneg, ws.gneg_w)
        gn = math.sqrt(g2)
        dot = 0.0
        dneg = 0.0
        for j in range(P):
            dot += gw[j] * ws.gJ[j]
            dneg += ws.gneg_w[j] * ws.gJ[j]
        rec.gdot[k] = dot / gn if gn > 0.0 else 0.0
        rec.gneg[k] = dneg / gn if gn > 0.0 else 0.0
    eta = run.eta
    if run.opt == 0:
        for j in range(P):
            par[j] += eta * gw[j]
    else:
        beta1, beta2 = run.beta1, run.beta2
        bc1 = 1.0 - beta1 ** (k + 1)
        bc2 = 1.0 - beta2 ** (k + 1)
        for j in range(P):
            m1[j] = beta1 * m1[j] + (1.0 - beta1) * gw[j]
            m2[j] = beta2 * m2[j] + (1.0 - beta2) * gw[j] * gw[j]
            par[j] += eta * (m1[j] / bc1) / (math.sqrt(m2[j] / bc2) + run.adam_eps)
    logits_nb(pb, ws)
