"""Experiments of the training simulator: step-size tuning, the G^{−2/5} experiment (C5), robustness (C9).

Every function returns tidy pandas tables (experiments are data, STYLE §5); printing and plotting
live in ``simulate/commands`` and ``figures/``. Stable signatures (the figures code relies on them)::

    mean_ci(x, level=0.95) -> (mean, lo, hi)                      # t-interval, the one CI function
    run_grid(configs, seeds, progress=True) -> DataFrame          # one row per run
    tune(grid, seeds=range(5), etas=None, quick=False, ...) -> DataFrame   # one row per (setting, η)
    best_eta(tuned) -> DataFrame                                  # one row per setting, the tuned η
    g_scaling_experiment(quick=False, ...) -> (DataFrame, dict)   # C5: Δ(G) and the fitted slope
    robustness_experiment(quick=False, ...) -> DataFrame          # C9: tuned results per (estimator, d)
    c9_verdict(table) -> dict                                     # the claim's parts, from the numbers
    theory_g_exponents() -> dict                                  # C5 prediction from theory/

**Caveat, measured:** on tabular softmax a step large enough to saturate the policy on *any* vertex
makes ``‖∇J‖²`` vanish, so this score can prefer a collapsed policy when the grid reaches such steps
(seen on a 10-arm bandit with η ≥ 10³); the default grid stops at 128 on the default token MDP, and
every table reports the final J next to the score so that the reader can see it.

**Tuning (C5's left side).** For a setting (estimator, delay, ε, G, …) and each η of a log-grid,
the score is the mean over seeds of ``(1/K) Σ_{k<K} ‖∇J(θ_k)‖²``; a diverged run scores ``+∞``, so an
η with any diverged seed is never chosen. The tuned score is ``min_η`` of the mean score.

**The G experiment (C5).** For gmc and tic at fixed ``d`` and ε, the delay-dependent part
``Δ(G) = tuned score at d − tuned score at d = 0`` is measured for G on a log-grid, and the slope of
``log Δ`` against ``log G`` is fitted by least squares. Its confidence interval comes from a
bootstrap over seeds (seeds are resampled jointly for every η, d and G, and η is re-tuned in each
replicate, so tuning noise is part of the interval). THEORY predicts −2/5 for gmc and 0 for tic.
"""
from __future__ import annotations

import math
from dataclasses import asdict, fields

import numpy as np
import pandas as pd

from simulate import delays as dl
from simulate.training import InstanceSpec, TrainConfig, run_many

