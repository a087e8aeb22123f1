"""The policy's parameterisation in the training kernel: logits ``θ = Φw`` (or ``θ = w``), the chain rule
``Φᵀg`` summed per distinct feature block (issue 59), the divergence check on ``θ``, and ``θ`` of the rows that
copy it written only where a run records it (:mod:`simulate.training.problem`'s row and block maps).

Compiled without Numba's reference counting, as the phases that call them (:mod:`simulate.training.phases`).
"""
from __future__ import annotations

from numba import njit


@njit(cache=True, _nrt=False)
def logits_nb(pb, ws):
    """``θ = Φw`` (``θ[i] = Σ_j Φ_ij w_j``, j ascending for every i) on the rows of ``pb.theta_rows`` for a feature
    policy, else ``θ = w``. The other rows are left stale: each is a copy of its source row (bit-equal features,
    hence sum, :func:`simulate.training.problem.row_maps_nb`), and only :func:`record_theta_nb` reads them."""
    T, S, V = ws.theta.shape
    flat = ws.theta.reshape(T * S * V)
    if not pb.use_phi:  # θ = w; the parameters no step moves were copied by make_workspace_nb
        for u in range(pb.par_idx.shape[0]):
            flat[pb.par_idx[u]] = ws.par[pb.par_idx[u]]
        return
    rows = pb.theta_rows
    if pb.sparse:
        for u in range(rows.shape[0]):
            base = rows[u] * V
            for a in range(V):
                flat[base + a] = 0.0
        for j in range(ws.par.shape[0]):
            wj = ws.par[j]
            for e in range(pb.col_ptr[j], pb.col_ptr[j + 1]):
                flat[pb.col_row[e]] += pb.col_val[e] * wj
        return
    # dense: the source rows packed (pb.phiT) in one long AXPY per j, each θ_i still summed over j = 0..p−1 in order
    x = ws.xbuf
    n = rows.shape[0] * V
    for i in range(n):
        x[i] = 0.0
    for j in range(ws.par.shape[0]):
        wj = ws.par[j]
        row = pb.phiT[j]
        for i in range(n):
            x[i] += row[i] * wj
    for u in range(rows.shape[0]):
        base = rows[u] * V
        for a in range(V):
            flat[base + a] = x[u * V + a]


@njit(cache=True, _nrt=False)
def record_theta_nb(pb, theta, out):
    """``out = θ`` on every row, a row that is not its own source (:func:`logits_nb` left it stale) taken from its
    source row."""
    T, S, V = theta.shape
    src = pb.theta_src
    for r in range(T * S):
        q = src[r]
        t, s = r // S, r - (r // S) * S
        tq, sq = q // S, q - (q // S) * S
        for a in range(V):
            out[t, s, a] = theta[tq, sq, a]


@njit(cache=True, _nrt=False)
def restore_nb(pb, ws, j):
    """``w = w_j`` from the ring buffer (written at step ``j``, still there at step ``j + 1``) and ``θ = Φw_j``."""
    old = ws.histw[j % ws.histw.shape[0]]
    for i in range(ws.par.shape[0]):
        ws.par[i] = old[i]
    logits_nb(pb, ws)


@njit(cache=True, _nrt=False)
def finite_logits_nb(pb, theta, theta_max, k):
    """``max|θ| ≤ θ_max`` and no NaN (the divergence check on ``θ_k``), over the rows :func:`logits_nb` computes (every
    other row is a copy of one of them); after step 0 of a tabular policy, over the entries a step moves
    (``pb.par_idx``: the others are still ``θ_0``'s, checked at step 0)."""
    V = theta.shape[2]
    flat = theta.reshape(theta.size)
    if k > 0 and not pb.use_phi:
        for u in range(pb.par_idx.shape[0]):
            if not (abs(flat[pb.par_idx[u]]) <= theta_max):  # also catches NaN
                return False
        return True
    rows = pb.theta_rows
    for u in range(rows.shape[0]):
        base = rows[u] * V
        for a in range(V):
            if not (abs(flat[base + a]) <= theta_max):
                return False
    return True


