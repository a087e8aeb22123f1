"""simulate/protocol: the pre-registered C5/C9 protocol — data file, instances, metrics, verdict logic, end to end."""
from __future__ import annotations

import hashlib
import itertools
import types

import numpy as np
import pandas as pd
import pytest

from simulate import delays as dl
from simulate import instances as tab
from simulate import verdicts as vd
from simulate.protocol import INSTANCES, from_mdp, get_instance, load_protocol, run_c9, run_protocol
from simulate.protocol.c5 import c5_instance
from simulate.protocol.c9 import c9_instance
from simulate.protocol.cells import run_metrics
from simulate.protocol.instances import TrainingInstance
from simulate.protocol.spec import DEFAULT_PATH, V1_PATH, V2_PATH, V3_PATH
from simulate.training import TrainConfig, run_training

TINY = """
name = "tiny"
registered = "2026-12-03"
instances = ["count-frac"]
estimators = ["onpolicy", "is", "tis", "tic", "gmc"]
eps_estimators = ["tis", "tic", "gmc"]
delays = [0, 2]
eps = [0.2]
G = [4, 8]
budget = 64
n_prompts = 1
tune_seeds = [0, 1]
eval_seeds = [100, 101, 102]
eta_log2 = [1.0, 2.0]
eta_log2_token = [5.0, 6.0]
eta_step_log2 = 0.5
max_widen = 2
window_delta = 0.02
metric = "nauc"
collapse_drop = 0.5
neighbour_step_log2 = 0.5
margin = 0.02
alpha = 0.05
failure_p0 = 0.1
local_chi2 = 1.0
min_fraction = 0.75
[primary]
eps = 0.2
G = 4
d = 2
[c5]
steps = 8
estimators = ["gmc", "tic"]
G = [4, 8]
d = 2
eps = 0.2
slope_margin = 0.1
flat_margin = 0.02
[quick]
eval_seeds = [100, 101]
"""


# ----------------------------------------------------------------------------- the data file
@pytest.mark.parametrize("quick", [False, True])
def test_committed_protocol_has_disjoint_seeds_and_its_hash(quick):
    p = load_protocol(quick=quick)
    assert not set(p.tune_seeds) & set(p.eval_seeds)
    assert len(p.eval_seeds) >= (8 if quick else 24) and len(p.tune_seeds) >= (4 if quick else 16)
    assert p.sha256 == hashlib.sha256(DEFAULT_PATH.read_bytes()).hexdigest() and p.version == 5
    assert len(p.instances) >= 4 and "feature-loglinear" in p.instances
    assert set(p.instances) <= set(INSTANCES)


