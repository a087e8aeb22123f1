"""The training benchmark (issue 24 item 5): the NumPy reference learner is right, and the bench prints its targets.

The reference (``bench/reference_learner.py``) draws from another random stream than the Numba kernel,
so the two learners are compared in distribution: over fixed seeds, the mean of a per-run statistic
(``J`` after ``K`` steps, mean ``‖ĝ‖²``, zero-gradient fraction, ``χ²``, ESS, ...) must agree within
``4·√(se₁² + se₂²)``. Each comparison is also run against a deliberately broken reference (no baseline;
the stale ``μ_k`` replaced by ``π_{θ_k}``; the score without its ``−π(·|s)`` term) and must then fail, so
the tests can fail. No timing is asserted.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from bench import reference_learner as ref
from simulate import instances as tab
from simulate.delays import DelaySpec
from simulate.protocol.instances import get_instance
from simulate.training import TrainConfig, run_many

from _tol import approx, assert_close

# float64 log-softmax, path sums and score sums over ≤ a few hundred terms, NumPy vs Numba (another
# summation order, exp/log from another library): rounding ≤ a few hundred eps of the largest entry
K = 256

SEEDS = 200


# --------------------------------------------------------------------------- exact functions


@pytest.mark.parametrize("name", ["count-frac", "count-long-bernoulli", "feature-lm-bernoulli", "prev-random-1"])
def test_exact_J_grad_chi2_match_simulate_instances(name):
    inst = get_instance(name)
    step = np.zeros(inst.theta_shape) if inst.step_reward is None else inst.step_reward
    rng = np.random.default_rng(7)
    for scale in (0.3, 2.0, 6.0):
        th = scale * rng.standard_normal(inst.theta_shape)
        thq = th + 0.5 * rng.standard_normal(inst.theta_shape)
        lp_nb = tab.log_softmax_nb(th, np.empty_like(th))
        lq_nb = tab.log_softmax_nb(thq, np.empty_like(th))
        lp, lq = ref.log_softmax(th), ref.log_softmax(thq)
        assert_close(lp_nb, lp, K)
        g_nb = np.empty_like(th)
        J_nb = tab.exact_J_grad_steps_nb(lp_nb, inst.next_state, step, inst.reward, inst.s0, g_nb)
        J, g = ref.exact_J_grad(lp, inst.next_state, step, inst.reward, inst.s0)
        assert J_nb == approx(J, K, scale=max(abs(J), 1.0))
        assert_close(g_nb, g, K)
        assert abs(ref.chi2(lp, lq, inst.next_state, inst.s0) - tab.chi2_nb(lp_nb, lq_nb, inst.next_state, inst.s0)) \
            <= 1e-12 * max(1.0, abs(tab.chi2_nb(lp_nb, lq_nb, inst.next_state, inst.s0)))
        if inst.features is not None:  # ∇_w J = Φᵀ∇_θ J against the instance's own chain rule
            w = rng.standard_normal(inst.n_params)
            J_w, g_w = inst.exact_J_grad(w)
            J2, g2 = ref.exact_J_grad(ref.log_softmax(inst.logits(w)), inst.next_state, step, inst.reward, inst.s0)
            assert J_w == approx(J2, K, scale=max(abs(J2), 1.0))
            assert_close(g_w, inst.features.T @ g2.ravel(), K)


def test_terminal_reward_matches_tabular_wrappers_and_logratio_max_matches_enumeration():
    mdp = tab.token_mdp(V=3, T=5, state="prev", reward="sum_mod", m=3)
    th, thq = tab.random_theta(mdp, 1.0, seed=1), tab.random_theta(mdp, 1.0, seed=2)
    lp, lq = ref.log_softmax(th), ref.log_softmax(thq)
    J, g = ref.exact_J_grad(lp, mdp.next_state, np.zeros(mdp.theta_shape), mdp.reward, mdp.s0)
    J2, g2 = tab.exact_J_grad(mdp, th)
    assert J2 == approx(J, K, scale=max(abs(J), 1.0))
    assert_close(g2, g, K)
    assert abs(max(ref.chi2(lp, lq, mdp.next_state, mdp.s0), 0.0) - tab.chi2(mdp, th, thq)) <= 1e-12
    # max |log π(τ) − log μ(τ)| over all V^T paths, by enumeration
    actions, states, _ = tab.enumerate_paths(mdp)
    t = np.arange(mdp.T)[None, :]
    brute = np.max(np.abs((lp - lq)[t, states, actions].sum(axis=1)))
    assert abs(ref.logratio_max(lp, lq, mdp.next_state, mdp.s0) - brute) <= 1e-12


def test_sampling_frequencies_and_score_sum():
    """Inverse-CDF sampling draws each first token with probability μ(a|s0); ``score_sum`` equals the
    per-trajectory loop ``Σ_n c_n Σ_t (e_{a_t} − π(·|s_t))``."""
    inst = get_instance("count-frac")
    lq = ref.log_softmax(np.random.default_rng(0).standard_normal(inst.theta_shape))
    u = np.random.default_rng(1).random((20000, inst.T))
    states, actions, final = ref.sample(lq, inst.next_state, inst.s0, u)
    p = np.exp(lq[0, inst.s0])
    freq = np.bincount(actions[:, 0], minlength=inst.V) / len(u)
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / len(u)))
    assert np.array_equal(final, inst.next_state[inst.T - 1, states[:, -1], actions[:, -1]])
    c = np.random.default_rng(2).standard_normal(50)
    lp = ref.log_softmax(np.random.default_rng(3).standard_normal(inst.theta_shape))
    loop = np.zeros(inst.theta_shape)
    for n in range(50):
        for t in range(inst.T):
            loop[t, states[n, t]] -= c[n] * np.exp(lp[t, states[n, t]])
            loop[t, states[n, t], actions[n, t]] += c[n]
    assert_close(ref.score_sum(lp, states[:50], actions[:50], c), loop, K)


@pytest.mark.parametrize("name", ["count-frac", "feature-lm-bernoulli"])
def test_step_zero_diagnostics_equal_the_kernels(name):
    """At ``k = 0`` nothing random has happened: ``J(θ_0)``, ``‖∇_w J(θ_0)‖²`` and ``χ² = 0`` (d_0 = 0) must
    equal the kernel's to round-off, from the same random ``w_0``."""
    inst = get_instance(name)
    cfg = TrainConfig(instance=inst, estimator="gmc", G=4, eta=0.5, steps=1, init_scale=1.0, seed=3)
    a, b = run_many([cfg])[0], ref.train(cfg, inst)
    assert abs(a.J[0] - b.J[0]) <= 1e-12 and abs(a.grad_norm2[0] - b.grad_norm2[0]) <= 1e-12 * max(1, a.grad_norm2[0])
    assert abs(b.chi2[0]) <= 1e-12 and abs(a.chi2[0]) <= 1e-12


