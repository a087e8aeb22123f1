"""Token-level baselines ``grpo``, ``gspo``, ``cispo``, ``m2po`` and the loss :func:`policy_loss` (THEORY.md §2).

These are not weight maps of the class ``𝒲_ε``; they act on per-token
log-ratios ``ℓ_{i,t} = log π_θ(a_{i,t}|s_{i,t}) − log μ(a_{i,t}|s_{i,t})`` and
are compared empirically. Every estimator of the project, trajectory- or
token-level, is written in one form: stop-gradient per-token weights ``k_{i,t}``
and a normaliser ``ν_{i,t}`` (the aggregation mode, :mod:`asyncgrpo.estimators.aggregation`),

    ĝ = Σ_{i,t} ν_{i,t} A_i k_{i,t} ∇log π_θ(a_{i,t}|s_{i,t}),

so for a trajectory-level map ``k_{i,t} = w_i``. The default mode of the token-level
baselines is ``seq-mean-token-mean`` (``ν = 1/(T_i N)``), so that ``c_{i,t} = k_{i,t}/T_i`` below are the
coefficients of ``ĝ = (1/N) Σ_i A_i Σ_t c_{i,t} ∇log π_θ``. With ``r_{i,t} = exp(ℓ_{i,t})``,
``T_i`` the number of real tokens of trajectory ``i`` and ``ℓ_i = Σ_t ℓ_{i,t}``:

=======  ======================================================================
grpo     ``k = r_{i,t}·1{unclipped}``: the gradient of PPO's
         ``min(r A, clip(r, 1−ε_low, 1+ε_high) A)``; the clip binds (gradient 0) when
         ``A>0, r>1+ε_high`` or ``A<0, r<1−ε_low``; with the dual clip ``clip_ratio_c = c``
         also when ``A<0, r>c`` (verl's ``max(·, −A c)`` term).
gspo     ``k = s_i·1{unclipped}`` with the sequence ratio ``s_i = exp(ℓ_i/T_i)`` and the same
         clip rules on ``s_i``.
cispo    ``k = clamp(r_{i,t}, lo, hi)``: truncated token IS weight, stop-gradient, every token
         kept. ``cispo_clamp``: ``"upper"`` (default here: ``lo = 0, hi = 1+ε_high``),
         ``"two-sided"`` (verl: ``[1−ε_low, 1+ε_high]``), ``"absolute"`` (TRL: ``hi = ε_high``,
         the cap itself, not ``1+ε``; TRL recommends 5.0).
m2po     ``k = r_{i,t}·keep_{i,t}`` where ``keep`` masks, over the whole batch, the
         tokens with the largest ``(log r)²`` until the batch mean of
         ``(log r)²`` over the kept tokens is ``≤ τ_M2`` (no clipping).
=======  ======================================================================

The peers' token-level corrections are registered here too (``TOKEN_ESTIMATORS``): ``verl_tok_tis``
(``k = min(exp(clamp(ℓ_{i,t}, ±20)), 2)``), ``verl_geo_rs`` (a row kept iff its mean clamped ``−ℓ`` lies in
``[log 0.999, log 1.001]``) and ``trl_seq_mask`` (a row dropped iff ``A_i < 0`` and ``−ℓ_i/T_i > 0.5``); each
estimator's formula lives in its module of :mod:`asyncgrpo.estimators.maps`, and this module dispatches
through :mod:`asyncgrpo.estimators.registry` (docs/estimators.md).

A ratio exactly on a clip boundary (``ℓ = log(1+ε_high)``, ``log(1−ε_low)`` or ``log c``) counts as
unclipped in every backend; comparisons are made on ``ℓ`` (log space), never on ``exp(ℓ)``.
Other choices made here, in one place: the toolkit's ``grpo`` has no dual clip unless asked
(verl's default is ``c = 3``); ``A = 0`` takes the ``A ≥ 0`` rule (irrelevant for the gradient, and
never counted as clipped by :func:`loss_metrics`); m2po's mask is computed once per batch; ties in the
m2po ordering are broken by a stable sort on the flattened ``[N, T]`` index.

Backends, tested equal: :func:`token_coefficients` (NumPy), :func:`token_coefficients_nb` (Numba),
:func:`token_coefficients_torch`, and :func:`policy_loss`, the PyTorch surrogate (gradient ``−ĝ``) with metrics.
docs/losses.md has the tables (modes, clip variants, defaults of the toolkit, verl and TRL, metric names).
"""
from __future__ import annotations

