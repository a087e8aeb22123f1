"""Protocol v6 (issue 53): instance families drawn by seed, the file refusing instances it did not draw, every rival
at every delay, and J* as the exact optimum (never an optimiser's stopping point)."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from simulate.protocol import families as fam
from simulate.protocol.spec import V6_PATH, load_protocol


@pytest.fixture(scope="module")
def v6():
    return load_protocol(V6_PATH)


def test_a_draw_is_a_pure_function_of_family_and_seed():
    for family in fam.FAMILIES:
        a, b = fam.draw(family, 12345), fam.draw(family, 12345)
        assert a.name == f"{family}-12345" and a is not b
        for k in ("next_state", "reward", "step_reward", "features", "starts", "w_init"):
            x, y = getattr(a, k), getattr(b, k)
            assert (x is None and y is None) or np.array_equal(x, y)
    other = fam.draw("lm-like", 12346)
    assert other.description != fam.draw("lm-like", 12345).description or not np.array_equal(
        other.w_init, fam.draw("lm-like", 12345).w_init)


def test_family_seeds_come_from_the_root_and_are_distinct():
    s = fam.family_seeds("root", "tabular", 6)
    assert s == fam.family_seeds("root", "tabular", 6) and len(set(s)) == 6
    assert s != fam.family_seeds("root2", "tabular", 6) and s != fam.family_seeds("root", "lm-like", 6)
    assert fam.family_seeds("root", "tabular", 3) == s[:3]
    for bad, word in ((dict(root="", family="tabular", n=1), "root"), (dict(root="r", family="mars", n=1), "family"),
                      (dict(root="r", family="tabular", n=0), "n must"), (dict(root="r", family="tabular", n=True),
                                                                            "n must")):
        with pytest.raises(ValueError, match=word):
            fam.family_seeds(**bad)


def test_family_names_parse_and_bad_ones_are_refused():
    assert fam.parse_name("lm-like-7") == ("lm-like", 7) and fam.parse_name("tabular-0") == ("tabular", 0)
    for bad in ("lm-like", "mars-3", "tabular-x", "tabular--1", 3):
        assert not fam.is_family_name(bad)
    with pytest.raises(ValueError, match="seed must be an integer"):
        fam.draw("tabular", -1)
    with pytest.raises(ValueError, match="family must be one of"):
        fam.draw("mars", 1)


def test_report_groups_of_the_families():
    assert fam.draw("tabular", 5).report_group == "tabular" and fam.draw("tabular", 5).features is None
    lm = fam.draw("lm-like", 5)
    assert lm.report_group == "lm-like" and lm.features is not None and len(lm.starts) in fam.LM_GRID["C"]


def test_the_registered_file_lists_exactly_its_draws_and_every_rival_at_every_delay(v6):
    drawn = tuple(f"{f}-{s}" for f, n in v6.families.items() for s in fam.family_seeds(v6.family_root, f, n))
    assert v6.instances == drawn and len(drawn) == 12 and v6.version == 6
    assert set(v6.delays) == {0, 8, 32} and v6.primary_arm == "tuned" and set(v6.step_arms) == {"tuned", "common"}
    assert "gmc" not in v6.rivals and set(v6.rivals) | {"gmc"} == set(v6.estimators)
    for inst in v6.instances[:1] + v6.instances[-1:]:
        have = {(c["estimator"], c["d"]) for c in v6.cells(inst)}
        assert {(r, d) for r in (*v6.rivals, "gmc") for d in v6.delays} <= have
    # fresh seeds: none of v1–v5's
    from simulate.protocol import spec

    old = set()
    for p in (spec.V1_PATH, spec.V2_PATH, spec.V3_PATH, spec.V4_PATH, spec.V5_PATH):
        q = load_protocol(p)
        old |= set(q.tune_seeds) | set(q.eval_seeds)
    assert not old & (set(v6.tune_seeds) | set(v6.eval_seeds))


@pytest.mark.parametrize("change", ["swap", "reorder", "extra", "root"])
def test_a_protocol_whose_instances_are_not_its_draws_is_refused(tmp_path, v6, change):
    text = V6_PATH.read_text()
    names = list(v6.instances)
    if change == "swap":
        names[0] = "tabular-1"
    elif change == "reorder":
        names[0], names[1] = names[1], names[0]
    elif change == "extra":
        names.append("count-frac")
    if change == "root":
        text, n = re.subn(r'family_root = "[^"]*"', 'family_root = "other"', text, count=1)
    else:
        lst = "instances = [" + ", ".join(f'"{x}"' for x in names) + "]"
        text, n = re.subn(r"(?ms)^instances = \[.*?\]", lst, text, count=1)
    assert n == 1
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(ValueError, match="protocol field instances must be exactly the instances its family seeds draw"):
        load_protocol(p)


def test_v6_fields_are_refused_below_version_6(tmp_path):
    text = (V6_PATH.parent / "protocol-v5.toml").read_text().replace('name = "training-claims-v5"',
                                                                      'name = "x"\nfamily_root = "r"', 1)
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(ValueError, match="absent below version 6"):
        load_protocol(p)


def test_each_family_draw_runs_k_equal_budget_over_G_steps(v6):
    for inst in v6.instances:
        f = fam.parse_name(inst)[0]
        assert v6.steps(inst, 8) == v6.family_budget[f] // 8
        assert v6.prompts_of(inst) == fam.contexts(fam.draw(*fam.parse_name(inst)))


def test_j_star_is_the_exact_optimum_not_the_optimisers_stopping_point(v6):
    """On an lm-like draw the answers are reachable (sup_w J = J* = 1); an optimiser stopped early (L-BFGS, 2
    iterations) reports far less. v6 normalises by J*; v5's J_class would have taken the stopping point."""
    from simulate.protocol.cells import reference_J
    from simulate.protocol.instances import class_optimum

    inst = fam.draw("lm-like", 2024)
    early = class_optimum(inst, starts=0, maxiter=2)
    assert inst.J_star == pytest.approx(1.0) and early < inst.J_star - 0.1
    assert reference_J(inst, v6) == inst.J_star
    # the answers are reachable: scaling the teacher direction drives J to 1 (the exact J along a ray grows)
    w = inst.w_init
    Js = [inst.exact_J_grad(w * s)[0] for s in (1.0, 4.0, 16.0)]
    assert Js[0] < Js[1] < Js[2] and Js[2] > 0.9


