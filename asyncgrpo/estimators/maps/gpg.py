"""``gpg``: verl's ``compute_policy_loss_gpg`` (GPG, from AMAP-ML/GPG): the plain policy-gradient loss
``−A·log π`` per token, no ratio and no clip, so ``k_{i,t} = 1`` — the token-level, length-normalised form of
``onpolicy``. Its objective value is the toolkit's surrogate ``−A·log π``. Ignores ε."""
from __future__ import annotations

import numpy as np
from numba import njit

from asyncgrpo.estimators.registry import Estimator

#: What a verl user gets: ``actor.loss_agg_mode`` defaults to ``"token-mean"`` (verl ActorConfig); ``policy_loss``
#: aggregates gpg with it when ``loss_agg_mode`` is left ``None`` (issue 36).
PEER_DEFAULTS = {"loss_agg_mode": "token-mean"}


def k_numpy(ell, mask, adv, T_i, p):
    return np.ones_like(ell)


@njit(cache=True)
def coef_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    for i in range(N):
        Ti = 0
        for t in range(T):
            if mask[i, t]:
                Ti += 1
        for t in range(T):
            out[i, t] = 1.0 / Ti if mask[i, t] else 0.0


def k_torch(ell, mask, adv, T_i, p):
    import torch

    return torch.ones_like(ell)


MAPS = (Estimator("gpg", "token", code=18, formula="1 (−A·log π, no ratio)", numpy=k_numpy, numba=coef_nb,
                  torch=k_torch, peer="verl", uses_eps=False, doc="GPG: plain policy gradient per token"),)
