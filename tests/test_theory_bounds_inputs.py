"""Input validation and broadcasting of theory.bounds (split from tests/test_theory.py): every entry point
rejects bad input with a ValueError naming the parameter, and valid arrays broadcast."""
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from theory import bounds, c4_bias


# ---------------------------------------------------------------- input validation of theory.bounds

_OK = dict(eps=0.2, G=8, sigma2=0.1, mu4=0.05, m_tic=0.3)
_C5 = dict(eta=0.01, K=1e4, d=4.0, eps=0.2, G=8.0, dJ=1.0, L=1.0, second_moment=1.0, C=1.0)


def _c5_call(fn, **over):
    p = {**_C5, **over}
    if fn == "assembled":
        return bounds.assembled_bound("gmc", p["eta"], p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], L=p["L"],
                                      second_moment=p["second_moment"], C=p["C"])
    if fn == "eta_star":
        return bounds.eta_star("gmc", p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], C=p["C"])
    if fn == "tuned":
        return bounds.tuned_delay_term("gmc", p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], C=p["C"])
    if fn == "numeric":
        return bounds.eta_star_numeric("gmc", p["K"], p["d"], p["eps"], p["G"], dJ=p["dJ"], C=p["C"], L=p["L"],
                                       second_moment=p["second_moment"])
    if fn == "eps_star":
        return bounds.eps_star_gmc(p["G"], p["d"], p["eta"], L=p["L"], second_moment=p["second_moment"], C=p["C"])
    raise AssertionError(fn)


@pytest.mark.parametrize("name,kw,param", [
    ("gmc", dict(eps=-1.0), "eps"), ("gmc", dict(eps=0.0), "eps"), ("gmc", dict(eps=np.nan), "eps"),
    ("gmc", dict(G=0), "G"), ("gmc", dict(G=0.5), "G"), ("gmc", dict(G=np.inf), "G"),
    ("gmc", dict(sigma2=None), "sigma2"), ("gmc", dict(sigma2=-0.1), "sigma2"), ("gmc", dict(mu4=None), "mu4"),
    ("gmc", dict(mu4=np.nan), "mu4"), ("gmc", dict(sigma2=0.5, mu4=0.1), "mu4"),  # μ₄ < σ⁴ breaks Jensen
    ("gmc", dict(eps=np.array([0.1, -0.2])), "eps"), ("gmc", dict(G=np.array([4.0, 0.0])), "G"),
    ("tis", dict(mu4=None), "mu4"), ("tis", dict(mu4=-1.0), "mu4"), ("tis", dict(eps=0.0), "eps"),
    ("tis", dict(G=0), "G"),
    ("tic", dict(m_tic=None), "m_tic"), ("tic", dict(m_tic=np.inf), "m_tic"), ("tic", dict(eps=-1), "eps"),
    ("is", dict(eps=0.0), "eps"), ("bogus", {}, "estimator"),
])
def test_bias_bound_rejects_bad_input_naming_the_parameter(name, kw, param):
    p = {**_OK, **kw}
    with pytest.raises(ValueError, match=param):
        bounds.bias_bound(name, p["eps"], p["G"], sigma2=p["sigma2"], mu4=p["mu4"], m_tic=p["m_tic"])


@pytest.mark.parametrize("tail,name,kw,param", [
    ("second", "gmc", dict(sigma2=None), "sigma2"), ("second", "tis", dict(sigma2=None), "sigma2"),
    ("second", "tic", dict(m_tic=-0.1), "m_tic"),
])
def test_second_tail_requires_its_moment(tail, name, kw, param):
    p = {**_OK, **kw}
    with pytest.raises(ValueError, match=param):
        bounds.bias_bound(name, p["eps"], p["G"], sigma2=p["sigma2"], mu4=p["mu4"], m_tic=p["m_tic"], tail=tail)


def test_gmc_second_tail_needs_no_mu4_and_fourth_tail_is_never_below_the_true_bound():
    assert np.isclose(bounds.gmc_bias_bound(0.2, 8, 0.1, None, tail="second"), 0.1 / (4 * 0.2 * 8))
    # the smallest admissible μ₄ is σ⁴; the old μ₄ = 0 default gave a smaller (wrong) value
    s2 = 0.3
    at_min = bounds.gmc_bias_bound(0.2, 8, s2, s2**2)
    from theory import symbols as sy

    old_default = float(c4_bias.bias_bound_expr("gmc", "fourth").subs({sy.eps: 0.2, sy.G: 8, sy.sigma2: s2, sy.mu4: 0}))
    assert at_min > old_default