@njit(cache=True, _nrt=False)
def to_params_nb(pb, g_theta, gblk, out, seen, only_seen):
    """Chain rule through ``θ = Φw``: ``out = Φᵀ g_θ`` summed per distinct feature block (:mod:`simulate.training.problem`:
    ``G_b = Σ_{r ∈ b} g_r`` over the reachable rows, ascending, into ``gblk``, then ``Σ_b Φ_bᵀ G_b``, blocks and
    entries ascending; a zero ``G_{b,a}`` adds nothing); tabular: ``out = g_θ``. A row no path reaches has
    ``g_θ = 0`` (∇J: zero occupancy; ĝ: never sampled), so summing over the reachable rows drops only zeros. With
    ``only_seen`` (ĝ and its negative part, zero off the rows a sample visited) only the rows with ``seen[r]``
    are added: a block sum starts at +0 and a sum of nonzero terms is never −0, so adding a ±0 row leaves it
    unchanged, and the result is the full sum's bit for bit."""
    T, S, V = g_theta.shape
    flat = g_theta.reshape(T * S * V)
    if not pb.use_phi:  # out is 0 off pb.par_idx (make_workspace_nb), as g_θ there
        for u in range(pb.par_idx.shape[0]):
            out[pb.par_idx[u]] = flat[pb.par_idx[u]]
        return
    gblk[:] = 0.0
    rows, blk = pb.grad_rows, pb.grad_blk
    g2 = g_theta.reshape(T * S, V)  # row views, as the DPs
    for u in range(rows.shape[0]):
        r = rows[u]
        if only_seen and not seen[r]:
            continue
        gb = gblk[blk[u]]
        for a in range(V):
            gb[a] += g2[r, a]
    for j in range(out.shape[0]):
        out[j] = 0.0
    P = out.shape[0]
    for b in range(pb.blk_src.shape[0]):
        base = pb.blk_src[b] * V
        for a in range(V):
            gi = gblk[b, a]
            if gi != 0.0:
                i = base + a
                if pb.sparse:
                    for e in range(pb.row_ptr[i], pb.row_ptr[i + 1]):
                        out[pb.row_col[e]] += pb.row_val[e] * gi
                else:
                    phi_i = pb.phi[i]
                    for j in range(P):
                        out[j] += phi_i[j] * gi


@njit(cache=True, _nrt=False)
def to_params_pair_nb(pb, g_theta, h_theta, gblk, hblk, out_g, out_h, seen):
    """:func:`to_params_nb` of ``g_θ`` and ``h_θ`` at once with ``only_seen`` (ĝ and its negative part: both 0 off the
    rows ``seen``), reading each row of ``Φ`` once for both; each output's sums run in the order of its own call,
    so both are :func:`to_params_nb`'s bit for bit."""
    T, S, V = g_theta.shape
    fg = g_theta.reshape(T * S * V)
    fh = h_theta.reshape(T * S * V)
    if not pb.use_phi:
        for u in range(pb.par_idx.shape[0]):
            out_g[pb.par_idx[u]] = fg[pb.par_idx[u]]
            out_h[pb.par_idx[u]] = fh[pb.par_idx[u]]
        return
    gblk[:] = 0.0
    hblk[:] = 0.0
    rows, blk = pb.grad_rows, pb.grad_blk
    g2 = g_theta.reshape(T * S, V)  # row views, as the DPs
    h2 = h_theta.reshape(T * S, V)
    for u in range(rows.shape[0]):
        r = rows[u]
        if not seen[r]:
            continue
        gb = gblk[blk[u]]
        hb = hblk[blk[u]]
        for a in range(V):
            gb[a] += g2[r, a]
            hb[a] += h2[r, a]
    for j in range(out_g.shape[0]):
        out_g[j] = 0.0
        out_h[j] = 0.0
    for b in range(pb.blk_src.shape[0]):
        base = pb.blk_src[b] * V
        for a in range(V):
            gi = gblk[b, a]
            hi = hblk[b, a]
            if gi == 0.0 and hi == 0.0:
                continue
            i = base + a
            if pb.sparse:
                for e in range(pb.row_ptr[i], pb.row_ptr[i + 1]):
                    if gi != 0.0:
                        out_g[pb.row_col[e]] += pb.row_val[e] * gi
                    if hi != 0.0:
                        out_h[pb.row_col[e]] += pb.row_val[e] * hi
            else:
                phi_i = pb.phi[i]
                if gi != 0.0 and hi != 0.0:
                    for j in range(out_g.shape[0]):
                        out_g[j] += phi_i[j] * gi
                        out_h[j] += phi_i[j] * hi
                elif gi != 0.0:
                    for j in range(out_g.shape[0]):
                        out_g[j] += phi_i[j] * gi
                else:
                    for j in range(out_h.shape[0]):
                        out_h[j] += phi_i[j] * hi


__all__ = ["finite_logits_nb", "logits_nb", "record_theta_nb", "restore_nb", "to_params_nb", "to_params_pair_nb"]
