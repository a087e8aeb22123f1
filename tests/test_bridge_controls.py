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
    # a tabular exact-match policy has its own logits in the dead state: the alive (answer-path) state is read
    tb = rungs.prompt_answer("t", C=3, V=4, T=3, reward="exact", features=None, seed=1)
    wt = 1.5 * np.random.default_rng(6).standard_normal(tb.n_params)
    th = tb.logits(wt)  # (T, S, V); state 2c: dead, 2c + 1: alive
    p = np.exp(th - th.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    alive = np.mean([p[t, 2 * c + 1, ans[c, t]] for c in range(3) for t in range(3)])
    dead = np.mean([p[t, 2 * c, ans[c, t]] for c in range(3) for t in range(3)])
    assert abs(alive - dead) > 1e-3 and rungs.token_accuracy(tb, ans, wt) == pytest.approx(alive, rel=1e-12)


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


def _two_arm_table():
    """A synthetic eval table at two arms: 6-sparse, 7-grpo-norm and c-dense-warm6 flip (onpolicy fails at d ≥ 8);
    5-warm, c-no-shared and c-sparse-warm5 do not; at η₀ gmc itself fails 11/12 on the flipping rungs."""
    import pandas as pd

    from simulate.bridge.summary import ladder_table

    rng = np.random.default_rng(0)
    order = ["5-warm", "6-sparse", "7-grpo-norm", "c-no-shared", "c-dense-warm6", "c-sparse-warm5"]
    bad = {"6-sparse", "7-grpo-norm", "c-dense-warm6"}
    tabs = []
    for arm, gmc_fails in (("η₀", 11), ("η₀/4", 0)):
        rows = []
        for rung in order:
            for e in ("onpolicy", "is", "gmc", "grpo"):
                for d in (0, 8, 32):
                    for seed in range(12):
                        fail = rung in bad and d > 0 and (e == "onpolicy" or (e == "gmc" and seed < gmc_fails))
                        base = {"η₀": 0.3, "η₀/4": 0.4}[arm] + (0.05 if e == "gmc" and rung in bad else 0.0)
                        rows.append(dict(rung=rung, arm=arm, estimator=e, d=d, eta=1.0, seed=seed, J0=0.5,
                                         nauc=(-0.3 if fail and e == "onpolicy" else base) + 0.01 * rng.standard_normal(),
                                         failed=fail, final_nJ=-0.5 if fail else 0.6, chi2_learn_med=0.1, ess_early=7.0,
                                         gneg_early=-0.05 if (rung in bad and e == "onpolicy") else 0.02,
                                         gdot_early=0.01, down_frac=0.1))
        tabs.append(ladder_table(pd.DataFrame(rows), order).assign(arm=arm))
    return pd.concat(tabs, ignore_index=True), ["4-horizon"] * 0 + order


def test_section_gives_both_arms_with_failure_counts_and_the_controls_verdict():
    from figures.fig_bridge import REMOVES, answer_rows, flips, section

    tab, order = _two_arm_table()
    acc = {"5-warm": (0.502, 0.81), "6-sparse": (0.942, 1.0), "c-dense-warm6": (0.942, 1.0),
           "c-sparse-warm5": (0.502, 0.81)}
    sec, found = section(tab, order, token_acc=acc)
    text = " ".join(sec["paragraphs"])
    assert found["η₀/4"][0] == "6-sparse" and found["η₀"][0] == "6-sparse"
    # the headline arm and why: gmc's own failures at η₀, from the data
    assert "η = η₀/4 is the headline arm" in text and "gmc itself fails 11/12" in text
    # every quoted number at both arms, η₀/4 first, with failure counts
    assert "η = η₀/4: +" in text and "; η = η₀: +" in text
    assert text.index("η = η₀/4: +") < text.index("; η = η₀: +")
    assert "fails onpolicy 12/12, gmc 0/12; η = η₀:" in text and "fails onpolicy 12/12, gmc 11/12" in text
    # necessity as measured: only sharing's removal kills the flip; the dense control still flips
    assert flips(tab, "c-dense-warm6", "η₀/4") and not flips(tab, "c-no-shared", "η₀")
    verdicts = text.split("As measured — ")[1]
    assert ("necessary: shared parameters (η = η₀/4, η₀); the strong warm start under the sparse reward (η = η₀/4, η₀); "
            "the strong warm start under the dense reward (η = η₀/4, η₀). not necessary: the sparse reward "
            "(η = η₀/4, η₀). inconclusive: none.") in verdicts
    assert "learns +0.600 / +0.600 vs +0.600 / +0.600" in text
    assert "c-dense-warm6 (6-sparse without the sparse reward, accuracy 0.942 vs 0.942): η₀/4 +" in text
    assert "c-dense-warm6: onpolicy -0.0500 / -0.0500" in text  # the mechanism diagnostic on both controls
    assert "c-sparse-warm5: onpolicy +0.0200 / +0.0200" in text
    assert set(REMOVES) <= set(order) | {"c-one-prompt"}
    # the table: both arms side by side in one row per (rung, d)
    t = sec["tables"][0]
    row = next(r for r in t["rows"] if r[0] == "6-sparse" and r[1] == 32)
    assert row[3] == "12/0" and row[5] == "12/11" and "η = η₀/4" in t["columns"][2] and "η = η₀" in t["columns"][4]
    # the answer rows: η₀/4 first, each carrying the η₀ number with its failure counts
    ans = answer_rows(tab, ["6-sparse"], 12)
    assert len(ans) == 12 and ans[0]["arm"] == "η = η₀/4"
    head = [a for a in ans if a["arm"] == "η = η₀/4"]
    assert all(len(a["other_arms"]) == 1 and a["other_arms"][0]["arm"] == "η = η₀" for a in head)
    on32 = next(a for a in head if a["rival"] == "onpolicy" and a["d"] == 32)
    assert on32["other_arms"][0]["fails"] == {"onpolicy": 12, "gmc": 11}
    assert len({a["interval"] for a in head}) == 1  # one text per rung: listed once in the report's note
    assert "at η = η₀ (gmc − rival) d = 8: onpolicy +" in on32["interval"]
    assert "failures onpolicy/is/gmc/grpo of 12, η = η₀/4: d = 8 12/0/0/0, d = 32 12/0/0/0; η = η₀: d = 8 " \
           "12/0/11/0, d = 32 12/0/11/0" in on32["interval"]
    assert all(not a["other_arms"] for a in ans if a["arm"] == "η = η₀")


def test_necessity_words_follow_the_rule():
    """necessary / not necessary / inconclusive / no test from flips and learning (fig_bridge.necessity)."""
    from figures.fig_bridge import LEARN_RATIO, necessity

    tab, _ = _two_arm_table()
    assert necessity(tab, "c-no-shared", "7-grpo-norm", "η₀") == "necessary"
    assert necessity(tab, "c-dense-warm6", "6-sparse", "η₀") == "not necessary"
    assert necessity(tab, "5-warm", "c-no-shared", "η₀") == "no test"
    slow = tab.copy()  # the rung without the ingredient learns too little at d = 0 to show a flip
    slow.loc[(slow.rung == "c-no-shared") & (slow.d == 0), "final_gmc"] = 0.99 * LEARN_RATIO * 0.6
    assert necessity(slow, "c-no-shared", "7-grpo-norm", "η₀") == "inconclusive"
    slow.loc[(slow.rung == "c-no-shared") & (slow.d == 0), "final_gmc"] = 1.01 * LEARN_RATIO * 0.6
    assert necessity(slow, "c-no-shared", "7-grpo-norm", "η₀") == "necessary"
