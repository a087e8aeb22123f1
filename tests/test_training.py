"""The asynchronous learner (simulate/training.py).

Statistical tests use fixed seeds and the tolerance ``z·σ̂/√n`` with ``z = 4``.
"""
import numpy as np
import pytest

from simulate import delays as dl
from simulate import instances
from simulate.training import (
    ALL_ESTIMATORS,
    InstanceSpec,
    TrainConfig,
    chi2_nb,
    count_frac_mdp,
    exact_J_grad,
    log_softmax_nb,
    optimal_J,
    run_many,
    run_training,
)

Z = 4.0
BANDIT = InstanceSpec(kind="bandit", n_arms=5, rewards=(0.1, 0.3, 0.5, 0.7, 0.9))
TOKEN = InstanceSpec(kind="token", V=3, T=4, state="count", reward="count_ge", k=2)
TOKEN_PREV = InstanceSpec(kind="token", V=3, T=3, state="prev", reward="sum_mod", m=3)
IS_TYPE = ("is", "tis", "tic", "gmc", "snis")


# --------------------------------------------------------------------------- exact DP vs path enumeration
def _enumerated(mdp, theta, theta_mu):
    """``J``, ``∇J`` and ``χ²(π_θ‖μ)`` by summing over all ``V^T`` paths (no DP).

    ``∂ log π(τ)/∂θ[t, s, a] = 1[s_t = s](1[a_t = a] − π_t(a|s))`` and ``χ² = Σ_τ π(τ)²/μ(τ) − 1``.
    """
    actions, states, final = instances.enumerate_paths(mdp)
    lp = theta - np.log(np.exp(theta).sum(axis=-1, keepdims=True))
    lm = theta_mu - np.log(np.exp(theta_mu).sum(axis=-1, keepdims=True))
    t = np.arange(mdp.T)
    logpi = lp[t[None, :], states, actions].sum(axis=1)
    logmu = lm[t[None, :], states, actions].sum(axis=1)
    w = np.exp(logpi) * mdp.reward[final]
    grad = np.zeros(mdp.theta_shape)
    pi = np.exp(lp)
    for n in range(actions.shape[0]):
        for k in range(mdp.T):
            grad[k, states[n, k]] -= w[n] * pi[k, states[n, k]]
            grad[k, states[n, k], actions[n, k]] += w[n]
    return w.sum(), grad, np.exp(2 * logpi - logmu).sum() - 1.0


@pytest.mark.parametrize("spec", [BANDIT, TOKEN, TOKEN_PREV], ids=lambda s: s.label)
def test_exact_diagnostics_agree_with_path_enumeration(spec):
    """The learner's DP (``exact_J_grad``, ``chi2_nb``) against a sum over every path, random θ and μ."""
    mdp = spec.build()
    for seed in range(3):
        theta = instances.random_theta(mdp, scale=1.0, seed=seed)
        theta_mu = instances.random_theta(mdp, scale=1.0, seed=seed + 10)
        J_ref, grad_ref, chi2_ref = _enumerated(mdp, theta, theta_mu)
        J, grad = exact_J_grad(mdp, theta)
        assert J == pytest.approx(J_ref, rel=1e-12, abs=1e-14)
        np.testing.assert_allclose(grad, grad_ref, rtol=1e-10, atol=1e-13)
        assert np.abs(grad).max() > 1e-3  # a random θ has a non-trivial gradient: the check compares something
        lp = log_softmax_nb(theta, np.empty_like(theta))
        lq = log_softmax_nb(theta_mu, np.empty_like(theta))
        chi2 = chi2_nb(lp, lq, mdp.next_state, mdp.s0)
        assert chi2 == pytest.approx(chi2_ref, rel=1e-9, abs=1e-12) and chi2_ref > 1e-3


def test_exact_gradient_ascent_on_bandit_converges_to_optimum():
    mdp = BANDIT.build()
    theta = np.zeros(mdp.theta_shape)
    Js = []
    for _ in range(3000):
        J, grad = exact_J_grad(mdp, theta)
        Js.append(J)
        theta = theta + 2.0 * grad
    assert np.all(np.diff(Js) >= -1e-12)  # step 2 < 2/L for the softmax bandit: monotone ascent
    assert Js[-1] > 0.9 - 2e-3
    assert np.argmax(theta[0, mdp.s0]) == 4


