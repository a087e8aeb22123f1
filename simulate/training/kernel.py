"""The learner as one Numba kernel: sampling from the stale behaviour policy, weights or token
coefficients, ĝ, the update, and the exact diagnostics of every step (:mod:`simulate.training`)."""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from asyncgrpo.estimators.kernels import estimator_flags_nb, log_weights_nb
from asyncgrpo.estimators.token_level import token_coefficients_nb
from simulate.instances import add_score_nb, alias_tables, log_softmax_nb, sample_paths_nb
from simulate.training.contexts import J_grad_starts_nb, chi2_starts_nb, context_of_nb


#: The per-run settings, one record per run (:func:`simulate.training.run.run_records` fills it from the
#: ``TrainConfig`` attribute of the same name; ``opt`` is the index in ``OPTIMIZERS``). A new learner option
#: is one field here and one line where the kernel reads it, not a change to every signature.
RUN_DTYPE = np.dtype([
    ("code", np.int64), ("eps", np.float64), ("eps_low", np.float64), ("eps_high", np.float64),
    ("tau_m2", np.float64), ("G", np.int64), ("n_prompts", np.int64), ("eta", np.float64), ("seed", np.int64),
    ("opt", np.int64), ("beta1", np.float64), ("beta2", np.float64), ("adam_eps", np.float64),
    ("adv_norm", np.bool_), ("collapse_frac", np.float64), ("theta_max", np.float64), ("zero_tol", np.float64),
])
#: ``RUN_DTYPE['zero_tol']`` of a run whose ``TrainConfig.zero_tol`` is ``None`` (v1–v3's exact rule).
ZERO_TOL_OFF = -1.0


