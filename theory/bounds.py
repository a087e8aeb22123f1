"""Numeric versions of every theory/ bound, lambdified from the sympy derivations (never retyped).

Plain floats or NumPy arrays in, the same out (broadcasting). Notation of docs/THEORY.md §1–§3:
σ² = Var_μ(ρ), μ₄ = E_μ(ρ−1)⁴, ``second_moment`` = E_π[A²‖s_θ‖²], M₂(ε) = (1+ε)·second_moment.
These feed simulate/ (bound next to measurement) and figures/.
"""
from __future__ import annotations

import numpy as np
import sympy as sp
from scipy.optimize import elementwise
from sympy.codegen.rewriting import expm1_opt, log1p_opt, optimize

from . import c1_second_moment as c1
from . import c4_bias as c4
from . import c5_symbolic as c5
from . import c6_overlap as c6
from . import c7_large_group as c7
from . import symbols as sy
from asyncgrpo.validation import check_eps

BIASED = ("gmc", "tis", "tic")  # the estimators in 𝒲_ε, which have a C4 bound
UNBOUNDED = ("onpolicy", "is", "snis")  # no bias bound of this form: bias_bound returns None


def _array(x, name: str, rng: str) -> np.ndarray:
    if x is None:
        raise ValueError(f"{name} is required here (valid range: {rng}), got None")
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or array of numbers ({rng}), got {x!r}") from None


def _first_bad(arr: np.ndarray, ok: np.ndarray) -> str:
    if arr.ndim == 0:
        return repr(float(arr))
    idx = tuple(int(i) for i in np.argwhere(~ok)[0])
    return f"{float(arr[idx])!r} at index {idx if len(idx) > 1 else idx[0]}"


def _check(x, name: str, rng: str, ok_fn) -> np.ndarray:
    """Every element of ``x`` finite and satisfying ``ok_fn``, else ValueError naming ``name`` and ``rng``.

    Whole arrays are checked (figures and notebooks pass grids), vectorised so broadcasting callers
    pay one pass; the returned float array is what the lambdified bound receives."""
    arr = _array(x, name, rng)
    ok = np.isfinite(arr) & ok_fn(arr)
    if not ok.all():
        raise ValueError(f"{name} must be finite with {rng}, got {_first_bad(arr, ok)}")
    return arr


def _eps(x, name="eps"):
    arr = _array(x, name, f"0 < {name} < inf")
    if arr.ndim == 0:
        check_eps(arr.item(), name)  # the project-wide message for the scalar case
    return _check(arr, name, f"0 < {name} < inf", lambda a: a > 0)


def _pos(x, name):
    return _check(x, name, f"{name} > 0", lambda a: a > 0)


def _nonneg(x, name):
    return _check(x, name, f"{name} >= 0", lambda a: a >= 0)


def _at_least_one(x, name, what):
    # real values allowed: the bounds are analytic in G and K, and the C4/C5 slope fits and finite
    # differences evaluate them between integers; only the physical range ≥ 1 is enforced
    return _check(x, name, f"{name} >= 1 ({what}; non-integer values allowed for the continuous bound)",
                  lambda a: a >= 1)


def _G(x):
    return _at_least_one(x, "G", "group size")


def _K(x):
    return _at_least_one(x, "K", "number of learner steps")


def _fourth_moments(sigma2, mu4):
    """σ² ≥ 0, μ₄ ≥ 0 and Jensen's μ₄ = E(ρ−1)⁴ ≥ (E(ρ−1)²)² = σ⁴ (relative slack 1e-9 for rounding)."""
    s2, m4 = _nonneg(sigma2, "sigma2"), _nonneg(mu4, "mu4")
    ok = np.broadcast_to(m4 >= s2**2 * (1 - 1e-9), np.broadcast_shapes(s2.shape, m4.shape))
    if not ok.all():
        raise ValueError("mu4 must be >= sigma2² (Jensen: E_μ(ρ−1)⁴ ≥ (E_μ(ρ−1)²)²), got "
                         f"mu4={mu4!r}, sigma2={sigma2!r}")
    return s2, m4


_COMPILED: dict = {}


def exact_tails(expr: sp.Expr) -> sp.Expr:
    """``expr`` with every ``e^x − 1`` written ``expm1(x)`` and ``log(1 + x)`` written ``log1p(x)``.

    Floating-point ``exp(x) − 1`` loses all digits as x → 0 (relative error ~1e-16/x: 0.1 at x = 1e-15);
    ``expm1``/``log1p`` keep full relative precision. sympy's codegen rewriter does the pattern matching,
    so every lambdified bound gets it, not only the ones known to need it today."""
    return optimize(expr, [expm1_opt, log1p_opt])


