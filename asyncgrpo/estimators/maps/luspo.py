"""``luspo``: TRL's ``loss_type="luspo"`` (length-unbiased sequence policy optimisation): GSPO's clipped
sequence ratio ``s_i = exp(ℓ_i/T_i)`` with the row's loss *summed* over its tokens, ``mean_i T_i·ℓoss_i``, so a
row's gradient does not shrink with its length. In the one form ``ĝ = Σ ν A k ∇log π``:
``k_{i,t} = T_i·s_i·1{unclipped}`` (clip rules of gspo, ``eps_low``/``eps_high``), so that TRL's normaliser is
the ``grpo`` mode (``ν = 1/(T_i N)``) and the learner's ``c_{i,t} = k/T_i = s_i·1{unclipped}``. TRL's
``delta`` (dual clip) is not taken. Its logged objective (``pg_loss``: ``T_i·max(−s A, −clip(s) A)`` per
token) is computed with gspo's in :mod:`asyncgrpo.estimators.loss_metrics`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.maps._common import row_stats_nb
from asyncgrpo.estimators.maps.ppo_clip import gspo_k, gspo_k_torch
from asyncgrpo.estimators.registry import Estimator

#: What a TRL user gets (``GRPOConfig()``): ``epsilon = 0.2`` and ``epsilon_high = None``, i.e. ``0.2``; its luspo
#: normaliser ``(loss·mask).sum(-1).mean()`` counts all N rows (the ``grpo`` mode). ``policy_loss`` and the
#: ``token_coefficients*`` backends take these when ``eps_low``/``eps_high``/``loss_agg_mode`` are left ``None``
#: (issue 36). TRL's default ``importance_sampling_level`` is ``"token"``, but for luspo TRL warns to set
#: ``"sequence"`` (the paper's setup), the only level this map has (token-level luspo is left for later).
PEER_DEFAULTS = {"epsilon": 0.2, "epsilon_high": 0.2, "importance_sampling_level": "sequence", "loss_agg_mode": "grpo"}


def k_numpy(ell, mask, adv, T_i, p):
    return gspo_k(ell, mask, adv, T_i, p) * T_i


@njit(cache=True)
def coef_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    hi = math.log1p(eps_high)
    lo = math.log1p(-eps_low)
    for i in range(N):
        Ti, seq = row_stats_nb(tok_ell, mask, i)
        seq /= Ti
        ok = seq <= hi if adv[i] >= 0.0 else seq >= lo
        c = math.exp(seq) if ok else 0.0
        for t in range(T):
            out[i, t] = c if mask[i, t] else 0.0


def k_torch(ell, mask, adv, T_i, p):
    return gspo_k_torch(ell, mask, adv, T_i, p) * T_i


MAPS = (Estimator("luspo", "token", code=19, formula="T_i·s_i·1{unclipped}, s_i = exp(ℓ_i/T_i)", numpy=k_numpy,
                  numba=coef_nb, torch=k_torch, clip_ratio="sequence", peer="TRL",
                  doc="LUSPO: GSPO with the row's loss summed over its tokens"),)