@njit(cache=True)
def _train_one_nb(next_state, reward, step_reward, starts, phi, use_phi, bernoulli, w0, run, delays,
                  J_out, gn2_out, chi2_out, clip_out, ess_out, ghat_out, zero_out, theta_out,
                  dpar_out, lrmax_out, gpar_out, gdot_out, gneg_out):
    """One run of the learner loop (module docstring); returns the divergence step or −1.

    ``run`` is one record of :data:`RUN_DTYPE` (the run's scalar settings).

    Inputs: ``starts`` int64 (C,) the start states (contexts; :mod:`simulate.training.contexts`: group g of
    step k starts at ``starts[(k·n_prompts + g) mod C]`` and J is the average over contexts), ``next_state`` int64 (T,S,V), ``reward`` float64 (S,) terminal ``R_T``, ``step_reward``
    float64 (T,S,V) per-step ``r_t`` (zeros for terminal-only), ``phi`` float64 (T·S·V, p) features
    with logits ``θ = Φw`` when ``use_phi`` (else ``w`` are the logits and ``phi`` is ignored),
    ``w0`` float64 (p,) initial parameters, ``bernoulli``: the learner sees ``R ~ Bernoulli(E R(τ))``
    instead of ``R(τ)``; ``delays`` int64 (K,) with ``d_k ≤ k``. Outputs (overwritten, NaN after
    divergence): ``J_out``, ``gn2_out`` (K+1,) with ``‖∇_w J‖²``; ``chi2_out``, ``clip_out``,
    ``ess_out``, ``ghat_out``, ``zero_out`` (K,; 1 where every group had equal rewards, so ĝ_k = 0);
    ``theta_out`` (T,S,V) final logits; C6's overlap diagnostics (K,): ``dpar_out[k] = ‖w_k − w_{k−d_k}‖₂``
    in the trained parameter ``w`` (the logits for a tabular policy, the feature weights for ``θ = Φw``),
    ``lrmax_out[k] = max_{τ ∈ supp μ_k} |log π_{θ_k}(τ) − log μ_k(τ)|`` (exact, :func:`logratio_max_nb`)
    and ``gpar_out[k] = ‖ĝ_k‖²`` in ``w`` (``Φᵀĝ`` for a feature policy; ``ghat_out`` stays the logit-space
    norm). Issue 33's diagnostics, ``gdot_out[k] = ⟨ĝ_k, ∇J(θ_k)⟩/‖∇J(θ_k)‖`` in ``w`` (the applied step's
    first-order ascent rate) and ``gneg_out[k]``, the same projection of the part of ĝ_k from
    negative-advantage tokens whose current probability fell below the behaviour one (``π_θ(a_t|s_t) <
    μ_k(a_t|s_t)``: stale samples the learner already pushed down, which an importance weight would damp).
    None of them draws a random number or feeds back into the run. Randomness: ``np.random.seed(seed)`` here, one uniform per
    token (alias tables of μ_k) and one per trajectory when ``bernoulli``, so a run depends only on
    its arguments.
    """
    code, eps, eps_low, eps_high, tau_m2 = run.code, run.eps, run.eps_low, run.eps_high, run.tau_m2
    G, n_prompts, eta, seed, opt = run.G, run.n_prompts, run.eta, run.seed, run.opt
    beta1, beta2, adam_eps, adv_norm = run.beta1, run.beta2, run.adam_eps, run.adv_norm
    collapse_frac, theta_max, zero_tol = run.collapse_frac, run.theta_max, run.zero_tol
    np.random.seed(seed)
    T, S, V = step_reward.shape
    P = w0.shape[0]
    par = w0.copy()
    gw = np.empty(P)
    gJ = np.empty(P)  # ∇_w J(θ_k), kept for the projections gdot/gneg
    gneg_w = np.empty(P)
    gtmp = np.empty((T, S, V))
    s0 = starts[0]
    C = starts.shape[0]
    theta0 = np.empty((T, S, V))
    # Φᵀ stored row-major so that θ = Φw runs over rows in the inner loop (vectorised) while every θ_i still
    # sums Φ_ij w_j in the order j = 0..p−1 (bit-identical to the row-by-row dot product)
    phiT = np.ascontiguousarray(phi.T) if use_phi else phi
    if use_phi:
        _features_nb(phiT, par, theta0)
    else:
        theta0[:] = par.reshape((T, S, V))
    K = delays.shape[0]
    N = G * n_prompts
    B = 1
    for k in range(K):
        if delays[k] + 1 > B:
            B = delays[k] + 1
    # ring buffer of log π_{θ_j}, j = k−B+1..k: μ_k's log-probabilities are the ones computed at step k − d
    # (the same function of the same θ, so bit-identical to recomputing them, at no cost)
    histlp = np.empty((B, T, S, V))
    histw = np.empty((B, P))  # the same iterates in the trained parameter w (C6's ‖w_k − w_{k−d}‖)
    theta = theta0.copy()
    logp = np.empty((T, S, V))
    logq = np.empty((T, S, V))
    grad = np.empty((T, S, V))
    ghat = np.empty((T, S, V))
    gneg = np.empty((T, S, V))
    coefneg = np.empty((G * n_prompts, T))
    m1 = np.zeros(P)
    m2 = np.zeros(P)
    states = np.empty((N, T), dtype=np.int64)
    actions = np.empty((N, T), dtype=np.int64)
    tok_ell = np.empty((N, T))
    mask = np.ones((N, T), dtype=np.bool_)
    coef = np.empty((N, T))
    u = np.empty((N, T))
    ub = np.empty(N)
    ell = np.empty(N)
    adv = np.empty(N)
    logw = np.empty(G)
    for i in range(J_out.shape[0]):
        J_out[i] = np.nan
        gn2_out[i] = np.nan
    for i in range(K):
        chi2_out[i] = np.nan
        clip_out[i] = np.nan
        ess_out[i] = np.nan
        ghat_out[i] = np.nan
        zero_out[i] = np.nan
        dpar_out[i] = np.nan
        lrmax_out[i] = np.nan
        gpar_out[i] = np.nan
        gdot_out[i] = np.nan
        gneg_out[i] = np.nan
    theta_out[:] = theta0
    # the estimator's registry attributes (asyncgrpo.estimators.registry): no estimator code is named here
    token_level, clip_ratio, reports_clip = estimator_flags_nb(code)
    J0 = 0.0
    for k in range(K + 1):
        # --- divergence checks on θ_k, then exact diagnostics
        bad = False
        for idx in np.ndindex(T, S, V):
            x = theta[idx]
            if not (abs(x) <= theta_max):  # also catches NaN
                bad = True
                break
        if bad:
            return k
        log_softmax_nb(theta, logp)
        Jk = J_grad_starts_nb(logp, next_state, step_reward, reward, starts, grad, gtmp)
        g2 = 0.0
        if use_phi:  # ∇_w J = Φᵀ ∇_θ J (chain rule through θ = Φw)
            _features_T_nb(phi, grad, gw)
            for j in range(P):
                g2 += gw[j] * gw[j]
            gJ[:] = gw
        else:
            for idx in np.ndindex(T, S, V):
                g2 += grad[idx] * grad[idx]
            gJ[:] = grad.reshape(P)
        J_out[k] = Jk
        gn2_out[k] = g2
        theta_out[:] = theta
        if k == 0:
            J0 = Jk
        elif not math.isfinite(Jk) or Jk < collapse_frac * J0:
            return k
        if k == K:
            break
        histlp[k % B] = logp
        histw[k % B] = par
        d = delays[k]
        logq[:] = histlp[(k - d) % B]
        chi2_out[k] = chi2_starts_nb(logp, logq, next_state, starts)
        # --- C6: how far the behaviour parameter is, and the largest |log ρ| over μ_k's support
        dw2 = 0.0
        old = histw[(k - d) % B]
        for j in range(P):
            dw2 += (par[j] - old[j]) * (par[j] - old[j])
        dpar_out[k] = math.sqrt(dw2)
        lrm = 0.0
        for c in range(C):  # the context law is shared by π and μ: the largest over the contexts
            lrm = max(lrm, logratio_max_nb(logp, logq, next_state, starts[c]))
        lrmax_out[k] = lrm
        # --- sample N trajectories from μ_k (simulate.instances: alias tables, sample_paths_nb). The
        # uniforms are drawn in the order the run's stream defines: per trajectory, one per token, then
        # one for its Bernoulli reward
        prob, alias = alias_tables(logq)
        for n in range(N):
            for t in range(T):
                u[n, t] = np.random.random()
            if bernoulli:
                ub[n] = np.random.random()
        if C == 1:
            final = sample_paths_nb(prob, alias, next_state, s0, u, actions, states)
        else:  # group g from its own context, the same uniforms in the same order
            final = np.empty(N, dtype=np.int64)
            for g in range(n_prompts):
                lo_, hi_ = g * G, (g + 1) * G
                final[lo_:hi_] = sample_paths_nb(prob, alias, next_state, context_of_nb(starts, k, n_prompts, g),
                                                 u[lo_:hi_], actions[lo_:hi_], states[lo_:hi_])
        for n in range(N):
            ret = 0.0
            ell[n] = 0.0
            for t in range(T):
                s = states[n, t]
                a_t = actions[n, t]
                tok_ell[n, t] = logp[t, s, a_t] - logq[t, s, a_t]
                ret += step_reward[t, s, a_t]
                ell[n] += tok_ell[n, t]
            ret += reward[final[n]]
            if bernoulli:  # a verifier that pays 1 with probability E R(τ)
                ret = 1.0 if ub[n] < ret else 0.0
            adv[n] = ret  # centred per group below
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
        # --- stop-gradient coefficients c[n, t], clip fraction and ESS
        n_cut = 0
        ess_sum = 0.0
        if token_level:
            token_coefficients_nb(code, tok_ell, mask, adv, eps_low, eps_high, tau_m2, coef)
            for n in range(N):
                seq = math.exp(ell[n] / T)
                for t in range(T):
                    # the coefficient's reference (registry.CLIP_RATIOS): 2 the sequence ratio, 3 one (a mask),
                    # else the token ratio
                    raw = seq if clip_ratio == 2 else (1.0 if clip_ratio == 3 else math.exp(tok_ell[n, t]))
                    # a zero-advantage token contributes nothing, so it is never "clipped" (verl/TRL count alike)
                    if adv[n] != 0.0 and coef[n, t] * T < raw * (1.0 - 1e-9):
                        n_cut += 1
            clip_out[k] = n_cut / (N * T) if clip_ratio != 0 else np.nan
        else:
            for g in range(n_prompts):
                log_weights_nb(code, ell[g * G:(g + 1) * G], eps, logw)
                for i in range(G):
                    w = math.exp(logw[i])
                    for t in range(T):
                        coef[g * G + i, t] = w
                    if logw[i] < ell[g * G + i] - 1e-9:
                        n_cut += 1
            clip_out[k] = n_cut / N if reports_clip else np.nan
        for g in range(n_prompts):
            sw = 0.0
            sw2 = 0.0
            for i in range(G):
                w = 0.0
                for t in range(T):
                    w += coef[g * G + i, t]
                sw += w
                sw2 += w * w
            ess_sum += sw * sw / sw2 if sw2 > 0.0 else 0.0
        ess_out[k] = ess_sum / n_prompts
        all_zero = 1.0
        for n in range(N):
            if adv[n] != 0.0:
                all_zero = 0.0
                break
        zero_out[k] = all_zero
        # --- ĝ_k = (1/N) Σ_n A_n Σ_t c[n,t] (e_{a_t} − π_θ(·|s_t)) (simulate.instances.add_score_nb); a
        # zero-advantage trajectory adds nothing, even where its weight overflowed
        for n in range(N):
            for t in range(T):
                coef[n, t] = 0.0 if adv[n] == 0.0 else adv[n] * coef[n, t] / N
                coefneg[n, t] = coef[n, t] if (adv[n] < 0.0 and tok_ell[n, t] < 0.0) else 0.0
        ghat[:] = 0.0
        add_score_nb(logp, states, actions, coef, ghat)
        gneg[:] = 0.0
        add_score_nb(logp, states, actions, coefneg, gneg)
        gh2 = 0.0
        for idx in np.ndindex(T, S, V):
            gh2 += ghat[idx] * ghat[idx]
        ghat_out[k] = gh2
        if not math.isfinite(gh2):
            return k
        # --- update w_{k+1} (ĝ in parameter space: Φᵀĝ_θ for a feature policy), then θ_{k+1}
        if use_phi:
            _features_T_nb(phi, ghat, gw)
        else:
            gw[:] = ghat.reshape(P)
        gp2 = 0.0
        for j in range(P):
            gp2 += gw[j] * gw[j]
        gpar_out[k] = gp2
        if use_phi:
            _features_T_nb(phi, gneg, gneg_w)
        else:
            gneg_w[:] = gneg.reshape(P)
        gn = math.sqrt(g2)
        dot = 0.0
        dneg = 0.0
        for j in range(P):
            dot += gw[j] * gJ[j]
            dneg += gneg_w[j] * gJ[j]
        gdot_out[k] = dot / gn if gn > 0.0 else 0.0
        gneg_out[k] = dneg / gn if gn > 0.0 else 0.0
        if opt == 0:
            for j in range(P):
                par[j] += eta * gw[j]
        else:
            bc1 = 1.0 - beta1 ** (k + 1)
            bc2 = 1.0 - beta2 ** (k + 1)
            for j in range(P):
                m1[j] = beta1 * m1[j] + (1.0 - beta1) * gw[j]
                m2[j] = beta2 * m2[j] + (1.0 - beta2) * gw[j] * gw[j]
                par[j] += eta * (m1[j] / bc1) / (math.sqrt(m2[j] / bc2) + adam_eps)
        if use_phi:
            _features_nb(phiT, par, theta)
        else:
            theta[:] = par.reshape((T, S, V))
    return -1


