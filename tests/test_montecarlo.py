"""Monte Carlo kernel (simulate.montecarlo): exactness, convergence to exact expectations, claims C1/C2/C7/C8.

Statistical tests use fixed seeds and the tolerance z·σ̂/√n with z = 5 (Z below). Per-coordinate
standard errors of E ĝ come from 32 chunk means (t with 31 dof: P(|t| > 5) ≈ 2e-5 per coordinate).
"""
import numba
import numpy as np
import pytest

from simulate import instances as ins
from simulate import montecarlo as mc

from _tol import approx, assert_close

# float64 sums over a few hundred paths or groups, formed in another order by the two routes compared:
# rounding ≤ (number of terms)·eps·(largest term); 1024·eps·max|reference| (≈ 2e-13 at magnitude 1) covers it
K_SUM = 1024

Z = 5.0
ALL = ["onpolicy", "is", "tis", "tic", "gmc", "snis"]


def _pair(mdp, scale, d, eta, seed=0):
    theta = ins.random_theta(mdp, scale, seed=seed)
    return theta, ins.stale_pair(mdp, theta, d, eta)


@pytest.fixture(scope="module")
def small_mdp():
    return ins.token_mdp(V=3, T=4, state="prev", reward="sum_mod", m=3)


def test_numba_equals_numpy_reference_on_predrawn_uniforms(small_mdp):
    mdp = small_mdp
    theta, theta_mu = _pair(mdp, 0.7, 4, 0.2)
    n, G = 64, 8
    U = np.random.default_rng(0).random((n, G, mdp.T))
    res = mc.run_mc(mdp, theta, theta_mu, ALL, [0.1, 0.2], G, n, uniforms=U, n_chunks=8)
    ref = mc.reference_mc(mdp, theta, theta_mu, ALL, [0.1, 0.2], U)
    for e, slot in enumerate(res.slots):
        for q in mc.EST_QUANTITIES:
            x = ref["slots"][slot][q]
            assert res.mean[q][e] == pytest.approx(x.mean(), rel=1e-12, abs=1e-15), (slot, q)
            assert res.se[q][e] == pytest.approx(x.std(ddof=1) / np.sqrt(n), rel=1e-6, abs=1e-15), (slot, q)
        assert_close(res.grad_mean[e] * n, ref["grad_sum"][e], K_SUM)
    for q in mc.GROUP_QUANTITIES:
        assert res.mean[q] == pytest.approx(ref[q].mean(), rel=1e-12, abs=1e-15)
    # the weights of the reference are the registry's, group by group
    from asyncgrpo import estimators as est

    for nm in ALL:
        for g in range(3):
            np.testing.assert_allclose(
                np.exp(mc.log_weights_batch(nm, ref["ell"][g : g + 1], 0.1)[0]), est.get(nm, 0.1)(ref["ell"][g]), rtol=1e-13
            )


def test_same_seed_same_numbers_for_any_thread_count(small_mdp):
    mdp = small_mdp
    theta, theta_mu = _pair(mdp, 0.7, 4, 0.2)
    old = numba.get_num_threads()
    out = []
    try:
        assert numba.config.NUMBA_NUM_THREADS >= 2, "tests/conftest.py guarantees two Numba threads"
        for nt in (1, 2):
            numba.set_num_threads(nt)
            out.append(mc.run_mc(mdp, theta, theta_mu, ALL, [0.2], 8, 640, seed=3, n_chunks=16))
    finally:
        numba.set_num_threads(old)
    a, b = out
    for q in mc.EST_QUANTITIES:
        np.testing.assert_array_equal(a.mean[q], b.mean[q])
    np.testing.assert_array_equal(a.grad_batches, b.grad_batches)
    c = mc.run_mc(mdp, theta, theta_mu, ALL, [0.2], 8, 640, seed=4, n_chunks=16)
    assert not np.array_equal(a.grad_batches, c.grad_batches)


