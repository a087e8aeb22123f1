"""Issue 54's ladder controls: the sparse reward and the warm start's strength apart.

``c-dense-warm6``: rung 6 with the dense per-token reward and a warm start at rung 6's per-token accuracy;
``c-sparse-warm5``: rung 6's sparse reward with a warm start at rung 5's. Per-token accuracy
(:func:`simulate.bridge.rungs.token_accuracy`): the mean probability of the right answer token on the answer path.
"""
import numpy as np
import pytest

from simulate.bridge import rungs
from simulate.bridge.ladder import CONTROLS, RUNGS, TOKEN_TOL, get_rung


def _acc(name):
    return get_rung(name).token_accuracy()


def test_token_accuracy_is_the_dense_rewards_J_and_the_mean_right_token_probability():
    """Per-token accuracy against an independent computation (softmax of the logits read by hand), and equal to
    the exact J of the dense reward; the argmax share against a hand count."""
    inst = rungs.prompt_answer("t", C=3, V=4, T=3, reward="frac", features=2, seed=1)
    ans = rungs.answers(3, 4, 3, 1, 2)
    w = 0.9 * np.random.default_rng(5).standard_normal(inst.n_params)
    th = inst.logits(w)  # (T, S, V); frac: state = context
    p = np.exp(th - th.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    want = np.mean([p[t, c, ans[c, t]] for c in range(3) for t in range(3)])
    hits = np.mean([p[t, c].argmax() == ans[c, t] for c in range(3) for t in range(3)])
    assert rungs.token_accuracy(inst, ans, w) == pytest.approx(want, rel=1e-12)
    assert rungs.token_accuracy(inst, ans, w) == pytest.approx(inst.exact_J_grad(w)[0], rel=1e-12)
    assert rungs.token_argmax_accuracy(inst, ans, w) == hits
    # the exact-match instance reads the same tokens at each context's alive state (the logits do not see "dead")
    ex = rungs.prompt_answer("t", C=3, V=4, T=3, reward="exact", features=2, seed=1)
    assert rungs.token_accuracy(ex, ans, w) == pytest.approx(want, rel=1e-12)


def test_controls_are_registered_and_build():
    names = [r.name for r in CONTROLS]
    assert "c-dense-warm6" in names and "c-sparse-warm5" in names
    dense, sparse = get_rung("c-dense-warm6"), get_rung("c-sparse-warm5")
    assert dense.build().step_reward is not None  # dense per-token reward
    assert sparse.build().step_reward is None and sparse.build().reward.max() == 1.0  # exact match
    for r in (dense, sparse):
        inst = r.build()
        assert (len(inst.starts), inst.V, inst.T, inst.n_params) == (8, 16, 12, 96)  # rung 6's shape, shared W
        assert r.learner == get_rung("6-sparse").learner


@pytest.mark.parametrize("control, ref", [("c-dense-warm6", "6-sparse"), ("c-sparse-warm5", "5-warm")])
def test_control_warm_start_matches_its_reference_per_token_accuracy(control, ref):
    """The control's warm start: per-token accuracy in [target, target + TOKEN_TOL], the target being the
    reference rung's, and far from the other reference (the match is not vacuous)."""
    target = _acc(ref)
    got = _acc(control)
    assert target <= got <= target + TOKEN_TOL
    other = {"6-sparse": "5-warm", "5-warm": "6-sparse"}[ref]
    assert abs(got - _acc(other)) > 0.3
    inst = get_rung(control).build()
    assert inst.exact_J_grad(np.zeros(inst.n_params))[0] < inst.exact_J_grad(inst.w_init)[0]  # not a cold start


def test_the_two_rewards_warm_starts_differ_as_the_issue_says():
    """Rung 5 (dense, J = 0.5) and rung 6 (sparse, J = 0.5) start from different per-token accuracies (≈ 0.50 and
    ≈ 0.94): the confound the controls remove."""
    assert _acc("5-warm") == pytest.approx(0.50, abs=0.01)
    assert _acc("6-sparse") == pytest.approx(0.94, abs=0.01)


def test_unreachable_warm_start_target_raises():
    inst = rungs.prompt_answer("t", C=3, V=4, T=3, reward="exact", features=2, seed=0)
    ans = rungs.answers(3, 4, 3, 0, 2)
    with pytest.raises(ValueError, match="unreachable"):
        rungs.supervised_init(inst, ans, target=0.99, max_iter=5, metric="token")
    with pytest.raises(ValueError, match="unreachable"):
        rungs.supervised_init(inst, ans, target=0.9, max_iter=5)
    with pytest.raises(ValueError, match="unreachable"):
        rungs.prompt_answer("t", C=3, V=4, T=3, reward="exact", features=2, seed=0, warm=0.999999, warm_metric="token")


def test_a_target_the_uniform_policy_meets_raises_instead_of_a_cold_start():
    inst = rungs.prompt_answer("t", C=3, V=4, T=3, reward="frac", features=2, seed=0)  # J(0) = 1/4
    ans = rungs.answers(3, 4, 3, 0, 2)
    for metric in ("J", "token"):
        with pytest.raises(ValueError, match="cold start"):
            rungs.supervised_init(inst, ans, target=0.2, metric=metric)
    with pytest.raises(ValueError, match="cold start"):
        rungs.prompt_answer("t", C=3, V=4, T=3, reward="frac", features=2, seed=0, warm=0.1)


def test_a_target_overshot_past_the_tolerance_raises():
    inst = rungs.prompt_answer("t", C=3, V=4, T=3, reward="frac", features=2, seed=0)
    ans = rungs.answers(3, 4, 3, 0, 2)
    w = rungs.supervised_init(inst, ans, target=0.6, metric="token", lr=50.0)  # coarse steps: it lands past 0.6
    assert rungs.token_accuracy(inst, ans, w) - 0.6 > 1e-3
    with pytest.raises(ValueError, match="tol"):
        rungs.supervised_init(inst, ans, target=0.6, metric="token", lr=50.0, tol=1e-3)


@pytest.mark.parametrize("kw, match", [
    (dict(T=0), "T must be"), (dict(features=1.5), "features must be"), (dict(C=0), "C must be"),
    (dict(V=1), "V must be"), (dict(reward="dense"), "reward must be"), (dict(warm=0.5, warm_metric="argmax"),
                                                                         "warm_metric must be"),
    (dict(warm=1.0), "target must be"), (dict(warm=0.0, warm_metric="token"), "target must be"),
])
def test_bad_instance_arguments_are_refused(kw, match):
    args = dict(C=3, V=4, T=3, reward="exact", features=2, seed=0)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        rungs.prompt_answer("t", **args)


def test_bad_warm_start_arguments_are_refused():
    inst = rungs.prompt_answer("t", C=3, V=4, T=3, reward="exact", features=2, seed=0)
    ans = rungs.answers(3, 4, 3, 0, 2)
    with pytest.raises(ValueError, match="metric must be"):
        rungs.supervised_init(inst, ans, target=0.5, metric="acc")
    with pytest.raises(ValueError, match="tol must be"):
        rungs.supervised_init(inst, ans, target=0.5, tol=0.0)


def test_unknown_rung_name_is_a_clear_value_error():
    with pytest.raises(ValueError, match=r"rung must be one of .*c-dense-warm6.*got 'c-dense'"):
        get_rung("c-dense")
    assert all(get_rung(r.name) is r for r in RUNGS + CONTROLS)
