"""Numeric checks of every theory/ result (hypothesis at random points) and proof that the symbolic
checks can fail. Runs in seconds: the sympy derivations are cached per process."""
import itertools
import re

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq, minimize, minimize_scalar

from theory import bounds, c2_kkt, c3_delay, c4_bias, c5_tuning, c8_baseline, lemmas
from theory.claims import ALL, CLAIMS
from theory.symbols import d as d_sym
from theory.symbols import eps as eps_sym
from theory.symbols import S, x
from theory.weights import IN_CLASS, bias_functional, in_class, removed_mass, weights

FAST = settings(max_examples=60, derandomize=True, deadline=None)
pos = st.floats(1e-3, 10.0)
epsilons = st.floats(1e-3, 2.0)


def discrete_ratio_law(atoms, probs):
    """A law of ρ under μ with E_μ ρ = 1: rescale the atoms by their mean."""
    p = np.asarray(probs, float) / np.sum(probs)
    a = np.asarray(atoms, float)
    return a / np.dot(p, a), p


def exact_group_mean(fn, a, p, g):
    """E over G i.i.d. draws from (a, p) of fn(ρ_1..ρ_G), by enumeration of all tuples."""
    tot = 0.0
    for idx in itertools.product(range(len(a)), repeat=g):
        tot += np.prod(p[list(idx)]) * fn(a[list(idx)])
    return tot


# ---------------------------------------------------------------- the symbolic claims


def test_every_claim_passes_and_registry_is_complete():
    assert list(CLAIMS) == [f"C{i}" for i in range(1, 9)]
    for c in ALL.values():
        assert c.check(), [s.claim for s in c.steps if not s.ok]
        assert c.result and c.statement


def test_cli_prints_table_and_exits_zero(capsys):
    from theory.__main__ import main

    assert main(["--no-sections"]) == 0
    out = capsys.readouterr().out
    for cid in list(CLAIMS) + ["L1", "L4"]:
        assert re.search(rf"^{cid} ", out, re.M), cid
    assert "FAIL" not in out
    assert main(["--full", "--no-sections"]) == 0
    out = capsys.readouterr().out
    for cid in list(CLAIMS) + ["L1", "L4"]:
        assert f"| {cid} |" in out
    assert main(["--latex"]) == 0
    assert r"\begin{tabular}" in capsys.readouterr().out


# ---------------------------------------------------------------- checks can fail


def test_wrong_variants_fail_their_checks():
    assert not lemmas.derive_plus_part(rhs=x**2 / (8 * eps_sym)).ok  # constant too small
    assert not lemmas.derive_indicator(rhs_of=lambda k: x ** (k - 1) / eps_sym ** (k - 1)).ok  # odd power
    assert not c2_kkt.derive(factor=lambda rb, e: (1 + e) / rb).ok  # always rescale (snis-like)
    assert not c2_kkt.derive(factor=lambda rb, e: sp.Integer(1)).ok  # never cap (is)
    assert not c2_kkt.derive(factor=lambda rb, e: sp.Min(1, (1 + 2 * e) / rb)).ok  # wrong cap
    assert not c3_delay.derive(m2=(1 + eps_sym) * S * (1 + d_sym**2)).ok  # variance growing with delay
    wrong4 = tuple({**c4_bias.EXPECTED_EXPONENTS, ("tic", "fourth"): (-2, 0)}.items())
    assert not c4_bias.derive(expected=wrong4).ok
    wrong5 = tuple({**c5_tuning.EXPECTED_TUNED_EXPONENTS,
                    "gmc": (sp.Rational(-4, 5), sp.Rational(4, 5), sp.Rational(-2, 5), 0)}.items())
    assert not c5_tuning.derive(expected=wrong5).ok
    assert not c8_baseline.derive(factor=sp.Integer(1)).ok  # "unbiased" is wrong with R̄


@FAST
@given(st.lists(st.floats(0.01, 5.0), min_size=2, max_size=8), epsilons)
def test_in_class_estimators_always_in_W_eps(rho, eps):
    for name in IN_CLASS:
        assert in_class(weights(name, rho, eps), rho, eps, tol=1e-12)


