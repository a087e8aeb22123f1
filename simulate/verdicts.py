"""The one verdict vocabulary and the statistics behind it (docs/THEORY.md §4, docs/protocol.md).

Every claim of the report ends in one of

    holds · refuted · inconclusive · out of scope · holds, bound loose ×k

each defined once in :data:`DEFINITIONS` (with the non-test words of issue 54 and :func:`check_claim_row`, in
:mod:`simulate.verdict_words`, re-exported here), and this module is the only place that maps numbers to those
words. Qualifiers are not verdicts: the report prints them in a separate note column (:data:`NOTES`). All
intervals come from ``scipy.stats``: paired Student-t intervals for differences over seeds (small n), Clopper–Pearson
intervals for failure rates, ``scipy.stats.bootstrap`` for slopes. Holm's step-down correction runs
over the comparisons of one claim.

**The decision rule (one rule for every comparison).** A comparison names an effect ``Δ`` oriented so that
the claim predicts it is large, and a threshold ``c`` fixed before the data: ``c = +δ`` (superiority, the
practical margin) or ``c = −δ`` (non-inferiority, "best or tied"). Two one-sided t-tests give ``p_holds``
(H₀: ``Δ ≤ c``) and ``p_refutes`` (H₀: ``Δ ≥ c``); after Holm over the claim's family at level ``α`` (0.05,
one-sided): ``holds`` if ``p_holds`` is rejected, ``refuted`` if ``p_refutes`` is, otherwise
``inconclusive``. Reported intervals are the two-sided ``1 − 2α_i`` t-intervals at each comparison's Holm
level, so ``holds`` ⇔ ``lo > c`` and ``refuted`` ⇔ ``hi < c``. Failure rates use the exact Clopper–Pearson
interval with the same three zones. **Bounds**: ``refuted`` iff measured − 3 s.e. > bound, else ``holds``,
``holds, bound loose ×k`` when :func:`looseness` ``k > 2``. **Across instances**: ``holds`` on ≥ ¾ of the
in-scope instances and refuted on none; ``refuted`` on a strict majority; ``out of scope`` if none is in
scope; otherwise ``inconclusive``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from simulate.verdict_words import (  # noqa: F401 — the vocabulary, re-exported: simulate.verdicts is its one entry point
    BY_CONSTRUCTION, CANNOT_FAIL, DEFINITIONS, EXACT, HOLDS, INCONCLUSIVE, LOOSE_PREFIX, NON_TEST, NOTES, OUT_OF_SCOPE,
    REFUTED, REGIME_SUFFIX, SYMBOLIC, VERDICTS, _is_test_word, base_word, check_claim_row, is_test_verdict, is_verdict)

KINDS = ("superiority", "noninferiority")
ALPHA = 0.05
Z_REFUTE = 3.0  #: a bound is refuted iff measured − 3 s.e. exceeds it; the looseness uses the same 3 s.e.
LOOSE_MIN = 2.0  #: looseness above which a holding bound reads ``holds, bound loose ×k``


def looseness(measured: float, se: float | None, bound: float, z: float = Z_REFUTE) -> float | None:
    """The one looseness of every bound: ``k = bound / (measured + z·se)``, the bound over the measurement's upper
    ``z``-s.e. limit (finite even for a measurement indistinguishable from 0); ``None`` if either is ≤ 0."""
    if measured is None or bound is None:
        return None
    se = 0.0 if se is None or not math.isfinite(se) else float(se)
    upper = float(measured) + z * se
    if not (math.isfinite(upper) and math.isfinite(bound)) or upper <= 0 or bound <= 0:
        return None
    return float(bound) / upper


def loose_word(k: float | None) -> str:
    """``holds, bound loose ×k`` when ``k > LOOSE_MIN`` (3 significant digits), else ``holds``."""
    return f"{LOOSE_PREFIX}{k:.3g}" if k is not None and k > LOOSE_MIN else HOLDS


def equivalence(estimate: float, se: float, margin: float, alpha: float = ALPHA) -> tuple[str, float, float, float]:
    """TOST that a normal estimate lies within ``±margin``: ``(verdict, p, lo, hi)``, ``p = max(P(Z ≥ (x+m)/se),
    P(Z ≤ (x−m)/se))`` (``scipy.stats.norm``), ``[lo, hi]`` the ``1−2α`` interval; holds iff ``p < α``, refuted iff
    the interval lies entirely outside ``±margin``, else inconclusive."""
    alpha = _check_alpha(alpha)
    margin = _check_margin(margin)
    if not (math.isfinite(estimate) and math.isfinite(se) and se >= 0):
        raise ValueError(f"estimate and se must be finite with se >= 0, got {estimate!r}, {se!r}")
    if se == 0:
        inside = abs(estimate) < margin
        return (HOLDS if inside else REFUTED), (0.0 if inside else 1.0), estimate, estimate
    p = max(float(stats.norm.sf((estimate + margin) / se)), float(stats.norm.cdf((estimate - margin) / se)))
    q = float(stats.norm.ppf(1 - alpha))
    lo, hi = estimate - q * se, estimate + q * se
    if p < alpha:
        return HOLDS, p, lo, hi
    if lo > margin or hi < -margin:
        return REFUTED, p, lo, hi
    return INCONCLUSIVE, p, lo, hi


def _check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and 0.0 < alpha < 0.5):
        raise ValueError(f"alpha must be a number in (0, 0.5), got {alpha!r}")
    return float(alpha)


def _check_margin(margin: float) -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    return float(margin)


def _sample(x, name: str, min_n: int = 2) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size < min_n:
        raise ValueError(f"{name} needs at least {min_n} values, got {a.size}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (no NaN/inf); got {int(np.sum(~np.isfinite(a)))} non-finite values")
    return a


def t_interval(x, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: Student-t interval ``x̄ ± t_{n−1,(1+level)/2}·s/√n`` (``scipy.stats.t``); ``n = 1`` or
    zero spread gives ``lo = hi = mean``."""
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError("x must hold at least one value")
    if not np.all(np.isfinite(a)):
        raise ValueError("x must be finite (no NaN/inf)")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    m = float(a.mean())
    if a.size < 2:
        return m, m, m
    se = float(stats.sem(a))
    if se == 0.0:
        return m, m, m
    lo, hi = stats.t.interval(level, a.size - 1, loc=m, scale=se)
    return m, float(lo), float(hi)


