"""Experiments of the training simulator: step-size tuning, the G^{−2/5} experiment (C5), robustness (C9).

Every function returns tidy pandas tables (experiments are data, STYLE §5); printing and plotting
live in ``simulate/commands`` and ``figures/``. Stable signatures (the figures code relies on them)::

    mean_ci(x, level=0.95) -> (mean, lo, hi)                      # t-interval, the one CI function
    run_grid(configs, seeds, progress=True) -> DataFrame          # one row per run
    tune(grid, seeds=range(5), etas=None, quick=False, ...) -> DataFrame   # one row per (setting, η)
    best_eta(tuned) -> DataFrame                                  # one row per setting, the tuned η
    g_scaling_experiment(quick=False, ..., regime="far") -> (DataFrame, dict)   # C5: Δ(G), fitted slope
    robustness_experiment(quick=False, ..., regime="far") -> DataFrame          # C9: per (estimator, d)
    c9_verdict(table) -> dict                                     # the claim's parts, from the numbers
    regime_criteria(table) -> dict                                # the regime's criteria (a)–(c)
    theory_g_exponents() -> dict                                  # C5 prediction from theory/

**The far regime (chosen on stated criteria, before looking at the estimator ranking).** A regime is
informative for C5/C9 when, with η tuned on the grid: (a) the realised ``χ²(π_θ‖μ)`` at the
largest delay is ``≥ 1`` (median over the tuned runs); (b) ``is`` shows heavy-tailed steps (its step
tail ratio ``max‖ĝ‖²/mean‖ĝ‖²`` at least twice its d = 0 value at the same η) or diverges; (c) the
delay costs something: for at least one estimator the tuned score at the largest d is worse than
at d = 0 by more than 2 standard errors; (d) the tuned η is interior to the grid. Measured with
G = 8, d ∈ {0, 32}, 4 seeds, η ∈ {2^-1 … 2^11}, K = 200, SGA (LOG.md has the numbers):

- the previous default (V = 3, T = 4, ``prev``, ``sum_mod``) and the 0/1 rewards at longer horizons
  (``count_ge`` V = 3, T = 16, k = 10; ``sum_mod`` V = 3, T = 16) fail (c) and (d): with a 0/1
  reward on a deterministic single-prompt MDP one huge step that *clones* any rewarded sample is
  optimal, so the tuned η sits at the top of every grid, every estimator reaches J = 1 at every
  delay, and the delay costs nothing although ``χ²`` reaches 10⁶. Adam with a fixed learning rate
  (0.01–3, K = 100) does not change this.
- the partial-credit reward ``count_frac`` (``R = #0-tokens / T``, :func:`simulate.training.count_frac_mdp`)
  meets (a)–(d) at T ∈ {8, 16, 32}: cloning a sample now locks in its own mediocre reward, so
  noise and staleness cost objective. T = 16 is the default: long enough that ``ℓ_i`` sums many
  token log-ratios (χ² ~ 10⁵ at d = 32), short enough for the default sizes to run in minutes.

**Regimes.** Both experiments take ``regime="far"`` (default, the regime above) or ``"local"``
(:data:`REGIMES`). In ``far`` the realised ``χ²(π_θ‖μ)`` at the largest delay is 10³–10⁶, far outside
THEORY.md's analysis (C6: local policy overlap, ``σ² = χ² ≲ (κηdM)²`` small; C4/C5 asymptotics need
``G ≫ χ²``). ``local`` is the second preset, in the local-overlap regime. Its criteria were fixed
before comparing estimators, and :func:`regime_criteria` reads them off each experiment's own table:
(a) median realised χ² over the tuned runs at the largest d in ``[0.05, 1]``
(:data:`LOCAL_CHI2_RANGE`); (b) tuned η interior to the grid in ≥ 90% of cells; (c) a delay cost
above 2 standard errors for at least one estimator at the largest d (otherwise nothing can be
told apart). Search (``count_frac``, V = 3, SGA, η ∈ 2^-3 … 2^11, 3–4 seeds, onpolicy/is/tic/gmc
or all ten estimators; LOG.md has the numbers): shorter horizons, smaller delays and more steps
lower χ² at the tuned η; more prompts per step (n_prompts = 4) raised it (C5, and C9 with all ten
estimators: 1.41 vs 0.80 at d = 4) and pushed C5's tuned η
to the top of the grid at G = 256, so n_prompts stays 1. Chosen: T = 4, K = 400, n_prompts = 1,
η ∈ 2^-1 … 2^11; C5 at d = 8 (search: median χ² 0.64, no edge, delay cost 6.9 s.e.); C9 at
d ∈ {0, 1, 2, 4} (search, all ten estimators: median χ² 0.12, 0.40, 0.80 at d = 1, 2, 4, 1.27 at
d = 8, so d = 8 fails (a)). Caveat measured in the search: tuned on the final J, every estimator
reaches ``J ≥ 0.998`` at every d ≤ 8 (K = 50–400, T = 4–8): at small χ² the final J saturates, the
delay costs ~10⁻³, and C9's comparison is between near-ties; the regret ``(1/K)Σ(J* − J(θ_k))``
is reported next to it and ``score="avg_regret"`` tunes on it. At default size both experiments
meet (a)–(c) in their own tables (C5: median χ² 0.61, 31/32 cells interior, 6.7 s.e.; C9 on final
J: 0.56, 40/40, 6.8 s.e.; LOG.md has the estimator results).

**Scores.** ``(1/K)Σ‖∇J(θ_k)‖²`` (C5's left side) vanishes on *any* saturated policy, so on tabular
softmax it prefers a collapse and its tuned η runs to the top of the grid; the G experiment
therefore tunes on the average regret ``(1/K)Σ(J* − J(θ_k))`` by default (``score=`` switches back),
and C9 on the final J. Every table reports the other scores next to the tuning one.

**Tuning.** For a setting (estimator, delay, ε, G, …) and each η of a log-grid, the score is the
mean over seeds of the chosen per-run score (``SCORES``); a diverged run scores ``+∞``, so an η with
any diverged seed is never chosen. The tuned score is ``min_η`` of the mean score (``max_η`` of the
mean final J).

**The G experiment (C5).** For gmc and tic at fixed ``d`` and ε, the delay-dependent part
``Δ(G) = tuned score at d − tuned score at d = 0`` is measured for G on a log-grid, and the slope of
``log Δ`` against ``log G`` is fitted by least squares on the G with ``Δ > 0``; the others are reported
as not measurable (``log Δ`` undefined), never silently dropped, and with fewer than three G left the
slope is NaN with a reason. Its confidence interval comes from a bootstrap over seeds (seeds are
resampled jointly for every η, d and G, and η is re-tuned in each replicate, so tuning noise is part
of the interval); every replicate fits the same G set, and a replicate with ``Δ_b ≤ 0`` at one of them
counts as its limit ``Δ_b → 0+`` (slope ``±∞`` on the side it tends to; both ends if undetermined). At least two seeds are required. THEORY predicts −2/5 for
gmc and 0 for tic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from simulate import delays as dl
from simulate.training import InstanceSpec, TrainConfig, run_many

#: Instance of the experiments (module docstring, "The regime"): V = 3, T = 16, state = count of
#: token 0, partial-credit reward ``R = count/T`` (J(θ_0) = 1/3, J* = 1).
EXP_INSTANCE = InstanceSpec(kind="token", V=3, T=16, state="count", reward="count_frac")
#: The log-grid of step sizes searched by default: 2^-1 … 2^11, wide enough that the tuned η of the
#: default experiments is interior (the experiments count the cells where it is not).
ETA_GRID = tuple(float(2.0 ** j) for j in range(-1, 12))
#: The three step sizes of the ``quick`` presets.
QUICK_ETAS = (8.0, 64.0, 512.0)
#: Tuning criteria: least ``(1/K)Σ‖∇J‖²``, least ``(1/K)Σ(J*−J)``, largest final J.
SCORES = ("avg_grad_norm2", "avg_regret", "final_J")


@dataclass(frozen=True)
class Regime:
    """A preset of the C5/C9 experiments: the instance, learner and grids (module docstring, "Regimes")."""

    name: str
    """``far`` or ``local``."""
    instance: InstanceSpec
    """the tabular instance."""
    steps: int
    """learner steps K at default size."""
    n_prompts: int
    """groups per learner step."""
    etas: tuple[float, ...]
    """the η log-grid searched at default size."""
    c5_d: int
    """the delay d of the G experiment (C5)."""
    c9_ds: tuple[int, ...]
    """the fixed delays of the robustness experiment (C9); the largest is the one C9's verdict reads."""
    quick_steps: int
    """K of the ``quick`` presets."""
    quick_etas: tuple[float, ...]
    """η of the ``quick`` presets."""
    quick_c9_ds: tuple[int, ...]
    """delays of the quick robustness preset."""

    def __post_init__(self):
        if self.name not in ("far", "local"):
            raise ValueError(f"regime name must be 'far' or 'local', got {self.name!r}")