def test_is_and_snis_outside_class_examples():
    assert not in_class(weights("is", [3.0, 3.0], 0.2), [3.0, 3.0], 0.2)
    assert not in_class(weights("snis", [0.5, 0.2], 0.2), [0.5, 0.2], 0.2)


# ---------------------------------------------------------------- lemmas at random points


@FAST
@given(st.floats(-20, 20), epsilons)
def test_L1_L2_hold_at_random_points(xv, eps):
    assert max(xv - eps, 0.0) <= xv**2 / (4 * eps) * (1 + 1e-12)
    ind = 1.0 if xv > eps else 0.0
    assert ind <= xv**2 / eps**2 * (1 + 1e-12) and ind <= xv**4 / eps**4 * (1 + 1e-12)


def _equality_point_is_tight(der) -> bool:
    """The solved 'equality at' x₀ touches: bound(x₀) = (x₀ − ε)₊, slopes agree there, and the bound is strictly
    above (x − ε)₊ elsewhere (checked numerically on both sides of x₀ and in the x ≤ ε branch)."""
    eq, bound = der.results["equality at"], der.results["bound"].rhs
    if not isinstance(eq, sp.Eq):  # no single real touching point
        return False
    x0 = eq.rhs
    if sp.simplify(bound.subs(x, x0) - (x0 - eps_sym)) != 0 or sp.simplify(sp.diff(bound, x).subs(x, x0) - 1) != 0:
        return False
    for e in (0.05, 0.3, 2.0):
        f = sp.lambdify(x, (bound - sp.Max(x - eps_sym, 0)).subs(eps_sym, e))
        x0e = float(x0.subs(eps_sym, e))
        if not (abs(f(x0e)) < 1e-15 and all(f(v) > 0 for v in (0.5 * x0e, 0.99 * x0e, 1.01 * x0e, 3 * x0e, -e))):
            return False
    return True


def test_L1_derived_equality_point_is_where_the_bound_is_tight():
    der = lemmas.derive_plus_part()
    assert der.ok and _equality_point_is_tight(der) and der.results["equality at"].rhs == 2 * eps_sym
    # x²/(8ε) is no bound (it crosses (x−ε)₊ twice); x²/(2ε) is a bound but never touches: both must fail
    assert not _equality_point_is_tight(lemmas.derive_plus_part(rhs=x**2 / (8 * eps_sym)))
    assert not _equality_point_is_tight(lemmas.derive_plus_part(rhs=x**2 / (2 * eps_sym)))


@FAST
@given(st.integers(1, 6), st.integers(1, 4), st.data())
def test_L3_weighted_cauchy_schwarz(g, dim, data):
    w = np.array(data.draw(st.lists(st.floats(0, 5), min_size=g, max_size=g)))
    v = np.array(data.draw(st.lists(st.floats(-5, 5), min_size=g * dim, max_size=g * dim))).reshape(g, dim)
    lhs = np.sum((w[:, None] * v).mean(0) ** 2)
    rhs = w.mean() * np.mean(w * np.sum(v**2, 1))
    assert lhs <= rhs * (1 + 1e-12) + 1e-12


@FAST
@given(st.lists(pos, min_size=3, max_size=3), st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3),
       st.integers(1, 4))