def test_T1_token_mdp_equals_bandit():
    K = 4
    tm = ins.token_mdp(V=K, T=1, state="count", reward="count_ge", k=1)
    bd = ins.bandit(K, [1.0, 0.0, 0.0, 0.0])
    th = ins.random_theta(tm, 1.0, seed=2)
    th_mu = th.copy()
    th_mu[0, 0] += np.array([0.5, -0.2, 0.1, 0.0])
    thb, thb_mu = np.zeros(bd.theta_shape), np.zeros(bd.theta_shape)
    thb[0, 0], thb_mu[0, 0] = th[0, 0], th_mu[0, 0]
    a = mc.run_mc(tm, th, th_mu, ALL, [0.2], 4, 320, seed=1, n_chunks=8)
    b = mc.run_mc(bd, thb, thb_mu, ALL, [0.2], 4, 320, seed=1, n_chunks=8)
    for q in mc.EST_QUANTITIES:
        np.testing.assert_allclose(a.mean[q], b.mean[q], rtol=1e-13)
    assert_close(a.grad_mean[:, 0, 0], b.grad_mean[:, 0, 0], K_SUM)


def test_exact_per_trajectory_formula_equals_multiset_enumeration():
    """Two exact methods (DP/path sums with the baseline cross-term vs. G-multiset enumeration) agree."""
    mdp = ins.token_mdp(V=2, T=3, state="count", reward="count_ge", k=2)
    theta, theta_mu = _pair(mdp, 0.7, 4, 0.3, seed=1)
    atoms = mc.path_atoms(mdp, theta, theta_mu)
    for nm in ("onpolicy", "is", "tis", "tic"):
        ex = mc.exact_expectations(mdp, theta, theta_mu, nm, 0.1, 4, max_count_states=0)  # no count engine
        assert ex["sq_norm"] is None and "max_count_states" in ex["reasons"]["sq_norm"]
        grp = mc.exact_by_counts(atoms, [(nm, 0.1)], 4, mdp.theta_shape)[nm, 0.1]
        assert_close(ex["grad"], grp["grad"], K_SUM)
        for q in ("bias_functional", "removed_mass", "mean_weight"):
            assert ex[q] == approx(grp[q], K_SUM, scale=max(abs(grp[q]), 1.0))


@pytest.mark.parametrize("G", [2, 5])
def test_C8_exact_is_shrinks_by_1_minus_1_over_G(G):
    bd = ins.bandit(3, [1.0, 0.4, 0.0])
    theta, theta_mu = _pair(bd, 1.0, 4, 0.3)
    ex = mc.exact_expectations(bd, theta, theta_mu, "is", 0.2, G)
    grp = mc.exact_by_counts(mc.path_atoms(bd, theta, theta_mu), [("is", 0.2)], G, bd.theta_shape)["is", 0.2]
    want = (1 - 1 / G) * ins.exact_grad_J(bd, theta)
    assert_close(ex["grad"], want, K_SUM)
    assert_close(grp["grad"], want, K_SUM)


def _assert_within(res, e, exact, Z=Z):
    m, se = res.grad_mean[e], res.grad_se[e]
    assert np.all(np.abs(m - exact["grad"]) <= Z * se + 1e-12), (res.slots[e], np.max(np.abs(m - exact["grad"]) / (se + 1e-300)))
    for q in ("bias_functional", "removed_mass", "mean_weight", "sq_norm"):
        if exact.get(q) is not None:
            assert abs(res.mean[q][e] - exact[q]) <= Z * res.se[q][e] + 1e-12, (res.slots[e], q)


def test_mc_converges_to_exact_on_bandit():
    """All six estimators (gmc/snis by the count engine), G = 4, 64 000 groups."""
    bd = ins.bandit(3, [1.0, 0.4, 0.0])
    theta, theta_mu = _pair(bd, 1.0, 6, 0.15)
    G = 4
    res = mc.run_mc(bd, theta, theta_mu, ALL, [0.1], G, 64_000, seed=5)
    for e, (nm, eps) in enumerate(res.slots):
        _assert_within(res, e, mc.exact_expectations(bd, theta, theta_mu, nm, eps, G))