#: The two presets. ``far``: the first regime (χ² ~ 10³–10⁶ at the largest d), the default.
#: ``local``: the local-overlap regime of C6 (median realised χ² at the largest d in [0.05, 1]),
#: chosen on the criteria of the module docstring before comparing estimators.
REGIMES = {
    "far": Regime(name="far", instance=EXP_INSTANCE, steps=200, n_prompts=1, etas=ETA_GRID, c5_d=16,
                  c9_ds=(0, 2, 4, 8, 16, 32), quick_steps=60, quick_etas=QUICK_ETAS, quick_c9_ds=(0, 8, 32)),
    "local": Regime(name="local", instance=InstanceSpec(kind="token", V=3, T=4, state="count", reward="count_frac"),
                    steps=400, n_prompts=1, etas=ETA_GRID, c5_d=8, c9_ds=(0, 1, 2, 4), quick_steps=120,
                    quick_etas=(8.0, 32.0, 128.0), quick_c9_ds=(0, 2, 4)),
}


def get_regime(regime: str | Regime) -> Regime:
    """The :class:`Regime` named ``regime`` (``far`` or ``local``), or ``regime`` itself."""
    if isinstance(regime, Regime):
        return regime
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {', '.join(REGIMES)}, got {regime!r}")
    return REGIMES[regime]


