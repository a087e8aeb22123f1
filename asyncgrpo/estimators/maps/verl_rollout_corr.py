"""verl's rollout correction (``verl/trainer/ppo/rollout_corr_helper.py``), its four estimators at verl's defaults.

verl computes, from the token log-ratios ``ℓ_{i,t} = log π − log π_rollout`` clamped to ``±20``
(``SAFETY_BOUND``) before any ``exp``, an IS weight (``rollout_is``, truncated at ``rollout_is_threshold``
``C``) and a rejection mask (``rollout_rs`` with ``rollout_rs_threshold`` ``"lower_upper"``; a rejected token
leaves verl's ``response_mask``, so it also leaves the loss's normaliser). In the learner's terms (one
update per batch, verl's decoupled mode with ``π_old = π_θ``, PPO ratio 1) the gradient is
``Σ ν A_i k_{i,t} ∇log π_θ`` with:

================  =======================================================  ===========================
name              ``k``                                                    verl preset (defaults)
================  =======================================================  ===========================
``verl_tok_tis``  ``min(exp(clamp(ℓ_{i,t}, ±20)), C)``                       ``decoupled_token_is``: C = 2
``verl_seq_tis``  ``w_i = min(exp(clamp(ℓ_i, ±20)), C)``                     ``decoupled_seq_is``: C = 2
``verl_seq_rs``   ``w_i = min(exp(clamp(ℓ_i, ±20)), C)·1{log a ≤ −ℓ_i ≤ log b}·G/G_kept``  ``decoupled_seq_is_rs``: C = 2,
                                                                           ``seq_sum_k1`` ``"0.5_2.0"``
``verl_geo_rs``   ``1{log a ≤ −mean_t clamp(ℓ_{i,t}, ±20) ≤ log b}``        ``decoupled_geo_rs``:
                                                                           ``seq_mean_k1`` ``"0.999_1.001"``
================  =======================================================  ===========================

``verl_seq_tis`` and ``verl_seq_rs`` are trajectory-level maps of ``ℓ_i = Σ_t ℓ_{i,t}``. ``verl_seq_rs`` renormalises
its kept rows within the group (``G/G_kept``, ``G`` the rows with a token), as verl's seq-mean aggregation divides by
the rows its rejection keeps, in NumPy, Numba and torch alike; its statistic is ``−ℓ_i`` (no clamp of the row sum).
verl's ``seq_sum_k1`` clamps each token to ±20 before summing: the torch loss, which has the tokens, does the same
(``torch_tokens``), so ``ℓ = [25, −20]`` keeps its row as in verl; a map of ``ℓ_i`` alone cannot (``ℓ_i = 5`` is
rejected), so the learners agree with verl whenever every ``|ℓ_{i,t}| ≤ 20`` (docs/estimators.md). All four ignore ε.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.maps._common import row_stats_nb
from asyncgrpo.estimators.registry import Estimator

#: verl's ``SAFETY_BOUND``: log-ratios are clamped to ``[−20, 20]`` before ``exp``.
SAFETY_BOUND = 20.0
#: ``rollout_is_threshold`` (verl's default and presets' default).
IS_THRESHOLD = 2.0
LOG_IS = math.log(IS_THRESHOLD)  # exp(LOG_IS) == 2.0 exactly, so log space loses nothing
#: ``decoupled_seq_is_rs``'s ``rs_threshold="0.5_2.0"`` for ``seq_sum_k1``.
SEQ_RS_LOWER, SEQ_RS_UPPER = 0.5, 2.0
#: ``decoupled_geo_rs``'s ``rs_threshold="0.999_1.001"`` for ``seq_mean_k1``.
GEO_RS_LOWER, GEO_RS_UPPER = 0.999, 1.001
_SEQ_LO, _SEQ_HI = math.log(SEQ_RS_LOWER), math.log(SEQ_RS_UPPER)
_GEO_LO, _GEO_HI = math.log(GEO_RS_LOWER), math.log(GEO_RS_UPPER)


# --------------------------------------------------------------------------- sequence TIS (trajectory level)
def seq_tis_log_weights(ell, eps):
    return np.minimum(np.maximum(ell, -SAFETY_BOUND), LOG_IS)


@njit(cache=True)
def seq_tis_log_weights_nb(ell, eps, out):
    for i in range(ell.shape[0]):
        out[i] = min(max(ell[i], -SAFETY_BOUND), LOG_IS)


def seq_tis_log_weights_torch(ell, eps, mask):
    import torch

    return torch.clamp(ell, min=-SAFETY_BOUND, max=LOG_IS)


# --------------------------------------------------------------------------- sequence IS + rejection (Seq-MIS)
# One map in NumPy, Numba and torch (issue 57): the rejection statistic is verl's seq_sum_k1, −ℓ_i (no clamp of the
# row sum), and the kept rows are renormalised within their group, w_i·G/G_kept, as verl's seq-mean renormalises
# over the rows its rejection keeps: (1/G) Σ_i w_i A_i s_i is then verl's (1/G_kept) Σ_kept … on a group.
def seq_rs_log_weights(ell, eps):
    keep = (-ell >= _SEQ_LO) & (-ell <= _SEQ_HI)  # verl's seq_sum_k1 statistic, −log ρ_i
    n_kept = keep.sum(axis=-1, keepdims=True)
    renorm = np.log(ell.shape[-1]) - np.log(np.maximum(n_kept, 1))
    return np.where(keep, seq_tis_log_weights(ell, eps) + renorm, -np.inf)


@njit(cache=True)
def seq_rs_log_weights_nb(ell, eps, out):
    n_kept = 0
    for i in range(ell.shape[0]):
        if -ell[i] >= _SEQ_LO and -ell[i] <= _SEQ_HI:
            n_kept += 1
    renorm = math.log(ell.shape[0]) - math.log(max(n_kept, 1))
    for i in range(ell.shape[0]):
        if -ell[i] >= _SEQ_LO and -ell[i] <= _SEQ_HI:
            out[i] = min(max(ell[i], -SAFETY_BOUND), LOG_IS) + renorm
        else:
            out[i] = -np.inf


def _kept_renorm_torch(keep, real):
    """``log(G_real/G_kept)`` per group ``[n, 1]`` (0 where nothing is kept)."""
    import torch

    n_real = real.sum(dim=-1, keepdim=True).clamp(min=1).to(torch.float64)
    n_kept = (keep & real).sum(dim=-1, keepdim=True).clamp(min=1).to(torch.float64)
    return torch.log(n_real) - torch.log(n_kept)


def seq_rs_log_weights_torch(ell, eps, mask):
    import torch

    real = torch.ones_like(ell, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    keep = (-ell >= _SEQ_LO) & (-ell <= _SEQ_HI)
    lw = torch.clamp(ell, min=-SAFETY_BOUND, max=LOG_IS) + _kept_renorm_torch(keep, real).to(ell.dtype)
    return torch.where(keep, lw, torch.full_like(ell, -math.inf))


def seq_rs_log_weights_tokens_torch(tok_ell, eps, tok_mask):
    """verl's Seq-MIS from the tokens ``[n, G, T]``: the rejection statistic ``k1 = −Σ_t clamp(ℓ_{i,t}, ±20)``
    (verl's ``seq_sum_k1`` clamps each token), the weight ``min(exp(clamp(Σ_t ℓ_{i,t}, ±20)), C)`` (verl's
    sequence IS clamps the sum), kept rows renormalised within the group as the map (``G_real/G_kept``). Equal to the
    map of ``ℓ_i`` whenever every ``|ℓ_{i,t}| ≤ 20``; past that only the tokens can say what verl keeps."""
    import torch

    zero = torch.zeros_like(tok_ell)
    k1 = -torch.where(tok_mask, torch.clamp(tok_ell, -SAFETY_BOUND, SAFETY_BOUND), zero).sum(dim=-1)
    keep = (k1 >= _SEQ_LO) & (k1 <= _SEQ_HI)
    ell = torch.where(tok_mask, tok_ell, zero).sum(dim=-1)
    lw = seq_tis_log_weights_torch(ell, eps, None) + _kept_renorm_torch(keep, tok_mask.any(dim=-1)).to(ell.dtype)
    return torch.where(keep, lw, torch.full_like(ell, -math.inf))


# --------------------------------------------------------------------------- token TIS
def tok_tis_k(ell, mask, adv, T_i, p):
    return np.minimum(np.exp(np.clip(ell, -SAFETY_BOUND, SAFETY_BOUND)), IS_THRESHOLD)


@njit(cache=True)
def tok_tis_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    for i in range(N):
        Ti, _ = row_stats_nb(tok_ell, mask, i)
        for t in range(T):
            if not mask[i, t]:
                out[i, t] = 0.0
                continue
            c = min(math.exp(min(max(tok_ell[i, t], -SAFETY_BOUND), SAFETY_BOUND)), IS_THRESHOLD)
            out[i, t] = c / Ti


def tok_tis_k_torch(ell, mask, adv, T_i, p):
    import torch

    return torch.clamp(torch.exp(torch.clamp(ell, -SAFETY_BOUND, SAFETY_BOUND)), max=IS_THRESHOLD)


# --------------------------------------------------------------------------- geometric-mean rejection (Geo-RS)
def _geo_keep(ell, mask):
    # verl's masked_mean writes mask.sum() + 1e-8, but its response_mask is an integer tensor: the count
    # becomes float32, where T + 1e-8 == T, so verl divides by T exactly (a row on the band edge lands as there)
    stat = np.where(mask, -np.clip(ell, -SAFETY_BOUND, SAFETY_BOUND), 0.0).sum(axis=1, keepdims=True)
    stat = stat / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return (stat >= _GEO_LO) & (stat <= _GEO_HI)


def geo_rs_k(ell, mask, adv, T_i, p):
    return np.broadcast_to(np.where(_geo_keep(ell, mask), 1.0, 0.0), ell.shape)


@njit(cache=True)
def geo_rs_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    for i in range(N):
        Ti = 0
        s = 0.0
        for t in range(T):
            if mask[i, t]:
                Ti += 1
                s += -min(max(tok_ell[i, t], -SAFETY_BOUND), SAFETY_BOUND)
        stat = s / max(Ti, 1)  # verl divides by T (its 1e-8 vanishes in float32; see _geo_keep)
        c = 1.0 if (stat >= _GEO_LO and stat <= _GEO_HI) else 0.0
        for t in range(T):
            out[i, t] = c / Ti if mask[i, t] else 0.0


def geo_rs_k_torch(ell, mask, adv, T_i, p):
    import torch

    x = torch.where(mask, -torch.clamp(ell, -SAFETY_BOUND, SAFETY_BOUND), torch.zeros_like(ell))
    stat = x.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1).to(ell.dtype)  # T, as verl
    keep = (stat >= _GEO_LO) & (stat <= _GEO_HI)
    return torch.where(keep, torch.ones_like(stat), torch.zeros_like(stat)).expand_as(ell)


# --------------------------------------------------------------------------- metrics (verl's names in loss_metrics)
def _is_metrics(ell, mask, level):
    """verl's ``rollout_is_ratio_fraction_high/low`` (before truncation): tokens ``exp(clamp ℓ) > C`` / ``< 1/C``
    as shares of real tokens (token level), or rows ``ℓ_i > log C`` / ``< log(1/C)`` as shares of all rows, the
    logs rounded to float32 as verl computes them."""
    import torch

    if level == "sequence":
        # verl compares with torch.log(torch.tensor(C)), a float32 log (log 2 → 0.69314718246…, above the float64
        # 0.69314718056…): rows between the two are not "high" in verl, so the same float32 bounds here
        hi, lo = (float(torch.log(torch.tensor(c, dtype=torch.float32))) for c in (IS_THRESHOLD, 1.0 / IS_THRESHOLD))
        seq = torch.where(mask, ell, torch.zeros_like(ell)).sum(dim=1)
        return {"is_frac_high": float((seq > hi).double().mean()), "is_frac_low": float((seq < lo).double().mean())}
    w = torch.exp(torch.clamp(ell, -SAFETY_BOUND, SAFETY_BOUND))
    n = float(mask.sum())
    return {"is_frac_high": float(((w > IS_THRESHOLD) & mask).sum()) / n,
            "is_frac_low": float(((w < 1.0 / IS_THRESHOLD) & mask).sum()) / n}


def _rs_metrics(keep_row, mask):
    """verl's ``rollout_rs_masked_fraction`` (rejected share of real tokens) and ``rollout_rs_seq_masked_fraction``
    (share of all rows with a rejected real token)."""
    rejected = mask & ~keep_row[:, None]
    return {"rs_masked_frac": float(rejected.sum()) / float(mask.sum()),
            "rs_seq_masked_frac": float(rejected.any(dim=1).double().mean())}


def seq_tis_metrics(ell, mask, adv, rows):
    return _is_metrics(ell, mask, "sequence")


def seq_rs_metrics(ell, mask, adv, rows):
    import torch

    k1 = -torch.where(mask, torch.clamp(ell, -SAFETY_BOUND, SAFETY_BOUND), torch.zeros_like(ell)).sum(dim=1)
    return {**_is_metrics(ell, mask, "sequence"), **_rs_metrics((k1 >= _SEQ_LO) & (k1 <= _SEQ_HI), mask)}


def tok_tis_metrics(ell, mask, adv, rows):
    return _is_metrics(ell, mask, "token")


def geo_rs_metrics(ell, mask, adv, rows):
    keep = geo_rs_k_torch(ell, mask, adv, None, None)[:, 0] > 0
    return _rs_metrics(keep, mask)


_PEER = "verl rollout correction"
MAPS = (
    Estimator("verl_seq_tis", "trajectory", code=7, formula="min(exp(clamp(ℓ_i, ±20)), C), C = 2",
              numpy=seq_tis_log_weights, numba=seq_tis_log_weights_nb, torch=seq_tis_log_weights_torch,
              reports_clip=True, peer=_PEER, uses_eps=False, correction=True, metrics=seq_tis_metrics,
              defaults={"rollout_is": "sequence", "rollout_is_threshold": IS_THRESHOLD},
              doc="verl's sequence-level truncated IS (Seq-TIS); = tis at ε = C − 1 = 1 for ℓ_i ≥ −20"),
    Estimator("verl_seq_rs", "trajectory", code=8,
              formula="min(exp(clamp(ℓ_i, ±20)), C)·1{log a ≤ −ℓ_i ≤ log b}·G/G_kept, C = 2, a = 0.5, b = 2",
              numpy=seq_rs_log_weights, numba=seq_rs_log_weights_nb, torch=seq_rs_log_weights_torch,
              torch_tokens=seq_rs_log_weights_tokens_torch, reports_clip=True, rejects=True, peer=_PEER, uses_eps=False,
              correction=True, metrics=seq_rs_metrics,
              defaults={"rollout_is": "sequence", "rollout_is_threshold": IS_THRESHOLD, "rollout_rs": "seq_sum_k1",
                        "rollout_rs_threshold": f"{SEQ_RS_LOWER}_{SEQ_RS_UPPER}"},
              doc="verl's sequence IS + sequence rejection (Seq-MIS)"),
    Estimator("verl_tok_tis", "token", code=14, formula="min(exp(clamp(ℓ_{i,t}, ±20)), C), C = 2", numpy=tok_tis_k,
              numba=tok_tis_nb, torch=tok_tis_k_torch, clip_ratio="token", peer=_PEER, uses_eps=False, correction=True,
              metrics=tok_tis_metrics,
              defaults={"rollout_is": "token", "rollout_is_threshold": IS_THRESHOLD},
              doc="verl's token-level truncated IS (Token-TIS)"),
    Estimator("verl_geo_rs", "token", code=15, formula="1{log a ≤ −mean_t clamp(ℓ_{i,t}, ±20) ≤ log b}, a = 0.999, "
              "b = 1.001", numpy=geo_rs_k, numba=geo_rs_nb, torch=geo_rs_k_torch, clip_ratio="unit", rejects=True,
              peer=_PEER, uses_eps=False, correction=True, metrics=geo_rs_metrics,
              defaults={"rollout_is": None, "rollout_rs": "seq_mean_k1",
                        "rollout_rs_threshold": f"{GEO_RS_LOWER}_{GEO_RS_UPPER}"},
              doc="verl's geometric-mean ratio rejection (Geo-RS)"),
)
