"""``check_weight_map``: property-test any weight map ``fn(ell, eps) -> w`` against docs/THEORY.md §3.

The class of docs/THEORY.md §3 is ``𝒲_ε(ρ) = {w : 0 ≤ w_i ≤ ρ_i, (1/G)Σ_i w_i ≤ 1+ε}`` with
``ρ_i = exp(ℓ_i)``; membership gives the second-moment guarantee C1, and C2 says ``gmc`` is the
unique minimiser over the class of ``𝔅(w;ρ) = (1/G)Σ_i (ρ_i − w_i)²/ρ_i``. The battery, one row each,
in four separate verdicts (a map can be a member and numerically unsafe, or pure and not a member):

==========================  =========================================================  ============
property                    in plain words                                             kind
==========================  =========================================================  ============
``real_valued``             one real weight per log-ratio (no complex, string, object;  membership
                            the input's shape)
``nonnegative``             every finite weight is ≥ 0                                  membership
``w_le_rho``                no trajectory gets more than its ratio: ``w_i ≤ ρ_i``       membership
``mean_le_1_plus_eps``      the group's mean weight is at most 1+ε (C1)                 membership
``finite``                  every weight is finite for ``|ℓ_i| ≤ 1e4`` (first failing   numerics
                            ``ℓ`` reported)
``purity``                  ``fn`` leaves its input unchanged (read-only arrays)        purity
``permutation``             reordering the group reorders the weights the same way      structure
``padding``                 padded entries get weight 0 and do not change the others    structure
``batch_shape``             a ``[n_groups, G]`` call agrees with one call per group     structure
``c2_minimiser``            for members: ``𝔅`` equals the C2 minimum (scipy QP)          C2
==========================  =========================================================  ============

Membership is judged where the map's output is finite: an example on which ``fn`` raises or returns a
non-finite weight is not judged by the membership, structure and C2 rows (it is ``finite``'s
counterexample), and a membership row judged on no example at all is ``out of scope``, never
``holds``. Outputs that are not real numbers refute ``real_valued`` and leave every other row out of
scope. Verdicts use the project vocabulary: ``holds``, ``refuted`` (with a counterexample shrunk by
hypothesis), ``out of scope`` (premise not met: ``fn`` takes no ``[n_groups, G]`` input or no ``mask``
keyword, or for ``c2_minimiser`` the map is not a member of ``𝒲_ε``). Runs are deterministic
(``derandomize=True``, no example database).

The C2 minimum is computed independently of the closed form: ``w = ρ·u`` with
``min_u (1/G)Σρ_i(1−u_i)²`` s.t. ``0 ≤ u ≤ 1``, ``Σρ_i u_i ≤ G(1+ε)``, solved by
``scipy.optimize.minimize(method="SLSQP")``.

Split by concept: this module is the battery (hypothesis runs and verdicts); the report and the
properties' names in :mod:`asyncgrpo.testing.report`, calling the user's map in
:mod:`asyncgrpo.testing.calling`, the C2 minimum in :mod:`asyncgrpo.testing.c2_qp`.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from asyncgrpo import functionals
from asyncgrpo.testing import strategies as ags
from asyncgrpo.testing.c2_qp import c2_minimum_qp
from asyncgrpo.testing.calling import _accepts_mask, _call, _finite_call, _NoOutput, _NotReal, _probe, _Violation
from asyncgrpo.testing.report import (
    DESCRIPTIONS,
    HOLDS,
    KINDS,
    MEMBERSHIP,
    ORDER,
    OUT_OF_SCOPE,
    REFUTED,
    PropertyResult,
    WeightMapReport,
)
from asyncgrpo.validation import check_eps


# --------------------------------------------------------------------------- the battery
def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _check_one(prop: str, fn, x, eps_fixed, rtol: float, state: dict) -> None:
    """Raise :class:`_Violation` (with the reason) if ``prop`` fails on example ``x``; count judged examples."""
    if eps_fixed is None:
        x, eps = x
    else:
        eps = eps_fixed
    try:
        _check_body(prop, fn, x, eps, rtol, state)
    except _NotReal:
        if prop == "real_valued":
            raise
        return  # real_valued reports it; every other row is then out of scope
    except _NoOutput as exc:
        if prop == "finite":
            raise _Violation(str(exc)) from exc
        return  # not judged here: numerics are finite's business
    state["judged"] += 1


def _check_body(prop, fn, x, eps, rtol, state):
    if prop == "real_valued":
        _call(fn, x, eps)
    elif prop == "finite":
        w = _call(fn, x, eps)
        bad = ~np.isfinite(w)
        if bad.any():
            i = int(np.argmax(bad))
            raise _Violation(f"w[{i}] = {float(w[i])!r} at log-ratio {float(x[i])!r}")
    elif prop == "nonnegative":
        w = _call(fn, x, eps)
        fin = np.isfinite(w)
        if not fin.any():
            raise _NoOutput("no finite weight")
        bad = fin & (w < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise _Violation(f"w[{i}] = {float(w[i])!r} < 0")
    elif prop == "w_le_rho":
        w = _call(fn, x, eps)
        fin = np.isfinite(w)
        if not fin.any():
            raise _NoOutput("no finite weight")
        with np.errstate(divide="ignore", invalid="ignore"):
            logw = np.log(w)
        # compared in log space: ρ_i = exp(ℓ_i) over- or underflows for |ℓ_i| ≥ 710, log w does not
        bad = fin & (w > 0) & (logw > x + rtol)
        if bad.any():
            i = int(np.argmax(bad))
            raise _Violation(f"w[{i}] = {float(w[i])!r} > rho[{i}] = exp({float(x[i])!r}) = {math.exp(min(x[i], 709.0)):.6g}")
    elif prop == "mean_le_1_plus_eps":
        w = _finite_call(fn, x, eps)
        mean = float(np.mean(w))
        if mean > (1.0 + eps) * (1.0 + rtol):
            raise _Violation(f"mean w = {mean!r} > 1+eps = {1.0 + eps!r}")
    elif prop == "purity":
        _check_purity(fn, x, eps, state)
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
        w = _finite_call(fn, x, eps)
        with np.errstate(divide="ignore"):
            B = functionals.bias_functional(x, np.log(w))
        B_min = c2_minimum_qp(x, eps)
        excess = B - B_min
        state["max_excess"] = max(state.get("max_excess", 0.0), excess)
        if excess > state["qp_tol"] * max(1.0, B_min):
            raise _Violation(f"member but not the minimiser, excess B = {excess:.6g} (B = {B:.6g}, C2 minimum {B_min:.6g})")
    else:  # pragma: no cover - programming error
        raise KeyError(prop)


def _check_purity(fn, ell, eps, state):
    """``fn`` on read-only copies of ``ell`` (and of a mask, when it takes one) must not change them."""
    _call(fn, ell, eps)  # the writable call works (else _NoOutput: not judged here)
    calls = [(np.array(ell, dtype=np.float64), {})]
    if state.get("mask_ok"):
        calls.append((np.array(ell, dtype=np.float64)[None, :], {"mask": np.ones((1, ell.size), dtype=bool)}))
    for arr, kw in calls:
        inputs = [arr] + list(kw.values())
        before = [a.copy() for a in inputs]
        for a in inputs:
            a.flags.writeable = False
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns about sharing a read-only array's memory
                fn(arr, eps, **kw)
        except Exception as exc:  # noqa: BLE001 - it ran on a writable copy, so the read-only flag made it fail
            raise _Violation(f"fn fails on a read-only input ({type(exc).__name__}: {exc}): it writes to its input")
        for name, a, b in zip(["ell"] + list(kw), inputs, before):
            if a.tobytes() != b.tobytes():
                i = int(np.argmax((a != b).ravel())) if a.dtype == b.dtype else 0
                raise _Violation(f"fn changed its input {name}: entry {i} was {b.ravel()[i]!r}, "
                                 f"is {a.ravel()[i]!r} after the call")


def _first_unsafe(fn, x, eps) -> float:
    """The ``ℓ`` where the weights first stop being finite on the ray ``t·x``, ``t ∈ [0, 1]`` (bisection)."""
    def bad(t):
        try:
            return not np.isfinite(_call(fn, t * x, eps)).all()
        except (_NoOutput, _Violation):
            return True

    j = int(np.argmax(np.abs(x)))
    if bad(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(64):  # t to 2^-64 relative: ℓ to ~1e-15 of its size
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if bad(mid) else (mid, hi)
    return float(hi * x[j])


def _strategy(prop: str, fixed_eps: bool, max_size: int):
    if prop in ("real_valued", "finite", "nonnegative", "w_le_rho", "mean_le_1_plus_eps", "purity"):
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


def _run(prop, fn, eps, max_examples, rtol, qp_tol, max_size, report=None, **extra) -> PropertyResult:
    state: dict[str, Any] = {"qp_tol": qp_tol, "calls": 0, "judged": 0, **extra}
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
    kind = KINDS[prop]
    try:
        run()
    except _Violation:
        x, msg = failures[-1]  # hypothesis replays the shrunk example last
        if prop == "finite" and report is not None:
            ex = x[0] if eps is None else x
            report.unsafe_from = _first_unsafe(fn, ex, x[1] if eps is None else eps)
            msg = f"{msg}; first non-finite weight at ℓ = {report.unsafe_from:.6g} (bisection from 0)"
        return PropertyResult(prop, DESCRIPTIONS[prop], REFUTED, member, state["calls"], msg, _example(prop, x, eps),
                              kind)
    except Flaky as exc:
        x, msg = failures[-1] if failures else (None, str(exc))
        return PropertyResult(prop, DESCRIPTIONS[prop], REFUTED, member, state["calls"],
                              f"fn is not deterministic (same input, different verdicts): {msg}",
                              None if x is None else _example(prop, x, eps), kind)
    skipped = state["calls"] - state["judged"]
    if state["judged"] == 0:
        # never judged: fn raised or returned non-finite weights on every example
        return PropertyResult(prop, DESCRIPTIONS[prop], OUT_OF_SCOPE, member, state["calls"],
                              f"not judged: fn gave no finite output on any of {state['calls']} examples", None, kind)
    detail = ""
    if prop == "c2_minimiser":
        detail = f"max excess B over {state['judged']} groups = {state.get('max_excess', 0.0):.3g}"
    if skipped and prop != "real_valued":
        detail = (detail + "; " if detail else "") + \
            f"judged on {state['judged']} of {state['calls']} examples (no finite output on the others)"
    return PropertyResult(prop, DESCRIPTIONS[prop], HOLDS, member, state["calls"], detail, None, kind)


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
    if not _is_int(max_examples) or max_examples < 1:  # NumPy integers too; a bool is not a count
        raise ValueError(f"max_examples must be an integer >= 1, got {max_examples!r}")
    if not _is_int(max_size) or not 1 <= max_size <= 256:
        raise ValueError(f"max_size must be an integer in [1, 256], got {max_size!r}")
    max_examples, max_size = int(max_examples), int(max_size)
    for label, v in (("rtol", rtol), ("qp_tol", qp_tol)):
        if not (isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{label} must be a finite number >= 0, got {v!r}")
    if batched is not None and not isinstance(batched, (bool, np.bool_)):
        raise ValueError(f"batched must be True, False or None, got {batched!r}")
    report = WeightMapReport(name or getattr(fn, "__qualname__", repr(fn)), eps)
    probe_eps = 0.2 if eps is None else eps
    args = (fn, eps, max_examples, rtol, qp_tol, max_size)
    real = _run("real_valued", *args)
    report.rows.append(real)
    if real.verdict != HOLDS:
        # the refutation's own reason (not real numbers, or one weight per log-ratio missing), not a generic one
        why = f"real_valued refuted: {real.detail}" if real.verdict == REFUTED else real.detail
        report.rows += [_oos(p, why) for p in ORDER[1:]]
        return report
    mask_why = _probe(fn, probe_eps, mask=np.ones((2, 3), dtype=bool)) if _accepts_mask(fn) else \
        "fn has no mask= keyword"
    for prop in MEMBERSHIP[1:] + ("finite",):
        report.rows.append(_run(prop, *args, report=report))
    report.rows.append(_run("purity", *args, mask_ok=mask_why is None))
    report.rows.append(_run("permutation", *args))
    report.rows.append(_oos("padding", mask_why) if mask_why else _run("padding", *args))
    if batched is None:
        batched = _accepts_mask(fn)
    why = _probe(fn, probe_eps) if batched else "fn takes one group (pass batched=True to check [n_groups, G] input)"
    report.rows.append(_oos("batch_shape", why) if why else _run("batch_shape", *args))
    if report.is_member:
        report.rows.append(_run("c2_minimiser", fn, eps, max(20, max_examples // 2), rtol, qp_tol, max_size))
    else:
        failed = [f"{p} {report[p].verdict}" for p in MEMBERSHIP if report[p].verdict != HOLDS]
        report.rows.append(_oos("c2_minimiser", f"not a member of W_eps ({', '.join(failed)})"))
    return report


def _oos(prop: str, why: str) -> PropertyResult:
    return PropertyResult(prop, DESCRIPTIONS[prop], OUT_OF_SCOPE, prop in MEMBERSHIP, 0, why, None, KINDS[prop])


def registry_map(name: str, backend: str = "torch") -> Callable:
    """The registry estimator ``name`` as ``fn(ell, eps, mask=None) -> w`` for :func:`check_weight_map`.

    ``backend="torch"`` takes ``[G]`` or ``[n_groups, G]`` and a mask (all rows checked);
    ``"numpy"`` (the reference) takes one group (``padding`` and ``batch_shape`` out of scope).
    """
    from asyncgrpo import estimators as est

    if name not in est.TRAJECTORY_ESTIMATORS:
        from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

        if name in TOKEN_ESTIMATORS:
            raise ValueError(f"{name!r} is a token-level estimator: its weights depend on per-token ratios (and "
                             f"advantages), not on a group's ℓ alone, so membership of W_eps is not defined; "
                             f"trajectory-level estimators: {', '.join(est.TRAJECTORY_ESTIMATORS)}")
        raise ValueError(f"name must be one of {', '.join(est.TRAJECTORY_ESTIMATORS)}, got {name!r}")
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
    "MEMBERSHIP", "KINDS", "ORDER", "DESCRIPTIONS", "PropertyResult", "WeightMapReport", "check_weight_map", "c2_minimum_qp",
    "registry_map", "HOLDS", "REFUTED", "OUT_OF_SCOPE",
]