def test_mc_converges_to_exact_on_token_mdp(small_mdp):
    """Per-trajectory estimators by the exact formula, G = 8; gmc/snis on a tiny MDP by the count engine."""
    mdp = small_mdp
    theta, theta_mu = _pair(mdp, 0.7, 6, 0.15)
    res = mc.run_mc(mdp, theta, theta_mu, ["onpolicy", "is", "tis", "tic"], [0.1], 8, 32_000, seed=6)
    for e, (nm, eps) in enumerate(res.slots):
        _assert_within(res, e, mc.exact_expectations(mdp, theta, theta_mu, nm, eps, 8))
    tiny = ins.token_mdp(V=2, T=2, state="prev", reward="sum_mod", m=2)
    theta, theta_mu = _pair(tiny, 0.7, 6, 0.2)
    res = mc.run_mc(tiny, theta, theta_mu, ["gmc", "snis"], [0.1], 6, 32_000, seed=7)
    for e, (nm, eps) in enumerate(res.slots):
        _assert_within(res, e, mc.exact_expectations(tiny, theta, theta_mu, nm, eps, 6))


@pytest.fixture(scope="module")
def table():
    return mc.bias_table("token-mdp", ALL, [0.1, 0.3], [4, 64], [0, 8], n_groups=6400, seed=1, progress=False)


def _val(df, est_, eps, G, d, q):
    row = df[(df.estimator == est_) & (df.eps == eps) & (df.G == G) & (df.d == d) & (df.quantity == q)]
    assert len(row) == 1
    return row.iloc[0]


def test_table_shape_and_exact_columns(table):
    cols = ["instance", "estimator", "eps", "G", "d", "quantity", "value", "se", "bound", "exact", "exact_note", "n"]
    assert list(table.columns) == cols
    # per (G,d): 4 group rows + 6 estimators × 2 eps × (3 bias parts + 5 quantities)
    assert len(table) == 4 * (4 + 6 * 2 * 8)
    # no bare NaN: every missing exact value says why
    assert (table.exact.notna() | (table.exact_note.str.len() > 0)).all()
    r = table[(table.quantity == "chi2") & (table.d == 8)].iloc[0]
    assert abs(r.value - r.exact) <= Z * r.se
    for nm in ("tis", "tic", "is", "onpolicy"):
        r = _val(table, nm, 0.1, 4, 8, "bias_functional")
        assert abs(r.value - r.exact) <= Z * r.se + 1e-12


def test_C1_second_moment_within_M2(table):
    """E‖ĝ‖² ≤ M₂(ε) for the estimators in 𝒲_ε (statistical), and ≤ (1+ε)·Ŝ on the same samples (pathwise)."""
    for nm in ("tis", "tic", "gmc"):
        for eps in (0.1, 0.3):
            for G in (4, 64):
                for d in (0, 8):
                    r = _val(table, nm, eps, G, d, "sq_norm")
                    assert not np.isnan(r.bound)
                    assert r.value - Z * r.se <= r.bound
                    c1 = table[(table.quantity == "c1_rhs") & (table.G == G) & (table.d == d)].iloc[0]
                    assert r.value <= (1 + eps) * c1.value * (1 + 1e-12)
                    assert abs(c1.value - c1.exact) <= Z * c1.se


def test_C2_gmc_smallest_bias_functional_and_removed_mass(table):
    """Same samples, so the ordering holds group by group and hence for the means (C2)."""
    for eps in (0.1, 0.3):
        for G in (4, 64):
            g = _val(table, "gmc", eps, G, 8, "bias_functional").value
            for other in ("tis", "tic"):
                assert g <= _val(table, other, eps, G, 8, "bias_functional").value
                assert _val(table, "gmc", eps, G, 8, "removed_mass").value <= _val(table, other, eps, G, 8, "removed_mass").value
            # C4 bound at the same point (theory/bounds): measured never above it beyond MC error
            r = _val(table, "gmc", eps, G, 8, "bias_functional")
            assert r.value - Z * r.se <= r.bound


