"""Aggregates over instances × seeds as RL evaluation does them (Agarwal et al. 2021, `rliable`; issue 53).

For one family and delay, gmc against each rival on a score matrix ``X[seed, instance]`` (held-out seeds, the
arm's η): the **IQM difference** ``IQM(X_gmc) − IQM(X_rival)`` (``rliable.metrics.aggregate_iqm``: the mean of
the middle 50 % of all runs) and the **probability of improvement** ``P(X_gmc > X_rival)``
(``rliable.metrics.probability_of_improvement``: the Mann–Whitney statistic per instance, averaged over
instances), each with a percentile interval from a **stratified bootstrap**: seeds are resampled with
replacement within each instance (the strata), the same indices for gmc and the rival, because both ran on the
same seeds (a paired design; rliable's own bootstrap resamples the two independently, which ignores the
pairing and widens the interval).

Why not ``rliable.library.get_interval_estimates``: rliable 1.2.0's bootstrap needs ``arch < 8``, and arch
7.2 does not import under pandas 3 (``deprecate_kwarg`` changed signature), so only rliable's metrics are used;
the resampling is :func:`stratified_bootstrap` below (a fixed seed: same inputs ⇒ same interval).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from rliable import metrics
from scipy.stats import trim_mean

__all__ = ["score_matrix", "stratified_bootstrap", "compare", "iqm_diff", "poi", "resample_rows", "performance_profile", "BOOT_REPS", "BOOT_SEED",
           "LEVEL", "INTERVAL"]

BOOT_REPS = 2000
BOOT_SEED = 53
LEVEL = 0.95
INTERVAL = f"{LEVEL:.0%} stratified bootstrap percentile interval (seeds resampled within instances, paired; " \
           f"{BOOT_REPS} resamples)".replace("95%", "95 %")


def score_matrix(table: pd.DataFrame, estimator: str, d: int, instances, seeds, *, eta_kind: str = "tuned",
                 column: str = "nauc", eps: float | None = None, G: int | None = None) -> np.ndarray:
    """``X[seed, instance]`` of ``column`` for ``estimator`` at delay ``d`` from a protocol run table (evaluation
    runs at ``eta_kind``); a missing run raises ``ValueError`` naming it (never a silent NaN)."""
    t = table[(table.phase == "eval") & (table.eta_kind == eta_kind) & (table.estimator == estimator)
              & (table.d == int(d))]
    if eps is not None:
        t = t[np.isclose(t.eps, float(eps))]
    if G is not None:
        t = t[t.G == int(G)]
    piv = t.pivot_table(index="seed", columns="instance", values=column, aggfunc="first")
    insts, seeds = list(instances), list(seeds)
    missing = [i for i in insts if i not in piv.columns] + [s for s in seeds if s not in piv.index]
    if missing:
        raise ValueError(f"score_matrix: no {eta_kind} evaluation runs of {estimator} at d = {d} for {missing}")
    X = piv.loc[seeds, insts].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(X)):
        raise ValueError(f"score_matrix: non-finite {column} for {estimator} at d = {d}")
    return X


def resample_rows(n: int, k: int, reps: int = BOOT_REPS, seed: int = BOOT_SEED) -> np.ndarray:
    """``(reps, n, k)`` row indices: for each resample and each column (instance) its own ``n`` seeds drawn with
    replacement (the strata of the stratified bootstrap)."""
    if not (isinstance(reps, int) and reps >= 100):
        raise ValueError(f"reps must be an integer >= 100, got {reps!r}")
    return np.random.default_rng(seed).integers(0, n, size=(reps, n, k))


def iqm_diff(X, Y) -> np.ndarray | float:
    """``IQM(X) − IQM(Y)`` (rliable's ``aggregate_iqm``: 25 %-trimmed mean over all runs × tasks); a stack of
    matrices ``(reps, n, k)`` gives one value per matrix."""
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if X.ndim == 2:
        return float(metrics.aggregate_iqm(X) - metrics.aggregate_iqm(Y))
    flat = lambda A: A.reshape(A.shape[0], -1)  # noqa: E731
    return trim_mean(flat(X), 0.25, axis=1) - trim_mean(flat(Y), 0.25, axis=1)


def poi(X, Y) -> np.ndarray | float:
    """``P(X > Y)`` averaged over tasks: rliable's ``probability_of_improvement`` (the Mann–Whitney U statistic over
    ``n_x·n_y`` per task, ties counted ½), vectorised over a stack ``(reps, n, k)`` (a test checks the two agree)."""
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if X.ndim == 2:
        return float(metrics.probability_of_improvement(X, Y))
    gt = (X[:, :, None, :] > Y[:, None, :, :]).mean(axis=(1, 2))
    eq = (X[:, :, None, :] == Y[:, None, :, :]).mean(axis=(1, 2))
    return (gt + 0.5 * eq).mean(axis=1)


def stratified_bootstrap(fn, X: np.ndarray, Y: np.ndarray, reps: int = BOOT_REPS, seed: int = BOOT_SEED,
                         level: float = LEVEL) -> tuple[float, float, float]:
    """``(fn(X, Y), lo, hi)``: the statistic and its percentile interval at ``level`` over ``reps`` resamples that
    draw, within each column (instance), rows (seeds) with replacement — the same rows for ``X`` and ``Y``.
    ``fn`` takes two matrices, or two stacks ``(reps, n, k)`` and returns one value per resample."""
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if X.shape != Y.shape or X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
        raise ValueError(f"X and Y must be matrices of one shape (seeds >= 2, instances >= 1), got {X.shape}, {Y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):
        raise ValueError("X and Y must be finite (a failed run scores its nAUC, never NaN)")
    if not (isinstance(level, float) and 0.5 < level < 1):
        raise ValueError(f"level must be a number in (0.5, 1), got {level!r}")
    n, k = X.shape
    rows = resample_rows(n, k, reps, seed)
    cols = np.arange(k)[None, None, :]
    stats = np.asarray(fn(X[rows, cols], Y[rows, cols]), dtype=np.float64)
    a = (1 - level) / 2
    return float(fn(X, Y)), float(np.quantile(stats, a)), float(np.quantile(stats, 1 - a))


def compare(X: np.ndarray, Y: np.ndarray, reps: int = BOOT_REPS, seed: int = BOOT_SEED) -> dict:
    """gmc (``X``) against a rival (``Y``): IQM difference and probability of improvement, each with its
    stratified-bootstrap interval (module docstring); the same resamples for both."""
    d, lo, hi = stratified_bootstrap(iqm_diff, X, Y, reps, seed)
    p, plo, phi = stratified_bootstrap(poi, X, Y, reps, seed)
    return dict(delta=d, lo=lo, hi=hi, poi=p, poi_lo=plo, poi_hi=phi, n_seeds=int(X.shape[0]),
                n_instances=int(X.shape[1]))


def performance_profile(X: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of runs (all seeds × instances) with score > τ, for each τ (Agarwal et al.'s performance profile)."""
    x = np.asarray(X, dtype=np.float64).ravel()
    return np.array([float(np.mean(x > t)) for t in np.asarray(taus, dtype=np.float64)])


