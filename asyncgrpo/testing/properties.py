"""``check_weight_map``: property-test any weight map ``fn(ell, eps) -> w`` against docs/THEORY.md §3.

The class of docs/THEORY.md §3 is ``𝒲_ε(ρ) = {w : 0 ≤ w_i ≤ ρ_i, (1/G)Σ_i w_i ≤ 1+ε}`` with
``ρ_i = exp(ℓ_i)``; membership gives the second-moment guarantee C1, and C2 says ``gmc`` is the
unique minimiser over the class of ``𝔅(w;ρ) = (1/G)Σ_i (ρ_i − w_i)²/ρ_i``. The battery, one row each:

==========================  =========================================================  ===========
property                    in plain words                                             membership
==========================  =========================================================  ===========
``finite``                  every weight is a finite number, also for ``|ℓ_i|`` ≤ 1e4   yes
``nonnegative``             every weight is ≥ 0                                         yes
``w_le_rho``                no trajectory gets more than its ratio: ``w_i ≤ ρ_i``       yes
``mean_le_1_plus_eps``      the group's mean weight is at most 1+ε (C1)                 yes
``permutation``             reordering the group reorders the weights the same way      no
``padding``                 padded entries get weight 0 and do not change the others    no
``batch_shape``             a ``[n_groups, G]`` call agrees with one call per group     no
``c2_minimiser``            for members: ``𝔅`` equals the C2 minimum (scipy QP)          no
==========================  =========================================================  ===========

Verdicts use the project vocabulary: ``holds``, ``refuted`` (with a counterexample shrunk by
hypothesis), ``out of scope`` (premise not met: ``fn`` takes no ``[n_groups, G]`` input or no
``mask`` keyword, or for ``c2_minimiser`` the map is not a member of ``𝒲_ε``). Each property
other than ``finite`` is judged on the finite weights only, so a map that overflows is flagged by
``finite`` and nothing else. Runs are deterministic (``derandomize=True``, no example database).

The C2 minimum is computed independently of the closed form: ``w = ρ·u`` with
``min_u (1/G)Σρ_i(1−u_i)²`` s.t. ``0 ≤ u ≤ 1``, ``Σρ_i u_i ≤ G(1+ε)``, solved by
``scipy.optimize.minimize(method="SLSQP")``.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from asyncgrpo import functionals
from asyncgrpo.testing import strategies as ags
from asyncgrpo.validation import check_eps

#: Properties whose failure means ``fn`` is not a member of ``𝒲_ε`` (the CLI exits 1).
MEMBERSHIP = ("finite", "nonnegative", "w_le_rho", "mean_le_1_plus_eps")

DESCRIPTIONS = {
    "finite": "every weight is a finite number, also for log-ratios up to ±1e4",
    "nonnegative": "every weight is >= 0",
    "w_le_rho": "no trajectory gets more weight than its ratio: w_i <= rho_i",
    "mean_le_1_plus_eps": "the group's mean weight is at most 1+eps (membership of W_eps, C1)",
    "permutation": "reordering the group reorders the weights the same way (permutation equivariance)",
    "padding": "padded entries get weight 0 and do not change the real entries' weights",
    "batch_shape": "a [n_groups, G] call agrees with one call per group (and [1, G] with [G])",
    "c2_minimiser": "for members of W_eps: the bias functional B(w; rho) equals the C2 minimum (scipy QP)",
}

HOLDS, REFUTED, OUT_OF_SCOPE = "holds", "refuted", "out of scope"


@dataclass
class PropertyResult:
    """One row of the report."""

    property: str
    description: str
    verdict: str
    membership: bool
    examples: int
    detail: str = ""
    counterexample: dict[str, Any] | None = None


@dataclass
class WeightMapReport:
    """What :func:`check_weight_map` found: one :class:`PropertyResult` per property."""

    name: str
    eps: float | None
    rows: list[PropertyResult] = field(default_factory=list)

    def __getitem__(self, prop: str) -> PropertyResult:
        for r in self.rows:
            if r.property == prop:
                return r
        raise KeyError(prop)

    @property
    def is_member(self) -> bool:
        """Whether every membership property holds (the map lies in ``𝒲_ε`` on every example)."""
        return all(self[p].verdict == HOLDS for p in MEMBERSHIP)

    @property
    def refuted(self) -> list[str]:
        """Names of the refuted properties."""
        return [r.property for r in self.rows if r.verdict == REFUTED]

    def to_frame(self):
        """The report as a ``pandas.DataFrame`` (one row per property)."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.rows]).set_index("property")

    def __str__(self) -> str:
        eps = "drawn by hypothesis" if self.eps is None else f"{self.eps:g}"
        lines = [f"weight map {self.name}  (eps = {eps})"]
        w = max(len(r.property) for r in self.rows)
        for r in self.rows:
            lines.append(f"  {r.property:<{w}}  {r.verdict:<12}  {r.description}")
            if r.detail:
                lines.append(f"  {'':<{w}}  {'':<12}  {r.detail}")
            if r.counterexample is not None:
                lines.append(f"  {'':<{w}}  {'':<12}  counterexample: {_fmt_example(r.counterexample)}")
        verdict = "member of W_eps" if self.is_member else "NOT a member of W_eps"
        lines.append(f"  => {verdict}")
        return "\n".join(lines)


