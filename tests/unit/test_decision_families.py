"""Protocol v6's instance families (simulate/protocol/families.py): which instances a confirmatory run gets is
decided here, so the seed derivation, the names, the documented grids and each drawn instance's structure are
pinned against the module docstring (issue 55)."""
import hashlib
import math

import numpy as np
import pytest

from simulate.protocol import families as f
from simulate.protocol.instances import exact_J_grad_w


# --- seeds and names --------------------------------------------------------------------------------------------

def test_family_seeds_are_the_first_32_bits_of_sha256_of_root_family_index():
    want = tuple(int.from_bytes(hashlib.sha256(f"v6/tabular/{i}".encode()).digest()[:4], "big") for i in range(3))
    assert f.family_seeds("v6", "tabular", 3) == want
    assert f.family_seeds("v6", "tabular", 1) == want[:1]
    assert f.family_seeds("v6", "lm-like", 3) != want and f.family_seeds("v7", "tabular", 3) != want


def test_family_seeds_skip_a_repeat_and_draw_the_next_index(monkeypatch):
    real = hashlib.sha256

    def fake(b):  # indices 0 and 1 collide: the second family seed comes from index 2
        s = b.decode()
        return real(s.replace("/1", "/0").encode()) if s.endswith("/1") else real(b)

    monkeypatch.setattr(f.hashlib, "sha256", fake)
    out = f.family_seeds("r", "tabular", 2)
    first = int.from_bytes(real(b"r/tabular/0").digest()[:4], "big")
    third = int.from_bytes(real(b"r/tabular/2").digest()[:4], "big")
    assert out == (first, third)


@pytest.mark.parametrize("root,family,n,match", [
    ("", "tabular", 2, "root"), (None, "tabular", 2, "root"), (7, "tabular", 2, "root"),
    ("v6", "lm", 2, "family"), ("v6", "Tabular", 2, "family"),
    ("v6", "tabular", 0, "n must"), ("v6", "tabular", -1, "n must"), ("v6", "tabular", True, "n must"),
    ("v6", "tabular", 2.0, "n must"),
])
def test_family_seeds_refuse_bad_arguments(root, family, n, match):
    with pytest.raises(ValueError, match=match):
        f.family_seeds(root, family, n)


def test_family_errors_list_the_families():
    with pytest.raises(ValueError, match=r"^family must be one of tabular, lm-like, got 'toy'$"):
        f.family_seeds("r", "toy", 1)
    with pytest.raises(ValueError, match=r"^family must be one of tabular, lm-like, got 'toy'$"):
        f.draw("toy", 1)
    with pytest.raises(ValueError, match=r"with family in tabular, lm-like and an integer seed >= 0, got 'toy-1'$"):
        f.parse_name("toy-1")


@pytest.mark.parametrize("name,want", [("lm-like-123", ("lm-like", 123)), ("tabular-0", ("tabular", 0)),
                                       ("tabular-007", ("tabular", 7)), ("lm-like-4294967295", ("lm-like", 2 ** 32 - 1))])
def test_parse_name(name, want):
    assert f.parse_name(name) == want
    assert f.is_family_name(name) is True


@pytest.mark.parametrize("name", ["tabular", "tabular-", "tabular-x", "lm-1", "lm-like--1", "Tabular-1", "tabular-1 ",
                                  " tabular-1", "tabular-1.0", "count-frac-bernoulli", "-1", 17, None, "lm-like-1-2"])
def test_parse_name_refuses_what_is_not_family_dash_seed(name):
    with pytest.raises(ValueError, match="<family>-<seed>"):
        f.parse_name(name)
    assert f.is_family_name(name) is False


def test_registered_families_and_grids_are_the_documented_ones():
    assert f.FAMILIES == {"tabular": "tabular", "lm-like": "lm-like"}
    assert f.LM_GRID == dict(V=(6, 8, 12), T=(4, 6, 8), C=(4, 8), m=(3, 4, 6), reward=("exact", "threshold", "frac"),
                             warm=(0.2, 0.35, 0.5))


