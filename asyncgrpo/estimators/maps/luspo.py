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

#: What a TRL user gets (``GRPOConfig()``): ``epsilon = 0.2`` and ``epsilon_high = None``, i.e. ``0.2``. TRL's
#: default ``importance_sampling_level`` is ``"token"``, but for luspo TRL warns to set ``"sequence"`` (the paper's
#: setup), the only level this map has (token-level luspo is left for later). The toolkit's ``policy_loss`` still
#: defaults to ``eps_high = 0.28`` for every name (issue 36, a known difference asserted by
#: tests/test_peer_parity_trl.py), and aggregates with ``seq-mean-token-mean``, which with empty rows averages over
#: the non-empty rows where TRL's luspo (``(loss·mask).sum(-1).mean()``) counts all N: the ``grpo`` mode. Pass
#: ``eps_low=0.2, eps_high=0.2, loss_agg_mode="grpo"`` to get TRL's run.
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