@dataclass(frozen=True)
class Comparison:
    """One pre-declared paired comparison: effect ``Δ = mean(a − b)`` against threshold ``c``."""

    name: str
    kind: str
    margin: float
    threshold: float
    n: int
    estimate: float
    se: float
    p_holds: float
    p_refutes: float
    alpha_level: float = ALPHA
    lo: float = math.nan
    hi: float = math.nan
    verdict: str = INCONCLUSIVE

    def as_dict(self) -> dict:
        """A row of a tidy table."""
        return asdict(self)


def _one_sided(d: np.ndarray, c: float) -> tuple[float, float, float, float]:
    m = float(d.mean())
    se = float(stats.sem(d)) if d.size > 1 else 0.0
    if se == 0.0:  # no spread: the sign of m − c decides with certainty
        return m, 0.0, (0.0 if m > c else 1.0), (0.0 if m < c else 1.0)
    tstat = (m - c) / se
    df = d.size - 1
    return m, se, float(stats.t.sf(tstat, df)), float(stats.t.cdf(tstat, df))


def paired_comparison(a, b, *, kind: str, margin: float, name: str = "", alpha: float = ALPHA) -> Comparison:
    """Compare paired samples on ``Δ_s = a_s − b_s`` (module rule): ``kind="superiority"`` claims ``E Δ > +margin``,
    ``"noninferiority"`` ``E Δ > −margin``; a family of one (use :func:`decide` for a Holm family)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    margin = _check_margin(margin)
    a = _sample(a, "a")
    b = _sample(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must be paired (same length), got {a.size} and {b.size}")
    c = margin if kind == "superiority" else -margin
    d = a - b
    m, se, ph, pr = _one_sided(d, c)
    return decide([Comparison(name, kind, margin, c, d.size, m, se, ph, pr)], alpha=alpha)[0]


def one_sample_comparison(x, *, kind: str, margin: float, name: str = "", alpha: float = ALPHA) -> Comparison:
    """:func:`paired_comparison` with ``b = 0`` (``x`` are already paired differences)."""
    x = _sample(x, "x")
    return paired_comparison(x, np.zeros_like(x), kind=kind, margin=margin, name=name, alpha=alpha)


def holm(pvalues, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Holm step-down: ``(rejected, level_i)`` where ``level_i = α/(m − rank_i)`` (rank from 0).

    Rejection stops at the first sorted p-value above its level (Holm 1979).
    """
    alpha = _check_alpha(alpha)
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("pvalues must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    levels = np.empty(m)
    rejected = np.zeros(m, dtype=bool)
    going = True
    for rank, i in enumerate(order):
        levels[i] = alpha / (m - rank)
        if going and p[i] <= levels[i]:
            rejected[i] = True
        else:
            going = False
    return rejected, levels


def decide(comparisons, alpha: float = ALPHA) -> list[Comparison]:
    """Verdicts for one claim's family of comparisons, Holm-corrected separately for holds/refutes.

    Each returned comparison carries the two-sided interval at ``1 − 2·α_i`` (its Holm level), so
    ``holds`` ⇔ ``lo > threshold`` and ``refuted`` ⇔ ``hi < threshold`` for that row.
    """
    comps = list(comparisons)
    if not comps:
        return []
    rej_h, lev_h = holm([c.p_holds for c in comps], alpha)
    rej_r, lev_r = holm([c.p_refutes for c in comps], alpha)
    out = []
    for c, h, r, lh, lr in zip(comps, rej_h, rej_r, lev_h, lev_r):
        verdict = HOLDS if h else REFUTED if r else INCONCLUSIVE
        level = lh if h else lr if r else min(lh, lr)
        if c.se > 0 and c.n > 1:
            q = stats.t.ppf(1 - level, c.n - 1)
            lo, hi = c.estimate - q * c.se, c.estimate + q * c.se
        else:
            lo = hi = c.estimate
        out.append(Comparison(c.name, c.kind, c.margin, c.threshold, c.n, c.estimate, c.se, c.p_holds, c.p_refutes,
                              float(level), float(lo), float(hi), verdict))
    return out


@dataclass(frozen=True)
class RateCheck:
    """A failure-rate claim: ``rate > p0`` (``direction="above"``) or ``rate < p0`` (``"below"``)."""

    name: str
    direction: str
    p0: float
    failures: int
    n: int
    rate: float
    lo: float
    hi: float
    verdict: str

    def as_dict(self) -> dict:
        """A row of a tidy table."""
        return asdict(self)


def rate_check(failures: int, n: int, *, p0: float, direction: str, name: str = "", alpha: float = ALPHA) -> RateCheck:
    """Clopper–Pearson interval at ``1 − 2α`` (``scipy.stats.binomtest``) against ``p0``, three zones."""
    alpha = _check_alpha(alpha)
    if direction not in ("above", "below"):
        raise ValueError(f"direction must be 'above' or 'below', got {direction!r}")
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not (isinstance(failures, (int, np.integer)) and 0 <= failures <= n):
        raise ValueError(f"failures must be an integer in [0, n] = [0, {n}], got {failures!r}")
    if not (0.0 < p0 < 1.0):
        raise ValueError(f"p0 must be in (0, 1), got {p0!r}")
    ci = stats.binomtest(int(failures), int(n)).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    lo, hi = float(ci.low), float(ci.high)
    if direction == "above":
        verdict = HOLDS if lo > p0 else REFUTED if hi < p0 else INCONCLUSIVE
    else:
        verdict = HOLDS if hi < p0 else REFUTED if lo > p0 else INCONCLUSIVE
    return RateCheck(name, direction, float(p0), int(failures), int(n), failures / n, lo, hi, verdict)


def combine(verdicts) -> str:
    """All parts of one compound claim on one instance: refuted if any part is refuted, holds if all
    hold, out of scope if every part is out of scope, otherwise inconclusive."""
    vs = [v for v in verdicts]
    if not vs:
        raise ValueError("verdicts must not be empty")
    for v in vs:
        if not _is_test_word(v):
            raise ValueError(f"unknown verdict {v!r}; the vocabulary is {', '.join(VERDICTS)}")
    if any(v == REFUTED for v in vs):
        return REFUTED
    if all(v == OUT_OF_SCOPE for v in vs):
        return OUT_OF_SCOPE
    if all(v == HOLDS or v.startswith("holds") for v in vs if v != OUT_OF_SCOPE):
        return HOLDS
    return INCONCLUSIVE


def aggregate(verdicts, min_fraction: float = 0.75) -> str:
    """Across instances (module rule, ``min_fraction`` of the in-scope instances for holds)."""
    vs = list(verdicts)
    for v in vs:
        if not _is_test_word(v):
            raise ValueError(f"unknown verdict {v!r}; the vocabulary is {', '.join(VERDICTS)}")
    scoped = [v for v in vs if v != OUT_OF_SCOPE]
    if not scoped:
        return OUT_OF_SCOPE
    n_h = sum(v == HOLDS or v.startswith("holds") for v in scoped)
    n_r = sum(v == REFUTED for v in scoped)
    if n_r * 2 > len(scoped):
        return REFUTED
    if n_r == 0 and n_h >= math.ceil(min_fraction * len(scoped) - 1e-12):
        return HOLDS
    return INCONCLUSIVE


def slope_weights(x) -> np.ndarray:
    """The least-squares slope as a linear functional ``w = (x − x̄)/Σ(x − x̄)²``: slope of ``y`` on ``x`` = ``y @ w``
    (= ``scipy.stats.linregress``), for many ``y`` rows at once (a vectorised bootstrap)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError("x needs at least two distinct values")
    xc = x - x.mean()
    return xc / float(xc @ xc)


def bootstrap_slope(x, Y, *, n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """Least-squares slope of ``mean_s Y[s, j]`` on ``x_j`` with a percentile bootstrap over the rows (seeds) of
    ``Y`` ``(n_seeds, n_x)`` (``scipy.stats.bootstrap``; whole rows keep a seed's points together): ``(slope, lo, hi)``."""
    x = np.asarray(x, dtype=np.float64).ravel()
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or Y.shape[1] != x.size:
        raise ValueError(f"Y must have shape (n_seeds, {x.size}), got {Y.shape}")
    if Y.shape[0] < 2:
        raise ValueError(f"Y needs at least 2 rows (seeds), got {Y.shape[0]}")
    if not np.all(np.isfinite(Y)) or not np.all(np.isfinite(x)):
        raise ValueError("x and Y must be finite")
    w = slope_weights(x)

    def slope(idx, axis=-1):
        rows = Y[np.asarray(idx, dtype=np.int64)]
        return np.mean(rows, axis=-2) @ w

    est = float(Y.mean(axis=0) @ w)
    if np.all(Y == Y[0]):
        return est, est, est
    res = stats.bootstrap((np.arange(Y.shape[0]),), slope, n_resamples=n_resamples, confidence_level=level,
                          method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return est, float(res.confidence_interval.low), float(res.confidence_interval.high)


def interval_verdict(lo: float, hi: float, threshold: float, above: bool = True) -> str:
    """Three zones of an interval ``[lo, hi]`` against ``threshold``: the claim predicts the quantity is
    above it (``above=True``) or below it."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise ValueError(f"need a finite interval lo <= hi, got [{lo}, {hi}]")
    if above:
        return HOLDS if lo > threshold else REFUTED if hi < threshold else INCONCLUSIVE
    return HOLDS if hi < threshold else REFUTED if lo > threshold else INCONCLUSIVE


def bound_verdict(measured: float, upper: float, bound: float) -> str:
    """``measured`` with its upper confidence limit ``upper`` against ``bound``: ``refuted`` if the lower side
    ``2·measured − upper`` exceeds it, ``holds, bound loose ×k`` (k = bound/measured; unused by the report, which
    takes :func:`looseness`) when ``upper ≤ bound``, else inconclusive."""
    if not all(math.isfinite(v) for v in (measured, upper, bound)):
        raise ValueError("measured, upper and bound must be finite")
    if upper < measured:
        raise ValueError(f"upper ({upper}) must be >= measured ({measured})")
    lower = measured - (upper - measured)
    if lower > bound:
        return REFUTED
    if upper <= bound:
        k = bound / measured if measured > 0 else math.inf
        return f"holds, bound loose ×{k:.3g}" if math.isfinite(k) else "holds, bound loose ×∞"
    return INCONCLUSIVE


def exact_verdict(measured: float, se: float, predicted: float, z: float = 3.0) -> str:
    """An exact identity: ``holds`` (note: exact identity) iff ``|measured − predicted| ≤ z·se``, else ``refuted``."""
    if not all(math.isfinite(v) for v in (measured, se, predicted)) or se < 0:
        raise ValueError("measured, se and predicted must be finite, se >= 0")
    return EXACT if abs(measured - predicted) <= z * se else REFUTED


def comparison_power(n: int, sd: float, margin: float, level: float) -> float:
    """Power of a paired comparison (``n`` seeds, difference s.d. ``sd``) one margin δ either side of the threshold,
    one-sided t at ``level``: ``1 − F_{nct}(t_{1−level, n−1}; n−1, δ√n/sd)`` (``scipy.stats.nct``); ``sd = 0`` → 1."""
    if not (isinstance(n, (int, np.integer)) and n >= 2):
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    if not (math.isfinite(sd) and sd >= 0):
        raise ValueError(f"sd must be a finite number >= 0, got {sd!r}")
    margin = _check_margin(margin)
    if not 0.0 < level < 0.5:
        raise ValueError(f"level must be in (0, 0.5), got {level!r}")
    if sd == 0.0:
        return 1.0 if margin > 0 else 0.0
    tcrit = stats.t.ppf(1 - level, n - 1)
    return float(stats.nct.sf(tcrit, n - 1, margin * math.sqrt(n) / sd))


def rate_power(n: int, p0: float, direction: str, alpha: float = ALPHA) -> float:
    """Power of :func:`rate_check` at ``n`` runs (exact binomial sum): the smaller of ``P(holds)`` and ``P(refuted)``
    at the alternatives ``p0/4`` and ``min(2·p0, 1)``."""
    alpha = _check_alpha(alpha)
    if direction not in ("above", "below"):
        raise ValueError(f"direction must be 'above' or 'below', got {direction!r}")
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    low, high = p0 / 4, min(2 * p0, 1.0)
    ks = np.arange(n + 1)
    v = np.array([rate_check(int(k), int(n), p0=p0, direction=direction, alpha=alpha).verdict for k in ks])
    claim, neg = (high, low) if direction == "above" else (low, high)
    p_h = float(stats.binom.pmf(ks, n, claim)[v == HOLDS].sum())
    p_r = float(stats.binom.pmf(ks, n, neg)[v == REFUTED].sum())
    return min(p_h, p_r)


def interval_power(effect: float, se: float, alpha: float = ALPHA) -> float:
    """Power of an interval test whose threshold sits halfway between the claim's prediction and its
    negation, ``|effect|`` apart, for an estimate with standard error ``se`` (normal approximation):
    ``Φ(|effect|/(2·se) − z_{1−α})``, the same on both sides."""
    alpha = _check_alpha(alpha)
    if not (math.isfinite(se) and se >= 0 and math.isfinite(effect)):
        raise ValueError(f"effect and se must be finite with se >= 0, got {effect!r}, {se!r}")
    if se == 0:
        return 1.0 if effect != 0 else 0.0
    return float(stats.norm.cdf(abs(effect) / (2 * se) - stats.norm.ppf(1 - alpha)))


__all__ = ["HOLDS", "REFUTED", "INCONCLUSIVE", "OUT_OF_SCOPE", "VERDICTS", "ALPHA", "is_verdict", "t_interval",
           "Comparison", "paired_comparison", "one_sample_comparison", "holm", "decide", "RateCheck", "rate_check",
           "combine", "aggregate", "slope_weights", "bootstrap_slope", "interval_verdict", "bound_verdict",
           "comparison_power", "rate_power", "interval_power", "exact_verdict", "EXACT", "LOOSE_PREFIX",
           "DEFINITIONS", "NOTES", "looseness", "loose_word", "equivalence", "Z_REFUTE", "LOOSE_MIN", "BY_CONSTRUCTION",
           "CANNOT_FAIL", "SYMBOLIC", "NON_TEST", "REGIME_SUFFIX", "base_word", "is_test_verdict", "check_claim_row"]