# --- draw -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family,seed,match", [
    ("toy", 1, "family"), ("tabular", -1, "seed"), ("tabular", 2 ** 32, "seed"), ("tabular", True, "seed"),
    ("tabular", 1.0, "seed"), ("lm-like", "3", "seed"),
])
def test_draw_refuses_bad_family_or_seed(family, seed, match):
    with pytest.raises(ValueError, match=match):
        f.draw(family, seed)


def test_draw_accepts_the_seed_range_ends_and_numpy_integers():
    assert f.draw("tabular", 0).name == "tabular-0"
    assert f.draw("tabular", 2 ** 32 - 1).name == f"tabular-{2 ** 32 - 1}"
    assert f.draw("tabular", np.int64(5)).name == "tabular-5"


def test_draw_is_a_pure_function_of_family_and_seed():
    a, b = f.draw("tabular", 4), f.draw("tabular", 4)
    assert a.description == b.description
    np.testing.assert_array_equal(a.next_state, b.next_state)
    np.testing.assert_array_equal(a.step_reward, b.step_reward)


def test_each_family_has_its_own_random_stream():
    a = f._rng("tabular", 9).integers(2 ** 31, size=4)
    np.testing.assert_array_equal(a, np.random.default_rng([9, sum(map(ord, "tabular"))]).integers(2 ** 31, size=4))
    assert not np.array_equal(a, f._rng("lm-like", 9).integers(2 ** 31, size=4))


# --- the tabular family -------------------------------------------------------------------------------------------

@pytest.fixture
def TAB():
    # drawn in each test that reads it (not at import, nor once per module): mutmut forks each mutant from a process
    # that imported this module and runs only the tests it saw call the mutated function
    return [f.draw("tabular", s) for s in range(40)]


def _VT(inst):
    T, S, V = inst.next_state.shape
    return V, T


def test_tabular_draws_cover_exactly_the_documented_V_T_structures_and_coin(TAB):
    assert {_VT(i)[0] for i in TAB} == {3, 4, 5}
    assert {_VT(i)[1] for i in TAB} == {4, 5, 6}
    assert {("count of token 0" in i.description) for i in TAB} == {True, False}
    assert {bool(i.bernoulli) for i in TAB} == {True, False}


@pytest.mark.parametrize("k", range(12))
def test_tabular_instance_matches_its_description(k):
    inst = f.draw("tabular", k)
    V, T = _VT(inst)
    coin = ", paid as a coin flip R ~ Bernoulli(E R)" if inst.bernoulli else ""
    assert inst.name == f"tabular-{k}" and inst.report_group == "tabular" and f.contexts(inst) == 1
    if "count of token 0" in inst.description:
        assert inst.description == (f"tabular family (seed {k}): V = {V}, T = {T}, state = count of token 0, "
                                    f"R = #0/T{coin}")
        S = inst.next_state.shape[1]
        assert S == T + 1 and inst.s0 == 0 and inst.step_reward is None
        np.testing.assert_allclose(inst.reward, np.arange(T + 1) / T)
        assert inst.next_state[0, 0, 0] == 1 and inst.next_state[0, 0, V - 1] == 0
        assert inst.J_star == pytest.approx(1.0)
    else:
        assert inst.description == (f"tabular family (seed {k}): V = {V}, T = {T}, state = previous token, random "
                                    f"bigram rewards{coin}")
        assert inst.next_state.shape == (T, V + 1, V) and inst.s0 == V
        np.testing.assert_array_equal(inst.next_state[0, 2], np.arange(V))
        np.testing.assert_array_equal(inst.reward, np.zeros(V + 1))
        sr = inst.step_reward
        assert sr.shape == (T, V + 1, V) and sr.min() >= 0 and sr.max() <= 1 / T
        assert 0 < inst.J_star <= 1


# --- the lm-like family -----------------------------------------------------------------------------------------

def _grid(seed):
    r = f._rng("lm-like", seed)
    return {k: v[int(r.integers(len(v)))] for k, v in f.LM_GRID.items()}


def _J(inst):
    return exact_J_grad_w(inst, inst.w_init)[0]


def _J0(inst):
    return exact_J_grad_w(inst, np.zeros_like(inst.w_init))[0]