# --------------------------------------------------------------------------- d = 0: every IS-type map is onpolicy
@pytest.mark.parametrize("spec", [BANDIT, TOKEN], ids=lambda s: s.kind)
def test_zero_delay_is_type_estimators_equal_onpolicy_exactly(spec):
    base = TrainConfig(instance=spec, estimator="onpolicy", G=6, n_prompts=2, eta=0.7, steps=40,
                       delay=dl.fixed(0), seed=4)
    ref = run_training(base)
    for res in run_many([base.replace(estimator=e) for e in IS_TYPE]):
        np.testing.assert_array_equal(res.J, ref.J, err_msg=res.config.estimator)
        np.testing.assert_array_equal(res.theta, ref.theta, err_msg=res.config.estimator)
        assert np.all(np.abs(res.chi2) < 1e-14)  # Σ_s f_T(s) − 1 with f summing to 1 up to round-off


def test_zero_delay_token_level_equal_each_other_and_scaled_onpolicy():
    """At d = 0 every token ratio is 1, so c_{i,t} = 1/T for all four: ĝ = ĝ_onpolicy / T."""
    T = TOKEN.T
    base = TrainConfig(instance=TOKEN, estimator="grpo", G=6, eta=0.8, steps=30, delay=dl.fixed(0), seed=2)
    res = run_many([base.replace(estimator=e) for e in ("grpo", "gspo", "cispo", "m2po")])
    for r in res[1:]:
        np.testing.assert_array_equal(r.theta, res[0].theta, err_msg=r.config.estimator)
    onp = run_training(base.replace(estimator="onpolicy", eta=0.8 / T))
    np.testing.assert_allclose(res[0].J, onp.J, rtol=1e-9)
    assert np.all(res[0].clip_frac == 0.0)


# --------------------------------------------------------------------------- statistical tests
def test_is_first_step_has_expectation_one_minus_inv_G_grad():
    """C8 inside the learner: at θ_0, d_0 = 0 and ``E[ĝ_is] = (1 − 1/G)∇J(θ_0)``; n = 3000 seeds."""
    G, n, eta = 4, 3000, 1.0
    mdp = BANDIT.build()
    cfgs = [TrainConfig(instance=BANDIT, estimator="is", G=G, eta=eta, steps=1, seed=s) for s in range(n)]
    steps = np.stack([r.theta[0, mdp.s0] / eta for r in run_many(cfgs)])  # θ_0 = 0, so θ_1 = ηĝ_0
    _, grad = exact_J_grad(mdp, np.zeros(mdp.theta_shape))
    target = (1 - 1 / G) * grad[0, mdp.s0]
    se = steps.std(axis=0, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(steps.mean(axis=0) - target) <= Z * se), (steps.mean(axis=0), target, se)
    # the test has power: the unscaled ∇J is rejected
    assert np.any(np.abs(steps.mean(axis=0) - grad[0, mdp.s0]) > Z * se)


def test_sga_with_is_at_zero_delay_converges_in_expectation():
    """Mean optimality gap ``J* − J(θ_k)`` over 32 seeds shrinks from k = 75 to 150 to 300 and ends < 0.01."""
    n = 32
    cfgs = [TrainConfig(instance=BANDIT, estimator="is", G=8, eta=1.0, steps=300, delay=dl.fixed(0), seed=s)
            for s in range(n)]
    gap = np.array([[0.9 - r.J[k] for k in (75, 150, 300)] for r in run_many(cfgs)])
    mean, se = gap.mean(axis=0), gap.std(axis=0, ddof=1) / np.sqrt(n)
    assert mean[0] - mean[1] > Z * np.hypot(se[0], se[1])
    assert mean[1] - mean[2] > Z * np.hypot(se[1], se[2])
    assert mean[2] + Z * se[2] < 0.01
    assert np.all(gap >= 0)


# --------------------------------------------------------------------------- determinism and divergence
def test_same_seed_same_trajectory_alone_or_in_a_batch():
    cfg = TrainConfig(instance=TOKEN, estimator="gmc", G=8, eta=1.0, steps=60, delay=dl.queue(4, "lognormal", 1.0),
                      seed=9)
    a = run_training(cfg)
    batch = run_many([cfg.replace(seed=s) for s in range(5)] + [cfg] + [cfg.replace(estimator="tic")], chunk=3)
    b = batch[5]
    for name in ("J", "grad_norm2", "chi2", "ess", "ghat_norm2", "delays", "theta"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.delays, cfg.delays())
    assert not np.array_equal(batch[0].J, a.J)


def test_adam_runs_and_is_deterministic():
    cfg = TrainConfig(instance=TOKEN, estimator="tis", optimizer="adam", eta=0.05, steps=50, delay=dl.uniform(3))
    a, b = run_training(cfg), run_training(cfg)
    np.testing.assert_array_equal(a.J, b.J)
    assert not a.diverged and a.final_J > a.J[0]


