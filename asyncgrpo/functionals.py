"""Group functionals of THEORY.md §1 and §3 (NumPy reference).

For one group with log-ratios ``ℓ`` (shape ``(G,)``) and weights ``w``:

- group mass ``ρ̄ = (1/G) Σ_j ρ_j`` with ``log ρ̄ = logsumexp(ℓ) − log G``;
- ratio-based bias functional ``𝔅(w;ρ) = (1/G) Σ_i (ρ_i − w_i)²/ρ_i`` (C2);
- removed mass ``(1/G) Σ_i (ρ_i − w_i)`` (C2, C7);
- effective sample size of the weights ``(Σw)²/Σw²``;
- advantages ``A_i = R_i − R̄`` (or ``/(std(R)+δ)``, the GRPO option).

Everything is computed from ``ℓ`` and ``log w`` so that ``|ℓ| ≤ 1e4`` is safe.
"""
from __future__ import annotations

import numpy as np

from asyncgrpo.estimators.reference import log_group_mass
from asyncgrpo.validation import check_finite, check_log_ratios, check_log_weights

__all__ = ["group_mass", "log_group_mass", "bias_functional", "removed_mass", "ess", "advantages"]


def group_mass(log_ratios) -> float:
    """``ρ̄ = exp(logsumexp(ℓ) − log G)``; may be ``inf`` only if ``ρ̄`` exceeds float64."""
    ell = check_log_ratios(log_ratios)
    with np.errstate(over="ignore"):
        return float(np.exp(log_group_mass(ell)))


def _shortfall(ell: np.ndarray, logw: np.ndarray) -> np.ndarray:
    # f_i = 1 − w_i/ρ_i, from a log difference so that tiny or huge ρ_i stay exact.
    return -np.expm1(logw - ell)


def bias_functional(log_ratios, log_w) -> float:
    """``𝔅(w;ρ) = (1/G) Σ_i (ρ_i − w_i)²/ρ_i = (1/G) Σ_i ρ_i (1 − w_i/ρ_i)²``."""
    ell = check_log_ratios(log_ratios)
    f = _shortfall(ell, check_log_weights(log_w, ell.shape))
    with np.errstate(over="ignore", invalid="ignore"):
        terms = np.where(f != 0.0, np.exp(ell) * f * f, 0.0)
    return float(np.mean(terms))


def removed_mass(log_ratios, log_w) -> float:
    """``(1/G) Σ_i (ρ_i − w_i) = (1/G) Σ_i ρ_i (1 − w_i/ρ_i)``."""
    ell = check_log_ratios(log_ratios)
    f = _shortfall(ell, check_log_weights(log_w, ell.shape))
    with np.errstate(over="ignore", invalid="ignore"):
        terms = np.where(f != 0.0, np.exp(ell) * f, 0.0)
    return float(np.mean(terms))


def ess(log_w) -> float:
    """Effective sample size ``(Σ_i w_i)²/Σ_i w_i²`` from ``log w``: in ``[1, G]``, or 0 if every ``w_i = 0``."""
    logw = np.asarray(log_w, dtype=np.float64)
    if logw.ndim != 1 or logw.size == 0:
        raise ValueError(f"log_w must be a non-empty 1-D array (one group, G >= 1), got shape {logw.shape}")
    logw = check_log_weights(logw, logw.shape)
    m = np.max(logw)
    if not np.isfinite(m):
        return 0.0  # every weight is zero: no effective sample
    u = np.exp(logw - m)
    return float(u.sum() ** 2 / np.sum(u * u))


def advantages(rewards, normalize: bool = False, delta: float = 1e-6) -> np.ndarray:
    """``A_i = R_i − R̄`` (THEORY §1); with ``normalize``, ``A_i = (R_i − R̄)/(std(R) + δ)``.

    ``std`` is the population standard deviation of the group's rewards.
    """
    R = np.asarray(rewards, dtype=np.float64)
    if R.ndim != 1 or R.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-D array (one group, G >= 1), got shape {R.shape}")
    check_finite(R, "rewards")
    A = R - R.mean()
    if normalize:
        if not delta > 0:
            raise ValueError(f"delta must be > 0, got {delta!r}")
        A = A / (R.std() + delta)
    return A
