"""C7 measured for what it states: the bias split into its baseline part and its weighting part.

On a softmax bandit with fixed current policy π, behaviour μ and rewards R (docs/THEORY.md §1), the
estimator ``ĝ_w = (1/G) Σ_i w_i A_i s(τ_i)`` with ``A_i = R_i − R̄`` and ``s(k) = e_k − π`` has

    E[ĝ_w] − ∇J = (E[ĝ_is] − ∇J)  +  E[ĝ_w − ĝ_is]
     total bias =  baseline part  +  weighting part,

where the baseline part is C8's ``−(1/G)∇J`` (docs/THEORY.md §3 C8), the same for every estimator, and
the weighting part is what the weight map is responsible for. C7 is a statement about the weighting
part: gmc's tends to 0 as G → ∞ (``‖E[ĝ_gmc − ĝ_is]‖ ≤ max|A|‖s‖·E(ρ̄−1−ε)₊ ≤ max|A|‖s‖·σ²/(4εG)``),
tis/tic's to the constant ``E_μ[(w − ρ)(R − E_μR)s]``. A decreasing *total* bias is no evidence for C7:
the baseline part alone decreases like 1/G.

Expectations are exact sums over the multinomial counts ``n ∼ Mult(G, μ)`` (the group is exchangeable),
in float64 with probabilities from log-space, so they are exact to rounding; the weighting part is
summed from ``w − ρ`` directly, never as a difference of two totals.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

import numpy as np
import pandas as pd
from scipy.special import gammaln

ESTIMATORS = ("onpolicy", "is", "tis", "tic", "gmc", "snis")
PER_SAMPLE = ("onpolicy", "is", "tis", "tic")  # weight of τ_i depends on τ_i only
MAX_GROUPS = 2_000_000  # composition count above which enumeration is refused (memory ~ K·8 bytes each)


@dataclass(frozen=True)
class Bandit:
    """Fixed current policy ``pi``, behaviour ``mu`` and reward table ``r`` of a K-armed softmax bandit.

    ρ_k = π_k/μ_k; μ_k > 0 for every arm (else ρ is undefined); π, μ sum to 1; R_k ∈ [0, 1]."""

    pi: tuple
    mu: tuple
    r: tuple
    name: str = "bandit"

    def __post_init__(self):
        pi, mu, r = (np.asarray(v, dtype=float) for v in (self.pi, self.mu, self.r))
        if not (pi.ndim == mu.ndim == r.ndim == 1 and pi.size == mu.size == r.size >= 2):
            raise ValueError(f"pi, mu, r must be 1-d of one length K >= 2, got sizes {pi.size}, {mu.size}, {r.size}")
        for nm, v, lo in (("pi", pi, 0.0), ("mu", mu, None)):
            ok = np.all(np.isfinite(v)) and (np.all(v >= 0) if lo == 0.0 else np.all(v > 0))
            if not ok or abs(v.sum() - 1) > 1e-12:
                rng = "pi_k >= 0" if nm == "pi" else "mu_k > 0"
                raise ValueError(f"{nm} must be a probability vector ({rng}, sum 1), got {tuple(v)}")
        if not (np.all(np.isfinite(r)) and np.all((r >= 0) & (r <= 1))):
            raise ValueError(f"r must lie in [0, 1], got {tuple(r)}")

    @property
    def K(self) -> int:
        return len(self.pi)

    def arrays(self):
        return tuple(np.asarray(v, dtype=float) for v in (self.pi, self.mu, self.r))

    @property
    def rho(self) -> np.ndarray:
        pi, mu, _ = self.arrays()
        return pi / mu

    @property
    def sigma2(self) -> float:
        """σ² = Var_μ(ρ) = χ²(π‖μ)."""
        _, mu, _ = self.arrays()
        return float(np.dot(mu, (self.rho - 1.0) ** 2))

    def grad_j(self) -> np.ndarray:
        """∇J = E_π[R s] = π ∘ (R − J) for the softmax parametrisation."""
        pi, _, r = self.arrays()
        return pi * (r - np.dot(pi, r))

    def score_norm_max(self) -> float:
        """max_k ‖e_k − π‖."""
        pi, _, _ = self.arrays()
        return float(max(np.linalg.norm(np.eye(self.K)[k] - pi) for k in range(self.K)))


#: the 2-arm instance of theory/c7_large_group.py (π = (3/4, 1/4), μ = (1/2, 1/2), R = (1, 0)); issue 17's numbers
TWO_ARM = Bandit((0.75, 0.25), (0.5, 0.5), (1.0, 0.0), "two-arm")
#: a 3-arm instance with one over-represented arm (ρ = 1.8) and a graded reward
THREE_ARM = Bandit((0.6, 0.3, 0.1), (1 / 3, 1 / 3, 1 / 3), (1.0, 0.5, 0.0), "three-arm")


def random_bandit(K: int = 3, seed: int = 0) -> Bandit:
    """A seeded random instance: π, μ ~ Dirichlet(1), R ~ U[0, 1] (numpy default_rng(seed))."""
    if not (isinstance(K, int | np.integer) and K >= 2):
        raise ValueError(f"K must be an integer >= 2, got {K!r}")
    rng = np.random.default_rng(seed)
    pi, mu, r = rng.dirichlet(np.ones(K)), rng.dirichlet(np.ones(K)), rng.uniform(0, 1, K)
    return Bandit(tuple(pi / pi.sum()), tuple(mu / mu.sum()), tuple(r), f"random K={K} seed={seed}")


INSTANCES = {"two-arm": TWO_ARM, "three-arm": THREE_ARM, "random": random_bandit()}


def as_bandit(instance) -> Bandit:
    """A :class:`Bandit`, a name in :data:`INSTANCES`, or a ``(pi, mu, r)`` triple."""
    if isinstance(instance, Bandit):
        return instance
    if isinstance(instance, str):
        if instance not in INSTANCES:
            raise ValueError(f"instance must be one of {tuple(INSTANCES)} (or a Bandit / (pi, mu, r)), got {instance!r}")
        return INSTANCES[instance]
    try:
        pi, mu, r = instance
    except (TypeError, ValueError):
        raise ValueError(f"instance must be a Bandit, a name in {tuple(INSTANCES)} or a (pi, mu, r) triple, "
                         f"got {instance!r}") from None
    return Bandit(tuple(pi), tuple(mu), tuple(r))


def compositions(g: int, k: int) -> np.ndarray:
    """All count vectors n ∈ ℕ^k with Σ n = g, shape (C(g+k−1, k−1), k), in lexicographic order."""
    if k == 1:
        return np.array([[g]], dtype=np.int64)
    parts = [np.column_stack([np.full(len(rest), first, dtype=np.int64), rest])
             for first in range(g, -1, -1) for rest in (compositions(g - first, k - 1),)]
    return np.concatenate(parts)


def _weights(name: str, rho: np.ndarray, rhobar: np.ndarray, eps: float) -> np.ndarray:
    """Per-arm weight W_k(n) of docs/THEORY.md §2, shape (groups, K); rhobar has shape (groups, 1)."""
    cap = 1.0 + eps
    if name == "onpolicy":
        return np.ones_like(rhobar) * np.ones_like(rho)
    if name == "is":
        return np.broadcast_to(rho, (rhobar.shape[0], rho.size))
    if name == "tis":
        return np.broadcast_to(np.minimum(rho, cap), (rhobar.shape[0], rho.size))
    if name == "tic":
        return np.broadcast_to(np.where(rho <= cap, rho, 0.0), (rhobar.shape[0], rho.size))
    if name == "gmc":
        return rho * np.minimum(1.0, cap / rhobar)
    if name == "snis":
        return rho / rhobar
    raise ValueError(f"estimator must be one of {ESTIMATORS}, got {name!r}")


def _group_estimates(b: Bandit, g: int, coef: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(1/G) Σ_k n_k coef_k(n) (R_k − R̄(n)) s_k per group, shape (groups, K); s_k = e_k − π."""
    pi, _, r = b.arrays()
    rbar = (n * r).sum(axis=1, keepdims=True) / g
    a = n * coef * (r[None, :] - rbar) / g  # (groups, K): Σ over the n_k copies of arm k
    return a - a.sum(axis=1, keepdims=True) * pi[None, :]


