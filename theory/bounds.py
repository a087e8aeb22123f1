"""Numeric versions of every theory/ bound, lambdified from the sympy derivations (never retyped).

Plain floats or NumPy arrays in, the same out (broadcasting). Notation of THEORY.md:
σ² = Var_μ(ρ), μ₄ = E_μ(ρ−1)⁴, ``second_moment`` = E_π[A²‖s_θ‖²], M₂(ε) = (1+ε)·second_moment.
These feed simulate/ (bound next to measurement) and figures/.
"""
from __future__ import annotations

import numpy as np
import sympy as sp
from scipy.optimize import minimize_scalar

from . import c1_second_moment as c1
from . import c4_bias as c4
from . import c5_tuning as c5
from . import c6_overlap as c6
from . import c7_large_group as c7
from . import symbols as sy

BIASED = ("gmc", "tis", "tic")  # the estimators in 𝒲_ε, which have a C4 bound
UNBOUNDED = ("onpolicy", "is", "snis")  # no bias bound of this form: bias_bound returns None


def _f(*arrays):
    return [np.asarray(a, dtype=float) for a in arrays]


_COMPILED: dict = {}


def _lam(key, args, expr_fn):
    """Lambdify ``expr_fn()`` over ``args`` once per ``key`` (derivations are cached, so this is cheap)."""
    if key not in _COMPILED:
        _COMPILED[key] = sp.lambdify(args, expr_fn(), modules="numpy")
    return _COMPILED[key]


def _check_tail(tail):
    if tail not in c4.TAILS:
        raise ValueError(f"tail must be one of {c4.TAILS}, got {tail!r}")


def M2(eps, second_moment):
    """C1: ``M₂(ε) = (1+ε)·E_π[A²‖s_θ‖²]``, the common second-moment bound of every w ∈ 𝒲_ε."""
    return _lam("M2", (sy.eps, sy.S), lambda: c1.M2)(*_f(eps, second_moment))


def gmc_bias_bound(eps, G, sigma2, mu4, tail="fourth"):
    """C4 bound on E[𝔅_gmc].

    ``tail="fourth"``: ``(3σ⁴/G² + (μ₄−3σ⁴)/G³)/(16ε²(1+ε))`` — (X−ε)₊² ≤ X⁴/(16ε²) with X = ρ̄−1, 1/ρ̄ ≤ 1/(1+ε).
    ``tail="second"``: ``σ²/(4εG)`` — 𝔅_gmc ≤ (X−ε)₊ (since (X−ε)₊/ρ̄ ≤ 1) ≤ X²/(4ε), E X² = σ²/G.
    ``mu4`` is unused for ``tail="second"``.
    """
    _check_tail(tail)
    fn = _lam(("gmc", tail), (sy.eps, sy.G, sy.sigma2, sy.mu4), lambda: c4.bias_bound_expr("gmc", tail))
    return fn(*_f(eps, G, sigma2, 0.0 if mu4 is None else mu4))



def tis_bias_bound(eps, mu4=None, tail="fourth", *, sigma2=None):
    """C4 bound on E[𝔅_tis] (no G).

    ``tail="fourth"``: ``μ₄/(16ε²(1+ε))``; ``tail="second"``: ``σ²/(4ε)`` (pass ``sigma2``).
    """
    _check_tail(tail)
    if (mu4 if tail == "fourth" else sigma2) is None:
        raise ValueError("tis fourth-tail bound needs mu4; second-tail bound needs sigma2")
    fn = _lam(("tis", tail), (sy.eps, sy.sigma2, sy.mu4), lambda: c4.bias_bound_expr("tis", tail))
    return fn(*_f(eps, 0.0 if sigma2 is None else sigma2, 0.0 if mu4 is None else mu4))



def tic_bias_bound(eps, m_tic, tail="fourth"):
    """C4 bound on E[𝔅_tic] = π-mass of {ρ > 1+ε} (no G).

    ``tail="fourth"``: ``E_μ[ρ(ρ−1)⁴]/ε⁴`` with ``m_tic = E_μ[ρ(ρ−1)⁴]``.
    ``tail="second"``: ``E_μ[ρ(ρ−1)²]/ε²`` — then ``m_tic`` must be ``E_μ[ρ(ρ−1)²]`` (see ``tic_moment``).
    """
    _check_tail(tail)
    fn = _lam(("tic", tail), (sy.eps, sy.m_tic), lambda: c4.bias_bound_expr("tic", tail))
    return fn(*_f(eps, m_tic))



def tic_moment(rho, tail="fourth", weights=None):
    """The moment ``m_tic`` that ``tic_bias_bound`` expects, from μ-samples (or atoms with ``weights``):
    ``E_μ[ρ(ρ−1)⁴]`` for ``tail="fourth"``, ``E_μ[ρ(ρ−1)²]`` for ``tail="second"``."""
    _check_tail(tail)
    rho = np.asarray(rho, dtype=float)
    k = 4 if tail == "fourth" else 2
    return float(np.average(rho * (rho - 1.0) ** k, weights=weights))


