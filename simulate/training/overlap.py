"""C6, local policy overlap, measured on training runs (docs/THEORY.md §3 C6).

C6 assumes ``|log π_w(τ) − log π_w'(τ)| ≤ κ‖w − w'‖`` on the support and ``‖w_k − w_{k−d}‖ ≤ η d M`` with
``M² ≥ M₂ = E‖ĝ‖²``, and concludes ``|ρ − 1| ≤ e^{κηdM} − 1`` and ``σ² = χ²(π_{w_k}‖μ_k) ≤ (e^{κηdM} − 1)²``
(``μ_k = π_{w_{k−d_k}}``). Per learner step the kernel records (:class:`simulate.training.TrainResult`)
the exact ``σ²`` (``chi2``), ``L_k = max_{τ ∈ supp μ_k} |log ρ(τ)|`` (``logratio_max``), ``‖Δw_k‖ =
‖w_k − w_{k−d_k}‖`` (``dtheta_norm``) and ``‖ĝ_k‖²`` in ``w`` (``gpar_norm2``). The inequality is then a
chain whose every link is checked separately::

    σ² ≤ (e^{L} − 1)² ≤ (e^{κ‖Δw‖} − 1)² ≤ (e^{κηdM} − 1)²
     (1) E_μ(ρ−1)² ≤ max(ρ−1)²   (2) L ≤ κ‖Δw‖ (κ global)   (3) ‖Δw‖ ≤ ηdM (the premise)

using ``|e^x − 1| ≤ e^{|x|} − 1``. κ is the global constant of :func:`kappa_bound` (derived in
docs/THEORY.md §C6); ``M`` is the smallest constant that meets both of the theory's conditions on the run,
``M = max(M̂, √M̂₂)`` with ``M̂ = max_k ‖Δw_k‖/(η d_k)`` (premise (3) on every step) and ``M̂₂`` the run's
mean of ``‖ĝ_k‖²`` (the sample second moment that stands in for ``M₂``). Bounds are kept as logarithms,
``log (e^x − 1)² = 2 log expm1(x)``, because ``e^{κηdM}`` overflows a float on stale runs.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from simulate.training.config import require_diagnostics

#: Relative round-off slack of a link ``a ≤ b`` compared in log space: ``log a ≤ log b + RTOL_LOG``. The
#: quantities are sums of ≤ T·S·V ≤ 10⁴ double-precision terms (χ² by DP, log-ratios over T ≤ 12 tokens
#: of log-softmax values), each carrying a relative error ≲ 10⁴·2.2e−16 ≈ 2e−12; 1e−9 leaves a wide
#: margin for that and for the ``log``/``expm1`` conversions, and is far below any real violation.
RTOL_LOG = 1e-9

#: Round-off of ``L = max |log ρ|``, in units of ``T·eps·(θ_max + log V)``: ``L`` sums T differences of
#: log-softmax values ``θ − logsumexp θ``, each exact to a few ulp of ``|logsumexp θ| ≤ θ_max + log V`` (the
#: kernel stops a run at ``max|θ| > θ_max``). Where the policy has saturated, ``ĝ ~ 1e−17`` moves ``w`` by one
#: ulp while ``L`` is log-softmax round-off ~1e−14 (measured on feature-lm-bernoulli), so link (2) needs this
#: absolute slack; 8 ulp per token is above what was seen and ~1e−11 at most, far below a real ``L``.
L_ULPS = 8.0

#: ``σ²`` at or below this is treated as 0 (the DP's ``Σ f − 1`` has round-off ~1e−15): its looseness is
#: not a number, and the link ``σ² ≤ …`` holds trivially there.
SIGMA2_FLOOR = 1e-12


def kappa_bound(inst) -> float:
    """Global Lipschitz constant ``κ = sup_w max_τ ‖∇_w log π_w(τ)‖₂`` of the instance's policy class.

    Tabular softmax (``w = θ``, logits ``θ[t,s,·]``): the score of a path is ``Σ_t (e_{a_t} − π(·|s_t))``
    placed in row ``(t, s_t)``; different ``t`` are different rows, so the squared norm is
    ``Σ_t ‖e_{a_t} − π(·|s_t)‖² = Σ_t [(1 − π_{a_t})² + Σ_{b≠a_t} π_b²] < 2T`` (sup as ``π`` concentrates on one
    ``b ≠ a_t``): ``κ = √(2T)``. Log-linear ``θ = Φw``: ``∇_w log π_w(τ) = Σ_t Σ_b π_b (φ_{t,s_t,a_t} − φ_{t,s_t,b})``,
    so ``‖·‖ ≤ Σ_t c_t(s_t, a_t)`` with ``c_t(s, a) = max_b ‖φ_{t,s,a} − φ_{t,s,b}‖``, and ``κ`` is the largest
    such sum over the paths (a backward max-plus DP over ``(t, s)``; ≤ ``Σ_t 2 max‖φ‖``). By the mean-value
    theorem ``|log π_w(τ) − log π_w'(τ)| ≤ κ‖w − w'‖`` for every ``w, w'`` and every path.
    """
    T, S, V = (int(x) for x in inst.next_state.shape)
    phi = getattr(inst, "features", None)
    if phi is None:
        return math.sqrt(2.0 * T)
    f = np.asarray(phi, dtype=np.float64).reshape(T, S, V, -1)
    diff = np.linalg.norm(f[:, :, :, None, :] - f[:, :, None, :, :], axis=-1)  # (T,S,V,V): ‖φ_a − φ_b‖
    c = diff.max(axis=3)  # c_t(s, a)
    best = np.zeros(S)  # B_T = 0; B_t(s) = max_a c_t(s,a) + B_{t+1}(next(s,a))
    for t in range(T - 1, -1, -1):
        best = np.max(c[t] + best[inst.next_state[t]], axis=1)
    return float(best[int(inst.s0)])


def log_sq_expm1(x) -> np.ndarray:
    """``log (e^x − 1)²`` for ``x ≥ 0`` without overflow: ``2 log expm1(x)`` below 30, ``2(x + log1p(−e^{−x}))``
    above (where ``expm1`` would overflow past x ≈ 709); ``−inf`` at ``x = 0``, NaN stays NaN."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        small = 2.0 * np.log(np.expm1(np.minimum(x, 30.0)))
        large = 2.0 * (x + np.log1p(-np.exp(-np.maximum(x, 30.0))))
    return np.where(x < 30.0, small, large)