def _lam(key, args, expr_fn):
    """Lambdify ``exact_tails(expr_fn())`` over ``args`` once per ``key`` (derivations are cached)."""
    if key not in _COMPILED:
        _COMPILED[key] = sp.lambdify(args, exact_tails(expr_fn()), modules="numpy")
    return _COMPILED[key]


def _check_tail(tail):
    if tail not in c4.TAILS:
        raise ValueError(f"tail must be one of {c4.TAILS}, got {tail!r}")


def M2(eps, second_moment):
    """C1: ``M₂(ε) = (1+ε)·E_π[A²‖s_θ‖²]``, the common second-moment bound of every w ∈ 𝒲_ε.

    ``eps`` > 0 and ``second_moment`` ≥ 0, finite (every element of an array)."""
    return _lam("M2", (sy.eps, sy.S), lambda: c1.M2)(_eps(eps), _nonneg(second_moment, "second_moment"))


def gmc_bias_bound(eps, G, sigma2, mu4, tail="fourth"):
    """C4 bound on E[𝔅_gmc].

    ``tail="fourth"``: ``(3σ⁴/G² + (μ₄−3σ⁴)/G³)/(16ε²(1+ε))`` — (X−ε)₊² ≤ X⁴/(16ε²) with X = ρ̄−1, 1/ρ̄ ≤ 1/(1+ε);
    needs both σ² and μ₄ (μ₄ ≥ σ⁴ by Jensen; a missing μ₄ is an error, never 0, which would
    understate the bound). ``tail="second"``: ``σ²/(4εG)`` — 𝔅_gmc ≤ (X−ε)₊ (since (X−ε)₊/ρ̄ ≤ 1)
    ≤ X²/(4ε), E X² = σ²/G; ``mu4`` is unused and may be None.
    Ranges: ε > 0, G ≥ 1, σ², μ₄ ≥ 0 (finite).
    """
    _check_tail(tail)
    eps, G = _eps(eps), _G(G)
    if tail == "fourth":
        if mu4 is None:
            raise ValueError("mu4 = E_μ(ρ−1)⁴ is required for the gmc fourth-tail bound (tail='fourth'; valid "
                             "range: mu4 >= sigma2² >= 0); pass it, or use tail='second', which needs only sigma2")
        sigma2, mu4 = _fourth_moments(sigma2, mu4)
    else:
        sigma2, mu4 = _nonneg(sigma2, "sigma2"), np.zeros(())  # μ₄ does not enter σ²/(4εG)
    fn = _lam(("gmc", tail), (sy.eps, sy.G, sy.sigma2, sy.mu4), lambda: c4.bias_bound_expr("gmc", tail))
    return fn(eps, G, sigma2, mu4)


def tis_bias_bound(eps, mu4=None, tail="fourth", *, sigma2=None):
    """C4 bound on E[𝔅_tis] (no G).

    ``tail="fourth"``: ``μ₄/(16ε²(1+ε))`` (pass ``mu4`` ≥ 0); ``tail="second"``: ``σ²/(4ε)`` (pass
    ``sigma2`` ≥ 0). ε > 0. The moment the chosen tail needs is required; the other is ignored.
    """
    _check_tail(tail)
    eps = _eps(eps)
    if tail == "fourth":
        if mu4 is None:
            raise ValueError("mu4 = E_μ(ρ−1)⁴ is required for the tis fourth-tail bound (tail='fourth'; "
                             "valid range: mu4 >= 0); the second-tail bound needs sigma2 instead")
        mu4, sigma2 = _nonneg(mu4, "mu4"), np.zeros(())
    else:
        if sigma2 is None:
            raise ValueError("sigma2 = Var_μ(ρ) is required for the tis second-tail bound (tail='second'; "
                             "valid range: sigma2 >= 0); the fourth-tail bound needs mu4 instead")
        sigma2, mu4 = _nonneg(sigma2, "sigma2"), np.zeros(())
    fn = _lam(("tis", tail), (sy.eps, sy.sigma2, sy.mu4), lambda: c4.bias_bound_expr("tis", tail))
    return fn(eps, sigma2, mu4)