def test_L4_fourth_moment_of_mean_by_enumeration(atoms, probs, g):
    a, p = discrete_ratio_law(atoms, probs)
    s2, m4 = np.dot(p, (a - 1) ** 2), np.dot(p, (a - 1) ** 4)
    exact = exact_group_mean(lambda r: (r.mean() - 1) ** 4, a, p, g)
    formula = float(lemmas.mean_moment(4).subs({lemmas.G: g, lemmas.sigma2: s2, lemmas.mu4: m4}))
    assert np.isclose(exact, formula, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- C1, C2 at random points


@FAST
@given(st.integers(1, 6), epsilons, st.data())
def test_C1_second_moment_for_every_in_class_estimator(g, eps, data):
    rho = np.array(data.draw(st.lists(st.floats(0.01, 6.0), min_size=g, max_size=g)))
    v = np.array(data.draw(st.lists(st.floats(-3, 3), min_size=2 * g, max_size=2 * g))).reshape(g, 2)
    for name in IN_CLASS:
        w = np.array(weights(name, list(rho), eps))
        lhs = np.sum((w[:, None] * v).mean(0) ** 2)
        assert lhs <= (1 + eps) * np.mean(rho * np.sum(v**2, 1)) * (1 + 1e-12) + 1e-12


def qp_minimiser(rho, eps):
    """Independent solver for min 𝔅(w;ρ) over 𝒲_ε (SLSQP)."""
    g = len(rho)
    res = minimize(lambda w: np.mean((rho - w) ** 2 / rho), x0=np.minimum(rho, 1 + eps) * 0.5,
                   jac=lambda w: -2 * (rho - w) / rho / g, method="SLSQP", bounds=[(0, r) for r in rho],
                   constraints=[{"type": "ineq", "fun": lambda w: 1 + eps - w.mean(), "jac": lambda w: -np.ones(g) / g}],
                   options={"ftol": 1e-14, "maxiter": 500})
    return res.x


@FAST
@given(st.lists(st.floats(0.05, 5.0), min_size=2, max_size=6), st.floats(0.01, 1.0))
def test_C2_gmc_equals_independent_qp_and_beats_tis_tic(rho, eps):
    rho = np.array(rho)
    w_gmc = np.array(weights("gmc", list(rho), eps))
    w_qp = qp_minimiser(rho, eps)
    b_gmc = bias_functional(w_gmc, rho)
    assert b_gmc <= bias_functional(w_qp, rho) + 1e-9
    assert np.allclose(w_qp, w_gmc, atol=1e-4)
    assert np.isclose(b_gmc, max(rho.mean() - 1 - eps, 0) ** 2 / rho.mean(), rtol=1e-9, atol=1e-14)
    for name in ("tis", "tic"):
        w = weights(name, list(rho), eps)
        assert bias_functional(w, rho) >= b_gmc - 1e-12
        assert removed_mass(w, rho) >= removed_mass(w_gmc, rho) - 1e-12
    assert removed_mass(weights("tic", list(rho), eps), rho) >= removed_mass(weights("tis", list(rho), eps), rho) - 1e-12


# ---------------------------------------------------------------- C4, C6, C7 bounds against exact expectations


@FAST
@given(st.lists(pos, min_size=3, max_size=3), st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3),
       st.integers(1, 4), st.floats(0.01, 1.0))
def test_C4_C7_bounds_dominate_exact_expectations(atoms, probs, g, eps):
    a, p = discrete_ratio_law(atoms, probs)
    s2, m4 = np.dot(p, (a - 1) ** 2), np.dot(p, (a - 1) ** 4)
    e_gmc = exact_group_mean(lambda r: bias_functional(weights("gmc", list(r), eps), r), a, p, g)
    e_tis = np.dot(p, np.maximum(a - 1 - eps, 0) ** 2 / a)
    e_tic = np.dot(p, a * (a > 1 + eps))
    tol = 1 + 1e-9
    for tail in c4_bias.TAILS:
        assert e_gmc <= bounds.bias_bound("gmc", eps, g, sigma2=s2, mu4=m4, tail=tail) * tol + 1e-15
        assert e_tis <= bounds.bias_bound("tis", eps, g, sigma2=s2, mu4=m4, tail=tail) * tol + 1e-15
        m = bounds.tic_moment(a, tail, weights=p)
        assert e_tic <= bounds.bias_bound("tic", eps, g, m_tic=m, tail=tail) * tol + 1e-15
    removed = exact_group_mean(lambda r: max(r.mean() - 1 - eps, 0), a, p, g)
    assert removed <= bounds.gmc_removed_mass_bound(eps, g, s2) * tol + 1e-15