import math

import numpy as np

from asyncgrpo.estimators import registry
from asyncgrpo.estimators.clip_bounds import cispo_log_bounds
from asyncgrpo.estimators.plugin_checks import check_torch_output
from asyncgrpo.estimators.aggregation import (
    AGG_MODES,
    LOSS_AGG_MODES,
    THEORY_MODE,
    TRL_LOSS_TYPES,
    check_loss_agg_mode,
    token_normaliser,
)
from asyncgrpo.estimators.overflowed_loss import overflowed_loss
from asyncgrpo.validation import (
    as_tensor_on,
    check_eps,
    check_finite_tensor,
    check_mask,
    check_real,
    check_real_array,
    check_real_ndarray,
)

#: Names of the token-level estimators (registry level ``token``): the baselines and the peers' token-level
#: corrections. Their ĝ is length-normalised (default ``seq-mean-token-mean``), which is why the protocol
#: gives them the token-level η grid.
TOKEN_ESTIMATORS: tuple[str, ...] = registry.names("token")
#: Integer ids for Numba (disjoint from the trajectory-level ``CODES``).
TOKEN_CODES = {name: registry.code(name) for name in TOKEN_ESTIMATORS}
#: CISPO clamp conventions: toolkit (``"upper"``), verl (``"two-sided"``), TRL (``"absolute"``).
CISPO_CLAMPS: tuple[str, ...] = ("upper", "two-sided", "absolute")
#: Methods that take the dual clip ``clip_ratio_c`` (registry attribute ``dual_clip``).
DUAL_CLIP_METHODS: frozenset[str] = frozenset(n for n in TOKEN_ESTIMATORS if registry.entry(n).dual_clip)
#: Methods that take ``cispo_clamp`` (registry attribute ``cispo_clamp``).
CISPO_METHODS: frozenset[str] = frozenset(n for n in TOKEN_ESTIMATORS if registry.entry(n).cispo_clamp)


# --------------------------------------------------------------------------- validation
EPS_LOW_DEFAULT, EPS_HIGH_DEFAULT = 0.2, 0.28  #: the toolkit's clip defaults where the map names no peer's


def peer_defaults(name: str) -> dict:
    """``PEER_DEFAULTS`` of the module registering token-level ``name`` (``epsilon``, ``epsilon_high``,
    ``loss_agg_mode``), ``{}`` when it declares none."""
    import importlib

    module = importlib.import_module(registry.entry(name).numpy.__module__) if name in TOKEN_CODES else None
    return dict(getattr(module, "PEER_DEFAULTS", {}))


def resolve_eps(name, eps_low, eps_high):
    """``(eps_low, eps_high)`` with ``None`` replaced by the peer's default of ``name`` (its map module's
    ``PEER_DEFAULTS["epsilon"]``/``["epsilon_high"]``: luspo → TRL's 0.2/0.2), else the toolkit's 0.2/0.28."""
    d = peer_defaults(name) if (eps_low is None or eps_high is None) and name in TOKEN_CODES else {}
    if eps_low is None:
        eps_low = d.get("epsilon", EPS_LOW_DEFAULT)
    if eps_high is None:
        eps_high = d.get("epsilon_high", EPS_HIGH_DEFAULT)
    return eps_low, eps_high


def _check_params(eps_low, eps_high, tau_m2, name=None):
    eps_low, eps_high = resolve_eps(name, eps_low, eps_high)
    eps_low = check_eps(eps_low, "eps_low")
    if eps_low >= 1.0:
        raise ValueError(f"eps_low must be in (0, 1) so that 1 − eps_low > 0, got {eps_low!r}")
    return eps_low, check_eps(eps_high, "eps_high"), check_eps(tau_m2, "tau_m2")