def tic_bias_bound(eps, m_tic, tail="fourth"):
    """C4 bound on E[𝔅_tic] = π-mass of {ρ > 1+ε} (no G).

    ``tail="fourth"``: ``E_μ[ρ(ρ−1)⁴]/ε⁴`` with ``m_tic = E_μ[ρ(ρ−1)⁴]``.
    ``tail="second"``: ``E_μ[ρ(ρ−1)²]/ε²`` — then ``m_tic`` must be ``E_μ[ρ(ρ−1)²]`` (see ``tic_moment``).
    Ranges: ε > 0, m_tic ≥ 0 (required).
    """
    _check_tail(tail)
    if m_tic is None:
        raise ValueError(f"m_tic is required for the tic bound (tail={tail!r}: m_tic = E_μ[ρ(ρ−1)^"
                         f"{4 if tail == 'fourth' else 2}] >= 0, see tic_moment)")
    fn = _lam(("tic", tail), (sy.eps, sy.m_tic), lambda: c4.bias_bound_expr("tic", tail))
    return fn(_eps(eps), _nonneg(m_tic, "m_tic"))


def tic_moment(rho, tail="fourth", weights=None):
    """The moment ``m_tic`` that ``tic_bias_bound`` expects, from μ-samples (or atoms with ``weights``):
    ``E_μ[ρ(ρ−1)⁴]`` for ``tail="fourth"``, ``E_μ[ρ(ρ−1)²]`` for ``tail="second"``. ρ ≥ 0 finite, weights ≥ 0."""
    _check_tail(tail)
    rho = _nonneg(rho, "rho")
    if rho.size == 0:
        raise ValueError("rho must hold at least one ratio sample, got an empty array")
    if weights is not None:
        weights = _nonneg(weights, "weights")
    k = 4 if tail == "fourth" else 2
    return float(np.average(rho * (rho - 1.0) ** k, weights=weights))


def bias_bound(name, eps, G, *, sigma2=None, mu4=None, m_tic=None, tail="fourth"):
    """Dispatcher: the C4 bound on E[𝔅_name] for gmc/tis/tic; ``None`` for onpolicy/is/snis.

    ``eps`` > 0 and ``G`` ≥ 1 are checked for every name (tis/tic bounds do not depend on G)."""
    if name not in BIASED + UNBOUNDED:
        raise ValueError(f"unknown estimator {name!r}; valid: {BIASED + UNBOUNDED}")
    _check_tail(tail)
    _eps(eps), _G(G)
    if name == "gmc":
        return gmc_bias_bound(eps, G, sigma2, mu4, tail)
    if name == "tis":
        return tis_bias_bound(eps, mu4, tail, sigma2=sigma2)
    if name == "tic":
        return tic_bias_bound(eps, m_tic, tail)
    return None


def gmc_removed_mass_bound(eps, G, sigma2):
    """C7: ``E(ρ̄−1−ε)₊ ≤ E(ρ̄−1)²/(4ε) = σ²/(4εG)`` (L1 then L4). ε > 0, G ≥ 1, σ² ≥ 0."""
    fn = _lam("removed", (sy.eps, sy.G, sy.sigma2), lambda: c7.REMOVED_MASS_BOUND)
    return fn(_eps(eps), _G(G), _nonneg(sigma2, "sigma2"))


def _overlap(key, expr, kappa, eta, d, M):
    fn = _lam(key, (sy.kappa, sy.eta, sy.d, sy.M), lambda: expr)
    return fn(_nonneg(kappa, "kappa"), _nonneg(eta, "eta"), _nonneg(d, "d"), _nonneg(M, "M"))


def overlap_sigma2_bound(kappa, eta, d, M):
    """C6: ``σ² ≤ (e^{κηdM} − 1)²``, evaluated as ``expm1(κηdM)²`` (full relative precision as κηdM → 0).
    κ, η, d, M ≥ 0 (finite)."""
    return _overlap("overlap", c6.SIGMA2_BOUND, kappa, eta, d, M)


def overlap_mu4_bound(kappa, eta, d, M):
    """C6: ``μ₄ = E_μ(ρ−1)⁴ ≤ (e^{κηdM} − 1)⁴`` (as ``expm1(κηdM)⁴``). κ, η, d, M ≥ 0 (finite)."""
    return _overlap("overlap mu4", c6.MU4_BOUND, kappa, eta, d, M)


def overlap_m_tic_bound(kappa, eta, d, M):
    """C6: ``E_μ[ρ(ρ−1)⁴] ≤ e^{κηdM}(e^{κηdM} − 1)⁴`` (as ``e^{κηdM}·expm1(κηdM)⁴``). κ, η, d, M ≥ 0."""
    return _overlap("overlap m_tic", c6.M_TIC_BOUND, kappa, eta, d, M)


