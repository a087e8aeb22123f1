"""Vectorised NumPy reference of the Monte Carlo kernel, and the per-group weight functionals it shares.

:func:`weight_functionals` is the one NumPy definition of ``w``, ``𝔅(w;ρ) = (1/G)Σ(ρ_i−w_i)²/ρ_i``
and the removed mass ``(1/G)Σ(ρ_i−w_i)`` (docs/THEORY.md §2), used by :func:`reference_mc` and by the
exact multiset sums of :mod:`.exact`; the Numba kernel is tested equal to it.
"""
from __future__ import annotations

import numpy as np

from asyncgrpo.estimators import reference
from simulate import instances as ins
from simulate.montecarlo.run import prepare, slots_of


def log_weights_batch(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Registry log-weights (:func:`asyncgrpo.estimators.reference.log_weights`) over rows of ``ℓ (n, G)``."""
    if name not in reference.CODES:
        raise ValueError(f"unknown estimator {name!r}; known estimators: {', '.join(reference.CODES)}")
    return reference.log_weights(name, ell, eps)


def cut_terms(logw: np.ndarray, ell: np.ndarray):
    """Elementwise ``(w, ρ f², ρ f)`` with ``f = 1 − w/ρ = −expm1(log w − ℓ)``: the summands of 𝔅 and the removed mass.

    Forming ``f`` by ``expm1`` avoids the ratio of two under/overflowed numbers; terms with ``f = 0``
    (weight not cut) are exactly 0 even where ``ρ`` overflows.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(logw)
        rho = np.exp(ell)
        f = -np.expm1(logw - ell)
        return w, np.where(f != 0.0, rho * f * f, 0.0), np.where(f != 0.0, rho * f, 0.0)


def weight_functionals(name: str, ell: np.ndarray, eps: float):
    """``(log w, w, 𝔅, removed)`` per group for log-ratios ``ℓ (n, G)`` (group means of :func:`cut_terms`)."""
    logw = log_weights_batch(name, ell, eps)
    w, b, r = cut_terms(logw, ell)
    return logw, w, b.mean(-1), r.mean(-1)


def reference_mc(mdp: ins.TabularMDP, theta, theta_mu, estimators, eps_list, uniforms) -> dict:
    """Vectorised NumPy version of the kernel on pre-drawn ``uniforms (n_groups, G, T)``.

    Returns per-group arrays: ``actions, states (n,G,T)``, ``ell, R (n,G)``, and for each slot
    ``(name, eps)`` a dict of per-group ``EST_QUANTITIES``, plus ``"grad_sum"`` ``(E,T,S,V)`` = ``Σ_groups ĝ``.
    """
    _, _, slots = slots_of(estimators, eps_list)
    U = np.asarray(uniforms, dtype=np.float64)
    n, G, T = U.shape
    prep = prepare(mdp, theta, theta_mu)
    V = mdp.V
    # sampling: one alias lookup per token, vectorised over all n·G trajectories at each t
    s = np.full((n, G), mdp.s0, dtype=np.int64)
    states = np.empty((n, G, T), dtype=np.int64)
    actions = np.empty((n, G, T), dtype=np.int64)
    for t in range(T):
        x = U[:, :, t] * V
        j = np.minimum(x.astype(np.int64), V - 1)
        a = np.where(x - j < prep.prob[t, s, j], j, prep.alias[t, s, j])
        states[:, :, t], actions[:, :, t] = s, a
        s = mdp.next_state[t, s, a]
    tt = np.arange(T)
    ell = prep.lr[tt, states, actions].sum(-1)
    ssq = prep.sn[tt, states, actions].sum(-1)
    R = mdp.reward[s]
    A = R - R.mean(axis=1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        rho = np.exp(ell)
    out = dict(actions=actions, states=states, ell=ell, R=R)
    out["group_mass"] = rho.mean(1)
    out["chi2"] = (rho * rho).mean(1) - 1.0
    out["c1_rhs"] = (rho * A * A * ssq).mean(1)
    out["mean_reward"] = R.mean(1)
    # sparse ĝ per group: sums per (group, cell) and (group, row) via unique keys
    P = mdp.n_params
    cell_idx = (tt * mdp.S + states) * V + actions  # (n,G,T) flat (t,s,a)
    row_idx = tt * mdp.S + states
    gid = np.broadcast_to(np.arange(n)[:, None, None], cell_idx.shape)
    ck, cinv = np.unique((gid * P + cell_idx).ravel(), return_inverse=True)
    rk, rinv = np.unique((gid * (T * mdp.S) + row_idx).ravel(), return_inverse=True)
    pi_flat = prep.pi.ravel()
    pin2_flat = prep.pin2.ravel()
    cell_row = (ck % P) // V  # row of each unique cell
    cell_grp = ck // P
    row_of_cell = np.searchsorted(rk, cell_grp * (T * mdp.S) + cell_row)
    per_slot = {}
    grad_sum = np.zeros((len(slots), T, mdp.S, V))
    for e, (nm, eps) in enumerate(slots):
        logw, w, B, removed = weight_functionals(nm, ell, eps)
        mx = logw.max(1, keepdims=True)
        with np.errstate(invalid="ignore"):
            uu = np.exp(logw - mx)
            ess_v = np.where(np.isfinite(mx[:, 0]), uu.sum(1) ** 2 / (uu * uu).sum(1), 0.0)
        coef = np.broadcast_to((w * A / G)[:, :, None], cell_idx.shape).ravel()
        C = np.bincount(cinv.ravel(), weights=coef, minlength=len(ck))
        Cr = np.bincount(rinv.ravel(), weights=coef, minlength=len(rk))
        sq_terms = C * (C - 2.0 * Cr[row_of_cell] * pi_flat[ck % P])
        sq = np.bincount(cell_grp, weights=sq_terms, minlength=n)
        sq += np.bincount(rk // (T * mdp.S), weights=Cr * Cr * pin2_flat[rk % (T * mdp.S)], minlength=n)
        gs = np.bincount(ck % P, weights=C, minlength=P).reshape(T, mdp.S, V)
        gs -= np.bincount(rk % (T * mdp.S), weights=Cr, minlength=T * mdp.S).reshape(T, mdp.S)[..., None] * prep.pi
        grad_sum[e] = gs
        per_slot[(nm, eps)] = dict(sq_norm=sq, bias_functional=B, removed_mass=removed, mean_weight=w.mean(1), ess=ess_v)
    out["slots"] = per_slot
    out["grad_sum"] = grad_sum
    return out
