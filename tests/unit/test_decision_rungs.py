"""The ladder's instances and rungs (simulate/bridge/rungs.py, simulate/bridge/ladder.py) on tiny prompt–answer tasks,
from the module docstrings: the MDP's states and rewards, the log-linear features, the answers, per-token accuracy,
the warm start that never silently becomes a cold start, and the rung registry (issue 55)."""
import math

import numpy as np
import pytest

from simulate.bridge import ladder, rungs
from simulate.bridge.rungs import answers, hidden, prompt_answer, supervised_init, token_accuracy, token_argmax_accuracy


@pytest.mark.parametrize("kw, match", [
    (dict(C=0), "C must be an integer >= 1, got 0"), (dict(V=1), "V must be an integer >= 2, got 1"),
    (dict(T=0), "T must be an integer >= 1, got 0"), (dict(T=1.5), "T must be an integer >= 1, got 1.5"),
    (dict(C=2.0), "C must be an integer"), (dict(reward="dense"), "reward must be one of frac, exact, got 'dense'"),
    (dict(features=1.5), r"features must be None \(tabular\) or an integer m >= 1, got 1.5"),
    (dict(features=0), "features must be None"), (dict(warm_metric="argmax"), "warm_metric must be one of J, token"),
])
def test_bad_arguments_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        prompt_answer("x", **{**dict(C=2, V=3, T=2), **kw})


def test_smallest_arguments_are_accepted():
    inst = prompt_answer("x", C=1, V=2, T=1, features=1)
    assert inst.next_state.shape == (1, 1, 2) and inst.features.shape == (2, 2)
    prompt_answer("x", C=np.int64(1), V=np.int64(2), T=np.int64(1), features=np.int64(1))


def test_hidden_states_are_unit_and_seeded_and_answers_are_the_teachers_argmax():
    h = hidden(3, 2, 4, seed=5)
    assert h.shape == (3, 2, 4) and np.allclose(np.linalg.norm(h, axis=-1), 1.0)
    assert np.array_equal(h, hidden(3, 2, 4, seed=5)) and not np.allclose(h, hidden(3, 2, 4, seed=6))
    ans = answers(3, 4, 2, seed=5, m=4)
    teacher = np.random.default_rng([5, 33]).standard_normal((4, 4))
    assert ans.shape == (3, 2) and np.array_equal(ans, np.argmax(h @ teacher.T, axis=-1))
    assert not np.array_equal(answers(8, 4, 3, seed=0), answers(8, 4, 3, seed=1))


def test_frac_reward_is_paid_per_right_token_and_the_state_is_the_context():
    inst = prompt_answer("x", C=2, V=3, T=2, seed=1)
    ans = answers(2, 3, 2, 1)
    assert inst.next_state.shape == (2, 2, 3) and list(inst.starts) == [0, 1] and inst.s0 == 0
    for c in range(2):
        assert (inst.next_state[:, c, :] == c).all()
        for t in range(2):
            assert list(inst.step_reward[t, c]) == [0.5 if a == ans[c, t] else 0.0 for a in range(3)]
    assert (inst.reward == 0).all() and inst.features is None and inst.w_init is None
    assert inst.description == "prompt-answer: C = 2 contexts, V = 3, T = 2, frac reward, tabular"


def test_exact_reward_needs_every_token_right():
    inst = prompt_answer("x", C=2, V=3, T=2, reward="exact", seed=1, description="mine")
    ans = answers(2, 3, 2, 1)
    assert inst.next_state.shape == (2, 4, 3) and list(inst.starts) == [1, 3] and inst.s0 == 1
    assert list(inst.reward) == [0.0, 1.0, 0.0, 1.0] and inst.step_reward is None and inst.description == "mine"
    for c in range(2):
        for t in range(2):
            for a in range(3):
                assert inst.next_state[t, 2 * c, a] == 2 * c                     # dead stays dead
                assert inst.next_state[t, 2 * c + 1, a] == 2 * c + (a == ans[c, t])  # a wrong token kills
    assert inst.exact_J_grad(np.zeros(inst.n_params))[0] == pytest.approx(1 / 9)  # (1/3)² per context


