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
``log Δ`` against ``log G`` is fitted by least squares. Its confidence interval comes from a
bootstrap over seeds (seeds are resampled jointly for every η, d and G, and η is re-tuned in each
replicate, so tuning noise is part of the interval). THEORY predicts −2/5 for gmc and 0 for tic.
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
def _setting_id(c: TrainConfig) -> str:
    """String id of a setting: everything but η and seed."""
    extra = f"|el={c.eps_low:g},eh={c.eps_high:g}" if c.estimator in ("grpo", "gspo", "cispo") else ""
    extra += f"|tau={c.tau_m2:g}" if c.estimator == "m2po" else ""
    return (f"{c.instance.label}|{c.estimator}|eps={c.eps:g}{extra}|G={c.G}|P={c.n_prompts}|{c.delay.label}|"
            f"K={c.steps}|{c.optimizer}")


def run_grid(configs, seeds=range(5), progress: bool = True, desc: str = "runs") -> pd.DataFrame:
    """Run every config for every seed; one tidy row per run (settings, η, seed and the run summary)."""
    configs = list(configs)
    seeds = [int(s) for s in seeds]
    full = [c.replace(seed=s) for c in configs for s in seeds]
    results = run_many(full, progress=progress, desc=desc)
    rows = []
    for c, r in zip(full, results):
        rows.append(dict(setting=_setting_id(c), instance=c.instance.label, estimator=c.estimator, eps=c.eps,
                         G=c.G, n_prompts=c.n_prompts, delay=c.delay.label, d=_nominal_delay(c.delay), eta=c.eta,
                         steps=c.steps, optimizer=c.optimizer, seed=c.seed, **r.summary()))
    return pd.DataFrame(rows)


def _nominal_delay(spec: dl.DelaySpec) -> float:
    """``d`` for fixed delays, else the model's mean delay (uniform D/2, geometric (1−p)/p, queue n−1)."""
    if spec.kind == "fixed":
        return float(spec.d)
    if spec.kind == "uniform":
        return spec.D / 2
    if spec.kind == "geometric":
        return (1 - spec.p) / spec.p
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
    etas = tuple(ETA_GRID if etas is None else etas)
    if quick and etas == ETA_GRID:
        etas = QUICK_ETAS
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
    """Aggregate :func:`run_grid` rows over seeds: mean/CI of the score and of the final J, tuned η flag."""
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
                         ess=float(grp["mean_ess"].mean()), ghat_tail=float(grp["ghat_tail"].mean())))
    if score not in SCORES:
        raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
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