def _check_clip_options(name, clip_ratio_c, cispo_clamp):
    """Validate the clip variants; return ``(log c or inf, cispo mode index)``."""
    if clip_ratio_c is not None:
        if name not in DUAL_CLIP_METHODS:
            raise ValueError(f"clip_ratio_c (dual clip) applies to {' and '.join(sorted(DUAL_CLIP_METHODS))} only, "
                             f"not {name!r}; leave it None")
        try:
            c = check_real(clip_ratio_c, "clip_ratio_c")  # any real scalar: NumPy's float32, a 0-d array
        except ValueError:
            c = math.nan
        if not c > 1.0:
            raise ValueError(f"clip_ratio_c must be a finite number > 1 (verl's default is 3.0) or None, "
                             f"got {clip_ratio_c!r}")
    if cispo_clamp not in CISPO_CLAMPS:
        raise ValueError(f"cispo_clamp must be one of {', '.join(CISPO_CLAMPS)}, got {cispo_clamp!r}")
    if cispo_clamp != "upper" and name not in CISPO_METHODS:
        raise ValueError(f"cispo_clamp applies to {', '.join(sorted(CISPO_METHODS))} only, not {name!r}; "
                         f"leave it 'upper'")
    log_c = math.inf if clip_ratio_c is None else math.log(float(clip_ratio_c))
    return log_c, CISPO_CLAMPS.index(cispo_clamp)


def _check_inputs(name, tok_ell, mask, adv):
    if name not in TOKEN_CODES:
        raise ValueError(f"unknown token-level estimator {name!r}; known: {', '.join(TOKEN_ESTIMATORS)}")
    tok_ell = check_real_ndarray(tok_ell, "tok_ell")  # types checked, not coerced: no complex, str or bool
    mask = np.asarray(check_mask(mask), dtype=np.bool_)  # a mask of 0.5 is an error, never silently True
    adv = check_real_ndarray(adv, "adv")
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
def _params(eps_low, eps_high, tau_m2, log_c, cispo_clamp):
    return registry.TokenParams(eps_low, eps_high, tau_m2, log_c, cispo_clamp, CISPO_CLAMPS.index(cispo_clamp))


def _m2po_keep(tok_ell: np.ndarray, mask: np.ndarray, tau_m2: float) -> np.ndarray:
    """Boolean keep-mask of m2po (:func:`asyncgrpo.estimators.maps.m2po.keep_mask`)."""
    from asyncgrpo.estimators.maps.m2po import keep_mask

    return keep_mask(tok_ell, mask, tau_m2)


def _kept_scale(k, mask):
    """``N/N_kept`` for a rejecting map (rows with a nonzero weight are kept; 1 when none or all are)."""
    kept = int((mask & (k != 0)).any(axis=1).sum()) if isinstance(k, np.ndarray) else int((mask & (k != 0)).any(dim=1).sum())
    N = mask.shape[0]
    return N / kept if 0 < kept < N else 1.0


def token_coefficients(name, tok_ell, mask, adv, *, eps_low=None, eps_high=None, tau_m2=0.04,
                       clip_ratio_c=None, cispo_clamp="upper") -> np.ndarray:
    """Stop-gradient coefficients ``c_{i,t} = k_{i,t}/T_i`` of token-level estimator ``name`` (NumPy), ``[N, T]``.

    ``clip_ratio_c``: dual clip for grpo/gspo (``k = 0`` when ``A<0`` and the ratio exceeds ``c``);
    ``cispo_clamp``: CISPO convention (module docstring). A rejecting map (registry ``rejects``, verl's
    rejection sampling) scales its kept rows by ``N/N_kept``: ``seq-mean-token-mean`` over the kept rows.
    """
    tok_ell, mask, adv = _check_inputs(name, tok_ell, mask, adv)
    eps_low, eps_high, tau_m2 = _check_params(eps_low, eps_high, tau_m2, name)
    log_c, _ = _check_clip_options(name, clip_ratio_c, cispo_clamp)
    e = registry.entry(name, "token")
    ell = np.where(mask, tok_ell, 0.0)
    T_i = mask.sum(axis=1).astype(np.float64)[:, None]
    with np.errstate(over="ignore"):
        k = e.numpy(ell, mask, adv, T_i, _params(eps_low, eps_high, tau_m2, log_c, cispo_clamp))
    c = np.where(mask, k / T_i, 0.0)
    return c * _kept_scale(c, mask) if e.rejects else c