@njit(cache=True)
def logratio_max_nb(logp, logq, next_state, s0):
    """``max_{τ: μ(τ) > 0} |log π(τ) − log μ(τ)|`` exactly, by a forward max-plus DP over ``(t, s)``.

    ``log π(τ) − log μ(τ) = Σ_t x_t(s_t, a_t)`` with ``x = logp − logq`` and deterministic transitions, so
    the largest and the smallest sum reaching each state obey ``hi_{t+1}(s') = max_{s,a→s'} hi_t(s) + x_t(s,a)``
    (``lo`` with min), ``hi_0 = lo_0 = 0`` at ``s0``; the result is ``max_s max(hi_T(s), −lo_T(s))``. An action
    with ``logq = −inf`` is outside μ's support and skipped. ``logp, logq (T,S,V)``. Cost ``O(T·S·V)``, as
    :func:`simulate.instances.chi2_nb`.
    """
    T, S, V = logp.shape
    hi = np.full(S, -np.inf)
    lo = np.full(S, np.inf)
    hi[s0] = 0.0
    lo[s0] = 0.0
    nh = np.empty(S)
    nl = np.empty(S)
    for t in range(T):
        nh[:] = -np.inf
        nl[:] = np.inf
        for s in range(S):
            if hi[s] == -np.inf:  # not reached along μ's support
                continue
            for a in range(V):
                q = logq[t, s, a]
                if q == -np.inf:
                    continue
                x = logp[t, s, a] - q
                if x != x:  # NaN: say so rather than let the comparisons below drop it
                    return np.nan
                s2 = next_state[t, s, a]
                if hi[s] + x > nh[s2]:
                    nh[s2] = hi[s] + x
                if lo[s] + x < nl[s2]:
                    nl[s2] = lo[s] + x
        hi, nh = nh, hi
        lo, nl = nl, lo
    out = 0.0
    for s in range(S):
        if hi[s] != -np.inf:
            out = max(out, max(hi[s], -lo[s]))
    return out


