"""Issue 27 item 8: ``TabularMDP`` refuses what it would silently change, and owns its arrays.

Injected: a float ``next_state`` (0.9 was truncated to 0), ``s0 = 1.7`` (became 1), complex or
string rewards (cast with only a warning), a caller's array (made read-only), a view (the instance
changed with its base array).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from simulate.instances.mdp import TabularMDP


def parts(T=2, S=3, V=2):
    ns = np.zeros((T, S, V), dtype=np.int64)
    ns[:, :, 1] = 2
    return ns, np.array([0.0, 0.5, 1.0]), 0


def build(ns, r, s0):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning is not an answer: it must be a ValueError or nothing
        return TabularMDP("t", ns, r, s0)


@pytest.mark.parametrize("bad", [0.9, 1.5, np.nan, np.inf], ids=repr)
def test_fractional_next_state_is_refused(bad):
    ns, r, s0 = parts()
    ns = ns.astype(np.float64)
    ns[0, 1, 0] = bad
    with pytest.raises(ValueError, match=r"next_state must hold integer state indices in \[0, 2\]"):
        build(ns, r, s0)


@pytest.mark.parametrize("bad", [True, 1j], ids=repr)
def test_boolean_or_complex_next_state_is_refused(bad):
    ns, r, s0 = parts()
    ns = ns.astype(type(bad))
    with pytest.raises(ValueError, match="next_state must hold integer state indices"):
        build(ns, r, s0)


def test_integral_float_next_state_is_accepted():
    ns, r, s0 = parts()
    mdp = build(ns.astype(np.float64), r, s0)
    assert mdp.next_state.dtype == np.int64
    np.testing.assert_array_equal(mdp.next_state, ns)


@pytest.mark.parametrize("bad", [1.7, -0.5, True, np.nan, "1", 1 + 0j], ids=repr)
def test_non_integer_s0_is_refused(bad):
    ns, r, _ = parts()
    with pytest.raises(ValueError, match=r"s0 must be an integer state index in \[0, 2\]"):
        build(ns, r, bad)


def test_integral_s0_is_accepted():
    ns, r, _ = parts()
    for s0 in (1, np.int32(1), 1.0, np.float64(1.0)):
        mdp = build(ns, r, s0)
        assert mdp.s0 == 1 and type(mdp.s0) is int


@pytest.mark.parametrize("bad, what", [(np.array([0.0, 0.5 + 1e-3j, 1.0]), "complex"),
                                       (np.array(["0", "0.5", "1"]), "<U3"),
                                       (np.array([False, True, True]), "booleans"),
                                       ([0.0, None, 1.0], "object")],
                         ids=["complex", "strings", "booleans", "None"])
def test_non_real_rewards_are_refused(bad, what):
    ns, _, s0 = parts()
    with pytest.raises(ValueError, match=rf"reward must be real numbers.*{what}"):
        build(ns, bad, s0)


def test_the_callers_arrays_stay_writable_and_unshared():
    ns, r, s0 = parts()
    mdp = build(ns, r, s0)
    assert ns.flags.writeable and r.flags.writeable  # were made read-only
    ns[0, 0, 0] = 1
    r[2] = 0.25
    assert mdp.next_state[0, 0, 0] == 0 and mdp.reward[2] == 1.0
    assert not mdp.next_state.flags.writeable and not mdp.reward.flags.writeable


def test_an_instance_built_from_views_does_not_follow_the_base():
    base_ns = np.zeros((2, 2, 3, 2), dtype=np.int64)
    base_r = np.array([[0.0, 0.5, 1.0], [1.0, 1.0, 1.0]])
    mdp = build(base_ns[0], base_r[0], 0)
    base_ns[0, 0, 0, 0] = 2
    base_r[0, 1] = 0.75
    assert mdp.next_state[0, 0, 0] == 0 and mdp.reward[1] == 0.5
