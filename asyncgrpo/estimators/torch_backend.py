"""PyTorch backend of the trajectory-level weight maps (THEORY.md §2).

Batched over groups: ``log_ratios`` has shape ``[n_groups, G]`` and an optional
boolean ``mask`` of the same shape marks the real trajectories (``False`` =
padding, so groups of unequal size share one tensor). Padded entries get weight
0 and do not enter ``ρ̄``. Weights are returned detached (stop-gradient): in a
loss ``(1/G) Σ w_i A_i log π_θ(τ_i)`` they scale the score but are not
differentiated, exactly as in ``ĝ = (1/G) Σ w_i A_i s_θ(τ_i)``.

Same log-space formulas as :mod:`asyncgrpo.estimators.reference`. Weights are
computed in float64 (float32 on devices without float64, e.g. MPS) whatever the
input dtype, then cast back to the input dtype rounding toward zero, so that a
cast never raises a weight: ``w_i ≤ ρ_i`` and the group cap ``(1/G) Σ w_i ≤ 1+ε``
of tis/tic/gmc survive float16/bfloat16/float32 outputs (docs/THEORY.md §2, the
class ``𝒲_ε``). A plain round-to-nearest cast broke the gmc cap in float16
(group mean 1.2005 > 1.2). A group at the cap is first scaled down by a few float64
ulps (:func:`cap_group_mean`), since its float64 mean is otherwise an ulp above
``1+ε`` about half the time.
"""
from __future__ import annotations

import math

import torch

from asyncgrpo.estimators import registry


def log_weights(name: str, ell: torch.Tensor, eps: float, mask: torch.Tensor,
                tok_ell: torch.Tensor | None = None, tok_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``log w`` of estimator ``name`` for ``ell`` ``[n_groups, G]``; ``-inf`` where padded (the map's own
    torch form, :mod:`asyncgrpo.estimators.maps`). With the token log-ratios ``tok_ell`` ``[n_groups, G, T]``
    (and their mask) a map that reads each token (registry ``torch_tokens``, e.g. verl's per-token clamp)
    uses them; ``ell`` must then be ``Σ_t tok_ell``."""
    e = registry.entry(name, "trajectory")
    if tok_ell is not None and e.torch_tokens is not None:
        tm = torch.ones_like(tok_ell, dtype=torch.bool) if tok_mask is None else tok_mask
        out = e.torch_tokens(tok_ell.to(ell.dtype), eps, tm & mask[..., None]).to(ell.dtype)
    else:
        out = e.torch(ell, eps, mask)
    return torch.where(mask, out, torch.full_like(out, -math.inf))


_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def _wide_dtype(ell: torch.Tensor) -> torch.dtype:
    return torch.float32 if ell.device.type == "mps" else torch.float64


def cast_down(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast non-negative ``w`` to ``dtype`` rounding toward zero (each result ``≤`` the input).

    Round-to-nearest may raise a weight by half an ulp, enough to push a capped group mean past
    ``1+ε`` in float16; stepping a raised value one ulp down (integer view of the bits, valid for
    non-negative floats) keeps every inequality ``w ≤ bound`` that held before the cast.
    """
    if w.dtype == dtype:
        return w
    out = w.to(dtype)
    if dtype not in _INT_VIEW:
        return out
    up = (out.to(w.dtype) > w) & (out > 0)
    if bool(up.any()):
        bits = out.view(_INT_VIEW[dtype])
        out = torch.where(up, (bits - 1).view(dtype), out)
    return out


#: Maps whose group mean is capped at ``1+ε`` (registry attribute ``capped``).
CAPPED = tuple(n for n, e in registry.entries().items() if e.capped)


def cap_group_mean(w: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """``w`` ``[n_groups, G]`` with any group whose mean might exceed ``1+ε`` scaled down by a few ulps.

    A group at the cap (gmc's ``ρ_i (1+ε)/ρ̄``, tis/tic at ``exp(log(1+ε))``) has an exact mean of
    ``1+ε`` that rounding leaves an ulp above it about as often as below. A group is rescaled so that
    an upper bound on its exact sum is at most ``n (1+ε)(1 − (n+4)u)``: then its mean, exact or summed
    in any order in ``w``'s dtype or wider, is ``≤ 1+ε``. Other groups are untouched.
    """
    u = torch.finfo(w.dtype).eps
    n = mask.sum(dim=-1, keepdim=True).to(w.dtype)
    s = torch.where(mask, w, torch.zeros_like(w)).sum(dim=-1, keepdim=True)
    upper = s * (1.0 + n * u)  # ≥ the exact sum of the entries, whatever the summation order
    room = n * (1.0 + eps) * (1.0 - (n + 4.0) * u)
    over = upper > room
    if not bool(over.any()):
        return w
    scaled = w * torch.where(over, room / upper, torch.ones_like(upper))
    return torch.where(over, torch.nextafter(scaled, torch.zeros_like(scaled)), w)


def wide_weights(name: str, ell: torch.Tensor, eps: float, mask: torch.Tensor,
                 tok_ell: torch.Tensor | None = None, tok_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Weights in float64 (float32 on MPS), group cap enforced for the capped maps; 0 where padded
    (``tok_ell``, ``tok_mask``: as :func:`log_weights`)."""
    wide = torch.promote_types(ell.dtype, _wide_dtype(ell))
    tok = None if tok_ell is None else tok_ell.detach().to(wide)
    w = torch.exp(log_weights(name, ell.detach().to(wide), eps, mask, tok, tok_mask))
    return cap_group_mean(w, mask, eps) if name in CAPPED else w


def weights(name: str, ell: torch.Tensor, eps: float, mask: torch.Tensor) -> torch.Tensor:
    """Detached weights ``w = exp(log w)`` (0 where padded), in ``ell``'s dtype, never rounded up."""
    with torch.no_grad():
        return cast_down(wide_weights(name, ell, eps, mask), ell.dtype)