def run_steps(result, kappa: float, M: float | None = None) -> pd.DataFrame:
    """Per step ``k`` of one run with ``d_k ≥ 1`` and finite diagnostics: the chain of the module docstring.

    Columns: ``k, d, sigma2, logratio_max, dtheta_norm, kappa_hat`` (``L/‖Δw‖``), ``log_sigma2``, ``log_b_ratio``
    (``log (e^L − 1)²``), ``log_b_dtheta`` (``log (e^{κ‖Δw‖} − 1)²``), ``log_b_theory`` (``log (e^{κηdM} − 1)²``),
    ``premise`` (``‖Δw‖ ≤ ηdM``), ``link1, link2, link3, holds`` (the links and ``σ² ≤ (e^{κηdM} − 1)²``,
    with :data:`RTOL_LOG` slack). ``M`` defaults to :func:`run_M` of the run. Steps with ``d_k = 0`` are left
    out (every term is 0 there); steps after a divergence (NaN) are left out and counted in ``attrs``.
    """
    cfg = result.config
    _require_diagnostics(result)
    M = run_M(result)["M"] if M is None else float(M)
    d = np.asarray(result.delays, dtype=np.float64)
    sig = np.asarray(result.chi2, dtype=np.float64)
    L = np.asarray(result.logratio_max, dtype=np.float64)
    dw = np.asarray(result.dtheta_norm, dtype=np.float64)
    finite = np.isfinite(sig) & np.isfinite(L) & np.isfinite(dw)
    keep = finite & (d >= 1)
    k = np.flatnonzero(keep)
    d, sig, L, dw = d[keep], sig[keep], L[keep], dw[keep]
    eta = float(cfg.eta)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_sig = np.where(sig > SIGMA2_FLOOR, np.log(np.maximum(sig, SIGMA2_FLOOR)), -np.inf)
        df = pd.DataFrame(dict(
            k=k, d=d.astype(np.int64), sigma2=sig, logratio_max=L, dtheta_norm=dw,
            kappa_hat=np.where(dw > 0, L / dw, np.nan), log_sigma2=log_sig,
            log_b_ratio=log_sq_expm1(L), log_b_dtheta=log_sq_expm1(kappa * dw),
            log_b_theory=log_sq_expm1(kappa * eta * d * M),
        ))
    # the premise (3) with M = max(M̂, √M̂₂) holds on every step by construction; checked, not assumed
    df["premise"] = dw <= eta * d * M * (1.0 + RTOL_LOG)
    df["link1"] = _le_log(df.log_sigma2, df.log_b_ratio)
    T, V = int(result.theta.shape[0]), int(result.theta.shape[-1])
    atol_L = L_ULPS * T * np.finfo(np.float64).eps * (float(cfg.theta_max) + math.log(V))
    df["link2"] = L <= kappa * dw * (1.0 + RTOL_LOG) + atol_L
    df["link3"] = df.premise
    df["holds"] = _le_log(df.log_sigma2, df.log_b_theory)
    df["resolved"] = L > 1e3 * atol_L  # L well above its round-off: the steps κ̂ is taken over
    df.attrs.update(kappa=float(kappa), M=M, eta=eta, n_dropped=int(np.sum(~finite)), atol_L=atol_L)
    return df


def _le_log(log_a, log_b) -> np.ndarray:
    """``a ≤ b`` from logarithms, with :data:`RTOL_LOG` slack; ``a = 0`` (log −inf) is below anything."""
    a, b = np.asarray(log_a, dtype=np.float64), np.asarray(log_b, dtype=np.float64)
    slack = RTOL_LOG * np.maximum(1.0, np.where(np.isfinite(b), np.abs(b), 0.0))  # b = −inf: no slack
    return (a == -np.inf) | (a <= b + slack)


