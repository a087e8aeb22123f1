"""ε/G/η advice (issue 58): the setting is chosen on the tuning seeds, never on the held-out numbers it reports;
the two budget modes are separated; a tiny end-to-end run on one LM-like draw."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulate.protocol import advice as adv


def _rows(G, eps, tune_lcb, heldout, K, mode, inst="lm-like-1", seeds=(1, 2, 3)):
    out = []
    for s in seeds:
        out.append(dict(instance=inst, estimator="gmc", d=8, eps=eps, G=G, phase="eval", eta_kind="tuned", seed=s,
                        nauc=heldout + 0.01 * s, tune_lcb=tune_lcb, eta_tuned=4.0, K=K, mode=mode))
    return out


def test_the_setting_is_chosen_by_the_tuning_score_not_the_held_out_number():
    # G = 4 has the better tuning bound, G = 16 the better held-out nAUC: the advice follows the tuning seeds
    t = pd.DataFrame(_rows(4, 0.2, 0.6, 0.5, 128, "budget") + _rows(16, 0.2, 0.4, 0.9, 32, "budget"))
    (r,) = adv.recommend(t, eval_seeds=(1, 2, 3))
    assert (r["G"], r["eps"], r["mode"], r["K"]) == (4, 0.2, "budget", 128)
    assert r["iqm"] == pytest.approx(0.52) and r["lo"] <= r["iqm"] <= r["hi"]
    assert r["eta_median"] == 4.0 and r["n_instances"] == 1 and r["n_seeds"] == 3


def test_budget_modes_are_judged_apart():
    t = pd.DataFrame(_rows(4, 0.2, 0.6, 0.5, 128, "budget") + _rows(16, 0.5, 0.7, 0.6, 64, "steps"))
    got = {r["mode"]: (r["G"], r["eps"]) for r in adv.recommend(t, eval_seeds=(1, 2, 3))}
    assert got == {"budget": (4, 0.2), "steps": (16, 0.5)}


def test_cells_skip_a_steps_cell_that_equals_its_budget_cell_and_refuse_a_protocol_without_the_family():
    from simulate.protocol.spec import V6_PATH, load_protocol

    p = load_protocol(V6_PATH)
    cs = adv.cells(p)
    steps = [c for c in cs if "K" in c]
    assert steps and all(p.steps(c["instance"], c["G"]) != adv.STEPS for c in steps)
    assert {c["instance"] for c in cs} == {i for i in p.instances if i.startswith("lm-like-")}
    with pytest.raises(ValueError, match="no lm-like draws"):
        adv.cells(type("P", (), {"instances": ("tabular-1",)})())


def test_tiny_end_to_end_on_one_lm_like_draw(tmp_path):
    from tests.test_score import tiny_protocol
    from simulate.protocol.families import family_seeds

    p = tiny_protocol(tmp_path)
    text = p.read_text()
    inst = f"lm-like-{family_seeds('score-test', 'lm-like', 1)[0]}"
    text = text.replace("families = { tabular = 1 }", "families = { lm-like = 1 }").replace(
        "family_budget = { tabular = 64 }", "family_budget = { lm-like = 32 }")
    import re

    text = re.sub(r'(?ms)^instances = \[.*?\]', f'instances = ["{inst}"]', text)
    p.write_text(text)
    t = adv.run_advice(path=p, grid={"gmc": (0.2,), "tis": (0.2,)}, group_sizes=(4, 8), steps=8,
                       root=str(tmp_path / "cells"), backend="serial", progress=False)
    assert set(t["mode"]) == {"budget", "steps"} and set(t.d) == set(adv.DELAYS)
    # budget mode: K = 32 / G; steps mode: K = 8 for both G (the G = 4 steps cell is the budget one, copied)
    ks = t[t.phase == "eval"].groupby(["mode", "G"]).K.first().to_dict()
    assert ks == {("budget", 4): 8, ("budget", 8): 4, ("steps", 4): 8, ("steps", 8): 8}
    rows = adv.recommend(t, eval_seeds=(610000, 610001, 610002))
    assert {(r["d"], r["mode"], r["estimator"]) for r in rows} == {(d, m, e) for d in adv.DELAYS
                                                                  for m in adv.MODES for e in ("gmc", "tis")}
    assert all(np.isfinite(r["iqm"]) and r["lo"] <= r["iqm"] <= r["hi"] for r in rows)