def _expect(p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Σ_n p(n)·x(n) by NumPy's pairwise summation, not BLAS: the same bits for any thread count."""
    return (p.reshape((-1,) + (1,) * (x.ndim - 1)) * x).sum(axis=0)


def expectations(b: Bandit, name: str, g: int, eps: float) -> dict:
    """Exact ``E[ĝ_name]``, ``E[ĝ_is]``, ``E[ĝ_name − ĝ_is]`` and the removed mass ``E(1/G)Σ(ρ_i − w_i)``."""
    n_groups = comb(g + b.K - 1, b.K - 1)
    if n_groups > MAX_GROUPS:
        raise ValueError(f"G={g} with K={b.K} arms has {n_groups} count vectors (> {MAX_GROUPS}); use a smaller G")
    _, mu, _ = b.arrays()
    rho = b.rho
    n = compositions(g, b.K)
    logp = gammaln(g + 1) - gammaln(n + 1).sum(axis=1) + (n * np.log(mu)).sum(axis=1)
    p = np.exp(logp)
    rhobar = (n * rho).sum(axis=1, keepdims=True) / g
    w = np.asarray(_weights(name, rho, rhobar, eps), dtype=float)
    rho_b = np.broadcast_to(rho, w.shape)
    e_w = _expect(p, _group_estimates(b, g, w, n))
    e_is = _expect(p, _group_estimates(b, g, rho_b, n))
    e_diff = _expect(p, _group_estimates(b, g, w - rho_b, n))
    removed = float(_expect(p, (n * (rho_b - w)).sum(axis=1) / g))
    return {"E_w": e_w, "E_is": e_is, "E_diff": e_diff, "removed_mass": removed, "total_prob": float(p.sum())}


def weighting_limit(b: Bandit, name: str, eps: float) -> np.ndarray:
    """G → ∞ limit of the weighting part of a per-sample map: ``E_μ[(w − ρ)(R − E_μR)s]`` (C7, C8 algebra);
    0 for gmc (and snis), whose weights tend to ρ as ρ̄ → 1."""
    if name not in PER_SAMPLE:
        return np.zeros(b.K)
    pi, mu, r = b.arrays()
    rho = b.rho
    w = _weights(name, rho, np.ones((1, 1)), eps)[0]
    coef = mu * (w - rho) * (r - np.dot(mu, r))
    return coef - coef.sum() * pi


def bias_decomposition(instance, estimator="gmc", Gs: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), eps: float = 0.2):
    """Exact C7/C8 decomposition ``E[ĝ_w] − ∇J = baseline + weighting`` per G (docs/THEORY.md §3 C7, C8).

    ``instance``: :class:`Bandit`, a name in :data:`INSTANCES` or ``(pi, mu, r)``; ``estimator``: a name or a
    sequence of names of docs/THEORY.md §2; ``Gs``: integers ≥ 1; ``eps`` > 0.
    Columns: ``G, estimator, total_norm`` = ‖E ĝ_w − ∇J‖, ``baseline_norm`` = ‖E ĝ_is − ∇J‖ (C8: ‖∇J‖/G),
    ``weighting_norm`` = ‖E[ĝ_w − ĝ_is]‖, ``grad_norm_over_G`` = ‖∇J‖/G, ``removed_mass`` = E(1/G)Σ(ρ_i − w_i)
    (gmc: E(ρ̄−1−ε)₊), ``removed_mass_rate`` = G·removed_mass, ``weighting_bound`` (gmc only:
    max|A|·max‖s‖·σ²/(4εG)), ``weighting_limit_norm`` (the exact G → ∞ limit of weighting_norm),
    ``residual`` = ‖total − baseline − weighting‖ (rounding only), ``baseline_error`` = ‖baseline + ∇J/G‖.
    """
    b = as_bandit(instance)
    names = (estimator,) if isinstance(estimator, str) else tuple(estimator)
    for nm in names:
        if nm not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {nm!r}")
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be finite with eps > 0, got {eps!r}")
    Gs = [int(g) for g in Gs]
    if not Gs or any(g < 1 for g in Gs):
        raise ValueError(f"Gs must be a non-empty sequence of integers >= 1, got {Gs!r}")
    grad = b.grad_j()
    _, _, r = b.arrays()
    a_max = float(r.max() - r.min())  # |R_i − R̄| ≤ max R − min R
    rows = []
    for nm in names:
        lim = float(np.linalg.norm(weighting_limit(b, nm, eps)))
        for g in Gs:
            ex = expectations(b, nm, g, eps)
            total, base, weigh = ex["E_w"] - grad, ex["E_is"] - grad, ex["E_diff"]
            rows.append({
                "instance": b.name, "G": g, "estimator": nm, "eps": eps,
                "total_norm": float(np.linalg.norm(total)), "baseline_norm": float(np.linalg.norm(base)),
                "weighting_norm": float(np.linalg.norm(weigh)), "grad_norm_over_G": float(np.linalg.norm(grad)) / g,
                "removed_mass": ex["removed_mass"], "removed_mass_rate": g * ex["removed_mass"],
                "weighting_bound": a_max * b.score_norm_max() * b.sigma2 / (4 * eps * g) if nm == "gmc" else np.nan,
                "weighting_limit_norm": lim if nm in PER_SAMPLE else 0.0,
                "residual": float(np.linalg.norm(total - base - weigh)),
                "baseline_error": float(np.linalg.norm(base + grad / g)),
            })
    return pd.DataFrame(rows)


