"""The toy-to-LM ladder (issue 33): prompt–answer instances, several contexts in the learner, the warm start,
and the figure's section computed from data."""
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

from simulate import instances as tab
from simulate.bridge import rungs
from simulate.protocol.instances import TrainingInstance
from simulate.training import TrainConfig, run_many, run_training
from simulate.training.contexts import J_grad_starts_nb, chi2_starts_nb

SMALL = [dict(C=3, V=3, T=3, reward=r, features=f, seed=s) for r in ("frac", "exact") for f in (None, 2) for s in (0, 1)]


def _brute(inst, w):
    """``(1/C) Σ_c Σ_τ π_w(τ|c) R(τ)`` and its gradient by enumerating every path of every context (itertools,
    independent of the DP), the score of a path being ``Σ_t Φ[(t,s_t,a_t)] − E_π Φ[(t,s_t,·)]``."""
    theta = inst.logits(w)
    lp = theta - logsumexp(theta, axis=-1, keepdims=True)
    phi = inst.features if inst.features is not None else np.eye(inst.n_params)
    phi = phi.reshape(inst.T, inst.S, inst.V, -1)
    step = np.zeros(inst.theta_shape) if inst.step_reward is None else inst.step_reward
    J, g = 0.0, np.zeros(phi.shape[-1])
    for s0 in inst.starts:
        for acts in itertools.product(range(inst.V), repeat=inst.T):
            s, logp, R, score = s0, 0.0, 0.0, np.zeros_like(g)
            for t, a in enumerate(acts):
                logp += lp[t, s, a]
                R += step[t, s, a]
                score += phi[t, s, a] - np.exp(lp[t, s]) @ phi[t, s]
                s = inst.next_state[t, s, a]
            R += inst.reward[s]
            J += math.exp(logp) * R
            g += math.exp(logp) * R * score
    C = len(inst.starts)
    return J / C, g / C


@pytest.mark.parametrize("kw", SMALL, ids=lambda k: "-".join(map(str, k.values())))
def test_exact_J_and_gradient_against_enumeration(kw):
    inst = rungs.prompt_answer("t", **kw)
    w = 0.7 * np.random.default_rng(3).standard_normal(inst.n_params)
    J, g = inst.exact_J_grad(w)
    Jb, gb = _brute(inst, w)
    tol = 64 * np.finfo(float).eps
    assert J == pytest.approx(Jb, rel=tol, abs=tol)
    np.testing.assert_allclose(g, gb, rtol=1e-12, atol=1e-13)


def test_one_pass_over_contexts_equals_the_average_of_single_context_dps():
    inst = rungs.prompt_answer("t", C=4, V=5, T=4, reward="exact", features=3, seed=2)
    rng = np.random.default_rng(0)
    th, thq = (inst.logits(rng.standard_normal(inst.n_params)) for _ in range(2))
    lp, lq = (tab.log_softmax_nb(x, np.empty_like(x)) for x in (th, thq))
    grad, one = np.empty_like(th), np.empty_like(th)
    J = J_grad_starts_nb(lp, inst.next_state, np.zeros(th.shape), inst.reward, inst.starts, grad, one)
    Js, gs = [], []
    for s0 in inst.starts:
        Js.append(tab.exact_J_grad_steps_nb(lp, inst.next_state, np.zeros(th.shape), inst.reward, int(s0), one))
        gs.append(one.copy())
    assert J == pytest.approx(np.mean(Js), rel=1e-13)
    np.testing.assert_allclose(grad, np.mean(gs, axis=0), rtol=1e-12, atol=1e-15)
    chi = [tab.chi2_nb(lp, lq, inst.next_state, int(s0)) for s0 in inst.starts]
    assert chi2_starts_nb(lp, lq, inst.next_state, inst.starts) == pytest.approx(np.mean(chi), rel=1e-12)


def test_rung_instance_J_by_monte_carlo():
    """The full-stack rung's exact J at its warm start against a Monte Carlo estimate (numpy sampling, 4 SE)."""
    from simulate.bridge.ladder import get_rung

    inst = get_rung("7-grpo-norm").build()
    J = inst.exact_J_grad(inst.w_init)[0]
    theta = inst.logits(inst.w_init)
    p = np.exp(theta - logsumexp(theta, axis=-1, keepdims=True))
    rng = np.random.default_rng(11)
    n = 4000
    R = np.empty(n)
    for i in range(n):
        s = inst.starts[i % len(inst.starts)]
        for t in range(inst.T):
            s = inst.next_state[t, s, rng.choice(inst.V, p=p[t, s])]
        R[i] = inst.reward[s]
    se = R.std(ddof=1) / math.sqrt(n)
    assert abs(R.mean() - J) < 4 * se
    assert J == pytest.approx(0.5, abs=0.05)  # the warm start's target, first iterate past it


def test_warm_start_is_where_the_learner_starts_and_is_validated():
    inst = rungs.prompt_answer("t", C=3, V=4, T=3, reward="exact", features=2, seed=0, warm=0.4)
    J0 = inst.exact_J_grad(inst.w_init)[0]
    assert J0 >= 0.4 and inst.exact_J_grad(np.zeros(inst.n_params))[0] < 0.4
    r = run_training(TrainConfig(instance=inst, estimator="gmc", steps=3, G=4))
    assert r.J[0] == J0
    cold = TrainingInstance("c", "", inst.next_state, inst.reward, inst.s0, features=inst.features, starts=inst.starts)
    assert run_training(TrainConfig(instance=cold, estimator="gmc", steps=3, G=4)).J[0] < 0.4
    with pytest.raises(ValueError, match="w_init"):
        TrainingInstance("c", "", inst.next_state, inst.reward, inst.s0, features=inst.features, w_init=np.zeros(3))
    with pytest.raises(ValueError, match="w_init"):
        TrainingInstance("c", "", inst.next_state, inst.reward, inst.s0, features=inst.features,
                         w_init=np.full(inst.n_params, np.nan))
    with pytest.raises(ValueError, match="starts"):
        TrainingInstance("c", "", inst.next_state, inst.reward, inst.s0, starts=np.array([inst.s0 + 1]))
    with pytest.raises(ValueError, match="target"):
        rungs.supervised_init(inst, rungs.answers(3, 4, 3, 0, 2), target=1.0)


