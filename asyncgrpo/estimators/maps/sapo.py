"""``sapo``: soft adaptive policy optimisation (verl ``compute_policy_loss_sapo``, TRL ``loss_type="sapo"``;
arXiv 2511.20347). The clip is replaced by a gate: the per-token objective is ``−A·σ(τ(r−1))·4/τ`` with
``r = r_{i,t}`` and ``τ = τ_pos`` for ``A > 0``, ``τ_neg`` otherwise (both peers' defaults: 1.0 and 1.05;
verl ``tau_pos``/``tau_neg``, TRL ``sapo_temperature_pos``/``_neg``). Its gradient weight is
``k = 4σ(x)(1 − σ(x))·r`` with ``x = τ(r − 1)``, formed in log space
(``log k = log 4 − |x| − 2 log(1 + e^{−|x|}) + ℓ``) so it is 0, not NaN, when ``r`` overflows. verl clamps
``ℓ`` to ±20 before ``exp``, TRL does not; the toolkit follows TRL (the two differ only for ``ℓ < −20``, where
``k < 4e^{−20}``). Ignores ε.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.registry import Estimator

TAU_POS, TAU_NEG = 1.0, 1.05
_LOG4 = math.log(4.0)


def k_numpy(ell, mask, adv, T_i, p):
    tau = np.where(adv > 0, TAU_POS, TAU_NEG)[:, None]
    ax = np.abs(tau * (np.exp(ell) - 1.0))
    return np.exp(_LOG4 - ax - 2.0 * np.log1p(np.exp(-ax)) + ell)


@njit(cache=True)
def coef_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    for i in range(N):
        Ti = 0
        for t in range(T):
            if mask[i, t]:
                Ti += 1
        tau = TAU_POS if adv[i] > 0.0 else TAU_NEG
        for t in range(T):
            if not mask[i, t]:
                out[i, t] = 0.0
                continue
            e = tok_ell[i, t]
            ax = abs(tau * (math.exp(e) - 1.0))
            out[i, t] = math.exp(_LOG4 - ax - 2.0 * math.log1p(math.exp(-ax)) + e) / Ti


def check_taus(tau_pos, tau_neg):
    """``(τ_pos, τ_neg)`` as floats; ``ValueError`` naming the peers' options unless both are finite and > 0."""
    for v, name in ((tau_pos, "tau_pos (sapo_temperature_pos)"), (tau_neg, "tau_neg (sapo_temperature_neg)")):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(tau_pos), float(tau_neg)


def _tau_torch(ell, adv, tau_pos, tau_neg):
    import torch

    # tensors of ell's dtype: torch.where on two Python floats gives float32 (1.05 → 1.0499999523)
    tau = torch.where(adv > 0, torch.tensor(tau_pos, dtype=ell.dtype), torch.tensor(tau_neg, dtype=ell.dtype))
    return tau.unsqueeze(1)


def gate_k_torch(ell, adv, tau_pos=TAU_POS, tau_neg=TAU_NEG):
    """``k = 4σ(x)(1 − σ(x))·r``, ``x = τ(r − 1)``, at any temperatures (log space, as :func:`k_numpy`)."""
    import torch

    ax = torch.abs(_tau_torch(ell, adv, tau_pos, tau_neg) * (torch.exp(ell) - 1.0))
    return torch.exp(_LOG4 - ax - 2.0 * torch.log1p(torch.exp(-ax)) + ell)


def k_torch(ell, mask, adv, T_i, p):
    return gate_k_torch(ell, adv)


def gate_objective(ell, adv, tau_pos=TAU_POS, tau_neg=TAU_NEG):
    """The value both peers log, ``−A·σ(τ(r−1))·4/τ`` per token, at any temperatures."""
    import torch

    tau = _tau_torch(ell, adv, tau_pos, tau_neg)
    gate = torch.sigmoid(tau * (torch.exp(ell) - 1.0)) * (4.0 / tau)
    return torch.where(adv[:, None] == 0, torch.zeros_like(gate), -adv[:, None] * gate)


def objective(ell, mask, adv, logp):
    """The value both peers log at their default temperatures (:func:`gate_objective`)."""
    return gate_objective(ell, adv)


MAPS = (Estimator("sapo", "token", code=17, formula="4σ(x)(1−σ(x))·r, x = τ(r−1), τ = 1 (A>0) or 1.05",
                  numpy=k_numpy, numba=coef_nb, torch=k_torch, objective=objective, peer="verl, TRL",
                  uses_eps=False, defaults={"tau_pos": TAU_POS, "tau_neg": TAU_NEG},
                  doc="SAPO: sigmoid-gated ratio instead of a clip"),)