def test_threshold_reward_pays_one_iff_k_of_T_tokens_are_right():
    C, V, T, k, m = 2, 3, 3, 2, 2
    inst = fam.threshold_prompt_answer("t", C, V, T, k, m, seed=3, warm=0.3)
    from simulate.bridge.rungs import answers

    ans = answers(C, V, T, 3, m)
    for c in range(C):
        for seq in itertools.product(range(V), repeat=T):
            s = int(inst.starts[c])
            for t, a in enumerate(seq):
                s = int(inst.next_state[t, s, a])
            assert inst.reward[s] == float(sum(a == b for a, b in zip(seq, ans[c])) >= k)


DRAWS_GOLDEN = __import__("pathlib").Path(__file__).parent / "data" / "v6_draws.npz"


def _draw_arrays(name):
    from simulate.protocol.catalog import get_instance

    inst = get_instance(name)
    out = {}
    for k in ("next_state", "reward", "step_reward", "features", "starts", "w_init"):
        v = getattr(inst, k)
        if v is not None:
            out[f"{name}/{k}"] = np.asarray(v)
    return out


def test_v6_draws_are_pinned(v6):
    """The registered protocol's instances may not move with a later code change (a family generator, the ladder's
    answers or warm start): every array of every draw equals the one recorded at registration (structure exactly,
    the warm start to 1e-12 relative). Regenerate only with a new protocol version."""
    gold = np.load(DRAWS_GOLDEN)
    now = {k: v for name in v6.instances for k, v in _draw_arrays(name).items()}
    assert sorted(now) == sorted(gold.files)
    for k, v in now.items():
        if k.endswith("/w_init"):
            np.testing.assert_allclose(v, gold[k], rtol=1e-12, atol=1e-12, err_msg=k)
        else:
            np.testing.assert_array_equal(v, gold[k], err_msg=k)


if __name__ == "__main__":  # python tests/test_protocol_v6.py --write (only when registering a new version)
    import sys

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_protocol_v6.py --write")
    p = load_protocol(V6_PATH)
    np.savez_compressed(DRAWS_GOLDEN, **{k: v for name in p.instances for k, v in _draw_arrays(name).items()})
    print(f"wrote {DRAWS_GOLDEN}")
