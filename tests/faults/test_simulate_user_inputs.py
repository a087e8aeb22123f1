"""Inputs a user passes that the simulators took wrongly (sixteenth-session review): Adam's ε of 0, a token MDP of
one step, fractions truncated to integers, type errors that named no field, a user instance under a registered
name, and exact quantities that read NaN where the answer is finite or +inf."""
import math
import warnings

import numpy as np
import pytest

from simulate import delays
from simulate import instances as I
from simulate import montecarlo as mc
from simulate.delays import DelaySpec
from simulate.training import TrainConfig


@pytest.mark.parametrize("v", [0.0, -1e-8, math.nan, math.inf, "1e-8", True])
def test_adam_eps_must_be_a_finite_number_above_zero(v):
    """Adam divides by sqrt(v̂) + adam_eps, and v̂ = 0 for a parameter no gradient has reached: 0/0 in the kernel."""
    with pytest.raises(ValueError, match="adam_eps must be a finite number > 0"):
        TrainConfig(optimizer="adam", adam_eps=v)


@pytest.mark.parametrize("kw, name", [(dict(seed=1.5), "seed"), (dict(seed="x"), "seed"), (dict(seed=math.nan), "seed"),
                                      (dict(seed=-1), "seed"), (dict(beta1="a"), "beta1"), (dict(beta2=1.0), "beta2"),
                                      (dict(instance=I.token_mdp(2, 2)), "instance")])
def test_train_config_names_the_bad_field(kw, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        TrainConfig(**kw)


def test_train_config_takes_integral_seeds_of_any_type():
    assert TrainConfig(seed=np.int64(3)).seed == 3 and TrainConfig(seed=3.0).seed == 3.0


def test_token_mdp_of_one_step_builds_with_its_default_k():
    m = I.token_mdp(2, 1)  # default k = min(⌈T/V⌉ + 1, T) = 1
    assert m.T == 1 and m.reward.max() == 1.0
    assert I.token_mdp(3, 1, reward="sum_mod").T == 1  # k is unused by sum_mod
    assert I.token_mdp(4, 8).name == I.token_mdp(4, 8, k=3).name  # T ≥ 2: the default is ⌈T/V⌉ + 1 as before
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, T\] = \[1, 1\], got 2"):
        I.token_mdp(2, 1, k=2)


@pytest.mark.parametrize("f, msg", [(lambda: I.token_mdp(3, math.nan), "T must be an integer"),
                                    (lambda: I.token_mdp(math.inf, 2), "V must be an integer"),
                                    (lambda: I.token_mdp(2, 3, k=2.5), "k must be an integer"),
                                    (lambda: I.bandit(math.nan), "K must be an integer"),
                                    (lambda: I.bandit("3"), "K must be an integer")])
def test_instance_builders_name_the_bad_size(f, msg):
    with pytest.raises(ValueError, match=msg):
        f()


def test_training_instance_refuses_fractional_starts_and_non_bool_bernoulli():
    from simulate.protocol import TrainingInstance

    m = I.token_mdp(2, 2)
    with pytest.raises(ValueError, match="starts must hold integer state indices"):
        TrainingInstance("u", "d", m.next_state, m.reward, m.s0, starts=[0, 1.7])
    with pytest.raises(ValueError, match="bernoulli must be True or False"):
        TrainingInstance("u", "d", m.next_state, m.reward, m.s0, bernoulli="no")
    t = TrainingInstance("u", "d", m.next_state, m.reward, m.s0, starts=[0, 1.0])
    assert t.starts.tolist() == [0, 1] and t.starts.dtype == np.int64


@pytest.mark.parametrize("f, msg", [(lambda: delays.fixed(None), "d must be an integer"),
                                    (lambda: delays.fixed(2.5), "d must be an integer"),
                                    (lambda: DelaySpec(d=10**30), "d must be an integer"),
                                    (lambda: delays.uniform("3"), "D must be an integer"),
                                    (lambda: delays.geometric("a"), "p must be in"),
                                    (lambda: delays.queue(2, gen_sigma="x"), "gen_sigma must be"),
                                    (lambda: DelaySpec().sample(3, seed=-1), "seed must be"),
                                    (lambda: DelaySpec().sample(3, seed="a"), "seed must be")])
def test_delay_models_name_the_bad_argument(f, msg):
    with pytest.raises(ValueError, match=msg):
        f()


def test_bias_table_refuses_a_fractional_delay():
    with pytest.raises(ValueError, match="delays must hold integer"):
        mc.bias_table("bandit", estimators=["gmc"], eps_list=[0.2], G_list=[4], delays=[2.5], n_groups=16)


def test_a_user_instance_may_not_take_a_registered_name():
    """Under a registered name it would take that instance's [instance_settings] (n_prompts, budget)."""
    from simulate.protocol import TrainingInstance, run_c9

    b = I.bandit(2, [0.0, 1.0])
    with pytest.raises(ValueError, match="may not reuse a registered name"):
        run_c9(instance=TrainingInstance("lm-faithful-exact", "user", b.next_state, b.reward, 0), quick=True)


def _mismatched_bandit():
    b = I.bandit(2, [0.0, 1.0])
    z = np.zeros(b.theta_shape)
    mu = z.copy()
    mu[0, 0, 1] = 800.0  # μ(arm 0) = e^-800 underflows to 0 while ρ(arm 0) = e^800/2 overflows
    return b, z, mu


