"""The Numba Monte Carlo kernel: sample groups from ``μ``, weigh them with every estimator, reduce.

Per token the kernel draws one uniform and reads 64 contiguous bytes of a packed table
(:func:`pack_table`: alias column, both outcomes' ``ℓ``, ``π_θ`` and next state); everything
per estimator is per trajectory (docs/THEORY.md §1–§2)::

    ĝ = (1/G) Σ_i w_i A_i s_θ(τ_i),   s_θ(τ) = Σ_t (e_{a_t} − π_θ(·|s_t)) on row (t, s_t).

``ĝ`` is accumulated sparsely: row ``(t,s)`` of ``Σ_i c_i s_θ(τ_i)`` is ``C[t,s,·] − C_row[t,s]·π_θ(·|s)``
with ``C`` the sum of the coefficients ``c_i = w_i A_i/G`` per visited cell and ``C_row = Σ_a C``.

``‖ĝ‖²`` per group and estimator has two routes, chosen per call (:func:`choose_route`):

- **gram** (``G²(T+E)`` per group): ``‖ĝ_e‖² = c_eᵀ K c_e`` with the estimator-free Gram matrix
  ``K_ij = ⟨s_θ(τ_i), s_θ(τ_j)⟩``; cheapest for small ``G``.
- **vector** (``O(G·T·E)`` per group, linear in ``G``): scatter the group's coefficients into a zeroed
  scratch copy of ``C`` and ``C_row`` (only the visited cells are touched), then
  ``‖ĝ‖² = Σ_cells C(C − 2·C_row·π(a)) + Σ_rows C_row²‖π‖²`` over the visited cells/rows, reading
  and re-zeroing each once.

Reduction: chunk ``c`` (seed ``seeds[c]``) writes its scalar sums into its own row of the outputs.
The bias-vector sums are kept per **batch** of consecutive chunks (``n_batches`` divides ``n_chunks``):
a batch runs its chunks in order on one thread, so the result is bit-identical for any thread count,
and the memory of the vector sums is ``n_batches·T·S·V·E`` (sized by the batch means the standard
errors need), not ``n_chunks·T·S·V·E``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from asyncgrpo.estimators.kernels import log_weights_nb, weight_terms_nb
from simulate import instances as ins

#: Per-(group, estimator) quantities, in the kernel's order.
EST_QUANTITIES = ("sq_norm", "bias_functional", "removed_mass", "mean_weight", "ess")
#: Per-group, estimator-free quantities, in the kernel's order.
GROUP_QUANTITIES = ("group_mass", "chi2", "c1_rhs", "mean_reward")
_NQ = len(EST_QUANTITIES)
_NG = len(GROUP_QUANTITIES)

#: Slots of the packed per-``(t, s, j)`` sampling table (64 contiguous bytes per alias column).
_TAB_PROB, _TAB_KEEP, _TAB_ALIAS, _TAB_PIN2 = 0, 1, 4, 7
#: Shift of the action in the encoded outcome ``enc = a·2^16 + s'`` (see :func:`pack_table`).
_ENC_SHIFT = 16
#: Routes of ``‖ĝ‖²`` (see the module docstring).
ROUTES = {"gram": 0, "vector": 1}


def pack_table(prob, alias, lr, pi, pin2, next_state) -> np.ndarray:
    """Everything one token needs, in 64 contiguous bytes: ``ndarray(float64, (T,S,V,8))``.

    For alias column ``j`` of row ``(t,s)``: ``[prob_j, enc(j), ℓ(j), π(j), enc(α_j), ℓ(α_j), π(α_j), ‖π‖²]``
    with ``α_j = alias[t,s,j]``, ``ℓ(a) = log π_θ(a|s) − log μ(a|s)``, ``π(a) = π_θ(a|s)``,
    ``‖π‖² = ‖π_θ(·|s)‖²`` and ``enc(a) = a·2^16 + next_state[t,s,a]`` (exact in float64), so the
    sampled outcome (keep ``j`` or take ``α_j``) selects slots ``1..3`` or ``4..6`` of the same line.
    """
    T, S, V = prob.shape
    if S >= 1 << _ENC_SHIFT or V >= 1 << _ENC_SHIFT:
        raise ValueError(f"S and V must be < 2^{_ENC_SHIFT} for the packed table, got S={S}, V={V}")
    if T * S * V >= 2**31:  # the kernel keeps cell ids (t·S + s)·V + a in int32 (half the Gram loop's bytes)
        raise ValueError(f"T·S·V must be < 2^31 for the Monte Carlo kernel, got T·S·V = {T * S * V}")
    tab = np.empty((T, S, V, 8))
    j = np.broadcast_to(np.arange(V), (T, S, V))
    for off, act in ((_TAB_KEEP, j), (_TAB_ALIAS, alias)):
        tab[..., off] = act * float(1 << _ENC_SHIFT) + np.take_along_axis(next_state, act, axis=-1)
        tab[..., off + 1] = np.take_along_axis(lr, act, axis=-1)
        tab[..., off + 2] = np.take_along_axis(pi, act, axis=-1)
    tab[..., _TAB_PROB] = prob
    tab[..., _TAB_PIN2] = pin2[..., None]
    return tab


def choose_route(G: int, T: int, E: int) -> str:
    """``"gram"`` or ``"vector"`` for ``‖ĝ‖²``: the cheaper by the operation counts of the two routes.

    Gram: ``G²·T`` vectorised selects plus ``G²·E`` multiply-adds per group; vector: ``≈ 3·G·T·E``
    scattered reads/writes per group, each costing about ``κ = 2.5`` vectorised operations (measured
    with ``python -m bench scaling``). Both give the same numbers up to round-off (tested).
    """
    return "gram" if G * (T + E) <= 2.5 * 3.0 * T * E else "vector"


@njit(cache=True)
def _sample_group_nb(tf, S, V, T, G, s0, U, g, use_U, rng, track, sv, ell, ssq, rowid, cellid, pa, pn):
    """Sample one group of ``G`` trajectories from ``μ``: one uniform and one packed-table line per token.

    Writes the final states ``sv``, ``ℓ_i`` (``ell``), ``‖s_θ(τ_i)‖²`` (``ssq``) and, when ``track``,
    the visited rows/cells and ``π_θ(a)``, ``‖π_θ‖²`` per token. Time-major: the G trajectories are
    independent chains ``s_t → line → s_{t+1}``, so interleaving them hides the latency of each
    dependent load (trajectory-major would run one chain at a time).
    """
    mask = (1 << _ENC_SHIFT) - 1
    for i in range(G):
        sv[i] = s0
        ell[i] = 0.0
        ssq[i] = 0.0
    for t in range(T):
        for i in range(G):
            u = U[g, i, t] if use_U else ins.rng_uniform_nb(rng)
            x = u * V
            j = int(x)
            if j >= V:  # u·V rounds up to V only for u within 2^-53 of 1
                j = V - 1
            s = sv[i]
            b = ((t * S + s) * V + j) * 8
            off = _TAB_KEEP if x - j < tf[b + _TAB_PROB] else _TAB_ALIAS
            enc = int(tf[b + off])
            p = tf[b + off + 2]
            n2 = tf[b + _TAB_PIN2]
            ell[i] += tf[b + off + 1]
            ssq[i] += (1.0 - 2.0 * p) + n2
            if track:
                rw = t * S + s
                rowid[t, i] = rw
                cellid[t, i] = rw * V + (enc >> _ENC_SHIFT)
                pa[t, i] = p
                pn[t, i] = n2
            sv[i] = enc & mask


@njit(cache=True)
def _sq_gram_nb(G, T, E, rowid, cellid, pa, pn, coef, K, sqv):
    """``sqv[e] = c_eᵀ K c_e`` with the Gram matrix of the G scores (all G² entries, selects not branches)."""
    for i in range(G):
        for jj in range(G):
            K[i, jj] = 0.0
    for t in range(T):
        for i in range(G):
            ri = rowid[t, i]
            ci = cellid[t, i]
            qi = pn[t, i] - pa[t, i]
            for jj in range(G):
                K[i, jj] += (qi - pa[t, jj] if rowid[t, jj] == ri else 0.0) + (1.0 if cellid[t, jj] == ci else 0.0)
    for e in range(E):
        sq = 0.0
        for i in range(G):
            acc = 0.0
            for jj in range(G):
                acc += K[i, jj] * coef[e, jj]
            sq += coef[e, i] * acc
        sqv[e] = sq


@njit(cache=True)
def _sq_vector_nb(G, T, E, rowid, cellid, pa, pn, coefT, scr, rsc, stc, strw, gid, cell, sqv):
    """``sqv[e] = ‖ĝ_e‖²`` from the group's sparse sums; also adds the group's cell sums to ``cell``.

    ``scr (P·E)`` and ``rsc (T·S·E)`` are zero on entry and on exit (each visited entry is read once
    and re-zeroed); ``stc (P)``/``strw (T·S)`` hold the id of the last group that read a cell/row, so
    one test per token (not per estimator) finds its first visit. Cost ``O(G·T·E)`` whatever the
    size of the parameter space.
    """
    for t in range(T):
        for i in range(G):
            kb = cellid[t, i] * E
            rb = rowid[t, i] * E
            for e in range(E):
                c = coefT[i, e]
                scr[kb + e] += c
                rsc[rb + e] += c
    for e in range(E):
        sqv[e] = 0.0
    for t in range(T):
        for i in range(G):
            k = cellid[t, i]
            if stc[k] != gid:
                stc[k] = gid
                kb = k * E
                rb = rowid[t, i] * E
                p2 = 2.0 * pa[t, i]
                for e in range(E):
                    v = scr[kb + e]
                    sqv[e] += v * (v - p2 * rsc[rb + e])
                    cell[kb + e] += v
                    scr[kb + e] = 0.0
    for t in range(T):
        for i in range(G):
            r = rowid[t, i]
            if strw[r] != gid:
                strw[r] = gid
                rb = r * E
                n2 = pn[t, i]
                for e in range(E):
                    v = rsc[rb + e]
                    sqv[e] += v * v * n2
                    rsc[rb + e] = 0.0


@njit(cache=True)
def _chunk_nb(tab, reward, s0, codes, eps, G, n_groups, seed, U, use_U, track, route, stats, gstats, cell, visited, scr, rsc,
              stc, strw, gid0):
    """Process ``n_groups`` groups of one chunk; write its scalar sums into ``stats``/``gstats``, add to ``cell``.

    ``tab``: :func:`pack_table` ``(T,S,V,8)``. Randomness: the uniforms ``U[g, i, t]`` if ``use_U``,
    else the xoshiro256+ stream :func:`~simulate.instances.rng_uniform_nb` seeded with ``seed`` here
    (one uniform per token, drawn in ``(g, t, i)`` order).
    Outputs: ``stats (NQ,E,2)`` and ``gstats (NG,2)`` (overwritten) get sums and sums of squares
    over groups; when ``track``, ``cell (T·S·V·E,)`` (added to) gets ``Σ_groups Σ_{i,t: (t,s_{i,t},a_{i,t}) = cell} c_{i,e}``
    with ``c_{i,e} = w_{i,e} A_i / G``, and ``visited (T·S,)`` marks the rows seen.
    ``route``: :data:`ROUTES` value of ``‖ĝ‖²``; ``scr``, ``rsc``: zeroed scratch of the vector route,
    ``stc``, ``strw``: its first-visit stamps; group ``g`` of this chunk has stamp id ``gid0 + g``.
    """
    T, S, V, _ = tab.shape
    E = codes.shape[0]
    rng = ins.rng_seed_nb(seed)
    tG = G if track else 0
    rowid = np.empty((T, tG), dtype=np.int32)
    cellid = np.empty((T, tG), dtype=np.int32)
    pa = np.empty((T, tG))
    pn = np.empty((T, tG))
    sv = np.empty(G, dtype=np.int64)
    ell = np.empty(G)
    ssq = np.empty(G)
    R = np.empty(G)
    A = np.empty(G)
    rho = np.empty(G)
    logw = np.empty(G)
    coef = np.empty((E, G))
    coefT = np.empty((G, E))
    gG = G if (track and route == 0) else 0
    K = np.empty((gG, gG))
    sqv = np.empty(E)
    st = np.zeros((_NQ, E, 2))
    gs = np.zeros((_NG, 2))
    tf = tab.ravel()  # flat view: the line of (t, s, j) starts at 8·((t·S + s)·V + j)
    for g in range(n_groups):
        # --- sample G trajectories from μ. Its own function on purpose: inside this large body LLVM
        # kept the sampling loop's state in memory, and the split alone took the skipped path from
        # ~61 to ~120 M tokens/s on the same machine (LOG 2026-12-03)
        _sample_group_nb(tf, S, V, T, G, s0, U, g, use_U, rng, track, sv, ell, ssq, rowid, cellid, pa, pn)
        Rbar = 0.0
        for i in range(G):
            R[i] = reward[sv[i]]
            Rbar += R[i]
        Rbar /= G
        # --- group quantities (estimator-free)
        rb = 0.0
        r2 = 0.0
        c1 = 0.0
        for i in range(G):
            rho[i] = math.exp(ell[i])
            A[i] = R[i] - Rbar
            rb += rho[i]
            r2 += rho[i] * rho[i]
            c1 += rho[i] * A[i] * A[i] * ssq[i]
        gv0 = rb / G
        gv1 = r2 / G - 1.0
        gv2 = c1 / G
        gs[0, 0] += gv0
        gs[0, 1] += gv0 * gv0
        gs[1, 0] += gv1
        gs[1, 1] += gv1 * gv1
        gs[2, 0] += gv2
        gs[2, 1] += gv2 * gv2
        gs[3, 0] += Rbar
        gs[3, 1] += Rbar * Rbar
        # --- every estimator on the same group: registry weights, then 𝔅, removed mass, mean w, ESS
        for e in range(E):
            log_weights_nb(codes[e], ell, eps[e], logw)
            B = 0.0
            removed = 0.0
            s1 = 0.0
            s2 = 0.0
            mx = -np.inf
            for i in range(G):
                lw = logw[i]
                mx = max(mx, lw)
                w, b, r = weight_terms_nb(lw, ell[i], rho[i])
                B += b
                removed += r
                s1 += w
                s2 += w * w
                coef[e, i] = w * A[i] / G
            B /= G
            removed /= G
            mw = s1 / G
            if mx == -np.inf:
                es = 0.0
            elif -300.0 < mx < 300.0:  # Σw² neither under- nor overflows
                es = s1 * s1 / s2
            else:  # (Σw)²/Σw² with the max shifted out
                a1 = 0.0
                a2 = 0.0
                for i in range(G):
                    y = math.exp(logw[i] - mx)
                    a1 += y
                    a2 += y * y
                es = a1 * a1 / a2
            st[1, e, 0] += B
            st[1, e, 1] += B * B
            st[2, e, 0] += removed
            st[2, e, 1] += removed * removed
            st[3, e, 0] += mw
            st[3, e, 1] += mw * mw
            st[4, e, 0] += es
            st[4, e, 1] += es * es
        if track:
            for i in range(G):
                for e in range(E):
                    coefT[i, e] = coef[e, i]
            for t in range(T):
                for i in range(G):
                    visited[rowid[t, i]] = True
            if route == 0:
                _sq_gram_nb(G, T, E, rowid, cellid, pa, pn, coef, K, sqv)
                # ĝ's coefficient sums: one scatter of E numbers per token
                for t in range(T):
                    for i in range(G):
                        base = cellid[t, i] * E
                        for e in range(E):
                            cell[base + e] += coefT[i, e]
            else:
                _sq_vector_nb(G, T, E, rowid, cellid, pa, pn, coefT, scr, rsc, stc, strw, gid0 + g, cell, sqv)
            for e in range(E):
                st[0, e, 0] += sqv[e]
                st[0, e, 1] += sqv[e] * sqv[e]
    for q in range(_NQ):
        for e in range(E):
            stats[q, e, 0] = st[q, e, 0]
            stats[q, e, 1] = st[q, e, 1]
    for q in range(_NG):
        gstats[q, 0] = gs[q, 0]
        gstats[q, 1] = gs[q, 1]


@njit(cache=True, parallel=True)
def mc_kernel(tab, reward, s0, codes, eps, G, n_per_chunk, seeds, U, use_U, track, route, n_batches, cell, row):
    """All batches in parallel (``prange``); batch ``b`` runs chunks ``b·k … (b+1)·k − 1`` in order (``k = C/B``).

    Returns ``stats (C,NQ,E,2)`` and ``gstats (C,NG,2)`` (chunk ``c`` owns ``[c]``); when ``track``,
    adds to ``cell (B, T·S·V·E)`` and ``row (B, T·S·E)`` (zeroed by the caller) the batch's sums
    ``C`` and ``C_row[t,s,e] = Σ_a C[t,s,a,e]`` (formed once per batch over the visited rows).
    """
    n_chunks = seeds.shape[0]
    E = codes.shape[0]
    T, S, V, _ = tab.shape
    per_batch = n_chunks // n_batches
    stats = np.zeros((n_chunks, _NQ, E, 2))
    gstats = np.zeros((n_chunks, _NG, 2))
    vec = track and route == 1
    for b in prange(n_batches):
        visited = np.zeros(T * S if track else 0, dtype=np.bool_)
        scr = np.zeros(T * S * V * E if vec else 0)
        rsc = np.zeros(T * S * E if vec else 0)
        stc = np.full(T * S * V if vec else 0, -1, dtype=np.int64)
        strw = np.full(T * S if vec else 0, -1, dtype=np.int64)
        cb = cell[b]
        for c in range(b * per_batch, (b + 1) * per_batch):
            Uc = U[c] if use_U else U[0]
            _chunk_nb(tab, reward, s0, codes, eps, G, n_per_chunk, seeds[c], Uc, use_U, track, route,
                      stats[c], gstats[c], cb, visited, scr, rsc, stc, strw, c * n_per_chunk)
        if track:
            rwb = row[b]
            for rw in range(T * S):
                if visited[rw]:
                    for a in range(V):
                        base = (rw * V + a) * E
                        for e in range(E):
                            rwb[rw * E + e] += cb[base + e]
    return stats, gstats
