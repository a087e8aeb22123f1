"""Exact quantities and sampling of simulate.instances (THEORY §1), each against an independent computation."""
import itertools

import numpy as np
import pytest
from numba import njit
from scipy.special import logsumexp

from simulate import instances as ins

MDPS = [
    ins.token_mdp(V=3, T=4, state="count", reward="count_ge", k=2),
    ins.token_mdp(V=3, T=4, state="prev", reward="sum_mod", m=3),
    ins.token_mdp(V=2, T=5, state="count", reward="sum_mod", m=2),
    ins.token_mdp(V=3, T=3, state="prev", reward="count_ge", k=1),
]


def _np_log_softmax(theta):
    """Independent of simulate.instances (whose log_policy is the Numba kernel)."""
    return theta - logsumexp(theta, axis=-1, keepdims=True)


def _enum_paths(mdp):
    """All V^T paths by itertools (independent of ins.enumerate_paths): actions, states (N,T), s_T (N,)."""
    acts = np.array(list(itertools.product(range(mdp.V), repeat=mdp.T)), dtype=np.int64)
    states = np.empty_like(acts)
    s = np.full(len(acts), mdp.s0)
    for t in range(mdp.T):
        states[:, t] = s
        s = mdp.next_state[t, s, acts[:, t]]
    return acts, states, s


def _enum_truth(mdp, theta):
    """J and ∇J by summing over all V^T paths (no DP): ∇J = Σ_τ π(τ) R(τ) s_θ(τ)."""
    lp = _np_log_softmax(theta)
    p = np.exp(lp)
    actions, states, final = _enum_paths(mdp)
    t = np.arange(mdp.T)
    prob = np.exp(lp[t[None, :], states, actions].sum(1))
    R = mdp.reward[final]
    grad = np.zeros(mdp.theta_shape)
    for i in range(len(prob)):
        for tt in range(mdp.T):
            s, a = states[i, tt], actions[i, tt]
            grad[tt, s] -= prob[i] * R[i] * p[tt, s]
            grad[tt, s, a] += prob[i] * R[i]
    return float(prob @ R), grad, prob


@pytest.mark.parametrize("mdp", MDPS, ids=lambda m: m.name)
def test_dp_equals_enumeration(mdp):
    theta = ins.random_theta(mdp, 0.7, seed=1)
    J, grad, prob = _enum_truth(mdp, theta)
    assert prob.sum() == pytest.approx(1.0, abs=1e-12)
    assert ins.exact_J(mdp, theta) == pytest.approx(J, abs=1e-13)
    np.testing.assert_allclose(ins.exact_grad_J(mdp, theta), grad, atol=1e-13)


@pytest.mark.parametrize("mdp", MDPS, ids=lambda m: m.name)
def test_dp_kernels_equal_enumeration(mdp):
    """The one DP definition (log_softmax_nb, exact_J_grad_nb, chi2_nb) against path sums, also far from θ = 0."""
    theta = ins.random_theta(mdp, 3.0, seed=9)
    theta_mu = ins.random_theta(mdp, 3.0, seed=10)
    lp = ins.log_softmax_nb(theta, np.empty_like(theta))
    np.testing.assert_allclose(lp, _np_log_softmax(theta), rtol=0, atol=1e-13)
    big = theta * 300.0  # logits ~1e3: the max-shift keeps log π finite
    np.testing.assert_allclose(ins.log_policy(big), _np_log_softmax(big), rtol=1e-13, atol=1e-11)
    J, grad, _ = _enum_truth(mdp, theta)
    g = np.full(mdp.theta_shape, np.nan)
    J_nb = ins.exact_J_grad_nb(lp, mdp.next_state, mdp.reward, mdp.s0, g)
    assert J_nb == pytest.approx(J, abs=1e-13)
    np.testing.assert_allclose(g, grad, atol=1e-13)
    Jw, gw = ins.exact_J_grad(mdp, theta)
    assert Jw == J_nb and np.array_equal(gw, g)  # the wrapper is the kernel
    # χ² = Σ_τ π(τ)²/μ(τ) − 1 over all paths
    lm = _np_log_softmax(theta_mu)
    actions, states, _ = _enum_paths(mdp)
    t = np.arange(mdp.T)
    lpi, lmu = lp[t, states, actions].sum(1), lm[t, states, actions].sum(1)
    want = np.exp(2 * lpi - lmu).sum() - 1.0
    got = ins.chi2_nb(lp, ins.log_softmax_nb(theta_mu, np.empty_like(theta_mu)), mdp.next_state, mdp.s0)
    assert got == pytest.approx(want, rel=1e-11)
    assert ins.chi2(mdp, theta, theta_mu) == pytest.approx(want, rel=1e-11)