_ARGS = (sy.eta, sy.K, sy.d, sy.eps, sy.G, sy.dJ, sy.L, sy.S, sy.C, sy.c_G)


def _check_name(name):
    if name not in BIASED:
        raise ValueError(f"C5 is stated for estimators in 𝒲_ε {BIASED}; got {name!r}")


def _c5_common(K, d, eps, G, dJ, C):
    return _K(K), _nonneg(d, "d"), _eps(eps), _G(G), _nonneg(dJ, "dJ"), _pos(C, "C")


def assembled_bound(name, eta, K, d, eps, G, *, dJ, L, second_moment, C, c_G=0.0):
    """C5: ``2ΔJ/(ηK) + LηM₂(ε) + delay + c_G/G`` with the C4 delay term at leading order:
    gmc ``Cη⁴d⁴/(ε²G²)``, tis ``Cη⁴d⁴/ε²``, tic ``Cη⁴d⁴/ε⁴`` (C absorbs c_B and the C6 constants).
    Ranges: η > 0, K ≥ 1, d ≥ 0, ε > 0, G ≥ 1, ΔJ ≥ 0, L > 0, E_π[A²‖s‖²] ≥ 0, C > 0, c_G ≥ 0."""
    _check_name(name)
    K, d, eps, G, dJ, C = _c5_common(K, d, eps, G, dJ, C)
    fn = _lam(("assembled", name), _ARGS, lambda: c5.assembled(name))
    return fn(_pos(eta, "eta"), K, d, eps, G, dJ, _pos(L, "L"), _nonneg(second_moment, "second_moment"), C,
              _nonneg(c_G, "c_G"))


def eta_star(name, K, d, eps, G, *, dJ, C):
    """C5 closed form (variance dropped): ``η* = (ΔJ ε^{−p_ε} G^{−p_G}/(2CKd⁴))^{1/5}``.
    Ranges: K ≥ 1, d > 0 (at d = 0 there is no delay term and no finite η*), ε > 0, G ≥ 1, ΔJ ≥ 0, C > 0."""
    _check_name(name)
    K, d, eps, G, dJ, C = _c5_common(K, d, eps, G, dJ, C)
    d = _pos(d, "d")
    fn = _lam(("eta*", name), (sy.K, sy.d, sy.eps, sy.G, sy.dJ, sy.C), lambda: c5.eta_star_expr(name))
    return fn(K, d, eps, G, dJ, C)


def tuned_delay_term(name, K, d, eps, G, *, dJ, C):
    """C5: ``min_η [2ΔJ/(ηK) + delay] = (5/2)ΔJ/(η*K)``; gmc ∝ K^{−4/5}d^{4/5}ε^{−2/5}G^{−2/5}.
    Ranges: K ≥ 1, d ≥ 0, ε > 0, G ≥ 1, ΔJ ≥ 0, C > 0."""
    _check_name(name)
    fn = _lam(("tuned", name), (sy.K, sy.d, sy.eps, sy.G, sy.dJ, sy.C), lambda: c5.tuned_expr(name))
    return fn(*_c5_common(K, d, eps, G, dJ, C))