def test_divergence_is_reported_not_raised():
    good = TrainConfig(instance=TOKEN, estimator="gmc", G=8, eta=0.5, steps=40, delay=dl.fixed(2), seed=1)
    bad = good.replace(estimator="is", eta=1e8)  # logits overflow within a few steps
    rg, rb = run_many([good, bad])
    assert not rg.diverged and rg.diverged_at is None and np.isfinite(rg.J).all()
    assert rb.diverged and 0 < rb.diverged_at <= 40
    assert np.isnan(rb.J[rb.diverged_at:]).all() and np.isfinite(rb.J[: rb.diverged_at]).all()
    assert rb.avg_grad_norm2 == np.inf and np.isfinite(rb.final_J)
    assert rb.summary()["diverged"] and np.isfinite(rb.theta).all()


def test_objective_collapse_is_flagged():
    """G = 2 and a huge step throw the bandit onto whichever arm won its pair: often a bad one."""
    cfgs = [TrainConfig(instance=BANDIT, estimator="onpolicy", G=2, eta=1e3, steps=5, collapse_frac=0.9,
                        theta_max=1e9, seed=s) for s in range(40)]
    res = run_many(cfgs)
    collapsed = [r for r in res if r.diverged]
    assert collapsed and len(collapsed) < len(res)
    for r in collapsed:
        k = r.diverged_at
        assert np.isfinite(r.J[k]) and r.J[k] < 0.9 * r.J[0] and np.isnan(r.J[k + 1:]).all()
    for r in res:
        if not r.diverged:
            assert np.all(r.J >= 0.9 * r.J[0])


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(estimator="ppo"), "estimator"),
        (dict(eps=0.0), "eps"),
        (dict(eps_low=1.0), "eps_low"),
        (dict(G=0), "G"),
        (dict(eta=-1.0), "eta"),
        (dict(steps=0), "steps"),
        (dict(optimizer="sgd"), "optimizer"),
        (dict(seed=-1), "seed"),
        (dict(delay="fixed"), "delay"),
    ],
)
def test_bad_config_names_parameter(kwargs, word):
    with pytest.raises(ValueError, match=word):
        TrainConfig(**kwargs)


def test_every_estimator_trains_under_delay_on_token_mdp():
    cfgs = [TrainConfig(instance=TOKEN, estimator=e, G=8, eta=1.0, steps=80, delay=dl.fixed(4), seed=0)
            for e in ALL_ESTIMATORS]
    for r in run_many(cfgs):
        assert not r.diverged, r.config.estimator
        assert r.final_J > r.J[0], r.config.estimator
        assert np.all(r.chi2 >= -1e-14) and np.any(r.chi2 > 1e-3)  # 0 only when θ did not move
        assert np.all((r.ess > 0) & (r.ess <= r.config.G + 1e-9))


# --------------------------------------------------------------------------- partial-credit instance and regret
@pytest.mark.parametrize("state", ["count", "prev"])
def test_count_frac_reward_is_fraction_of_zero_tokens(state):
    """Enumeration of all V^T paths: R(τ) = #{t: a_t = 0}/T; J(uniform) = 1/V; J* = 1."""
    mdp = count_frac_mdp(3, 4, state=state)
    actions, _, final = instances.enumerate_paths(mdp)
    np.testing.assert_allclose(mdp.reward[final], (actions == 0).sum(axis=1) / 4, rtol=0, atol=1e-15)
    assert optimal_J(mdp) == 1.0
    assert exact_J_grad(mdp, np.zeros(mdp.theta_shape))[0] == pytest.approx(1 / 3, abs=1e-14)
    spec = InstanceSpec(kind="token", V=3, T=4, state=state, reward="count_frac")
    np.testing.assert_array_equal(spec.build().reward, mdp.reward)
    assert "count_frac" in spec.label


def test_optimal_J_and_regret_of_a_run():
    assert optimal_J(BANDIT.build()) == 0.9
    assert optimal_J(TOKEN.build()) == 1.0
    cfg = TrainConfig(instance=BANDIT, estimator="gmc", G=4, eta=1.0, steps=30, delay=dl.fixed(3))
    r = run_training(cfg)
    assert r.J_star == 0.9
    assert r.avg_regret == pytest.approx(0.9 - r.J[:-1].mean(), rel=1e-12)
    assert r.summary()["avg_regret"] == r.avg_regret
    bad = run_training(cfg.replace(estimator="is", eta=1e8))
    assert bad.diverged and bad.avg_regret == np.inf


