"""LM protocol v6 (issue 35): v5's rules on a task where the d = 0 learner has room to learn.

What v6 may change is exactly what its docstring lists (the warm start's length, the groups per step, the seeds
and the delays); every rule that decides a verdict is v5's. The earlier versions keep the hashes their reports
were registered under, so their rows stay reproducible.
"""
from __future__ import annotations

import dataclasses

import pytest

from simulate.llm.experiment import protocol_base, protocol_sweep
from simulate.llm.protocol import PROTOCOL_V5, PROTOCOL_V6, PROTOCOLS, LMProtocol
from simulate.llm.protocol import PROTOCOL_V6 as PROTOCOL  # this file checks v6, reproducible under its hash

#: The fields v6 changes (simulate/llm/protocol.py, "Version 6"); nothing else may differ from v5.
V6_CHANGES = {"version": 6, "warmstart_steps": 400, "n_prompts": 16, "delays": [0, 8, 32], "seeds": list(range(16))}


def test_v6_is_the_default_and_registered_under_its_hash():
    assert PROTOCOL.version == 6 and PROTOCOLS[6] is PROTOCOL and PROTOCOLS[5] is PROTOCOL_V5
    assert PROTOCOL.content_hash() == "2cd06ee51e7bec7b"
    assert PROTOCOL_V5.content_hash() == "e8138cb65bae3fd2"  # v5's report (commit ff80b7d) stays reproducible


def test_v6_changes_only_the_task_seeds_and_delays():
    v5, v6 = PROTOCOL_V5.to_dict(), PROTOCOL.to_dict()
    assert set(v5) == set(v6)  # no new field: v6 is a new setting of v5's rules
    changed = {k: v6[k] for k in v6 if v6[k] != v5[k]}
    assert changed == V6_CHANGES
    # the rules that decide a verdict are v5's, named so that a change to one of them fails here by name
    for rule in ("margin", "alpha", "p0", "collapse_drop", "lockin_nJ", "lockin_grad_rel", "regime_level",
                 "consensus", "kernel_pin", "perturb_paths", "perturb_seeds", "min_gain", "rate_premise_d0"):
        assert getattr(PROTOCOL, rule) == getattr(PROTOCOL_V5, rule), rule


def test_v6_perturbation_seeds_are_a_strict_minority_of_its_seeds():
    """The perturbation check substitutes ``perturb_seeds`` in the full table: 4 of 16 seeds (v5: 4 of 12)."""
    assert set(PROTOCOL.perturb_seeds) < set(PROTOCOL.seeds) and len(PROTOCOL.perturb_seeds) * 4 <= len(PROTOCOL.seeds)


def test_v6_runs_every_estimator_at_each_stale_delay_and_the_baseline_at_zero():
    runs = PROTOCOL.runs()
    assert runs[0] == ("onpolicy", 0) and len(runs) == 1 + len(PROTOCOL.estimators) * 2
    assert {d for _, d in runs[1:]} == {8, 32} and PROTOCOL.d_max == 32
    assert PROTOCOL.arms() == ((1.0, tuple(range(16))),)  # no step-size arm (v4's choice, kept)


def test_v6_run_settings_reach_the_runs(tmp_path):
    base = protocol_base(PROTOCOL, cache_dir=str(tmp_path / "cache"))
    assert (base.n_prompts, base.G, base.steps, base.warmstart.steps) == (16, 8, 40, 400)
    assert base.kernels == "avx2+COMPATIBLE" and base.adv_norm and base.warmup_steps == 10
    # the warm start differs from v5's (another length), so their caches never mix
    from simulate.llm.config import warmstart_key

    assert warmstart_key(base) != warmstart_key(protocol_base(PROTOCOL_V5, cache_dir=str(tmp_path / "cache")))
    sw = protocol_sweep(PROTOCOL, out_dir=str(tmp_path / "exp"), cache_dir=str(tmp_path / "cache"))
    assert sw.seeds == PROTOCOL.seeds and sw.base.n_prompts == 16


def test_v6_full_variant_and_validation():
    full = PROTOCOL.variant(full=True)
    assert full.seeds == tuple(range(PROTOCOL.full_seeds)) and full.delays == PROTOCOL.delays
    with pytest.raises(ValueError, match="full_seeds must be >="):
        dataclasses.replace(PROTOCOL, full_seeds=15)
    with pytest.raises(ValueError, match="perturb_seeds"):
        dataclasses.replace(PROTOCOL, perturb_seeds=(16,))
    assert isinstance(PROTOCOL, LMProtocol)