def test_log_linear_features_share_the_unembedding():
    inst = prompt_answer("x", C=2, V=3, T=2, reward="exact", features=4, seed=2)
    h = hidden(2, 2, 4, 2)
    phi = inst.features.reshape(2, 4, 3, 12)
    assert inst.n_params == 12
    for c in range(2):
        for s in (2 * c, 2 * c + 1):        # the same logits in every state of a context
            for a in range(3):
                assert np.array_equal(phi[:, s, a, 4 * a:4 * a + 4], h[c])
                assert not np.delete(phi[:, s, a], np.s_[4 * a:4 * a + 4], axis=-1).any()
    assert inst.description.endswith("exact reward, log-linear shared unembedding (p = 12)")
    assert np.array_equal(answers(2, 3, 2, 2, 4), answers(2, 3, 2, 2, m=4))


def test_token_accuracy_of_the_uniform_policy():
    inst = prompt_answer("x", C=2, V=4, T=3, seed=3)
    ans = answers(2, 4, 3, 3)
    w0 = np.zeros(inst.n_params)
    assert token_accuracy(inst, ans, w0) == pytest.approx(0.25)
    assert token_argmax_accuracy(inst, ans, w0) == pytest.approx(np.mean(ans == 0))  # ties: the first token
    logits = np.zeros((3, 2, 4))
    logits[0, 0, ans[0, 0]] = 10.0        # context 0's first answer token made certain
    w = logits.reshape(-1)
    acc = token_accuracy(inst, ans, w)
    p = math.exp(10) / (math.exp(10) + 3)
    assert acc == pytest.approx((p + 5 * 0.25) / 6)
    assert token_argmax_accuracy(inst, ans, w) == pytest.approx((1 + np.sum(ans == 0) - (ans[0, 0] == 0)) / 6)
    ex = prompt_answer("y", C=2, V=4, T=3, reward="exact", seed=3)
    assert token_accuracy(ex, ans, np.zeros(ex.n_params)) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="ans has 3 contexts, which do not divide the instance's 2 states"):
        token_accuracy(inst, answers(3, 4, 3, 3), w0)


def test_warm_start_reaches_its_target_and_names_it():
    inst = prompt_answer("x", C=2, V=3, T=2, seed=4, warm=0.6, warm_metric="token")
    ans = answers(2, 3, 2, 4)
    acc = token_accuracy(inst, ans, inst.w_init)
    assert 0.6 <= acc < 0.8 and inst.description.endswith(", warm start at per-token accuracy = 0.6")
    j = prompt_answer("x", C=2, V=3, T=2, seed=4, warm=0.6)
    assert j.description.endswith(", warm start at J = 0.6") and j.w_init is not None
    # frac: J is the per-token accuracy, so both metrics stop at the same iterate
    assert np.array_equal(j.w_init, inst.w_init)
    w = supervised_init(inst, ans, 0.6, metric="J")
    assert np.array_equal(w, inst.w_init)


def test_warm_start_is_never_a_silent_cold_start():
    inst = prompt_answer("x", C=2, V=3, T=2, seed=4)
    ans = answers(2, 3, 2, 4)
    with pytest.raises(ValueError, match=r"the uniform policy \(w = 0\) already has token = 0.3333 >= target 0.3"):
        supervised_init(inst, ans, 0.3, metric="token")
    with pytest.raises(ValueError, match=r"J did not reach target 0.99 in 3 steps \(J = 0\.\d+\): unreachable warm start"):
        supervised_init(inst, ans, 0.99, max_iter=3)
    with pytest.raises(ValueError, match="more than tol = 0.001 past it"):
        supervised_init(inst, ans, 0.34, lr=50.0, tol=0.001)
    w = supervised_init(inst, ans, 0.34, lr=50.0, tol=1.0)
    assert token_accuracy(inst, ans, w) >= 0.34
    for bad in (0.0, 1.0, True, "0.5", math.nan):
        with pytest.raises(ValueError, match="target must be in"):
            supervised_init(inst, ans, bad)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="tol must be None or a finite number > 0"):
            supervised_init(inst, ans, 0.5, tol=bad)
    with pytest.raises(ValueError, match="metric must be one of J, token, got 'x'"):
        supervised_init(inst, ans, 0.5, metric="x")


def test_warm_start_of_the_log_linear_policy_descends_the_cross_entropy():
    inst = prompt_answer("x", C=2, V=3, T=2, features=3, seed=4)
    ans = answers(2, 3, 2, 4, 3)
    w1 = supervised_init(inst, ans, 0.34, lr=1.0)
    assert token_accuracy(inst, ans, w1) >= 0.34 and np.abs(w1).sum() > 0
    ex = prompt_answer("y", C=2, V=3, T=2, reward="exact", features=3, seed=4)
    w = supervised_init(ex, ans, 0.2, metric="J")
    assert ex.exact_J_grad(w)[0] >= 0.2


# --- the ladder -------------------------------------------------------------------------------------------------------

