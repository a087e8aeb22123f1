"""One Monte Carlo pass (:func:`run_mc`): tables, memory plan, the kernel call, and its result type.

One pass draws ``n_groups`` groups of ``G`` trajectories ``τ_1..τ_G ∼ μ`` on a
:class:`~simulate.instances.TabularMDP`, forms ``ℓ_i = log π_θ(τ_i) − log μ(τ_i)``, ``A_i = R_i − R̄``
and evaluates **every** requested estimator on the **same** samples (common random numbers).
Per group and estimator it records ``‖ĝ‖²``, ``𝔅(w;ρ) = (1/G)Σ(ρ_i−w_i)²/ρ_i``, the removed mass
``(1/G)Σ(ρ_i−w_i)``, the mean weight ``(1/G)Σw_i`` and the ESS ``(Σw)²/Σw²``; per group ``ρ̄``, the
unbiased ``χ²`` estimate ``(1/G)Σρ_i² − 1``, ``R̄`` and the C1 right-hand side
``Ŝ = (1/G)Σ ρ_i A_i² ‖s_θ(τ_i)‖²`` (docs/THEORY.md §3 C1). Means come with standard errors
``σ̂/√n_groups``; the bias vector's standard error uses batch means (see :mod:`.kernel`).

Randomness: chunk ``c`` draws from a xoshiro256+ stream seeded with ``seeds[c]`` (from
``np.random.SeedSequence(seed)``), so a seed gives bit-identical numbers for any thread count.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numba
import numpy as np

from asyncgrpo import estimators as est
from asyncgrpo.estimators import reference
from asyncgrpo.validation import check_eps, check_group_size
from simulate import instances as ins
from simulate.montecarlo.kernel import (
    EST_QUANTITIES,
    GROUP_QUANTITIES,
    ROUTES,
    choose_route,
    mc_kernel,
    pack_table,
)

#: Default memory for the bias-vector batch sums (and the vector route's scratch); more batches
#: give better standard errors, fewer bound the memory at large ``T·S·V``.
GRAD_MEMORY_BUDGET = 384 * 2**20


@dataclass(frozen=True)
class Prepared:
    """Tables one Monte Carlo pass needs for the pair ``(θ, θ_μ)`` (see :mod:`.kernel`)."""

    prob: np.ndarray
    alias: np.ndarray
    lr: np.ndarray
    sn: np.ndarray
    pi: np.ndarray
    pin2: np.ndarray
    tab: np.ndarray
    """:func:`~simulate.montecarlo.kernel.pack_table` of the above: what the kernel reads per token."""


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


def slots_of(estimators, eps_list):
    """``(names, eps values, slots)``: distinct ``(name, ε)`` evaluations; ε-free estimators once (at the first ε)."""
    names = [estimators] if isinstance(estimators, str) else list(estimators)
    if not names:
        raise ValueError("estimators must name at least one estimator; known estimators: " + ", ".join(est.ESTIMATORS))
    for nm in names:
        if nm not in est.ESTIMATORS:
            raise ValueError(f"unknown estimator {nm!r}; known estimators: {', '.join(est.ESTIMATORS)}")
    eps_vals = [check_eps(e) for e in np.atleast_1d(eps_list)]
    if not eps_vals:
        raise ValueError("eps_list must hold at least one ε > 0")
    slots = []
    for nm in names:
        for e in eps_vals if nm in ("tis", "tic", "gmc") else eps_vals[:1]:
            slots.append((nm, e))
    return names, eps_vals, slots


@dataclass(frozen=True)
class MCResult:
    """Output of :func:`run_mc` for one ``(θ, θ_μ, G)``; ``slots[e] = (name, eps)``.

    ``mean[q]``/``se[q]`` are arrays over slots for ``q`` in :data:`EST_QUANTITIES` and scalars for
    ``q`` in :data:`GROUP_QUANTITIES`. ``cell (B, T, S, V, E)`` and ``row (B, T, S, E)`` are the
    per-batch sums of ``C`` and ``C_row`` (``None`` without ``track_grad``); ``route`` is the
    ``‖ĝ‖²`` route used.
    """

    slots: tuple
    G: int
    n: int
    n_batches: int
    mean: dict = field(repr=False)
    se: dict = field(repr=False)
    cell: np.ndarray | None = field(repr=False, default=None)
    row: np.ndarray | None = field(repr=False, default=None)
    pi: np.ndarray | None = field(repr=False, default=None)
    route: str = "gram"

    def _batch_means(self, e: int, ref: int | None = None) -> np.ndarray:
        """Batch means of ``ĝ_e`` (``− ĝ_ref`` on the same groups), flattened: ``(B, T·S·V)``."""
        cell = self.cell[..., e] if ref is None else self.cell[..., e] - self.cell[..., ref]
        row = self.row[..., e] if ref is None else self.row[..., e] - self.row[..., ref]
        g = cell - row[..., None] * self.pi[None]
        return g.reshape(self.n_batches, -1) / (self.n // self.n_batches)

    @property
    def grad_batches(self) -> np.ndarray | None:
        """Batch means of ``ĝ``, ``(B, E, T, S, V)`` (the largest array of a run: formed on demand)."""
        if self.cell is None:
            return None
        g = self.cell - self.row[:, :, :, None, :] * self.pi[None, :, :, :, None]
        return np.moveaxis(g, -1, 1) / (self.n // self.n_batches)

    @property
    def grad_mean(self) -> np.ndarray:
        """``(1/n)Σ_groups ĝ`` per slot, shape ``(E, T, S, V)``."""
        cell, row = self.cell.sum(0), self.row.sum(0)
        return np.moveaxis(cell - row[:, :, None, :] * self.pi[..., None], -1, 0) / self.n

    @property
    def grad_se(self) -> np.ndarray:
        """Per-coordinate standard error of :attr:`grad_mean` from the batch means."""
        return self.grad_batches.std(axis=0, ddof=1) / math.sqrt(self.n_batches)

    def bias(self, target: np.ndarray, e: int, ref: int | None = None) -> tuple[float, float, float]:
        """``(‖b̂‖_debiased, se, ‖b̂‖_raw)`` for ``b = E[ĝ_e − ĝ_ref] − target`` (``ĝ_ref = 0`` if ``ref`` is None).

        ``‖b̂‖² − tr Ĉov`` removes the noise floor ``E‖b̂ − b‖²`` (clipped at 0); the standard error is
        the delta method ``√(b̂ᵀ Ĉov b̂)/‖b̂‖`` with ``Ĉov`` from the batch means. With ``ref`` the
        difference is taken group by group (common random numbers), so its noise is that of ``ĝ_e − ĝ_ref``.
        """
        m = self._batch_means(e, ref)
        B = self.n_batches
        b = m.mean(0) - np.asarray(target, dtype=np.float64).ravel()
        raw2 = float(b @ b)
        floor = float(m.var(axis=0, ddof=1).sum() / B)
        nb = math.sqrt(raw2) if raw2 > 0 else 0.0
        se = float(np.std(m @ (b / nb), ddof=1) / math.sqrt(B)) if nb > 0 else math.sqrt(floor)
        return math.sqrt(max(raw2 - floor, 0.0)), se, nb


def _check_run_args(G, n_groups, n_chunks, seed):
    G = check_group_size(G)
    if isinstance(n_chunks, bool) or int(n_chunks) != n_chunks or n_chunks < 2:
        raise ValueError(f"n_chunks must be an integer >= 2 (batch means give the standard errors), got {n_chunks!r}")
    if isinstance(n_groups, bool) or int(n_groups) != n_groups or n_groups < n_chunks:
        raise ValueError(f"n_groups must be an integer >= n_chunks = {n_chunks}, got {n_groups!r}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return G, int(n_groups), int(n_chunks), int(seed)


def chunk_seeds(seed: int, n_chunks: int) -> np.ndarray:
    """One 32-bit seed per chunk from ``np.random.SeedSequence(seed)`` (independent streams)."""
    return np.random.SeedSequence(seed).generate_state(n_chunks, dtype=np.uint32).astype(np.int64)


def available_memory() -> int:
    """Bytes the OS can still give this process (``MemAvailable`` of ``/proc/meminfo``, else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def batch_bytes(T: int, S: int, V: int, E: int, route: str) -> int:
    """Bytes per batch of the bias-vector sums (``C``, ``C_row``, visited rows) and the vector route's scratch and stamps."""
    one = 8 * (T * S * V * E + T * S * E) + T * S
    return one + (8 * (T * S * V * (E + 1) + T * S * (E + 1)) if route == "vector" else 0)


def plan_memory(T: int, S: int, V: int, E: int, G: int, n_chunks: int, track: bool, route: str,
                budget: int = GRAD_MEMORY_BUDGET, threads: int | None = None) -> tuple[int, int]:
    """``(n_batches, bytes needed)`` for a pass: the most batches (a divisor of ``n_chunks``, ≥ 2) within ``budget``.

    Per thread: the chunk buffers ``4·T·G`` (rows, cells, ``π``, ``‖π‖²``), ``O(G·E)`` weights and the
    ``G×G`` Gram matrix on the gram route; plus the packed table ``64·T·S·V`` and the batch sums.
    """
    threads = threads or numba.get_num_threads()
    if track:
        per = batch_bytes(T, S, V, E, route)
        divisors = [b for b in range(2, n_chunks + 1) if n_chunks % b == 0]
        fits = [b for b in divisors if b * per <= budget]
        n_batches = max(fits) if fits else min(divisors)
    else:
        per, n_batches = 0, n_chunks
    chunk = 8 * (4 * T * G if track else 0) + 8 * G * (8 + 2 * E) + (8 * G * G if track and route == "gram" else 0)
    need = n_batches * per + min(threads, n_batches) * chunk + 8 * 8 * T * S * V + 8 * 6 * T * S * V
    return n_batches, need


def check_memory(need: int, what: str = "G") -> None:
    """ValueError naming ``what`` when ``need`` bytes exceed the memory available now (checked before allocating)."""
    avail = available_memory()
    if need > avail:
        raise ValueError(f"{what}: this Monte Carlo pass needs about {need / 2**30:.2f} GiB of memory but only "
                         f"{avail / 2**30:.2f} GiB is available; use a smaller group size G (or a smaller instance)")


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
    route: str = "auto",
    n_batches: int | None = None,
) -> MCResult:
    """One Monte Carlo pass: ``n_groups`` groups of size ``G`` from ``μ = π_{θ_μ}``, all estimators.

    ``n_groups`` is rounded down to a multiple of ``n_chunks``. ``uniforms`` (``(n_groups, G, T)``
    in ``[0,1)``) replaces the seeded RNG (for the NumPy-reference test). ``track_grad=False``
    skips ``ĝ`` (no ``sq_norm``, no bias vector). ``route``: ``"auto"`` (:func:`~.kernel.choose_route`),
    ``"gram"`` or ``"vector"`` for ``‖ĝ‖²``. ``n_batches``: batches of the bias-vector sums (a divisor
    of ``n_chunks``, ≥ 2; default: the most that fit :data:`GRAD_MEMORY_BUDGET`).
    """
    G, n_groups, n_chunks, seed = _check_run_args(G, n_groups, n_chunks, seed)
    _, _, slots = slots_of(estimators, eps_list)
    E = len(slots)
    T, S, V = mdp.T, mdp.S, mdp.V
    if route == "auto":
        route = choose_route(G, T, E)
    if route not in ROUTES:
        raise ValueError(f"route must be 'auto', 'gram' or 'vector', got {route!r}")
    nb_auto, need = plan_memory(T, S, V, E, G, n_chunks, bool(track_grad), route)
    if n_batches is None:
        n_batches = nb_auto
    elif isinstance(n_batches, bool) or int(n_batches) != n_batches or n_batches < 2 or n_chunks % n_batches:
        raise ValueError(f"n_batches must be an integer >= 2 dividing n_chunks = {n_chunks}, got {n_batches!r}")
    n_batches = int(n_batches) if track_grad else n_chunks
    check_memory(need)
    per = n_groups // n_chunks
    n = per * n_chunks
    prep = prepared if prepared is not None else prepare(mdp, theta, theta_mu)
    codes = np.array([reference.CODES[nm] for nm, _ in slots], dtype=np.int64)
    epsv = np.array([e for _, e in slots])
    if uniforms is not None:
        U = np.asarray(uniforms, dtype=np.float64)
        if U.shape != (n, G, T):
            raise ValueError(f"uniforms must have shape (n_groups, G, T) = {(n, G, T)}, got {U.shape}")
        if U.min() < 0.0 or U.max() >= 1.0:
            raise ValueError("uniforms must lie in [0, 1)")
        U = np.ascontiguousarray(U.reshape(n_chunks, per, G, T))
        use_U = True
    else:
        U = np.zeros((1, 1, 1, 1))
        use_U = False
    seeds = chunk_seeds(seed, n_chunks)
    # np.zeros maps fresh zero pages (calloc): no memset pass, and the cells of unreachable rows are never written
    cell = np.zeros((n_batches, T * S * V * E if track_grad else 0))
    row = np.zeros((n_batches, T * S * E if track_grad else 0))
    with np.errstate(over="ignore", invalid="ignore"):
        stats, gstats = mc_kernel(prep.tab, mdp.reward, mdp.s0, codes, epsv, G, per, seeds, U, use_U, bool(track_grad),
                                  ROUTES[route], n_batches, cell, row)
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
        mean["sq_norm"] = np.full(E, np.nan)
        se["sq_norm"] = np.full(E, np.nan)
        return MCResult(tuple(slots), G, n, n_batches, mean, se, route=route)
    cell = cell.reshape(n_batches, T, S, V, E)
    row = row.reshape(n_batches, T, S, E)
    return MCResult(tuple(slots), G, n, n_batches, mean, se, cell, row, prep.pi, route)
