"""The TRL trainer's group bookkeeping, in plain torch (no TRL import): whole-group shuffles, the group-by-group
order at the loss, the behaviour log-probs, the weight metrics (asyncgrpo.integrations.trl uses them)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from asyncgrpo import estimators as est
from asyncgrpo import functionals
from asyncgrpo.validation import check_group_size

#: Prefix of the metrics the trainer adds to TRL's log.
METRIC_PREFIX = "traj_is"

def shuffle_whole_groups(batch: dict[str, Any], group_size: int, generator: torch.Generator | None = None) -> dict:
    """Permute the groups of a generation batch, keeping each group's ``G`` rows together and in order.

    ``batch`` maps names to tensors or lists whose first dimension is ``N = n_groups·G`` rows laid
    out group by group (as TRL generates them); 0-d tensors and ``None`` pass through. This replaces
    TRL's row shuffle (``shuffle_sequence_dict``), which would scatter a group over micro-batches.
    """
    G = check_group_size(group_size, "group_size")
    n = _batch_len(batch)
    if n % G:
        raise ValueError(f"the generation batch has {n} rows, not a multiple of num_generations = {G}")
    perm_groups = torch.randperm(n // G, generator=generator)
    perm = (perm_groups[:, None] * G + torch.arange(G)[None, :]).reshape(-1)

    def permute(v):
        if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
            return v
        if isinstance(v, torch.Tensor):
            return v[perm.to(v.device)]
        return [v[i] for i in perm.tolist()]

    return {k: permute(v) for k, v in batch.items()}


def group_order(group_ids: torch.Tensor, group_size: int) -> torch.Tensor:
    """Row order that lays a micro-batch out group by group, each group exactly ``G`` rows.

    Stable in the original row order within a group. Raises ``ValueError`` if a group id occurs a
    number of times other than ``G`` (a group was split across micro-batches or devices).
    """
    G = check_group_size(group_size, "group_size")
    ids = group_ids.detach().reshape(-1).cpu()
    uniq, counts = torch.unique(ids, return_counts=True)
    bad = counts != G
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"group {int(uniq[i])} has {int(counts[i])} rows in this micro-batch, expected num_generations = {G}: "
            "groups must reach the loss whole (shuffle whole groups; per-device batch a multiple of G)"
        )
    return torch.sort(ids, stable=True).indices


def _batch_len(batch: dict[str, Any]) -> int:
    for v in batch.values():
        if isinstance(v, torch.Tensor) and v.ndim > 0:
            return int(v.shape[0])
        if isinstance(v, list):
            return len(v)
    raise ValueError("batch has no tensor or list with a first (row) dimension")


def behaviour_logps(inputs: dict[str, Any], current: torch.Tensor) -> torch.Tensor:
    """``log μ`` per token: the sampler's, else TRL's ``old_per_token_logps``, else ``current`` (ℓ = 0).

    The sampler's own log-probs (``sampling_per_token_logps``: vLLM, a ``rollout_func``) are the
    behaviour policy exactly. A token the sampler could not score (NaN) takes the next source in
    that order, which for the current log-probs means ``ℓ_{i,t} = 0`` — what TRL does with them.
    """
    fallback = inputs.get("old_per_token_logps")
    fallback = current.detach() if fallback is None else fallback
    sampled = inputs.get("sampling_per_token_logps")
    if sampled is None:
        return fallback
    return torch.where(torch.isnan(sampled), fallback.to(sampled.dtype), sampled)


def weight_metrics(ell: np.ndarray, name: str, eps: float) -> dict[str, float]:
    """Diagnostics of one micro-batch's weights, from log-ratios ``ell`` ``[n_groups, G]`` (float64).

    Per group (then averaged): removed mass ``(1/G)Σ(ρ_i − w_i)``, ``χ̂² = (1/G)Σ(ρ_i − 1)²``,
    ESS ``(Σw)²/Σw²``; over trajectories: the fraction with ``w_i < ρ_i`` (``cap_frac``) and the
    mean / max weight. Uses :mod:`asyncgrpo.functionals` (log space, safe for ``|ℓ| ≤ 1e4``);
    ``χ̂²`` is ``inf`` when some ``ρ_i`` exceeds float64, which is what it is.
    """
    wm = est.get(name, eps)
    removed, chi2, ess, capped, w_all = [], [], [], [], []
    for row in np.asarray(ell, dtype=np.float64):
        logw = wm.log_weights(row)
        removed.append(functionals.removed_mass(row, logw))
        with np.errstate(over="ignore"):
            chi2.append(float(np.mean(np.expm1(row) ** 2)))
            w_all.append(np.exp(logw))
        ess.append(functionals.ess(logw))
        capped.append(logw < row)
    G = ell.shape[1]
    w = np.concatenate(w_all)
    p = METRIC_PREFIX
    return {
        f"{p}/cap_frac": float(np.mean(np.concatenate(capped))),
        f"{p}/removed_mass/mean": float(np.mean(removed)),
        f"{p}/chi2/mean": float(np.mean(chi2)),
        f"{p}/ess/mean": float(np.mean(ess)),
        f"{p}/ess_frac/mean": float(np.mean(ess) / G),
        f"{p}/weight/mean": float(np.mean(w)),
        f"{p}/weight/max": float(np.max(w)),
    }


# --------------------------------------------------------------------------- the trainer