def test_one_start_listed_is_the_one_prompt_learner_bit_for_bit():
    inst = rungs.prompt_answer("t", C=1, V=3, T=4, reward="frac", features=None, seed=0)
    plain = TrainingInstance("p", "", inst.next_state, inst.reward, inst.s0, step_reward=inst.step_reward)
    cfg = TrainConfig(estimator="is", G=4, n_prompts=3, eta=2.0, steps=20, seed=4)
    a, b = run_many([cfg.replace(instance=inst)]), run_many([cfg.replace(instance=plain)])
    for name in ("J", "chi2", "ghat_norm2", "theta", "logratio_max"):
        np.testing.assert_array_equal(getattr(a[0], name), getattr(b[0], name))


def test_groups_sample_their_own_context():
    """With C contexts and n_prompts = C, every context gets one group per step: J's gradient step on the
    contexts' shared-free tabular policy moves every context's logits after one step."""
    inst = rungs.prompt_answer("t", C=3, V=3, T=2, reward="frac", features=None, seed=0)
    r = run_training(TrainConfig(instance=inst, estimator="onpolicy", G=8, n_prompts=3, eta=1.0, steps=1, seed=1))
    moved = np.abs(r.theta).sum(axis=(0, 2)) > 0  # per state (= context)
    assert moved.all()
    r1 = run_training(TrainConfig(instance=inst, estimator="onpolicy", G=8, n_prompts=1, eta=1.0, steps=1, seed=1))
    assert (np.abs(r1.theta).sum(axis=(0, 2)) > 0).sum() == 1  # one group: one context


def _table():
    from simulate.bridge.summary import ladder_table

    rng = np.random.default_rng(0)
    rows = []
    for rung, bad in (("0-tabular", False), ("1-shared", True), ("c-no-shared", False)):
        for e in ("onpolicy", "is", "gmc", "grpo"):
            for d in (0, 8, 32):
                for seed in range(12):
                    fail = bad and e == "onpolicy" and d > 0
                    rows.append(dict(rung=rung, arm="η₀", estimator=e, d=d, eta=1.0, seed=seed, J0=0.5,
                                     nauc=(-0.3 if fail else 0.4) + 0.01 * rng.standard_normal(), failed=fail,
                                     final_nJ=-0.5 if fail else 0.6, chi2_learn_med=0.1, ess_early=7.0,
                                     gneg_early=-0.05 if (bad and e == "onpolicy") else 0.02, gdot_early=0.01,
                                     down_frac=0.1))
    ev = pd.DataFrame(rows)
    return ladder_table(ev, ["0-tabular", "1-shared", "c-no-shared"]).assign(arm="η₀")


def test_section_is_computed_from_the_data():
    from figures.fig_bridge import answer_rows, section
    from simulate.bridge.summary import first_failure, lm_faithful

    tab_ = _table()
    order = ["0-tabular", "1-shared", "c-no-shared"]
    assert first_failure(tab_, order[:2]) == "1-shared" and lm_faithful(tab_) == ["1-shared"]
    sec, found = section(tab_, order)
    text = " ".join(sec["paragraphs"])
    stale = tab_[(tab_.rung == "1-shared") & (tab_.d > 0)]
    row = stale.loc[stale["d_onpolicy"].idxmax()]  # the section quotes the delay where gmc leads most
    assert sec["title"] == "Toy vs LM" and "rung 1-shared" in text and f"{row['d_onpolicy']:+.3f}" in text
    assert "12/12" in text and "-0.0500" in text and "c-no-shared: onpolicy +0.0200" in text
    assert found["η₀"] == ("1-shared", ["1-shared"])
    ans = answer_rows(tab_, ["1-shared"], 12)
    assert {a["group"] for a in ans} == {"toy-ladder"} and len(ans) == 6
    assert all(a["lo"] <= a["delta"] <= a["hi"] for a in ans)
    # the same table with the failing rung healed: no rung flips, and the section says so
    healed = tab_.copy()
    healed.loc[healed.rung == "1-shared", ["d_onpolicy", "lo_onpolicy", "fail_onpolicy"]] = [0.0, -0.1, 0]
    sec2, found2 = section(healed, order)
    assert found2["η₀"] == (None, []) and "no rung flips the sign" in " ".join(sec2["paragraphs"])


@pytest.mark.slow
def test_fig_bridge_quick(tmp_path):
    import json

    from figures import fig_bridge

    res = fig_bridge.main(tmp_path, quick=True, sweep_opts=dict(backend="serial", root=str(tmp_path / "cells"),
                                                                progress=False))
    meta = json.loads((tmp_path / "fig_bridge.json").read_text())
    assert meta["sections"][0]["title"] == "Toy vs LM" and (tmp_path / "fig_bridge.png").exists()
    assert all(a["group"] == "toy-ladder" for a in meta["answer"]) and res.name == "fig_bridge"


def test_lm_faithful_instance_is_registered():
    from simulate.protocol.instances import get_instance

    inst = get_instance("lm-faithful-exact")
    assert (len(inst.starts), inst.V, inst.T, inst.n_params) == (8, 16, 12, 96)
    assert 0.5 <= inst.exact_J_grad(inst.w_init)[0] < 0.55  # the supervised warm start's target, first iterate past it
