"""Axis checks of a sweep run under a protocol (the regime map's instances, delays, η factors, G, ε, estimators,
seeds): refused before any cell runs, each error naming the parameter and its valid range."""
from __future__ import annotations

import math


def _ints(name: str, vals, lo: int, hi: float = math.inf) -> None:
    import numbers

    bad = [v for v in vals if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and lo <= v < hi)]
    if bad:
        rng = f"[{lo}, {'2³²' if hi == 2 ** 32 else hi})" if math.isfinite(hi) else f">= {lo}"
        raise ValueError(f"{name} must be integers {rng} (no silent truncation), got {bad}")


def check_axes(proto, *, instances, delays, eta_factors, G, eps, estimators, seeds, tuned_delays=None) -> None:
    """Refuse, before any cell runs, an axis that would silently change the map: an empty or repeated value
    (a repeat doubles n and narrows the interval), a non-integer d, G or seed (no truncation of 2.5 to 2), a
    G with ``G·n_prompts`` not dividing the budget (the run would be shorter), a non-positive or non-finite
    η factor or ε, an unknown instance. Each error names the parameter and its valid range."""
    from simulate.protocol.instances import INSTANCES

    axes = dict(instances=instances, delays=delays, eta_factors=eta_factors, G=G, eps=eps, estimators=estimators,
                seeds=seeds)
    if tuned_delays is not None:
        axes["tuned_delays"] = tuned_delays
    for name, vals in axes.items():
        vals = tuple(vals)
        if not vals:
            raise ValueError(f"{name} must hold at least one value, got {vals}")
        if len(set(vals)) != len(vals):
            raise ValueError(f"{name} must not repeat a value (a repeat doubles n), got {list(vals)}")
    _ints("delays", delays, 0)
    _ints("tuned_delays", tuned_delays or (), 0)
    _ints("G", G, 1)
    _ints("seeds", seeds, 0, 2 ** 32)
    for inst in instances:
        b, n = proto.budget_of(inst), proto.prompts_of(inst)
        short = [g for g in G if b % (int(g) * n)]
        if short:
            raise ValueError(f"G must divide budget / n_prompts = {b} / {n} on instance {inst} (K = budget/(G·n_prompts) "
                             f"steps), got {short}")
    for name, vals in (("eta_factors", eta_factors), ("eps", eps)):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in vals):
            raise ValueError(f"{name} must be finite numbers > 0, got {list(vals)}")
    from simulate.protocol.catalog import is_registered

    unknown = [i for i in instances if not is_registered(i)]
    if unknown:
        raise ValueError(f"instances: unknown {unknown}; known: {', '.join(INSTANCES)}")