@pytest.mark.parametrize("seed", [12, 4, 15])  # exact, frac, threshold (small instances)
def test_lm_like_instance_matches_its_drawn_grid_point(seed):
    g = _grid(seed)
    inst = f.draw("lm-like", seed)
    V, T, C, m = g["V"], g["T"], g["C"], g["m"]
    k = f" (k = {math.ceil(T / 2)})" if g["reward"] == "threshold" else ""
    assert inst.description == (f"lm-like family (seed {seed}): C = {C} contexts, V = {V}, T = {T}, {g['reward']} "
                                f"reward{k}, shared unembedding p = {V * m}, warm start at J = {g['warm']}")
    assert inst.name == f"lm-like-{seed}" and inst.report_group == "lm-like"
    assert f.contexts(inst) == C and inst.next_state.shape[0] == T and inst.next_state.shape[2] == V
    assert inst.features.shape[1] == V * m and inst.w_init.shape == (V * m,)
    assert inst.features.shape[0] == T * inst.next_state.shape[1] * V
    assert _J0(inst) < g["warm"] <= _J(inst)  # a warm start at J: the uniform policy is below, the start at/above
    assert inst.J_star == pytest.approx(1.0)
    if g["reward"] == "frac":
        assert inst.step_reward is not None and inst.step_reward.max() == pytest.approx(1 / T)


def test_lm_like_seeds_pick_the_documented_reward_kinds():
    assert [_grid(s)["reward"] for s in (12, 4, 15, 28)] == ["exact", "frac", "threshold", "threshold"]


def _inner(seed):
    r = f._rng("lm-like", seed)
    for v in f.LM_GRID.values():
        r.integers(len(v))
    return int(r.integers(2 ** 31))


@pytest.mark.parametrize("seed", [12, 4])
def test_lm_like_is_the_prompt_answer_task_of_its_grid_point_and_inner_seed(seed):
    from simulate.bridge.rungs import prompt_answer

    g = _grid(seed)
    inst = f.draw("lm-like", seed)
    want = prompt_answer("x", g["C"], g["V"], g["T"], reward=g["reward"], features=g["m"], seed=_inner(seed),
                         warm=g["warm"])
    np.testing.assert_array_equal(inst.next_state, want.next_state)
    np.testing.assert_array_equal(inst.reward, want.reward)
    np.testing.assert_array_equal(inst.features, want.features)
    np.testing.assert_array_equal(inst.w_init, want.w_init)
    per = 1 if g["reward"] == "frac" else 2  # frac: one state per context; exact: (dead, alive)
    assert inst.next_state.shape[1] == g["C"] * per
    assert (inst.step_reward is None) == (g["reward"] != "frac")


def test_lm_like_threshold_needs_half_the_tokens_rounded_up():
    g = _grid(28)
    assert g["T"] == 6
    inst = f.draw("lm-like", 28)
    per = g["T"] + 1
    np.testing.assert_array_equal(inst.reward[:per], [0, 0, 0, 1, 1, 1, 1])  # k = ceil(6/2) = 3
    assert "(k = 3)" in inst.description
    from simulate.bridge.rungs import answers

    want = f.threshold_prompt_answer("x", g["C"], g["V"], g["T"], 3, g["m"], _inner(28), g["warm"])
    np.testing.assert_array_equal(inst.w_init, want.w_init)
    assert answers(g["C"], g["V"], g["T"], _inner(28), g["m"]).shape == (g["C"], g["T"])


# --- threshold_prompt_answer --------------------------------------------------------------------------------------

