"""Exact engines of simulate.montecarlo.exact: the count-vector engine against a brute-force multiset sum,
the enumeration itself, the large-G bandit, and the message at each size limit (never a bare NaN)."""
import itertools
import math
import warnings

import numpy as np
import pytest
from scipy.special import gammaln

from simulate import instances as ins
from simulate import montecarlo as mc
from simulate.montecarlo.exact import _next_counts_nb

from _tol import approx, assert_close

# float64 exact expectations summed over every path or count vector in another order by the two methods:
# rounding ≤ (number of terms)·eps·(largest term); 1024·eps·max|reference| covers it
K_SUM = 1024

ALL = ["onpolicy", "is", "tis", "tic", "gmc", "snis"]


def _pair(mdp, scale, d, eta, seed=0):
    theta = ins.random_theta(mdp, scale, seed=seed)
    return theta, ins.stale_pair(mdp, theta, d, eta)


def _multisets(atoms, name, eps, G):
    """Oracle: every G-multiset of paths as an explicit G-long row, weighted by its multinomial probability,
    through the registry's row-wise weights (independent of the count engine's per-atom weights)."""
    score = atoms.dense_score()
    N = len(atoms.log_mu)
    idx = np.array(list(itertools.combinations_with_replacement(range(N), G)), dtype=np.int64).reshape(-1, G)
    counts = np.zeros((idx.shape[0], N))
    np.add.at(counts, (np.arange(idx.shape[0])[:, None], idx), 1.0)
    P = np.exp(gammaln(G + 1) - gammaln(counts + 1).sum(1) + counts @ atoms.log_mu)
    _, w, B, removed = mc.weight_functionals(name, atoms.ell[idx], eps)
    R = atoms.R[idx]
    coef = w * (R - R.mean(1, keepdims=True)) / G
    ghat = np.einsum("mi,mip->mp", coef, score[idx])
    return dict(grad=(P @ ghat).reshape(atoms.pi.shape), sq_norm=float(P @ (ghat * ghat).sum(1)),
                bias_functional=float(P @ B), removed_mass=float(P @ removed), mean_weight=float(P @ w.mean(1)))


@pytest.mark.parametrize("case", ["bandit", "tiny_mdp"])
@pytest.mark.parametrize("G", [1, 2, 5])
def test_count_engine_equals_multiset_oracle(case, G):
    if case == "bandit":
        mdp = ins.bandit(3, [1.0, 0.4, 0.0])
        theta, theta_mu = _pair(mdp, 1.0, 8, 0.3)
    else:
        mdp = ins.token_mdp(V=2, T=2, state="prev", reward="sum_mod", m=2)
        theta, theta_mu = _pair(mdp, 0.9, 8, 0.3, seed=3)
    atoms = mc.path_atoms(mdp, theta, theta_mu)
    slots = [(nm, 0.1) for nm in ALL]
    got = mc.exact_by_counts(atoms, slots, G, mdp.theta_shape)
    for nm, eps in slots:
        want = _multisets(atoms, nm, eps, G)
        assert_close(got[nm, eps]["grad"], want["grad"], K_SUM, msg=nm)
        for q in ("sq_norm", "bias_functional", "removed_mass", "mean_weight"):
            assert got[nm, eps][q] == pytest.approx(want[q], rel=1e-11, abs=1e-14), (nm, q)


@pytest.mark.parametrize("N,G", [(1, 5), (3, 1), (3, 7), (5, 4)])
def test_count_vectors_are_all_compositions_once(N, G):
    r = np.zeros(N, dtype=np.int64)
    r[0] = G
    state = np.array([G, -1, 0], dtype=np.int64)
    rows = []
    block = np.empty((3, N), dtype=np.int64)  # small blocks: the state must carry across calls
    while True:
        m = _next_counts_nb(r, state, block)
        rows += [tuple(x) for x in block[:m]]
        if m == 0 or state[2]:
            break
    assert len(rows) == math.comb(N + G - 1, G) == len(set(rows))
    assert all(sum(x) == G and min(x) >= 0 for x in rows)
    assert mc.n_count_vectors(N, G) == pytest.approx(math.comb(N + G - 1, G), rel=1e-9)


