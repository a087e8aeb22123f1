"""Contracts of the core that no other test pinned (issue 19: mutants that survived the suite).

Each test here was written against a mutant that the rest of the suite let through (``make mutate``,
``mutation/README.md``): a moved boundary, a changed default, an unchecked branch. Values are exact
(no tolerance) unless stated; statistical checks use fixed seeds and ``z = 4``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulate import delays as dl

# --------------------------------------------------------------------------------------------------
# simulate/delays.py (docs/THEORY.md §1, "Staleness")


def test_delay_spec_defaults_are_pinned():
    # The defaults are part of the interface: result tables and CLIs build specs from them.
    s = dl.DelaySpec()
    assert (s.kind, s.d, s.D, s.p, s.n_actors, s.gen_dist, s.gen_sigma) == ("fixed", 0, 0, 0.5, 1, "lognormal", 1.0)
    assert dl.geometric(0.3).D == 0 and dl.geometric(0.3).max_delay is None
    q = dl.queue(3)
    assert (q.gen_dist, q.gen_sigma) == ("lognormal", 1.0)
    np.testing.assert_array_equal(s.sample(20), 0)
    assert s.sample(5).tolist() == s.sample(5, seed=0).tolist()  # default seed 0


@pytest.mark.parametrize("p", [1.0 + 1e-12, 1.5, 2.0, 3.0, -0.5, 0.0])
def test_geometric_p_outside_0_1_is_rejected(p):
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\]"):
        dl.geometric(p)


def test_geometric_p_one_is_accepted_and_gives_no_delay():
    d = dl.geometric(1.0).sample(50, seed=4)
    np.testing.assert_array_equal(d, 0)
    # p only matters for the geometric kind: another kind ignores it
    assert dl.DelaySpec("fixed", d=2, p=7.0).sample(4).tolist() == [0, 1, 2, 2]


@pytest.mark.parametrize("spec, want", [
    (dl.fixed(4), 4), (dl.fixed(0), 0), (dl.uniform(3), 3), (dl.geometric(0.3), None),
    (dl.geometric(0.3, D=2), 2), (dl.geometric(0.3, D=1), 1), (dl.queue(4), None), (dl.queue(1, "constant"), None),
])
def test_max_delay(spec, want):
    assert spec.max_delay == want


@pytest.mark.parametrize("spec, want", [
    (dl.fixed(4), "fixed(d=4)"), (dl.uniform(3), "uniform(D=3)"), (dl.geometric(0.25), "geometric(p=0.25)"),
    (dl.geometric(0.25, D=5), "geometric(p=0.25,D=5)"), (dl.queue(4), "queue(n=4,lognormal,s=1)"),
    (dl.queue(2, "lognormal", 1.5), "queue(n=2,lognormal,s=1.5)"), (dl.queue(3, "exponential"), "queue(n=3,exponential)"),
    (dl.queue(3, "constant", 2.0), "queue(n=3,constant)"),
])
def test_label(spec, want):
    assert spec.label == want


def test_integer_parameters_lower_bounds_and_types():
    assert dl.DelaySpec("queue", n_actors=1).sample(3).tolist() == [0, 0, 0]  # n_actors = 1 is allowed
    assert dl.fixed(2.0).sample(4).tolist() == [0, 1, 2, 2]                   # 2.0 is an integer
    assert dl.fixed(1).sample(1).tolist() == [0]                                # K = 1 is allowed
    for bad in (dict(d=True), dict(d=0.5), dict(D=-1), dict(n_actors=0)):
        with pytest.raises(ValueError, match="must be an integer >= "):
            dl.DelaySpec(**bad)
    with pytest.raises(ValueError, match="K must be an integer >= 1"):
        dl.fixed(1).sample(-1)


@pytest.mark.parametrize("sigma, ok", [(0.0, True), (1e-9, True), (-1e-9, False), (math.inf, False), (math.nan, False)])
def test_gen_sigma_range(sigma, ok):
    if ok:
        d = dl.queue(3, "lognormal", sigma).sample(30)
        assert d.min() >= 0
    else:
        with pytest.raises(ValueError, match="gen_sigma must be a finite number >= 0"):
            dl.queue(3, "lognormal", sigma)


def test_uniform_D_zero_and_geometric_truncation_at_D():
    np.testing.assert_array_equal(dl.uniform(0).sample(30, seed=1), 0)
    # truncation at D = 1: every delay in {0, 1}, and both values occur (p = 0.1 gives P(d >= 1) = 0.9)
    d = dl.geometric(0.1, D=1).sample(200, seed=2)[1:]
    assert set(d.tolist()) == {0, 1}
    # the uniform draw reaches D itself (inclusive upper end) and the clip at k binds at step 0
    u = dl.uniform(2).sample(300, seed=3)
    assert u[0] == 0 and u.max() == 2 and np.all(u <= np.minimum(np.arange(300), 2))


def test_queue_lognormal_with_sigma_zero_is_the_constant_queue():
    # σ = 0: every generation time is exactly 1, so the queue is the constant one (d_k = n − 1 after warm-up)
    n = 3
    np.testing.assert_array_equal(dl.queue(n, "lognormal", 0.0).sample(40), np.minimum(np.arange(40), n - 1))
