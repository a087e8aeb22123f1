"""Exact expectations of the estimators (docs/THEORY.md §2–§3), or the reason why none is computed.

Three engines, each used where it applies (:func:`exact_table`):

1. **Dynamic programming** (``onpolicy``, ``is``; any size). With ``A_i = (1 − 1/G) R_i − (1/G) Σ_{j≠i} R_j``
   and the ``τ_j`` independent, per-trajectory weights ``w_i = f(ρ_i)`` give
   ``E ĝ = (1 − 1/G)·(E_μ[f(ρ) R s_θ] − E_μ[R]·E_μ[f(ρ) s_θ])``; for ``is`` this is ``(1−1/G)∇J`` (C8).
2. **Path sums** (``tis``, ``tic``): the same formula summed over the ``N = V^T`` paths (``N ≤ max_paths``).
3. **Count vectors** (every estimator, and ``E‖ĝ‖²`` for all): a group is, up to order, its vector of
   counts ``n ∈ ℕ^N`` with ``Σ_k n_k = G`` (multinomial probability ``G!/Πn_k! · Πμ_k^{n_k}``), and every
   estimator depends on the group only through ``ρ̄ = (1/G)Σ_k n_k ρ_k`` and the counts
   (gmc: ``w_k = ρ_k·min(1, (1+ε)/ρ̄)``; snis: ``w_k = ρ_k/ρ̄``), so
   ``ĝ = Σ_k c_k s_θ(k)`` with ``c_k = n_k w_k (R_k − R̄)/G``. The ``C(N+G−1, G)`` count vectors are
   generated block by block (no ``G``-long rows, no multiset materialised): ``O(C(N+G−1,G)·N)`` time,
   e.g. ``G = 1024`` on a 3-arm bandit is 525 825 vectors. One enumeration serves every estimator.

Where a limit stops an engine, the value is ``None`` and ``reasons[quantity]`` says which limit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.special import gammaln

from asyncgrpo import estimators as est
from asyncgrpo.functionals import signed_exp_sum
from asyncgrpo.validation import check_eps, check_group_size
from simulate import instances as ins
from simulate.montecarlo.kernel import EST_QUANTITIES
from simulate.montecarlo.reference import cut_terms, log_weights_batch

#: Largest number of count vectors ``C(N+G−1, G)`` summed by the count engine.
MAX_COUNT_STATES = 4_000_000
#: Largest number of paths ``N`` for the count engine (it forms the ``N×N`` Gram of the path scores).
MAX_GROUP_ATOMS = 2048
#: Largest work ``C(N+G−1, G)·N²`` (multiply-adds of ``E‖ĝ‖² = Σ P·cᵀ Gram c``) of the count engine: ~seconds.
MAX_COUNT_WORK = 4e9
#: Above this ``max_k ℓ_k`` the count engine sums 𝔅 and the removed mass in log space (:func:`_log_cut_sums`):
#: a count vector of probability ``P < e^-700`` (dropped from the linear sums as negligible) can then still
#: carry a finite ``P·ρ_k`` (``ρ_k > e^{300}``), and ``ρ_k f²`` itself can overflow. Below it the linear sums
#: are exact to float64 and unchanged.
LOG_SPACE_ELL = 300.0
_PER_TRAJECTORY = ("onpolicy", "is", "tis", "tic")
_BLOCK_ENTRIES = 1 << 14


class ExactLimitWarning(UserWarning):
    """An exact value was not computed because a size limit was reached (the message names it)."""


def n_count_vectors(N: int, G: int) -> float:
    """``C(N+G−1, G)``, the number of count vectors of a group, as a float (``inf`` past the float range)."""
    log_m = math.lgamma(N + G) - math.lgamma(G + 1) - math.lgamma(N)
    return math.exp(log_m) if log_m < 709.0 else math.inf


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


def path_atoms(mdp, theta, theta_mu, max_paths: int = ins.MAX_ENUM_PATHS) -> PathAtoms:
    """Enumerate every path once for the pair ``(θ, θ_μ)`` (``V^T ≤ max_paths``); see :class:`PathAtoms`."""
    lp = ins.log_policy(mdp.check_theta(theta))
    lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    actions, states, final = ins.enumerate_paths(mdp, max_paths)
    tt = np.arange(mdp.T)
    return PathAtoms(
        lm[tt, states, actions].sum(1), (lp - lm)[tt, states, actions].sum(1), mdp.reward[final], states, actions, np.exp(lp)
    )


@njit(cache=True)
def _next_counts_nb(r, state, out):
    """Fill ``out`` with the next count vectors (NEXCOM, Nijenhuis–Wilf); returns the rows written.

    ``r (N,)`` is the current vector, ``state = [t, h, done]``; start from ``r = (G,0,…,0)``,
    ``state = [G, -1, 0]``. The last vector is ``(0,…,0,G)``.
    """
    N = r.shape[0]
    G = r.sum()
    m = 0
    t, h, done = state[0], state[1], state[2]
    while m < out.shape[0] and done == 0:
        for k in range(N):
            out[m, k] = r[k]
        m += 1
        if r[N - 1] == G:
            done = 1
            break
        if t > 1:
            h = -1
        h += 1
        t = r[h]
        r[h] = 0
        r[0] = t - 1
        r[h + 1] += 1
    state[0], state[1], state[2] = t, h, done
    return m


def log_weights_counts(name: str, ell: np.ndarray, log_rho_bar: np.ndarray, eps: float) -> np.ndarray:
    """``log w_k`` of every atom ``k`` for groups given by counts: ``ell (N,)``, ``log ρ̄ (m,)`` → ``(m, N)``.

    The registry's maps (:mod:`asyncgrpo.estimators.reference`) written per atom: tis ``min(ℓ, log(1+ε))``,
    tic ``ℓ`` or ``−∞``, gmc ``ℓ + min(0, log(1+ε) − log ρ̄)``, snis ``ℓ − log ρ̄``.
    """
    cap = math.log1p(eps)
    m = log_rho_bar.shape[0]
    L = np.broadcast_to(ell, (m, ell.shape[0]))
    if name == "onpolicy":
        return np.zeros((m, ell.shape[0]))
    if name == "is":
        return L.copy()
    if name == "tis":
        return np.minimum(L, cap)
    if name == "tic":
        return np.where(L <= cap, L, -np.inf)
    if name == "gmc":
        return np.where((cap >= log_rho_bar)[:, None], L, L + (cap - log_rho_bar)[:, None])
    if name == "snis":
        return L - log_rho_bar[:, None]
    raise ValueError(f"unknown estimator {name!r}; known estimators: {', '.join(est.ESTIMATORS)}")


def _log_cut_sums(logw, ell, n, logP):
    """The terms of ``S = Σ_m P_m Σ_k n_k ρ_k f_k^j`` for 𝔅 (``j = 2``) and the removed mass (``j = 1``),
    ``f = 1 − w/ρ = −expm1(log w − ℓ)``, in log space, as ``(log S_+, log S_−)`` per quantity (the sums of the
    positive and of the negative terms): exact where ``P_m`` underflows and ``ρ_k`` overflows."""
    from scipy.special import logsumexp

    with np.errstate(divide="ignore", invalid="ignore"):
        f = -np.expm1(logw - ell)  # (m, N); 0 where the weight is not cut
        lnf = np.log(np.abs(f))
        base = np.where(n > 0, np.log(n) + ell, -np.inf) + logP[:, None]

        def lse(a, sel):
            a = np.where(sel, a, -np.inf)
            return float(logsumexp(a)) if np.any(a > -np.inf) else -np.inf

        B = (lse(base + 2 * lnf, f != 0.0), -np.inf)  # f² > 0 wherever f ≠ 0
        removed = (lse(base + lnf, f > 0.0), lse(base + lnf, f < 0.0))
    return B, removed


def _log_quad_sums(logw, n, A, gram, logP, G):
    """``(log Σ_+, log Σ_−)`` of the terms ``P_m·c_mᵀ Gram c_m`` of ``E‖ĝ‖²`` (``c = n w A / G``), each formed in log
    space: ``c = e^{s_m}·c̃`` with ``s_m = max_k log w_mk`` over the atoms in the group, so ``c̃`` is finite, and the
    term is ``e^{log P_m + 2 s_m}·c̃ᵀ Gram c̃``. Exact where ``P_m`` underflows (``μ = e^{−600}``) while ``w² = ρ²``
    overflows (``is``), where the linear sum gives ``0·inf = NaN`` (issue 56 item 3)."""
    from scipy.special import logsumexp

    live = (n > 0) & (logw > -np.inf)
    with np.errstate(invalid="ignore"):
        s = np.where(live, logw, -np.inf).max(1)  # (m,)
        ok = s > -np.inf
        ct = np.where(live & ok[:, None], np.exp(np.where(live, logw, 0.0) - np.where(ok, s, 0.0)[:, None]), 0.0) * n * A / G
        q = np.einsum("mk,mk->m", ct @ gram, ct)
        with np.errstate(divide="ignore"):
            lt = logP + 2.0 * np.where(ok, s, 0.0) + np.log(np.abs(q))

    def lse(sel):
        sel = sel & ok & (lt > -np.inf)
        return float(logsumexp(lt[sel])) if sel.any() else -np.inf

    if np.isnan(lt[ok & (q != 0.0)]).any():
        return math.nan, math.nan, math.nan
    dropped = ok & (q != 0.0) & ~(logP > -700.0)  # the rows the linear sum leaves out (P = 0 at float64)
    return lse(q > 0.0), lse(q < 0.0), float(lt[dropped].max()) if dropped.any() else -np.inf


def exact_by_counts(atoms: PathAtoms, slots, G: int, theta_shape) -> dict:
    """``{slot: {grad, sq_norm, bias_functional, removed_mass, mean_weight}}`` summed over all count vectors.

    One enumeration for every slot ``(name, ε)``; see the module docstring (engine 3).
    """
    keep = np.isfinite(atoms.log_mu)  # paths with μ(τ) = 0 never occur in a group
    log_mu, ell, R = atoms.log_mu[keep], atoms.ell[keep], atoms.R[keep]
    score = atoms.dense_score()[keep]
    gram = score @ score.T
    N = len(log_mu)
    acc = {s: dict(c=np.zeros(N), sq=0.0, B=0.0, removed=0.0, mw=0.0) for s in slots}
    r = np.zeros(N, dtype=np.int64)
    r[0] = G
    state = np.array([G, -1, 0], dtype=np.int64)
    block = np.empty((max(64, _BLOCK_ENTRIES // N), N), dtype=np.int64)  # ≤ 128 KB temporaries: below malloc's mmap threshold, so no fresh zeroed pages per block
    lgG = gammaln(G + 1)
    huge = N > 0 and float(ell.max()) > LOG_SPACE_ELL
    log_sums = {sl: dict(B=[], removed=[], sq=[]) for sl in slots}  # per block: (log Σ_+, log Σ_−) of Σ_m P_m Σ_k n_k term
    while True:
        m = _next_counts_nb(r, state, block)
        if m == 0:
            break
        n = block[:m].astype(np.float64)
        pos = n > 0
        with np.errstate(divide="ignore"):
            logn = np.log(n)
        logP = lgG - gammaln(n + 1).sum(1) + np.where(pos, n * log_mu, 0.0).sum(1)
        # count vectors with P < e^-700 add nothing at float64 precision; as exact zeros they also keep
        # subnormal numbers (100× slower arithmetic) out of the sums below
        P = np.where(logP > -700.0, np.exp(np.maximum(logP, -700.0)), 0.0)
        a = np.where(pos, ell + logn, -np.inf)
        mx = a.max(1)
        log_rho_bar = mx + np.log(np.exp(a - mx[:, None]).sum(1)) - math.log(G)
        A = R - (n @ R / G)[:, None]
        for nm, eps in slots:
            logw = log_weights_counts(nm, ell, log_rho_bar, eps)
            w, Bk, Rk = cut_terms(logw, np.broadcast_to(ell, (m, N)))
            if not (np.isfinite(w).all() and np.isfinite(Bk).all() and np.isfinite(Rk).all()):
                # atoms absent from the group (n_k = 0) and count vectors of probability 0 (at float64) add nothing:
                # not 0·inf = NaN where their weight overflowed
                dead = ~(P > 0.0)[:, None] | ~pos
                w, Bk, Rk = (np.where(dead, 0.0, x) for x in (w, Bk, Rk))
            c = n * w * A / G
            s = acc[nm, eps]
            s["c"] += P @ c
            with np.errstate(invalid="ignore", over="ignore"):
                s["sq"] += float(P @ np.einsum("mk,mk->m", c @ gram, c))
            if huge:  # E‖ĝ‖² in log space too: P_m underflows where ρ_k² overflows (issue 56 item 3)
                log_sums[nm, eps]["sq"].append(_log_quad_sums(logw, n, A, gram, logP, G))
            if huge:
                lb, lr = _log_cut_sums(logw, ell, n, logP)
                log_sums[nm, eps]["B"].append(lb)
                log_sums[nm, eps]["removed"].append(lr)
            else:
                s["B"] += float(P @ (n * Bk).sum(1)) / G
                s["removed"] += float(P @ (n * Rk).sum(1)) / G
            s["mw"] += float(P @ (n * w).sum(1)) / G
        if state[2]:
            break
    if huge:
        for slot, ls in log_sums.items():
            for key in ("B", "removed"):
                parts = np.array(ls[key])  # (blocks, 2): log Σ of the positive and of the negative terms
                acc[slot][key] = signed_exp_sum(parts, np.broadcast_to([1.0, -1.0], parts.shape)) / G
            parts = np.array(ls["sq"])  # (blocks, 3): log Σ_+, log Σ_−, the largest term the linear sum dropped
            lin = acc[slot]["sq"]
            # the linear sum stands (bit for bit as below LOG_SPACE_ELL) where it is finite and every term it dropped
            # is below its last digit; else the log-space sum, finite where the linear one gave NaN / inf / 0.0
            if not (math.isfinite(lin) and lin > 0.0 and parts[:, 2].max() < math.log(lin) - 40.0):
                acc[slot]["sq"] = signed_exp_sum(parts[:, :2], np.broadcast_to([1.0, -1.0], parts[:, :2].shape))
    out = {}
    for slot, s in acc.items():
        full = np.zeros(len(atoms.log_mu))
        full[keep] = s["c"]
        out[slot] = dict(grad=atoms.score_dot(full).reshape(theta_shape), sq_norm=s["sq"], bias_functional=s["B"],
                         removed_mass=s["removed"], mean_weight=s["mw"])
    return out


def _per_trajectory(mdp, theta, theta_mu, name, eps, G, atoms):
    """Engines 1 and 2: ``E ĝ``, ``E𝔅``, removed mass and mean weight for per-trajectory weights."""
    if name in ("onpolicy", "is"):
        lp = ins.log_policy(mdp.check_theta(theta))
        lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
        pi, mu = np.exp(lp), np.exp(lm)
        q = pi if name == "is" else mu  # μ·f(ρ) per step: ρ·μ = π, 1·μ = μ
        ER = ins.exact_J(mdp, theta_mu)
        fRs = ins.expected_score(mdp, q, mdp.reward, pi)
        fs = ins.expected_score(mdp, q, np.ones(mdp.S), pi)
        out = dict(grad=(1.0 - 1.0 / G) * (fRs - ER * fs))
        if name == "is":
            out.update(bias_functional=0.0, removed_mass=0.0, mean_weight=1.0)
        else:  # w = 1: E(ρ−1)²/ρ = E_μ[1/ρ] − 1, removed E(ρ − 1) = 0
            out.update(bias_functional=ins.ratio_moment(mdp, theta, theta_mu, -1.0) - 1.0, removed_mass=0.0, mean_weight=1.0)
        return out
    mu, R = np.exp(atoms.log_mu), atoms.R
    logw = log_weights_batch(name, atoms.ell[:, None], eps)[:, 0]
    w, b, r = cut_terms(logw, atoms.ell)
    with np.errstate(invalid="ignore"):
        B, removed = float(mu @ b), float(mu @ r)
    if not (math.isfinite(B) and math.isfinite(removed)):
        # μ(τ) underflowed to 0 where ρ(τ) overflowed (0·inf): μ·ρ = π(τ), so form μρ·f², μρ·f from exp(log μ + ℓ)
        with np.errstate(over="ignore", invalid="ignore"):
            f = -np.expm1(logw - atoms.ell)
            p = np.exp(atoms.log_mu + atoms.ell)
            B = float(np.sum(np.where(f != 0.0, p * f * f, 0.0)))
            removed = float(np.sum(np.where(f != 0.0, p * f, 0.0)))
    return dict(grad=(1.0 - 1.0 / G) * atoms.score_dot(mu * w * (R - mu @ R)), bias_functional=B,
                removed_mass=removed, mean_weight=float(mu @ w))


def exact_table(mdp, theta, theta_mu, slots, G: int, *, atoms: PathAtoms | None = None, max_paths: int = ins.MAX_ENUM_PATHS,
                max_count_states: int = MAX_COUNT_STATES, max_atoms: int = MAX_GROUP_ATOMS,
                max_count_work: float = MAX_COUNT_WORK) -> dict:
    """Exact ``E ĝ`` (key ``grad``) and the :data:`EST_QUANTITIES` for every slot ``(name, ε)`` at one ``G``.

    Returns ``{slot: {"grad", *EST_QUANTITIES, "reasons"}}``: a value is ``None`` when no engine applies
    and ``reasons[key]`` then names the limit (``max_paths`` for path sums, ``max_count_states`` and
    ``max_atoms``, ``max_count_work`` for the count engine). The paths are enumerated once (or taken from ``atoms``) and
    the count vectors once for all slots.
    """
    G = check_group_size(G)
    slots = [(nm, check_eps(e)) for nm, e in slots]
    for nm, _ in slots:
        if nm not in est.ESTIMATORS:
            raise ValueError(f"unknown estimator {nm!r}; known estimators: {', '.join(est.ESTIMATORS)}")
    N = mdp.V**mdp.T
    paths_ok = N <= max_paths
    why_paths = f"V^T = {mdp.V}^{mdp.T} = {N} paths > max_paths = {max_paths} (exact path sums, MAX_ENUM_PATHS)"
    M = n_count_vectors(N, G)
    if not paths_ok:
        why_counts = why_paths
    elif N > max_atoms:
        why_counts = f"N = V^T = {N} paths > max_atoms = {max_atoms} (MAX_GROUP_ATOMS: count engine's path Gram)"
    elif M > max_count_states:
        why_counts = (f"C(N+G-1, G) = {M:.3g} count vectors (N = {N} paths, G = {G}) > max_count_states = "
                      f"{max_count_states} (MAX_COUNT_STATES)")
    elif M * N * N > max_count_work:
        why_counts = (f"C(N+G-1, G)·N² = {M * N * N:.3g} multiply-adds (N = {N} paths, G = {G}) > max_count_work = "
                      f"{max_count_work:.3g} (MAX_COUNT_WORK)")
    else:
        why_counts = None
    if paths_ok and atoms is None and (why_counts is None or any(nm in ("tis", "tic") for nm, _ in slots)):
        atoms = path_atoms(mdp, theta, theta_mu, max_paths)
    grp = exact_by_counts(atoms, slots, G, mdp.theta_shape) if why_counts is None else {}
    out = {}
    for nm, eps in slots:
        res = {"grad": None, **{q: None for q in EST_QUANTITIES}}
        reasons = {"ess": "no exact method for the ESS (a ratio of sums)"}
        if nm in ("onpolicy", "is") or (nm in _PER_TRAJECTORY and paths_ok):
            res.update(_per_trajectory(mdp, theta, theta_mu, nm, eps, G, atoms))
        for k, v in grp.get((nm, eps), {}).items():
            if res.get(k) is None:
                res[k] = v
        for k in ("grad", *EST_QUANTITIES):
            if res[k] is None and k not in reasons:
                reasons[k] = why_counts if (nm not in _PER_TRAJECTORY or k == "sq_norm") else why_paths
        res["reasons"] = reasons
        out[nm, eps] = res
    return out


def exact_expectations(mdp, theta, theta_mu, name: str, eps: float, G: int, **limits) -> dict:
    """:func:`exact_table` for one estimator: ``{"grad", *EST_QUANTITIES, "reasons"}`` (``None`` where not computed)."""
    if name not in est.ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; known estimators: {', '.join(est.ESTIMATORS)}")
    eps = check_eps(eps)
    return exact_table(mdp, theta, theta_mu, [(name, eps)], G, **limits)[name, eps]


def exact_second_moment_S(mdp, theta, theta_mu, G: int) -> float:
    """``S = E[ρ_1 A_1² ‖s_θ(τ_1)‖²]`` (τ_j ∼ μ), so that C1 reads ``E‖ĝ‖² ≤ (1+ε)·S = M₂(ε)``.

    Reweighting by ``ρ_1`` makes ``τ_1 ∼ π_θ`` while the other members stay ``∼ μ``; with
    ``a = 1−1/G``, ``Y = (1/G)Σ_{j≠1} R_j`` (``E Y = a J_μ``, ``E Y² = ((G−1)E_μR² + (G−1)(G−2)J_μ²)/G²``):
    ``S = a² E_π[R²‖s‖²] − 2a E_π[R‖s‖²] E Y + E_π[‖s‖²] E Y²``. At ``d = 0`` this is
    ``E_{π_θ}[A²‖s_θ‖²]`` (docs/THEORY.md §3 C1). ``‖s_θ(τ)‖² = Σ_t (1 − 2π(a_t|s_t) + ‖π(·|s_t)‖²)`` is
    additive over steps, so each ``E_π[f(R)‖s‖²] = Σ_t Σ_{s,a} d_t(s) π(a|s) g_t(s,a) Q^f_t(s,a)`` by DP.
    """
    G = check_group_size(G)
    lp = ins.log_policy(mdp.check_theta(theta))
    lm = ins.log_policy(mdp.check_theta(theta_mu, "theta_mu"))
    pi, mu = np.exp(lp), np.exp(lm)
    g = 1.0 - 2.0 * pi + (pi * pi).sum(-1, keepdims=True)
    d = ins.state_distribution(mdp, pi)

    def e_pi_f_s2(f):
        return float((d[:-1, :, None] * pi * g * ins.backward_values(mdp, pi, f)[1]).sum())

    d_mu_T = ins.state_distribution(mdp, mu)[-1]
    Jmu, Jmu2 = float(d_mu_T @ mdp.reward), float(d_mu_T @ mdp.reward**2)
    a = 1.0 - 1.0 / G
    EY = a * Jmu
    EY2 = ((G - 1) * Jmu2 + (G - 1) * (G - 2) * Jmu**2) / G**2
    return a * a * e_pi_f_s2(mdp.reward**2) - 2 * a * e_pi_f_s2(mdp.reward) * EY + e_pi_f_s2(np.ones(mdp.S)) * EY2