@pytest.mark.parametrize("mdp", MDPS[:2], ids=lambda m: m.name)
def test_grad_matches_finite_differences(mdp):
    theta = ins.random_theta(mdp, 0.7, seed=2)
    g = ins.exact_grad_J(mdp, theta)
    h = 1e-6
    rng = np.random.default_rng(0)
    for _ in range(10):
        idx = tuple(rng.integers(0, n) for n in mdp.theta_shape)
        e = np.zeros(mdp.theta_shape)
        e[idx] = h
        fd = (ins.exact_J(mdp, theta + e) - ins.exact_J(mdp, theta - e)) / (2 * h)
        assert g[idx] == pytest.approx(fd, abs=1e-8)


def test_bandit_closed_form_and_T1_token_mdp():
    """Bandit: J = Σ_k π_k r_k, ∇J = π ⊙ (r − J) (independent closed form); token MDP with T=1 agrees."""
    K = 4
    r = np.array([0.1, 0.9, 0.4, 0.0])
    b = ins.bandit(K, r)
    theta = ins.random_theta(b, 1.0, seed=3)
    pi = np.exp(theta[0, 0] - theta[0, 0].max())
    pi /= pi.sum()
    J = pi @ r
    assert ins.exact_J(b, theta) == pytest.approx(J, abs=1e-14)
    g = ins.exact_grad_J(b, theta)
    np.testing.assert_allclose(g[0, 0], pi * (r - J), atol=1e-14)
    assert np.all(g[0, 1:] == 0)
    # one-step token MDP (count of 0-tokens >= 1) is the bandit with rewards (1, 0, 0, 0)
    tm = ins.token_mdp(V=K, T=1, state="count", reward="count_ge", k=1)
    bb = ins.bandit(K, [1.0, 0.0, 0.0, 0.0])
    th = ins.random_theta(tm, 1.0, seed=4)
    th_b = np.zeros(bb.theta_shape)
    th_b[0, 0] = th[0, 0]
    assert ins.exact_J(tm, th) == pytest.approx(ins.exact_J(bb, th_b), abs=1e-15)
    np.testing.assert_allclose(ins.exact_grad_J(tm, th)[0, 0], ins.exact_grad_J(bb, th_b)[0, 0], atol=1e-15)
    # same seed, same uniforms -> the same arms
    a1, _, r1 = ins.sample_groups_nb(ins.log_policy(th), tm.next_state, tm.reward, tm.s0, 1000, 7)
    a2, _, r2 = ins.sample_groups_nb(ins.log_policy(th_b), bb.next_state, bb.reward, bb.s0, 1000, 7)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(r1, r2)


def test_alias_tables_reproduce_policy():
    mdp = MDPS[1]
    lp = ins.log_policy(ins.random_theta(mdp, 2.0, seed=5))
    prob, alias = ins.alias_tables(lp)
    V = mdp.V
    implied = prob / V
    for a in range(V):
        implied[..., a] += np.where(alias != np.arange(V), (alias == a) * (1 - prob), 0.0).sum(-1) / V
    np.testing.assert_allclose(implied, np.exp(lp), atol=1e-13)


def test_sampling_frequencies_within_5_se():
    """Empirical P(a_0) and E R from 2e5 draws within z=5 standard errors of the exact values."""
    mdp = MDPS[0]
    theta = ins.random_theta(mdp, 0.7, seed=6)
    lp = ins.log_policy(theta)
    n = 200_000
    actions, states, R = ins.sample_groups_nb(lp, mdp.next_state, mdp.reward, mdp.s0, n, 11)
    p0 = np.exp(lp[0, mdp.s0])
    freq = np.bincount(actions[:, 0], minlength=mdp.V) / n
    assert np.all(np.abs(freq - p0) <= 5 * np.sqrt(p0 * (1 - p0) / n))
    J = ins.exact_J(mdp, theta)
    assert abs(R.mean() - J) <= 5 * np.sqrt(J * (1 - J) / n)
    # states follow the transitions and log-probabilities add up
    ns = mdp.next_state[np.arange(mdp.T - 1)[None, :], states[:, :-1], actions[:, :-1]]
    np.testing.assert_array_equal(ns, states[:, 1:])
    t = np.arange(mdp.T)
    np.testing.assert_allclose(ins.traj_log_prob_nb(lp, states, actions), lp[t, states, actions].sum(1), atol=1e-12)