# --------------------------------------------------------------------------- in distribution


def _per_run(results, stats):
    """``{stat: array over runs}``: each statistic reduced to one number per run."""
    return {s: np.array([f(r) for r in results], dtype=float) for s, f in stats.items()}


def _disagreements(a: dict, b: dict) -> list[str]:
    """Statistics whose means over runs differ by more than ``4·√(se_a² + se_b²)`` (1e-12 when both are
    constant over runs)."""
    bad = []
    for s in a:
        x, y = a[s], b[s]
        se = math.sqrt(np.var(x, ddof=1) / x.size + np.var(y, ddof=1) / y.size)
        tol = 4 * se if se > 0 else 1e-12
        if not abs(x.mean() - y.mean()) <= tol:
            bad.append(f"{s}: numba {x.mean():.4g} vs numpy {y.mean():.4g} (tolerance {tol:.2g})")
    return bad


#: per-run statistics of the on-policy comparison (d = 0, onpolicy)
ONPOLICY_STATS = {
    "J_K": lambda r: r.J[-1],
    "mean ‖ĝ‖²": lambda r: np.mean(r.ghat_norm2),
    "zero-gradient fraction": lambda r: np.mean(r.zero_grad),
    "mean ESS": lambda r: np.mean(r.ess),
    "mean χ²": lambda r: np.mean(r.chi2),
}
#: ... and of the stale comparison (d = 3, gmc)
STALE_STATS = {
    **ONPOLICY_STATS,
    "clip fraction": lambda r: np.mean(r.clip_frac),
    "mean ‖w_k − w_{k−d}‖": lambda r: np.mean(r.dtheta_norm),
    "mean ascent rate ⟨ĝ, ∇J⟩/‖∇J‖": lambda r: np.mean(r.gdot),
    "mean ascent rate of the negative π < μ part": lambda r: np.mean(r.gneg),
}


def _onpolicy_configs():
    inst = get_instance("count-frac")
    return inst, [TrainConfig(instance=inst, estimator="onpolicy", G=4, eta=1.0, steps=10, seed=s) for s in range(SEEDS)]


def _stale_configs():
    inst = get_instance("count-frac")
    return inst, [TrainConfig(instance=inst, estimator="gmc", eps=0.2, G=4, eta=1.0, steps=10,
                              delay=DelaySpec("fixed", d=3), seed=s) for s in range(SEEDS)]