#: the C7 verdict's thresholds: gmc's weighting part must fall over the last TAIL_POINTS G values and end
#: below PEAK_FRACTION of its peak; tis/tic's must end within LIMIT_RTOL of their exact non-zero limit
TAIL_POINTS, PEAK_FRACTION, LIMIT_RTOL = 3, 0.1, 0.05


def c7_verdict(df: pd.DataFrame) -> dict:
    """C7 judged on the weighting part (docs/THEORY.md §3 C7, §4 vocabulary), from :func:`bias_decomposition`
    rows of one instance holding gmc and at least one of tis/tic.

    - ``out of scope``: no arm has ρ > 1+ε, so no estimator is capped and there is nothing to test;
    - ``refuted``: gmc's weighting part exceeds its bound max|A|·max‖s‖·σ²/(4εG) at some G, or a tis/tic
      limit E_μ[(w−ρ)(R−E_μR)s] is exactly 0 although capping is active;
    - ``holds``: gmc's weighting part strictly decreases over the last ``TAIL_POINTS`` G and ends
      ≤ ``PEAK_FRACTION`` × its peak, and every tis/tic weighting part ends within ``LIMIT_RTOL`` of its
      non-zero limit;
    - ``inconclusive``: otherwise (the G range is too short to see the limit).

    Returns ``verdict, reason, peak_G, peak, final_G, final, rate_final`` (G·E(ρ̄−1−ε)₊ at the largest G),
    ``limits`` {tis/tic: limit norm} and ``finals`` {tis/tic: weighting part at the largest G}."""
    need = {"G", "estimator", "weighting_norm", "weighting_bound", "weighting_limit_norm", "removed_mass_rate"}
    if not need <= set(df.columns):
        raise ValueError(f"df must come from bias_decomposition (columns {sorted(need)})")
    gm = df[df.estimator == "gmc"].sort_values("G")
    per = df[df.estimator.isin(("tis", "tic"))]
    if gm.empty or per.empty:
        raise ValueError("df must hold gmc and at least one of tis/tic")
    w = gm.weighting_norm.to_numpy()
    i_peak = int(np.argmax(w))
    out = {"peak_G": int(gm.G.iloc[i_peak]), "peak": float(w[i_peak]), "final_G": int(gm.G.iloc[-1]),
           "final": float(w[-1]), "rate_final": float(gm.removed_mass_rate.iloc[-1])}
    finals = {nm: float(s.sort_values("G").weighting_norm.iloc[-1]) for nm, s in per.groupby("estimator")}
    limits = {nm: float(s.weighting_limit_norm.iloc[0]) for nm, s in per.groupby("estimator")}
    out.update(finals=finals, limits=limits)
    if w.max() == 0 and all(v == 0 for v in limits.values()):
        return {**out, "verdict": "out of scope", "reason": "no weight is ever capped (every ρ_k ≤ 1+ε): "
                f"max weighting part {w.max():.1e}"}
    over = gm[gm.weighting_norm > gm.weighting_bound * (1 + 1e-12)]
    if len(over):
        r = over.iloc[0]
        return {**out, "verdict": "refuted", "reason": f"gmc weighting part {r.weighting_norm:.3g} > bound "
                f"{r.weighting_bound:.3g} at G={int(r.G)}"}
    if any(v == 0 for v in limits.values()):
        return {**out, "verdict": "refuted", "reason": f"a tis/tic limit is 0 although capping is active: {limits}"}
    tail = w[-TAIL_POINTS:]
    falling = len(w) > TAIL_POINTS and bool(np.all(np.diff(tail) < 0)) and w[-1] <= PEAK_FRACTION * w[i_peak]
    flat = all(abs(finals[nm] - limits[nm]) <= LIMIT_RTOL * limits[nm] for nm in limits)
    desc = (f"gmc weighting part peaks at G={out['peak_G']} ({out['peak']:.2g}), is {out['final']:.2g} at "
            f"G={out['final_G']}; " + ", ".join(f"{nm} {finals[nm]:.3g} vs limit {limits[nm]:.3g}" for nm in limits))
    if falling and flat:
        return {**out, "verdict": "holds", "reason": desc}
    why = [] if falling else [f"gmc's last {TAIL_POINTS} not falling to ≤ {PEAK_FRACTION:g}×peak"]
    why += [] if flat else [f"tis/tic not within {LIMIT_RTOL:.0%} of their limits"]
    return {**out, "verdict": "inconclusive", "reason": desc + " — " + "; ".join(why)}
