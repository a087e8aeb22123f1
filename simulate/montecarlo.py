"""Monte Carlo of estimator bias and second moment under controlled staleness (THEORY §1–§3).

One pass draws ``n_groups`` groups of ``G`` trajectories ``τ_1..τ_G ∼ μ`` on a
:class:`~simulate.instances.TabularMDP`, forms ``ℓ_i = log π_θ(τ_i) − log μ(τ_i)``,
``A_i = R_i − R̄`` and evaluates **every** requested estimator (``w = W_ε(ℓ)`` from the
registry's Numba kernels) on the **same** samples (common random numbers)::

    ĝ = (1/G) Σ_i w_i A_i s_θ(τ_i),   s_θ(τ) = Σ_t (e_{a_t} − π_θ(·|s_t)) on row (t, s_t).

Per group and estimator it records ``‖ĝ‖²``, ``𝔅(w;ρ) = (1/G)Σ(ρ_i−w_i)²/ρ_i``, the removed
mass ``(1/G)Σ(ρ_i−w_i)``, the mean weight ``(1/G)Σw_i`` and the ESS ``(Σw)²/Σw²``; per group
``ρ̄``, the unbiased ``χ²`` estimate ``(1/G)Σρ_i² − 1``, ``R̄`` and the C1 right-hand side
``Ŝ = (1/G)Σ ρ_i A_i² ‖s_θ(τ_i)‖²``. Means come with standard errors ``σ̂/√n_groups``.

``ĝ`` itself is accumulated sparsely: for row ``(t,s)``, ``Σ c (e_a − π) = C[t,s,·] − C_row[t,s]·π``,
where ``C`` sums the coefficients ``c_i = w_i A_i/G`` per visited cell and ``C_row`` per visited
row, so each token costs O(1) per estimator, not O(V). ``‖ĝ‖²`` per group follows from the same
sums: ``Σ_rows (Σ_a C_a² − 2 C_row ⟨C, π⟩ + C_row² ‖π‖²)``.

Randomness: ``n_chunks`` chunks, chunk ``c`` seeds Numba's RNG with ``seeds[c]`` (from
``np.random.SeedSequence(seed)``) and writes only its own slice of the outputs; chunks run in
parallel (``prange``) and are reduced in chunk order afterwards, so a seed gives bit-identical
numbers for any thread count. The bias vector's standard error uses the chunk means (batch means).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from asyncgrpo import estimators as est
from asyncgrpo.estimators import reference
from asyncgrpo.estimators.kernels import group_functionals_nb, log_weights_nb
from asyncgrpo.validation import check_eps, check_group_size
from simulate import instances as ins

__all__ = [
    "EST_QUANTITIES",
    "GROUP_QUANTITIES",
    "MCResult",
    "prepare",
    "run_mc",
    "reference_mc",
    "exact_expectations",
    "exact_second_moment_S",
    "bias_table",
    "make_instance",
    "INSTANCES",
]

#: Per-(group, estimator) quantities, in the kernel's order.
EST_QUANTITIES = ("sq_norm", "bias_functional", "removed_mass", "mean_weight", "ess")
#: Per-group, estimator-free quantities, in the kernel's order.
GROUP_QUANTITIES = ("group_mass", "chi2", "c1_rhs", "mean_reward")
_NQ = len(EST_QUANTITIES)
_NG = len(GROUP_QUANTITIES)


# --------------------------------------------------------------------------- Numba kernel


@njit(cache=True, inline="always")
def _ess_nb(logw):
    m = logw[0]
    for i in range(1, logw.shape[0]):
        m = max(m, logw[i])
    if m == -np.inf:
        return 0.0
    s1 = 0.0
    s2 = 0.0
    for i in range(logw.shape[0]):
        x = math.exp(logw[i] - m)
        s1 += x
        s2 += x * x
    return s1 * s1 / s2


@njit(cache=True)
def _chunk_nb(
    prob, alias, next_state, reward, s0, lr, sn, pi, pin2, codes, eps, G, n_groups, seed, U, use_U, track,
    stats, gstats, cell, row,
):
    """Process ``n_groups`` groups of one chunk; accumulate into this chunk's output slices.

    ``prob, alias``: alias tables of ``μ`` ``(T,S,V)``; ``lr = log π_θ − log μ`` ``(T,S,V)``;
    ``sn = ‖e_a − π_θ(·|s)‖² = 1 − 2π_θ(a|s) + ‖π_θ(·|s)‖²`` ``(T,S,V)``; ``pi = π_θ`` ``(T,S,V)``;
    ``pin2 = ‖π_θ(·|s)‖²`` ``(T,S)``. Randomness: uniforms ``U[g, i, t]`` if ``use_U`` else
    Numba's RNG seeded with ``seed`` (one uniform per token). ``stats (NQ,E,2)`` and
    ``gstats (NG,2)`` get sums and sums of squares; ``cell (T,S,V,E)``/``row (T,S,E)`` get the
    coefficient sums of ``ĝ`` when ``track``.
    """
    T, S, V = prob.shape
    E = codes.shape[0]
    if not use_U:
        np.random.seed(seed)
    u = np.empty((G, T))
    states = np.empty((G, T), dtype=np.int64)
    actions = np.empty((G, T), dtype=np.int64)
    ell = np.empty(G)
    ssq = np.empty(G)
    R = np.empty(G)
    logw = np.empty(G)
    coef = np.empty((G, E))
    sq = np.empty(E)
    if track:
        sc_cell = np.zeros((T, S, V, E))
        sc_row = np.zeros((T, S, E))
    for g in range(n_groups):
        if use_U:
            for i in range(G):
                for t in range(T):
                    u[i, t] = U[g, i, t]
        else:
            for i in range(G):
                for t in range(T):
                    u[i, t] = np.random.random()
        # --- sample G trajectories from μ, with ℓ_i and ‖s_θ(τ_i)‖² along the way
        Rbar = 0.0
        for i in range(G):
            s = s0
            l_acc = 0.0
            q_acc = 0.0
            for t in range(T):
                x = u[i, t] * V
                j = int(x)
                if j >= V:
                    j = V - 1
                a = j if x - j < prob[t, s, j] else alias[t, s, j]
                states[i, t] = s
                actions[i, t] = a
                l_acc += lr[t, s, a]
                q_acc += sn[t, s, a]
                s = next_state[t, s, a]
            ell[i] = l_acc
            ssq[i] = q_acc
            R[i] = reward[s]
            Rbar += R[i]
        Rbar /= G
        # --- group quantities (estimator-free)
        rb = 0.0
        r2 = 0.0
        c1 = 0.0
        for i in range(G):
            rho = math.exp(ell[i])
            A = R[i] - Rbar
            rb += rho
            r2 += rho * rho
            c1 += rho * A * A * ssq[i]
        gv0 = rb / G
        gv1 = r2 / G - 1.0
        gv2 = c1 / G
        gstats[0, 0] += gv0
        gstats[0, 1] += gv0 * gv0
        gstats[1, 0] += gv1
        gstats[1, 1] += gv1 * gv1
        gstats[2, 0] += gv2
        gstats[2, 1] += gv2 * gv2
        gstats[3, 0] += Rbar
        gstats[3, 1] += Rbar * Rbar
        # --- every estimator on the same group
        for e in range(E):
            log_weights_nb(codes[e], ell, eps[e], logw)
            _, B, removed, mw = group_functionals_nb(ell, logw)
            es = _ess_nb(logw)
            for i in range(G):
                coef[i, e] = math.exp(logw[i]) * (R[i] - Rbar) / G
            stats[1, e, 0] += B
            stats[1, e, 1] += B * B
            stats[2, e, 0] += removed
            stats[2, e, 1] += removed * removed
            stats[3, e, 0] += mw
            stats[3, e, 1] += mw * mw
            stats[4, e, 0] += es
            stats[4, e, 1] += es * es
        if track:
            # pass 1: coefficient sums per visited cell and row
            for i in range(G):
                for t in range(T):
                    s = states[i, t]
                    a = actions[i, t]
                    for e in range(E):
                        sc_cell[t, s, a, e] += coef[i, e]
                        sc_row[t, s, e] += coef[i, e]
            for e in range(E):
                sq[e] = 0.0
            # pass 2: Σ_a C_a² − 2 C_row C_a π_a over visited cells; zeroing makes revisits add 0
            for i in range(G):
                for t in range(T):
                    s = states[i, t]
                    a = actions[i, t]
                    p = pi[t, s, a]
                    for e in range(E):
                        C = sc_cell[t, s, a, e]
                        sq[e] += C * (C - 2.0 * sc_row[t, s, e] * p)
                        cell[t, s, a, e] += C
                        sc_cell[t, s, a, e] = 0.0
            # pass 3: C_row² ‖π‖² over visited rows
            for i in range(G):
                for t in range(T):
                    s = states[i, t]
                    p2 = pin2[t, s]
                    for e in range(E):
                        Cr = sc_row[t, s, e]
                        sq[e] += Cr * Cr * p2
                        row[t, s, e] += Cr
                        sc_row[t, s, e] = 0.0
            for e in range(E):
                stats[0, e, 0] += sq[e]
                stats[0, e, 1] += sq[e] * sq[e]


@njit(cache=True, parallel=True)
def _mc_kernel(prob, alias, next_state, reward, s0, lr, sn, pi, pin2, codes, eps, G, n_per_chunk, seeds, U, use_U, track):
    """All chunks in parallel (``prange``); chunk ``c`` owns ``[c]`` of every output."""
    n_chunks = seeds.shape[0]
    T, S, V = prob.shape
    E = codes.shape[0]
    stats = np.zeros((n_chunks, _NQ, E, 2))
    gstats = np.zeros((n_chunks, _NG, 2))
    if track:
        cell = np.zeros((n_chunks, T, S, V, E))
        row = np.zeros((n_chunks, T, S, E))
    else:
        cell = np.zeros((n_chunks, 1, 1, 1, E))
        row = np.zeros((n_chunks, 1, 1, E))
    for c in prange(n_chunks):
        Uc = U[c] if use_U else U[0]
        _chunk_nb(
            prob, alias, next_state, reward, s0, lr, sn, pi, pin2, codes, eps, G, n_per_chunk, seeds[c], Uc,
            use_U, track, stats[c], gstats[c], cell[c], row[c],
        )
    return stats, gstats, cell, row


# --------------------------------------------------------------------------- wrapper


@dataclass(frozen=True)
class Prepared:
    """Tables one Monte Carlo pass needs for the pair ``(θ, θ_μ)`` (see :func:`_chunk_nb`)."""

    prob: np.ndarray
    alias: np.ndarray
    lr: np.ndarray
    sn: np.ndarray
    pi: np.ndarray
    pin2: np.ndarray


def prepare(mdp: ins.TabularMDP, theta, theta_mu) -> Prepared:
    """Alias tables of ``μ`` and the per-cell tables ``ℓ``, ``‖e_a − π_θ‖²``, ``π_θ``, ``‖π_θ‖²``."""
    lp = ins.log_policy(mdp.check_theta(theta))
    lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    prob, alias = ins.alias_tables(lm)
    pi = np.exp(lp)
    pin2 = (pi * pi).sum(-1)
    return Prepared(prob, alias, lp - lm, 1.0 - 2.0 * pi + pin2[..., None], pi, pin2)


def _slots(estimators, eps_list):
    """Distinct ``(name, eps)`` evaluations; ε-free estimators are evaluated once (at the first ε)."""
    names = [estimators] if isinstance(estimators, str) else list(estimators)
    for nm in names:
        if nm not in est.ESTIMATORS:
            raise ValueError(f"unknown estimator {nm!r}; known estimators: {', '.join(est.ESTIMATORS)}")
    eps_vals = [check_eps(e) for e in np.atleast_1d(eps_list)]
    slots = []
    for nm in names:
        for e in eps_vals if nm in ("tis", "tic", "gmc") else eps_vals[:1]:
            slots.append((nm, e))
    return names, eps_vals, slots


@dataclass(frozen=True)
class MCResult:
    """Output of :func:`run_mc` for one ``(θ, θ_μ, G)``; ``slots[e] = (name, eps)``.

    ``mean[q]``/``se[q]`` are arrays over slots for ``q`` in :data:`EST_QUANTITIES` and scalars for
    ``q`` in :data:`GROUP_QUANTITIES`; ``grad_chunks`` is ``(n_chunks, E, T, S, V)``, the chunk means
    of ``ĝ`` (``None`` without ``track_grad``).
    """

    slots: tuple
    G: int
    n: int
    n_chunks: int
    mean: dict = field(repr=False)
    se: dict = field(repr=False)
    cell: np.ndarray | None = field(repr=False, default=None)
    row: np.ndarray | None = field(repr=False, default=None)
    pi: np.ndarray | None = field(repr=False, default=None)

    @property
    def grad_chunks(self) -> np.ndarray | None:
        """Chunk means of ``ĝ``, ``(n_chunks, E, T, S, V)``: row ``(t,s)`` is ``C[t,s,a] − C_row[t,s]·π_θ(a|s)``.

        Formed on demand (it is the largest array of a run).
        """
        if self.cell is None:
            return None
        g = self.cell - self.row[:, :, :, None, :] * self.pi[None, :, :, :, None]
        return np.moveaxis(g, -1, 1) / (self.n // self.n_chunks)

    @property
    def grad_mean(self) -> np.ndarray:
        """``(1/n)Σ_groups ĝ`` per slot, shape ``(E, T, S, V)``."""
        cell, row = self.cell.sum(0), self.row.sum(0)
        return np.moveaxis(cell - row[:, :, None, :] * self.pi[..., None], -1, 0) / self.n

    @property
    def grad_se(self) -> np.ndarray:
        """Per-coordinate standard error of :attr:`grad_mean` from the chunk means (batch means)."""
        return self.grad_chunks.std(axis=0, ddof=1) / math.sqrt(self.n_chunks)

    def bias(self, target: np.ndarray, e: int) -> tuple[float, float, float]:
        """``(‖b̂‖_debiased, se, ‖b̂‖_raw)`` for ``b = E ĝ − target`` of slot ``e``.

        ``‖b̂‖² − tr Ĉov(ĝ̄)`` removes the noise floor ``E‖ĝ̄ − Eĝ‖²`` (clipped at 0); the standard
        error is the delta method ``√(b̂ᵀ Ĉov b̂)/‖b̂‖`` with ``Ĉov`` from the chunk means.
        """
        pe = self.pi.reshape(1, *self.pi.shape)
        m = (self.cell[..., e] - self.row[..., e][..., None] * pe).reshape(self.n_chunks, -1) / (self.n // self.n_chunks)
        b = m.mean(0) - np.asarray(target).ravel()
        raw2 = float(b @ b)
        floor = float(m.var(axis=0, ddof=1).sum() / self.n_chunks)
        nb = math.sqrt(raw2) if raw2 > 0 else 0.0
        se = float(np.std(m @ (b / nb), ddof=1) / math.sqrt(self.n_chunks)) if nb > 0 else math.sqrt(floor)
        return math.sqrt(max(raw2 - floor, 0.0)), se, nb


def _check_run_args(G, n_groups, n_chunks, seed):
    G = check_group_size(G)
    if isinstance(n_chunks, bool) or int(n_chunks) != n_chunks or n_chunks < 2:
        raise ValueError(f"n_chunks must be an integer >= 2 (chunk means give the standard errors), got {n_chunks!r}")
    if isinstance(n_groups, bool) or int(n_groups) != n_groups or n_groups < n_chunks:
        raise ValueError(f"n_groups must be an integer >= n_chunks = {n_chunks}, got {n_groups!r}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return G, int(n_groups), int(n_chunks), int(seed)


def chunk_seeds(seed: int, n_chunks: int) -> np.ndarray:
    """One 32-bit seed per chunk from ``np.random.SeedSequence(seed)`` (independent streams)."""
    return np.random.SeedSequence(seed).generate_state(n_chunks, dtype=np.uint32).astype(np.int64)


def run_mc(
    mdp: ins.TabularMDP,
    theta,
    theta_mu,
    estimators,
    eps_list,
    G: int,
    n_groups: int,
    seed: int = 0,
    *,
    n_chunks: int = 32,
    track_grad: bool = True,
    uniforms: np.ndarray | None = None,
    prepared: Prepared | None = None,
) -> MCResult:
    """One Monte Carlo pass: ``n_groups`` groups of size ``G`` from ``μ = π_{θ_μ}``, all estimators.

    ``n_groups`` is rounded down to a multiple of ``n_chunks``. ``uniforms`` (``(n_groups, G, T)``
    in ``[0,1)``) replaces the seeded RNG (for the NumPy-reference test). ``track_grad=False``
    skips ``ĝ`` (no ``sq_norm``, no bias vector) and is ~3× faster.
    """
    G, n_groups, n_chunks, seed = _check_run_args(G, n_groups, n_chunks, seed)
    _, _, slots = _slots(estimators, eps_list)
    per = n_groups // n_chunks
    n = per * n_chunks
    prep = prepared if prepared is not None else prepare(mdp, theta, theta_mu)
    codes = np.array([reference.CODES[nm] for nm, _ in slots], dtype=np.int64)
    epsv = np.array([e for _, e in slots])
    if uniforms is not None:
        U = np.asarray(uniforms, dtype=np.float64)
        if U.shape != (n, G, mdp.T):
            raise ValueError(f"uniforms must have shape (n_groups, G, T) = {(n, G, mdp.T)}, got {U.shape}")
        if U.min() < 0.0 or U.max() >= 1.0:
            raise ValueError("uniforms must lie in [0, 1)")
        U = np.ascontiguousarray(U.reshape(n_chunks, per, G, mdp.T))
        use_U = True
    else:
        U = np.zeros((1, 1, 1, 1))
        use_U = False
    seeds = chunk_seeds(seed, n_chunks)
    with np.errstate(over="ignore", invalid="ignore"):
        stats, gstats, cell, row = _mc_kernel(
            prep.prob, prep.alias, mdp.next_state, mdp.reward, mdp.s0, prep.lr, prep.sn, prep.pi, prep.pin2,
            codes, epsv, G, per, seeds, U, use_U, bool(track_grad),
        )
    tot = stats.sum(axis=0)
    mean, se = {}, {}
    for q, name in enumerate(EST_QUANTITIES):
        m = tot[q, :, 0] / n
        var = np.maximum(tot[q, :, 1] / n - m * m, 0.0) * n / (n - 1)
        mean[name], se[name] = m, np.sqrt(var / n)
    gt = gstats.sum(axis=0)
    for q, name in enumerate(GROUP_QUANTITIES):
        m = gt[q, 0] / n
        mean[name], se[name] = float(m), float(math.sqrt(max(gt[q, 1] / n - m * m, 0.0) * n / (n - 1) / n))
    if not track_grad:
        mean["sq_norm"] = np.full(len(slots), np.nan)
        se["sq_norm"] = np.full(len(slots), np.nan)
        return MCResult(tuple(slots), G, n, n_chunks, mean, se)
    return MCResult(tuple(slots), G, n, n_chunks, mean, se, cell, row, prep.pi)


# --------------------------------------------------------------------------- NumPy reference


def _log_weights_batch(name: str, ell: np.ndarray, eps: float) -> np.ndarray:
    """Registry log-weights (:func:`asyncgrpo.estimators.reference.log_weights`) over rows of ``ℓ (n, G)``."""
    if name not in reference.CODES:
        raise ValueError(f"unknown estimator {name!r}")
    return reference.log_weights(name, ell, eps)


def reference_mc(mdp: ins.TabularMDP, theta, theta_mu, estimators, eps_list, uniforms) -> dict:
    """Vectorised NumPy version of the kernel on pre-drawn ``uniforms (n_groups, G, T)``.

    Returns per-group arrays: ``actions, states (n,G,T)``, ``ell, R (n,G)``, and for each slot
    ``(name, eps)`` a dict of per-group ``EST_QUANTITIES``, plus ``"grad_sum"`` ``(E,T,S,V)`` = ``Σ_groups ĝ``.
    """
    _, _, slots = _slots(estimators, eps_list)
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
        with np.errstate(over="ignore", invalid="ignore"):
            logw = _log_weights_batch(nm, ell, eps)
            w = np.exp(logw)
            f = -np.expm1(logw - ell)
            B = np.where(f != 0.0, rho * f * f, 0.0).mean(1)
            removed = np.where(f != 0.0, rho * f, 0.0).mean(1)
        mx = logw.max(1, keepdims=True)
        with np.errstate(invalid="ignore"):
            uu = np.exp(logw - mx)
            ess_v = np.where(np.isfinite(mx[:, 0]), uu.sum(1) ** 2 / (uu * uu).sum(1), 0.0)
        coef = np.broadcast_to((w * A / G)[:, :, None], cell_idx.shape).ravel()
        C = np.bincount(cinv, weights=coef, minlength=len(ck))
        Cr = np.bincount(rinv, weights=coef, minlength=len(rk))
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


# --------------------------------------------------------------------------- exact expectations

#: Largest number of G-multisets enumerated by :func:`exact_expectations` (group estimators).
MAX_TUPLES = 200_000
_PER_TRAJECTORY = ("onpolicy", "is", "tis", "tic")


def _n_multisets(N: int, G: int) -> int:
    return math.comb(N + G - 1, G)


@dataclass(frozen=True)
class PathAtoms:
    """Every path ``τ`` of an enumerable MDP as an atom (``N = V^T`` rows).

    ``log_mu (N,)``, ``ell (N,)`` = ``ℓ(τ)``, ``R (N,)``, ``states``/``actions (N,T)`` and ``pi = π_θ``;
    :meth:`score_dot` forms ``Σ_τ c_τ s_θ(τ)`` sparsely (``O(N·T)``, no ``(N, T·S·V)`` matrix).
    """

    log_mu: np.ndarray
    ell: np.ndarray
    R: np.ndarray
    states: np.ndarray
    actions: np.ndarray
    pi: np.ndarray

    def score_dot(self, coef: np.ndarray) -> np.ndarray:
        """``Σ_τ coef_τ s_θ(τ)`` of shape ``(T, S, V)``; row ``(t,s)``: ``Σ c (e_a − π(·|s))``."""
        T, S, V = self.pi.shape
        tt = np.arange(T)[None, :]
        c = np.broadcast_to(np.asarray(coef, dtype=np.float64)[:, None], self.states.shape).ravel()
        cell = np.bincount(((tt * S + self.states) * V + self.actions).ravel(), weights=c, minlength=T * S * V)
        row = np.bincount((tt * S + self.states).ravel(), weights=c, minlength=T * S)
        return cell.reshape(T, S, V) - row.reshape(T, S)[..., None] * self.pi

    def dense_score(self) -> np.ndarray:
        """``s_θ(τ)`` for every path as a dense ``(N, T·S·V)`` matrix (small ``N`` only)."""
        N, T = self.actions.shape
        score = np.zeros((N, *self.pi.shape))
        for t in range(T):
            score[np.arange(N), t, self.states[:, t]] -= self.pi[t, self.states[:, t]]
            score[np.arange(N), t, self.states[:, t], self.actions[:, t]] += 1.0
        return score.reshape(N, -1)


def path_atoms(mdp, theta, theta_mu) -> PathAtoms:
    """Enumerate every path once for the pair ``(θ, θ_μ)`` (``V^T ≤ 2^20``); see :class:`PathAtoms`."""
    lp = ins.log_policy(mdp.check_theta(theta))
    lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    actions, states, final = ins.enumerate_paths(mdp)
    tt = np.arange(mdp.T)
    return PathAtoms(
        lm[tt, states, actions].sum(1), (lp - lm)[tt, states, actions].sum(1), mdp.reward[final], states, actions, np.exp(lp)
    )


def exact_expectations(
    mdp, theta, theta_mu, name: str, eps: float, G: int, *, max_tuples: int = MAX_TUPLES, atoms=None
) -> dict:
    """Exact ``E[ĝ]`` (and, where cheap, ``E𝔅``, removed mass, mean weight, ``E‖ĝ‖²``) for one estimator.

    Returns a dict with key ``"grad"`` (``theta_shape``) and scalar keys from :data:`EST_QUANTITIES`;
    a value is ``None`` when no exact method applies. Methods, in order of preference:

    1. **Per-trajectory weights** (``onpolicy, is, tis, tic``: ``w_i = f(ρ_i)``), any ``G``. With
       ``A_i = (1 − 1/G) R_i − (1/G) Σ_{j≠i} R_j`` and the ``τ_j`` independent,
       ``E[w_i A_i s_i] = (1−1/G) E_μ[f(ρ)R s] − ((G−1)/G) E_μ[R] E_μ[f(ρ) s]``, so
       ``E ĝ = (1 − 1/G)·(E_μ[f(ρ) R s_θ] − E_μ[R]·E_μ[f(ρ) s_θ])``. The baseline cross-term is
       the second product. For ``is``: ``E_μ[ρ R s] = ∇J``, ``E_μ[ρ s] = E_π s = 0`` ⇒ ``(1−1/G)∇J``
       (C8). ``onpolicy``/``is`` use the forward–backward DP (any size); ``tis``/``tic`` sum over the
       ``V^T`` paths (needs ``V^T ≤ 2^20``). ``E𝔅 = E_μ[(ρ−w)²/ρ]``, removed mass ``E_μ[ρ−w]`` and
       mean weight ``E_μ w`` are per-trajectory too.
    2. **Any estimator** (``gmc``, ``snis``; also ``E‖ĝ‖²`` for all) by enumerating the
       ``C(N+G−1, G)`` multisets of ``G`` paths out of ``N = V^T`` with their multinomial
       probabilities under ``μ`` (bandits and tiny MDPs; at most ``max_tuples`` multisets).

    ``atoms``: the output of :func:`path_atoms` for ``(θ, θ_μ)``, to reuse across calls.
    """
    G = check_group_size(G)
    eps = check_eps(eps)
    if name not in est.ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; known estimators: {', '.join(est.ESTIMATORS)}")
    out = {"grad": None, **{q: None for q in EST_QUANTITIES}}
    N = mdp.V**mdp.T
    small_paths = N <= ins.MAX_ENUM_PATHS
    if name in ("onpolicy", "is"):
        lp = ins.log_policy(mdp.check_theta(theta))
        lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
        pi, mu = np.exp(lp), np.exp(lm)
        q = pi if name == "is" else mu  # μ·f(ρ) per step: ρ·μ = π, 1·μ = μ
        ones = np.ones(mdp.S)
        ER = float(ins._backward(mdp, mu, mdp.reward)[0][0, mdp.s0])
        fRs = ins.expected_score(mdp, q, mdp.reward, pi)
        fs = ins.expected_score(mdp, q, ones, pi)
        out["grad"] = (1.0 - 1.0 / G) * (fRs - ER * fs)
        if name == "is":
            out.update(bias_functional=0.0, removed_mass=0.0, mean_weight=1.0)
        else:  # w = 1: E(ρ−1)²/ρ = E_μ[1/ρ] − 1, removed E(ρ − 1) = 0
            out.update(bias_functional=ins.ratio_moment(mdp, theta, theta_mu, -1.0) - 1.0, removed_mass=0.0, mean_weight=1.0)
    elif name in _PER_TRAJECTORY and small_paths:
        atoms = path_atoms(mdp, theta, theta_mu) if atoms is None else atoms
        mu, rho, R = np.exp(atoms.log_mu), np.exp(atoms.ell), atoms.R
        w = np.exp(_log_weights_batch(name, atoms.ell[:, None], eps)[:, 0])
        ER = mu @ R
        out["grad"] = (1.0 - 1.0 / G) * atoms.score_dot(mu * w * (R - ER))
        out["bias_functional"] = float(mu @ ((rho - w) ** 2 / rho))
        out["removed_mass"] = float(mu @ (rho - w))
        out["mean_weight"] = float(mu @ w)
    if small_paths and _n_multisets(N, G) <= max_tuples:
        atoms = path_atoms(mdp, theta, theta_mu) if atoms is None else atoms
        grp = _exact_by_multisets(atoms, name, eps, G, mdp.theta_shape)
        for k, v in grp.items():
            if out.get(k) is None:
                out[k] = v
    return out


def _exact_by_multisets(atoms, name, eps, G, theta_shape) -> dict:
    """Sum over all G-multisets of paths, weighted by ``G!/Π n_k! · Π μ_k^{n_k}`` (see above)."""
    import itertools

    log_mu, ell_atom, R_atom, score = atoms.log_mu, atoms.ell, atoms.R, atoms.dense_score()
    N = len(log_mu)
    idx = np.array(list(itertools.combinations_with_replacement(range(N), G)), dtype=np.int64).reshape(-1, G)
    counts = np.zeros((idx.shape[0], N))
    np.add.at(counts, (np.arange(idx.shape[0])[:, None], idx), 1.0)
    from scipy.special import gammaln

    logP = gammaln(G + 1) - gammaln(counts + 1).sum(1) + counts @ log_mu
    P = np.exp(logP)
    ell = ell_atom[idx]
    with np.errstate(over="ignore", invalid="ignore"):
        logw = _log_weights_batch(name, ell, eps)
        w = np.exp(logw)
        rho = np.exp(ell)
        f = -np.expm1(logw - ell)
        B = np.where(f != 0.0, rho * f * f, 0.0).mean(1)
        removed = np.where(f != 0.0, rho * f, 0.0).mean(1)
    R = R_atom[idx]
    coef = w * (R - R.mean(1, keepdims=True)) / G
    ghat = np.zeros((idx.shape[0], score.shape[1]))
    for i in range(G):
        ghat += coef[:, i, None] * score[idx[:, i]]
    return dict(
        grad=(P @ ghat).reshape(theta_shape),
        sq_norm=float(P @ np.einsum("mp,mp->m", ghat, ghat)),
        bias_functional=float(P @ B),
        removed_mass=float(P @ removed),
        mean_weight=float(P @ w.mean(1)),
    )


def exact_second_moment_S(mdp, theta, theta_mu, G: int) -> float:
    """``S = E[ρ_1 A_1² ‖s_θ(τ_1)‖²]`` (τ_j ∼ μ), so that C1 reads ``E‖ĝ‖² ≤ (1+ε)·S = M₂(ε)``.

    Reweighting by ``ρ_1`` makes ``τ_1 ∼ π_θ`` while the other members stay ``∼ μ``; with
    ``a = 1−1/G``, ``Y = (1/G)Σ_{j≠1} R_j`` (``E Y = a J_μ``, ``E Y² = ((G−1)E_μR² + (G−1)(G−2)J_μ²)/G²``):
    ``S = a² E_π[R²‖s‖²] − 2a E_π[R‖s‖²] E Y + E_π[‖s‖²] E Y²``. At ``d = 0`` this is THEORY's
    ``E_{π_θ}[A²‖s_θ‖²]``. ``‖s_θ(τ)‖² = Σ_t (1 − 2π(a_t|s_t) + ‖π(·|s_t)‖²)`` is additive over
    steps, so each ``E_π[f(R)‖s‖²] = Σ_t Σ_{s,a} d_t(s) π(a|s) g_t(s,a) Q^f_t(s,a)`` by DP.
    """
    G = check_group_size(G)
    lp = ins.log_policy(mdp.check_theta(theta))
    lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    pi, mu = np.exp(lp), np.exp(lm)
    g = 1.0 - 2.0 * pi + (pi * pi).sum(-1, keepdims=True)
    d = ins._forward(mdp, pi)

    def e_pi_f_s2(f):
        _, Q = ins._backward(mdp, pi, f)
        return float((d[:-1, :, None] * pi * g * Q).sum())

    Jmu = float(ins._backward(mdp, mu, mdp.reward)[0][0, mdp.s0])
    Jmu2 = float(ins._backward(mdp, mu, mdp.reward**2)[0][0, mdp.s0])
    a = 1.0 - 1.0 / G
    EY = a * Jmu
    EY2 = ((G - 1) * Jmu2 + (G - 1) * (G - 2) * Jmu**2) / G**2
    return a * a * e_pi_f_s2(mdp.reward**2) - 2 * a * e_pi_f_s2(mdp.reward) * EY + e_pi_f_s2(np.ones(mdp.S)) * EY2


# --------------------------------------------------------------------------- instances and the tidy table


def _bandit_default(**kw):
    return ins.bandit(kw.pop("K", 3), kw.pop("rewards", [1.0, 0.4, 0.0]), **kw)


def _token_default(**kw):
    base = dict(V=4, T=8, state="count", reward="count_ge", k=3)
    base.update(kw)
    return ins.token_mdp(**base)


#: Named instances: ``name -> (constructor(**kw) -> TabularMDP, default θ scale, default η)``.
#: η is chosen so that ``χ²(π_θ‖μ)`` is O(0.01) at ``d = 2`` and O(0.1–1) at ``d = 8``.
INSTANCES = {
    "bandit": (_bandit_default, 1.0, 0.15),
    "token-mdp": (_token_default, 0.5, 0.1),
}


def make_instance(name: str, **kwargs) -> ins.TabularMDP:
    """The instance called ``name`` (:data:`INSTANCES`), constructor arguments overridable."""
    if name not in INSTANCES:
        raise ValueError(f"unknown instance {name!r}; known instances: {', '.join(INSTANCES)}")
    return INSTANCES[name][0](**kwargs)


def _bounds_module():
    try:
        from theory import bounds
    except ImportError:  # theory/ not installed or not written yet: bounds stay NaN
        return None
    return bounds


def _f(x):
    return float("nan") if x is None else float(x)


def bias_table(
    instance,
    estimators=("onpolicy", "is", "tis", "tic", "gmc", "snis"),
    eps_list=(0.2,),
    G_list=(4, 16, 64),
    delays=(0, 2, 8),
    n_groups: int = 20_000,
    seed: int = 0,
    *,
    eta: float | None = None,
    direction: str = "grad",
    theta=None,
    theta_path=None,
    n_chunks: int = 32,
    tail: str = "fourth",
    exact: bool = True,
    progress: bool = True,
    instance_kwargs: dict | None = None,
):
    """Tidy table of measured bias, second moment and 𝔅 against exact values and theory bounds.

    Parameters
    ----------
    instance : ``"bandit"``, ``"token-mdp"`` (see :data:`INSTANCES`) or a :class:`TabularMDP`.
    estimators, eps_list, G_list, delays : the grid; one Monte Carlo pass per ``(G, d)`` evaluates
        every ``(estimator, ε)`` on the same groups (common random numbers; the uniforms also repeat
        across ``d`` for a given ``G``).
    n_groups : groups per ``(G, d)`` (rounded down to a multiple of ``n_chunks``).
    eta, direction : staleness ``μ = π_{θ−d·η·u}`` (:func:`simulate.instances.stale_pair`);
        ``eta`` defaults to the instance's value in :data:`INSTANCES` (0.1 for a custom MDP).
    theta : current logits ``θ`` (default: ``random_theta(mdp, scale, seed=0)``).
    theta_path : optional recorded training run ``[θ_0, …, θ_k]``; then ``θ = θ_k`` and the pair for
        delay ``d`` is ``(θ_k, θ_{k−d})`` instead of :func:`stale_pair`.
    tail : inequality used by theory's C4 bounds (``"fourth"`` or ``"second"``).
    exact : also compute the exact value where a method exists (:func:`exact_expectations`).

    Returns
    -------
    ``pandas.DataFrame`` with columns ``instance, estimator, eps, G, d, quantity, value, se, bound,
    exact, n``; one row per (instance, estimator, ε, G, d, quantity). ``quantity`` is one of

    - ``grad_bias``: ``‖E ĝ − ∇J(θ)‖`` (noise floor removed, see :meth:`MCResult.bias`), exact from
      :func:`exact_expectations`; ``stale_bias``: ``‖E ĝ − (1−1/G)∇J‖``, the bias beyond the C8
      baseline term, i.e. ``‖E[(1/G)Σ(w_i−ρ_i)A_i s_i]‖`` (0 for ``is``); ``sq_norm``: ``E‖ĝ‖²``, bound ``M₂(ε) = (1+ε)·S`` (C1, estimators in
      ``𝒲_ε`` only, ``S`` from :func:`exact_second_moment_S`); ``bias_functional``: ``E𝔅(w;ρ)``, bound
      theory's C4 ``bias_bound``; ``removed_mass``: ``E(1/G)Σ(ρ_i−w_i)``, bound C7 for ``gmc``;
      ``mean_weight``; ``ess``.
    - with ``estimator = "-"`` and ``eps = NaN``: ``chi2`` (``(1/G)Σρ²−1``, exact ``χ²`` by DP),
      ``group_mass`` (exact 1), ``c1_rhs`` (``Ŝ``, exact ``S``), ``mean_reward`` (exact ``J(μ)``).

    ε-free estimators (``onpolicy``, ``is``, ``snis``) are evaluated once and repeated for each ε;
    ``bound``/``exact`` are NaN where theory/ or an exact method does not provide one.
    """
    import pandas as pd
    from tqdm.auto import tqdm

    kw = instance_kwargs or {}
    if isinstance(instance, ins.TabularMDP):
        mdp, scale, eta_default = instance, 0.5, 0.1
    else:
        mdp = make_instance(instance, **kw)
        _, scale, eta_default = INSTANCES[instance]
    eta = eta_default if eta is None else eta
    names, eps_vals, slots = _slots(estimators, eps_list)
    G_list = [check_group_size(g) for g in np.atleast_1d(G_list)]
    delays = [int(d) for d in np.atleast_1d(delays)]
    if any(d < 0 for d in delays):
        raise ValueError(f"delays must be integers >= 0, got {delays}")
    if theta_path is not None:
        path = [mdp.check_theta(th, "theta_path[k]") for th in theta_path]
        if max(delays) >= len(path):
            raise ValueError(f"delays must be < len(theta_path) = {len(path)}, got max delay {max(delays)}")
        theta = path[-1]
    theta = ins.random_theta(mdp, scale, seed=0) if theta is None else mdp.check_theta(theta)
    bounds = _bounds_module()
    grad_J = ins.exact_grad_J(mdp, theta)
    rows = []
    combos = [(G, d) for G in G_list for d in delays]
    for G, d in tqdm(combos, desc=f"bias {mdp.name}", disable=not progress):
        theta_mu = path[-1 - d] if theta_path is not None else ins.stale_pair(mdp, theta, d, eta, direction, seed)
        mom = ins.ratio_moments(mdp, theta, theta_mu)
        S = exact_second_moment_S(mdp, theta, theta_mu, G)
        lm = ins.log_policy(theta_mu)
        J_mu = float(ins._backward(mdp, np.exp(lm), mdp.reward)[0][0, mdp.s0])
        g_seed = int(np.random.SeedSequence([seed, G]).generate_state(1)[0])
        res = run_mc(mdp, theta, theta_mu, names, eps_vals, G, n_groups, g_seed, n_chunks=n_chunks)
        atoms = path_atoms(mdp, theta, theta_mu) if exact and mdp.V**mdp.T <= (1 << 16) else None
        base = dict(instance=mdp.name, G=G, d=d, n=res.n)
        is_target = (1.0 - 1.0 / G) * grad_J  # E ĝ_is (C8): the bias left is due to staleness alone
        for q, ex in (("chi2", mom["sigma2"]), ("group_mass", 1.0), ("c1_rhs", S), ("mean_reward", J_mu)):
            rows.append(dict(base, estimator="-", eps=np.nan, quantity=q, value=res.mean[q], se=res.se[q], bound=np.nan, exact=ex))
        for e, (nm, eps_slot) in enumerate(slots):
            b_val, b_se, _ = res.bias(grad_J, e)
            sb_val, sb_se, _ = res.bias(is_target, e)
            exact_vals = {}
            if exact:
                try:
                    exact_vals = exact_expectations(mdp, theta, theta_mu, nm, eps_slot, G, atoms=atoms)
                except ValueError:
                    exact_vals = {}
            ex_grad = exact_vals.get("grad")
            for eps in eps_vals if nm not in ("tis", "tic", "gmc") else [eps_slot]:
                r0 = dict(base, estimator=nm, eps=eps)
                rows.append(dict(r0, quantity="grad_bias", value=b_val, se=b_se, bound=np.nan,
                                 exact=np.nan if ex_grad is None else float(np.linalg.norm(ex_grad - grad_J))))
                rows.append(dict(r0, quantity="stale_bias", value=sb_val, se=sb_se, bound=np.nan,
                                 exact=np.nan if ex_grad is None else float(np.linalg.norm(ex_grad - is_target))))
                for q in EST_QUANTITIES:
                    bound = np.nan
                    if bounds is not None and nm in est.IN_CLASS:
                        if q == "sq_norm":
                            bound = _f(bounds.M2(eps, S))
                        elif q == "bias_functional":
                            bound = _f(bounds.bias_bound(nm, eps, G, sigma2=mom["sigma2"], mu4=mom["mu4"], m_tic=mom["m_tic"], tail=tail))
                        elif q == "removed_mass" and nm == "gmc":
                            bound = _f(bounds.gmc_removed_mass_bound(eps, G, mom["sigma2"]))
                    rows.append(dict(r0, quantity=q, value=float(res.mean[q][e]), se=float(res.se[q][e]), bound=bound,
                                     exact=_f(exact_vals.get(q))))
    cols = ["instance", "estimator", "eps", "G", "d", "quantity", "value", "se", "bound", "exact", "n"]
    return pd.DataFrame(rows, columns=cols)