def family_comparisons(table: pd.DataFrame, proto, subject: str, rivals, arm: str | None = None) -> list[dict]:
    """``subject − rival`` per family × delay × rival of a version-6 protocol's run table on one step-size arm
    (default the primary): :func:`compare` on the score matrices over the family's draws × held-out seeds, with
    ``family``, ``d``, ``rival`` and ``n_instances`` added. The one loop the report's table and ``simulate score`` read."""
    from simulate.protocol.families import by_family

    arm = proto.primary_arm if arm is None else arm
    eps, G = float(proto.primary["eps"]), int(proto.primary["G"])
    out = []
    for fam, insts in by_family(proto.instances).items():
        for d in proto.delays:
            X = score_matrix(table, subject, d, insts, proto.eval_seeds, eta_kind=arm, eps=eps, G=G)
            for r in rivals:
                Y = score_matrix(table, r, d, insts, proto.eval_seeds, eta_kind=arm, eps=eps, G=G)
                out.append(dict(compare(X, Y), family=fam, d=int(d), rival=r, n_instances=len(insts)))
    return out


def iqm_interval(X: np.ndarray, reps: int = BOOT_REPS, seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """``(IQM(X), lo, hi)``: one score matrix's IQM and its stratified-bootstrap interval (the IQM difference against a
    zero matrix on the same resamples: ``IQM(X) − 0`` is ``IQM(X)`` exactly)."""
    return stratified_bootstrap(iqm_diff, X, np.zeros_like(np.asarray(X, dtype=np.float64)), reps, seed)