@pytest.fixture(scope="module")
def onpolicy_numba():
    _, cfgs = _onpolicy_configs()
    res = run_many(cfgs)
    assert not any(r.diverged for r in res)
    return _per_run(res, ONPOLICY_STATS)


@pytest.fixture(scope="module")
def stale_numba():
    _, cfgs = _stale_configs()
    res = run_many(cfgs)
    assert not any(r.diverged for r in res)
    stats = dict(STALE_STATS)
    if not hasattr(res[0], "dtheta_norm"):  # a kernel without C6's overlap outputs
        stats.pop("mean ‖w_k − w_{k−d}‖")
    return _per_run(res, stats)


def _reference(cfgs, inst, stats, cfg_map=lambda c: c):
    return _per_run([ref.train(cfg_map(c), inst) for c in cfgs], {s: STALE_STATS[s] for s in stats})


def test_onpolicy_learner_agrees_with_numba_in_distribution(onpolicy_numba):
    inst, cfgs = _onpolicy_configs()
    assert _disagreements(onpolicy_numba, _reference(cfgs, inst, onpolicy_numba)) == []


def test_onpolicy_comparison_fails_without_the_baseline(onpolicy_numba, monkeypatch):
    inst, cfgs = _onpolicy_configs()
    monkeypatch.setattr(ref, "advantages", lambda R, adv_norm=False: R)  # A_n = R_n: no group mean subtracted
    bad = _disagreements(onpolicy_numba, _reference(cfgs, inst, onpolicy_numba))
    assert any(b.startswith("mean ‖ĝ‖²") for b in bad), bad


def test_stale_learner_agrees_with_numba_in_distribution(stale_numba):
    inst, cfgs = _stale_configs()
    assert _disagreements(stale_numba, _reference(cfgs, inst, stale_numba)) == []


def test_stale_comparison_fails_when_mu_is_the_current_policy(stale_numba):
    inst, cfgs = _stale_configs()
    # the reference samples from π_{θ_k} instead of μ_k = π_{θ_{k−3}} (its delays are all 0)
    bad = _disagreements(stale_numba, _reference(cfgs, inst, stale_numba,
                                                 lambda c: dataclasses.replace(c, delay=DelaySpec("fixed", d=0))))
    assert any(b.startswith("mean χ²") for b in bad), bad


def test_stale_comparison_fails_when_the_negative_part_keeps_tokens_with_pi_above_mu(stale_numba, monkeypatch):
    """The ascent-rate statistics can fail: a reference whose negative part keeps every token of a
    negative-advantage trajectory (the ``π < μ`` condition dropped)."""
    inst, cfgs = _stale_configs()
    monkeypatch.setattr(ref, "negative_part", lambda coef, A, tok_ell: np.where(A[:, None] < 0.0, coef[:, None],
                                                                                np.zeros_like(tok_ell)))
    bad = _disagreements(stale_numba, _reference(cfgs, inst, stale_numba))
    assert any(b.startswith("mean ascent rate of the negative") for b in bad), bad


def _ghat0(cfgs, inst, learner):
    """``ĝ_0 = (θ_1 − θ_0)/η`` of every run (one SGD step from ``θ_0 = 0``)."""
    return np.stack([np.asarray(r.theta).ravel() / c.eta for c, r in zip(cfgs, learner(cfgs, inst))])


def _bias_failures(g: np.ndarray, target: np.ndarray) -> int:
    """Coordinates where the mean of ``g`` over runs is more than 4.5 standard errors from ``target``."""
    se = g.std(axis=0, ddof=1) / math.sqrt(g.shape[0])
    dev = np.abs(g.mean(axis=0) - target)
    return int(np.sum(np.where(se > 0, dev > 4.5 * se, dev > 1e-12)))


def test_first_gradient_is_unbiased_for_the_centred_gradient(monkeypatch):
    """At ``θ_0 = 0`` with ``d = 0`` every weight is 1 and ``E ĝ_0 = (1 − 1/G) ∇J(θ_0)`` (the group mean
    includes the trajectory itself), coordinate by coordinate, for both learners; the reference with a
    score missing its ``−π(·|s_t)`` term is off."""
    inst = get_instance("count-frac")
    G = 4
    cfgs = [TrainConfig(instance=inst, estimator="gmc", G=G, eta=1.0, steps=1, seed=s) for s in range(400)]
    _, grad = ref.exact_J_grad(ref.log_softmax(np.zeros(inst.theta_shape)), inst.next_state,
                               np.zeros(inst.theta_shape), inst.reward, inst.s0)
    target = (1 - 1 / G) * grad.ravel()
    py = lambda cs, i: [ref.train(c, i) for c in cs]  # noqa: E731
    assert _bias_failures(_ghat0(cfgs, inst, py), target) == 0
    assert _bias_failures(_ghat0(cfgs, inst, lambda cs, i: run_many(cs)), target) == 0
    orig = ref.score_sum
    monkeypatch.setattr(ref, "score_sum", lambda lp, s, a, c: orig(np.full_like(lp, -np.inf), s, a, c))  # e_{a_t} only
    assert _bias_failures(_ghat0(cfgs, inst, py), target) > 0