# --------------------------------------------------------------------------- Numba kernel
#: ``token_coefficients_nb(code, tok_ell, mask, adv, eps_low, eps_high, tau_m2, out, log_clip_c=inf, cispo_mode=0)``:
#: the registry's generated dispatch (Numba version of :func:`token_coefficients`; ``code`` from ``TOKEN_CODES``,
#: ``tok_ell`` float64 ``(N, T)``, ``mask`` bool ``(N, T)``, ``adv`` float64 ``(N,)``, ``out`` overwritten and
#: returned; ``log_clip_c`` is ``log c`` of the dual clip (``inf`` = off), ``cispo_mode`` indexes
#: ``CISPO_CLAMPS``). No validation: callers validate once.
token_coefficients_nb = registry.dispatch().token_coefficients_nb


def token_coefficients_numba(name, tok_ell, mask, adv, *, eps_low=None, eps_high=None, tau_m2=0.04,
                             clip_ratio_c=None, cispo_clamp="upper") -> np.ndarray:
    """Validated wrapper around :func:`token_coefficients_nb` (same contract as the NumPy reference)."""
    tok_ell, mask, adv = _check_inputs(name, tok_ell, mask, adv)
    eps_low, eps_high, tau_m2 = _check_params(eps_low, eps_high, tau_m2, name)
    log_c, cmode = _check_clip_options(name, clip_ratio_c, cispo_clamp)
    out = np.empty_like(tok_ell)
    return token_coefficients_nb(TOKEN_CODES[name], tok_ell, mask, adv, eps_low, eps_high, tau_m2, out, log_c, cmode)


# --------------------------------------------------------------------------- PyTorch
def _token_weights_torch(name, ell, mask, adv, eps_low, eps_high, tau_m2, log_c, cispo_clamp):
    """Detached ``k_{i,t}`` (no ``1/T_i``), 0 off-mask; rows with ``T_i = 0`` allowed (all 0). No validation."""
    import torch

    with torch.no_grad():
        zero = torch.zeros_like(ell)
        T_i = mask.sum(dim=1, keepdim=True).to(ell.dtype).clamp(min=1.0)
        k = registry.entry(name, "token").torch(ell, mask, adv, T_i,
                                                _params(eps_low, eps_high, tau_m2, log_c, cispo_clamp))
        return torch.where(mask, k, zero)


def token_coefficients_torch(name, tok_ell, mask, adv, *, eps_low=None, eps_high=None, tau_m2=0.04,
                             clip_ratio_c=None, cispo_clamp="upper"):
    """Detached ``c_{i,t}`` (PyTorch, batched ``[N, T]``), same definitions as the NumPy reference."""
    import torch

    if name not in TOKEN_CODES:
        raise ValueError(f"unknown token-level estimator {name!r}; known: {', '.join(TOKEN_ESTIMATORS)}")
    eps_low, eps_high, tau_m2 = _check_params(eps_low, eps_high, tau_m2, name)
    log_c, _ = _check_clip_options(name, clip_ratio_c, cispo_clamp)
    tok_ell = check_real_array(tok_ell, "tok_ell")
    device = tok_ell.device if torch.is_tensor(tok_ell) else None
    tok_ell = as_tensor_on(tok_ell, device)
    adv = as_tensor_on(check_real_array(adv, "adv"), tok_ell.device)
    mask = as_tensor_on(check_mask(mask), tok_ell.device)  # a mask of 0.5 is an error, never silently True
    if tok_ell.ndim != 2 or tok_ell.shape[0] == 0 or tok_ell.shape[1] == 0:
        raise ValueError(f"tok_ell must have shape [N, T] with N, T >= 1, got {tuple(tok_ell.shape)}")
    if mask.shape != tok_ell.shape:  # the NumPy reference's rule: no silent broadcast of a [1, T] mask
        raise ValueError(f"mask and tok_ell must have the same shape, got {tuple(mask.shape)} and {tuple(tok_ell.shape)}")
    with torch.no_grad():
        tok_ell = tok_ell.detach()
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
        k = _token_weights_torch(name, ell, mask, adv, eps_low, eps_high, tau_m2, log_c, cispo_clamp)
        c = k / T_i
        return c * _kept_scale(c, mask) if registry.entry(name).rejects else c