def test_C7_gmc_bias_falls_with_G_tis_tic_flat(table):
    for eps in (0.1,):
        # 𝔅 and removed mass of gmc fall with G well beyond MC error; the bias vector's norm is
        # noisier, so it is only required not to grow and to be far below tis/tic at G = 64
        g4, g64 = (_val(table, "gmc", eps, G, 8, "weighting_bias") for G in (4, 64))
        assert g64.value <= g4.value + Z * np.hypot(g4.se, g64.se)
        for nm in ("tis", "tic"):
            o = _val(table, nm, eps, 64, 8, "weighting_bias")
            assert g64.value + Z * g64.se < o.value - Z * o.se
        m4, m64 = (_val(table, "gmc", eps, G, 8, "removed_mass") for G in (4, 64))
        assert m64.value + Z * m64.se < m4.value - Z * m4.se
        b4, b64 = (_val(table, "gmc", eps, G, 8, "bias_functional") for G in (4, 64))
        assert b64.value + Z * b64.se < b4.value - Z * b4.se
        for nm in ("tis", "tic"):
            s4, s64 = (_val(table, nm, eps, G, 8, "weighting_bias") for G in (4, 64))
            # exact: (1−1/G)·const, so the G=64 value is not below the G=4 one
            assert s64.exact >= s4.exact > 0
            assert abs(s64.value - s64.exact) <= Z * s64.se and abs(s4.value - s4.exact) <= Z * s4.se
            f4, f64 = (_val(table, nm, eps, G, 8, "bias_functional") for G in (4, 64))
            assert abs(f4.value - f64.value) <= Z * np.hypot(f4.se, f64.se)  # E𝔅 does not depend on G


def test_C8_is_stale_bias_zero(table):
    """E ĝ_is = (1−1/G)∇J even under staleness: the weighting part of `is` is 0, its total bias the baseline ‖∇J‖/G."""
    for G in (4, 64):
        r = _val(table, "is", 0.1, G, 8, "weighting_bias")
        assert r.exact == pytest.approx(0.0, abs=1e-12)
        assert r.value == 0.0
        gb = _val(table, "is", 0.1, G, 8, "grad_bias")
        assert abs(gb.value - gb.exact) <= Z * gb.se
        base = _val(table, "is", 0.1, G, 8, "baseline_bias")
        assert gb.exact == pytest.approx(base.exact, rel=1e-12)  # C8: total = baseline for `is`


def test_cli_bias_writes_csv(tmp_path, capsys):
    from simulate.__main__ import main

    out = tmp_path / "b.csv"
    rc = main(["bias", "--instance", "bandit", "--estimators", "gmc,tis", "--eps", "0.2", "--G", "4",
               "--delay", "0,4", "--n-groups", "640", "--out", str(out)])
    assert rc == 0
    import pandas as pd

    df = pd.read_csv(out)
    assert set(df.estimator) == {"gmc", "tis", "-"}
    assert "bias_functional" in capsys.readouterr().out
    assert main(["bias", "--estimators", "nope", "--n-groups", "64"]) == 2


def test_validation():
    mdp = ins.token_mdp(V=2, T=2)
    th = np.zeros(mdp.theta_shape)
    with pytest.raises(ValueError, match="G"):
        mc.run_mc(mdp, th, th, ["gmc"], [0.2], 0, 64)
    with pytest.raises(ValueError, match="n_groups"):
        mc.run_mc(mdp, th, th, ["gmc"], [0.2], 4, 3)
    with pytest.raises(ValueError, match="eps"):
        mc.run_mc(mdp, th, th, ["gmc"], [-0.2], 4, 64)
    with pytest.raises(ValueError, match="estimator"):
        mc.run_mc(mdp, th, th, ["grpo"], [0.2], 4, 64)
    with pytest.raises(ValueError, match="uniforms"):
        mc.run_mc(mdp, th, th, ["gmc"], [0.2], 4, 64, uniforms=np.zeros((2, 4, 2)))
    with pytest.raises(ValueError, match="instance"):
        mc.bias_table("chess")
    with pytest.raises(ValueError, match="delays"):
        mc.bias_table("bandit", delays=[-1], progress=False)


