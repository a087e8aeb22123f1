"""The training kernel's per-row ``exp`` work over many rows at once (issue 59): ``log π`` and ``π`` of a set of rows,
their ``χ²`` terms ``π²/μ``, and ``μ_k``'s alias row.

Each is the instance layer's row function (:func:`simulate.instances.log_softmax_row_nb`,
:func:`~simulate.instances.chi2_terms_row_nb`, :func:`~simulate.instances.alias_row_nb`) with the same operations in
the same order. The exponentials go through :func:`simulate.training.vexp.exp_inplace_nb`, glibc's ``exp`` bit for bit
but inlined (no call per element), so the results are the instance layer's bit for bit
(``tests/test_training_vexp.py``) and the kernel's golden file is unchanged. (An earlier inlined ``exp``, within 1 ulp
of libm's but not equal to it, moved 6 of 320 protocol-length runs by up to 20 % in ``J`` from step 11 on,
2026-12-07: the kernel's runs are chaotic in the last bit of ``π``.) Compiled without reference counting, as the
phases that call them (:mod:`simulate.training.phases`).
"""
from __future__ import annotations

import math

from numba import njit

from simulate.training.vexp import exp_inplace_nb



@njit(cache=True, _nrt=False)
def log_softmax_pi_rows_nb(theta, rows, logp, pi, m, x):
    """For each row ``r = t·S + s`` of ``rows``: ``logp[t,s,:] = θ[t,s,:] − (m_r + log Σ_a e^{θ[t,s,a] − m_r})``,
    ``m_r = max_a θ[t,s,a]``, and ``pi[t,s,:] = e^{logp[t,s,:]}``. The exponentials of all rows are taken in one
    flat loop and each row's sum runs over ``a`` ascending, as one row at a time would. Scratch: ``m``
    ``(≥ len(rows),)``, ``x`` ``(≥ len(rows)·V,)``."""
    T, S, V = theta.shape
    th = theta.reshape(T * S, V)  # row views: row r = t·S + s
    lp = logp.reshape(T * S, V)
    p = pi.reshape(T * S, V)
    n = rows.shape[0]
    for u in range(n):
        r = rows[u]
        mu = th[r, 0]
        for a in range(1, V):
            v = th[r, a]
            mu = v if v > mu else mu  # a select, not a branch on the data (the same value)
        m[u] = mu
        for a in range(V):
            x[u * V + a] = th[r, a] - mu
    exp_inplace_nb(x, n * V)
    for u in range(n):
        z = 0.0
        for a in range(V):
            z += x[u * V + a]
        lz = m[u] + math.log(z)
        r = rows[u]
        for a in range(V):
            la = th[r, a] - lz
            lp[r, a] = la
            x[u * V + a] = la
    exp_inplace_nb(x, n * V)
    for u in range(n):
        r = rows[u]
        for a in range(V):
            p[r, a] = x[u * V + a]


@njit(cache=True, _nrt=False)
def chi2_terms_rows_nb(logp, logq, rows, w2, x):
    """``w2[t,s,a] = π(a|s)²/μ(a|s) = e^{2 log π − log μ}`` on every row ``r = t·S + s`` of ``rows`` (the terms of
    :func:`simulate.instances.chi2_law_nb`), the exponentials in one flat loop; scratch ``x`` ``(≥ len(rows)·V,)``."""
    T, S, V = logp.shape
    lp = logp.reshape(T * S * V)
    lq = logq.reshape(T * S * V)
    out = w2.reshape(T * S * V)
    n = rows.shape[0]
    for u in range(n):
        base = rows[u] * V
        for a in range(V):
            x[u * V + a] = 2.0 * lp[base + a] - lq[base + a]
    exp_inplace_nb(x, n * V)
    for u in range(n):
        base = rows[u] * V
        for a in range(V):
            out[base + a] = x[u * V + a]


@njit(cache=True, _nrt=False)
def alias_row_nb(logp, t, s, prob, alias, scaled, small, large):
    """Row ``(t, s)`` of Walker/Vose alias tables of ``e^{logp}`` into ``prob``/``alias``
    (:func:`simulate.instances.alias_row_nb`, the same construction); ``scaled``, ``small``, ``large``: scratch
    ``(V,)``."""
    V = logp.shape[2]
    m = logp[t, s, 0]
    for a in range(1, V):
        m = max(m, logp[t, s, a])
    for a in range(V):
        scaled[a] = logp[t, s, a] - m
    exp_inplace_nb(scaled, V)
    tot = 0.0
    for a in range(V):
        tot += scaled[a]
    ns = 0
    nl = 0
    # the two stacks without a branch on the data: each entry is written on top of both and kept on one (the
    # other's top slot is free, so the stacks hold what the branching construction holds)
    for a in range(V):
        scaled[a] *= V / tot
        prob[t, s, a] = 1.0
        alias[t, s, a] = a
        c = 1 if scaled[a] < 1.0 else 0
        small[ns] = a
        large[nl] = a
        ns += c
        nl += 1 - c
    while ns > 0 and nl > 0:
        ns -= 1
        j = small[ns]
        nl -= 1
        g = large[nl]
        prob[t, s, j] = scaled[j]
        alias[t, s, j] = g
        scaled[g] = (scaled[g] + scaled[j]) - 1.0
        c = 1 if scaled[g] < 1.0 else 0
        small[ns] = g
        large[nl] = g
        ns += c
        nl += 1 - c
    # leftovers are 1 up to round-off: keep themselves (prob = 1, alias = self)


__all__ = ["alias_row_nb", "chi2_terms_rows_nb", "log_softmax_pi_rows_nb"]
