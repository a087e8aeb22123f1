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

Per token the kernel draws one uniform and reads 64 contiguous bytes of a packed table
(:func:`pack_table`: alias column, both outcomes' ``ℓ``, ``π_θ`` and next state); everything
per estimator is per trajectory. ``ĝ`` is accumulated sparsely: row ``(t,s)`` of
``Σ_i c_i s_θ(τ_i)`` is ``C[t,s,·] − C_row[t,s]·π_θ(·|s)``, where ``C`` sums the coefficients
``c_i = w_i A_i/G`` per visited cell (one scatter of ``E`` numbers per token) and
``C_row = Σ_a C`` is formed once per chunk over the visited rows. ``‖ĝ‖² = cᵀKc`` per group
and estimator uses the estimator-free Gram matrix ``K_ij = ⟨s_θ(τ_i), s_θ(τ_j)⟩`` (``G²T``
vectorised selects per group, independent of the number of estimators).

Randomness: ``n_chunks`` chunks; chunk ``c`` draws its uniforms from a xoshiro256+ stream
(:func:`simulate.instances.rng_uniform_nb`) seeded with ``seeds[c]`` (from
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
from asyncgrpo.estimators.kernels import log_weights_nb
from asyncgrpo.validation import check_eps, check_group_size
from simulate import instances as ins

__all__ = [
    "EST_QUANTITIES",
    "GROUP_QUANTITIES",
    "MCResult",
    "prepare",
    "pack_table",
    "chunk_seeds",
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

#: Slots of the packed per-``(t, s, j)`` sampling table (64 contiguous bytes per alias column).
_TAB_PROB, _TAB_KEEP, _TAB_ALIAS, _TAB_PIN2 = 0, 1, 4, 7
#: Shift of the action in the encoded outcome ``enc = a·2^16 + s'`` (see :func:`pack_table`).
_ENC_SHIFT = 16


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
    tab = np.empty((T, S, V, 8))
    j = np.broadcast_to(np.arange(V), (T, S, V))
    for off, act in ((_TAB_KEEP, j), (_TAB_ALIAS, alias)):
        tab[..., off] = act * float(1 << _ENC_SHIFT) + np.take_along_axis(next_state, act, axis=-1)
        tab[..., off + 1] = np.take_along_axis(lr, act, axis=-1)
        tab[..., off + 2] = np.take_along_axis(pi, act, axis=-1)
    tab[..., _TAB_PROB] = prob
    tab[..., _TAB_PIN2] = pin2[..., None]
    return tab


@njit(cache=True)
def _chunk_nb(tab, reward, s0, codes, eps, G, n_groups, seed, U, use_U, track, stats, gstats, cell, row):
    """Process ``n_groups`` groups of one chunk; write this chunk's sums into ``stats``, ``gstats``, ``cell``.

    ``tab``: :func:`pack_table` ``(T,S,V,8)``. Randomness: the uniforms ``U[g, i, t]`` if ``use_U``,
    else the xoshiro256+ stream :func:`~simulate.instances.rng_uniform_nb` seeded with ``seed`` here
    (one uniform per token, drawn in ``(g, t, i)`` order).
    Outputs: ``stats (NQ,E,2)`` and ``gstats (NG,2)`` (overwritten) get sums and sums of squares
    over groups; ``cell (T·S·V·E,)`` (added to; zeroed by the caller) gets ``Σ_groups Σ_{i,t: (t,s_{i,t},a_{i,t}) = cell} c_{i,e}``,
    ``c_{i,e} = w_{i,e} A_i / G``, and ``row (T·S·E,)`` (added to) the row sums ``C_row[t,s,e] = Σ_a cell[t,s,a,e]``
    (when ``track``).

    ``‖ĝ_e‖² = c_eᵀ K c_e`` with the estimator-free Gram matrix of the scores,
    ``K_ij = ⟨s_θ(τ_i), s_θ(τ_j)⟩ = Σ_t 1{s_{i,t}=s_{j,t}} (1{a_{i,t}=a_{j,t}} − π(a_{i,t}) − π(a_{j,t}) + ‖π‖²)``
    (rows ``(t,s)`` of the tabular score are ``e_a − π_θ(·|s)``), so the per-token work of ``‖ĝ‖²`` does
    not grow with the number of estimators.
    """
    T, S, V, _ = tab.shape
    E = codes.shape[0]
    rng = ins.rng_seed_nb(seed)
    rowid = np.empty((T, G), dtype=np.int64)
    cellid = np.empty((T, G), dtype=np.int64)
    pa = np.empty((T, G))
    pn = np.empty((T, G))
    sv = np.empty(G, dtype=np.int64)
    ell = np.empty(G)
    ssq = np.empty(G)
    R = np.empty(G)
    A = np.empty(G)
    rho = np.empty(G)
    logw = np.empty(G)
    coef = np.empty((E, G))
    K = np.empty((G, G))
    coefT = np.empty((G, E))
    visited = np.zeros(T * S if track else 0, dtype=np.bool_)
    st = np.zeros((_NQ, E, 2))
    gs = np.zeros((_NG, 2))
    mask = (1 << _ENC_SHIFT) - 1
    tf = tab.ravel()  # flat view: the line of (t, s, j) starts at 8·((t·S + s)·V + j)
    for g in range(n_groups):
        # --- sample G trajectories from μ: one uniform and one table line per token. Time-major: the
        # G trajectories are independent chains s_t → line → s_{t+1}, so interleaving them hides the
        # latency of each dependent load (trajectory-major runs one chain at a time)
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
                d = lw - ell[i]
                # most maps leave most weights unclipped (w_i = ρ_i, d = 0) or at w_i = 1: reuse ρ_i and
                # skip the transcendental calls; the values are bit-identical to exp/expm1
                if d != 0.0:
                    f = -math.expm1(d)  # f = 1 − w/ρ without a ratio of two under/overflowed numbers
                    if f != 0.0:
                        B += rho[i] * f * f
                        removed += rho[i] * f
                    w = 1.0 if lw == 0.0 else math.exp(lw)
                else:
                    w = rho[i]
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
            # Gram matrix of the scores, all G² entries (the diagonal is ‖s_θ(τ_i)‖²): rows of equal
            # length vectorise, and selects instead of branches (row equality is a coin flip)
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
                st[0, e, 0] += sq
                st[0, e, 1] += sq * sq
            # ĝ's coefficient sums: one scatter of E numbers per token
            for i in range(G):
                for e in range(E):
                    coefT[i, e] = coef[e, i]
            for t in range(T):
                for i in range(G):
                    visited[rowid[t, i]] = True
                    base = cellid[t, i] * E
                    for e in range(E):
                        cell[base + e] += coefT[i, e]
    if track:
        # C_row[t,s,e] = Σ_a C[t,s,a,e] (every visit of row (t,s) adds to exactly one of its cells),
        # formed once per chunk over the visited rows only
        for rw in range(T * S):
            if visited[rw]:
                for a in range(V):
                    base = (rw * V + a) * E
                    for e in range(E):
                        row[rw * E + e] += cell[base + e]
    for q in range(_NQ):
        for e in range(E):
            stats[q, e, 0] = st[q, e, 0]
            stats[q, e, 1] = st[q, e, 1]
    for q in range(_NG):
        gstats[q, 0] = gs[q, 0]
        gstats[q, 1] = gs[q, 1]


@njit(cache=True, parallel=True)
def _mc_kernel(tab, reward, s0, codes, eps, G, n_per_chunk, seeds, U, use_U, track, cell, row):
    """All chunks in parallel (``prange``); chunk ``c`` owns ``[c]`` of every output.

    Returns ``stats (C,NQ,E,2)`` and ``gstats (C,NG,2)``; adds to ``cell (C, T·S·V·E)`` and
    ``row (C, T·S·E)`` (zeroed by the caller; ``(C, 0)`` without ``track``).
    """
    n_chunks = seeds.shape[0]
    E = codes.shape[0]
    stats = np.zeros((n_chunks, _NQ, E, 2))
    gstats = np.zeros((n_chunks, _NG, 2))
    for c in prange(n_chunks):
        Uc = U[c] if use_U else U[0]
        _chunk_nb(tab, reward, s0, codes, eps, G, n_per_chunk, seeds[c], Uc, use_U, track, stats[c], gstats[c], cell[c], row[c])
    return stats, gstats


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
    tab: np.ndarray
    """:func:`pack_table` of the above: what the kernel reads per token."""


def prepare(mdp: ins.TabularMDP, theta, theta_mu) -> Prepared:
    """Alias tables of ``μ`` and the per-cell tables ``ℓ``, ``‖e_a − π_θ‖²``, ``π_θ``, ``‖π_θ‖²``, packed."""
    lp = ins.log_policy(mdp.check_theta(theta))
    lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    prob, alias = ins.alias_tables(lm)
    pi = np.exp(lp)
    pin2 = (pi * pi).sum(-1)
    lr = lp - lm
    tab = pack_table(prob, alias, lr, pi, pin2, mdp.next_state)
    return Prepared(prob, alias, lr, 1.0 - 2.0 * pi + pin2[..., None], pi, pin2, tab)


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
    skips ``ĝ`` (no ``sq_norm``, no bias vector; ~2× faster, see ``python -m bench montecarlo``).
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
    T, S, V = mdp.T, mdp.S, mdp.V
    # np.zeros maps fresh zero pages (calloc): no memset pass, and the cells of unreachable rows are
    # never written; each page is first touched by the thread of the chunk that owns it
    cell = np.zeros((n_chunks, T * S * V * len(slots) if track_grad else 0))
    row = np.zeros((n_chunks, T * S * len(slots) if track_grad else 0))
    with np.errstate(over="ignore", invalid="ignore"):
        stats, gstats = _mc_kernel(prep.tab, mdp.reward, mdp.s0, codes, epsv, G, per, seeds, U, use_U, bool(track_grad), cell, row)
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
    cell = cell.reshape(n_chunks, *mdp.theta_shape, len(slots))
    row = row.reshape(n_chunks, mdp.T, mdp.S, len(slots))
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
