"""``TrainConfig(diagnostics=False)`` (issue 37): the learner skips C6's overlap (``‖Δw‖``, the max-plus DP of
``max |log ρ|``) and issue 33's ascent rates (a second score and ``Φᵀ`` product for ``gneg``), which the protocol's
rules never read. Every other recorded array must be bit-identical to the run with the diagnostics, and the four
skipped curves NaN; a consumer of those curves refuses such a run instead of reading NaN as data."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.delays import DelaySpec
from simulate.protocol.instances import get_instance
from simulate.training import TrainConfig, run_many
from test_kernel_row_maps import instances  # the row-map tests' random instances

SKIPPED = ("dtheta_norm", "logratio_max", "gdot", "gneg")
KEPT = ("J", "grad_norm2", "chi2", "clip_frac", "ess", "ghat_norm2", "zero_grad", "theta", "gpar_norm2")


def _pairs(cfgs, inst=None):
    on = run_many(cfgs, mdp=inst)
    off = run_many([c.replace(diagnostics=False) for c in cfgs], mdp=inst)
    return on, off


def _check(on, off):
    for a, b in zip(on, off):
        for f in KEPT:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
        assert a.diverged_at == b.diverged_at
        for f in SKIPPED:
            assert np.isnan(getattr(b, f)).all(), f
        steps = a.delays.size if a.diverged_at is None else a.diverged_at
        assert np.isfinite(a.logratio_max[:steps]).all() and np.isfinite(a.gdot[:steps]).all()


@settings(max_examples=16, deadline=None)
@given(st.one_of(instances(features=True), instances()), st.sampled_from(["gmc", "tic", "is", "grpo", "cispo"]),
       st.sampled_from([0, 2, 5]), st.sampled_from(["sga", "adam"]))
def test_diagnostics_off_changes_no_other_bit(inst, estimator, d, optimizer):
    cfgs = [TrainConfig(instance=inst, estimator=estimator, G=4, n_prompts=2, eta=1.5, steps=12,
                        delay=DelaySpec("fixed", d=d), seed=s, optimizer=optimizer) for s in (0, 1)]
    _check(*_pairs(cfgs, inst))


@pytest.mark.parametrize("name", ["feature-lm-bernoulli", "lm-faithful-exact", "count-long-bernoulli"])
def test_diagnostics_off_on_the_protocol_instances(name):
    inst = get_instance(name)
    n_prompts = 8 if inst.starts is not None else 1
    cfgs = [TrainConfig(instance=inst, estimator=e, G=8, n_prompts=n_prompts, eta=2.0, steps=16,
                        delay=DelaySpec("fixed", d=4), seed=3) for e in ("gmc", "onpolicy", "grpo")]
    _check(*_pairs(cfgs))


def test_diagnostics_must_be_a_bool():
    with pytest.raises(ValueError, match="diagnostics must be True or False"):
        TrainConfig(diagnostics="no")


def test_consumers_refuse_a_run_without_diagnostics():
    from simulate.bridge.diagnostics import run_diagnostics
    from simulate.training.overlap import overlap_table, run_M

    inst = get_instance("feature-lm-bernoulli")
    (r,) = run_many([TrainConfig(instance=inst, steps=6, delay=DelaySpec("fixed", d=2), diagnostics=False)])
    for f in (run_M, lambda x: overlap_table([x], 1.0), run_diagnostics):
        with pytest.raises(ValueError, match="diagnostics=False"):
            f(r)



def test_one_refusal_for_any_result_object():
    """The consumers take duck-typed results too (C6's tables are built from stored curves): the refusal reads
    ``result.config.diagnostics`` where there is one and passes an object without a config."""
    from types import SimpleNamespace

    from simulate.training.config import require_diagnostics

    with pytest.raises(ValueError, match=r"diagnostics=False\): it has no gdot/gneg"):
        require_diagnostics(SimpleNamespace(config=SimpleNamespace(diagnostics=False)), "gdot/gneg")
    require_diagnostics(SimpleNamespace(config=SimpleNamespace(diagnostics=True)), "gdot/gneg")
    require_diagnostics(SimpleNamespace(), "gdot/gneg")  # no config: nothing says the curves are missing

def test_protocol_cells_run_without_diagnostics():
    """The protocol's cells read J, χ², ESS, ‖∇J‖², the zero flags and θ only (:func:`simulate.protocol.cells.run_metrics`)."""
    from simulate.protocol.cells import _configs
    from simulate.protocol import load_protocol

    inst = get_instance("count-frac")
    cfgs = _configs(inst, "gmc", 2, 0.2, 8, [0.5], [0, 1], load_protocol(), 4)
    assert cfgs and not any(c.diagnostics for c in cfgs)
