"""LM protocol v8 (issue 53): v7's runs on seeds drawn by hash, the full rival set, confirmatory answer rows.

What v8 may change is what its docstring lists (version, estimators, seed_root, seeds, perturb_seeds, consensus,
confirmatory); every rule that decides a verdict is v7's. Its seeds must be the draw of its seed root and disjoint
from every seed used before; its answer rows cover every rival at every delay, d = 0 from the shared run.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from simulate.llm import analysis
from simulate.llm.protocol import PROTOCOL, PROTOCOL_V7, PROTOCOL_V8, PROTOCOLS, USED_SEEDS, draw_seeds
from simulate.protocol.spec import load_protocol

#: The fields v8 changes (simulate/llm/protocol.py, "Version 8"); nothing else may differ from v7.
V8_CHANGED = {"version", "estimators", "seed_root", "seeds", "perturb_seeds", "consensus", "confirmatory"}


def test_v8_is_the_report_protocol_and_v7_keeps_its_hash():
    assert PROTOCOL is PROTOCOL_V8 and PROTOCOLS[8] is PROTOCOL and PROTOCOLS[7] is PROTOCOL_V7
    assert PROTOCOL_V7.content_hash() == "000b4e0e75dc9b00"
    assert "seed_root" not in PROTOCOL_V7.to_dict() and "confirmatory" not in PROTOCOL_V7.to_dict()
    v7, v8 = PROTOCOL_V7.to_dict(), PROTOCOL.to_dict()
    assert {k for k in v8 if v8[k] != v7.get(k)} == V8_CHANGED


def test_v8_rivals_are_the_tabular_v6_rival_set():
    v6 = load_protocol("simulate/protocol/protocol-v6.toml")
    assert set(PROTOCOL.estimators) == set(v6.rivals) | {"gmc"}
    assert len(PROTOCOL.runs()) == 1 + 2 * len(PROTOCOL.estimators)  # d = 0 once, every map at 8 and 32


def test_v8_seeds_are_the_hash_draw_fresh_and_cannot_be_swapped():
    assert PROTOCOL.seeds == draw_seeds("lm-c9-v8", 16) and len(set(PROTOCOL.seeds)) == 16
    assert not set(PROTOCOL.seeds) & USED_SEEDS
    assert set(PROTOCOL.perturb_seeds) <= set(PROTOCOL.seeds)
    with pytest.raises(ValueError, match="seeds must be draw_seeds"):
        dataclasses.replace(PROTOCOL, seeds=tuple(range(16)))
    with pytest.raises(ValueError, match="confirmatory needs seed_root"):
        dataclasses.replace(PROTOCOL_V7, version=8, confirmatory=True)


def test_draw_seeds_is_a_pure_function_of_the_root_and_rejects_bad_input():
    assert draw_seeds("x", 5) == draw_seeds("x", 5) != draw_seeds("y", 5)
    assert draw_seeds("x", 5) == draw_seeds("x", 9)[:5]
    assert all(10**6 <= s < 2 * 10**6 for s in draw_seeds("x", 50))
    for root, n in (("", 3), ("x", 0), ("x", True), (3, 2)):
        with pytest.raises(ValueError):
            draw_seeds(root, n)


def _table(protocol, effect: dict) -> pd.DataFrame:
    """A results table on 4 seeds: the baseline at d = 0, every estimator at every d > 0, auc = 0.5 + effect + noise."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(4):
        for x, d in protocol.runs():
            auc = 0.5 + effect.get((x, d), 0.0) + 0.01 * rng.standard_normal()
            rows.append(dict(estimator=x, d=d, seed=s, lr_factor=1.0, auc=auc, final_acc=auc, initial_acc=0.3,
                             skipped_steps=0, collapsed=False, locked_in=False, chi2_learn_med=0.5, gain=auc - 0.3))
    return pd.DataFrame(rows)


def test_v8_answer_rows_cover_every_rival_at_every_delay_with_d0_exactly_zero():
    p = dataclasses.replace(PROTOCOL, seeds=PROTOCOL.seeds[:4])
    df = _table(p, {("tis", 32): 0.2})
    df["seed"] = df["seed"].map(dict(enumerate(p.seeds)))
    rows = analysis.answer_rows(df, p, "cpu-lm", "tiny LM")
    rivals = [x for x in p.estimators if x != "gmc"]
    assert {(r["rival"], r["d"]) for r in rows} == {(x, d) for x in rivals for d in p.delays}
    assert all(r["confirmatory"] for r in rows)
    d0 = [r for r in rows if r["d"] == 0]
    assert all(r["delta"] == r["lo"] == r["hi"] == 0.0 and r["n"] == 4 for r in d0)
    tis = next(r for r in rows if r["rival"] == "tis" and r["d"] == 32)
    assert tis["hi"] < 0 and "verdict" in tis  # tis ahead at d_max, judged by the Holm family
    assert not any(r.get("confirmatory") for r in analysis.answer_rows(df, p, "cpu-lm", "tiny LM", quick=True))


def test_v7_answer_rows_are_unchanged_exploratory():
    df = _table(PROTOCOL_V7, {})
    rows = analysis.answer_rows(df, PROTOCOL_V7, "cpu-lm", "tiny LM")
    assert {r["d"] for r in rows} == set(analysis.ANSWER_DELAYS)
    assert {r["rival"] for r in rows} == set(analysis.ANSWER_RIVALS)
    assert not any("confirmatory" in r for r in rows)
