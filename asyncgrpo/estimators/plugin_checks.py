"""Registration checks of a plugin estimator's three backends (``$ASYNCGRPO_ESTIMATORS``; issue 38).

A plugin is code the test suite never saw. Before its estimator joins the registry, each backend is
called once on a small fixed probe batch and must return what the kernels that call it assume:

* **NumPy** and **torch**: an array of the input's shape (a scalar or a wrong shape is refused here, not
  met later as a dtype error deep in ``policy_loss``), real floating, and no NaN or ``+inf`` (a log
  weight of ``−inf`` is a zero weight, allowed; a coefficient ``k`` must be finite);
* **Numba**: it writes *every* entry of ``out``. The kernel runs twice (three times) on the same input with
  ``out`` pre-filled with different values (0, NaN, −7); any difference means an entry was left unwritten
  or read before being written, and the trainer would run on uninitialised memory.

* **one name, one map** (issue 56 item 10): the three backends return the same weights on the probe (relative
  :data:`AGREE_RTOL`; the Numba token kernel's ``k/T_i`` times ``T_i``), so a learner (Numba) and a loss (torch)
  never train different maps under one name;
* **the class it declares**: a map declared ``in_class`` has ``w_i ≤ ρ_i`` and a group mean ``≤ 1+ε`` on the probe
  (THEORY §3), a declaration the registry's ``IN_CLASS`` and the checks trust.

Each failure is a ``ValueError`` naming the estimator, its module and the backend. The probe inputs are
moderate (``|ℓ| ≤ 3``), so a map that fails them fails everywhere; the runtime checks of
:func:`asyncgrpo.estimators.token_level.policy_loss` cover the rest.
"""
from __future__ import annotations

import math

import numpy as np

#: Trajectory probe: two groups of G = 4 log-ratios.
_ELL = np.array([[-1.5, 0.3, 0.0, 2.0], [0.1, -0.2, 0.4, -3.0]])
#: Token probe: N = 4 trajectories of T = 3 tokens, ragged mask.
_TOK_ELL = np.array([[0.2, -0.1, 0.3], [-0.4, 0.5, 0.0], [1.0, -1.2, 0.1], [0.05, 0.0, 0.0]])
_TOK_MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=bool)
_ADV = np.array([1.0, -0.5, 0.25, -1.0])
_PREFILLS = (0.0, math.nan, -7.0)
#: Relative tolerance between backends: float64 ``exp``/``log``/``log1p`` of one formula in another order agree to
#: a few ulps; 1e-9 leaves six orders of margin and still refuses any real difference (0.038 in issue 56).
AGREE_RTOL = 1e-9
#: Slack of the class bounds on the probe (``w_i ≤ ρ_i``, mean ``≤ 1+ε``), relative: rounding only.
CLASS_RTOL = 1e-12


