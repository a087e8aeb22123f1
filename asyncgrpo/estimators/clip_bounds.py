"""Clip bounds shared by the token-level losses and their metrics (one definition, imported by both
:mod:`asyncgrpo.estimators.token_level` and :mod:`asyncgrpo.estimators.loss_metrics`, which therefore
read in one direction: token_level → loss_metrics → clip_bounds)."""
from __future__ import annotations

import math


def cispo_log_bounds(cispo_clamp: str, eps_low: float, eps_high: float) -> tuple[float, float]:
    """``(log lo, log hi)`` of the CISPO clamp ``clamp(r, lo, hi)`` for the convention ``cispo_clamp``:
    ``absolute`` ``(−∞, log ε_high)``; ``upper`` ``(−∞, log(1+ε_high))``; ``two-sided``
    ``(log(1−ε_low), log(1+ε_high))``."""
    if cispo_clamp == "absolute":
        return -math.inf, math.log(eps_high)
    lo = math.log1p(-eps_low) if cispo_clamp == "two-sided" else -math.inf
    return lo, math.log1p(eps_high)


__all__ = ["cispo_log_bounds"]