def _fmt_example(ex: dict[str, Any]) -> str:
    parts = []
    for k, v in ex.items():
        if isinstance(v, np.ndarray):
            v = np.array2string(v, precision=17, separator=", ", threshold=40, max_line_width=10**6)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- calling the user's map
def _to_numpy(out) -> np.ndarray:
    if hasattr(out, "detach"):  # torch tensor
        out = out.detach().cpu().double().numpy()
    return np.asarray(out, dtype=np.float64)


def _call(fn, ell, eps, **kw) -> np.ndarray:
    with np.errstate(all="ignore"):
        w = _to_numpy(fn(np.array(ell, dtype=np.float64), eps, **kw))
    if w.shape != np.shape(ell):
        raise _Violation(f"fn returned shape {w.shape} for log-ratios of shape {np.shape(ell)}")
    return w


class _Violation(AssertionError):
    """A property does not hold on one example."""


def _accepts_mask(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "mask" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _probe(fn, eps, **kw) -> str | None:
    """``None`` if ``fn`` takes a ``[n_groups, G]`` input (with ``kw``), else why not."""
    ell = np.array([[0.1, -0.2, 0.3], [0.0, 0.5, -1.0]])
    try:
        out = _to_numpy(fn(ell, eps, **{k: v[: len(ell)] for k, v in kw.items()}))
    except Exception as exc:  # noqa: BLE001 - any refusal means "not supported", reported as such
        return f"fn does not take [n_groups, G] input{' with mask=' if kw else ''} ({type(exc).__name__}: {exc})"
    return None if out.ndim == 2 else f"fn returned shape {out.shape} for a [2, 3] input"


# --------------------------------------------------------------------------- the C2 minimum by QP
def c2_minimum_qp(log_ratios, eps: float) -> float:
    """``min_{w ∈ 𝒲_ε(ρ)} 𝔅(w;ρ)`` by SLSQP (independent of the closed form ``(ρ̄−1−ε)₊²/ρ̄``).

    With ``w = ρ·u``: ``min (1/G)Σρ_i(1−u_i)²`` s.t. ``0 ≤ u_i ≤ 1`` and ``Σρ_i u_i ≤ G(1+ε)``; ρ is
    rescaled by its maximum so the problem is well conditioned. Raises ``RuntimeError`` if the
    solver does not converge (a verdict must never rest on a failed solve).
    """
    from scipy.optimize import minimize

    ell = np.asarray(log_ratios, dtype=np.float64)
    eps = check_eps(eps)
    G = ell.size
    top = float(ell.max())
    r = np.exp(ell - top)  # ρ / max ρ
    cap = G * (1.0 + eps) * math.exp(-top)  # G(1+ε) / max ρ
    best = None
    # two starts (all-zero, and full weight scaled onto the constraint); SLSQP's "positive
    # directional derivative" stop (status 8) means no further progress, accepted if feasible
    for u0 in (np.zeros(G), np.full(G, min(1.0, cap / float(r.sum())))):
        res = minimize(
            lambda u: float(np.sum(r * (1 - u) ** 2)),
            u0,
            jac=lambda u: -2 * r * (1 - u),
            bounds=[(0.0, 1.0)] * G,
            constraints=[{"type": "ineq", "fun": lambda u: cap - float(r @ u), "jac": lambda u: -r}],
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 1000},
        )
        u = np.clip(res.x, 0.0, 1.0)
        feasible = float(r @ u) <= cap * (1 + 1e-9) + 1e-300
        if res.status in (0, 8) and feasible:
            val = float(np.sum(r * (1 - u) ** 2))
            best = val if best is None else min(best, val)
            if res.status == 0:
                break
    if best is None:
        raise RuntimeError(f"SLSQP did not converge for log_ratios={ell.tolist()}, eps={eps}: {res.message}")
    return best * math.exp(top) / G