def _check_agree(e, module, backend, got, ref, where=None):
    """``ValueError`` if weights ``got`` (``backend``) and ``ref`` (NumPy) differ beyond :data:`AGREE_RTOL`."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if where is not None:
        got, ref = np.where(where, got, 0.0), np.where(where, ref, 0.0)
    with np.errstate(invalid="ignore"):
        ok = (got == ref) | (np.abs(got - ref) <= AGREE_RTOL * np.maximum(np.abs(got), np.abs(ref)))
    if not ok.all():
        idx = tuple(int(i) for i in np.argwhere(~ok)[0])
        raise _fail(e, module, backend, f"disagrees with its NumPy backend at {idx}: {got[idx]!r} vs {ref[idx]!r} "
                                        f"(|Δ| = {abs(got[idx] - ref[idx]):.3g}; one name must be one map in NumPy, "
                                        "Numba and torch)")


def _check_in_class(e, module, logw, ell, eps):
    """A map declared ``in_class``: ``w_i ≤ ρ_i`` and group mean ``≤ 1+ε`` on every probe group."""
    w = np.exp(logw)
    for g in range(ell.shape[0]):
        over = logw[g] > ell[g] + CLASS_RTOL * np.maximum(1.0, np.abs(ell[g]))
        if over.any():
            i = int(np.argmax(over))
            raise _fail(e, module, "NumPy", f"is declared in_class but gives w = {w[g, i]:.6g} > ρ = {math.exp(ell[g, i]):.6g} "
                                            f"(group {g}, row {i}, ε = {eps}): the class 𝒲_ε needs w_i ≤ ρ_i")
        mean = float(w[g].mean())
        if mean > (1.0 + eps) * (1.0 + CLASS_RTOL):
            raise _fail(e, module, "NumPy", f"is declared in_class but its group {g} has mean weight {mean:.6g} > "
                                            f"1+ε = {1 + eps} (ε = {eps})")


def _fail(e, module: str, backend: str, what: str) -> ValueError:
    return ValueError(f"estimator {e.name!r} from module {module!r}: its {backend} backend {what}")


def _as_array(e, module, backend, got, shape, convert):
    try:
        arr = convert(got)
    except Exception as exc:  # noqa: BLE001 - anything not array-like is the plugin's defect
        raise _fail(e, module, backend, f"returned a {type(got).__name__}, not an array ({exc})") from None
    if arr.shape != shape:
        raise _fail(e, module, backend, f"returned shape {arr.shape} ({type(got).__name__}); expected {shape}, "
                                         "one value per input entry")
    if not np.issubdtype(arr.dtype, np.floating):
        raise _fail(e, module, backend, f"returned dtype {arr.dtype}; expected a real floating dtype")
    return arr


def _check_values(e, module, backend, arr, what):
    bad = np.isnan(arr) | (arr == math.inf) if what == "log w" else ~np.isfinite(arr)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise _fail(e, module, backend, f"returned {what} = {arr[idx]} at {idx} on the finite probe input "
                                         "(NaN or inf: no weight)")


def _call(e, module, backend, fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - name whose code failed
        raise _fail(e, module, backend, f"raised {type(exc).__name__}: {exc} on the probe input") from exc


def _check_numba_writes_out(e, module, run, shape):
    outs = []
    for fill in _PREFILLS:
        out = np.full(shape, fill)
        _call(e, module, "Numba", run, out)
        outs.append(out)
    for fill, out in zip(_PREFILLS[1:], outs[1:]):
        if not np.array_equal(outs[0], out, equal_nan=True):
            idx = tuple(int(i) for i in np.argwhere(~((outs[0] == out) | (np.isnan(outs[0]) & np.isnan(out))))[0])
            raise _fail(e, module, "Numba", f"left out[{', '.join(map(str, idx))}] unwritten (or read it first): "
                                            f"{outs[0][idx]} with out pre-filled with 0, {out[idx]} with {fill}")
    return outs[0]


def check_backends(e, module: str, params) -> None:
    """Call ``e``'s NumPy, Numba and torch backends on the probe batch; ``ValueError`` naming what is wrong.

    ``params``: the registry's ``TokenParams`` at their defaults (``eps_low = 0.2, eps_high = 0.28,
    tau_m2 = 0.04``, no dual clip, CISPO ``upper``), passed in so this module does not import the registry.

    Without PyTorch installed the torch backend is not called (nothing could call it either).
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in every extra
        torch = None
    to_np = lambda x: np.asarray(x, dtype=None)  # noqa: E731
    to_t = lambda x: x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(torch.as_tensor(x))  # noqa: E731
    if e.level == "trajectory":
        eps = 0.2
        lw = _as_array(e, module, "NumPy", _call(e, module, "NumPy", e.numpy, _ELL.copy(), eps), _ELL.shape, to_np)
        _check_values(e, module, "NumPy", lw, "log w")
        for g, row in enumerate(_ELL):
            out = _check_numba_writes_out(e, module, lambda o, r=row: e.numba(r.copy(), eps, o), row.shape)
            _check_values(e, module, "Numba", out, "log w")
            _check_agree(e, module, "Numba", np.exp(out), np.exp(lw[g]))
        if e.in_class:
            _check_in_class(e, module, lw, _ELL, eps)
        if torch is None:
            return
        ell_t = torch.as_tensor(_ELL)
        lt = _as_array(e, module, "torch", _call(e, module, "torch", e.torch, ell_t, eps, torch.ones_like(ell_t, dtype=torch.bool)),
                       _ELL.shape, to_t)
        _check_values(e, module, "torch", lt, "log w")
        _check_agree(e, module, "torch", np.exp(lt), np.exp(lw))
        return
    p = params
    ell = np.where(_TOK_MASK, _TOK_ELL, 0.0)
    T_i = _TOK_MASK.sum(axis=1).astype(np.float64)[:, None]
    k = _as_array(e, module, "NumPy", _call(e, module, "NumPy", e.numpy, ell, _TOK_MASK, _ADV, T_i, p), ell.shape, to_np)
    _check_values(e, module, "NumPy", np.where(_TOK_MASK, k, 0.0), "k")
    out = _check_numba_writes_out(
        e, module, lambda o: e.numba(ell.copy(), _TOK_MASK, _ADV, p.eps_low, p.eps_high, p.tau_m2, p.log_c, p.cispo_mode, o),
        ell.shape)
    _check_values(e, module, "Numba", out, "k")
    _check_agree(e, module, "Numba", out * T_i, k, where=_TOK_MASK)  # the Numba kernel writes c = k/T_i
    if torch is None:
        return
    kt = _call(e, module, "torch", e.torch, torch.as_tensor(ell), torch.as_tensor(_TOK_MASK), torch.as_tensor(_ADV),
               torch.as_tensor(T_i), p)
    kt = _as_array(e, module, "torch", kt, ell.shape, to_t)
    _check_values(e, module, "torch", np.where(_TOK_MASK, kt, 0.0), "k")
    _check_agree(e, module, "torch", kt, k, where=_TOK_MASK)


def check_torch_output(name: str, what: str, x, mask) -> None:
    """``ValueError`` naming estimator ``name`` if its torch output ``x`` holds NaN, or ``+inf`` (``what`` is
    ``"log w"``: a log weight from finite log-ratios is finite or ``−inf``), on ``mask``'s entries.

    Called by :func:`asyncgrpo.estimators.token_level.policy_loss` on every estimator's output: a NaN weight
    would otherwise become a NaN or infinite loss and a diverged run, with no word of whose map it was.
    """
    import torch

    bad = torch.isnan(x) | (x == math.inf) if what == "log w" else torch.isnan(x)
    bad = bad & mask
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"estimator {name!r} returned {what} = {float(x[idx])} at {idx} from finite inputs "
                         "(NaN or +inf: no weight); its map is broken there")


__all__ = ["check_backends", "check_torch_output", "AGREE_RTOL"]