# --------------------------------------------------------------------------- statistics
def mean_ci(x, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``x`` with a two-sided Student-t interval ``x̄ ± t_{n−1, (1+level)/2}·σ̂/√n``.

    NaN entries are dropped; an ``inf`` makes the mean ``inf`` and the interval ``(inf, inf)``;
    fewer than two values give a NaN interval.
    """
    from scipy import stats

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    a = np.asarray(x, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    n = a.size
    if n == 0:
        return math.nan, math.nan, math.nan
    m = float(a.mean())
    if not math.isfinite(m):
        return m, m, m
    if n < 2:
        return m, math.nan, math.nan
    h = float(stats.t.ppf(0.5 + level / 2, n - 1) * a.std(ddof=1) / math.sqrt(n))
    return m, m - h, m + h


# --------------------------------------------------------------------------- grids and tuning
#: TrainConfig fields already spelled out in the readable part of a setting id.
_ID_FIELDS = ("instance", "estimator", "eps", "G", "n_prompts", "delay", "steps", "optimizer", "eta", "seed")


def _setting_id(c: TrainConfig) -> str:
    """String id of a setting: every TrainConfig field but η and seed.

    A readable part (instance, estimator, ε, G, prompts, delay, K, optimizer, plus every other field
    that differs from its default) and ``#`` + 10 hex digits of the SHA-1 of the full config repr
    with η and seed fixed, so that settings differing in *any* field (Adam betas, ``adv_norm``,
    ``init_scale``, divergence thresholds, bandit rewards or seed …) never share an id.
    """
    import hashlib

    default = TrainConfig()
    extra = "".join(f"|{f.name}={getattr(c, f.name)!r}" for f in fields(TrainConfig)
                    if f.name not in _ID_FIELDS and getattr(c, f.name) != getattr(default, f.name))
    digest = hashlib.sha1(repr(c.replace(eta=1.0, seed=0)).encode()).hexdigest()[:10]
    return (f"{c.instance.label}|{c.estimator}|eps={c.eps:g}|G={c.G}|P={c.n_prompts}|{c.delay.label}|"
            f"K={c.steps}|{c.optimizer}{extra}#{digest}")


def _check_seeds(seeds, min_n: int = 1) -> list[int]:
    """``seeds`` as a list of distinct integers ≥ 0 with at least ``min_n`` entries, else ValueError."""
    try:
        out = [int(s) for s in seeds]
        ok = all(float(s) == int(s) for s in seeds)
    except (TypeError, ValueError, OverflowError):
        out, ok = [], False
    if not ok or len(out) < min_n or len(set(out)) != len(out) or min(out, default=0) < 0:
        raise ValueError(f"seeds must be at least {min_n} distinct integers >= 0 "
                         f"(e.g. range(n) with n >= {min_n}), got {seeds!r}")
    return out


def _check_ints(values, name: str, low: int) -> tuple[int, ...]:
    """A non-empty sequence of integers ≥ ``low`` as a tuple, else ValueError naming ``name``."""
    try:
        vals = list(values)
        ok = bool(vals) and all(not isinstance(v, bool) and float(v).is_integer() and int(v) >= low for v in vals)
    except (TypeError, ValueError, OverflowError):
        vals, ok = [], False
    if not ok:
        raise ValueError(f"{name} must be a non-empty list of integers >= {low}, got {values!r}")
    return tuple(int(v) for v in vals)


def _check_int(value, name: str, low: int) -> int:
    """``value`` as an int if it is an integer ≥ ``low``, else ValueError naming ``name`` and the range."""
    try:
        ok = not isinstance(value, bool) and float(value).is_integer() and int(value) >= low
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _check_etas(values, name: str = "etas") -> tuple[float, ...]:
    """A non-empty sequence of finite step sizes η > 0 as a tuple, else ValueError."""
    from asyncgrpo.validation import check_eps

    try:
        vals = list(values)
    except TypeError:
        vals = []
    if not vals:
        raise ValueError(f"{name} must be a non-empty list of finite numbers > 0, got {values!r}")
    return tuple(check_eps(v, name) for v in vals)


def run_grid(configs, seeds=range(5), progress: bool = True, desc: str = "runs") -> pd.DataFrame:
    """Run every config for every seed; one tidy row per run (settings, η, seed and the run summary)."""
    configs = list(configs)
    seeds = _check_seeds(seeds, 1)
    full = [c.replace(seed=s) for c in configs for s in seeds]
    results = run_many(full, progress=progress, desc=desc)
    rows = []
    for c, r in zip(full, results):
        rows.append(dict(setting=_setting_id(c), instance=c.instance.label, estimator=c.estimator, eps=c.eps,
                         G=c.G, n_prompts=c.n_prompts, delay=c.delay.label, d=_nominal_delay(c.delay), eta=c.eta,
                         steps=c.steps, optimizer=c.optimizer, seed=c.seed, **r.summary()))
    return pd.DataFrame(rows)


def _nominal_delay(spec: dl.DelaySpec) -> float:
    """``d`` for fixed delays, else the model's mean delay.

    uniform ``D/2``; geometric ``(1−p)/p``, or with truncation ``d = min(X, D)`` (``D > 0``,
    ``simulate.delays``) ``E min(X, D) = Σ_{j<D} P(X > j) = (1−p)(1 − (1−p)^D)/p``; queue ``n − 1``.
    """
    if spec.kind == "fixed":
        return float(spec.d)
    if spec.kind == "uniform":
        return spec.D / 2
    if spec.kind == "geometric":
        q = 1.0 - spec.p
        return q * (1.0 - q ** spec.D) / spec.p if spec.D > 0 else q / spec.p
    return float(spec.n_actors - 1)


def _expand(grid, base: TrainConfig | None) -> list[TrainConfig]:
    """A grid is a list of TrainConfig, or a dict ``field -> list of values`` applied to ``base``."""
    if isinstance(grid, dict):
        import itertools

        names = {f.name for f in fields(TrainConfig)}
        bad = [k for k in grid if k not in names]
        if bad:
            raise ValueError(f"grid keys must be TrainConfig fields ({', '.join(sorted(names))}), got {bad}")
        base = base or TrainConfig(instance=EXP_INSTANCE)
        keys = list(grid)
        return [base.replace(**dict(zip(keys, vals))) for vals in itertools.product(*(grid[k] for k in keys))]
    return list(grid)


def tune(grid, seeds=range(5), etas=None, quick: bool = False, base: TrainConfig | None = None,
         progress: bool = True, level: float = 0.95, score: str = "avg_grad_norm2") -> pd.DataFrame:
    """Log-grid search over η for every setting of ``grid``; one row per (setting, η).

    Columns: the setting's fields, ``eta``, ``n_seeds``, ``div_rate``, ``score`` (mean of
    ``(1/K)Σ‖∇J(θ_k)‖²``, ``inf`` if any seed diverged) with ``score_lo/score_hi``, ``regret`` (mean of
    ``(1/K)Σ(J* − J(θ_k))``, ``inf`` likewise) with ``regret_lo/hi``, ``final_J`` (mean over
    non-diverged seeds) with ``final_J_lo/hi``, and ``is_best`` (the tuned η of the setting).
    ``quick`` replaces the default grid by :data:`QUICK_ETAS`. ``score`` picks the tuned η:
    ``avg_grad_norm2`` (least mean ``score``, C5's left side), ``avg_regret`` (least mean regret) or
    ``final_J`` (largest mean final J among the η without diverged seeds, C9). ``final_J_se`` and
    ``regret_se`` are the standard errors ``σ̂/√n`` over seeds.
    """
    etas = _check_etas(ETA_GRID if etas is None else etas)
    if quick and etas == ETA_GRID:
        etas = QUICK_ETAS
    seeds = _check_seeds(seeds, 1)
    configs = [c.replace(eta=float(e)) for c in _expand(grid, base) for e in etas]
    raw = run_grid(configs, seeds, progress=progress, desc="tune")
    return summarize(raw, level=level, score=score)


def _se(x) -> float:
    """Standard error ``σ̂/√n`` of the finite entries (NaN with fewer than two; inf if any is inf)."""
    a = np.asarray(x, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    if a.size < 2:
        return math.nan
    if not np.isfinite(a).all():
        return math.inf
    return float(a.std(ddof=1) / math.sqrt(a.size))


def summarize(raw: pd.DataFrame, level: float = 0.95, score: str = "avg_grad_norm2") -> pd.DataFrame:
    """Aggregate :func:`run_grid` rows over seeds: mean/CI of the score and of the final J, tuned η flag.

    Also keeps the per-seed values behind the means, for paired comparisons across settings
    (:func:`c9_verdict`): ``seeds`` and ``final_J_seeds`` are ``;``-joined strings (they survive a
    CSV round trip), ``final_J`` of a diverged seed is written ``nan``.
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
    if raw.empty:
        raise ValueError("raw must hold at least one run (seeds and the grid must be non-empty)")
    keys = ["setting", "instance", "estimator", "eps", "G", "n_prompts", "delay", "d", "steps", "optimizer", "eta"]
    rows = []
    for key, grp in raw.groupby(keys, sort=False):
        s, slo, shi = mean_ci(grp["avg_grad_norm2"], level)
        ok = grp[~grp["diverged"]]
        j, jlo, jhi = mean_ci(ok["final_J"], level) if len(ok) else (math.nan,) * 3
        r, rlo, rhi = mean_ci(grp["avg_regret"], level) if "avg_regret" in grp else (math.nan,) * 3
        rows.append(dict(zip(keys, key), n_seeds=len(grp), div_rate=float(grp["diverged"].mean()), score=s,
                         score_lo=slo, score_hi=shi, regret=r, regret_lo=rlo, regret_hi=rhi,
                         regret_se=_se(grp["avg_regret"]),
                         final_J=j, final_J_lo=jlo, final_J_hi=jhi, final_J_se=_se(ok["final_J"]),
                         chi2=float(grp["mean_chi2"].mean()), clip_frac=float(grp["mean_clip_frac"].mean()),
                         ess=float(grp["mean_ess"].mean()), ghat_tail=float(grp["ghat_tail"].mean()),
                         seeds=";".join(str(int(x)) for x in grp["seed"]),
                         final_J_seeds=";".join(repr(float(j)) if not dv else "nan"
                                                for j, dv in zip(grp["final_J"], grp["diverged"]))))
    out = pd.DataFrame(rows)
    out["is_best"] = False
    for _, grp in out.groupby("setting", sort=False):
        finite = grp[np.isfinite(grp["score"])]  # an η with a diverged seed has score inf
        if len(finite):
            best = {"avg_grad_norm2": lambda: finite["score"].idxmin(), "avg_regret": lambda: finite["regret"].idxmin(),
                    "final_J": lambda: finite["final_J"].idxmax()}[score]()
            out.loc[best, "is_best"] = True
    return out


def best_eta(tuned: pd.DataFrame) -> pd.DataFrame:
    """The tuned row of every setting (settings where every η diverged are dropped)."""
    return tuned[tuned["is_best"]].reset_index(drop=True)


# --------------------------------------------------------------------------- C5: the G experiment
def theory_g_exponents() -> dict:
    """C5's predicted exponent of G in the tuned delay term, from ``theory.c5_tuning`` (sympy).

    Falls back to THEORY.md's stated values (gmc −2/5, tic 0) if theory/ is absent, and says so
    in ``source``.
    """
    try:
        from theory import c5_tuning
        from theory.symbols import G

        out = {name: float(c5_tuning.log_exponent(c5_tuning.tuned_expr(name), G)) for name in ("gmc", "tic")}
        out["source"] = "theory.c5_tuning (sympy)"
    except Exception as exc:  # noqa: BLE001 — any failure of the optional module falls back, loudly
        out = {"gmc": -0.4, "tic": 0.0, "source": f"THEORY.md values (theory/ unavailable: {exc!r})"}
    return out


def _tuned_scores(scores: np.ndarray) -> np.ndarray:
    """``scores[..., eta, seed]`` → ``min_η mean_seed`` (inf if every η has a diverged seed)."""
    return np.min(np.mean(scores, axis=-1), axis=-1)


#: Fewest G with a measurable Δ(G) > 0 for which C5's slope is fitted.
MIN_SLOPE_POINTS = 3


def _slope(logG: np.ndarray, delta: np.ndarray) -> float:
    """Least-squares slope ``b`` of ``log Δ = a + b·log G`` over *all* given points; NaN if any ``Δ ≤ 0``.

    The caller fixes the set of G (:func:`_fit_slope`): points are never dropped here, because
    dropping the G whose Δ happens to be ≤ 0 in one sample biases the slope towards 0.
    """
    if logG.size < 2 or not (np.all(np.isfinite(delta)) and np.all(delta > 0)):
        return math.nan
    return float(np.polyfit(logG, np.log(delta), 1)[0])


def _fit_slope(Gs, delta: np.ndarray, boot_delta: np.ndarray, level: float) -> dict:
    """C5's slope of ``log Δ(G)`` on ``log G`` with a bootstrap percentile interval, on one fixed G set.

    The G set is the G with ``Δ > 0`` in the full sample; the others are reported as *not
    measurable* (``log Δ`` undefined), never silently dropped, and with fewer than
    :data:`MIN_SLOPE_POINTS` left the slope is NaN with a ``reason``. Every bootstrap replicate
    fits the same G set; a replicate in which some of them has ``Δ_b ≤ 0`` has no slope and is
    counted as its limit ``Δ_b → 0+`` there: ``b → −∞`` when every failed G lies above the mean
    ``log G`` of the set, ``+∞`` when every one lies below (``∂b/∂log Δ_j ∝ log G_j − mean log G``),
    and at both ends of the interval when that is undetermined. So the interval widens, on the side
    the failures point to, and is unbounded there once more than ``(1−level)/2`` of them fail.
    """
    Gs = np.asarray(Gs, dtype=float)
    ok = np.isfinite(delta) & (delta > 0)
    out = dict(n_points=int(ok.sum()), n_not_measurable=int((~ok).sum()),
               not_measurable_G=[int(g) for g in Gs[~ok]], slope=math.nan, lo=math.nan, hi=math.nan,
               n_boot_ok=0, boot_fail_frac=math.nan, reason="")
    if ok.sum() < MIN_SLOPE_POINTS:
        out["reason"] = (f"only {int(ok.sum())} G with Δ > 0 (need {MIN_SLOPE_POINTS}); not measurable (Δ ≤ 0) at "
                         f"G = {out['not_measurable_G']}")
        return out
    logG = np.log(Gs[ok])
    side = logG - logG.mean()  # ∂b/∂log Δ_j ∝ log G_j − mean log G
    lo_s, hi_s = [], []
    n_fail = 0
    for bd in boot_delta:
        b = _slope(logG, bd[ok])
        if math.isfinite(b):
            lo_s.append(b)
            hi_s.append(b)
            continue
        n_fail += 1
        bad = ~(np.isfinite(bd[ok]) & (bd[ok] > 0))
        # the limit Δ_b → 0+ at the failed G: b → −∞ if they all lie above mean log G, +∞ if all below
        lo_s.append(math.inf if np.all(side[bad] < 0) else -math.inf)
        hi_s.append(-math.inf if np.all(side[bad] > 0) else math.inf)
    alpha = (1 - level) / 2
    n = len(lo_s)
    out.update(slope=_slope(logG, delta[ok]), n_boot_ok=n - n_fail, boot_fail_frac=n_fail / n if n else math.nan,
               lo=float(np.quantile(lo_s, alpha, method="lower")) if n else math.nan,
               hi=float(np.quantile(hi_s, 1 - alpha, method="higher")) if n else math.nan)
    if n_fail:
        out["reason"] = (f"Δ_b ≤ 0 at some fitted G in {n_fail}/{n} bootstrap replicates (each counted as the "
                         f"limit Δ_b → 0+: slope ±∞ on the side it goes to, both ends if undetermined)")
    return out


def g_scaling_experiment(quick: bool = False, estimators=("gmc", "tic"), Gs=None, d: int | None = None,
                         eps: float = 0.2, etas=None, seeds=None, steps: int | None = None,
                         instance: InstanceSpec | None = None, n_boot: int = 1000, level: float = 0.95,
                         progress: bool = True, score: str = "avg_regret",
                         optimizer: str = "sga", regime: str | Regime = "far",
                         n_prompts: int | None = None) -> tuple[pd.DataFrame, dict]:
    """C5: ``Δ(G) = tuned score(d) − tuned score(0)`` against G for each estimator, and its log-log slope.

    ``score`` is the per-run quantity whose seed mean is minimised over η: ``avg_regret``
    ``(1/K)Σ(J* − J(θ_k))`` (default) or C5's own ``avg_grad_norm2`` ``(1/K)Σ‖∇J(θ_k)‖²``. Why regret by
    default, measured on :data:`EXP_INSTANCE`: ``‖∇J‖²`` vanishes on *any* saturated policy, so its
    tuned η is the largest of every grid (a collapse) and Δ(G) then measures nothing; the regret is
    minimised at an interior η. Under softmax gradient domination (``‖∇J‖ ≳ c(θ)(J* − J)``) the two
    are the same stationarity notion away from the vertices.

    ``regime`` (:data:`REGIMES`) supplies every default left ``None``: instance, K, n_prompts, η grid
    and d. Default size, ``far`` (:data:`EXP_INSTANCE`, SGA): G ∈ {2, 4, …, 256}, d = 16, the 13 step
    sizes of :data:`ETA_GRID`, 10 seeds, K = 200 (quick: G ∈ {2, 8, 32}, 3 step sizes, 5 seeds, K = 60);
    ``local``: T = 4, K = 400, d = 8, same G, η grid and seeds (quick: K = 120, its own 3 step sizes).
    Returns ``(table, fit)``: ``table`` has one row per (estimator, G) with the tuned scores at d and
    0, their tuned η (``edge_d``/``edge_0``: the tuned η is an end of the grid, i.e. the grid is too
    short there), the final J at the tuned η, the realised ``χ²(π_θ‖μ)`` at the tuned η (``chi2_d``:
    seed mean of the run's mean over steps), Δ with a bootstrap CI and bootstrap standard error
    ``delta_se``, and ``measurable`` (``Δ > 0``: ``log Δ`` exists). ``fit[name]`` is
    :func:`_fit_slope`'s dict (``slope, lo, hi, n_points, n_not_measurable, not_measurable_G,
    n_boot_ok, boot_fail_frac, reason``) plus ``theory``; then the settings,
    ``fit["regime"]``, ``fit["chi2_median_d"]`` (median of ``chi2_d``, the regime's criterion (a)) and
    ``fit["n_edge"]`` (tuned η at a grid end, counted over every (estimator, G, d) cell).
    """
    if score not in ("avg_regret", "avg_grad_norm2"):
        raise ValueError(f"score must be 'avg_regret' or 'avg_grad_norm2', got {score!r}")
    reg = get_regime(regime)
    instance = instance or reg.instance
    default_Gs = (2, 8, 32) if quick else tuple(2 ** j for j in range(1, 9))
    Gs = _check_ints(default_Gs if Gs is None else Gs, "Gs", 1)
    d = _check_int(reg.c5_d if d is None else d, "d", 0)
    etas = _check_etas((reg.quick_etas if quick else reg.etas) if etas is None else etas)
    # ≥ 2 seeds: with one seed every bootstrap replicate is the sample itself and Δ's s.e. is 0
    seeds = _check_seeds(range(5 if quick else 10) if seeds is None else seeds, 2)
    steps = _check_int((reg.quick_steps if quick else reg.steps) if steps is None else steps, "steps", 1)
    n_prompts = _check_int(reg.n_prompts if n_prompts is None else n_prompts, "n_prompts", 1)
    n_boot = _check_int(n_boot, "n_boot", 2)
    base = TrainConfig(instance=instance, eps=eps, steps=steps, optimizer=optimizer, n_prompts=n_prompts)
    configs = [base.replace(estimator=e, G=G, delay=dl.fixed(dd), eta=float(eta))
               for e in estimators for G in Gs for dd in (d, 0) for eta in etas]
    raw = run_grid(configs, seeds, progress=progress, desc="G scaling")
    shape = (len(estimators), len(Gs), 2, len(etas), len(seeds))
    scores = raw[score].to_numpy().reshape(shape)
    finalJ = raw["final_J"].to_numpy().reshape(shape)
    chi2 = raw["mean_chi2"].to_numpy().reshape(shape)
    tuned = _tuned_scores(scores)  # (E, G, 2)
    arg = np.argmin(np.mean(scores, axis=-1), axis=-1)
    edge = (arg == 0) | (arg == len(etas) - 1)
    delta = tuned[..., 0] - tuned[..., 1]
    rng = np.random.default_rng(12345)
    boot_delta = np.empty((n_boot,) + delta.shape)
    for b in range(n_boot):
        idx = rng.integers(0, len(seeds), len(seeds))
        t = _tuned_scores(scores[..., idx])
        boot_delta[b] = t[..., 0] - t[..., 1]
    theory = theory_g_exponents()
    alpha = (1 - level) / 2
    rows, fit = [], {"theory_source": theory["source"], "d": d, "eps": eps, "Gs": Gs, "n_seeds": len(seeds),
                     "steps": steps, "etas": etas, "score": score, "optimizer": optimizer, "regime": reg.name,
                     "n_prompts": n_prompts, "instance": instance.label, "n_edge": int(edge.sum()),
                     "n_cells": int(edge.size), "level": level}
    for i, e in enumerate(estimators):
        for j, G in enumerate(Gs):
            with np.errstate(invalid="ignore"):
                lo, hi = np.quantile(boot_delta[:, i, j], [alpha, 1 - alpha])
                se = float(np.std(boot_delta[:, i, j], ddof=1))
            rows.append(dict(estimator=e, G=G, d=d, eps=eps, score=score, tuned_score_d=tuned[i, j, 0],
                             eta_d=etas[arg[i, j, 0]], edge_d=bool(edge[i, j, 0]),
                             final_J_d=float(np.nanmean(finalJ[i, j, 0, arg[i, j, 0]])),
                             tuned_score_0=tuned[i, j, 1], eta_0=etas[arg[i, j, 1]], edge_0=bool(edge[i, j, 1]),
                             final_J_0=float(np.nanmean(finalJ[i, j, 1, arg[i, j, 1]])),
                             chi2_d=float(np.nanmean(chi2[i, j, 0, arg[i, j, 0]])),
                             delta=delta[i, j], delta_lo=lo, delta_hi=hi, delta_se=se,
                             measurable=bool(np.isfinite(delta[i, j]) and delta[i, j] > 0)))
        fit[e] = dict(_fit_slope(Gs, delta[i], boot_delta[:, i], level), theory=theory.get(e, math.nan))
    table = pd.DataFrame(rows)
    fit["chi2_median_d"] = float(np.nanmedian(table["chi2_d"]))
    return table, fit


# --------------------------------------------------------------------------- C9: robustness
def reference_eta(etas) -> float:
    """The η of C9's instability test: the median of the grid (the lower middle one for an even grid).

    Fixed by the grid before any run, so the ×2 tail test is not the maximum of noisy ratios over
    the grid (which would inflate it by selection).
    """
    e = sorted(float(x) for x in etas)
    return e[(len(e) - 1) // 2]


def robustness_experiment(quick: bool = False, estimators=None, ds=None, G: int = 8, eps: float = 0.2,
                          etas=None, seeds=None, steps: int | None = None, instance: InstanceSpec | None = None,
                          progress: bool = True, level: float = 0.95, score: str = "final_J",
                          optimizer: str = "sga", regime: str | Regime = "far",
                          n_prompts: int | None = None) -> pd.DataFrame:
    """C9: for every estimator and fixed delay d, tune η (default: best mean final J) and report the tuned row.

    Why final J and not ``(1/K)Σ‖∇J‖²``: on tabular softmax a step large enough to saturate the
    policy on *any* vertex makes ``‖∇J‖`` vanish, so the gradient score rewards collapse to a bad
    deterministic policy; C9 is a claim about the final objective.

    ``regime`` (:data:`REGIMES`) supplies every default left ``None``. Default, ``far``
    (:data:`EXP_INSTANCE`, SGA): all ten estimators, d ∈ {0, 2, 4, 8, 16, 32}, the 13 step sizes of
    :data:`ETA_GRID`, 8 seeds, K = 200 (quick: d ∈ {0, 8, 32}, 3 step sizes, 5 seeds, K = 60);
    ``local``: T = 4, K = 400, d ∈ {0, 1, 2, 4} (quick: d ∈ {0, 2, 4}, K = 120). Columns: those of
    :func:`tune` at the tuned η (with the per-seed ``seeds``/``final_J_seeds`` used by
    :func:`c9_verdict`'s paired tests), plus ``regime``; C9's instability test at the fixed reference
    step size ``eta_ref`` (:func:`reference_eta`, the grid's median): ``div_ref`` (fraction of
    diverged seeds there), ``tail_ref`` and ``tail_rel_ref`` (its mean step tail ratio, and that
    divided by the same estimator's at d = 0 and η = ``eta_ref``); and indicators over
    every η of the setting: ``div_rate_any`` (fraction of its runs that diverged), ``tail_any``
    (largest mean step tail ratio ``max‖ĝ‖²/mean‖ĝ‖²``) and ``tail_rel_any`` (largest ratio of that
    tail to the same estimator's at d = 0 *and the same η*; NaN without d = 0) — the comparison at
    equal η matters because at d = 0 a large η also makes the tail ratio large, by saturating the
    policy so that later steps vanish. ``edge`` flags a tuned η at an end of the grid.
    """
    from simulate.training import ALL_ESTIMATORS

    reg = get_regime(regime)
    instance = instance or reg.instance
    estimators = tuple(estimators or ALL_ESTIMATORS)
    ds = _check_ints((reg.quick_c9_ds if quick else reg.c9_ds) if ds is None else ds, "ds", 0)
    etas = _check_etas((reg.quick_etas if quick else reg.etas) if etas is None else etas)
    # ≥ 2 seeds: the t-intervals and c9_verdict's paired tests need a spread
    seeds = _check_seeds(range(5 if quick else 8) if seeds is None else seeds, 2)
    steps = _check_int((reg.quick_steps if quick else reg.steps) if steps is None else steps, "steps", 1)
    n_prompts = _check_int(reg.n_prompts if n_prompts is None else n_prompts, "n_prompts", 1)
    base = TrainConfig(instance=instance, G=G, eps=eps, steps=steps, optimizer=optimizer, n_prompts=n_prompts)
    grid = [base.replace(estimator=e, delay=dl.fixed(d)) for e in estimators for d in ds]
    tuned = tune(grid, seeds=seeds, etas=etas, progress=progress, level=level, score=score)
    ref = tuned[tuned["d"] == 0].set_index(["estimator", "eta"])["ghat_tail"]
    key = pd.MultiIndex.from_frame(tuned[["estimator", "eta"]])
    tuned["tail_rel"] = tuned["ghat_tail"].to_numpy() / ref.reindex(key).to_numpy()
    agg = tuned.groupby("setting").agg(div_rate_any=("div_rate", "mean"), tail_any=("ghat_tail", "max"),
                                       tail_rel_any=("tail_rel", "max"))
    best = tuned[tuned["is_best"]].set_index("setting")
    out = agg.join(best, how="left").reset_index()
    out["edge"] = out["eta"].isin([min(etas), max(etas)])
    out["regime"] = reg.name
    # the instability test's η, fixed by the grid alone (never by the tails it tests)
    eta_ref = reference_eta(etas)
    at_ref = tuned[tuned["eta"] == eta_ref].set_index("setting")
    out["eta_ref"] = eta_ref
    for col, src in (("tail_ref", "ghat_tail"), ("tail_rel_ref", "tail_rel"), ("div_ref", "div_rate")):
        out[col] = out["setting"].map(at_ref[src])
    # settings where every η diverged keep their identity columns
    meta = tuned.drop_duplicates("setting").set_index("setting")[["estimator", "d", "G", "eps"]]
    for col in meta.columns:
        out[col] = out["setting"].map(meta[col])
    order = {e: i for i, e in enumerate(estimators)}
    out = out.sort_values(["d", "estimator"], key=lambda s: s.map(order) if s.name == "estimator" else s)
    return out.reset_index(drop=True)


#: C9's step-tail test: unstable when the step tail ratio exceeds this multiple of its d = 0 value.
TAIL_FOLD = 2.0


def _seed_values(row) -> dict[int, float] | None:
    """Per-seed final J of a table row (``seeds``/``final_J_seeds`` of :func:`summarize`), or None if absent."""
    sd, fj = row.get("seeds"), row.get("final_J_seeds")
    if sd is None or fj is None or (isinstance(sd, float) and math.isnan(sd)):
        return None
    # a CSV round trip turns a one-seed entry into a number
    return {int(float(k)): float(v) for k, v in zip(str(sd).split(";"), str(fj).split(";"))}


def _diff_ci(a, b, level: float) -> dict:
    """Interval for ``final_J(a) − final_J(b)`` of two table rows at their tuned η.

    Paired when both rows carry per-seed values: ``x_s = J_a,s − J_b,s`` over the seeds they share
    (every setting runs the same seed list, and seed ``s`` is one fixed delay draw and init), with
    :func:`mean_ci`'s Student-t interval. Tables without them (hand-made, or older caches) fall back
    to the unpaired ``±t_{n−1}·√(se_a² + se_b²)`` with ``n`` the smaller seed count.
    """
    from scipy import stats

    va, vb = _seed_values(a), _seed_values(b)
    if va is not None and vb is not None:
        x = np.array([va[k] - vb[k] for k in sorted(set(va) & set(vb))])
        x = x[np.isfinite(x)]
        m, lo, hi = mean_ci(x, level) if x.size else (math.nan,) * 3
        return dict(mean=m, lo=lo, hi=hi, how=f"paired t over {x.size} seeds")
    m = float(a["final_J"]) - float(b["final_J"])
    se = math.hypot(float(a.get("final_J_se", math.nan)), float(b.get("final_J_se", math.nan)))
    n = min(float(a.get("n_seeds", math.nan)), float(b.get("n_seeds", math.nan)))
    q = float(stats.t.ppf(0.5 + level / 2, n - 1)) if n >= 2 else float(stats.norm.ppf(0.5 + level / 2))
    return dict(mean=m, lo=m - q * se, hi=m + q * se, how="unpaired (no per-seed values), t on √(se²+se²)")


def _tail_flag(rows: dict, e: str, d) -> tuple[bool | None, str]:
    """C9's instability test of ``e`` at delay ``d``, without control: ``(flag, text)``.

    At the fixed ``eta_ref`` (:func:`reference_eta`): some seed diverged there at ``d`` but not at
    ``d = 0``, or the step tail ratio is above :data:`TAIL_FOLD` × its d = 0 value. Tables without
    the reference columns use the maxima over the grid (``div_rate_any``, ``tail_rel_any``) and say so.
    """
    r, r0 = rows.get((e, d)), rows.get((e, 0))
    if r is None:
        return None, f"{e} missing at d={d:g}"
    rel = float(r.get("tail_rel_ref", math.nan))
    if math.isfinite(rel):
        div = float(r.get("div_ref", 0.0)) > (float(r0.get("div_ref", 0.0)) if r0 is not None else 0.0)
        return bool(div or rel > TAIL_FOLD), (f"{e} at η={float(r['eta_ref']):g}: tail ×{rel:.3g}"
                                              f"{', diverged' if div else ''}")
    rel = float(r.get("tail_rel_any", math.nan))
    div = float(r.get("div_rate_any", 0.0)) > 0
    if not math.isfinite(rel):
        return (True, f"{e}: diverged (max over η)") if div else (None, f"{e}: no tail ratio at d={d:g}")
    return bool(div or rel > TAIL_FOLD), f"{e}: tail up to ×{rel:.3g} (max over η){', diverged' if div else ''}"


def _unstable(rows: dict, e: str, d) -> tuple[bool | None, str]:
    """``e`` unstable at ``d`` against the ``onpolicy`` control (:func:`c9_verdict`): ``(holds, text)``."""
    flag, text = _tail_flag(rows, e, d)
    cflag, ctext = _tail_flag(rows, "onpolicy", d)
    if flag is None:
        return None, text
    if cflag is None:
        return None, f"{text}; control {ctext}: cannot decide"
    if cflag:
        return None, f"{text}; control {ctext} also flagged: the test cannot tell them apart"
    return flag, f"{text} vs control {ctext} (threshold ×{TAIL_FOLD:g})"


def c9_verdict(table: pd.DataFrame, level: float = 0.95) -> dict:
    """C9's four parts decided from a :func:`robustness_experiment` table (largest d vs d = 0).

    Differences of final J between two rows are per-seed *paired* differences at each row's tuned
    η (:func:`_diff_ci`: every setting runs the same seeds) with a Student-t interval at ``level``;
    a part testing ``m`` differences uses level ``1 − (1 − level)/m`` for each (Bonferroni), so the
    part's family-wise error is at most ``1 − level``.

    - ``is_unstable``: the instability test holds for ``is`` at the largest d and *not* for the
      ``onpolicy`` control (at the same η). The test (:func:`_tail_flag`): at the reference η fixed
      by the grid alone (``eta_ref``, the median η), a seed diverged that did not at d = 0, or the
      step tail ratio ``max‖ĝ‖²/mean‖ĝ‖²`` exceeds :data:`TAIL_FOLD` × its d = 0 value.
      ``None`` when the control is flagged too, or missing.
    - ``onpolicy_worse``: ``J_gmc − J_onpolicy`` at the largest d has its interval above 0 (one test).
    - ``tic_tis_degrade``: for both tic and tis, ``J(d=0) − J(d_max)`` has its interval above 0
      (Bonferroni over the two).
    - ``gmc_best_stable``: at every d > 0, gmc is stable and no stable rival is significantly above
      it: ``J_rival − J_gmc`` has its lower end ≤ 0 (Bonferroni over rivals × delays). *Stable* at d:
      no divergence at any η of the grid at that d (``div_rate_any = 0``) and not unstable by the
      ``is_unstable`` test against the control. ``None`` when there is no stable rival.

    Each entry is ``dict(holds=bool|None, detail=str)``; ``None`` when it cannot be decided.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    rows = {(r["estimator"], r["d"]): r for r in table.to_dict("records")}
    dmax = table["d"].max()
    ds = sorted(d for d in table["d"].unique() if d > 0)
    pct = f"{level:.0%}"
    out = {}

    if ("is", dmax) in rows:
        h, text = _unstable(rows, "is", dmax)
        out["is_unstable"] = dict(holds=h, detail=f"d={dmax:g}: {text}")
    if ("onpolicy", dmax) in rows and ("gmc", dmax) in rows:
        g, o = rows[("gmc", dmax)], rows[("onpolicy", dmax)]
        c = _diff_ci(g, o, level)
        out["onpolicy_worse"] = dict(
            holds=bool(c["lo"] > 0),
            detail=f"final J at d={dmax:g}: gmc {g['final_J']:.6f}, onpolicy {o['final_J']:.6f}; gmc − onpolicy "
                   f"{c['mean']:+.2e} [{c['lo']:+.2e}, {c['hi']:+.2e}] ({pct}, {c['how']})")
    present = [e for e in ("tic", "tis") if (e, dmax) in rows and (e, 0) in rows]
    if present:
        lv = 1 - (1 - level) / len(present)
        parts, holds = [], True
        for e in present:
            a, b = rows[(e, 0)], rows[(e, dmax)]
            c = _diff_ci(a, b, lv)
            holds &= bool(c["lo"] > 0)
            parts.append(f"{e}: {a['final_J']:.6f} (d=0) -> {b['final_J']:.6f} (d={dmax:g}), drop {c['mean']:+.2e} "
                         f"[{c['lo']:+.2e}, {c['hi']:+.2e}]")
        out["tic_tis_degrade"] = dict(holds=holds, detail="; ".join(parts) + f" ({lv:.4g} each, Bonferroni over "
                                                                         f"{len(present)}, {c['how']})")
    if "gmc" in table["estimator"].values and ds:
        gmc_bad, rivals, excluded = [], {}, []
        for d in ds:
            if ("gmc", d) not in rows:
                continue
            if float(rows[("gmc", d)].get("div_rate_any", 0.0)) > 0 or _unstable(rows, "gmc", d)[0]:
                gmc_bad.append(f"d={d:g} ({_unstable(rows, 'gmc', d)[1]}; div_rate_any "
                               f"{float(rows[('gmc', d)].get('div_rate_any', 0.0)):.2g})")
            for e in table["estimator"].unique():
                if e == "gmc" or (e, d) not in rows:
                    continue
                r = rows[(e, d)]
                if float(r.get("div_rate_any", 0.0)) > 0:
                    excluded.append(f"{e}@{d:g} (diverged at some η)")
                elif e != "onpolicy" and _unstable(rows, e, d)[0]:
                    excluded.append(f"{e}@{d:g} (unstable)")
                elif math.isfinite(float(r["final_J"])):
                    rivals.setdefault(d, []).append(e)
        m = sum(len(v) for v in rivals.values())
        if m == 0:
            out["gmc_best_stable"] = dict(holds=None, detail="no stable rival at any d > 0: nothing to compare"
                                          + (f"; excluded: {', '.join(excluded)}" if excluded else ""))
        else:
            lv = 1 - (1 - level) / m
            better = []
            for d, es in rivals.items():
                g = rows[("gmc", d)]
                for e in es:
                    c = _diff_ci(rows[(e, d)], g, lv)
                    if c["lo"] > 0:
                        better.append(f"d={d:g}: {e} {rows[(e, d)]['final_J']:.6f} > gmc {g['final_J']:.6f} "
                                      f"(diff {c['mean']:+.2e}, lo {c['lo']:+.2e})")
            rule = f"{m} comparisons, each at {lv:.4g} (Bonferroni)"
            detail = (f"gmc stable: {'no, unstable at ' + ', '.join(gmc_bad) if gmc_bad else 'yes'}; "
                      f"stable rivals significantly above gmc: {'; '.join(better) if better else 'none'} ({rule})")
            if excluded:
                detail += f"; not stable: {', '.join(excluded)}"
            out["gmc_best_stable"] = dict(holds=not (gmc_bad or better), detail=detail)
    return out


# --------------------------------------------------------------------------- regime criteria
#: Criterion (a) of the local regime: median realised χ² at the largest d in this interval.
LOCAL_CHI2_RANGE = (0.05, 1.0)


def regime_criteria(table: pd.DataFrame, chi2_range: tuple[float, float] = LOCAL_CHI2_RANGE,
                    z: float = 2.0, interior_min: float = 0.9) -> dict:
    """The regime criteria (module docstring, "Regimes") read off an experiment's own table.

    ``table`` is a :func:`robustness_experiment` table (C9) or the table of
    :func:`g_scaling_experiment` (C5; recognised by its ``delta`` column). With ``d_max`` the largest
    delay of the table:

    - ``chi2``: (a) ``median χ²`` over the tuned rows at ``d_max`` lies in ``chi2_range``;
    - ``interior``: (b) the tuned η is interior to the grid in at least ``interior_min`` of the cells;
    - ``delay_cost``: (c) some estimator's delay cost exceeds ``z`` standard errors at ``d_max`` —
      C9: ``(J̄_0 − J̄_d)/√(se_0² + se_d²)`` of the tuned final J; C5: ``Δ/se_boot(Δ)`` for some G.

    Each entry is ``dict(holds=bool, value=float, detail=str)``.
    """
    if "delta" in table:
        chi2 = table["chi2_d"].to_numpy(dtype=float)
        n_edge = int(table["edge_d"].sum() + table["edge_0"].sum())
        n_cells = 2 * len(table)
        se = table["delta_se"].to_numpy(dtype=float)
        # a zero or missing s.e. (one seed) measures nothing: no z, rather than an infinite one
        zs = np.where(se > 0, table["delta"].to_numpy(dtype=float) / np.where(se > 0, se, 1.0), np.nan)
        who = [f"{r.estimator} G={r.G}" for r in table.itertuples()]
        dmax = float(table["d"].max())
    else:
        dmax = float(table["d"].max())
        at = table[table["d"] == dmax]
        chi2 = at["chi2"].to_numpy(dtype=float)
        n_edge, n_cells = int(table["edge"].sum()), len(table)
        ref = table[table["d"] == 0].set_index("estimator")
        zs, who = [], []
        for r in at.itertuples():
            if r.estimator in ref.index:
                j0, se0 = float(ref.loc[r.estimator, "final_J"]), float(ref.loc[r.estimator, "final_J_se"])
                se = math.hypot(se0, r.final_J_se)
                zs.append((j0 - r.final_J) / se if se > 0 else math.nan)
                who.append(r.estimator)
        zs = np.asarray(zs, dtype=float)
    med = float(np.nanmedian(chi2)) if chi2.size else math.nan
    lo, hi = chi2_range
    interior = 1 - n_edge / n_cells if n_cells else math.nan
    zmax = float(np.nanmax(zs)) if np.isfinite(zs).any() else math.nan
    top = who[int(np.nanargmax(zs))] if np.isfinite(zs).any() else "-"
    return {
        "chi2": dict(holds=bool(lo <= med <= hi), value=med,
                     detail=f"median realised χ² at d={dmax:g}: {med:.3g} (criterion: in [{lo:g}, {hi:g}])"),
        "interior": dict(holds=bool(interior >= interior_min), value=interior,
                         detail=f"tuned η interior in {n_cells - n_edge}/{n_cells} cells "
                                f"(criterion ≥ {interior_min:.0%})"),
        "delay_cost": dict(holds=bool(zmax > z), value=zmax,
                           detail=f"largest delay cost at d={dmax:g}: {zmax:.3g} s.e. ({top}; criterion > {z:g})"),
    }


__all__ = ["EXP_INSTANCE", "ETA_GRID", "QUICK_ETAS", "SCORES", "mean_ci", "run_grid", "tune", "summarize", "best_eta",
           "theory_g_exponents", "g_scaling_experiment", "robustness_experiment", "c9_verdict", "reference_eta",
           "TAIL_FOLD", "MIN_SLOPE_POINTS",
           "Regime", "REGIMES", "get_regime", "LOCAL_CHI2_RANGE", "regime_criteria"]