#: Instance of the experiments: a token MDP where the right token depends on the state
#: (sum ≡ 0 mod 3 over T = 4 tokens, V = 3), so stale gradients point the wrong way.
EXP_INSTANCE = InstanceSpec(kind="token", V=3, T=4, state="prev", reward="sum_mod", m=3)
#: The log-grid of step sizes searched by default.
ETA_GRID = tuple(float(x) for x in np.geomspace(0.5, 128.0, 9))


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
    ``(1/K)Σ‖∇J(θ_k)‖²``, ``inf`` if any seed diverged) with ``score_lo/score_hi``, ``final_J`` (mean
    over non-diverged seeds) with ``final_J_lo/hi``, and ``is_best`` (the tuned η of the setting).
    ``quick`` keeps 3 step sizes of ``etas`` (every 4th point of the default grid). ``score`` picks
    the tuned η: ``avg_grad_norm2`` (least mean score, C5) or ``final_J`` (largest mean final J among
    the η without diverged seeds, C9).
    """
    etas = tuple(ETA_GRID if etas is None else etas)
    if quick and etas == ETA_GRID:
        etas = etas[::4]
    configs = [c.replace(eta=float(e)) for c in _expand(grid, base) for e in etas]
    raw = run_grid(configs, seeds, progress=progress, desc="tune")
    return summarize(raw, level=level, score=score)


def summarize(raw: pd.DataFrame, level: float = 0.95, score: str = "avg_grad_norm2") -> pd.DataFrame:
    """Aggregate :func:`run_grid` rows over seeds: mean/CI of the score and of the final J, tuned η flag."""
    keys = ["setting", "instance", "estimator", "eps", "G", "n_prompts", "delay", "d", "steps", "optimizer", "eta"]
    rows = []
    for key, grp in raw.groupby(keys, sort=False):
        s, slo, shi = mean_ci(grp["avg_grad_norm2"], level)
        ok = grp[~grp["diverged"]]
        j, jlo, jhi = mean_ci(ok["final_J"], level) if len(ok) else (math.nan,) * 3
        rows.append(dict(zip(keys, key), n_seeds=len(grp), div_rate=float(grp["diverged"].mean()), score=s,
                         score_lo=slo, score_hi=shi, final_J=j, final_J_lo=jlo, final_J_hi=jhi,
                         chi2=float(grp["mean_chi2"].mean()), clip_frac=float(grp["mean_clip_frac"].mean()),
                         ess=float(grp["mean_ess"].mean()), ghat_tail=float(grp["ghat_tail"].mean())))
    out = pd.DataFrame(rows)
    out["is_best"] = False
    if score not in ("avg_grad_norm2", "final_J"):
        raise ValueError(f"score must be 'avg_grad_norm2' or 'final_J', got {score!r}")
    for _, grp in out.groupby("setting", sort=False):
        finite = grp[np.isfinite(grp["score"])]  # an η with a diverged seed has score inf
        if len(finite):
            best = finite["score"].idxmin() if score == "avg_grad_norm2" else finite["final_J"].idxmax()
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
                         instance: InstanceSpec = EXP_INSTANCE, n_boot: int = 1000, level: float = 0.95,
                         progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """C5: ``Δ(G) = tuned score(d) − tuned score(0)`` against G for each estimator, and its log-log slope.

    Default size: G ∈ {2, 4, …, 256}, d = 8, 9 step sizes, 10 seeds, K = 200 (quick: G ∈ {2, 8, 32},
    3 step sizes, 5 seeds, K = 60). Returns ``(table, fit)``: ``table`` has one row per
    (estimator, G) with the tuned scores at d and 0, their tuned η, Δ with a bootstrap CI;
    ``fit[name] = dict(slope, lo, hi, n_points, theory)`` plus ``fit["theory_source"]``.
    """
    Gs = tuple(Gs or ((2, 8, 32) if quick else tuple(2 ** j for j in range(1, 9))))
    d = int(d if d is not None else 8)
    etas = tuple(etas or (ETA_GRID[::4] if quick else ETA_GRID))
    seeds = list(seeds if seeds is not None else range(5 if quick else 10))
    steps = int(steps or (60 if quick else 200))
    base = TrainConfig(instance=instance, eps=eps, steps=steps)
    configs = [base.replace(estimator=e, G=G, delay=dl.fixed(dd), eta=float(eta))
               for e in estimators for G in Gs for dd in (d, 0) for eta in etas]
    raw = run_grid(configs, seeds, progress=progress, desc="G scaling")
    shape = (len(estimators), len(Gs), 2, len(etas), len(seeds))
    scores = raw["avg_grad_norm2"].to_numpy().reshape(shape)
    finalJ = raw["final_J"].to_numpy().reshape(shape)
    tuned = _tuned_scores(scores)  # (E, G, 2)
    arg = np.argmin(np.mean(scores, axis=-1), axis=-1)
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
                     "steps": steps, "etas": etas}
    for i, e in enumerate(estimators):
        for j, G in enumerate(Gs):
            lo, hi = np.quantile(boot_delta[:, i, j], [alpha, 1 - alpha])
            rows.append(dict(estimator=e, G=G, d=d, eps=eps, tuned_score_d=tuned[i, j, 0], eta_d=etas[arg[i, j, 0]],
                             final_J_d=float(np.nanmean(finalJ[i, j, 0, arg[i, j, 0]])),
                             tuned_score_0=tuned[i, j, 1], eta_0=etas[arg[i, j, 1]],
                             final_J_0=float(np.nanmean(finalJ[i, j, 1, arg[i, j, 1]])),
                             delta=delta[i, j], delta_lo=lo, delta_hi=hi))
        slopes = np.array([_slope(logG, boot_delta[b, i]) for b in range(n_boot)])
        slopes = slopes[np.isfinite(slopes)]
        s = _slope(logG, delta[i])
        lo, hi = (np.quantile(slopes, [alpha, 1 - alpha]) if slopes.size else (math.nan, math.nan))
        fit[e] = dict(slope=s, lo=float(lo), hi=float(hi), n_points=int((delta[i] > 0).sum()),
                      n_boot_ok=int(slopes.size), theory=theory.get(e, math.nan))
    return pd.DataFrame(rows), fit


# --------------------------------------------------------------------------- C9: robustness
def robustness_experiment(quick: bool = False, estimators=None, ds=None, G: int = 8, eps: float = 0.2,
                          etas=None, seeds=None, steps: int | None = None, instance: InstanceSpec = EXP_INSTANCE,
                          progress: bool = True, level: float = 0.95, score: str = "final_J") -> pd.DataFrame:
    """C9: for every estimator and fixed delay d, tune η (default: best mean final J) and report the tuned row.

    Why final J and not ``(1/K)Σ‖∇J‖²``: on tabular softmax a step large enough to saturate the
    policy on *any* vertex makes ``‖∇J‖`` vanish, so the gradient score rewards collapse to a bad
    deterministic policy; C9 is a claim about the final objective.

    Default: all ten estimators, d ∈ {0, 2, 4, 8, 16, 32}, 9 step sizes, 8 seeds, K = 200 (quick:
    d ∈ {0, 8, 32}, 3 step sizes, 5 seeds, K = 60). Columns: those of :func:`tune` at the tuned η,
    plus ``div_rate_any`` (fraction of all runs of the setting, over every η, that diverged) and
    ``tail_any`` (largest mean ``max‖ĝ‖²/mean‖ĝ‖²`` over η): C9's instability indicators.
    """
    from simulate.training import ALL_ESTIMATORS

    estimators = tuple(estimators or ALL_ESTIMATORS)
    ds = tuple(ds or ((0, 8, 32) if quick else (0, 2, 4, 8, 16, 32)))
    etas = tuple(etas or (ETA_GRID[::4] if quick else ETA_GRID))
    seeds = list(seeds if seeds is not None else range(5 if quick else 8))
    steps = int(steps or (60 if quick else 200))
    base = TrainConfig(instance=instance, G=G, eps=eps, steps=steps)
    grid = [base.replace(estimator=e, delay=dl.fixed(d)) for e in estimators for d in ds]
    tuned = tune(grid, seeds=seeds, etas=etas, progress=progress, level=level, score=score)
    agg = tuned.groupby("setting").agg(div_rate_any=("div_rate", "mean"), tail_any=("ghat_tail", "max"))
    best = tuned[tuned["is_best"]].set_index("setting")
    out = agg.join(best, how="left").reset_index()
    # settings where every η diverged keep their identity columns
    meta = tuned.drop_duplicates("setting").set_index("setting")[["estimator", "d", "G", "eps"]]
    for col in meta.columns:
        out[col] = out["setting"].map(meta[col])
    order = {e: i for i, e in enumerate(estimators)}
    out = out.sort_values(["d", "estimator"], key=lambda s: s.map(order) if s.name == "estimator" else s)
    return out.reset_index(drop=True)


def c9_verdict(table: pd.DataFrame) -> dict:
    """C9's four parts decided from a :func:`robustness_experiment` table (largest d vs d = 0).

    - ``is_unstable``: at the largest d, ``is`` diverges for some η or its step tail ratio
      (``tail_any``) exceeds twice its value at d = 0.
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


__all__ = ["EXP_INSTANCE", "ETA_GRID", "mean_ci", "run_grid", "tune", "summarize", "best_eta",
           "theory_g_exponents", "g_scaling_experiment", "robustness_experiment", "c9_verdict"]