def test_count_vectors_past_the_float_range_are_a_limit_not_an_error():
    assert mc.n_count_vectors(4**8, 10**6) == math.inf
    mdp = ins.token_mdp(V=4, T=8)  # 65 536 paths, G = 10^6: the CLI's `--G 1000000` on the default instance
    theta, theta_mu = _pair(mdp, 0.5, 4, 0.1)
    ex = mc.exact_expectations(mdp, theta, theta_mu, "gmc", 0.2, 10**6, max_atoms=10**6)
    assert ex["grad"] is None and "inf count vectors" in ex["reasons"]["grad"]


def test_gmc_exact_at_G_1024_on_bandit_matches_monte_carlo():
    """The count engine at G = 1024 on a 3-arm bandit (525 825 count vectors) with a pair far enough apart
    (χ² ≈ 9.5) that the cap removes ~2 % of the mass, against the kernel (independent code); z = 5."""
    bd = ins.bandit(3, [1.0, 0.4, 0.0])
    theta = ins.random_theta(bd, 1.0, seed=0)
    theta_mu = theta.copy()
    theta_mu[0, 0] += np.array([-2.5, 1.0, 1.5])
    ex = mc.exact_table(bd, theta, theta_mu, [("gmc", 0.05), ("is", 0.05)], 1024)
    g = ex["gmc", 0.05]
    assert g["removed_mass"] > 0.01  # the cap is active: the comparison is not of two zeros
    # a sum over C(3 + 1024 − 1, 1024) ≈ 5.3e5 count vectors: random-walk rounding ~ √n·eps ≈ 730·eps, ×16
    n_terms = mc.n_count_vectors(3, 1024)
    assert g["mean_weight"] + g["removed_mass"] == approx(1.0, 16 * n_terms ** 0.5)  # E ρ̄ = 1
    assert_close(ex["is", 0.05]["grad"], (1 - 1 / 1024) * ins.exact_grad_J(bd, theta), 16 * n_terms ** 0.5)
    res = mc.run_mc(bd, theta, theta_mu, ["gmc"], [0.05], 1024, 2048, seed=3)
    for q in ("sq_norm", "bias_functional", "removed_mass", "mean_weight"):
        assert abs(res.mean[q][0] - g[q]) <= 5.0 * res.se[q][0], q
    assert np.all(np.abs(res.grad_mean[0] - g["grad"]) <= 5.0 * res.grad_se[0] + 1e-15)


def test_gmc_exact_matches_monte_carlo_at_G_64():
    """The count engine against the kernel (independent code) at a G no multiset enumeration reaches; z = 5."""
    bd = ins.bandit(3, [1.0, 0.4, 0.0])
    theta, theta_mu = _pair(bd, 1.0, 8, 0.15)
    ex = mc.exact_expectations(bd, theta, theta_mu, "gmc", 0.05, 64)
    res = mc.run_mc(bd, theta, theta_mu, ["gmc"], [0.05], 64, 8_000, seed=2)
    for q in ("sq_norm", "bias_functional", "removed_mass", "mean_weight"):
        assert abs(res.mean[q][0] - ex[q]) <= 5.0 * res.se[q][0] + 1e-14, q
    assert ex["removed_mass"] > 0  # the cap is active at this staleness: the test compares something