def test_rung_names_and_an_unknown_rung():
    assert [r.name for r in ladder.RUNGS] == ["0-tabular", "1-shared", "2-prompts", "3-vocab", "4-horizon", "5-warm",
                                              "6-sparse", "7-grpo-norm", "8-adam"]
    assert [r.name for r in ladder.CONTROLS] == ["c-no-shared", "c-one-prompt", "c-warm-only", "c-dense-warm6",
                                                 "c-sparse-warm5"]
    assert ladder.get_rung("5-warm").instance["warm"] == ladder.WARM == 0.5
    with pytest.raises(ValueError, match="rung must be one of 0-tabular, 1-shared, .*c-sparse-warm5, got '9-x'"):
        ladder.get_rung("9-x")
    assert ladder.get_rung("c-dense-warm6").warm_match == "6-sparse" and ladder.TOKEN_TOL == 0.005
    assert ladder.get_rung("8-adam").learner == dict(n_prompts=8, adv_norm=True, optimizer="adam")


def test_a_matched_warm_start_takes_the_other_rungs_per_token_accuracy():
    r0 = ladder.get_rung("0-tabular")
    assert r0.token_accuracy() == pytest.approx(1 / 3)
    assert r0.token_accuracy(argmax=True) == pytest.approx(np.mean(r0.answers() == 0))
    assert np.array_equal(r0.answers(), answers(1, 3, 5, 0, 6))
    r = ladder.Rung("x", "test", dict(C=1, V=3, T=5, reward="frac", features=None, seed=1), warm_match="0-tabular")
    kw = r.instance_kw()
    assert kw["warm"] == pytest.approx(1 / 3) and kw["warm_metric"] == "token" and kw["warm_tol"] == ladder.TOKEN_TOL
    assert "warm" not in r.instance and ladder.get_rung("1-shared").instance_kw() == ladder.get_rung("1-shared").instance
    assert r0.build() is r0.build() and r0.build().name == "pa-C1-V3-T5-frac"
    assert ladder.get_rung("1-shared").build().name == "pa-C8-V3-T5-frac-m6"


def test_built_names_carry_the_warm_start():
    b = ladder._build(tuple(sorted(dict(C=1, V=3, T=2, reward="frac", features=2, seed=0, warm=0.4).items())))
    assert b.name == "pa-C1-V3-T2-frac-m2-warm0.4"
    b = ladder._build(tuple(sorted(dict(C=1, V=3, T=2, reward="frac", features=None, seed=0, warm=0.4,
                                        warm_metric="token").items())))
    assert b.name == "pa-C1-V3-T2-frac-tok0.400000"


# --- issue 55, second round: the rules the mutants showed untested --------------------------------------------------

def _gd_iterates(inst, ans, lr, n):
    """Full-batch gradient descent on the mean cross-entropy of the answers from w = 0 (the docstring's rule),
    written out independently: the first ``n + 1`` iterates."""
    idx, y = rungs._answer_rows(inst, ans)
    phi = inst.features[idx.ravel()] if inst.features is not None else None
    w, out = np.zeros(inst.n_params), []
    for _ in range(n + 1):
        out.append(w.copy())
        logits = (phi @ w if phi is not None else w[idx.ravel()]).reshape(idx.shape)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        onehot = np.zeros_like(p)
        onehot[np.arange(len(y)), y] = 1.0
        g = (p - onehot) / len(y)
        if phi is not None:
            grad = phi.T @ g.ravel()
        else:
            grad = np.zeros(inst.n_params)
            np.add.at(grad, idx.ravel(), g.ravel())
        w = w - lr * grad
    return out


@pytest.mark.parametrize("features", [None, 3])
def test_warm_start_is_the_first_gradient_descent_iterate_at_or_past_the_target(features):
    inst = prompt_answer("x", C=2, V=3, T=2, features=features, seed=4)
    ans = answers(2, 3, 2, 4, features or 6)
    ws = _gd_iterates(inst, ans, 4.0, 3)
    accs = [token_accuracy(inst, ans, w) for w in ws]
    assert accs == sorted(accs) and accs[0] < accs[1] < accs[2]
    for k in (1, 2):                              # a target between iterates k − 1 and k stops at iterate k
        w = supervised_init(inst, ans, (accs[k - 1] + accs[k]) / 2, metric="token")
        assert np.allclose(w, ws[k], rtol=1e-12, atol=1e-14)