def _require_diagnostics(result) -> None:
    """Refuse a run without C6's curves (``dtheta_norm``, ``logratio_max``): an old result, or one made with
    ``TrainConfig(diagnostics=False)``, whose NaN curves would read as "no step qualifies"."""
    if result.dtheta_norm is None or result.logratio_max is None:
        raise ValueError("this TrainResult has no C6 diagnostics (dtheta_norm, logratio_max): run it with the "
                         "current simulate.training kernel")
    require_diagnostics(result, "C6 diagnostics (dtheta_norm, logratio_max)")


def run_M(result) -> dict:
    """The run's constants of C6's premise: ``M_hat = max_k ‖Δw_k‖/(η d_k)`` (over ``d_k ≥ 1``), ``sqrt_M2 =
    √(mean_k ‖ĝ_k‖²)`` in ``w`` (``gpar_norm2``; NaN steps left out) and ``M = max(M_hat, sqrt_M2)``, the smallest
    ``M`` with the premise on every step and ``M² ≥ M̂₂``; ``binding`` names which of the two sets it."""
    _require_diagnostics(result)
    d = np.asarray(result.delays, dtype=np.float64)
    dw = np.asarray(result.dtheta_norm, dtype=np.float64)
    ok = (d >= 1) & np.isfinite(dw)
    M_hat = float(np.max(dw[ok] / (result.config.eta * d[ok]))) if ok.any() else 0.0
    g = np.asarray(result.gpar_norm2, dtype=np.float64)
    g = g[np.isfinite(g)]
    sqrt_M2 = float(math.sqrt(np.mean(g))) if g.size else math.nan
    M = max(M_hat, sqrt_M2) if math.isfinite(sqrt_M2) else M_hat
    return dict(M_hat=M_hat, sqrt_M2=sqrt_M2, M=M, binding="M_hat" if M == M_hat else "sqrt_M2")


def overlap_table(results, kappa: float | None = None, inst=None) -> pd.DataFrame:
    """:func:`run_steps` for every run of ``results`` (one instance), stacked, with ``run`` (index),
    ``estimator``, ``seed``, ``eta``, ``M_hat``, ``sqrt_M2``, ``M`` per run. ``kappa`` defaults to
    :func:`kappa_bound` of ``inst`` (or of the first run's instance)."""
    results = list(results)
    if kappa is None:
        kappa = kappa_bound(inst if inst is not None else results[0].config.instance.build())
    parts = []
    for i, r in enumerate(results):
        m = run_M(r)
        df = run_steps(r, kappa, m["M"])
        parts.append(df.assign(run=i, estimator=r.config.estimator, seed=int(r.config.seed), eta=float(r.config.eta),
                               M_hat=m["M_hat"], sqrt_M2=m["sqrt_M2"], M=m["M"], n_dropped=df.attrs["n_dropped"]))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    out.attrs["kappa"] = float(kappa)
    return out


def summary(df: pd.DataFrame) -> dict:
    """What C6's row reports for a table of steps (:func:`run_steps` / :func:`overlap_table`): the fraction of
    steps on which each link and the whole inequality hold (1 up to round-off if the code is right; less is
    a finding), the premise with ``M = √M̂₂`` alone (how often ``‖Δw‖ ≤ ηd√M̂₂``, the theory's M without the
    realised maximum), the empirical ``κ̂ = max L/‖Δw‖`` against κ (over the steps
    whose ``L`` is well above its round-off, ``resolved``), and the looseness ``bound/σ²`` of each
    bound over the steps with ``σ² > SIGMA2_FLOOR`` as ``log10`` (median, min, max): ``…_min`` is the tightest
    step."""
    n = len(df)
    out = dict(n_steps=n, kappa=df.attrs.get("kappa", math.nan))
    for c in ("link1", "link2", "link3", "holds"):
        out[f"frac_{c}"] = float(df[c].mean()) if n else math.nan
    if n and "sqrt_M2" in df:
        out["frac_premise_sqrt_M2"] = float(np.mean(df.dtheta_norm <= df.eta * df.d * df.sqrt_M2 * (1 + RTOL_LOG)))
    res = df[df.resolved & np.isfinite(df.kappa_hat)] if n else df
    out["kappa_hat"] = float(res.kappa_hat.max()) if len(res) else math.nan  # over steps with L above round-off
    pos = df[np.isfinite(df.log_sigma2)]
    out["n_positive"] = len(pos)
    for name, col in (("ratio", "log_b_ratio"), ("dtheta", "log_b_dtheta"), ("theory", "log_b_theory")):
        lg = (pos[col] - pos.log_sigma2).to_numpy() / math.log(10.0)
        out[f"log10_loose_{name}_median"] = float(np.median(lg)) if lg.size else math.nan
        out[f"log10_loose_{name}_min"] = float(np.min(lg)) if lg.size else math.nan
        out[f"log10_loose_{name}_max"] = float(np.max(lg)) if lg.size else math.nan
    return out


__all__ = ["kappa_bound", "log_sq_expm1", "run_steps", "run_M", "overlap_table", "summary", "RTOL_LOG", "SIGMA2_FLOOR"]