def test_chi2_of_an_overflowing_pair_is_inf_not_nan():
    m = I.token_mdp(2, 2)
    th, thm = np.zeros(m.theta_shape), np.zeros(m.theta_shape)
    thm[0, :, 0] = -800.0  # μ gives token 0 at t = 0 probability e^-800: π²/μ overflows there
    th[1, :, 1] = -800.0  # π gives token 1 at t = 1 probability e^-800: π²/μ underflows to 0 there
    assert I.chi2(m, th, thm) == math.inf
    b, z, mu = _mismatched_bandit()
    assert I.chi2(b, z, mu) == math.inf


@pytest.mark.parametrize("method", ["enum", "dp"])
def test_ratio_moments_of_an_overflowing_pair_are_inf_not_nan(method):
    b, z, mu = _mismatched_bandit()
    assert I.ratio_moments(b, z, mu, method=method) == dict(sigma2=math.inf, mu4=math.inf, m_tic=math.inf)


@pytest.mark.parametrize("seed", range(4))
def test_ratio_moments_in_log_space_agree_with_the_direct_sums(seed):
    from simulate.instances.dp import _path_log_prob, _path_moments_log, enumerate_paths, log_policy

    m = I.token_mdp(3, 4)
    rng = np.random.default_rng(seed)
    th, tm = rng.normal(size=m.theta_shape), rng.normal(size=m.theta_shape)
    a, s, _ = enumerate_paths(m)
    lmu = _path_log_prob(log_policy(tm), s, a)
    got = _path_moments_log(_path_log_prob(log_policy(th), s, a) - lmu, lmu)
    want = I.ratio_moments(m, th, tm, method="enum")
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-12)


def test_exact_expectations_of_an_overflowing_pair_have_no_nan():
    """Per-trajectory maps: μ·ρ = π, so 𝔅 and the removed mass are finite; here only arm 0 (π = 1/2) is cut,
    f = 1 − w/ρ = 1, so both are π(arm 0) = 1/2. The mean weight is the Monte Carlo one: arm 1 only, ρ = 1/2."""
    b, z, mu = _mismatched_bandit()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no 0·inf left anywhere
        for name in ("onpolicy", "is", "tis", "tic", "gmc"):
            r = mc.exact_expectations(b, z, mu, name, 0.2, 4)
            vals = [r["sq_norm"], r["bias_functional"], r["removed_mass"], r["mean_weight"], *np.ravel(r["grad"])]
            assert not any(v is not None and math.isnan(v) for v in vals), name
            if name in ("tis", "tic"):
                assert r["bias_functional"] == pytest.approx(0.5, rel=1e-12)
                assert r["removed_mass"] == pytest.approx(0.5, rel=1e-12)
            if name in ("tis", "tic", "gmc"):
                assert r["mean_weight"] == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("old, new, field", [("G = [2, 4, 8, 16, 32]", "G = 8", "c5.G/c5.steps"),
                                             ("steps = 64", "steps = [64]", "c5.G/c5.steps"),
                                             ("steps = 64", 'steps = "x"', "c5.G/c5.steps"),
                                             ("d = 8\neps = 0.2\nslope_rule", 'd = "8"\neps = 0.2\nslope_rule', "c5.d"),
                                             ("delays = [0, 8]", "delays = [{a = 1}, 0]", "delays")])
def test_protocol_file_type_errors_name_the_field(tmp_path, old, new, field):
    from pathlib import Path

    from simulate.protocol import load_protocol

    src = (Path(__file__).resolve().parents[2] / "simulate" / "protocol" / "protocol-v5.toml").read_text()
    assert old in src
    f = tmp_path / "p.toml"
    f.write_text(src.replace(old, new, 1))
    with pytest.raises(ValueError, match=f"protocol field {field} must be"):
        load_protocol(f)


def test_count_engine_keeps_the_mass_of_improbable_groups_with_huge_ratios():
    """gmc on the overflowing bandit: a group holding arm 0 has P ≈ 4e^-800 (dropped as negligible by the linear
    sums) but 𝔅 terms ≈ ρ_0/G = e^800/8, so it carries ≈ 1/2 of 𝔅 (and of the removed mass): the log-space sums
    keep it. The per-trajectory maps give 1/2 exactly (μρ = π); gmc agrees to float64."""
    b, z, mu = _mismatched_bandit()
    for name in ("gmc", "tis", "tic"):
        r = mc.exact_table(b, z, mu, [(name, 0.2)], 4)[name, 0.2]
        assert r["bias_functional"] == pytest.approx(0.5, rel=1e-12), name
        assert r["removed_mass"] == pytest.approx(0.5, rel=1e-12), name


@pytest.mark.parametrize("seed", range(3))
def test_count_engine_log_space_sums_agree_with_the_linear_ones(seed, monkeypatch):
    from simulate.montecarlo import exact

    m = I.token_mdp(2, 3)
    rng = np.random.default_rng(seed)
    th, tm = rng.normal(size=m.theta_shape), rng.normal(size=m.theta_shape)
    slots = [("gmc", 0.1), ("snis", 0.2), ("tis", 0.2), ("tic", 0.3)]
    atoms = exact.path_atoms(m, th, tm)
    lin = exact.exact_by_counts(atoms, slots, 5, m.theta_shape)
    monkeypatch.setattr(exact, "LOG_SPACE_ELL", -math.inf)
    log = exact.exact_by_counts(atoms, slots, 5, m.theta_shape)
    for sl in slots:
        for k in ("bias_functional", "removed_mass"):
            # terms are O(1) and sums cancel (snis's removed mass is E ρ̄ − 1 = 0): float64 round-off of O(1) sums
            assert log[sl][k] == pytest.approx(lin[sl][k], rel=1e-11, abs=1e-13), (sl, k)
        for k in ("sq_norm", "mean_weight"):
            assert log[sl][k] == lin[sl][k]