@njit(cache=True)
def _features_nb(phiT, w, theta_out):
    """Logits of a feature policy: ``θ[t,s,a] = Σ_j Φ[(t,s,a), j] w_j``, from ``phiT = Φᵀ (p, T·S·V)``; the
    sum runs over j = 0..p−1 for every row (the order of a row-by-row dot product), rows in the inner loop."""
    T, S, V = theta_out.shape
    flat = theta_out.reshape(T * S * V)
    n = T * S * V
    for i in range(n):
        flat[i] = 0.0
    for j in range(w.shape[0]):
        wj = w[j]
        row = phiT[j]
        for i in range(n):
            flat[i] += row[i] * wj


@njit(cache=True)
def _features_T_nb(phi, g_theta, out):
    """Chain rule through ``θ = Φw``: ``out = Φᵀ g_θ`` (``g_θ`` of shape (T,S,V), ``out`` (p,))."""
    T, S, V = g_theta.shape
    flat = g_theta.reshape(T * S * V)
    for j in range(out.shape[0]):
        out[j] = 0.0
    for i in range(T * S * V):
        gi = flat[i]
        if gi != 0.0:
            for j in range(out.shape[0]):
                out[j] += phi[i, j] * gi


@njit(cache=True, parallel=True)
def _train_batch_nb(next_state, reward, step_reward, starts, phi, use_phi, bernoulli, w0, runs, delays,
                    J_out, gn2_out, chi2_out, clip_out, ess_out, ghat_out, zero_out, theta_out, dpar_out, lrmax_out,
                    gpar_out, gdot_out, gneg_out, div_out):
    """:func:`_train_one_nb` for runs ``r = 0..R−1`` in parallel; ``runs`` is a :data:`RUN_DTYPE` array and
    per-run arrays carry a leading ``R`` axis.

    Each run seeds Numba's (per-thread) generator itself, so its numbers do not depend on the
    thread or on the other runs of the batch.
    """
    R = runs.shape[0]
    for r in prange(R):
        div_out[r] = _train_one_nb(
            next_state, reward, step_reward, starts, phi, use_phi, bernoulli, w0[r], runs[r], delays[r], J_out[r],
            gn2_out[r], chi2_out[r], clip_out[r], ess_out[r], ghat_out[r], zero_out[r], theta_out[r], dpar_out[r],
            lrmax_out[r], gpar_out[r], gdot_out[r], gneg_out[r])
    return div_out