# --------------------------------------------------------------------------- the benchmark


def test_bench_training_quick_prints_the_targets_table():
    from bench import bench_training

    text = bench_training.run(quick=True, K=8, R=2)
    assert "load average" in text
    for name, _ in bench_training.INSTANCES:
        assert f"numba 1 thread / numpy, per core, {name}" in text
        assert f"scaling 1→2 threads, {name}" in text
        line = next(ln for ln in text.splitlines() if ln.startswith(f"1 vs 2 threads bit-identical J, {name}"))
        assert "True" in line and "PASS" in line
    rows = [ln for ln in text.splitlines() if ln.startswith(("numba 1 thread / numpy", "scaling 1→2"))]
    assert len(rows) == 2 * len(bench_training.INSTANCES)
    assert "ladder-v16-t12" in dict(bench_training.INSTANCES) and "per-phase profile" in text  # issue 37
    from simulate.training.profile import PHASES

    for ph in PHASES:
        assert any(ln.startswith(ph) for ln in text.splitlines()), ph
    off = next(ln for ln in text.splitlines() if ln.startswith("total, diagnostics=False"))
    assert len(re.findall(r"\d+\.\d+ \(\s*\d+%\)", off)) == len(bench_training.INSTANCES)
    for ln in rows:  # "<label>  <measured>x  <target>x  PASS|FAIL ...": the verdict follows the numbers
        m = re.search(r"\s(\d+\.\d+)x\s+(\d+(?:\.\d+)?)x\s+(PASS|FAIL)", ln)
        assert m, ln
        measured, target = float(m.group(1)), float(m.group(2))
        assert measured > 0 and (m.group(3) == "PASS") == (measured >= target), ln


@pytest.mark.parametrize("name, eta", [("feature-lm-bernoulli", 2.0), ("count-long-bernoulli", 1.0)])
def test_profile_runs_the_kernels_loop(name, eta):
    """The per-phase profile (issue 37) times the kernel's own phases in the kernel's order: its runs record the
    same numbers as :func:`run_many`, bit for bit, and every phase gets a time; on a feature and on a tabular policy
    (whose log-softmax recomputes only the rows the last update changed).

    Seen failing: profiling seed+1 against the kernel's seed (``J``, ``χ²``, ``‖ĝ‖²`` differ)."""
    from simulate.training.profile import PHASES, profile_phases

    inst = get_instance(name)
    cfgs = [TrainConfig(instance=inst, estimator=e, G=8, eta=eta, steps=12, delay=DelaySpec("fixed", d=3), seed=s)
            for s, e in ((0, "gmc"), (1, "grpo"))]
    prof = profile_phases(inst, cfgs)
    for rec, r in zip(prof["records"], run_many(cfgs)):
        for mine, theirs in ((rec.J[:-1], r.J[:-1]), (rec.gn2[:-1], r.grad_norm2[:-1]), (rec.chi2, r.chi2),
                             (rec.ghat, r.ghat_norm2), (rec.gpar, r.gpar_norm2), (rec.gdot, r.gdot), (rec.gneg, r.gneg),
                             (rec.ess, r.ess),
                             (rec.lrmax, r.logratio_max), (rec.clip, r.clip_frac)):
            assert np.array_equal(mine, theirs, equal_nan=True)
    assert set(prof["phases"]) == set(PHASES) and prof["steps"] == 24 and prof["total_us"] > 0


def test_a_benchmark_named_twice_is_refused_before_anything_runs(capsys, monkeypatch):
    """Issue 38 item 27: ``python -m bench training training`` ran the benchmark twice; now exit 2, one line.

    Seen failing: without the check, ``main`` ran ``bench_training.run`` twice (the spy counted 2 calls).
    """
    from bench import __main__ as bench_main
    from bench import bench_training

    calls = []
    monkeypatch.setattr(bench_training, "run", lambda quick=False: calls.append(quick) or "table")
    assert bench_main.main(["training", "training"]) == 2
    err = capsys.readouterr().err
    assert calls == [] and "'training' named more than once" in err and len(err.strip().splitlines()) == 1
    assert bench_main.main(["training"]) == 0 and calls == [False]