def tuned_bound(name, K, d, eps, G, *, dJ, C, L, second_moment, c_G=0.0):
    """C5 with the variance term kept: ``(B*, η*)`` with ``η* = argmin_{η>0} B(η)`` and ``B* = B(η*)`` for
    ``B(η) = 2ΔJ/(ηK) + LηM₂(ε) + Cη⁴d⁴ε^{p_ε}G^{p_G} + c_G/G`` (:func:`assembled_bound`), broadcast
    over every argument. The one η minimiser of the project (figures, notebooks and the C5 fits use it).

    Method: ``scipy.optimize.elementwise`` (bracket, then Chandrupatla) in ``u = log η`` on a bracket that
    provably holds the minimiser. B is strictly convex in η > 0 and its stationarity condition reads
    ``2ΔJ/(Kη²) = LM₂ + 4Cη³d⁴ε^{p_ε}G^{p_G}``. Each right-hand term alone gives a minimiser, the
    closed-form η₀ = :func:`eta_star` (delay only) and η_v = √(2ΔJ/(KLM₂)) (variance only), and adding
    the other term only shrinks η, so η* ≤ m = min(η₀, η_v). One of the two terms is at least half the
    left side, so η* ≥ min(η_v/√2, 2^{−1/5}η₀) ≥ m/√2. The search is on
    ``u ∈ [log m − ½log 2 − 0.01, log m + 0.01]`` (the 0.01 e-fold pads rounding).
    Ranges: K ≥ 1, d ≥ 0, ε > 0, G ≥ 1, ΔJ > 0, C > 0, L > 0, E_π[A²‖s‖²] ≥ 0, c_G ≥ 0, and d > 0 or
    E_π[A²‖s‖²] > 0 at every element (else 2ΔJ/(ηK) alone has no minimiser)."""
    _check_name(name)
    K, d, eps, G, dJ, C = _c5_common(K, d, eps, G, dJ, C)
    dJ, L, S, c_G = _pos(dJ, "dJ"), _pos(L, "L"), _nonneg(second_moment, "second_moment"), _nonneg(c_G, "c_G")
    K, d, eps, G, dJ, C, L, S, c_G = np.broadcast_arrays(K, d, eps, G, dJ, C, L, S, c_G)
    m2 = M2(eps, S)
    none = (d == 0) & (m2 == 0)
    if np.any(none):
        raise ValueError("tuned_bound needs d > 0 or second_moment > 0 at every element: with neither, 2ΔJ/(ηK) "
                         "has no minimiser over η > 0")
    with np.errstate(divide="ignore"):
        e0 = np.where(d > 0, eta_star(name, K, np.where(d > 0, d, 1.0), eps, G, dJ=dJ, C=C), np.inf)
        ev = np.where(m2 > 0, np.sqrt(2.0 * dJ / (K * L * np.where(m2 > 0, m2, 1.0))), np.inf)
    u_hi = np.log(np.minimum(e0, ev)) + 0.01
    u_lo = u_hi - 0.5 * np.log(2.0) - 0.02

    def f(u, *a):
        return assembled_bound(name, np.exp(u), *a[:4], dJ=a[4], L=a[5], second_moment=a[6], C=a[7], c_G=a[8])

    args = (K, d, eps, G, dJ, L, S, C, c_G)
    br = elementwise.bracket_minimum(f, 0.5 * (u_lo + u_hi), xmin=u_lo, xmax=u_hi, args=args)
    # status −1: the bracket reached a limit of the proven interval, so that limit is the minimiser
    # (only by the 0.01 padding's rounding margin); Chandrupatla then refines inside the valid brackets
    ok = br.status == 0
    xl, xm, xr = br.bracket
    res = elementwise.find_minimum(f, (np.where(ok, xl, u_lo - 1.0), np.where(ok, xm, u_lo), np.where(ok, xr, u_lo + 1.0)),
                                   args=args, tolerances=dict(xatol=1e-12, xrtol=0.0))
    u = np.where(ok, res.x, np.where(br.f_bracket[0] <= br.f_bracket[2], xl, xr))
    if not np.all(ok | (br.status == -1)) or not np.all(res.success | ~ok):
        raise RuntimeError(f"tuned_bound: the η search failed (bracket status {np.unique(br.status)}, "
                           f"minimiser status {np.unique(res.status)}); please report this input")
    eta = np.exp(u)
    B = f(u, *args)
    if B.ndim == 0:
        return float(B), float(eta)
    return B, eta


def eta_star_numeric(name, K, d, eps, G, *, dJ, C, L, second_moment):
    """C5 with the variance term kept: ``argmin_η B(η)`` (the η* of :func:`tuned_bound`; a float for scalars)."""
    return tuned_bound(name, K, d, eps, G, dJ=dJ, C=C, L=L, second_moment=second_moment)[1]


def eps_star_gmc(G, d, eta, *, L, second_moment, C):
    """C5, GMC ε trade-off: ``argmin_ε LηM₂(ε) + Cη⁴d⁴/(ε²G²) = (2Cη³d⁴/(L·E_π[A²‖s‖²]·G²))^{1/3}``.
    Ranges: G ≥ 1, d ≥ 0, η > 0, L > 0, E_π[A²‖s‖²] > 0 (it divides), C > 0."""
    fn = _lam("eps*", (sy.G, sy.d, sy.eta, sy.L, sy.S, sy.C), c5.eps_star_gmc_expr)
    return fn(_G(G), _nonneg(d, "d"), _pos(eta, "eta"), _pos(L, "L"), _pos(second_moment, "second_moment"),
              _pos(C, "C"))