def test_protocol_refuses_overlapping_seeds_and_missing_fields(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(TINY.replace("eval_seeds = [100, 101, 102]", "eval_seeds = [1, 101, 102]"))
    with pytest.raises(ValueError, match="disjoint"):
        load_protocol(f)
    f.write_text(TINY.replace('metric = "nauc"\n', ""))
    with pytest.raises(ValueError, match="metric"):
        load_protocol(f)
    f.write_text(TINY.replace("budget = 64", "budget = 66"))
    with pytest.raises(ValueError, match="budget"):
        load_protocol(f)


def test_cells_keep_eps_only_where_it_matters():
    p = load_protocol()
    cells = p.cells("count-frac")
    per = {e: sum(c["estimator"] == e for c in cells) for e in p.estimators}
    assert per["gmc"] == len(p.delays) * len(p.G) * len(p.eps)
    assert per["onpolicy"] == len(p.delays) * len(p.G)


# ----------------------------------------------------------------------------- instances
def _paths(inst):
    for acts in itertools.product(range(inst.V), repeat=inst.T):
        s, R, states = inst.s0, 0.0, []
        for t, a in enumerate(acts):
            states.append(s)
            if inst.step_reward is not None:
                R += inst.step_reward[t, s, a]
            s = inst.next_state[t, s, a]
        yield acts, states, R + inst.reward[s]


def _path_return(inst, acts, start=None):
    s, R = (inst.s0 if start is None else start), 0.0
    for t, a in enumerate(acts):
        if inst.step_reward is not None:
            R += inst.step_reward[t, s, a]
        s = inst.next_state[t, s, a]
    return R + inst.reward[s]


SMALL = [n for n in INSTANCES if get_instance(n).V ** get_instance(n).T <= 10**5]
LARGE = [n for n in INSTANCES if n not in SMALL]


@pytest.mark.parametrize("name", LARGE)
def test_exact_J_against_monte_carlo_and_J_star_against_its_path(name):
    """Instances too large to enumerate (V^T > 1e5): J by DP within 4 s.e. of 20 000 sampled paths' mean
    return, and J* reached by the paths the max-DP picks while no sampled path exceeds it. With several
    contexts (``starts``) J and J* are the means over the starts, so paths start at a uniformly drawn one."""
    inst = get_instance(name)
    starts = np.array([inst.s0]) if inst.starts is None else np.asarray(inst.starts)
    w = np.random.default_rng(1).normal(0, 0.7, inst.n_params)
    logp = tab.log_policy(inst.logits(w))
    rng = np.random.default_rng(7)
    n = 20_000
    s0 = starts[rng.integers(len(starts), size=n)]
    s = s0.copy()
    R = np.zeros(n)
    for t in range(inst.T):
        p = np.exp(logp[t, s])
        a = (rng.random((n, 1)) > np.cumsum(p, axis=1)).sum(axis=1).clip(0, inst.V - 1)
        if inst.step_reward is not None:
            R += inst.step_reward[t, s, a]
        s = inst.next_state[t, s, a]
    R += inst.reward[s]
    J, _ = inst.exact_J_grad(w)
    # a sparse reward can leave every sampled return 0 (s.e. 0) while the DP's J is a few ulps above 0
    assert abs(J - R.mean()) <= 4 * R.std(ddof=1) / np.sqrt(n) + 64 * np.finfo(float).eps * max(1.0, abs(J))
    step = np.zeros(inst.theta_shape) if inst.step_reward is None else inst.step_reward
    best = [np.asarray(inst.reward, float)]
    for t in range(inst.T - 1, -1, -1):
        best.insert(0, np.max(step[t] + best[0][inst.next_state[t]], axis=1))
    returns = []
    for st in starts:
        acts, st0 = [], st
        for t in range(inst.T):
            a = int(np.argmax(step[t, st] + best[t + 1][inst.next_state[t, st]]))
            acts.append(a)
            st = inst.next_state[t, st, a]
        returns.append(_path_return(inst, acts, st0))
    assert np.mean(returns) == pytest.approx(inst.J_star, rel=1e-12) and R.max() <= max(returns) + 1e-12


@pytest.mark.parametrize("name", SMALL)
def test_exact_J_and_J_star_against_path_enumeration(name):
    inst = get_instance(name)
    w = np.random.default_rng(1).normal(0, 0.7, inst.n_params)
    logp = tab.log_policy(inst.logits(w))
    J_enum, best = 0.0, -np.inf
    for acts, states, R in _paths(inst):
        J_enum += np.exp(sum(logp[t, s, a] for t, (s, a) in enumerate(zip(states, acts)))) * R
        best = max(best, R)
    J, _ = inst.exact_J_grad(w)
    assert J == pytest.approx(J_enum, rel=1e-12)
    assert inst.J_star == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("name", ["feature-loglinear", "prev-random-1"])
def test_exact_gradient_against_finite_differences(name):
    inst = get_instance(name)
    w = np.random.default_rng(2).normal(0, 0.5, inst.n_params)
    _, g = inst.exact_J_grad(w)
    h = 1e-6
    for j in np.random.default_rng(3).choice(inst.n_params, 6, replace=False):
        e = np.zeros_like(w)
        e[j] = h
        fd = (inst.exact_J_grad(w + e)[0] - inst.exact_J_grad(w - e)[0]) / (2 * h)
        assert g[j] == pytest.approx(fd, abs=1e-8)


def test_feature_policy_with_identity_features_is_the_tabular_learner():
    """Two implementations that must agree: θ = Φw with Φ = I runs exactly like the tabular kernel."""
    base = get_instance("prev-random-2")
    eye = TrainingInstance("eye", "identity features", base.next_state, base.reward, base.s0,
                           step_reward=base.step_reward, features=np.eye(base.T * base.S * base.V))
    for est in ("gmc", "grpo"):
        cfg = TrainConfig(estimator=est, G=4, eta=4.0, steps=30, delay=dl.fixed(2), seed=7, init_scale=0.3)
        a = run_training(cfg.replace(instance=base))
        b = run_training(cfg.replace(instance=eye))
        np.testing.assert_array_equal(a.J, b.J)
        np.testing.assert_allclose(a.grad_norm2, b.grad_norm2, rtol=1e-12)


def test_shared_features_move_unvisited_states():
    """The feature instance's point: an update driven by one state changes the policy in others."""
    inst = get_instance("feature-loglinear")
    w = np.zeros(inst.n_params)
    _, g = inst.exact_J_grad(w)
    th0, th1 = inst.logits(w), inst.logits(w + g)
    moved = np.abs(th1 - th0).reshape(inst.T, inst.S, inst.V).max(axis=(0, 2))
    assert np.all(moved > 0)  # every state, including ones whose own reward row is small


def test_bernoulli_instance_trains_and_differs_from_the_deterministic_one():
    det, ber = get_instance("count-frac"), get_instance("count-frac-bernoulli")
    cfg = TrainConfig(estimator="gmc", G=8, eta=8.0, steps=40, seed=3)
    a, b = run_training(cfg.replace(instance=det)), run_training(cfg.replace(instance=ber))
    assert a.J[0] == b.J[0] and not np.array_equal(a.J, b.J)
    assert np.all(np.isfinite(b.J)) and b.J[-1] > b.J[0]


def test_instance_validation_names_the_field():
    base = get_instance("prev-random-1")
    with pytest.raises(ValueError, match="step_reward"):
        TrainingInstance("x", "", base.next_state, base.reward, base.s0, step_reward=-base.step_reward)
    with pytest.raises(ValueError, match="features"):
        TrainingInstance("x", "", base.next_state, base.reward, base.s0, features=np.ones((3, 2)))
    with pytest.raises(ValueError, match="instance must be one of"):
        get_instance("nope")
    with pytest.raises(ValueError, match="TabularMDP"):
        from_mdp(42)


# ----------------------------------------------------------------------------- per-run metrics
def _result(J, diverged_at=None, grad=None, chi2=None, zero=None):
    J = np.asarray(J, dtype=float)
    K = J.size - 1
    return types.SimpleNamespace(J=J, diverged=diverged_at is not None,
                                 chi2=np.full(K, 0.5) if chi2 is None else np.asarray(chi2, float),
                                 zero_grad=np.r_[np.ones(K // 2), np.zeros(K - K // 2)] if zero is None else np.asarray(zero, float),
                                 grad_norm2=np.ones(K + 1) if grad is None else np.asarray(grad, float) ** 2,
                                 ess=np.ones(K))


def test_run_metrics_area_collapse_and_divergence():
    m = run_metrics(_result([0.0, 0.5, 1.0, 1.0, 1.0]), J_star=1.0, collapse_drop=0.5)
    assert m["nauc"] == pytest.approx(0.7) and m["final_nJ"] == 1.0 and not m["failed"]
    assert m["zero_frac"] == pytest.approx(0.5) and m["chi2_med"] == 0.5
    m = run_metrics(_result([0.0, 0.9, 0.3, 0.3]), J_star=1.0, collapse_drop=0.5)
    assert m["collapsed"] and m["failed"] and not m["diverged"]
    m = run_metrics(_result([0.0, 0.8, np.nan, np.nan], diverged_at=2), J_star=1.0, collapse_drop=0.5)
    assert m["diverged"] and m["nauc"] == pytest.approx(0.2) and m["final_nJ"] == 0.0
    with pytest.raises(ValueError, match="normalise"):
        run_metrics(_result([1.0, 1.0]), J_star=1.0, collapse_drop=0.5)


# ----------------------------------------------------------------------------- verdict logic on synthetic tables
def _table(nauc: dict, failed: dict | None = None, chi2=0.1, seeds=range(24), G=8, eps=0.2):
    rows = []
    rng = np.random.default_rng(0)
    for (e, d), mean in nauc.items():
        noise = rng.normal(0, 0.01, len(seeds))
        for s, z in zip(seeds, noise):
            f = (failed or {}).get((e, d), 0.0) > (s % 10) / 10
            for kind in ("tuned", "neighbour", "common", "common-neighbour"):
                rows.append(dict(phase="eval", eta_kind=kind, instance="toy", estimator=e, d=d, eps=eps, G=G,
                                 seed=s, nauc=mean + z, failed=bool(f), failure="locked_in" if f else "none",
                                 chi2_med=chi2, chi2_learn_med=chi2, chi2_learn_mean=chi2, chi2_learn_p90=chi2,
                                 chi2_learn_max=chi2, zero_frac=0.1))
    return pd.DataFrame(rows)


def test_c9_clear_win_and_clear_loss():
    p = load_protocol(V1_PATH)
    d = p.primary["d"]
    good = {("onpolicy", 0): 0.9, ("onpolicy", d): 0.6, ("tic", 0): 0.9, ("tic", d): 0.7, ("tis", 0): 0.9,
            ("tis", d): 0.7, ("gmc", 0): 0.9, ("gmc", d): 0.88, ("is", 0): 0.9, ("is", d): 0.5}
    comp, sub = c9_instance(_table(good, failed={("is", d): 0.5}), p)
    v = dict(zip(sub.subclaim, sub.verdict))
    assert v == {"onpolicy-degrades": "holds", "tic-degrades": "holds", "tis-degrades": "holds",
                 "gmc-best-or-tied": "holds", "is-unstable": "holds", "gmc-stable": "holds"}
    assert "gmc − is" not in " ".join(comp.name)  # is fails half its runs: not among the stable rivals
    bad = dict(good)
    bad[("gmc", d)] = 0.5
    bad[("onpolicy", d)] = 0.9
    _, sub = c9_instance(_table(bad, failed={("gmc", d): 0.5}), p)
    v = dict(zip(sub.subclaim, sub.verdict))
    assert v["gmc-best-or-tied"] == "refuted" and v["onpolicy-degrades"] == "refuted" and v["gmc-stable"] == "refuted"
    assert v["is-unstable"] == "refuted"


def test_c9_interval_crossing_the_margin_is_inconclusive():
    p = load_protocol(V1_PATH)
    d = p.primary["d"]
    t = _table({("tic", 0): 0.9, ("tic", d): 0.88})  # Δ = 0.02 = δ: the interval straddles the margin
    comp, sub = c9_instance(t, p)
    assert dict(zip(sub.subclaim, sub.verdict))["tic-degrades"] == "inconclusive"


@pytest.mark.parametrize("path", [V1_PATH, DEFAULT_PATH])
def test_c5_premise_failure_is_out_of_scope_never_refuted(path):
    p = load_protocol(path)
    c = p.c5
    nauc = {}
    for G in c["G"]:
        for e in c["estimators"]:
            nauc[(e, 0, G)] = 0.9
            nauc[(e, c["d"], G)] = 0.1  # a huge delay cost that does not fall with G at all
    rows = []
    for (e, d, G), m in nauc.items():
        rows.append(_table({(e, d): m}, chi2=25.0, G=G, eps=c["eps"]))
    t = pd.concat(rows)
    res = c5_instance(t, None, p)
    assert res["verdict"] == vd.OUT_OF_SCOPE and not res["in_scope"]
    assert res["chi2_median"] == pytest.approx(25.0) and "χ²" in res["reason"]


# ----------------------------------------------------------------------------- end to end
def test_user_instance_runs_through_the_quick_protocol(tmp_path):
    f = tmp_path / "tiny.toml"
    f.write_text(TINY)
    mdp = tab.token_mdp(3, 3, state="prev", reward="sum_mod", m=3)
    frame, verdicts = run_c9(instance=mdp, protocol=f, quick=True, progress=False)
    assert set(frame.instance) == {mdp.name}
    ev = frame[frame.phase == "eval"]
    assert set(ev.seed) == {100, 101} and not set(ev.seed) & {0, 1}  # held-out seeds only
    assert set(frame[frame.phase == "tune"].seed) == {0, 1}
    assert len(verdicts) and all(vd.is_verdict(v) for v in verdicts.verdict)


def test_registered_instance_goes_through_the_cache_and_resumes(tmp_path):
    f = tmp_path / "tiny.toml"
    f.write_text(TINY)
    a = run_protocol(f, quick=True, root=tmp_path / "cells", progress=False)
    b = run_protocol(f, quick=True, root=tmp_path / "cells", progress=False)
    pd.testing.assert_frame_equal(a.table, b.table)
    assert a.c5["verdict"] in vd.VERDICTS and a.c9["verdict"] in vd.VERDICTS


def test_training_kernel_uses_the_feature_chain_rule():
    """The kernel's exact ‖∇_w J‖² along a feature-policy run equals Φᵀ∇_θJ from the NumPy DP."""
    inst = get_instance("feature-loglinear")
    r = run_training(TrainConfig(instance=inst, estimator="gmc", G=4, eta=2.0, steps=5, seed=1, init_scale=0.4))
    w0 = TrainConfig(seed=1, init_scale=0.4).theta0((inst.n_params,))
    J, g = inst.exact_J_grad(w0)
    assert r.J[0] == pytest.approx(J, rel=1e-12)
    assert r.grad_norm2[0] == pytest.approx(float(g @ g), rel=1e-12)


# ----------------------------------------------------------------------------- protocol v2
def test_v1_file_still_loads_under_its_own_hash_and_rules():
    v1 = load_protocol(V1_PATH)
    assert v1.name == "training-claims-v1" and v1.version == 1 and v1.step_arms == ("tuned",)
    assert v1.sha256 == hashlib.sha256(V1_PATH.read_bytes()).hexdigest()
    assert v1.sha256.startswith("4b11b3e7c2bc")  # the hash printed in the v1 report


def test_run_metrics_counts_lock_in_as_a_failure_and_measures_the_learning_phase():
    # J stalls at 0.5 of the gap with a vanishing gradient: locked in (v2), not a failure under v1
    r = _result([0.0, 0.3, 0.5, 0.5, 0.5], grad=[1.0, 0.5, 0.001, 0.001, 0.001], chi2=[9.0, 4.0, 0.0, 0.0],
                zero=[0.0, 0.0, 1.0, 1.0])
    v1 = run_metrics(r, J_star=1.0, collapse_drop=0.5)
    assert not v1["failed"] and not v1["locked_in"]
    v2 = run_metrics(r, J_star=1.0, collapse_drop=0.5, lockin_nJ=0.95, lockin_grad_rel=0.01)
    assert v2["failed"] and v2["locked_in"] and v2["failure"] == "locked_in" and v2["lockin_step"] == 2
    # learning phase: steps with ĝ ≠ 0 before 90 % of the gap (the zero-gradient tail is excluded)
    assert v2["n_learn"] == 2 and v2["chi2_learn_med"] == pytest.approx(6.5) and v2["chi2_learn_max"] == 9.0
    assert v2["chi2_med"] == pytest.approx(2.0)  # v1's all-step median: pulled down by the stuck steps
    # a run that converges is not locked in, whatever its final gradient
    ok = run_metrics(_result([0.0, 0.5, 1.0, 1.0], grad=[1.0, 0.5, 0.0, 0.0]), J_star=1.0, collapse_drop=0.5,
                     lockin_nJ=0.95, lockin_grad_rel=0.01)
    assert not ok["failed"] and ok["failure"] == "none"


def test_c9_v2_judges_stability_on_the_common_arm_and_flags_saturation():
    p = load_protocol(V2_PATH)
    d = p.primary["d"]
    good = {("onpolicy", 0): 0.7, ("onpolicy", d): 0.4, ("tic", 0): 0.7, ("tic", d): 0.5, ("tis", 0): 0.7,
            ("tis", d): 0.5, ("gmc", 0): 0.7, ("gmc", d): 0.68, ("is", 0): 0.7, ("is", d): 0.3}
    t = _table(good, failed={("is", d): 0.6})
    comp, sub = c9_instance(t, p)
    v = dict(zip(sub.subclaim, sub.verdict))
    assert v == {"onpolicy-degrades": "holds", "tic-degrades": "holds", "tis-degrades": "holds",
                 "gmc-best-or-tied (tuned η)": "holds", "gmc-best-or-tied (common η)": "holds",
                 "is-unstable": "holds", "gmc-stable": "holds"}
    assert set(comp.arm) == {"tuned", "common"} and comp.power.between(0, 1).all()
    rate = comp[comp.subclaim == "is-unstable"].iloc[0]
    assert rate.locked_in == rate.estimate * rate.n and rate.n == 48  # the failure split, common η and neighbour
    # the same effects at a ceiling (nAUC(d = 0) > 0.95) are out of scope, with the measurement
    sat = {k: (0.97 if k[1] == 0 else v + 0.27) for k, v in good.items()}
    comp, sub = c9_instance(_table(sat), p)
    assert set(sub.verdict) == {vd.OUT_OF_SCOPE} and sub.saturated.all() and "nAUC" in sub.reason.iloc[0]


def test_c9_v2_regime_comes_from_the_learning_phase():
    p = load_protocol(V2_PATH)
    d = p.primary["d"]
    t = _table({("gmc", 0): 0.7, ("gmc", d): 0.6, ("onpolicy", 0): 0.7, ("onpolicy", d): 0.6}, chi2=0.01)
    t.loc[:, "chi2_learn_med"] = 12.0  # far during learning, ~0 over all steps
    _, sub = c9_instance(t, p)
    assert set(sub.regime) == {"far"} and sub.chi2_median.iloc[0] == 12.0 and sub.chi2_all_med.iloc[0] == 0.01


def test_protocol_schema_refuses_what_would_silently_change_a_verdict(tmp_path):
    f = tmp_path / "p.toml"
    cases = [
        (TINY.replace("eval_seeds = [100, 101, 102]", "eval_seeds = [100, 100, 101]"), "eval_seeds.*duplicates"),
        (TINY.replace("eval_seeds = [100, 101, 102]", "eval_seeds = [100.5, 101, 102]"), "eval_seeds.*integers"),
        (TINY.replace("G = [4, 8]\nbudget", "G = [4, 4]\nbudget"), "G.*duplicates"),
        ('sha256 = "0"\n' + TINY, "unknown field"),
        (TINY + 'sha256 = "0"\n', "quick.*may override only"),
        (TINY.replace("[quick]\n", '[quick]\nname = "other"\n'), "quick.*may override only"),
        (TINY.replace("n_prompts = 1", "n_prompts = 0"), "n_prompts"),
        (TINY.replace("budget = 64", "budget = 0"), "budget"),
        (TINY.replace("eta_step_log2 = 0.5", "eta_step_log2 = 0"), "eta_step_log2"),
        (TINY.replace("margin = 0.02", "margin = inf"), "margin"),
        (TINY.replace("min_fraction = 0.75", "min_fraction = nan"), "min_fraction"),
        (TINY.replace("local_chi2 = 1.0", "local_chi2 = -1"), "local_chi2"),
        (TINY.replace("max_widen = 2", "max_widen = -3"), "max_widen"),
        (TINY.replace('alpha = 0.05', 'alpha = "0.05"'), "alpha"),
        (TINY.replace("[c5]\nsteps = 8\n", "[c5]\n"), r"\[c5\] lacks"),
        (TINY.replace("d = 2\n[c5]", "dd = 2\n[c5]"), r"\[primary\]"),
        (TINY.replace("failure_p0 = 0.1", "failure_pO = 0.1"), "unknown field"),
    ]
    for text, msg in cases:
        f.write_text(text)
        with pytest.raises(ValueError, match=msg):
            load_protocol(f, quick=True)


# ----------------------------------------------------------------------------- protocol v3
def test_v2_stays_loadable_under_its_own_hash_and_rules():
    v2 = load_protocol(V2_PATH)
    assert v2.version == 2 and v2.sha256.startswith("c54c92711815") and v2.normalise == "path"
    assert not v2.rate_premise_d0 and v2.delays == (0, 2, 4, 8) and v2.G == (4, 8, 32)
    v3 = load_protocol(V3_PATH)
    assert v3.version == 3 and v3.normalise == "class" and v3.rate_premise_d0
    # v3 judges only what the verdicts use: d ∈ {0, primary d} at the primary ε and G
    assert v3.delays == (0, v3.primary["d"]) and v3.G == (v3.primary["G"],) and v3.eps == (v3.primary["eps"],)
    assert load_protocol(V3_PATH, quick=True).c5["G"] == [2, 8, 32]  # [quick] names its C5 group sizes


def test_v3_rate_subclaims_need_a_stable_learner_at_d0():
    """A failure at d counts against the delay only if the same estimator at d = 0 is stable: with `is`
    failing as often at d = 0 as at d, "is unstable" is out of scope with the count, never `holds`."""
    p = load_protocol(V3_PATH)
    d = p.primary["d"]
    good = {("onpolicy", 0): 0.7, ("onpolicy", d): 0.4, ("tic", 0): 0.7, ("tic", d): 0.5, ("tis", 0): 0.7,
            ("tis", d): 0.5, ("gmc", 0): 0.7, ("gmc", d): 0.68, ("is", 0): 0.7, ("is", d): 0.3}
    comp, sub = c9_instance(_table(good, failed={("is", d): 0.6}), p)
    assert dict(zip(sub.subclaim, sub.verdict))["is-unstable"] == "holds"  # d = 0 stable: in scope
    comp, sub = c9_instance(_table(good, failed={("is", d): 0.6, ("is", 0): 0.6, ("gmc", 0): 0.6}), p)
    v = dict(zip(sub.subclaim, sub.verdict))
    assert v["is-unstable"] == vd.OUT_OF_SCOPE and v["gmc-stable"] == vd.OUT_OF_SCOPE
    why = comp[comp.subclaim == "is-unstable"].premise.iloc[0]
    assert "d = 0" in why and "/48" in why
    # v2 has no such premise: the same table says "holds"
    _, sub2 = c9_instance(_table(good, failed={("is", d): 0.6, ("is", 0): 0.6}), load_protocol(V2_PATH))
    assert dict(zip(sub2.subclaim, sub2.verdict))["is-unstable"] == "holds"


def test_v3_normalises_by_the_policy_class_optimum():
    """J_class is J* for a tabular policy; for a feature policy it is the best J exact-gradient ascent
    reaches, ≤ J*, and at least what plain gradient ascent from θ_0 = 0 reaches (an independent check)."""
    from simulate.protocol.cells import reference_J
    from simulate.protocol.instances import exact_J_grad_w, get_instance

    v2, v3 = load_protocol(V2_PATH), load_protocol(V3_PATH)
    tab = get_instance("count-frac")
    assert tab.J_class == tab.J_star == reference_J(tab, v3) == reference_J(tab, v2)
    feat = get_instance("feature-loglinear")
    assert reference_J(feat, v2) == feat.J_star and reference_J(feat, v3) == feat.J_class <= feat.J_star
    w = np.zeros(feat.n_params)
    for _ in range(3000):
        J, g = exact_J_grad_w(feat, w)
        w = w + 64.0 * g
    assert J <= feat.J_class + 1e-9 and feat.J_class - J < 1e-3