def test_add_score_matches_dense():
    mdp = MDPS[1]
    lp = ins.log_policy(ins.random_theta(mdp, 1.0, seed=7))
    actions, states, _ = ins.sample_groups_nb(lp, mdp.next_state, mdp.reward, mdp.s0, 50, 3)
    coef = np.random.default_rng(0).normal(size=(50, mdp.T))
    coef[3] = 0.0  # a whole trajectory without weight, and single tokens without weight
    coef[5, 0] = 0.0
    got = ins.add_score_nb(lp, states, actions, coef, np.zeros(mdp.theta_shape))
    want = np.zeros(mdp.theta_shape)
    p = np.exp(lp)
    for i in range(50):
        for t in range(mdp.T):
            want[t, states[i, t]] += coef[i, t] * (np.eye(mdp.V)[actions[i, t]] - p[t, states[i, t]])
    np.testing.assert_allclose(got, want, atol=1e-12)
    # a trajectory-level coefficient c_i is the same number on every token: Σ_i c_i ∇log π(τ_i)
    c = np.random.default_rng(1).normal(size=50)
    traj = ins.add_score_nb(lp, states, actions, np.repeat(c[:, None], mdp.T, axis=1), np.zeros(mdp.theta_shape))
    want = np.zeros(mdp.theta_shape)
    for i in range(50):
        score = np.zeros(mdp.theta_shape)
        for t in range(mdp.T):
            score[t, states[i, t]] += np.eye(mdp.V)[actions[i, t]] - p[t, states[i, t]]
        want += c[i] * score
    np.testing.assert_allclose(traj, want, atol=1e-12)


@pytest.mark.parametrize("mdp", MDPS[:3], ids=lambda m: m.name)
def test_chi2_and_ratio_moments_dp_equal_enumeration(mdp):
    theta = ins.random_theta(mdp, 0.7, seed=8)
    theta_mu = ins.stale_pair(mdp, theta, d=4, eta=0.1)
    assert np.linalg.norm(theta - theta_mu) == pytest.approx(0.4, rel=1e-12)
    enum = ins.ratio_moments(mdp, theta, theta_mu, method="enum")
    dp = ins.ratio_moments(mdp, theta, theta_mu, method="dp")
    assert ins.chi2(mdp, theta, theta_mu) == pytest.approx(enum["sigma2"], rel=1e-9)
    for key in ("sigma2", "mu4", "m_tic"):
        assert dp[key] == pytest.approx(enum[key], rel=1e-6, abs=1e-12)
    assert ins.ratio_moment(mdp, theta, theta_mu, 1.0) == pytest.approx(1.0, abs=1e-13)
    assert ins.chi2(mdp, theta, theta) == pytest.approx(0.0, abs=1e-13)


def test_stale_pair_random_direction_and_validation():
    mdp = MDPS[0]
    theta = ins.random_theta(mdp, 0.5)
    th_mu = ins.stale_pair(mdp, theta, 3, 0.2, direction="random", seed=1)
    assert np.linalg.norm(theta - th_mu) == pytest.approx(0.6, rel=1e-12)
    with pytest.raises(ValueError, match="direction"):
        ins.stale_pair(mdp, theta, 1, 0.1, direction="up")
    with pytest.raises(ValueError, match="eta"):
        ins.stale_pair(mdp, theta, 1, -0.1)
    with pytest.raises(ValueError, match="theta"):
        ins.exact_J(mdp, np.zeros((1, 2, 3)))
    with pytest.raises(ValueError, match="K"):
        ins.bandit(1)
    with pytest.raises(ValueError, match="reward"):
        ins.token_mdp(reward="parity")
    with pytest.raises(ValueError, match="k"):
        ins.token_mdp(V=3, T=4, k=9)
    with pytest.raises(ValueError, match="V\\^T"):
        ins.enumerate_paths(ins.token_mdp(V=32, T=8))


@njit(cache=True)
def _draw(seed, n):
    st = ins.rng_seed_nb(seed)
    out = np.empty(n)
    for k in range(n):
        out[k] = ins.rng_uniform_nb(st)
    return out


def test_rng_stream_uniform_and_reproducible():
    """xoshiro256+ stream: same seed same numbers, distinct seeds distinct streams; mean, variance,
    lag-1 correlation and a 16-bin histogram of 10^6 draws within z = 5 standard errors of U[0,1)."""
    n = 1_000_000
    u = _draw(7, n)
    np.testing.assert_array_equal(u, _draw(7, n))
    assert not np.array_equal(u[:100], _draw(8, 100))
    assert u.min() >= 0.0 and u.max() < 1.0
    assert np.all(u * 2**53 == np.floor(u * 2**53))  # 53-bit grid
    z = 5.0
    assert abs(u.mean() - 0.5) <= z * np.sqrt(1 / 12 / n)
    assert abs(((u - 0.5) ** 2).mean() - 1 / 12) <= z * np.sqrt(1 / 180 / n)  # Var[(u−½)²] = 1/80 − 1/144
    x = u - 0.5
    assert abs((x[1:] * x[:-1]).mean()) <= z * (1 / 12) / np.sqrt(n)
    counts = np.bincount((u * 16).astype(np.int64), minlength=16)
    p = 1 / 16
    assert np.all(np.abs(counts / n - p) <= z * np.sqrt(p * (1 - p) / n))
