"""C6 on training runs: the kernel's recorded ‖w_k − w_{k−d}‖, max |log ρ| and ‖ĝ‖² in w against independent
reconstructions, the derived κ against the score norm and the log-ratios it bounds, and the chain of
inequalities of simulate.training.overlap (docs/THEORY.md §C6)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate import instances as tab
from simulate.delays import DelaySpec
from simulate.protocol.instances import TrainingInstance, prev_token_mdp, shared_features
from simulate.training import InstanceSpec, TrainConfig, run_many
from simulate.training import overlap as ov
from simulate.training.kernel import logratio_max_nb


def _tiny_feature() -> TrainingInstance:
    """V = 3, T = 4, previous-token state, p = 6 shared features (Φ has full column rank: w is recoverable)."""
    ns, s0 = prev_token_mdp(3, 4)
    rng = np.random.default_rng(3)
    step = rng.uniform(size=(4, 4, 3)) / 4
    return TrainingInstance("tiny-feature", "test", ns, np.zeros(4), s0, step_reward=step,
                            features=shared_features(3, 4, 2, seed=3))


TABULAR = InstanceSpec(kind="token", V=3, T=4, state="count", reward="count_ge", k=2)
INSTANCES = {"tabular-count": lambda: TABULAR.build(), "tiny-feature": _tiny_feature}


def _paths(inst):
    mdp = tab.TabularMDP("paths", inst.next_state, np.zeros(inst.next_state.shape[1]), inst.s0)
    return tab.enumerate_paths(mdp)


def _path_logp(logits, actions, states):
    lp = tab.log_softmax_nb(np.ascontiguousarray(logits), np.empty_like(logits))
    t = np.arange(actions.shape[1])
    return lp[t[None, :], states, actions].sum(axis=1)


def _logits(inst, w):
    phi = getattr(inst, "features", None)
    return (w if phi is None else phi @ w).reshape(inst.next_state.shape)


# ----------------------------------------------------------------------------- the max-plus DP
@pytest.mark.parametrize("name", list(INSTANCES))
@pytest.mark.parametrize("scale", [0.1, 1.0, 20.0])
def test_logratio_max_equals_enumeration_over_every_path(name, scale):
    """max_τ |log π(τ) − log μ(τ)| by the DP equals the brute-force maximum over all V^T paths (to 1e-12 of the
    magnitudes involved: both sum the same T per-token differences, in different orders)."""
    inst = INSTANCES[name]()
    A, S, _ = _paths(inst)
    rng = np.random.default_rng(int(scale * 10))
    shape = inst.next_state.shape
    for _ in range(5):
        th, th2 = scale * rng.standard_normal(shape), scale * rng.standard_normal(shape)
        lp = tab.log_softmax_nb(th, np.empty(shape))
        lq = tab.log_softmax_nb(th2, np.empty(shape))
        brute = np.abs(_path_logp(th, A, S) - _path_logp(th2, A, S)).max()
        got = logratio_max_nb(lp, lq, inst.next_state, inst.s0)
        assert got == pytest.approx(brute, rel=1e-12, abs=1e-12 * (1 + scale * shape[0]))


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(2, 4), st.integers(1, 4), st.sampled_from([0.1, 3.0, 40.0]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_logratio_max_from_several_starts_in_one_pass_is_the_largest_of_one_pass_per_start(T, S, V, C, scale,
                                                                                        holes, seed):
    """``logratio_max_starts_nb`` (one DP from every start, the kernel's) equals the largest of
    :func:`logratio_max_nb` over the starts bit for bit (max-plus distributes over the starts; rounding is monotone),
    also with actions outside μ's support and repeated starts."""
    rng = np.random.default_rng(seed)
    next_state = rng.integers(0, S, size=(T, S, V))
    starts = rng.integers(0, S, size=C).astype(np.int64)
    lp = tab.log_softmax_nb(scale * rng.standard_normal((T, S, V)), np.empty((T, S, V)))
    lq = tab.log_softmax_nb(scale * rng.standard_normal((T, S, V)), np.empty((T, S, V)))
    if holes:
        lq[rng.random(size=lq.shape) < 0.3] = -np.inf
    one_each = max(logratio_max_nb(lp, lq, next_state, int(c)) for c in starts)
    got = tab.logratio_max_starts_nb(lp, lq, next_state, starts, np.empty((4, S)))
    assert np.float64(got).tobytes() == np.float64(one_each).tobytes(), (got, one_each)


def test_logratio_max_skips_actions_outside_the_support_and_reports_nan():
    inst = INSTANCES["tabular-count"]()
    shape = inst.next_state.shape
    lp = tab.log_softmax_nb(np.zeros(shape), np.empty(shape))
    lq = lp.copy()
    lq[:, :, 0] = -np.inf  # μ never plays token 0: those paths are outside its support
    lq[:, :, 1:] = np.log(0.5)
    assert logratio_max_nb(lp, lq, inst.next_state, inst.s0) == pytest.approx(shape[0] * abs(math.log(1 / 3) - math.log(0.5)))
    lp[0, inst.s0, 1] = np.nan
    assert math.isnan(logratio_max_nb(lp, lq, inst.next_state, inst.s0))


# ----------------------------------------------------------------------------- recorded arrays vs a replay
@pytest.mark.parametrize("name", list(INSTANCES))
@pytest.mark.parametrize("estimator", ["gmc", "onpolicy"])
def test_recorded_overlap_arrays_match_a_reconstruction_from_the_iterates(name, estimator):
    """θ_j is the final iterate of the same run cut at j steps (same seed: the run is a prefix); from it
    ‖w_k − w_{k−d_k}‖ (w by least squares through Φ for a feature policy), max |log ρ| by enumeration, and
    ‖ĝ_k‖² in w = ‖w_{k+1} − w_k‖²/η² (SGA) are rebuilt and compared with the recorded arrays."""
    inst = INSTANCES[name]()
    K, d, eta = 12, 3, 2.0
    cfg = lambda steps: TrainConfig(instance=InstanceSpec(), estimator=estimator, G=8, eta=eta, steps=steps,
                                    delay=DelaySpec("fixed", d), seed=5)
    runs = run_many([cfg(K)] + [cfg(j) for j in range(1, K + 1)], mdp=inst)
    full, cut = runs[0], runs[1:]
    logits = [None] + [r.theta for r in cut]  # logits[j] = θ_j, j ≥ 1
    logits[0] = np.zeros(inst.next_state.shape)  # init_scale = 0
    phi = getattr(inst, "features", None)
    w = [lg.ravel() if phi is None else np.linalg.lstsq(phi, lg.ravel(), rcond=None)[0] for lg in logits]
    if phi is not None:  # w is identified: Φ has full column rank
        assert np.linalg.matrix_rank(phi) == phi.shape[1]
    A, S, _ = _paths(inst)
    assert np.all(full.delays == np.minimum(np.arange(K), d))
    for k in range(K):
        dk = int(full.delays[k])
        assert full.dtheta_norm[k] == pytest.approx(np.linalg.norm(w[k] - w[k - dk]), rel=1e-9, abs=1e-12)
        brute = np.abs(_path_logp(logits[k], A, S) - _path_logp(logits[k - dk], A, S)).max()
        assert full.logratio_max[k] == pytest.approx(brute, rel=1e-9, abs=1e-12)
        assert full.gpar_norm2[k] == pytest.approx(np.sum((w[k + 1] - w[k]) ** 2) / eta**2, rel=1e-9, abs=1e-15)
    if phi is None:  # tabular: w = θ, so the parameter-space norm is the logit-space one, bit for bit
        assert np.array_equal(full.gpar_norm2, full.ghat_norm2)


# ----------------------------------------------------------------------------- κ
def _score_norm(inst, w, actions, states):
    """‖∇_w log π_w(τ)‖ of each path: Σ_t Φ_{t,s_t}ᵀ(e_{a_t} − π(·|s_t)) (Φ = I for a tabular policy)."""
    T, Sn, V = inst.next_state.shape
    logits = _logits(inst, w)
    pi = np.exp(tab.log_softmax_nb(np.ascontiguousarray(logits), np.empty_like(logits)))
    g = np.zeros((actions.shape[0], T, Sn, V))
    for t in range(T):
        g[np.arange(actions.shape[0]), t, states[:, t]] -= pi[t, states[:, t]]
        g[np.arange(actions.shape[0]), t, states[:, t], actions[:, t]] += 1.0
    g = g.reshape(actions.shape[0], -1)
    phi = getattr(inst, "features", None)
    return np.linalg.norm(g if phi is None else g @ phi, axis=1)


def test_kappa_tabular_is_sqrt_2T_and_is_approached():
    """κ = √(2T) for a tabular policy, and a policy that puts almost all mass on one other token at every
    step has a path whose score norm is within 0.1 % of it (the constant is the supremum, not loose)."""
    inst = INSTANCES["tabular-count"]()
    T, Sn, V = inst.next_state.shape
    kappa = ov.kappa_bound(inst)
    assert kappa == pytest.approx(math.sqrt(2 * T))
    theta = np.zeros((T, Sn, V))
    theta[:, :, 1] = 40.0  # π(1|s) ≈ 1: the path of 0-tokens has ‖e_0 − π‖² ≈ 2 per step
    A, S, _ = _paths(inst)
    norms = _score_norm(inst, theta.ravel(), A, S)
    assert norms.max() <= kappa * (1 + 1e-12)
    assert norms.max() >= kappa * (1 - 1e-3)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(list(INSTANCES)), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([0.01, 1.0, 10.0, 100.0]), step=st.sampled_from([1e-6, 1e-2, 1.0, 30.0]))
