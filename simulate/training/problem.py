"""The instance as the training kernel reads it (:data:`Problem`, made once per batch): transitions, rewards, start
states and their law, features ``Φ`` in dense and CSR forms, and the row maps that let rows sharing their logits
compute them once (issue 37), and the block maps that sum ``Φᵀg`` once per distinct feature block (issue 59).

Row ``r = t·S + s`` of the ``(T·S, V)`` logits. With features ``θ = Φw``, two rows with bit-equal feature blocks have
bit-equal logits (the same sum of the same products in the same order), so ``θ`` is computed on one of them and
copied; ``log π``, ``π`` and the ``χ²`` terms are computed on the sources of the *reachable* rows only. A row no
path from a start visits has zero occupancy and zero ``χ²`` mass: only the backward value pass of ``J`` reads its
``π`` (never written, so 0), and those values feed no reachable row. An LM-like policy whose features
repeat over positions computes ``S`` rows instead of ``T·S``; every recorded number is unchanged
(``tests/test_kernel_row_maps.py``, ``tests/test_kernel_identity.py``).

``Φᵀg`` by blocks (:data:`BLOCK_MAPS`, issue 59): with ``b(r)`` the distinct feature block of row ``r`` (its first
row with a bit-equal block), ``(Φᵀg)_j = Σ_b Σ_a Φ_{(b,a),j} G_{b,a}``, ``G_{b,a} = Σ_{r: b(r)=b} g_{r,a}`` (rows
ascending, blocks ascending, then ``a``): ``p·V`` products per block instead of per row. It equals ``Σ_i Φ_ij g_i``
up to the order of the sum (≈ 1e-15 relative); the maps do not depend on ``share``, so a kernel that computes
every row sums ``Φᵀg`` in the same order.
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

from simulate.instances import start_law_nb

#: The instance, fixed for a batch: transitions, rewards, start states, the start law ``d₀`` (uniform over
#: ``starts``), features ``Φ``, the source rows' ``Φᵀ`` packed (``phiT[j, u·V + a] = Φ[theta_rows[u]·V + a, j]``),
#: ``Φ`` as CSR rows (for ``Φᵀg``) and the source rows' part of ``Φ`` as CSR columns (for ``θ = Φw`` on
#: ``theta_rows``, :func:`~simulate.training.params.logits_nb`), used when ``sparse``, flags, the row maps
#: (:data:`ROW_MAPS`) and the block maps (:data:`BLOCK_MAPS`).
Problem = namedtuple("Problem", ["next_state", "reward", "step_reward", "starts", "d0", "use_phi", "bernoulli",
                                 "phi", "phiT", "sparse", "row_ptr", "row_col", "row_val", "col_ptr", "col_row",
                                 "col_val", "theta_rows", "theta_src", "lp_rows", "copy_rows", "grad_rows", "grad_blk",
                                 "blk_src", "par_idx"])
#: The row maps of a :data:`Problem` (:func:`row_maps_nb`), row ``r = t·S + s`` of the ``(T·S, V)`` logits: the rows
#: whose ``θ`` is computed (``theta_rows``), each row's source (``theta_src[r] = r`` or an earlier row with the same
#: features, hence the same logits), the rows whose ``log π`` and ``π`` are computed (``lp_rows``) and the reachable
#: rows that copy them from their source (``copy_rows``).
ROW_MAPS = ("theta_rows", "theta_src", "lp_rows", "copy_rows")
#: The block maps of a :data:`Problem` (:func:`block_maps_nb`): the reachable rows (``grad_rows``, ascending; only they
#: carry a nonzero ``∇_θ J`` or ``ĝ``), the block of each (``grad_blk``) and each block's first row (``blk_src``).
BLOCK_MAPS = ("grad_rows", "grad_blk", "blk_src")
#: ``par_idx``: the parameters a step can move, ascending: every ``w_j`` of a feature policy; of a tabular one the
#: entries of the reachable rows (an unreachable row's ``ĝ`` and ``∇J`` are 0, so its ``w`` stays ``w_0`` under SGD
#: and Adam, and the sums over ``j`` that skip it skip exact zeros).
#: ``Φ`` products run over its nonzero entries (CSR) below this density, else over the dense rows (vectorised)
SPARSE_BELOW = 0.25


@njit(cache=True)
def csr_nb(a):
    """CSR form ``(ptr, idx, val)`` of the nonzero entries of a 2-D array, row by row, columns ascending."""
    n, m = a.shape
    ptr = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        c = 0
        for j in range(m):
            if a[i, j] != 0.0:
                c += 1
        ptr[i + 1] = ptr[i] + c
    idx = np.empty(ptr[n], dtype=np.int64)
    val = np.empty(ptr[n])
    for i in range(n):
        c = ptr[i]
        for j in range(m):
            if a[i, j] != 0.0:
                idx[c] = j
                val[c] = a[i, j]
                c += 1
    return ptr, idx, val


@njit(cache=True)
def reachable_nb(next_state, starts):
    """``reach[t, s]``: whether ``(t, s)`` is on some path from a start state (any action at every step). A row
    outside it is never visited and has zero occupancy and zero ``χ²`` mass (module docstring)."""
    T, S, V = next_state.shape
    reach = np.zeros((T, S), dtype=np.bool_)
    for c in range(starts.shape[0]):
        reach[0, starts[c]] = True
    for t in range(T - 1):
        for s in range(S):
            if reach[t, s]:
                for a in range(V):
                    reach[t + 1, next_state[t, s, a]] = True
    return reach


@njit(cache=True)
def _same_row_nb(phi, V, r, q):
    """Whether logit rows ``r`` and ``q`` have bit-equal feature blocks ``Φ[rV:(r+1)V]`` and ``Φ[qV:(q+1)V]``."""
    for i in range(V):
        for j in range(phi.shape[1]):
            x = phi[r * V + i, j]
            y = phi[q * V + i, j]
            if not (x == y and math.copysign(1.0, x) == math.copysign(1.0, y)):
                return False
    return True


@njit(cache=True)
def _block_keys_nb(phi, V, R):
    """A 64-bit hash of each row's feature block (equal blocks, equal keys; ``±0`` hash alike, which the exact
    comparison of :func:`_same_row_nb` then separates)."""
    key = np.empty(R, dtype=np.int64)
    for r in range(R):
        h = np.uint64(1469598103934665603)  # FNV-1a over the entries' hashes
        for i in range(V):
            for j in range(phi.shape[1]):
                h = (h ^ np.uint64(hash(phi[r * V + i, j]) & 0xFFFFFFFFFFFF)) * np.uint64(1099511628211)
        key[r] = np.int64(h >> np.uint64(1))
    return key


@njit(cache=True)
def row_maps_nb(next_state, starts, phi, use_phi, share):
    """The row maps of :data:`ROW_MAPS`. With features, row ``r`` takes ``θ`` (and ``log π``, ``π``) from the first
    row with a bit-equal feature block (``θ_r = Φ_r w`` is then the same sum of the same products), so a policy
    whose features repeat over positions or states (an LM's, shared across ``t``) computes each distinct row once;
    ``log π`` is computed only for sources of reachable rows (:func:`reachable_nb`). Tabular: every row is its own
    source. Rows are visited in ascending order, so a computed row's arithmetic is unchanged. ``share=False``
    gives the maps that compute every row (the reference the sharing is tested against). Cost: a stable sort of
    the rows' block hashes, then comparisons within equal hashes only."""
    T, S, V = next_state.shape
    R = T * S
    reach = reachable_nb(next_state, starts).reshape(R)
    if not share:
        reach[:] = True
    theta_src = np.arange(R)
    if use_phi and share:
        key = _block_keys_nb(phi, V, R)
        order = np.argsort(key, kind="mergesort")  # stable: rows of one key stay in ascending order
        lo = 0
        while lo < R:
            hi = lo + 1
            while hi < R and key[order[hi]] == key[order[lo]]:
                hi += 1
            for x in range(lo + 1, hi):  # each row against the earlier sources of its key
                r = order[x]
                for y in range(lo, x):
                    q = order[y]
                    if theta_src[q] == q and _same_row_nb(phi, V, r, q):
                        theta_src[r] = q
                        break
            lo = hi
    theta_rows = np.nonzero(theta_src == np.arange(R))[0]
    needed = np.zeros(R, dtype=np.bool_)
    for r in range(R):
        if reach[r]:
            needed[theta_src[r]] = True
    lp_rows = np.nonzero(needed)[0]
    copy_rows = np.nonzero(reach & (theta_src != np.arange(R)))[0]
    return theta_rows, theta_src, lp_rows, copy_rows


@njit(cache=True)
def block_maps_nb(next_state, starts, phi, use_phi):
    """The block maps of :data:`BLOCK_MAPS` (module docstring): the reachable rows, each one's block index among the
    blocks they use (blocks in ascending order of their first row, :func:`row_maps_nb`'s sources), and those first
    rows. The same with or without row sharing; tabular: every reachable row is its own block."""
    T, S, V = next_state.shape
    R = T * S
    reach = reachable_nb(next_state, starts).reshape(R)
    src = row_maps_nb(next_state, starts, phi, use_phi, True)[1]
    rows = np.nonzero(reach)[0]
    used = np.zeros(R, dtype=np.bool_)
    for u in range(rows.shape[0]):
        used[src[rows[u]]] = True
    blk_src = np.nonzero(used)[0]
    index = np.full(R, -1, dtype=np.int64)
    for b in range(blk_src.shape[0]):
        index[blk_src[b]] = b
    blk = np.empty(rows.shape[0], dtype=np.int64)
    for u in range(rows.shape[0]):
        blk[u] = index[src[rows[u]]]
    return rows, blk, blk_src


@njit(cache=True)
def make_problem_nb(next_state, reward, step_reward, starts, phi, use_phi, bernoulli, share=True):
    """The :data:`Problem` of a batch; ``d₀(s) = Σ_c 1{starts[c] = s}/C``. ``θ = Φw`` by columns (CSR of ``Φᵀ``)
    runs over the rows of ``theta_rows`` only (the other rows' entries are left out of it); ``share``: whether
    rows share their computed logits (:func:`row_maps_nb`)."""
    d0 = start_law_nb(starts, next_state.shape[1])
    rp, rc, rv = csr_nb(phi)
    theta_rows, theta_src, lp_rows, copy_rows = row_maps_nb(next_state, starts, phi, use_phi, share)
    V = next_state.shape[2]
    phi_src = phi.copy()  # Φ with only the source rows' entries: their CSR columns give θ on those rows
    if use_phi:
        for r in range(theta_src.shape[0]):
            if theta_src[r] != r:
                phi_src[r * V:(r + 1) * V] = 0.0
    cp, cr, cv = csr_nb(np.ascontiguousarray(phi_src.T))
    # Φᵀ of the source rows only, packed: phiT[j, u·V + a] = Φ[theta_rows[u]·V + a, j] (θ = Φw as long AXPYs)
    phiT = np.empty((phi.shape[1], theta_rows.shape[0] * V))
    for u in range(theta_rows.shape[0]):
        for a in range(V):
            phiT[:, u * V + a] = phi[theta_rows[u] * V + a]
    sparse = rp[-1] < SPARSE_BELOW * phi.size
    grad_rows, grad_blk, blk_src = block_maps_nb(next_state, starts, phi, use_phi)
    if use_phi:
        par_idx = np.arange(phi.shape[1])
    else:
        par_idx = np.empty(grad_rows.shape[0] * V, dtype=np.int64)
        for u in range(grad_rows.shape[0]):
            for a in range(V):
                par_idx[u * V + a] = grad_rows[u] * V + a
    return Problem(next_state, reward, step_reward, starts, d0, use_phi, bernoulli, phi, phiT, sparse, rp, rc, rv, cp,
                   cr, cv, theta_rows, theta_src, lp_rows, copy_rows, grad_rows, grad_blk, blk_src, par_idx)


__all__ = ["BLOCK_MAPS", "Problem", "ROW_MAPS", "SPARSE_BELOW", "block_maps_nb", "csr_nb", "make_problem_nb",
           "reachable_nb", "row_maps_nb"]