def test_the_last_allowed_iterate_is_checked_too():
    """max_iter steps reach the target when the max_iter-th iterate does (it was never checked: the error named a
    value past the target as "did not reach")."""
    inst = prompt_answer("x", C=2, V=3, T=2, seed=4)
    ans = answers(2, 3, 2, 4)
    ws = _gd_iterates(inst, ans, 4.0, 3)
    w = supervised_init(inst, ans, token_accuracy(inst, ans, ws[3]), max_iter=3, metric="token")
    assert np.allclose(w, ws[3], rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match=r"token did not reach target 0.9 in 3 steps \(token = 0.7963\)"):
        supervised_init(inst, ans, 0.9, max_iter=3, metric="token")


def test_a_target_equal_to_the_uniform_policys_is_a_cold_start():
    inst = prompt_answer("x", C=2, V=2, T=2, seed=4)            # V = 2: the uniform policy's accuracy is 0.5 exactly
    ans = answers(2, 2, 2, 4)
    with pytest.raises(ValueError, match="already has token = 0.5000 >= target 0.5"):
        supervised_init(inst, ans, 0.5, metric="token")


def test_landing_exactly_tol_past_the_target_is_accepted():
    inst = prompt_answer("x", C=2, V=3, T=2, seed=4)
    ans = answers(2, 3, 2, 4)
    w = supervised_init(inst, ans, 0.34, lr=50.0, metric="token")
    m = token_accuracy(inst, ans, w)
    assert np.array_equal(supervised_init(inst, ans, 0.34, lr=50.0, tol=m - 0.34, metric="token"), w)


def test_token_metric_on_the_sparse_reward_stops_on_per_token_accuracy_not_on_J():
    inst = prompt_answer("x", C=2, V=3, T=3, reward="exact", seed=4)
    ans = answers(2, 3, 3, 4)
    w = supervised_init(inst, ans, 0.6, metric="token")
    assert token_accuracy(inst, ans, w) >= 0.6 and inst.exact_J_grad(w)[0] < 0.6
    warm = prompt_answer("x", C=2, V=3, T=3, reward="exact", seed=4, warm=0.6, warm_metric="token")
    assert np.array_equal(warm.w_init, w)


def test_a_warm_instance_keeps_the_cold_ones_name_features_and_starts_and_passes_its_tol():
    for kw in (dict(), dict(features=3), dict(reward="exact"), dict(reward="exact", features=3)):
        cold = prompt_answer("x", C=2, V=3, T=2, seed=4, **kw)
        warm = prompt_answer("x", C=2, V=3, T=2, seed=4, warm=0.6, warm_metric="token", **kw)
        assert cold.name == warm.name == "x" and list(warm.starts) == list(cold.starts)
        assert (warm.features is None) == (cold.features is None)
        if cold.features is not None:
            assert np.array_equal(warm.features, cold.features)
    with pytest.raises(ValueError, match="more than tol = 1e-09 past it"):
        prompt_answer("x", C=2, V=3, T=2, seed=4, warm=0.6, warm_metric="token", warm_tol=1e-9)


def test_defaults_seed_0_and_the_hidden_states_stream():
    a, b = prompt_answer("x", C=2, V=3, T=2), prompt_answer("x", C=2, V=3, T=2, seed=0)
    assert np.array_equal(a.step_reward, b.step_reward)
    h = np.random.default_rng([5, 34]).standard_normal((3, 2, 4))
    assert np.array_equal(hidden(3, 2, 4, seed=5), h / np.linalg.norm(h, axis=-1, keepdims=True))


def test_token_accuracy_reads_the_alive_state_of_a_sparse_tabular_instance_and_large_logits():
    inst = prompt_answer("x", C=2, V=3, T=2, reward="exact", seed=4)
    ans = answers(2, 3, 2, 4)
    logits = np.zeros((2, 4, 3))                         # (t, state, token); states 2c (dead), 2c + 1 (alive)
    for c in range(2):
        for t in range(2):
            logits[t, 2 * c + 1, ans[c, t]] = 1000.0      # certain on the answer path, far beyond exp's range
    w = logits.reshape(-1)
    assert token_accuracy(inst, ans, w) == 1.0 and token_argmax_accuracy(inst, ans, w) == 1.0
    w0 = logits.copy()
    w0[0, 1, ans[0, 0]] = 0.0                            # one answer token back to uniform, the rest certain
    assert token_accuracy(inst, ans, w0.reshape(-1)) == pytest.approx((1 / 3 + 3) / 4)
    assert token_argmax_accuracy(inst, ans, w0.reshape(-1)) == pytest.approx((3 + (ans[0, 0] == 0)) / 4)