def test_kappa_bounds_every_log_ratio_and_score(name, seed, scale, step):
    """For random w, w' (near and far, small and saturating logits): every path's |log π_w(τ) − log π_w'(τ)|
    ≤ κ‖w − w'‖ and ‖∇ log π_w(τ)‖ ≤ κ (round-off slack 1e-9 relative)."""
    inst = INSTANCES[name]()
    p = inst.features.shape[1] if getattr(inst, "features", None) is not None else int(np.prod(inst.next_state.shape))
    rng = np.random.default_rng(seed)
    w = scale * rng.standard_normal(p)
    w2 = w + step * rng.standard_normal(p)
    kappa = ov.kappa_bound(inst)
    A, S, _ = _paths(inst)
    diff = np.abs(_path_logp(_logits(inst, w), A, S) - _path_logp(_logits(inst, w2), A, S))
    assert diff.max() <= kappa * np.linalg.norm(w - w2) * (1 + 1e-9) + 1e-12
    assert _score_norm(inst, w, A, S).max() <= kappa * (1 + 1e-9)


def test_kappa_features_is_the_largest_path_sum_of_feature_spreads():
    """The feature κ equals a brute-force max over paths of Σ_t max_b ‖φ(t,s_t,a_t) − φ(t,s_t,b)‖."""
    inst = INSTANCES["tiny-feature"]()
    T, Sn, V = inst.next_state.shape
    f = inst.features.reshape(T, Sn, V, -1)
    A, S, _ = _paths(inst)
    tot = np.zeros(A.shape[0])
    for t in range(T):
        fa = f[t, S[:, t], A[:, t]]  # (N, p)
        tot += np.max(np.linalg.norm(fa[:, None, :] - f[t, S[:, t]], axis=-1), axis=1)
    assert ov.kappa_bound(inst) == pytest.approx(tot.max(), rel=1e-12)


