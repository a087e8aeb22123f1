"""Delay models produce their configured distributions (simulate/delays.py).

Statistical checks: fixed seeds, stated sample sizes, tolerance ``z·σ̂/√n`` with ``z = 4``
(per category; with ≤ 20 categories a false alarm has probability < 1e-3 under the model).
For the queue, consecutive delays are dependent, so ``σ̂`` comes from batch means.
"""
import numpy as np
import pytest

from simulate import delays as dl

Z = 4.0


def _check_pmf(d, pmf, z=Z, n_batches=None):
    """Every ``P̂(d = j)`` within ``z·σ̂/√n`` of ``pmf[j]`` (σ̂ binomial, or from batch means)."""
    n = d.size
    for j, p in enumerate(pmf):
        ind = (d == j).astype(float)
        if n_batches is None:
            se = np.sqrt(p * (1 - p) / n)
        else:
            means = ind[: n - n % n_batches].reshape(n_batches, -1).mean(axis=1)
            se = means.std(ddof=1) / np.sqrt(n_batches)
        assert abs(ind.mean() - p) <= z * se + 1e-12, (j, ind.mean(), p, se)


def test_fixed_is_exact_and_clipped_at_k():
    d = dl.fixed(5).sample(50, seed=3)
    assert d.dtype == np.int64
    np.testing.assert_array_equal(d, np.minimum(np.arange(50), 5))


def test_uniform_distribution():
    D, K = 6, 40_000
    d = dl.uniform(D).sample(K, seed=1)[D:]  # steps k ≥ D are never clipped
    assert d.min() == 0 and d.max() == D
    _check_pmf(d, np.full(D + 1, 1 / (D + 1)))


def test_geometric_distribution_and_mean():
    p, K = 0.3, 40_000
    d = dl.geometric(p).sample(K, seed=2)[200:]  # P(d > 200) ≈ 1e-31: clipping at k never binds
    pmf = p * (1 - p) ** np.arange(12)
    _check_pmf(d, pmf)
    mean, sd = (1 - p) / p, np.sqrt(1 - p) / p
    assert abs(d.mean() - mean) <= Z * sd / np.sqrt(d.size)


def test_geometric_truncation():
    d = dl.geometric(0.1, D=3).sample(2000, seed=0)
    assert d.max() == 3 and np.all(d <= np.minimum(np.arange(2000), 3))


def test_queue_single_actor_is_synchronous():
    for gen in dl.GEN_DISTS:
        np.testing.assert_array_equal(dl.queue(1, gen, 2.0).sample(100, seed=0), 0)


def test_queue_constant_time_gives_n_minus_one():
    n = 4
    d = dl.queue(n, "constant").sample(100, seed=0)
    np.testing.assert_array_equal(d, np.minimum(np.arange(100), n - 1))


def test_queue_exponential_is_geometric():
    """Memoryless generation: the next finisher is uniform over the n in-flight actors, so
    ``P(d = j) = (1/n)(1 − 1/n)^j`` in steady state."""
    n, K = 4, 60_000
    d = dl.queue(n, "exponential").sample(K, seed=5)[500:]
    q = 1 / n
    _check_pmf(d, q * (1 - q) ** np.arange(10), n_batches=50)


def test_queue_mean_is_n_minus_one_and_lognormal_tails_grow():
    """Each arrival finds exactly n−1 other batches in flight, so the mean delay is n−1 for any law;
    a larger log-sd σ only spreads it (heavy tail)."""
    n, K = 8, 40_000
    light = dl.queue(n, "lognormal", 0.1).sample(K, seed=7)[1000:]
    heavy = dl.queue(n, "lognormal", 2.0).sample(K, seed=7)[1000:]
    for d in (light, heavy):
        means = d[: d.size - d.size % 50].reshape(50, -1).mean(axis=1)
        assert abs(d.mean() - (n - 1)) <= Z * means.std(ddof=1) / np.sqrt(50) + 1e-9
    assert np.quantile(heavy, 0.999) > 4 * np.quantile(light, 0.999)
    assert light.max() <= 2 * n


def test_same_seed_same_delays_and_different_seed_differs():
    spec = dl.queue(6, "lognormal", 1.5)
    np.testing.assert_array_equal(spec.sample(500, seed=11), spec.sample(500, seed=11))
    assert not np.array_equal(spec.sample(500, seed=11), spec.sample(500, seed=12))
    g = dl.geometric(0.2)
    np.testing.assert_array_equal(g.sample(500, seed=[3, 1]), g.sample(500, seed=[3, 1]))


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(kind="nope"), "kind"),
        (dict(kind="fixed", d=-1), "d must"),
        (dict(kind="uniform", D=1.5), "D must"),
        (dict(kind="geometric", p=0.0), "p must"),
        (dict(kind="queue", n_actors=0), "n_actors"),
        (dict(kind="queue", gen_dist="pareto"), "gen_dist"),
        (dict(kind="queue", gen_sigma=-1.0), "gen_sigma"),
    ],
)
def test_bad_input_names_parameter(kwargs, word):
    with pytest.raises(ValueError, match=word):
        dl.DelaySpec(**kwargs)


def test_bad_K():
    with pytest.raises(ValueError, match="K must"):
        dl.fixed(1).sample(0)