def test_pack_table_decodes_to_alias_tables_and_cells(small_mdp):
    """Each line of the packed table holds prob_j and both outcomes (j and alias_j): action, s', ℓ, π, ‖π‖²."""
    mdp = small_mdp
    theta, theta_mu = _pair(mdp, 0.7, 4, 0.2)
    prep = mc.prepare(mdp, theta, theta_mu)
    tab = prep.tab
    T, S, V = mdp.theta_shape
    t, s, j = np.meshgrid(np.arange(T), np.arange(S), np.arange(V), indexing="ij")
    np.testing.assert_array_equal(tab[..., 0], prep.prob)
    np.testing.assert_array_equal(tab[..., 7], np.broadcast_to(prep.pin2[..., None], (T, S, V)))
    for off, act in ((1, j), (4, prep.alias)):
        enc = tab[..., off].astype(np.int64)
        np.testing.assert_array_equal(enc >> 16, act)
        np.testing.assert_array_equal(enc & 0xFFFF, mdp.next_state[t, s, act])
        np.testing.assert_array_equal(tab[..., off + 1], prep.lr[t, s, act])
        np.testing.assert_array_equal(tab[..., off + 2], prep.pi[t, s, act])


def test_reference_functionals_equal_registry_kernels(small_mdp):
    """The NumPy reference (which the Numba kernel must equal) uses the registry's 𝔅, removed mass and mean w."""
    from asyncgrpo.estimators.kernels import group_functionals_nb, log_weights_nb
    from asyncgrpo.estimators.reference import CODES

    mdp = small_mdp
    theta, theta_mu = _pair(mdp, 0.7, 8, 0.3)
    U = np.random.default_rng(1).random((20, 6, mdp.T))
    ref = mc.reference_mc(mdp, theta, theta_mu, ALL, [0.1], U)
    for (nm, eps), q in ref["slots"].items():
        for g in range(20):
            ell = ref["ell"][g]
            logw = log_weights_nb(CODES[nm], ell, eps, np.empty(6))
            _, B, removed, mw = group_functionals_nb(ell, logw)
            assert q["bias_functional"][g] == pytest.approx(B, rel=1e-12, abs=1e-15), nm
            assert q["removed_mass"][g] == pytest.approx(removed, rel=1e-12, abs=1e-15), nm
            assert q["mean_weight"][g] == pytest.approx(mw, rel=1e-12), nm
            w = np.exp(logw)
            assert q["ess"][g] == pytest.approx(w.sum() ** 2 / (w * w).sum() if w.any() else 0.0, rel=1e-12), nm


def test_extreme_staleness_stays_finite_and_matches_reference():
    """Large ℓ (ρ up to ~e^30): the kernel's fast paths (w = ρ when log w = ℓ) and the ESS shift agree with NumPy."""
    mdp = ins.token_mdp(V=3, T=6, state="prev", reward="sum_mod", m=3)
    theta = ins.random_theta(mdp, 3.0, seed=4)
    theta_mu = ins.random_theta(mdp, 3.0, seed=5)
    n, G = 32, 8
    U = np.random.default_rng(2).random((n, G, mdp.T))
    res = mc.run_mc(mdp, theta, theta_mu, ALL, [0.2], G, n, uniforms=U, n_chunks=4)
    ref = mc.reference_mc(mdp, theta, theta_mu, ALL, [0.2], U)
    assert np.abs(ref["ell"]).max() > 10
    for e, slot in enumerate(res.slots):
        for q in mc.EST_QUANTITIES:
            x = ref["slots"][slot][q]
            assert np.isfinite(res.mean[q][e]), (slot, q)
            assert res.mean[q][e] == pytest.approx(x.mean(), rel=1e-12, abs=1e-15), (slot, q)


def test_pack_table_refuses_cell_ids_beyond_int32():
    """The kernel keeps cell ids (t·S + s)·V + a in int32: T·S·V ≥ 2^31 is refused before any allocation."""
    from simulate.montecarlo.kernel import pack_table

    shape = (2**11, 2**10, 2**10)  # zero-stride views: no memory behind them
    z = np.broadcast_to(0.0, shape)
    zi = np.broadcast_to(np.int64(0), shape)
    with pytest.raises(ValueError, match="T·S·V must be < 2\\^31"):
        pack_table(z, zi, z, z, np.broadcast_to(0.0, shape[:2]), zi)