def test_bias_bound_dispatch_and_argument_errors():
    for name in ("onpolicy", "is", "snis"):
        assert bounds.bias_bound(name, 0.2, 8, sigma2=0.1, mu4=0.1, m_tic=0.1) is None
    with pytest.raises(ValueError):
        bounds.gmc_bias_bound(0.2, 8, 0.1, 0.1, tail="third")
    with pytest.raises(ValueError):
        bounds.tis_bias_bound(0.2, tail="second")  # needs sigma2
    with pytest.raises(ValueError):
        bounds.assembled_bound("is", 0.1, 10, 1, 0.2, 8, dJ=1, L=1, second_moment=1, C=1)
    assert np.isclose(bounds.gmc_bias_bound(0.5, 4, 0.2, 0.3), (3 * 0.04 / 16 + (0.3 - 0.12) / 64) / (16 * 0.25 * 1.5))
    assert np.isclose(bounds.tic_bias_bound(0.5, 0.3), 0.3 / 0.0625)
    assert bounds.gmc_bias_bound(np.array([0.1, 0.2]), np.array([4, 8]), 0.2, 0.3).shape == (2,)


def log_slope(f, x0, h=1e-4):
    return (np.log(f(x0 * np.exp(h))) - np.log(f(x0 * np.exp(-h)))) / (2 * h)


@pytest.mark.parametrize("name,tail", list(c4_bias.EXPECTED_EXPONENTS))
def test_C4_exponents_match_finite_differences(name, tail):
    pe, pg = c4_bias.EXPECTED_EXPONENTS[(name, tail)]
    kw = dict(sigma2=0.3, mu4=0.5, m_tic=0.4, tail=tail)
    slope_eps = log_slope(lambda e: bounds.bias_bound(name, e, 16.0, **kw), 1e-6)
    slope_g = log_slope(lambda g: bounds.bias_bound(name, 0.1, g, **kw), 1e9)
    assert abs(slope_eps - pe) < 1e-3 and abs(slope_g - pg) < 1e-3


@FAST
@given(st.floats(-1, 1), st.floats(0.01, 3), st.floats(1e-3, 0.1), st.floats(1, 50), st.floats(0.1, 3))
def test_C6_ratio_deviation_within_overlap_bound(frac, kappa, eta, d, m):
    delta = kappa * eta * d * m
    rho = np.exp(frac * delta)  # any log-ratio allowed by the Lipschitz assumption
    assert (rho - 1) ** 2 <= bounds.overlap_sigma2_bound(kappa, eta, d, m) * (1 + 1e-12)


# ---------------------------------------------------------------- C5 optimisation, two implementations


consts = dict(dJ=1.3, C=0.7)


@FAST
@given(st.sampled_from(["gmc", "tis", "tic"]), st.floats(1e2, 1e6), st.floats(1, 64), st.floats(0.01, 1.0),
       st.floats(1, 128))
def test_C5_sympy_eta_star_equals_scipy(name, K, d, eps, G):
    e_closed = float(bounds.eta_star(name, K, d, eps, G, **consts))
    res = minimize_scalar(lambda u: float(bounds.assembled_bound(name, np.exp(u), K, d, eps, G, L=1.0,
                                                                 second_moment=0.0, **consts)),
                          bounds=(np.log(e_closed) - 8, np.log(e_closed) + 8), method="bounded",
                          options={"xatol": 1e-10})
    assert np.isclose(np.exp(res.x), e_closed, rtol=1e-5)
    tuned = bounds.tuned_delay_term(name, K, d, eps, G, **consts)
    direct = bounds.assembled_bound(name, e_closed, K, d, eps, G, L=1.0, second_moment=0.0, **consts)
    assert np.isclose(tuned, direct, rtol=1e-10)


@FAST
@given(st.sampled_from(["gmc", "tic"]), st.floats(1e2, 1e6), st.floats(1, 64), st.floats(0.01, 1.0),
       st.floats(1, 128), st.floats(1e-6, 10))
def test_C5_numeric_optimum_with_variance_solves_the_stationarity_polynomial(name, K, d, eps, G, S2):
    kw = dict(L=0.9, second_moment=S2, **consts)
    e_num = bounds.eta_star_numeric(name, K, d, eps, G, **kw)
    # dB/dη = 0 ⇔ 4·delay(η)/η·η² + LM₂η² − 2ΔJ/K = 0: one positive root (one sign change)
    # dJ = 0 and second_moment = 0 leave only the delay term (L must be > 0; it multiplies 0 here)
    delay = lambda e: bounds.assembled_bound(name, e, K, d, eps, G, dJ=0.0, L=1.0, second_moment=0.0, C=consts["C"])
    m2 = bounds.M2(eps, S2)
    root = brentq(lambda e: 4 * delay(e) * e + 0.9 * m2 * e**2 - 2 * consts["dJ"] / K, 1e-30, 1e6, xtol=1e-300, rtol=1e-13)
    assert np.isclose(e_num, root, rtol=1e-5)
    assert e_num <= bounds.eta_star(name, K, d, eps, G, **consts) * (1 + 1e-6)  # variance only shortens η*