def test_limit_messages_name_each_limit():
    bd = ins.bandit(3, [1.0, 0.4, 0.0])
    theta, theta_mu = _pair(bd, 1.0, 4, 0.15)
    # count vectors
    ex = mc.exact_expectations(bd, theta, theta_mu, "gmc", 0.2, 64, max_count_states=100)
    assert ex["grad"] is None and ex["sq_norm"] is None
    assert "max_count_states = 100" in ex["reasons"]["grad"] and "MAX_COUNT_STATES" in ex["reasons"]["sq_norm"]
    # work of the count engine (C(N+G-1, G)·N² = 2145·9 at G = 64)
    ex = mc.exact_expectations(bd, theta, theta_mu, "gmc", 0.2, 64, max_count_work=1e4)
    assert ex["grad"] is None and "max_count_work = 1e+04 (MAX_COUNT_WORK)" in ex["reasons"]["grad"]
    assert mc.exact_expectations(bd, theta, theta_mu, "gmc", 0.2, 64, max_count_work=2e4)["grad"] is not None
    # atoms of the count engine
    ex = mc.exact_expectations(bd, theta, theta_mu, "snis", 0.2, 4, max_atoms=2)
    assert "max_atoms = 2" in ex["reasons"]["grad"] and "MAX_GROUP_ATOMS" in ex["reasons"]["grad"]
    # path sums: tis needs the paths, onpolicy/is do not (dynamic programming at any size)
    big = ins.token_mdp(V=2, T=21, state="count", reward="count_ge", k=3)
    th, thm = _pair(big, 0.5, 2, 0.1)
    ex = mc.exact_table(big, th, thm, [("tis", 0.2), ("is", 0.2)], 4)
    assert ex["tis", 0.2]["grad"] is None and "max_paths = 1048576" in ex["tis", 0.2]["reasons"]["grad"]
    assert "MAX_ENUM_PATHS" in ex["tis", 0.2]["reasons"]["removed_mass"]
    assert ex["is", 0.2]["grad"] is not None and ex["is", 0.2]["removed_mass"] == 0.0
    assert "MAX_ENUM_PATHS" in ex["is", 0.2]["reasons"]["sq_norm"]


def test_bias_table_warns_once_per_limit_and_never_leaves_a_bare_nan(monkeypatch):
    import simulate.montecarlo.tables as tables

    real = tables.exact_table
    monkeypatch.setattr(tables, "exact_table", lambda *a, **k: real(*a, **k, max_count_states=10))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = mc.bias_table("bandit", ["gmc", "tis"], [0.2], [8], [0, 4], n_groups=256, n_chunks=4, progress=False)
    lim = [w for w in caught if issubclass(w.category, mc.ExactLimitWarning)]
    assert len(lim) == 1 and "max_count_states = 10" in str(lim[0].message)
    missing = df[df.exact.isna()]
    assert len(missing) > 0 and (missing.exact_note.str.len() > 0).all()
    assert set(missing[missing.quantity == "grad_bias"].estimator) == {"gmc"}  # tis keeps its path-sum value
    assert missing[missing.quantity == "ess"].exact_note.str.contains("ESS").all()


def test_one_enumeration_per_table_cell_shared_by_all_estimators(monkeypatch):
    """bias_table enumerates the paths once and the count vectors once per (G, d), whatever the number of estimators."""
    import simulate.montecarlo.exact as exact
    import simulate.montecarlo.tables as tables

    calls = {"counts": 0, "paths": 0}
    real_counts, real_paths = exact.exact_by_counts, tables.path_atoms

    def counting_counts(*a, **k):
        calls["counts"] += 1
        return real_counts(*a, **k)

    def counting_paths(*a, **k):
        calls["paths"] += 1
        return real_paths(*a, **k)

    monkeypatch.setattr(exact, "exact_by_counts", counting_counts)
    monkeypatch.setattr(tables, "path_atoms", counting_paths)
    df = mc.bias_table("bandit", ALL, [0.1, 0.2], [2, 3], [0, 4], n_groups=64, n_chunks=4, progress=False)
    assert calls == {"counts": 4, "paths": 4}  # 2 G × 2 d, for 6 estimators × 2 ε
    assert df[df.quantity == "grad_bias"].exact.notna().all()
