"""Rows that share their logits (issue 37): the training kernel computes ``θ = Φw`` once per distinct feature block,
``log π``, ``π`` and the ``χ²`` terms once per distinct *reachable* row, and copies them
(:func:`simulate.training.problem.row_maps_nb`). The maps are checked against a brute-force reading of their
definition, and the kernel with sharing against the kernel computing every row, bit for bit, on random instances
(tabular and feature policies, dense and sparse ``Φ``, repeated blocks, several starts, unreachable rows)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simulate.delays import DelaySpec
from simulate.protocol.instances import TrainingInstance, get_instance
from simulate.training import TrainConfig, run_many
from simulate.training.problem import row_maps_nb
from simulate.training.run import kernel_inputs

FIELDS = ("J", "grad_norm2", "chi2", "clip_frac", "ess", "ghat_norm2", "zero_grad", "theta", "dtheta_norm",
          "logratio_max", "gpar_norm2", "gdot", "gneg")


@st.composite
def instances(draw, features=None):
    """A random instance: ``T ≤ 4``, ``S ≤ 6``, ``V ≤ 4``, one to three starts (repeats allowed); features (if any)
    drawn from a few ``(V, p)`` blocks, so rows repeat, optionally sparse (most entries 0), optionally with a block
    that differs from another only by the sign of a zero (which must not count as equal)."""
    T, S, V = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(2, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    next_state = rng.integers(0, S, size=(T, S, V))
    starts = rng.integers(0, S, size=draw(st.integers(1, 3))).astype(np.int64)
    if features is None:
        features = draw(st.booleans())
    if features:
        n_blocks, p = draw(st.integers(1, 3)), draw(st.integers(1, 5))
        blocks = rng.normal(size=(n_blocks, V, p))
        if draw(st.booleans()):  # sparse: the kernel's CSR path
            blocks *= rng.random(size=blocks.shape) < 0.15
        if draw(st.booleans()):  # block 0 with a +0.0 entry, and a copy of it with −0.0 there
            blocks[0, 0, 0] = 0.0
            neg = blocks[0].copy()
            neg[0, 0] = -0.0
            blocks = np.concatenate([blocks, neg[None]])
        features = blocks[rng.integers(0, blocks.shape[0], size=T * S)].reshape(T * S * V, p)
    else:
        features = None
    # returns in [0, 1]: terminal part ≤ 1/2, per-step part ≤ 1/(2T)
    step_reward = rng.random(size=(T, S, V)) / (2 * T) if draw(st.booleans()) else None
    return TrainingInstance("random", "random row-map instance", next_state, rng.random(size=S) / 2, int(starts[0]),
                            step_reward=step_reward, features=features, bernoulli=draw(st.booleans()),
                            starts=starts if starts.size > 1 else None)


def _brute_maps(inst):
    next_state, _, _, starts, phi, use_phi, _ = kernel_inputs(inst)
    T, S, V = next_state.shape
    reach = set((0, int(s)) for s in starts)
    for t in range(T - 1):
        reach |= {(t + 1, int(next_state[t, s, a])) for (tt, s) in list(reach) if tt == t for a in range(V)}
    rows = range(T * S)
    block = [phi[r * V:(r + 1) * V].tobytes() for r in rows] if use_phi else [r for r in rows]
    src = [min(q for q in rows if block[q] == block[r]) for r in rows]  # the first bit-equal block
    reachable = [r for r in rows if (r // S, r % S) in reach]
    lp = sorted({src[r] for r in reachable})
    copies = [r for r in reachable if src[r] != r]
    return [q for q in rows if src[q] == q], src, lp, copies


@settings(max_examples=60, deadline=None)
@given(instances())
def test_row_maps_follow_their_definition(inst):
    next_state, _, _, starts, phi, use_phi, _ = kernel_inputs(inst)
    theta_rows, theta_src, lp_rows, copy_rows = row_maps_nb(next_state, starts, phi, use_phi, True)
    rows, src, lp, copies = _brute_maps(inst)
    assert theta_rows.tolist() == rows
    assert theta_src.tolist() == src
    assert lp_rows.tolist() == lp
    assert copy_rows.tolist() == copies
    # share=False: every row computed, nothing copied
    theta_rows, theta_src, lp_rows, copy_rows = row_maps_nb(next_state, starts, phi, use_phi, False)
    R = next_state.shape[0] * next_state.shape[1]
    assert theta_rows.tolist() == list(range(R)) == theta_src.tolist() == lp_rows.tolist() and copy_rows.size == 0


def test_share_rows_must_be_a_bool():
    with pytest.raises(ValueError, match="share_rows must be True or False"):
        run_many([], share_rows="no")


@pytest.mark.parametrize("name, computed, copied", [
    # features shared over positions: one θ row per state (17), every reachable row but those 17 copies
    ("feature-lm-bernoulli", 17, 112),
    ("lm-faithful-exact", 96, 96),
    # tabular: nothing shared, only the reachable half of the rows computed
    ("count-long-bernoulli", 78, 0),
])
def test_committed_instances_share_what_they_should(name, computed, copied):
    """The sharing is not vacuous: on the committed instances the maps leave rows out and copy rows."""
    next_state, _, _, starts, phi, use_phi, _ = kernel_inputs(get_instance(name))
    _, _, lp_rows, copy_rows = row_maps_nb(next_state, starts, phi, use_phi, True)
    assert (lp_rows.size, copy_rows.size) == (computed, copied)


@settings(max_examples=16, deadline=None)
@given(st.one_of(instances(features=True), instances()), st.sampled_from(["gmc", "tic", "is", "grpo", "cispo"]),
       st.integers(0, 3))
def test_sharing_rows_changes_no_bit_of_any_recorded_array(inst, estimator, d):
    configs = [TrainConfig(instance=inst, estimator=estimator, G=4, n_prompts=2, eta=eta, steps=6,
                           delay=DelaySpec("fixed", d=d), seed=seed, init_scale=0.5)
               for seed in (0, 1) for eta in (1.0, 40.0)]  # η = 40 drives some runs to divergence
    next_state, _, _, starts, phi, use_phi, _ = kernel_inputs(inst)
    _, _, lp_rows, copy_rows = row_maps_nb(next_state, starts, phi, use_phi, True)
    R = next_state.shape[0] * next_state.shape[1]
    event(f"copies rows: {copy_rows.size > 0}; leaves rows out: {lp_rows.size + copy_rows.size < R}")
    shared = run_many(configs, share_rows=True)
    full = run_many(configs, share_rows=False)
    for a, b in zip(shared, full):
        assert a.diverged_at == b.diverged_at
        for name in FIELDS:
            x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
            assert x.tobytes() == y.tobytes(), (name, x, y)