def test_clip_fraction_counts_cut_weights_only():
    """The kernel's clip/cap fraction: 0 when nothing is stale (ρ = 1), > 0 for a cutting map far from
    the behaviour policy, NaN for maps that never cut, and never above 1."""
    base = TrainConfig(instance=TOKEN, G=8, eta=8.0, steps=30, seed=3, init_scale=0.5)
    for e in ("tis", "tic", "gmc", "grpo"):
        fresh = run_training(base.replace(estimator=e, delay=dl.fixed(0)))
        assert np.nanmax(fresh.clip_frac) == 0.0, e
        stale = run_training(base.replace(estimator=e, delay=dl.fixed(6), eta=64.0))
        cf = stale.clip_frac[np.isfinite(stale.clip_frac)]
        assert cf.size and cf.max() > 0.0 and cf.max() <= 1.0, e
    assert np.all(np.isnan(run_training(base.replace(estimator="is", delay=dl.fixed(6))).clip_frac))


def test_run_settings_travel_as_one_record_per_run():
    """The kernel takes the runs' scalar settings as one RUN_DTYPE record each (issue 27 item 18): every field
    is a TrainConfig attribute of the same name (opt: the optimiser's index), so a new option is one field."""
    from simulate.training.config import OPTIMIZERS
    from simulate.training.kernel import RUN_DTYPE, ZERO_TOL_OFF
    from simulate.training.run import run_records

    cfgs = [TrainConfig(estimator="gmc", eps=0.3, G=4, eta=2.0, seed=7, optimizer="adam"),
            TrainConfig(estimator="tic", eps=0.1, G=8, eta=0.5, seed=8, zero_tol=1e-9)]
    rec = run_records(cfgs)
    assert rec.dtype == RUN_DTYPE and len(rec) == 2

    def value(c, name):  # opt: the optimiser's index; zero_tol None: ZERO_TOL_OFF (the v1–v3 exact rule)
        if name == "opt":
            return OPTIMIZERS.index(c.optimizer)
        if name == "zero_tol" and c.zero_tol is None:
            return ZERO_TOL_OFF
        return getattr(c, name)

    for name in RUN_DTYPE.names:
        want = [value(c, name) for c in cfgs]
        assert list(rec[name]) == want, name


# --------------------------------------------------------------------------- zero-gradient tolerance (issue 32)
@pytest.mark.parametrize("r", [0.1, 0.7])
@pytest.mark.parametrize("adv_norm", [False, True])
def test_zero_tol_fractional_equal_returns_give_zero_gradient(r, adv_norm):
    """Every arm pays the same fractional ``r`` whose mean of eight is not ``r`` in float64: with
    ``zero_tol`` every group is equal, so ĝ = 0 exactly, θ never moves and every step is flagged zero-gradient.
    Under ``zero_tol=None`` (v1–v3's exact rule) the mean's rounding error leaves ``A_i ≈ 1e-17 ≠ 0``."""
    assert sum([r] * 8) / 8 != r  # the premise: the mean of eight copies is not representable as r
    spec = InstanceSpec(kind="bandit", n_arms=4, rewards=(r,) * 4)
    base = TrainConfig(instance=spec, estimator="gmc", G=8, n_prompts=2, eta=1.0, steps=20, seed=5, adv_norm=adv_norm,
                       init_scale=0.3)
    tol = run_training(base.replace(zero_tol=1e-9))
    assert np.all(tol.zero_grad == 1.0) and np.all(tol.ghat_norm2 == 0.0)
    np.testing.assert_array_equal(tol.theta, base.theta0((tol.theta.size,)).reshape(tol.theta.shape))
    exact = run_training(base)  # the v1–v3 rule: counted as learning steps, a rounding-level ĝ applied
    assert np.all(exact.zero_grad == 0.0) and np.all(exact.ghat_norm2 > 0.0)


def test_zero_tol_none_is_the_exact_rule_and_tol_keeps_unequal_groups():
    """``zero_tol=0`` on integer returns and ``zero_tol=None`` give bit-identical runs (only exactly equal groups
    are zero either way); a tolerance far below the reward gaps changes nothing on a 0/1-free instance."""
    base = TrainConfig(instance=TOKEN, estimator="is", G=4, n_prompts=2, eta=0.5, steps=30, seed=2,
                       delay=dl.DelaySpec(kind="fixed", d=3))
    runs = run_many([base, base.replace(zero_tol=0.0), base.replace(zero_tol=1e-12)])
    for other in runs[1:]:
        for name in ("J", "zero_grad", "ghat_norm2", "theta"):
            np.testing.assert_array_equal(getattr(runs[0], name), getattr(other, name))
    assert 0 < np.nanmean(runs[0].zero_grad) < 1  # both kinds of step occur, so the comparison bites


@pytest.mark.parametrize("bad", [-1e-3, float("nan"), float("inf"), True, "0.1"])
def test_zero_tol_validated(bad):
    with pytest.raises(ValueError, match="zero_tol"):
        TrainConfig(zero_tol=bad)
