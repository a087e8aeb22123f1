"""Loss aggregation modes of :func:`asyncgrpo.estimators.token_level.policy_loss` (docs/losses.md).

Every estimator is written ``ĝ = Σ_{i,t} ν_{i,t} A_i k_{i,t} ∇log π_θ(a_{i,t}|s_{i,t})`` with a stop-gradient
per-token weight ``k_{i,t}`` (the method: ``r_{i,t}``, a clipped ratio, ``w_i``, …) and a normaliser
``ν_{i,t}`` (the *aggregation mode*, this module). With ``T_i`` the real tokens of row ``i``, ``N`` the rows,
``n_seq = #{i: T_i > 0}``, ``n_tok = Σ_i T_i`` and ``T`` the padded width:

==========================  ==================================  =========================================
mode                        ``ν_{i,t}``                          peer
==========================  ==================================  =========================================
``token-mean``              ``1/B_tok``                          verl default; ``B_tok = batch_num_tokens``
                                                                 (default ``n_tok``)
``seq-mean-token-mean``     ``1/(T_i·B_seq)``                    verl; ``B_seq = global_batch_size``
                                                                 (default ``n_seq``); verl adds 1e-8 to T_i
``seq-mean-token-sum``      ``1/B_seq``                          verl
``seq-mean-token-sum-norm`` ``1/(B_seq·L)``                       verl 0.9.1 (Dr. GRPO); ``L = loss_scale_factor``
                                                                 (default ``T``), ``B_seq`` as above
``grpo``                    ``1/(T_i·N)``                        TRL ``loss_type="grpo"`` (mean over all N
                                                                 rows, empty rows included)
``bnpo``                    ``1/n_tok``                          TRL ``bnpo``: local token count only
``dapo``                    ``1/B_tok``                          TRL ``dapo`` (its default): global active
                                                                 tokens ``num_items_in_batch``
``dr_grpo``                 ``1/(N·L)``                          TRL ``dr_grpo``; ``L = max_completion_length``
                                                                 (pass it as ``loss_scale_factor``)
==========================  ==================================  =========================================

THEORY's ``ĝ = (1/G) Σ_i w_i A_i s_θ(τ_i)`` (docs/THEORY.md §2), averaged over groups, is
``ν = 1/N``: the default of the trajectory-level estimators (:data:`THEORY_MODE`, internal name).
"""
from __future__ import annotations

import math

#: verl's ``loss_agg_mode`` names (``verl.trainer.ppo.core_algos.agg_loss``).
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                   "seq-mean-token-sum-norm")
#: TRL's ``GRPOConfig.loss_type`` names accepted as modes, each with TRL's own normaliser.
TRL_LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dapo", "dr_grpo")
#: The verl mode each TRL name coincides with on one batch without empty rows, one process and
#: no gradient accumulation (docs/losses.md lists where they part).
TRL_TO_VERL: dict[str, str] = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
                               "dr_grpo": "seq-mean-token-sum-norm"}
#: Every accepted ``loss_agg_mode``.
AGG_MODES: tuple[str, ...] = LOSS_AGG_MODES + TRL_LOSS_TYPES
#: Internal name of THEORY's ``ν = 1/N`` (trajectory-level default).
THEORY_MODE = "theory"


def check_loss_agg_mode(mode) -> str:
    """Return ``mode`` if it is one of :data:`AGG_MODES`, else raise ``ValueError`` listing them."""
    if not isinstance(mode, str) or mode not in AGG_MODES + (THEORY_MODE,):
        raise ValueError(f"loss_agg_mode must be one of {', '.join(AGG_MODES)}; got {mode!r}")
    return mode


def _check_count(value, name: str):
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(float(value)) \
        and float(value) > 0
    if not ok:
        raise ValueError(f"{name} must be a finite number > 0 (or None for the local count), got {value!r}")
    return float(value)


def token_normaliser(mode: str, mask, *, loss_scale_factor=None, batch_num_tokens=None, global_batch_size=None):
    """``ν_{i,t}`` of ``mode`` (table above) as a ``[N, T]`` tensor on ``mask``'s device; 0 off-mask.

    float64, or float32 on devices without float64 (MPS).

    ``batch_num_tokens`` / ``global_batch_size`` override the local counts (verl's arguments of the same
    names, for micro-batches of a larger batch); ``loss_scale_factor`` is ``L`` of the ``-norm``/``dr_grpo``
    modes. Raises if the mask has no real token, or if an override is given to a mode that ignores it.
    """
    import torch

    mode = check_loss_agg_mode(mode)
    L = _check_count(loss_scale_factor, "loss_scale_factor")
    B_tok = _check_count(batch_num_tokens, "batch_num_tokens")
    B_seq = _check_count(global_batch_size, "global_batch_size")
    uses = {"loss_scale_factor": mode in ("seq-mean-token-sum-norm", "dr_grpo"),
            "batch_num_tokens": mode in ("token-mean", "dapo"),
            "global_batch_size": mode in ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")}
    for key, val in (("loss_scale_factor", L), ("batch_num_tokens", B_tok), ("global_batch_size", B_seq)):
        if val is not None and not uses[key]:
            raise ValueError(f"{key} has no effect with loss_agg_mode={mode!r}; leave it None")
    mask = mask.to(torch.bool)
    N, T = mask.shape
    T_i = mask.sum(dim=1, keepdim=True).to(torch.float64)
    n_tok = float(T_i.sum())
    if n_tok == 0:
        raise ValueError("mask has no real token (every entry False): nothing to aggregate")
    n_seq = float((T_i > 0).sum())
    T_safe = T_i.clamp(min=1.0)  # rows with T_i = 0 have no real token; ν there is masked to 0 below
    f = torch.float32 if mask.device.type == "mps" else torch.float64
    ones = torch.ones((N, T), dtype=f, device=mask.device)
    if mode in ("token-mean", "dapo"):
        nu = ones / (B_tok or n_tok)
    elif mode == "bnpo":
        nu = ones / n_tok
    elif mode == "seq-mean-token-mean":
        nu = ones / (T_safe * (B_seq or n_seq))
    elif mode == "grpo":
        nu = ones / (T_safe * N)
    elif mode == "seq-mean-token-sum":
        nu = ones / (B_seq or n_seq)
    elif mode == "seq-mean-token-sum-norm":
        nu = ones / ((B_seq or n_seq) * (L or T))  # verl 0.9.1's agg_loss: seq-mean, then / loss_scale_factor
    elif mode == "dr_grpo":
        nu = ones / (N * (L or T))
    else:  # THEORY_MODE
        nu = ones / N
    return torch.where(mask, nu, torch.zeros((), dtype=f, device=mask.device))


def agg_loss(loss_mat, mask, mode: str, **kwargs):
    """``Σ_{i,t} ν_{i,t} ℓoss_{i,t}`` over real tokens (``kwargs`` as :func:`token_normaliser`).

    Entries of ``loss_mat`` off the mask are ignored even when they are NaN or inf.
    """
    import torch

    nu = token_normaliser(mode, mask, **kwargs).to(loss_mat.dtype)
    zero = torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device)
    return torch.where(mask.to(torch.bool), nu * loss_mat, zero).sum()


__all__ = ["LOSS_AGG_MODES", "TRL_LOSS_TYPES", "TRL_TO_VERL", "AGG_MODES", "THEORY_MODE", "check_loss_agg_mode",
           "token_normaliser", "agg_loss"]