# ----------------------------------------------------------------------------- the chain
@pytest.fixture(scope="module")
def trained():
    inst = _tiny_feature()
    cfgs = [TrainConfig(instance=InstanceSpec(), estimator=e, G=8, eta=4.0, steps=60, delay=DelaySpec("fixed", d), seed=s)
            for e in ("gmc", "onpolicy") for d in (1, 4) for s in (0, 1)]
    return inst, run_many(cfgs, mdp=inst)


def test_every_link_of_the_chain_holds_on_training_runs(trained):
    inst, runs = trained
    df = ov.overlap_table(runs, inst=inst)
    sm = ov.summary(df)
    assert sm["n_positive"] > 20  # the runs are stale enough to test something
    for c in ("frac_link1", "frac_link2", "frac_link3", "frac_holds"):
        assert sm[c] == 1.0, (c, sm)
    assert sm["kappa_hat"] <= sm["kappa"]
    assert 0 < sm["log10_loose_ratio_min"] <= sm["log10_loose_dtheta_min"] <= sm["log10_loose_theory_min"]
    m = ov.run_M(runs[0])
    assert m["M"] == max(m["M_hat"], m["sqrt_M2"]) and m["M_hat"] > 0


def test_the_chain_check_catches_a_violation(trained):
    """The checks can fail: a log-ratio recorded as 0 breaks link 1 where σ² > 0; κ understated ×4
    breaks link 2; an M below M̂ breaks the premise."""
    import dataclasses

    inst, runs = trained
    r = runs[2]
    kappa = ov.kappa_bound(inst)
    assert ov.run_steps(r, kappa).link1.all()
    bad = dataclasses.replace(r, logratio_max=np.zeros_like(r.logratio_max))
    assert not ov.run_steps(bad, kappa).link1.all()
    assert not ov.run_steps(r, kappa / 4).link2.all()
    assert not ov.run_steps(r, kappa, M=0.5 * ov.run_M(r)["M_hat"]).premise.all()


def test_log_sq_expm1_is_exact_and_does_not_overflow():
    x = np.array([1e-8, 0.5, 3.0, 29.0, 31.0, 700.0, 5000.0])
    got = ov.log_sq_expm1(x)
    with np.errstate(over="ignore"):
        direct = 2 * np.log(np.expm1(x))
    ok = np.isfinite(direct)
    np.testing.assert_allclose(got[ok], direct[ok], rtol=1e-13)
    assert np.all(np.isfinite(got)) and got[-1] == pytest.approx(2 * 5000.0)
    assert ov.log_sq_expm1(0.0) == -np.inf
