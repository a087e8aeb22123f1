"""One protocol cell: tune η on the tuning seeds, then evaluate on the held-out seeds (docs/protocol.md).

A cell is ``(instance, estimator, d, ε, G)``. :func:`run_cell` returns a tidy table with one row
per run: ``phase = "tune"`` rows (every η of the grid × tuning seeds) and ``phase = "eval"`` rows
(evaluation seeds × {tuned η, neighbour η = tuned·2^{1/2}}), plus the cell's tuning summary in
every row (``eta_tuned``, ``eta_at_edge``, ``n_widen``, ``window_octaves``).

**Per-run metrics** (:func:`run_metrics`), with ``J_0 = J(θ_0)`` and ``J*`` the top of the scale
(:func:`reference_J`: the path optimum in v1/v2, the policy class's optimum ``J_class`` in v3):

- ``nauc = (1/(K+1)) Σ_{k=0}^{K} (J_k − J_0)/(J* − J_0)`` over ``K = budget/G`` steps, so every
  delay and every G spends the same number of sampled trajectories, counted from step 0;
- ``final_nJ``: the same normalisation of ``J_K``;
- ``zero_frac``: the fraction of steps whose groups all had equal rewards (``ĝ_k = 0``);
- ``diverged`` (θ or J not finite, or ``max|θ| > 10⁸``), ``collapsed`` (``J_k`` falls below its
  running maximum by more than ``collapse_drop·(J* − J_0)``), ``failed = diverged or collapsed``;
  after a divergence the curve counts as ``J_0`` (normalised 0);
- ``chi2_med``: the median over steps of the exact ``χ²(π_{θ_k}‖μ_k)``: the run's overlap regime.

**Tuning.** The score of an η is the mean ``nauc`` over the tuning seeds (v4, ``eta_rule = "lcb"``: its lower
confidence bound ``mean − t_{n−1, eta_lcb_level}·s/√n``, so a high-variance η loses). The grid starts at
``2^{eta_log2}`` in half-octaves; while the best η sits on an edge the grid grows by two points on
that side (at most ``max_widen`` times; ``eta_at_edge`` reports a cell that still ends on an edge).
``window_octaves`` is the width (in octaves) of the contiguous η range whose score is within
``window_delta`` of the best: a direct measure of how forgiving the estimator is to tuning.

**Version 4.** Every learner run gets the protocol's ``zero_tol`` (a group whose returns are equal within
it has advantages exactly 0, :class:`simulate.training.TrainConfig`); token-level maps run at ``T·η``
(``token_eta = "length"``: their ĝ is length-normalised, ``c = k/T``, so ``T·η`` is the trajectory maps'
step; the ``eta`` column keeps the length-normalised η, ``eta_step`` the one applied); the held-out seeds
are also run at ``η·2^{sensitivity_step_log2}`` (``eta_kind = "lower"``), and every row carries the chosen
η's tuning mean and bound (``tune_nauc``, ``tune_lcb``).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from simulate import delays as dl
from simulate.protocol.catalog import get_instance
from simulate.protocol.instances import TrainingInstance
from simulate.protocol.spec import Protocol
from simulate.training import TrainConfig, run_many

THETA_MAX = 1e8  # "diverged" means effectively non-finite, not merely a saturated softmax

__all__ = ["run_cell", "run_metrics", "policy_entropy", "eval_at", "reference_J", "step_eta", "tuning_scores",
           "THETA_MAX", "EVAL_KINDS"]
#: ``eval_at`` kinds: C5 test A, and the common arm at η, its neighbour above and (v4) the sensitivity η.
EVAL_KINDS = ("fixed", "common", "common-neighbour", "common-lower")


def run_metrics(result, J_star: float, collapse_drop: float, *, lockin_nJ: float = math.nan,
                lockin_grad_rel: float = math.nan, learning_gap: float = 0.9) -> dict:
    """The per-run metrics of the module docstring from a :class:`simulate.training.TrainResult`.

    With ``lockin_nJ`` and ``lockin_grad_rel`` set (protocol v2) a run that ends with
    ``nJ_K < lockin_nJ`` and ``‖∇J(θ_K)‖ ≤ lockin_grad_rel·‖∇J(θ_0)‖`` is *locked in* and counts as a
    failure; ``failure`` names the first of divergence, collapse, lock-in that applies (``"none"`` if none does).
    """
    J = np.asarray(result.J, dtype=np.float64)
    J0 = float(J[0])
    span = J_star - J0
    if not span > 0:
        raise ValueError(f"J* − J(θ_0) must be > 0 to normalise, got J* = {J_star}, J_0 = {J0}")
    nJ = np.where(np.isfinite(J), (J - J0) / span, 0.0)
    run_max = np.maximum.accumulate(np.where(np.isfinite(J), J, -np.inf))
    collapsed = bool(np.any(np.isfinite(J) & (J < run_max - collapse_drop * span)))
    chi2_all = np.asarray(result.chi2, dtype=np.float64)
    chi2 = chi2_all[np.isfinite(chi2_all)]
    zero_all = np.asarray(result.zero_grad, dtype=np.float64)
    zero = zero_all[np.isfinite(zero_all)]
    diverged = bool(result.diverged)
    gn = np.sqrt(np.maximum(np.asarray(result.grad_norm2, dtype=np.float64), 0.0))
    use_lockin = math.isfinite(lockin_nJ) and math.isfinite(lockin_grad_rel)
    stuck = np.isfinite(gn) & (gn <= lockin_grad_rel * gn[0]) & (nJ < lockin_nJ) if use_lockin else np.zeros(len(J), bool)
    locked = bool(use_lockin and not diverged and stuck[-1])
    # the step from which the run stayed stuck: the start of the last run of `stuck` steps
    lock_step = int(len(stuck) - np.argmin(stuck[::-1])) if locked and not stuck.all() else (0 if locked else -1)
    failure = "diverged" if diverged else "collapsed" if collapsed else "locked_in" if locked else "none"
    # learning phase (v2 regime): steps before J first reaches learning_gap of its gap, whose ĝ ≠ 0;
    # converged and locked-in steps have χ² ≈ 0 and would otherwise label every run "local"
    K = len(chi2_all)
    reached = np.flatnonzero(nJ[:K] >= learning_gap)
    k90 = int(reached[0]) if reached.size else K
    learn = np.isfinite(chi2_all[:k90]) & (zero_all[:k90] == 0)
    cl = np.maximum(chi2_all[:k90][learn], 0.0)
    ess = np.asarray(result.ess, dtype=np.float64)
    early = ess[: max(1, K // 4)]
    early = early[np.isfinite(early)]
    return dict(
        nauc=float(nJ.mean()),
        final_nJ=float(nJ[-1]),
        zero_frac=float(zero.mean()) if zero.size else math.nan,
        diverged=diverged,
        collapsed=collapsed,
        locked_in=locked,
        lockin_step=lock_step,
        failure=failure,
        failed=bool(diverged or collapsed or locked),
        chi2_med=float(max(np.median(chi2), 0.0)) if chi2.size else math.nan,  # χ² ≥ 0; round-off can give −1e−16
        n_learn=int(cl.size),
        chi2_learn_med=float(np.median(cl)) if cl.size else math.nan,
        chi2_learn_mean=float(cl.mean()) if cl.size else math.nan,
        chi2_learn_p90=float(np.quantile(cl, 0.9)) if cl.size else math.nan,
        chi2_learn_max=float(cl.max()) if cl.size else math.nan,
        ess_early=float(early.mean()) if early.size else math.nan,
        grad_norm_final_rel=float(gn[-1] / gn[0]) if gn[0] > 0 and np.isfinite(gn[-1]) else math.nan,
    )


def reference_J(inst: TrainingInstance, proto: Protocol) -> float:
    """The top of the normalisation ``nJ = (J − J_0)/(J_ref − J_0)``: ``J*`` (protocol v1/v2,
    ``normalise = "path"``) or ``J_class``, the optimum of the instance's policy class (v3, ``"class"``;
    equal to ``J*`` for a tabular policy)."""
    return float(inst.J_class if proto.normalise == "class" else inst.J_star)


def policy_entropy(inst, theta: np.ndarray) -> float:
    """Mean per-token entropy ``(1/T) Σ_t Σ_s d_t(s) H(π(·|s, t))`` (nats) of the policy with logits
    ``theta`` ``(T, S, V)``, ``d_t`` its own state distribution: 0 for a deterministic policy."""
    from simulate.instances import state_distribution

    th = np.asarray(theta, dtype=np.float64)
    if not np.all(np.isfinite(th)):
        return math.nan
    z = th - th.max(axis=-1, keepdims=True)
    q = np.exp(z)
    q /= q.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(q > 0, q * np.log(q), 0.0), axis=-1)
    d = state_distribution(inst.build(), q)
    return float(np.sum(d[:-1] * h) / th.shape[0])


def step_eta(inst: TrainingInstance, estimator: str, eta: float, proto: Protocol) -> float:
    """The η the learner applies for the length-normalised ``eta``: ``T·η`` for a token-level map under
    ``token_eta = "length"`` (its ĝ has coefficients ``k/T`` where a trajectory map's have ``k``, so at
    ``d = 0``, where every ``k = 1``, both take the same step), else ``eta``."""
    from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

    if proto.token_eta == "length" and estimator in TOKEN_ESTIMATORS:
        return float(eta) * int(inst.next_state.shape[0])
    return float(eta)


def _configs(inst: TrainingInstance, estimator: str, d: int, eps: float, G: int, etas, seeds, proto: Protocol,
             K: int | None):
    steps = proto.steps(inst.name, G) if K is None else int(K)
    extra = {} if proto.zero_tol is None else dict(zero_tol=float(proto.zero_tol))  # v4 (None: v1–v3's exact rule)
    return [TrainConfig(instance=inst, estimator=estimator, eps=eps, G=G, n_prompts=proto.prompts_of(inst.name),
                        eta=step_eta(inst, estimator, eta, proto), steps=steps, delay=dl.fixed(d), seed=int(s),
                        collapse_frac=0.0, theta_max=THETA_MAX, diagnostics=False, **extra)
            for eta in etas for s in seeds]


def _run(inst, estimator, d, eps, G, etas, seeds, proto, phase, eta_kind=None, K=None) -> list[dict]:
    cfgs = _configs(inst, estimator, d, eps, G, etas, seeds, proto, K)
    rows = []
    grid = [float(e) for e in etas for _ in seeds]  # the length-normalised η of each config
    for c, r, eta in zip(cfgs, run_many(cfgs), grid):
        row = dict(phase=phase, eta=eta, seed=c.seed,
                   **run_metrics(r, reference_J(inst, proto), proto.collapse_drop, lockin_nJ=proto.lockin_nJ,
                                 lockin_grad_rel=proto.lockin_grad_rel, learning_gap=proto.learning_gap))
        if c.eta != eta:
            row["eta_step"] = c.eta
        if phase != "tune":
            row["entropy_final"] = policy_entropy(inst, r.theta)
        if eta_kind is not None:
            row["eta_kind"] = eta_kind
        rows.append(row)
    return rows


def _window(etas: list[float], score: np.ndarray, best: int, delta: float) -> float:
    lo = hi = best
    while lo > 0 and score[lo - 1] >= score[best] - delta:
        lo -= 1
    while hi < len(etas) - 1 and score[hi + 1] >= score[best] - delta:
        hi += 1
    return math.log2(etas[hi] / etas[lo])


def run_cell(instance, estimator: str, d: int, eps: float, G: int, proto: Protocol, K: int | None = None) -> pd.DataFrame:
    """Tune and evaluate one cell (module docstring); ``instance`` is a registry name or a
    :class:`~simulate.protocol.instances.TrainingInstance`; ``K`` overrides ``budget/G`` steps (C5)."""
    inst = get_instance(instance)
    lo, hi = proto.start_grid(estimator)
    step = proto.eta_step_log2
    rows = _run(inst, estimator, d, eps, G, proto.etas(lo, hi), proto.tune_seeds, proto, "tune", K=K)
    n_widen = 0
    while True:
        tune = pd.DataFrame(rows)
        mean, lcb = tuning_scores(tune, proto)
        score = lcb if proto.eta_rule == "lcb" else mean
        if proto.version >= 4:  # compared at 12 decimals: maps that coincide at d = 0 (token-level at T·η, whose
            score = score.round(12)  # 1/T may round in the last bit) must pick the same η
        etas = list(score.index)
        best = int(np.argmax(score.to_numpy()))  # first maximum: deterministic on ties
        at_low, at_high = best == 0, best == len(etas) - 1
        if not (at_low or at_high) or n_widen >= proto.max_widen:
            break
        n_widen += 1
        new = [2.0 ** (lo - step * i) for i in (2, 1)] if at_low else [2.0 ** (hi + step * i) for i in (1, 2)]
        lo, hi = (lo - 2 * step, hi) if at_low else (lo, hi + 2 * step)
        rows += _run(inst, estimator, d, eps, G, new, proto.tune_seeds, proto, "tune", K=K)
    eta_tuned = float(etas[best])
    window = _window(etas, mean.to_numpy(), int(np.argmax(mean.to_numpy())), proto.window_delta)
    neighbour = eta_tuned * 2.0 ** proto.neighbour_step_log2
    rows += _run(inst, estimator, d, eps, G, [eta_tuned], proto.eval_seeds, proto, "eval", "tuned", K=K)
    rows += _run(inst, estimator, d, eps, G, [neighbour], proto.eval_seeds, proto, "eval", "neighbour", K=K)
    if math.isfinite(proto.sensitivity_step_log2):  # v4: the sensitivity line's η/√2
        rows += _run(inst, estimator, d, eps, G, [eta_tuned * 2.0 ** proto.sensitivity_step_log2], proto.eval_seeds,
                     proto, "eval", "lower", K=K)
    out = pd.DataFrame(rows)
    out["eta_kind"] = out["eta_kind"].fillna("grid") if "eta_kind" in out else "grid"
    steps = proto.steps(inst.name, G) if K is None else int(K)
    out = out.assign(instance=inst.name, estimator=estimator, d=int(d), eps=float(eps), G=int(G), K=steps,
                     eta_tuned=eta_tuned,
                     eta_at_edge=bool(at_low or at_high), n_widen=n_widen, window_octaves=window,
                     tune_nauc=float(mean.iloc[best]), tune_lcb=float(lcb.iloc[best]))
    return out


def tuning_scores(tune: pd.DataFrame, proto: Protocol) -> tuple[pd.Series, pd.Series]:
    """Per grid η (sorted): the mean tuning nAUC and its one-sided lower confidence bound
    ``mean − t_{n−1, eta_lcb_level}·s/√n`` over the tuning seeds (``s`` the sample s.d.; a bound equal to
    the mean when every seed gives the same nAUC)."""
    g = tune.groupby("eta")["nauc"]
    mean, sd, n = g.mean().sort_index(), g.std(ddof=1).sort_index().fillna(0.0), g.size().sort_index()
    t = stats.t.ppf(proto.eta_lcb_level, np.maximum(n.to_numpy() - 1, 1))
    return mean, mean - t * sd / np.sqrt(n)


def eval_at(instance, estimator: str, d: int, eps: float, G: int, eta: float, proto: Protocol,
            K: int | None = None, kind: str = "fixed") -> pd.DataFrame:
    """Evaluation seeds at a given η: one row per run. ``kind="fixed"``: C5 test A (``phase = "fixed"``);
    ``kind="common"`` / ``"common-neighbour"``: the v2 common-η arm at η and at its grid neighbour
    (``phase = "eval"``, ``eta_kind = kind``)."""
    if kind not in EVAL_KINDS:
        raise ValueError(f"kind must be one of {EVAL_KINDS}, got {kind!r}")
    inst = get_instance(instance)
    rows = _run(inst, estimator, d, eps, G, [eta], proto.eval_seeds, proto, "fixed" if kind == "fixed" else "eval",
                kind, K=K)
    return pd.DataFrame(rows).assign(instance=inst.name, estimator=estimator, d=int(d), eps=float(eps), G=int(G),
                                     K=proto.steps(inst.name, G) if K is None else int(K))