# --------------------------------------------------------------------------- the battery
def _check_one(prop: str, fn, x, eps_fixed, rtol: float, state: dict) -> None:
    """Raise :class:`_Violation` (with the reason) if ``prop`` fails on example ``x``."""
    if eps_fixed is None:
        x, eps = x
    else:
        eps = eps_fixed
    try:
        _check_body(prop, fn, x, eps, rtol, state)
    except _Violation:
        raise
    except Exception as exc:  # noqa: BLE001 - a map that crashes on valid input fails the property
        raise _Violation(f"fn raised {type(exc).__name__}: {exc}") from exc


def _check_body(prop, fn, x, eps, rtol, state):
    if prop == "finite":
        w = _call(fn, x, eps)
        bad = ~np.isfinite(w)
        if bad.any():
            i = int(np.argmax(bad))
            raise _Violation(f"w[{i}] = {float(w[i])!r} at log-ratio {float(x[i])!r}")
    elif prop == "nonnegative":
        w = _call(fn, x, eps)
        bad = np.isfinite(w) & (w < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise _Violation(f"w[{i}] = {float(w[i])!r} < 0")
    elif prop == "w_le_rho":
        w = _call(fn, x, eps)
        with np.errstate(divide="ignore", invalid="ignore"):
            logw = np.log(w)
        # compared in log space: ρ_i = exp(ℓ_i) over- or underflows for |ℓ_i| ≥ 710, log w does not
        bad = np.isfinite(w) & (w > 0) & (logw > x + rtol)
        if bad.any():
            i = int(np.argmax(bad))
            raise _Violation(f"w[{i}] = {float(w[i])!r} > rho[{i}] = exp({float(x[i])!r}) = {math.exp(min(x[i], 709.0)):.6g}")
    elif prop == "mean_le_1_plus_eps":
        w = _call(fn, x, eps)
        if np.isfinite(w).all():
            mean = float(np.mean(w))
            if mean > (1.0 + eps) * (1.0 + rtol):
                raise _Violation(f"mean w = {mean!r} > 1+eps = {1.0 + eps!r}")
    elif prop == "permutation":
        ell, perm = x
        a, b = _call(fn, ell[perm], eps), _call(fn, ell, eps)[perm]
        if not np.allclose(a, b, rtol=rtol, atol=0.0, equal_nan=True):
            i = int(np.argmax(~np.isclose(a, b, rtol=rtol, atol=0.0, equal_nan=True)))
            raise _Violation(f"permutation {perm.tolist()}: fn(ell[perm])[{i}] = {float(a[i])!r} but fn(ell)[perm][{i}] = {float(b[i])!r}")
    elif prop == "padding":
        ell, mask, groups = x
        out = _call(fn, ell, eps, mask=mask)
        for r, g in enumerate(groups):
            pads = out[r, ~mask[r]]
            if (pads != 0).any():
                raise _Violation(f"row {r}: padded entries get weights {pads.tolist()}, expected 0")
            ref = _call(fn, g, eps)
            if not np.allclose(out[r, mask[r]], ref, rtol=rtol, atol=0.0, equal_nan=True):
                raise _Violation(f"row {r}: real weights {out[r, mask[r]].tolist()} with padding, {ref.tolist()} without")
    elif prop == "batch_shape":
        out = _call(fn, x, eps)
        for r in range(x.shape[0]):
            ref = _call(fn, x[r], eps)
            if not np.allclose(out[r], ref, rtol=rtol, atol=0.0, equal_nan=True):
                raise _Violation(f"row {r}: batched {out[r].tolist()} vs single-group {ref.tolist()}")
        one = _call(fn, x[:1], eps)[0]
        if not np.allclose(one, _call(fn, x[0], eps), rtol=rtol, atol=0.0, equal_nan=True):
            raise _Violation(f"[1, G] call gives {one.tolist()}, [G] call {_call(fn, x[0], eps).tolist()}")
    elif prop == "c2_minimiser":
        w = _call(fn, x, eps)
        with np.errstate(divide="ignore"):
            B = functionals.bias_functional(x, np.log(w))
        B_min = c2_minimum_qp(x, eps)
        excess = B - B_min
        state["max_excess"] = max(state.get("max_excess", 0.0), excess)
        if excess > state["qp_tol"] * max(1.0, B_min):
            raise _Violation(f"member but not the minimiser, excess B = {excess:.6g} (B = {B:.6g}, C2 minimum {B_min:.6g})")
    else:  # pragma: no cover - programming error
        raise KeyError(prop)


def _strategy(prop: str, fixed_eps: bool, max_size: int):
    if prop in ("finite", "nonnegative", "w_le_rho", "mean_le_1_plus_eps"):
        s = ags.log_ratio_groups(max_size=max_size)
    elif prop == "permutation":
        s = ags.permuted_groups(max_size=min(max_size, 64))
    elif prop == "padding":
        s = ags.padded_groups(max_size=min(max_size, 32))
    elif prop == "batch_shape":
        s = ags.batches_of_groups(max_size=min(max_size, 32))
    else:  # c2_minimiser: ρ kept representable and the QP well conditioned
        s = ags.log_ratio_groups(max_size=min(max_size, 16), max_abs=3.0,
                                 kinds=("local", "moderate", "ties", "all_equal", "dominant"))
    return s if fixed_eps else st.tuples(s, ags.eps_values())


def _run(prop, fn, eps, max_examples, rtol, qp_tol, max_size) -> PropertyResult:
    state: dict[str, Any] = {"qp_tol": qp_tol, "calls": 0}
    failures: list[tuple[Any, str]] = []

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None, print_blob=False, report_multiple_bugs=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
    @given(_strategy(prop, eps is not None, max_size))
    def run(x):
        state["calls"] += 1
        try:
            _check_one(prop, fn, x, eps, rtol, state)
        except _Violation as v:
            failures.append((x, str(v)))
            raise

    member = prop in MEMBERSHIP
    try:
        run()
    except _Violation:
        x, msg = failures[-1]  # hypothesis replays the shrunk example last
        return PropertyResult(prop, DESCRIPTIONS[prop], REFUTED, member, state["calls"], msg, _example(prop, x, eps))
    except Flaky as exc:
        x, msg = failures[-1] if failures else (None, str(exc))
        return PropertyResult(prop, DESCRIPTIONS[prop], REFUTED, member, state["calls"],
                              f"fn is not deterministic (same input, different verdicts): {msg}",
                              None if x is None else _example(prop, x, eps))
    detail = ""
    if prop == "c2_minimiser":
        detail = f"max excess B over {state['calls']} groups = {state.get('max_excess', 0.0):.3g}"
    return PropertyResult(prop, DESCRIPTIONS[prop], HOLDS, member, state["calls"], detail)


def _example(prop, x, eps) -> dict[str, Any]:
    if eps is None:
        x, eps = x
    if prop == "permutation":
        return {"ell": x[0], "perm": x[1].tolist(), "eps": eps}
    if prop == "padding":
        return {"ell": x[0], "mask": x[1], "eps": eps}
    return {"ell": x, "eps": eps}


def check_weight_map(fn: Callable, eps: float | None = 0.2, *, max_examples: int = 100, rtol: float = 1e-9,
                     qp_tol: float = 1e-6, max_size: int = 256, batched: bool | None = None,
                     name: str | None = None) -> WeightMapReport:
    """Run the property battery on ``fn(ell, eps) -> w`` and return a :class:`WeightMapReport`.

    ``fn`` takes one group's log-ratios ``ell`` (float64, shape ``(G,)``) and ``eps`` and returns the
    weights ``w`` (NumPy array, torch tensor or list, shape ``(G,)``). If it also accepts
    ``[n_groups, G]`` input (``batched=True``, or ``None``: when ``fn`` has a ``mask`` keyword),
    ``batch_shape`` is checked; if it accepts ``mask=`` (True = real entry), ``padding`` is
    checked; otherwise those rows are ``out of scope``. (A NumPy map written for one group often
    *runs* on a 2-D array while treating it as one big group, so batch support is declared, not
    guessed.)

    ``eps``: a fixed ε > 0, or ``None`` to let hypothesis draw ε too. ``max_examples`` per property;
    ``rtol``: relative slack for float round-off in every comparison; ``qp_tol``: the excess
    ``𝔅 − 𝔅_min`` tolerated (relative to ``max(1, 𝔅_min)``) before ``c2_minimiser`` is refuted.
    ``max_size``: largest group size drawn (≤ 256).
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable as fn(ell, eps) -> w, got {type(fn).__name__}")
    if eps is not None:
        eps = check_eps(eps)
    if not (isinstance(max_examples, int) and max_examples >= 1):
        raise ValueError(f"max_examples must be an integer >= 1, got {max_examples!r}")
    if not (isinstance(max_size, int) and 1 <= max_size <= 256):
        raise ValueError(f"max_size must be an integer in [1, 256], got {max_size!r}")
    for label, v in (("rtol", rtol), ("qp_tol", qp_tol)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{label} must be a finite number >= 0, got {v!r}")
    report = WeightMapReport(name or getattr(fn, "__qualname__", repr(fn)), eps)
    probe_eps = 0.2 if eps is None else eps
    for prop in MEMBERSHIP + ("permutation",):
        report.rows.append(_run(prop, fn, eps, max_examples, rtol, qp_tol, max_size))
    why = _probe(fn, probe_eps, mask=np.ones((2, 3), dtype=bool)) if _accepts_mask(fn) else "fn has no mask= keyword"
    report.rows.append(_oos("padding", why) if why else _run("padding", fn, eps, max_examples, rtol, qp_tol, max_size))
    if batched is None:
        batched = _accepts_mask(fn)
    why = _probe(fn, probe_eps) if batched else "fn takes one group (pass batched=True to check [n_groups, G] input)"
    report.rows.append(_oos("batch_shape", why) if why else _run("batch_shape", fn, eps, max_examples, rtol, qp_tol, max_size))
    if report.is_member:
        report.rows.append(_run("c2_minimiser", fn, eps, max(20, max_examples // 2), rtol, qp_tol, max_size))
    else:
        failed = [p for p in MEMBERSHIP if report[p].verdict != HOLDS]
        report.rows.append(_oos("c2_minimiser", f"not a member of W_eps ({', '.join(failed)} refuted)"))
    return report


def _oos(prop: str, why: str) -> PropertyResult:
    return PropertyResult(prop, DESCRIPTIONS[prop], OUT_OF_SCOPE, prop in MEMBERSHIP, 0, why)


def registry_map(name: str, backend: str = "torch") -> Callable:
    """The registry estimator ``name`` as ``fn(ell, eps, mask=None) -> w`` for :func:`check_weight_map`.

    ``backend="torch"`` takes ``[G]`` or ``[n_groups, G]`` and a mask (all rows checked);
    ``"numpy"`` (the reference) takes one group (``padding`` and ``batch_shape`` out of scope).
    """
    from asyncgrpo import estimators as est

    if name not in est.ESTIMATORS:
        raise ValueError(f"name must be one of {', '.join(est.ESTIMATORS)}, got {name!r}")
    if backend == "torch":
        import torch

        def fn(ell, eps, mask=None):
            m = None if mask is None else torch.as_tensor(np.asarray(mask, dtype=bool))
            return est.get(name, eps).torch(torch.as_tensor(np.asarray(ell, dtype=np.float64)), mask=m).numpy()
    elif backend == "numpy":
        def fn(ell, eps):
            with np.errstate(over="ignore"):
                return est.get(name, eps)(ell)
    else:
        raise ValueError(f"backend must be 'torch' or 'numpy', got {backend!r}")
    fn.__qualname__ = f"asyncgrpo.estimators.{name} ({backend})"
    return fn


__all__ = [
    "MEMBERSHIP", "DESCRIPTIONS", "PropertyResult", "WeightMapReport", "check_weight_map", "c2_minimum_qp",
    "registry_map", "HOLDS", "REFUTED", "OUT_OF_SCOPE",
]
