"""The loss value of a batch whose coefficients overflowed the loss dtype, with its exact gradient.

When a weight ``w_i`` (plain ``is`` at ``ℓ_i = 1e4``) overflows, ``Σ ν A sg(k) log π`` is no longer a number, but its
gradient ``−c_{i,t}`` per token still is (``±inf`` only on the overflowed trajectory's tokens). :func:`overflowed_loss`
returns ``+inf`` as the loss and that gradient, so a trainer sees an unusable step and never a NaN gradient.
"""
from __future__ import annotations

import math

__all__ = ["overflowed_loss"]

_FN = None


def overflowed_loss(logp, coef):
    """``+inf`` (0-d, ``logp``'s dtype and device) whose gradient with respect to ``logp`` is ``−coef``."""
    global _FN
    import torch

    if _FN is None:  # defined on first use: importing this module does not import torch
        class OverflowedLoss(torch.autograd.Function):
            @staticmethod
            def forward(ctx, logp, coef):
                ctx.save_for_backward(coef)
                return torch.full((), math.inf, dtype=logp.dtype, device=logp.device)

            @staticmethod
            def backward(ctx, grad):
                (coef,) = ctx.saved_tensors
                return -coef * grad, None

        _FN = OverflowedLoss
    return _FN.apply(logp, coef)