def _slope(logG: np.ndarray, delta: np.ndarray) -> float:
    ok = delta > 0
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(logG[ok], np.log(delta[ok]), 1)[0])


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
    ``delta_se``; ``fit[name] = dict(slope, lo, hi, n_points, n_boot_ok, theory)`` plus the settings,
    ``fit["regime"]``, ``fit["chi2_median_d"]`` (median of ``chi2_d``, the regime's criterion (a)) and
    ``fit["n_edge"]`` (tuned η at a grid end, counted over every (estimator, G, d) cell).
    """
    if score not in ("avg_regret", "avg_grad_norm2"):
        raise ValueError(f"score must be 'avg_regret' or 'avg_grad_norm2', got {score!r}")
    reg = get_regime(regime)
    instance = instance or reg.instance
    Gs = tuple(Gs or ((2, 8, 32) if quick else tuple(2 ** j for j in range(1, 9))))
    d = int(d if d is not None else reg.c5_d)
    etas = tuple(etas or (reg.quick_etas if quick else reg.etas))
    seeds = list(seeds if seeds is not None else range(5 if quick else 10))
    steps = int(steps or (reg.quick_steps if quick else reg.steps))
    n_prompts = int(n_prompts or reg.n_prompts)
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
    logG = np.log(np.asarray(Gs, dtype=float))
    theory = theory_g_exponents()
    alpha = (1 - level) / 2
    rows, fit = [], {"theory_source": theory["source"], "d": d, "eps": eps, "Gs": Gs, "n_seeds": len(seeds),
                     "steps": steps, "etas": etas, "score": score, "optimizer": optimizer, "regime": reg.name,
                     "n_prompts": n_prompts, "instance": instance.label, "n_edge": int(edge.sum()),
                     "n_cells": int(edge.size)}
    for i, e in enumerate(estimators):
        for j, G in enumerate(Gs):
            lo, hi = np.quantile(boot_delta[:, i, j], [alpha, 1 - alpha])
            rows.append(dict(estimator=e, G=G, d=d, eps=eps, score=score, tuned_score_d=tuned[i, j, 0],
                             eta_d=etas[arg[i, j, 0]], edge_d=bool(edge[i, j, 0]),
                             final_J_d=float(np.nanmean(finalJ[i, j, 0, arg[i, j, 0]])),
                             tuned_score_0=tuned[i, j, 1], eta_0=etas[arg[i, j, 1]], edge_0=bool(edge[i, j, 1]),
                             final_J_0=float(np.nanmean(finalJ[i, j, 1, arg[i, j, 1]])),
                             chi2_d=float(np.nanmean(chi2[i, j, 0, arg[i, j, 0]])),
                             delta=delta[i, j], delta_lo=lo, delta_hi=hi,
                             delta_se=float(np.std(boot_delta[:, i, j], ddof=1)) if n_boot > 1 else math.nan))
        slopes = np.array([_slope(logG, boot_delta[b, i]) for b in range(n_boot)])
        slopes = slopes[np.isfinite(slopes)]
        s = _slope(logG, delta[i])
        lo, hi = (np.quantile(slopes, [alpha, 1 - alpha]) if slopes.size else (math.nan, math.nan))
        fit[e] = dict(slope=s, lo=float(lo), hi=float(hi), n_points=int((delta[i] > 0).sum()),
                      n_boot_ok=int(slopes.size), theory=theory.get(e, math.nan))
    table = pd.DataFrame(rows)
    fit["chi2_median_d"] = float(np.nanmedian(table["chi2_d"]))
    return table, fit


# --------------------------------------------------------------------------- C9: robustness
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
    :func:`tune` at the tuned η, plus ``regime`` and C9's instability indicators over
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
    ds = tuple(ds or (reg.quick_c9_ds if quick else reg.c9_ds))
    etas = tuple(etas or (reg.quick_etas if quick else reg.etas))
    seeds = list(seeds if seeds is not None else range(5 if quick else 8))
    steps = int(steps or (reg.quick_steps if quick else reg.steps))
    n_prompts = int(n_prompts or reg.n_prompts)
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
    # settings where every η diverged keep their identity columns
    meta = tuned.drop_duplicates("setting").set_index("setting")[["estimator", "d", "G", "eps"]]
    for col in meta.columns:
        out[col] = out["setting"].map(meta[col])
    order = {e: i for i, e in enumerate(estimators)}
    out = out.sort_values(["d", "estimator"], key=lambda s: s.map(order) if s.name == "estimator" else s)
    return out.reset_index(drop=True)


def c9_verdict(table: pd.DataFrame) -> dict:
    """C9's four parts decided from a :func:`robustness_experiment` table (largest d vs d = 0).

    - ``is_unstable``: at the largest d, ``is`` diverges for some η or its step tail ratio exceeds
      twice its d = 0 value at the same η (``tail_rel_any > 2``; tables without that column compare
      ``tail_any`` at d and at 0).
    - ``onpolicy_worse``: ``onpolicy``'s tuned final J at the largest d is below gmc's (means; the
      CIs are in the table).
    - ``tic_tis_degrade``: the CI upper end of tic's and tis's tuned final J at the largest d lies
      below their mean at d = 0.
    - ``gmc_best_stable``: at every d > 0, no estimator with ``div_rate = 0`` at its tuned η has a
      final-J CI lower bound above gmc's mean (gmc best or tied best among the stable ones).
    Each entry is ``dict(holds=bool|None, detail=str)``; ``None`` when an estimator is missing.
    """
    t = table.set_index(["estimator", "d"])
    dmax = table["d"].max()
    out = {}

    def get(e, d, col):
        try:
            return float(t.loc[(e, d), col])
        except KeyError:
            return math.nan

    if ("is", dmax) in t.index:
        dv, tl, t0 = get("is", dmax, "div_rate_any"), get("is", dmax, "tail_any"), get("is", 0, "tail_any")
        rel = get("is", dmax, "tail_rel_any") if "tail_rel_any" in table else math.nan
        if math.isfinite(rel):  # tails compared at equal η (robustness_experiment's docstring)
            out["is_unstable"] = dict(holds=bool(dv > 0 or rel > 2),
                                      detail=f"is at d={dmax:g}: diverged runs {dv:.0%}, step tail up to ×{rel:.3g} "
                                             f"its d=0 value at the same η (threshold ×2)")
        else:
            out["is_unstable"] = dict(holds=bool(dv > 0 or tl > 2 * t0),
                                      detail=f"is at d={dmax:g}: diverged runs {dv:.0%}, tail {tl:.3g} (d=0: {t0:.3g})")
    if ("onpolicy", dmax) in t.index and ("gmc", dmax) in t.index:
        a, b = get("onpolicy", dmax, "final_J"), get("gmc", dmax, "final_J")
        out["onpolicy_worse"] = dict(holds=bool(a < b), detail=f"final J at d={dmax:g}: onpolicy {a:.4f} vs gmc {b:.4f}")
    parts = []
    holds = True
    for e in ("tic", "tis"):
        if (e, dmax) in t.index:
            a, b, bhi = get(e, 0, "final_J"), get(e, dmax, "final_J"), get(e, dmax, "final_J_hi")
            parts.append(f"{e}: {a:.4f} (d=0) -> {b:.4f} [hi {bhi:.4f}] (d={dmax:g})")
            holds &= bool(bhi < a)  # degraded beyond its CI
    if parts:
        out["tic_tis_degrade"] = dict(holds=holds, detail="; ".join(parts))
    if "gmc" in table["estimator"].values:
        fails = []
        for d in sorted(table["d"].unique()):
            if d == 0:
                continue
            g = get("gmc", d, "final_J")
            rows = table[(table["d"] == d) & (table["estimator"] != "gmc") & (table["div_rate"] == 0)]
            better = rows[rows["final_J_lo"] > g]
            if len(better):
                fails.append(f"d={d:g}: " + ", ".join(f"{r.estimator} {r.final_J:.4f} [lo {r.final_J_lo:.4f}]"
                                                        for r in better.itertuples()) + f" > gmc {g:.4f}")
        out["gmc_best_stable"] = dict(holds=not fails, detail="; ".join(fails) or "no stable estimator significantly above gmc at any d > 0")
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
        zs = (table["delta"] / table["delta_se"]).to_numpy(dtype=float)
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
                zs.append((j0 - r.final_J) / math.hypot(se0, r.final_J_se))
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
           "theory_g_exponents", "g_scaling_experiment", "robustness_experiment", "c9_verdict",
           "Regime", "REGIMES", "get_regime", "LOCAL_CHI2_RANGE", "regime_criteria"]
