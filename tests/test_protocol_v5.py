"""Protocol v5 (issue 33): v4's rules plus the LM-faithful toy, with per-instance learner settings.

Seen failing: with ``prompts_of``/``steps`` ignoring ``instance_settings`` (the v4 formula
``budget // (G·n_prompts)``), the configs test gets 256 steps at 1 prompt; with the per-instance check removed
from ``_check_instance_settings`` the refusal tests pass bad tables through.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulate.protocol import load_protocol
from simulate.protocol import cells as pc
from simulate.protocol.instances import get_instance
from simulate.protocol.spec import DEFAULT_PATH, V4_PATH, check_axes

P = load_protocol()
V5_TEXT = DEFAULT_PATH.read_text(encoding="utf-8")


def test_default_is_v5_and_v4_keeps_its_registered_hash():
    assert DEFAULT_PATH.name == "protocol-v5.toml" and P.version == 5 and "lm-faithful-exact" in P.instances
    v4 = load_protocol(V4_PATH)
    assert v4.sha256.startswith("4073d3344d23") and v4.instance_settings == {} and v4.version == 4


def test_v5_changes_only_the_instance_list_and_its_settings():
    v4 = load_protocol(V4_PATH)
    same = [f for f in v4.__dataclass_fields__ if f not in ("name", "version", "instances", "instance_settings",
                                                             "sha256")]
    for f in same:
        assert getattr(P, f) == getattr(v4, f), f
    assert P.instances == v4.instances + ("lm-faithful-exact",)


def test_each_instance_runs_with_its_own_prompts_and_budget():
    assert (P.prompts_of("lm-faithful-exact"), P.budget_of("lm-faithful-exact")) == (8, 6144)
    assert P.steps("lm-faithful-exact", 8) == 6144 // (8 * 8) == 96
    for inst in set(P.instances) - {"lm-faithful-exact"}:
        assert (P.prompts_of(inst), P.budget_of(inst), P.steps(inst, 8)) == (1, 2048, 256)


def test_cell_configs_carry_the_instance_settings():
    lm, cf = get_instance("lm-faithful-exact"), get_instance("count-frac")
    c = pc._configs(lm, "gmc", 8, 0.2, 8, [1.0], [0, 1], P, None)
    assert {(x.n_prompts, x.steps) for x in c} == {(8, 96)}
    c = pc._configs(cf, "gmc", 8, 0.2, 8, [1.0], [0], P, None)
    assert {(x.n_prompts, x.steps) for x in c} == {(1, 256)}
    c = pc._configs(lm, "gmc", 0, 0.2, 4, [1.0], [0], P, 64)  # an explicit K (C5) wins, prompts stay the instance's
    assert {(x.n_prompts, x.steps) for x in c} == {(8, 64)}


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(text, encoding="utf-8")
    return p


def _settings(body: str) -> str:
    return re.sub(r'\[instance_settings\."lm-faithful-exact"\][^\n]*\nn_prompts = 8\nbudget = 6144\n', body, V5_TEXT)


@pytest.mark.parametrize("body, field", [
    ('[instance_settings."no-such-instance"]\nn_prompts = 8\n', "instance_settings.no-such-instance"),
    ('[instance_settings."lm-faithful-exact"]\nprompts = 8\n', "instance_settings.lm-faithful-exact"),
    ('[instance_settings."lm-faithful-exact"]\nn_prompts = 8.0\n', "instance_settings.lm-faithful-exact.n_prompts"),
    ('[instance_settings."lm-faithful-exact"]\nn_prompts = 0\n', "instance_settings.lm-faithful-exact.n_prompts"),
    ('[instance_settings."lm-faithful-exact"]\nn_prompts = 8\nbudget = 6000\n', "instance_settings.lm-faithful-exact"),
    ('[instance_settings."lm-faithful-exact"]\nn_prompts = 3\n', "instance_settings.lm-faithful-exact"),
])
def test_bad_instance_settings_are_refused_naming_the_field(tmp_path, body, field):
    text = _settings(body)
    assert text != V5_TEXT
    with pytest.raises(ValueError, match=re.escape(f"protocol field {field} must be")):
        load_protocol(_write(tmp_path, text))


def test_instance_settings_need_version_5(tmp_path):
    text = V5_TEXT.replace("version = 5", "version = 4")
    with pytest.raises(ValueError, match="instance_settings must be absent below version 5"):
        load_protocol(_write(tmp_path, text))
    assert load_protocol(_write(tmp_path, _settings("").replace("version = 5", "version = 4"))).version == 4


def test_the_map_refuses_a_G_that_shortens_one_instance_only():
    kw = dict(delays=(0, 8), eta_factors=(1.0,), eps=(0.2,), estimators=("onpolicy", "gmc"), seeds=(0, 1))
    check_axes(P, instances=("count-frac", "lm-faithful-exact"), G=(256,), **kw)  # 2048/256 and 6144/(8·256): whole
    check_axes(P, instances=("count-frac",), G=(512,), **kw)
    with pytest.raises(ValueError, match="on instance lm-faithful-exact"):
        check_axes(P, instances=("count-frac", "lm-faithful-exact"), G=(512,), **kw)  # 6144/(8·512) is not whole


def test_the_class_optimum_is_at_least_the_warm_start():
    """J_class (the top of v3+'s normalisation) is a sup over the policy class, so it is at least J at the
    instance's own warm start. Seen failing: ascent from w = 0 and Gaussian starts stopped at 0.125 on
    lm-faithful-exact, below its warm start's 0.5, and every cell refused to normalise."""
    from simulate.protocol.instances import INSTANCES

    for name in INSTANCES:
        inst = get_instance(name)
        if inst.w_init is not None:
            J0 = inst.exact_J_grad(inst.w_init)[0]
            assert J0 <= inst.J_class <= inst.J_star, name
