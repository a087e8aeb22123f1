"""The training kernel's exact DPs over the reachable rows, reading each row's policy through its source row
(issue 59).

Each is the instance layer's DP (:func:`simulate.instances.J_grad_law_nb`, :func:`~simulate.instances.chi2_law_nb`,
:func:`~simulate.instances.logratio_max_starts_nb`, :func:`~simulate.instances.add_score_pi_nb`) with the same
operations in the same order, restricted to ``rows`` (the reachable rows ``r = t·S + s``, ascending:
:data:`simulate.training.problem.BLOCK_MAPS`' ``grad_rows``) and reading ``π``, ``log π``, ``log μ`` and the
``χ²`` terms of row ``r`` from row ``src[r]``. A row no path visits has zero occupancy, zero ``χ²`` mass and is
never reached by the max-plus pass, so the full DPs skip it too or compute there values that no reachable row
reads; a row that shares its logits has bit-equal values at its source. The results are therefore the full DPs'
bit for bit, without copying rows (``tests/test_kernel_row_maps.py``).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, _nrt=False)
def J_grad_rows_nb(pi, src, rows, next_state, step_reward, reward, d0, starts, grad_out, occ, val, qv):
    """Exact ``J`` (returned) and ``∇_θ J`` into ``grad_out`` on ``rows`` (:func:`simulate.instances.J_grad_law_nb`:
    occupancy ``occ`` forward, values ``val`` backward, ``∂J/∂θ[t,s,a] = occ[t](s) π(a|s) (Q_t(s,a) − val[t](s))``).
    ``grad_out`` is not written off ``rows`` (the caller keeps it 0 there). The gradient of a row is taken in the
    backward pass as soon as its value is known, from the ``Q_t(s,·)`` it kept in ``qv`` (scratch ``(≥ V,)``): the
    same operations as a separate pass, without reading ``next_state``, ``step_reward`` and ``val[t+1]`` twice."""
    T, S, V = pi.shape
    R = rows.shape[0]
    # row views: row r = t·S + s of the (T, S, V) arrays is [r, :]
    p2 = pi.reshape(T * S, V)
    ns2 = next_state.reshape(T * S, V)
    sr2 = step_reward.reshape(T * S, V)
    g2 = grad_out.reshape(T * S, V)
    occf = occ.reshape((T + 1) * S)  # occ[t, s] and val[t, s] are entry r of these
    valf = val.reshape((T + 1) * S)
    for s in range(S):
        occ[0, s] = d0[s]
    for t in range(1, T + 1):
        for s in range(S):
            occ[t, s] = 0.0
    # the rows by t (no division r // S per row): ascending here, descending below, the order of a loop over rows
    u = 0
    for t in range(T):
        nxt = occ[t + 1]
        while u < R and rows[u] < (t + 1) * S:
            r = rows[u]
            u += 1
            o = occf[r]
            if o > 0.0:
                q = src[r]
                for a in range(V):
                    nxt[ns2[r, a]] += o * p2[q, a]
    for s in range(S):
        val[T, s] = reward[s]
    u = R - 1
    for t in range(T - 1, -1, -1):  # the rows of one t are independent
        vn = val[t + 1]
        while u >= 0 and rows[u] >= t * S:
            r = rows[u]
            u -= 1
            q = src[r]
            v = 0.0
            for a in range(V):
                qv[a] = sr2[r, a] + vn[ns2[r, a]]
                v += p2[q, a] * qv[a]
            valf[r] = v
            o = occf[r]
            if o == 0.0:
                for a in range(V):
                    g2[r, a] = 0.0
            else:
                for a in range(V):
                    g2[r, a] = o * p2[q, a] * (qv[a] - v)
    C = starts.shape[0]
    if C == 1:
        return val[0, starts[0]]
    J = 0.0
    for c in range(C):
        J += val[0, starts[c]]
    return J / C


@njit(cache=True, _nrt=False)
def chi2_rows_nb(w2, src, rows, next_state, d0, f, g):
    """``χ²(π‖μ)`` of paths from the start law ``d0`` from the terms ``w2 = π²/μ`` (:func:`simulate.instances.chi2_law_nb`
    with ``w2``): ``f_{t+1}(s') = Σ_{s,a→s'} f_t(s) w2[t,s,a]``, result ``Σ_s f_T(s) − 1``; ``f``, ``g``: scratch
    ``(S,)``."""
    T, S, V = w2.shape
    R = rows.shape[0]
    w2r = w2.reshape(T * S, V)  # row views, as J_grad_rows_nb
    ns2 = next_state.reshape(T * S, V)
    for s in range(S):
        f[s] = d0[s]
    u = 0
    for t in range(T):
        for s in range(S):
            g[s] = 0.0
        while u < R and rows[u] < (t + 1) * S:
            r = rows[u]
            s = r - t * S
            u += 1
            fs = f[s]
            if fs != 0.0:
                q = src[r]
                for a in range(V):
                    term = w2r[q, a]
                    if term != 0.0:  # as chi2_law_nb: keeps an f that overflowed to inf from making inf·0 = NaN
                        g[ns2[r, a]] += fs * term
        f, g = g, f
    tot = 0.0
    for s in range(S):
        tot += f[s]
    return tot - 1.0


@njit(cache=True, _nrt=False)
def logratio_max_rows_nb(logp, logq, src, rows, next_state, starts, scratch):
    """``max_{τ ∈ supp μ} |log π(τ) − log μ(τ)|`` over paths from any start (:func:`simulate.instances.logratio_max_starts_nb`:
    max-plus DP); ``scratch``: ``(4, S)``."""
    T, S, V = logp.shape
    R = rows.shape[0]
    lp2 = logp.reshape(T * S, V)  # row views, as J_grad_rows_nb
    lq2 = logq.reshape(T * S, V)
    ns2 = next_state.reshape(T * S, V)
    hi, lo, nh, nl = scratch[0], scratch[1], scratch[2], scratch[3]
    for s in range(S):
        hi[s] = -np.inf
        lo[s] = np.inf
    for c in range(starts.shape[0]):
        hi[starts[c]] = 0.0
        lo[starts[c]] = 0.0
    u = 0
    for t in range(T):
        for s in range(S):
            nh[s] = -np.inf
            nl[s] = np.inf
        while u < R and rows[u] < (t + 1) * S:
            r = rows[u]
            s = r - t * S
            u += 1
            if hi[s] == -np.inf:  # not reached along μ's support
                continue
            q = src[r]
            hs = hi[s]
            ls = lo[s]
            for a in range(V):
                lq = lq2[q, a]
                if lq == -np.inf:
                    continue
                x = lp2[q, a] - lq
                if x != x:  # NaN: say so rather than let the comparisons below drop it
                    return np.nan
                s2 = ns2[r, a]
                # stores of selects, not branches on the data (the same values: a kept entry is stored again)
                y = hs + x
                nh[s2] = y if y > nh[s2] else nh[s2]
                z = ls + x
                nl[s2] = z if z < nl[s2] else nl[s2]
        hi, nh = nh, hi
        lo, nl = nl, lo
    out = 0.0
    for s in range(S):
        if hi[s] != -np.inf:
            out = max(out, max(hi[s], -lo[s]))
    return out


@njit(cache=True, _nrt=False)
def add_score_rows_nb(pi, src, states, actions, coef, grad_out):
    """``grad_out[t, s_t] += c (e_{a_t} − π(·|s_t))`` for every token with ``c ≠ 0``
    (:func:`simulate.instances.add_score_pi_nb`), ``π`` of row ``t·S + s_t`` read at its source row."""
    n, T = actions.shape
    S, V = pi.shape[1], pi.shape[2]
    p2 = pi.reshape(T * S, V)  # row views, as J_grad_rows_nb
    g2 = grad_out.reshape(T * S, V)
    for i in range(n):
        for t in range(T):
            c = coef[i, t]
            if c == 0.0:
                continue
            r = t * S + states[i, t]
            q = src[r]
            for b in range(V):
                g2[r, b] -= c * p2[q, b]
            g2[r, actions[i, t]] += c


__all__ = ["J_grad_rows_nb", "add_score_rows_nb", "chi2_rows_nb", "logratio_max_rows_nb"]
