"""Monte Carlo kernel at scale: the two ‖ĝ‖² routes agree, batch sums are thread-invariant, memory is planned."""
import numba
import numpy as np
import pytest

from simulate import instances as ins
from simulate import montecarlo as mc

from _tol import assert_close

ALL = ["onpolicy", "is", "tis", "tic", "gmc", "snis"]


@pytest.fixture(scope="module")
def pair():
    mdp = ins.token_mdp(V=3, T=5, state="prev", reward="sum_mod", m=3)
    theta = ins.random_theta(mdp, 0.8, seed=1)
    return mdp, theta, ins.stale_pair(mdp, theta, 6, 0.2)


@pytest.mark.parametrize("G", [1, 3, 24])
def test_gram_and_vector_routes_agree(pair, G):
    mdp, theta, theta_mu = pair
    a = mc.run_mc(mdp, theta, theta_mu, ALL, [0.1, 0.3], G, 256, seed=5, n_chunks=8, route="gram")
    b = mc.run_mc(mdp, theta, theta_mu, ALL, [0.1, 0.3], G, 256, seed=5, n_chunks=8, route="vector")
    assert (a.route, b.route) == ("gram", "vector")
    for q in mc.EST_QUANTITIES:
        np.testing.assert_allclose(a.mean[q], b.mean[q], rtol=1e-12, atol=1e-15, err_msg=q)
        np.testing.assert_allclose(a.se[q], b.se[q], rtol=1e-8, atol=1e-15, err_msg=q)
    # per-cell sums over 256 groups, formed through a Gram matrix vs vectors: rounding ≤ n·eps·max term
    assert_close(a.cell, b.cell, 1024)
    assert_close(a.row, b.row, 1024)
    assert np.all(a.mean["sq_norm"] > 0) if G > 1 else np.all(a.mean["sq_norm"] == 0)  # G = 1: A = 0, ĝ = 0


@pytest.mark.parametrize("route", ["gram", "vector"])
def test_bit_identical_for_1_and_2_threads_with_fewer_batches_than_chunks(pair, route):
    mdp, theta, theta_mu = pair
    old = numba.get_num_threads()
    out = []
    try:
        assert numba.config.NUMBA_NUM_THREADS >= 2, "tests/conftest.py guarantees two Numba threads"
        for nt in (1, 2):
            numba.set_num_threads(nt)
            out.append(mc.run_mc(mdp, theta, theta_mu, ALL, [0.2], 16, 640, seed=3, n_chunks=16, n_batches=4, route=route))
    finally:
        numba.set_num_threads(old)
    a, b = out
    assert a.n_batches == 4 and a.cell.shape[0] == 4
    for q in mc.EST_QUANTITIES:
        np.testing.assert_array_equal(a.mean[q], b.mean[q])
        np.testing.assert_array_equal(a.se[q], b.se[q])
    np.testing.assert_array_equal(a.cell, b.cell)
    np.testing.assert_array_equal(a.row, b.row)


def test_batch_count_does_not_change_the_mean(pair):
    mdp, theta, theta_mu = pair
    a = mc.run_mc(mdp, theta, theta_mu, ["gmc", "is"], [0.2], 8, 512, seed=9, n_chunks=16, n_batches=16)
    b = mc.run_mc(mdp, theta, theta_mu, ["gmc", "is"], [0.2], 8, 512, seed=9, n_chunks=16, n_batches=2)
    for q in mc.EST_QUANTITIES:
        np.testing.assert_array_equal(a.mean[q], b.mean[q])  # scalar sums are per chunk either way
    assert_close(a.grad_mean, b.grad_mean, 1024)  # sums of 512 groups in another batching
    with pytest.raises(ValueError, match="n_batches"):
        mc.run_mc(mdp, theta, theta_mu, ["gmc"], [0.2], 8, 512, n_chunks=16, n_batches=3)


def test_route_choice_is_linear_at_large_G():
    assert mc.choose_route(4, 32, 6) == "gram"
    assert mc.choose_route(1024, 32, 6) == "vector"
    # above the crossover the choice never flips back to the quadratic route
    assert all(mc.choose_route(G, 16, 6) == "vector" for G in range(40, 5000, 97))


def test_memory_plan_at_T128_V64_fits_in_1GB():
    """The batch sums are sized by the budget, not by n_chunks·T·S·V·E (issue 18: it was 2.1 GB here)."""
    mdp = ins.token_mdp(V=64, T=128, state="count", reward="count_ge", k=2)
    nb, need = mc.plan_memory(mdp.T, mdp.S, mdp.V, 6, 16, 32, True, "gram", threads=2)
    assert 2 <= nb < 32 and 32 % nb == 0
    assert need < 2**30
    nb_v, need_v = mc.plan_memory(mdp.T, mdp.S, mdp.V, 6, 4096, 32, True, "vector", threads=2)
    assert need_v < 2**30 and nb_v >= 2


def test_memory_check_names_the_parameter(monkeypatch):
    import simulate.montecarlo.run as run

    monkeypatch.setattr(run, "available_memory", lambda: 50 * 2**20)
    mdp = ins.token_mdp(V=2, T=4)
    th = np.zeros(mdp.theta_shape)
    with pytest.raises(ValueError, match=r"^G: .*GiB of memory"):
        mc.run_mc(mdp, th, th, ["gmc"], [0.2], 1_000_000, 64)
