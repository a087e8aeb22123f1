"""PyTorch backend of the trajectory-level weight maps (THEORY.md §2).

Batched over groups: ``log_ratios`` has shape ``[n_groups, G]`` and an optional
boolean ``mask`` of the same shape marks the real trajectories (``False`` =
padding, so groups of unequal size share one tensor). Padded entries get weight
0 and do not enter ``ρ̄``. Weights are returned detached (stop-gradient): in a
loss ``(1/G) Σ w_i A_i log π_θ(τ_i)`` they scale the score but are not
differentiated, exactly as in ``ĝ = (1/G) Σ w_i A_i s_θ(τ_i)``.

Same log-space formulas as :mod:`asyncgrpo.estimators.reference`; computations
run in the input dtype (use float64 to match NumPy to 1e-12; float32 log-probs
are fine for training).
"""
from __future__ import annotations

import math

import torch


def _masked_lse_parts(ell: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # log ρ̄ = m + r over the real entries of each row (m = max ℓ), kept in two
    # parts so ℓ_i − log ρ̄ = (ℓ_i − m) − r is exact for the largest ℓ_i at |ℓ| = 1e4.
    neg_inf = torch.full_like(ell, -math.inf)
    masked = torch.where(mask, ell, neg_inf)
    m = masked.max(dim=-1, keepdim=True).values
    s = torch.exp(masked - m).sum(dim=-1, keepdim=True)
    r = torch.log(s) - torch.log(mask.sum(dim=-1, keepdim=True).to(ell.dtype))
    return m, r


def log_weights(name: str, ell: torch.Tensor, eps: float, mask: torch.Tensor) -> torch.Tensor:
    """``log w`` of estimator ``name`` for ``ell`` ``[n_groups, G]``; ``-inf`` where padded."""
    cap = math.log1p(eps)
    if name == "onpolicy":
        out = torch.zeros_like(ell)
    elif name == "is":
        out = ell.clone()
    elif name == "tis":
        out = torch.clamp(ell, max=cap)
    elif name == "tic":
        out = torch.where(ell <= cap, ell, torch.full_like(ell, -math.inf))
    elif name == "gmc":
        m, r = _masked_lse_parts(ell, mask)
        out = torch.where(cap >= m + r, ell, (ell - m) + (cap - r))
    elif name == "snis":
        m, r = _masked_lse_parts(ell, mask)
        out = (ell - m) - r
    else:
        raise KeyError(name)
    return torch.where(mask, out, torch.full_like(out, -math.inf))


def weights(name: str, ell: torch.Tensor, eps: float, mask: torch.Tensor) -> torch.Tensor:
    """Detached weights ``w = exp(log w)`` (0 where padded)."""
    with torch.no_grad():
        return torch.exp(log_weights(name, ell.detach(), eps, mask))
