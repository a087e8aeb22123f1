"""Token-level baselines ``grpo``, ``gspo``, ``cispo``, ``m2po`` (THEORY.md §2).

These are not weight maps of the class ``𝒲_ε``; they act on per-token
log-ratios ``ℓ_{i,t} = log π_θ(a_{i,t}|s_{i,t}) − log μ(a_{i,t}|s_{i,t})`` and
are compared empirically. Every estimator of the project, trajectory- or
token-level, is written in one form: stop-gradient per-token coefficients
``c_{i,t}`` with

    ĝ = (1/G) Σ_i A_i Σ_t c_{i,t} ∇log π_θ(a_{i,t}|s_{i,t}),

so for a trajectory-level map ``c_{i,t} = w_i``. With ``r_{i,t} = exp(ℓ_{i,t})``,
``T_i`` the number of real tokens of trajectory ``i`` and ``ℓ_i = Σ_t ℓ_{i,t}``:

=======  ======================================================================
grpo     ``c = r_{i,t}·1{unclipped}/T_i``: the gradient of PPO's
         ``min(r A, clip(r, 1−ε_low, 1+ε_high) A)``, length-normalised; the
         clip binds (gradient 0) when ``A>0, r>1+ε_high`` or ``A<0, r<1−ε_low``.
gspo     ``c = s_i·1{unclipped}/T_i`` with the sequence ratio
         ``s_i = exp(ℓ_i/T_i)`` and the same two-sided clip rule on ``s_i``.
cispo    ``c = min(r_{i,t}, 1+ε_high)/T_i``: truncated token IS weight,
         stop-gradient, every token kept.
m2po     ``c = r_{i,t}·k_{i,t}/T_i`` where ``k`` masks, over the whole batch, the
         tokens with the largest ``(log r)²`` until the batch mean of
         ``(log r)²`` over the kept tokens is ``≤ τ_M2`` (no clipping).
=======  ======================================================================

Choices this reconstruction makes (documented so they can be changed here,
in one place): GRPO/GSPO/CISPO/M2PO are all normalised by ``1/T_i`` per
sequence; ``grpo`` has no dual clip (for ``A<0`` the ratio is unbounded above,
as in plain PPO); m2po's mask is computed once per batch; ties in the m2po
ordering are broken by a stable sort on the flattened ``[N, T]`` index.

Three backends, tested equal: :func:`token_coefficients` (NumPy reference),
:func:`token_coefficients_nb` (Numba), :func:`token_coefficients_torch`, and
:func:`policy_loss`, the PyTorch surrogate whose autograd gradient is ``−ĝ``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from asyncgrpo.validation import check_eps

#: Names of the token-level baselines.
TOKEN_ESTIMATORS: tuple[str, ...] = ("grpo", "gspo", "cispo", "m2po")
#: Integer ids for Numba (disjoint from the trajectory-level ``CODES``).
TOKEN_CODES = {"grpo": 10, "gspo": 11, "cispo": 12, "m2po": 13}


# --------------------------------------------------------------------------- validation
def _check_params(eps_low, eps_high, tau_m2):
    eps_low = check_eps(eps_low, "eps_low")
    if eps_low >= 1.0:
        raise ValueError(f"eps_low must be in (0, 1) so that 1 − eps_low > 0, got {eps_low!r}")
    return eps_low, check_eps(eps_high, "eps_high"), check_eps(tau_m2, "tau_m2")


def _check_inputs(name, tok_ell, mask, adv):
    if name not in TOKEN_CODES:
        raise ValueError(f"unknown token-level estimator {name!r}; known: {', '.join(TOKEN_ESTIMATORS)}")
    tok_ell = np.asarray(tok_ell, dtype=np.float64)
    mask = np.asarray(mask, dtype=np.bool_)
    adv = np.asarray(adv, dtype=np.float64)
    if tok_ell.ndim != 2 or tok_ell.shape[0] == 0 or tok_ell.shape[1] == 0:
        raise ValueError(f"tok_ell must have shape [N, T] with N, T >= 1, got {tok_ell.shape}")
    if mask.shape != tok_ell.shape:
        raise ValueError(f"mask and tok_ell must have the same shape, got {mask.shape} and {tok_ell.shape}")
    if adv.shape != (tok_ell.shape[0],):
        raise ValueError(f"adv must have shape [N] = ({tok_ell.shape[0]},), got {adv.shape}")
    if not mask.any(axis=1).all():
        i = int(np.argmin(mask.any(axis=1)))
        raise ValueError(f"mask leaves trajectory {i} with no tokens: every trajectory needs T_i >= 1")
    bad = mask & ~np.isfinite(tok_ell)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"tok_ell must be finite on real tokens; found {float(tok_ell[idx])} at {idx}")
    if not np.isfinite(adv).all():
        raise ValueError("adv must be finite (no NaN or inf)")
    return tok_ell, mask, adv


# --------------------------------------------------------------------------- NumPy reference
def _m2po_keep(tok_ell: np.ndarray, mask: np.ndarray, tau_m2: float) -> np.ndarray:
    """Boolean keep-mask: drop the largest ``(log r)²`` until the kept mean is ``≤ τ_M2``."""
    v = np.where(mask, tok_ell * tok_ell, 0.0).ravel()
    order = np.argsort(-v, kind="mergesort")
    real = mask.ravel()
    total, n = float(v[real].sum()), int(real.sum())
    keep = real.copy()
    for j in order:
        if n == 0 or total <= tau_m2 * n:
            break
        if real[j]:
            keep[j] = False
            total -= v[j]
            n -= 1
    return keep.reshape(mask.shape)


def token_coefficients(name, tok_ell, mask, adv, *, eps_low=0.2, eps_high=0.28, tau_m2=0.04) -> np.ndarray:
    """Stop-gradient coefficients ``c_{i,t}`` of token-level estimator ``name`` (NumPy), shape ``[N, T]``."""
    tok_ell, mask, adv = _check_inputs(name, tok_ell, mask, adv)
    eps_low, eps_high, tau_m2 = _check_params(eps_low, eps_high, tau_m2)
    ell = np.where(mask, tok_ell, 0.0)
    T_i = mask.sum(axis=1).astype(np.float64)[:, None]
    hi, lo = math.log1p(eps_high), math.log1p(-eps_low)
    pos = (adv >= 0)[:, None]
    with np.errstate(over="ignore"):
        if name == "grpo":
            unclipped = np.where(pos, ell <= hi, ell >= lo)
            c = np.where(unclipped, np.exp(ell), 0.0)
        elif name == "gspo":
            seq = ell.sum(axis=1, keepdims=True) / T_i
            unclipped = np.where(pos, seq <= hi, seq >= lo)
            c = np.broadcast_to(np.where(unclipped, np.exp(seq), 0.0), ell.shape)
        elif name == "cispo":
            c = np.exp(np.minimum(ell, hi))
        else:  # m2po
            c = np.where(_m2po_keep(ell, mask, tau_m2), np.exp(ell), 0.0)
    return np.where(mask, c / T_i, 0.0)


# --------------------------------------------------------------------------- Numba kernel
@njit(cache=True)
def token_coefficients_nb(code, tok_ell, mask, adv, eps_low, eps_high, tau_m2, out):
    """Numba version of :func:`token_coefficients`; ``code`` from ``TOKEN_CODES``.

    ``tok_ell``: ``ndarray(float64, (N, T))``; ``mask``: ``ndarray(bool, (N, T))``;
    ``adv``: ``ndarray(float64, (N,))``; ``out`` is overwritten and returned.
    No validation: callers validate once.
    """
    N, T = tok_ell.shape
    hi = math.log1p(eps_high)
    lo = math.log1p(-eps_low)
    keep = np.ones((N, T), dtype=np.bool_)
    if code == 13:
        # Batch-level mask, same stable order as the NumPy reference.
        v = np.zeros(N * T)
        total = 0.0
        n = 0
        for i in range(N):
            for t in range(T):
                if mask[i, t]:
                    v[i * T + t] = tok_ell[i, t] * tok_ell[i, t]
                    total += v[i * T + t]
                    n += 1
        order = np.argsort(-v, kind="mergesort")
        for j in order:
            if n == 0 or total <= tau_m2 * n:
                break
            i, t = j // T, j % T
            if mask[i, t]:
                keep[i, t] = False
                total -= v[j]
                n -= 1
    for i in range(N):
        Ti = 0
        seq = 0.0
        for t in range(T):
            if mask[i, t]:
                Ti += 1
                seq += tok_ell[i, t]
        seq /= Ti
        pos = adv[i] >= 0.0
        for t in range(T):
            if not mask[i, t]:
                out[i, t] = 0.0
                continue
            e = tok_ell[i, t]
            if code == 10:
                ok = e <= hi if pos else e >= lo
                c = math.exp(e) if ok else 0.0
            elif code == 11:
                ok = seq <= hi if pos else seq >= lo
                c = math.exp(seq) if ok else 0.0
            elif code == 12:
                c = math.exp(e if e < hi else hi)
            elif code == 13:
                c = math.exp(e) if keep[i, t] else 0.0
            else:
                raise ValueError("unknown token-level estimator code")
            out[i, t] = c / Ti
    return out


def token_coefficients_numba(name, tok_ell, mask, adv, *, eps_low=0.2, eps_high=0.28, tau_m2=0.04) -> np.ndarray:
    """Validated wrapper around :func:`token_coefficients_nb` (same contract as the NumPy reference)."""
    tok_ell, mask, adv = _check_inputs(name, tok_ell, mask, adv)
    eps_low, eps_high, tau_m2 = _check_params(eps_low, eps_high, tau_m2)
    out = np.empty_like(tok_ell)
    return token_coefficients_nb(TOKEN_CODES[name], tok_ell, mask, adv, eps_low, eps_high, tau_m2, out)


# --------------------------------------------------------------------------- PyTorch
def token_coefficients_torch(name, tok_ell, mask, adv, *, eps_low=0.2, eps_high=0.28, tau_m2=0.04):
    """Detached ``c_{i,t}`` (PyTorch, batched ``[N, T]``), same definitions as the NumPy reference."""
    import torch

    if name not in TOKEN_CODES:
        raise ValueError(f"unknown token-level estimator {name!r}; known: {', '.join(TOKEN_ESTIMATORS)}")
    eps_low, eps_high, tau_m2 = _check_params(eps_low, eps_high, tau_m2)
    with torch.no_grad():
        tok_ell = tok_ell.detach()
        mask = mask.to(torch.bool)
        if bool((mask & ~torch.isfinite(tok_ell)).any()):
            raise ValueError("tok_ell must be finite on real tokens (no NaN or inf)")
        if adv.shape != tok_ell.shape[:1]:
            raise ValueError(f"adv must have shape [N] = [{tok_ell.shape[0]}], got {tuple(adv.shape)}")
        if not bool(torch.isfinite(adv).all()):
            raise ValueError("adv must be finite (no NaN or inf)")
        ell = torch.where(mask, tok_ell, torch.zeros_like(tok_ell))
        T_i = mask.sum(dim=1, keepdim=True).to(ell.dtype)
        if bool((T_i == 0).any()):
            raise ValueError("mask leaves a trajectory with no tokens: every trajectory needs T_i >= 1")
        hi, lo = math.log1p(eps_high), math.log1p(-eps_low)
        pos = (adv >= 0).unsqueeze(1)
        zero = torch.zeros_like(ell)
        if name == "grpo":
            unclipped = torch.where(pos, ell <= hi, ell >= lo)
            c = torch.where(unclipped, torch.exp(ell), zero)
        elif name == "gspo":
            seq = ell.sum(dim=1, keepdim=True) / T_i
            unclipped = torch.where(pos, seq <= hi, seq >= lo)
            c = torch.where(unclipped, torch.exp(seq), torch.zeros_like(seq)).expand_as(ell)
        elif name == "cispo":
            c = torch.exp(torch.clamp(ell, max=hi))
        else:
            keep = _m2po_keep(ell.double().cpu().numpy(), mask.cpu().numpy(), tau_m2)
            c = torch.where(torch.as_tensor(keep, device=ell.device), torch.exp(ell), zero)
        return torch.where(mask, c / T_i, zero)


def policy_loss(name, logp_new, logp_old, adv, mask, *, eps=0.2, eps_low=0.2, eps_high=0.28, tau_m2=0.04,
                group_size=None, length_normalize=False):
    """Surrogate loss ``−(1/N) Σ_i A_i Σ_t sg(c_{i,t}) log π_θ(a_{i,t}|s_{i,t})`` for any estimator.

    ``logp_new`` (with grad) and ``logp_old`` (behaviour log-probs recorded at
    generation) are ``[N, T]``, ``N = n_groups·G`` trajectories ordered group by
    group; ``adv`` is ``[N]``, ``mask`` ``[N, T]``. Its gradient is ``−ĝ``
    averaged over groups. Trajectory-level names take ``w_i`` from the registry
    (:meth:`WeightMap.torch` on ``ℓ_i = Σ_t ℓ_{i,t}``, groups of ``group_size``)
    and threshold ``eps``; token-level names use :func:`token_coefficients_torch`.
    With ``length_normalize`` the trajectory-level coefficients become ``w_i/T_i`` (the same
    per-sequence ``1/T_i`` the token-level baselines carry), so step sizes compare like for like;
    THEORY's ``ĝ`` is the default (``False``). Log-ratios are formed in float32 or wider even when
    the model runs in bf16.
    """
    import torch

    from asyncgrpo import estimators as est

    if logp_new.shape != logp_old.shape or mask.shape != logp_new.shape or logp_new.ndim != 2:
        raise ValueError(
            "logp_new, logp_old and mask must share one shape [N, T]; got "
            f"{tuple(logp_new.shape)}, {tuple(logp_old.shape)}, {tuple(mask.shape)}"
        )
    if adv.shape != logp_new.shape[:1]:
        raise ValueError(f"adv must have shape [N] = [{logp_new.shape[0]}], got {tuple(adv.shape)}")
    dtype = torch.promote_types(logp_new.dtype, torch.float32)
    mask = mask.to(torch.bool)
    tok_ell = torch.where(mask, (logp_new.detach().to(dtype) - logp_old.to(dtype)), torch.zeros((), dtype=dtype))
    adv = adv.to(dtype)
    if name in TOKEN_CODES:
        c = token_coefficients_torch(name, tok_ell, mask, adv, eps_low=eps_low, eps_high=eps_high, tau_m2=tau_m2)
    else:
        wm = est.get(name, eps)
        N = logp_new.shape[0]
        G = N if group_size is None else int(group_size)
        if G < 1 or N % G:
            raise ValueError(f"group_size must be >= 1 and divide N = {N}, got {group_size!r}")
        ell = tok_ell.sum(dim=1).reshape(N // G, G)
        c = wm.torch(ell).reshape(N, 1).expand_as(tok_ell)
        if length_normalize:
            c = c / mask.sum(dim=1, keepdim=True).to(dtype)
    per_token = torch.where(mask, c * logp_new.to(dtype), torch.zeros((), dtype=dtype))
    return -(adv * per_token.sum(dim=1)).mean()


__all__ = [
    "TOKEN_ESTIMATORS",
    "TOKEN_CODES",
    "token_coefficients",
    "token_coefficients_nb",
    "token_coefficients_numba",
    "token_coefficients_torch",
    "policy_loss",
]