def _kept_normaliser(name, mode, mask, nonzero, nu, agg_kw):
    """``ν`` over the kept tokens for a rejecting map (registry ``rejects``: verl's rejection sampling rewrites
    ``response_mask``, so its normaliser counts kept tokens and rows only); ``nu`` unchanged otherwise or when
    nothing is kept (every coefficient is then 0)."""
    if not registry.entry(name).rejects:
        return nu
    kept = mask & nonzero
    return token_normaliser(mode, kept, **agg_kw).to(nu.dtype) if bool(kept.any()) else nu


def policy_loss(name, logp_new, logp_old, adv, mask, *, eps=0.2, eps_low=None, eps_high=None, tau_m2=0.04,
                group_size=None, length_normalize=False, loss_agg_mode=None, loss_scale_factor=None,
                batch_num_tokens=None, global_batch_size=None, clip_ratio_c=None, cispo_clamp="upper",
                return_metrics=False):
    """Surrogate loss ``L = −Σ_{i,t} ν_{i,t} A_i sg(k_{i,t}) log π_θ(a_{i,t}|s_{i,t})`` for any estimator.

    Its autograd gradient is ``−ĝ``. ``logp_new`` (with grad) and ``logp_old`` (behaviour log-probs
    recorded at generation) are ``[N, T]``, ``N = n_groups·G`` trajectories ordered group by group;
    ``adv`` is ``[N]``, ``mask`` ``[N, T]``. Trajectory-level names take ``k_{i,t} = w_i`` from the
    registry (:meth:`WeightMap.torch` on ``ℓ_i = Σ_t ℓ_{i,t}``, groups of ``group_size``, threshold
    ``eps``); token-level names take ``k`` from the module table (``eps_low``, ``eps_high``, ``tau_m2``,
    ``clip_ratio_c``, ``cispo_clamp``).

    ``loss_agg_mode`` picks ``ν`` (:mod:`asyncgrpo.estimators.aggregation`, verl's and TRL's modes; its
    ``loss_scale_factor``, ``batch_num_tokens``, ``global_batch_size``). ``None``: the peer's default where the
    map's module names one (``PEER_DEFAULTS``: gpg → verl's ``token-mean``, luspo → TRL's ``grpo``), else
    ``seq-mean-token-mean`` for token-level names and THEORY's ``ν = 1/N`` for trajectory-level maps
    (``ν = 1/(T_i N)`` with ``length_normalize=True``, kept for older callers). ``eps_low``/``eps_high``
    ``None``: the map's peer defaults (luspo → TRL's 0.2/0.2), else 0.2/0.28 (:func:`resolve_eps`).

    A rejecting map (registry ``rejects``: ``verl_seq_rs``, ``verl_geo_rs``) removes its rejected tokens from the
    mask ``ν`` is computed on, as verl's rejection sampling rewrites ``response_mask``.

    An all-False row is an absent trajectory: zero contribution and gradient, not in its group's ``ρ̄``, not
    counted by verl's ``seq-mean-*`` modes (TRL's ``grpo``/``dr_grpo`` and THEORY's ``1/N`` count it). NaN/inf
    in ``logp_new``/``logp_old`` (real tokens) or ``adv`` raises ``ValueError``; log-ratios are float32 or wider.

    Finite inputs never give NaN: ``A_i = 0`` or ``k = 0`` contributes exactly 0; ``ν A w`` is formed in
    float64, in log space where ``w`` overflows; a coefficient overflowing the loss dtype gives loss ``+inf``
    with ``±inf`` gradient on that trajectory's tokens, exact elsewhere.

    ``return_metrics=True``: ``(loss, metrics)`` (:func:`asyncgrpo.estimators.loss_metrics.loss_metrics`).
    """
    import torch

    from asyncgrpo import estimators as est
    from asyncgrpo.estimators import loss_metrics as lm
    from asyncgrpo.estimators import torch_backend

    if name not in TOKEN_CODES and name not in est.TRAJECTORY_ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; known: {', '.join(est.TRAJECTORY_ESTIMATORS + TOKEN_ESTIMATORS)}")
    if not torch.is_tensor(logp_new):
        raise ValueError(f"logp_new must be a torch tensor (the loss is differentiated through it), got "
                         f"{type(logp_new).__name__}")
    logp_new = check_real_array(logp_new, "logp_new")
    logp_old = as_tensor_on(check_real_array(logp_old, "logp_old"), logp_new.device)
    adv = as_tensor_on(check_real_array(adv, "adv"), logp_new.device)
    mask = as_tensor_on(check_mask(mask), logp_new.device)
    if logp_new.shape != logp_old.shape or mask.shape != logp_new.shape or logp_new.ndim != 2:
        raise ValueError(
            "logp_new, logp_old and mask must share one shape [N, T]; got "
            f"{tuple(logp_new.shape)}, {tuple(logp_old.shape)}, {tuple(mask.shape)}"
        )
    if adv.shape != logp_new.shape[:1]:
        raise ValueError(f"adv must have shape [N] = [{logp_new.shape[0]}], got {tuple(adv.shape)}")
    mask = check_mask(mask)
    check_finite_tensor(logp_new, mask, "logp_new")
    check_finite_tensor(logp_old, mask, "logp_old")
    check_finite_tensor(adv, None, "adv")
    token = name in TOKEN_CODES
    if loss_agg_mode is None:
        # the peer's default where the map's module names one (gpg → verl's token-mean, luspo → TRL's grpo)
        peer_mode = peer_defaults(name).get("loss_agg_mode") if token else None
        mode = peer_mode or ("seq-mean-token-mean" if (token or length_normalize) else THEORY_MODE)
    else:
        mode = check_loss_agg_mode(loss_agg_mode)
        if mode == THEORY_MODE:
            raise ValueError(f"loss_agg_mode must be one of {', '.join(AGG_MODES)} or None; got {mode!r}")
        if length_normalize and not token and mode != "seq-mean-token-mean":
            raise ValueError(f"length_normalize=True means loss_agg_mode='seq-mean-token-mean'; "
                             f"got loss_agg_mode={mode!r} too: pass only one")
    eps_low_v, eps_high_v, tau_v = _check_params(eps_low, eps_high, tau_m2, name)
    log_c, _ = _check_clip_options(name, clip_ratio_c, cispo_clamp)

    dtype = torch.promote_types(logp_new.dtype, torch.float32)
    zero = torch.zeros((), dtype=dtype, device=logp_new.device)
    tok_ell = torch.where(mask, logp_new.detach().to(dtype) - logp_old.detach().to(dtype), zero)
    adv = adv.detach().to(dtype)
    rows = mask.any(dim=1)
    N = logp_new.shape[0]
    G = N if group_size is None else group_size
    if isinstance(G, bool) or not isinstance(G, (int, np.integer)) or G < 1 or N % G:
        raise ValueError(f"group_size must be >= 1 and divide N = {N} (an integer), got {group_size!r}")
    G = int(G)
    agg_kw = dict(loss_scale_factor=loss_scale_factor, batch_num_tokens=batch_num_tokens,
                  global_batch_size=global_batch_size)
    nu_wide = token_normaliser(mode, mask, **agg_kw)
    wide = torch.promote_types(dtype, nu_wide.dtype)
    adv_wide = adv.to(wide)[:, None].expand_as(tok_ell)
    # Coefficients c = ν A k are formed in the wide dtype and only on entries where none of the three
    # is 0, so a weight that overflows (is, ℓ = 1e4) next to A = 0 gives exactly 0, never inf × 0 = NaN.
    if token:
        k = _token_weights_torch(name, tok_ell, mask, adv, eps_low_v, eps_high_v, tau_v, log_c, cispo_clamp)
        check_torch_output(name, "k", k, mask)
        w = None
        nu_wide = _kept_normaliser(name, mode, mask, k != 0, nu_wide, agg_kw)
        active = mask & (adv_wide != 0) & (k != 0)
        coef = torch.where(active, nu_wide * k.to(wide) * adv_wide, 0.0)
    else:
        est.get(name, eps)  # validates eps
        ell, rmask = tok_ell.sum(dim=1).reshape(N // G, G), rows.reshape(N // G, G)
        logw = torch.full_like(ell, -math.inf, dtype=wide)
        w_wide = torch.zeros_like(ell, dtype=wide)
        live = rmask.any(dim=1)  # a group with no real row has no weights to compute
        if bool(live.any()):
            tk = (tok_ell.reshape(N // G, G, -1)[live], mask.reshape(N // G, G, -1)[live])  # verl's per-token clamp
            logw[live] = torch_backend.log_weights(name, ell[live].to(wide), eps, rmask[live], *tk)
            check_torch_output(name, "log w", logw, rmask)
            w_wide[live] = torch_backend.wide_weights(name, ell[live], eps, rmask[live], *tk).to(wide)
        if registry.entry(name).rejects and mode != THEORY_MODE:
            # a rejecting map renormalises its kept rows within the group (G/G_kept: THEORY's 1/N then is verl's
            # seq-mean over the kept rows); verl's own modes renormalise over the whole batch instead (ν on the
            # kept mask, below), so the in-group factor is divided out here
            kept = rmask & (w_wide > 0)
            undo = (kept.sum(dim=1, keepdim=True).clamp(min=1).to(wide)
                    / rmask.sum(dim=1, keepdim=True).clamp(min=1).to(wide))
            w_wide, logw = w_wide * undo, logw + torch.log(undo)
        logw = logw.reshape(N)[:, None].expand_as(tok_ell)
        w_wide = w_wide.reshape(N)[:, None].expand_as(tok_ell)
        nu_wide = _kept_normaliser(name, mode, mask, w_wide != 0, nu_wide, agg_kw)
        w = torch_backend.cast_down(w_wide[:, 0], dtype)  # the registry's weights (WeightMap.torch)
        k = torch.where(mask, w[:, None].expand_as(tok_ell), zero)
        active = mask & (adv_wide != 0) & (w_wide != 0)
        coef = torch.where(active, nu_wide * w_wide * adv_wide, 0.0)
        # w alone overflows past ℓ ≈ 709.78 while ν|A|w may not: there, log space
        big = active & torch.isinf(w_wide)
        if bool(big.any()):
            log_mag = logw + torch.log(nu_wide) + torch.log(adv_wide.abs())
            coef = torch.where(big, torch.sign(adv_wide) * torch.exp(log_mag), coef)
    coef = coef.to(dtype)  # stop-gradient: k and ν are detached, adv is data
    logp = logp_new.to(dtype)
    loss = -torch.where(mask, coef * logp, zero).sum()
    if bool(torch.isnan(loss.detach())):
        # only from finite inputs whose coefficients overflow the dtype (inf − inf, inf × log π = 0)
        loss = overflowed_loss(torch.where(mask, logp, zero), coef)
    if not return_metrics:
        return loss
    metrics = lm.loss_metrics(name, tok_ell, mask, adv, k, nu_wide.to(dtype), logp_new=logp_new.detach().to(dtype), w=w,
                              group_size=G, eps=eps, eps_low=eps_low_v, eps_high=eps_high_v, tau_m2=tau_v,
                              clip_ratio_c=clip_ratio_c, cispo_clamp=cispo_clamp)
    metrics["surrogate_loss"] = float(loss.detach())
    metrics["loss_agg_mode"] = mode
    return loss, metrics


__all__ = [
    "TOKEN_ESTIMATORS",
    "TOKEN_CODES",
    "CISPO_METHODS",
    "CISPO_CLAMPS",
    "DUAL_CLIP_METHODS",
    "LOSS_AGG_MODES",
    "TRL_LOSS_TYPES",
    "AGG_MODES",
    "cispo_log_bounds",
    "token_coefficients",
    "token_coefficients_nb",
    "token_coefficients_numba",
    "token_coefficients_torch",
    "policy_loss",
]