@pytest.mark.parametrize("name", ["gmc", "tis", "tic"])
def test_C5_tuned_exponents_match_finite_differences(name):
    want = c5_tuning.EXPECTED_TUNED_EXPONENTS[name]
    base = dict(K=1e4, d=4.0, eps=0.1, G=8.0)
    for (var, w) in zip(base, want):
        f = lambda v: bounds.tuned_delay_term(name, **{**base, var: v}, **consts)
        assert abs(log_slope(f, base[var]) - float(w)) < 1e-6


def test_C5_variance_kept_fit_differs_from_closed_form_outside_the_bias_dominated_regime():
    """The fit is not the closed form in disguise: with LηM₂ dominant K → −1/2, d, G → 0; in between,
    GMC's G slope is flatter than −2/5 and its K slope sits strictly inside (−4/5, −1/2)."""
    fv = c5_tuning.fitted_exponents("gmc", c5_tuning.FIT_REGIMES["variance-dominated"])
    assert abs(fv["K"] + 0.5) < 0.01 and abs(fv["d"]) < 0.01 and abs(fv["G"]) < 0.01
    fc = c5_tuning.fitted_exponents("gmc", c5_tuning.FIT_REGIMES["comparable"], sweep={"K": (1e3, 1e6), "G": (1.0, 1e2)})
    assert -0.8 + 0.05 < fc["K"] < -0.5 - 0.01
    assert -0.4 + 0.1 < fc["G"] < 0.0
    fb = c5_tuning.fitted_exponents("gmc", c5_tuning.FIT_REGIMES["bias-dominated"], sweep={"G": (1.0, 1e2)})
    assert abs(fb["G"] + 0.4) < 1e-3


def test_C5_variance_only_limit_is_the_sympy_minimum():
    val = float(c5_tuning.variance_only_expr().subs({c5_tuning.dJ: 1.3, c5_tuning.K: 1e3, c5_tuning.L: 0.9,
                                                     c5_tuning.S: 2.0, c5_tuning.eps: 0.2}))
    res = minimize_scalar(lambda u: 2 * 1.3 / (np.exp(u) * 1e3) + 0.9 * np.exp(u) * 1.2 * 2.0, bounds=(-15, 5),
                          method="bounded", options={"xatol": 1e-10})
    assert np.isclose(val, res.fun, rtol=1e-9)


def test_C5_fit_with_variance_kept_moves_toward_sqrtK_when_variance_dominates():
    """With the variance term large, the K-slope must sit between the two pure regimes (−4/5, −1/2)."""
    base = {**c5_tuning.FIT_BASE, "second_moment": 1e-2}
    k = c5_tuning.fitted_exponents("gmc", base=base, sweep={"K": (1e3, 1e6)})["K"]
    assert -0.8 + 0.02 < k < -0.5


@FAST
@given(st.floats(1, 256), st.floats(1, 64), st.floats(1e-4, 1e-1), st.floats(0.1, 10), st.floats(1e-3, 10))
def test_C5_eps_star_equals_scipy(G, d, eta, L, S2):
    C = 0.7
    e_closed = float(bounds.eps_star_gmc(G, d, eta, L=L, second_moment=S2, C=C))
    obj = lambda u: float(L * eta * bounds.M2(np.exp(u), S2) + C * eta**4 * d**4 / (np.exp(u) ** 2 * G**2))
    res = minimize_scalar(obj, bounds=(np.log(e_closed) - 8, np.log(e_closed) + 8), method="bounded",
                          options={"xatol": 1e-10})
    assert np.isclose(np.exp(res.x), e_closed, rtol=1e-5)