@pytest.mark.parametrize("fn,kw,param", [
    ("assembled", dict(eta=0.0), "eta"), ("assembled", dict(K=0.5), "K"), ("assembled", dict(d=-1.0), "d"),
    ("assembled", dict(L=0.0), "L"), ("assembled", dict(C=0.0), "C"), ("assembled", dict(dJ=-1.0), "dJ"),
    ("assembled", dict(second_moment=np.nan), "second_moment"), ("assembled", dict(G=0), "G"),
    ("assembled", dict(eps=np.array([[0.1], [0.0]])), "eps"),
    ("eta_star", dict(eps=0.0), "eps"), ("eta_star", dict(d=0.0), "d"), ("eta_star", dict(C=-1.0), "C"),
    ("eta_star", dict(K=0), "K"), ("tuned", dict(G=0), "G"), ("tuned", dict(dJ=np.inf), "dJ"),
    ("numeric", dict(dJ=0.0), "dJ"), ("numeric", dict(L=-1.0), "L"), ("numeric", dict(d=0.0, second_moment=0.0), "d > 0"),
    ("eps_star", dict(second_moment=0.0), "second_moment"), ("eps_star", dict(eta=-0.1), "eta"),
    ("eps_star", dict(G=0.0), "G"),
])
def test_c5_entry_points_reject_bad_input_naming_the_parameter(fn, kw, param):
    with pytest.raises(ValueError, match=param):
        _c5_call(fn, **kw)


@pytest.mark.parametrize("call,param", [
    (lambda: bounds.M2(np.nan, 1.0), "eps"), (lambda: bounds.M2(0.2, -1.0), "second_moment"),
    (lambda: bounds.gmc_removed_mass_bound(0.2, 0, 0.1), "G"),
    (lambda: bounds.gmc_removed_mass_bound(0.2, 4, None), "sigma2"),
    (lambda: bounds.overlap_sigma2_bound(-1.0, 0.1, 1.0, 1.0), "kappa"),
    (lambda: bounds.tic_moment([1.0, -0.5]), "rho"), (lambda: bounds.tic_moment([]), "rho"),
    (lambda: bounds.tic_moment([1.0], tail="x"), "tail"),
])
def test_other_entry_points_reject_bad_input(call, param):
    with pytest.raises(ValueError, match=param):
        call()


def test_valid_arrays_still_broadcast():
    eps, G = np.geomspace(0.01, 1, 5)[:, None], np.array([1.0, 8.0, 64.0])[None]
    assert bounds.gmc_bias_bound(eps, G, 0.1, 0.05).shape == (5, 3)
    assert bounds.M2(eps, 1.0).shape == (5, 1)
    eta = np.geomspace(1e-4, 1, 4).reshape(4, 1, 1)
    assert bounds.assembled_bound("tic", eta, 1e4, 4.0, eps[None], G[None], dJ=1, L=1, second_moment=1, C=1).shape \
        == (4, 5, 3)
    assert bounds.eps_star_gmc(G, 4.0, 0.01, L=1, second_moment=1, C=1).shape == (1, 3)


def test_eta_star_numeric_bracket_holds_in_extreme_regimes():
    """The provable bracket [m/√2, m] finds the optimum even when variance dominates by orders of magnitude
    (a fixed window of e-folds around the delay-only η* would not), checked against a wide-window Brent."""
    for S2, d in ((1e12, 8.0), (1e-12, 8.0), (1.0, 0.0), (1e6, 100.0)):
        kw = dict(dJ=1.0, C=1.0, L=1.0, second_moment=S2)
        e = bounds.eta_star_numeric("gmc", 1e4, d, 0.05, 8.0, **kw)
        res = minimize_scalar(lambda u: float(bounds.assembled_bound("gmc", np.exp(u), 1e4, d, 0.05, 8.0, **kw)),
                              bounds=(-60, 10), method="bounded", options={"xatol": 1e-12})
        assert np.isclose(e, np.exp(res.x), rtol=1e-4), (S2, d)