def test_threshold_instance_states_rewards_and_features():
    C, V, T, k, m = 2, 3, 3, 2, 2
    inst = f.threshold_prompt_answer("thr", C, V, T, k, m, seed=5, warm=0.3, description="d")
    per = T + 1
    assert inst.next_state.shape == (T, C * per, V) and inst.name == "thr" and inst.description == "d"
    np.testing.assert_array_equal(inst.starts, [0, per])
    assert inst.s0 == 0 and inst.report_group == "lm-like" and f.contexts(inst) == C
    np.testing.assert_array_equal(inst.reward, [0, 0, 1, 1, 0, 0, 1, 1])  # R = 1 iff #right >= k
    from simulate.bridge.rungs import answers, hidden
    ans = answers(C, V, T, 5, m)
    for c in range(C):
        for t in range(T):
            for j in range(per):
                for a in range(V):
                    want = c * per + min(j + int(a == ans[c, t]), T)
                    assert inst.next_state[t, c * per + j, a] == want
    phi = inst.features.reshape(T, C * per, V, V * m)
    h = hidden(C, T, m, 5)
    for c in range(C):
        for a in range(V):
            for j in range(per):
                np.testing.assert_array_equal(phi[:, c * per + j, a, a * m:(a + 1) * m], h[c])
                assert not phi[:, c * per + j, a, :a * m].any() and not phi[:, c * per + j, a, (a + 1) * m:].any()
    assert _J0(inst) < 0.3 <= _J(inst)
    # the warm start fits every context's answer (the fit sees all starts), from the same instance
    from simulate.bridge.rungs import supervised_init

    np.testing.assert_array_equal(inst.w_init, supervised_init(inst, ans, target=0.3))
    assert f.threshold_prompt_answer("t", C, V, T, k, m, seed=5, warm=0.3).description == ""


@pytest.mark.parametrize("k", [0, 4, 2.0, -1])
def test_threshold_k_must_be_an_integer_in_1_to_T(k):
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, T = 3\]"):
        f.threshold_prompt_answer("thr", 2, 3, 3, k, 2, seed=5, warm=0.3)


@pytest.mark.parametrize("k", [1, 3])
def test_threshold_k_at_the_range_ends_is_accepted(k):
    inst = f.threshold_prompt_answer("thr", 2, 3, 3, k, 2, seed=5, warm=0.8 if k == 1 else 0.2)
    assert inst.reward[k] == 1.0 and inst.reward[k - 1] == 0.0


def test_contexts_of_an_instance_without_starts_is_one():
    assert f.contexts(f.draw("tabular", 0)) == 1


def test_threshold_warm_start_is_fitted_on_every_context():
    # J over the four contexts, not context 0's alone: the stopping iterate differs here
    from simulate.bridge.rungs import answers, supervised_init

    inst = f.threshold_prompt_answer("t", 4, 6, 6, 3, 3, seed=0, warm=0.9)
    np.testing.assert_array_equal(inst.w_init, supervised_init(inst, answers(4, 6, 6, 0, 3), target=0.9))
    assert exact_J_grad_w(inst, inst.w_init)[0] >= 0.9


@pytest.mark.parametrize("seed", range(16))
def test_tabular_draw_follows_the_documented_order_of_draws(seed):
    # V, T, structure, coin, then (bigram) the rewards' seed, all from the family's own stream
    from simulate.protocol.instances import bigram_rewards

    r = np.random.default_rng([seed, sum(map(ord, "tabular"))])
    V, T = int(r.choice([3, 4, 5])), int(r.choice([4, 5, 6]))
    structure = str(r.choice(["count", "bigram"]))
    bern = bool(r.integers(2))
    inst = f.draw("tabular", seed)
    assert inst.next_state.shape[0] == T and inst.next_state.shape[2] == V and bool(inst.bernoulli) is bern
    if structure == "count":
        assert "count of token 0" in inst.description and inst.step_reward is None
    else:
        assert "previous token" in inst.description
        np.testing.assert_array_equal(inst.step_reward, bigram_rewards(V, T, int(r.integers(2 ** 31))))


def test_by_family_groups_draws_by_their_family_in_the_given_order():
    from simulate.protocol.families import by_family
    names = ["tabular-5", "lm-like-3", "tabular-1", "lm-like-9", "tabular-2"]
    assert by_family(names) == {"tabular": ["tabular-5", "tabular-1", "tabular-2"], "lm-like": ["lm-like-3", "lm-like-9"]}
    assert list(by_family(names)) == ["tabular", "lm-like"] and by_family([]) == {}
    with pytest.raises(ValueError, match="a family instance is named <family>-<seed>"):
        by_family(["tabular-1", "count-frac"])