def bias_bound(name, eps, G, *, sigma2=None, mu4=None, m_tic=None, tail="fourth"):
    """Dispatcher: the C4 bound on E[𝔅_name] for gmc/tis/tic; ``None`` for onpolicy/is/snis."""
    if name == "gmc":
        return gmc_bias_bound(eps, G, sigma2, mu4, tail)
    if name == "tis":
        return tis_bias_bound(eps, mu4, tail, sigma2=sigma2)
    if name == "tic":
        return tic_bias_bound(eps, m_tic, tail)
    if name in UNBOUNDED:
        return None
    raise ValueError(f"unknown estimator {name!r}")


def gmc_removed_mass_bound(eps, G, sigma2):
    """C7: ``E(ρ̄−1−ε)₊ ≤ E(ρ̄−1)²/(4ε) = σ²/(4εG)`` (L1 then L4)."""
    fn = _lam("removed", (sy.eps, sy.G, sy.sigma2), lambda: c7.REMOVED_MASS_BOUND)
    return fn(*_f(eps, G, sigma2))


def overlap_sigma2_bound(kappa, eta, d, M):
    """C6: ``σ² ≤ (e^{κηdM} − 1)²``."""
    fn = _lam("overlap", (sy.kappa, sy.eta, sy.d, sy.M), lambda: c6.SIGMA2_BOUND)
    return fn(*_f(kappa, eta, d, M))

_ARGS = (sy.eta, sy.K, sy.d, sy.eps, sy.G, sy.dJ, sy.L, sy.S, sy.C, sy.c_G)


def _check_name(name):
    if name not in BIASED:
        raise ValueError(f"C5 is stated for estimators in 𝒲_ε {BIASED}; got {name!r}")


def assembled_bound(name, eta, K, d, eps, G, *, dJ, L, second_moment, C, c_G=0.0):
    """C5: ``2ΔJ/(ηK) + LηM₂(ε) + delay + c_G/G`` with the C4 delay term at leading order:
    gmc ``Cη⁴d⁴/(ε²G²)``, tis ``Cη⁴d⁴/ε²``, tic ``Cη⁴d⁴/ε⁴`` (C absorbs c_B and the C6 constants)."""
    _check_name(name)
    fn = _lam(("assembled", name), _ARGS, lambda: c5.assembled(name))
    return fn(*_f(eta, K, d, eps, G, dJ, L, second_moment, C, c_G))


def eta_star(name, K, d, eps, G, *, dJ, C):
    """C5 closed form (variance dropped): ``η* = (ΔJ ε^{−p_ε} G^{−p_G}/(2CKd⁴))^{1/5}``."""
    _check_name(name)
    fn = _lam(("eta*", name), (sy.K, sy.d, sy.eps, sy.G, sy.dJ, sy.C), lambda: c5.eta_star_expr(name))
    return fn(*_f(K, d, eps, G, dJ, C))


def tuned_delay_term(name, K, d, eps, G, *, dJ, C):
    """C5: ``min_η [2ΔJ/(ηK) + delay] = (5/2)ΔJ/(η*K)``; gmc ∝ K^{−4/5}d^{4/5}ε^{−2/5}G^{−2/5}."""
    _check_name(name)
    fn = _lam(("tuned", name), (sy.K, sy.d, sy.eps, sy.G, sy.dJ, sy.C), lambda: c5.tuned_expr(name))
    return fn(*_f(K, d, eps, G, dJ, C))


def eta_star_numeric(name, K, d, eps, G, *, dJ, C, L, second_moment):
    """C5 with the variance term kept: ``argmin_η 2ΔJ/(ηK) + LηM₂(ε) + delay`` by bounded Brent in log η.

    The objective is strictly convex in η > 0, so it is unimodal in log η; the search window is
    ±12 e-folds around the closed-form η* (variance dropped), which the optimum never exceeds."""
    e0 = float(eta_star(name, K, d, eps, G, dJ=dJ, C=C))

    def obj(u):
        return float(assembled_bound(name, np.exp(u), K, d, eps, G, dJ=dJ, L=L, second_moment=second_moment, C=C))

    res = minimize_scalar(obj, bounds=(np.log(e0) - 12.0, np.log(e0) + 1.0), method="bounded",
                          options={"xatol": 1e-10})
    return float(np.exp(res.x))


def eps_star_gmc(G, d, eta, *, L, second_moment, C):
    """C5, GMC ε trade-off: ``argmin_ε LηM₂(ε) + Cη⁴d⁴/(ε²G²) = (2Cη³d⁴/(L·E_π[A²‖s‖²]·G²))^{1/3}``."""
    fn = _lam("eps*", (sy.G, sy.d, sy.eta, sy.L, sy.S, sy.C), c5.eps_star_gmc_expr)
    return fn(*_f(G, d, eta, L, second_moment, C))
