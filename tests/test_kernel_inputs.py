"""The training kernel is compiled once for every instance (issue 37): Numba types an array by dtype, layout and
read-only flag, so the arrays :func:`simulate.training.run.kernel_inputs` hands the kernel must have one type
whatever the instance's own arrays are (read-only, broadcast, Fortran-ordered, another integer width)."""
from __future__ import annotations

import numba
import numpy as np

from simulate.protocol.instances import TrainingInstance, get_instance
from simulate.training.run import kernel_inputs


def _frozen(a):
    a = np.asfortranarray(a)
    a.setflags(write=False)
    return a


def _types(inputs):
    return tuple(numba.typeof(x) for x in inputs)


def test_every_instance_gives_the_kernel_the_same_argument_types():
    tabular = get_instance("count-frac")
    features = get_instance("feature-lm-bernoulli")
    T, S, V = features.next_state.shape
    odd = TrainingInstance("odd", "read-only, Fortran-ordered, int32 arrays", _frozen(features.next_state.astype(np.int32)),
                           _frozen(features.reward), int(features.s0),
                           step_reward=_frozen(np.zeros((T, S, V))), features=_frozen(features.features),
                           bernoulli=True, starts=_frozen(np.array([features.s0], dtype=np.int32)))
    seen = {_types(kernel_inputs(i)) for i in (tabular, features, odd)}
    assert len(seen) == 1, seen
    for x in kernel_inputs(odd):
        if isinstance(x, np.ndarray):
            assert x.flags.writeable and x.flags.c_contiguous


def test_kernel_inputs_copy_the_values_exactly():
    inst = get_instance("feature-lm-bernoulli")
    next_state, reward, step_reward, starts, phi, use_phi, bernoulli = kernel_inputs(inst)
    assert np.array_equal(next_state, inst.next_state) and np.array_equal(reward, inst.reward)
    assert np.array_equal(phi, inst.features) and use_phi and bernoulli == bool(inst.bernoulli)
    assert not np.shares_memory(phi, inst.features)  # the kernel never writes through to the instance