def test_a_rungs_answers_use_its_hidden_size_and_its_token_accuracy_its_warm_start():
    r = ladder.Rung("x", "test", dict(C=2, V=3, T=2, reward="frac", features=3, seed=0))
    assert np.array_equal(r.answers(), answers(2, 3, 2, 0, 3))
    w = ladder.Rung("y", "test", dict(C=2, V=3, T=2, reward="frac", features=None, seed=4, warm=0.6))
    inst = w.build()
    assert w.token_accuracy() == token_accuracy(inst, answers(2, 3, 2, 4), inst.w_init) >= 0.6


def test_an_unreachable_target_under_huge_steps_reports_a_finite_metric():
    """Three contexts with the same 1-D hidden state and answers 0, 0, 1: mean accuracy stays below 2/3 whatever w; the
    huge steps make logits far beyond exp's range, where only a max-shifted softmax stays finite."""
    seed = next(s for s in range(100) if abs(hidden(3, 1, 1, s).sum()) == 3.0)
    inst = prompt_answer("x", C=3, V=2, T=1, features=1, seed=seed)
    with pytest.raises(ValueError, match=r"token did not reach target 0.7 in 5 steps \(token = 0\.\d{4}\)"):
        supervised_init(inst, np.array([[0], [0], [1]]), 0.7, lr=1e4, max_iter=5, metric="token")


def test_the_rungs_sizes_are_the_documented_ones():
    """(issue 55, a survivor of the independent sample) V = 16 from rung 3 on, T = 12 from rung 4, C = 8 contexts."""
    inst = {r.name: r.instance for r in ladder.RUNGS}
    assert (inst["0-tabular"]["V"], inst["0-tabular"]["T"], inst["0-tabular"]["C"]) == (3, 5, 1)
    assert (inst["1-shared"]["C"], inst["1-shared"]["features"]) == (8, 6)
    assert inst["3-vocab"]["V"] == 16 and inst["4-horizon"]["T"] == 12 and inst["6-sparse"]["reward"] == "exact"
    assert all(inst[n]["V"] == 16 for n in ("3-vocab", "4-horizon", "5-warm", "6-sparse", "7-grpo-norm", "8-adam"))


def _changed(a: dict, b: dict) -> dict:
    """The keys whose value differs from ``a`` to ``b`` (a missing key reads as absent), with ``b``'s value."""
    return {k: b.get(k, "absent") for k in a.keys() | b.keys() if a.get(k, "absent") != b.get(k, "absent")}


@pytest.mark.parametrize("prev, name, instance, learner", [
    ("0-tabular", "1-shared", dict(C=8, features=6), {}),
    ("1-shared", "2-prompts", {}, dict(n_prompts=8)),
    ("2-prompts", "3-vocab", dict(V=16), {}),
    ("3-vocab", "4-horizon", dict(T=12), {}),
    ("4-horizon", "5-warm", dict(warm=0.5), {}),
    ("5-warm", "6-sparse", dict(reward="exact"), {}),
    ("6-sparse", "7-grpo-norm", {}, dict(adv_norm=True)),
    ("7-grpo-norm", "8-adam", {}, dict(optimizer="adam")),
    # the controls remove one ingredient from the full stack (rung 7)
    ("7-grpo-norm", "c-no-shared", dict(features=None), {}),
    ("7-grpo-norm", "c-one-prompt", {}, dict(n_prompts="absent")),
    ("2-prompts", "c-warm-only", dict(warm=0.5), {}),
])
def test_each_rung_adds_exactly_its_one_ingredient(prev, name, instance, learner):
    """(issue 55, cosmic-ray survivors: a rung's ``adv_norm=True`` flipped went unseen) each rung differs from the one
    it builds on by exactly the ingredient the module docstring names: in the instance or in the learner, not both."""
    a, b = ladder.get_rung(prev), ladder.get_rung(name)
    assert _changed(a.instance, b.instance) == instance
    assert _changed(a.learner, b.learner) == learner


def test_a_rung_is_immutable():
    with pytest.raises(AttributeError):
        ladder.get_rung("0-tabular").name = "x"


def test_the_default_budget_is_20000_steps():
    """(issue 55, cosmic-ray: ``max_iter = 20000 ± 1``) the documented default budget: an unreachable target names it."""
    inst = prompt_answer("x", C=1, V=2, T=1)
    with pytest.raises(ValueError, match=r"did not reach target 0.99 in 20000 steps"):
        supervised_init(inst, answers(1, 2, 1, seed=0), 0.99, lr=1e-12, metric="token")
