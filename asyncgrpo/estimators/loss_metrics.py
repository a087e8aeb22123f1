"""Per-batch metrics of :func:`asyncgrpo.estimators.token_level.policy_loss`, with verl/TRL names (docs/losses.md).

Notation of docs/THEORY.md §1–§2: ``ℓ_{i,t}`` token log-ratios, ``r_{i,t} = exp ℓ_{i,t}``, ``ℓ_i = Σ_t ℓ_{i,t}``,
``ρ_i = exp ℓ_i``, ``T_i`` real tokens of row ``i``, ``n_tok = Σ T_i``; means over "tokens" run over real
tokens, over "rows" over rows with ``T_i > 0``. Everything is computed in float64 and in log space where
a ratio could overflow (``|ℓ| ≤ 1e4`` gives finite or ``inf`` values, never NaN).

=========================  ==========================================================================
key                        definition
=========================  ==========================================================================
``pg_loss``                objective value the peers log, ``Σ ν ℓoss_{i,t}`` with ``ℓoss`` = PPO's
                           ``max(−A r, −A clip(r))`` (and ``min(·, −A c)`` for ``A<0`` with the dual
                           clip) for grpo/gspo (``s_i`` in place of ``r``), ``−sg(clamp r) A log π`` for
                           cispo, ``−A r·keep`` for m2po, ``−A w_i log π`` for the trajectory maps; for the
                           peers' corrections (verl_*, trl_seq_mask) the peer's logged value in decoupled
                           mode at ``π_old = π_θ`` (PPO ratio 1): ``−A k`` (``k = w_i``, a token weight or mask)
``surrogate_loss``         value of the returned loss ``−Σ ν A sg(k) log π`` (its gradient is ``−ĝ``)
``clipfrac``               share of real tokens with ``A ≠ 0`` whose weight is cut (grpo/gspo: the PPO
                           clip binds, dual clip not included, as verl and TRL count it; cispo: clamped;
                           m2po: masked; trajectory maps: ``w_i < ρ_i``)
``clipfrac_low/high``      the same split by side (grpo/gspo: ``A<0, r<1−ε_low`` / ``A>0, r>1+ε_high``;
                           cispo: below ``lo`` / above ``hi``)
``clipfrac_dual``          share of real tokens with ``A<0`` and ratio ``> c`` (0 without dual clip)
``clipfrac_seq_*``         gspo: the same as shares of all ``N`` rows, empty rows (never clipped) included
                           (TRL's sequence-level convention)
``clipfrac_low_min``,      TRL's ``clip_ratio/low_min``, ``high_max``: min / max over rows with a real token of the
``clipfrac_high_max``      row's low / high share (``clipfrac_seq_low_min``/``_high_max``: of the rows' 0/1 values)
``clipfrac_high_pos``      cispo: ``A>0`` and clamped above (TRL's ``cispo_clip_ratio``)
``clamp_frac_all``         cispo: clamped on either side, any ``A`` (verl's cispo ``pg_clipfrac``)
``m2po_masked_frac``       m2po: share of real tokens dropped by the second-moment mask
``ppo_kl``                 ``mean_tokens(−ℓ)``: k1 estimate of ``KL(μ‖π_θ)`` (verl's gspo/REINFORCE ``actor/ppo_kl``)
``kl_k3``                  ``mean_tokens(r − 1 − ℓ)``: k3 estimate of ``KL(μ‖π_θ)`` (verl ``k3_kl``)
``chi2_seq``               ``(1/N) Σ_i ρ_i² − 1`` over **all** ``N`` rows, an empty row with ``ρ_i = 1``
                           (unclamped; verl's ``rollout_corr/chi2_seq`` is ``chi2_seq_verl``)
``chi2_seq_centered``      ``mean_rows (ρ_i − 1)²`` over real rows, the project's ``chi2``; both estimate
                           ``χ²(π_θ‖μ) = E_μ ρ² − 1 = E_μ (ρ−1)²``
``chi2_token``             ``mean_tokens r² − 1`` (unclamped; the toolkit's own)
``*_verl``                 ``ppo_kl_verl``, ``chi2_token_verl``, ``chi2_seq_verl``: the same with ``ℓ`` (token, or
                           ``ℓ_i`` for ``chi2_seq``) clamped to ``±20`` as verl does: the values under verl's names
``ess_batch_rho``          ``(mean_tokens ρ)² / mean_tokens ρ²`` with ``ρ_i`` on each of its tokens, unclamped:
                           a batch-wide token-weighted ESS fraction in ``(0, 1]`` (verl's formula, without its clamp)
``ess_batch_w``            the same for the estimator's weights ``k_{i,t}`` (``w_i`` or token weights),
                           unclamped (the toolkit's own metric; no peer logs it)
``ess_verl_seq``           verl's ``rollout_is_eff_sample_size`` at ``rollout_is="sequence"``,
                           ``rollout_is_threshold = 1+ε``: the same ESS of ``clamp(ρ_i, 1/(1+ε), 1+ε)``
``ess_verl_token``         the same at ``rollout_is="token"``: ``clamp(r_{i,t}, 1/(1+ε), 1+ε)``
``ess_group_rho``          mean over groups of ``ESS(ρ)/G`` (the project's per-group ESS)
``ess_group_w``            the same for ``w`` (trajectory maps only)
``is_frac_high/low``       verl_seq_tis/verl_seq_rs/verl_tok_tis: verl's ``rollout_is_ratio_fraction_high/low``,
                           before truncation: rows ``ℓ_i > log C`` / ``< −log C`` over all rows (sequence), or
                           real tokens with ``exp(clamp(ℓ, ±20)) > C`` / ``< 1/C`` (token)
``rs_masked_frac``         verl_seq_rs/verl_geo_rs: rejected share of real tokens (verl ``rollout_rs_masked_fraction``)
``rs_seq_masked_frac``     the share of all rows with a rejected token (verl ``rollout_rs_seq_masked_fraction``)
=========================  ==========================================================================

:data:`PEER_NAMES` and :func:`to_peer` rename these so a toolkit curve can be overlaid on a verl or TRL one.
"""
from __future__ import annotations

import math

import numpy as np

#: toolkit key → peer key, per peer; method-specific entries in :func:`peer_names`.
PEER_NAMES: dict[str, dict[str, str]] = {
    "verl": {
        "pg_loss": "actor/pg_loss",
        "clipfrac": "actor/pg_clipfrac",
        "clipfrac_dual": "actor/pg_clipfrac_lower",
        "ppo_kl_verl": "actor/ppo_kl",
        "kl_k3": "rollout_corr/k3_kl",
        "chi2_seq_verl": "rollout_corr/chi2_seq",
        "chi2_token_verl": "rollout_corr/chi2_token",
        "rollout_is_ess": "rollout_corr/rollout_is_eff_sample_size",
        # the verl_* rollout-correction maps (registry): their own IS / rejection statistics
        "is_frac_high": "rollout_corr/rollout_is_ratio_fraction_high",
        "is_frac_low": "rollout_corr/rollout_is_ratio_fraction_low",
        "rs_masked_frac": "rollout_corr/rollout_rs_masked_fraction",
        "rs_seq_masked_frac": "rollout_corr/rollout_rs_seq_masked_fraction",
    },
    "trl": {
        "pg_loss": "loss",
        "clipfrac_low": "clip_ratio/low_mean",
        "clipfrac_high": "clip_ratio/high_mean",
        "clipfrac": "clip_ratio/region_mean",
        "clipfrac_low_min": "clip_ratio/low_min",
        "clipfrac_high_max": "clip_ratio/high_max",
    },
}


def peer_names(name: str, peer: str) -> dict[str, str]:
    """toolkit key → ``peer`` key (``"verl"`` or ``"trl"``) for estimator ``name``.

    Method-specific: verl's cispo ``pg_clipfrac`` counts ``A = 0`` tokens (``clamp_frac_all``) and
    always logs ``pg_clipfrac_lower = 0`` for cispo/gspo; TRL's cispo logs only ``cispo_clip_ratio``
    (``clipfrac_high_pos``) and its sequence-level (gspo) clip ratios are shares of rows.
    """
    from asyncgrpo.estimators import registry

    if peer not in PEER_NAMES:
        raise ValueError(f"peer must be one of {', '.join(PEER_NAMES)}, got {peer!r}")
    out = dict(PEER_NAMES[peer])
    known = name in registry.names("token") or name in registry.names("trajectory")
    if known and registry.entry(name).correction:
        # a peer correction runs beside the PPO ratio π_θ/π_old, whose statistics the peer logs under its actor
        # names: the *_prox keys (0 at π_old = π_θ); the map's own k1 / cut share stay under the toolkit's keys
        for key, prox in (("clipfrac", "clipfrac_prox"), ("ppo_kl_verl", "ppo_kl_prox"), ("clipfrac_dual", "clipfrac_prox_dual"),
                          ("clipfrac_low", "clipfrac_prox_low"), ("clipfrac_high", "clipfrac_prox_high"),
                          ("clipfrac_low_min", "clipfrac_prox_low_min"), ("clipfrac_high_max", "clipfrac_prox_high_max")):
            if key in out:
                out[prox] = out.pop(key)
    if peer == "trl" and name == "sapo":  # TRL's sapo has no clip: it logs no clip_ratio/*
        for key in ("clipfrac_low", "clipfrac_high", "clipfrac", "clipfrac_low_min", "clipfrac_high_max"):
            out.pop(key)
    if peer == "verl" and name == "gpg":  # verl's compute_policy_loss_gpg logs no metric of its own
        for key in ("clipfrac", "ppo_kl_verl", "clipfrac_dual"):
            out.pop(key, None)
    if peer == "verl" and (name == "gspo" or (known and registry.entry(name).level == "trajectory"
                                              and not registry.entry(name).correction)):
        # verl's gspo and REINFORCE losses log the unclamped k1; its PPO, cispo and sapo losses clamp at ±20
        out["ppo_kl"] = out.pop("ppo_kl_verl")
    if peer == "verl" and name == "cispo":
        out.pop("clipfrac")
        out["clamp_frac_all"] = "actor/pg_clipfrac"
    if peer == "trl" and name == "cispo":
        for key in ("clipfrac_low", "clipfrac_high", "clipfrac", "clipfrac_low_min", "clipfrac_high_max"):
            out.pop(key)
        out["clipfrac_high_pos"] = "cispo_clip_ratio"
    if peer == "trl" and name in ("gspo", "luspo"):
        for side, ext in (("low", "min"), ("high", "max")):
            out.pop(f"clipfrac_{side}")
            out[f"clipfrac_seq_{side}"] = f"clip_ratio/{side}_mean"
            out.pop(f"clipfrac_{side}_{ext}")
            out[f"clipfrac_seq_{side}_{ext}"] = f"clip_ratio/{side}_{ext}"
        out.pop("clipfrac")
        out["clipfrac_seq"] = "clip_ratio/region_mean"
    return out


def to_peer(metrics: dict, name: str, peer: str) -> dict:
    """The entries of ``metrics`` that ``peer`` logs, under the peer's names (see :func:`peer_names`)."""
    return {v: metrics[k] for k, v in peer_names(name, peer).items() if k in metrics}


def to_logged(metrics: dict, name: str, peer: str) -> dict:
    """:func:`to_peer` plus every other numeric entry under ``asyncgrpo/<key>``: a peer's name only ever carries
    the peer's value; the toolkit's own statistics keep a name of their own."""
    named = peer_names(name, peer)
    own = {f"asyncgrpo/{k}": v for k, v in metrics.items() if k not in named and isinstance(v, (int, float))}
    return {**own, **to_peer(metrics, name, peer)}


def _frac(x, mask, denom):
    return float((x & mask).sum()) / denom


def _log_mean_exp(x):
    import torch

    return float(torch.logsumexp(x, dim=0) - math.log(x.numel()))


def _expm1(x: float) -> float:
    """``exp(x) − 1`` as a float, ``inf`` past float64's range (``math.expm1`` raises OverflowError there)."""
    return math.inf if x > _LOG_MAX else math.expm1(x)


#: largest ``x`` with ``exp(x)`` finite in float64 (``log(2^1024)`` rounded down)
_LOG_MAX = math.log(np.finfo(np.float64).max)


def _ess_fraction(logw):
    """``(mean w)²/mean w²`` from ``log w`` (1-D, ``-inf`` = zero weight); 0 if every weight is 0."""
    import torch

    m = logw.max()
    if not bool(torch.isfinite(m)):
        return 0.0
    u = torch.exp(logw - m)
    return float(u.mean() ** 2 / (u * u).mean())


def clamped_ess(log_ratio, mask, threshold: float, level: str = "sequence") -> float:
    """verl's ``rollout_is_eff_sample_size``: ``(mean c)²/mean c²`` over real tokens, ``c = clamp(r, 1/thr, thr)``.

    ``r = exp(ℓ_i)`` on every token of row ``i`` (``level="sequence"``, ``ℓ_i = Σ_t ℓ_{i,t}``) or
    ``r = exp(ℓ_{i,t})`` (``level="token"``); ``log_ratio`` and ``mask`` are ``[N, T]`` tensors, ``thr > 1``.
    The clamp is applied to ``ℓ`` in log space, so it is exact for any ``|ℓ|`` (verl's ±20 safety clamp of
    ``ℓ`` acts outside ``[−log thr, log thr]`` and changes nothing); verl also adds 1e-8 to the mean
    (relative effect ≤ 2e-8·thr), this does not. Rows without a real token carry no weight; a ``mask`` without
    any real token raises ``ValueError``.
    """
    import torch

    thr = float(threshold)
    if not (math.isfinite(thr) and thr > 1.0):
        raise ValueError(f"threshold must be a finite number > 1 (verl's rollout_is_threshold), got {threshold!r}")
    if level not in ("sequence", "token"):
        raise ValueError(f"level must be 'sequence' or 'token' (verl's rollout_is), got {level!r}")
    mask = mask.to(torch.bool)
    if not bool(mask.any()):
        raise ValueError("mask has no real token: the ESS of an empty batch is undefined")
    ell = torch.where(mask, log_ratio.to(torch.float64), torch.zeros((), dtype=torch.float64, device=mask.device))
    if level == "sequence":
        ell = ell.sum(dim=1, keepdim=True).expand_as(ell)
    lt = math.log(thr)
    return _ess_fraction(torch.clamp(ell[mask], -lt, lt))


def verl_is_ess(log_ratio, mask, threshold: float, level: str) -> float:
    """verl 0.9.1's ``rollout_is_eff_sample_size`` of its truncated IS weights: ``(mean c)²/mean c²`` over real
    tokens, ``c = min(exp(clamp(ℓ, ±20)), thr)`` (no lower clamp), ``ℓ = ℓ_{i,t}`` (``level="token"``) or
    ``ℓ_i = Σ_t ℓ_{i,t}`` on each token of row ``i`` (``"sequence"``); in log space, without verl's +1e-8."""
    import torch

    if not bool(mask.any()):
        raise ValueError("mask has no real token: the ESS of an empty batch is undefined")
    ell = torch.where(mask, log_ratio.to(torch.float64), torch.zeros((), dtype=torch.float64, device=mask.device))
    if level == "sequence":
        ell = ell.sum(dim=1, keepdim=True).expand_as(ell)
    return _ess_fraction(torch.clamp(ell[mask], -20.0, min(20.0, math.log(float(threshold)))))


def loss_metrics(name, tok_ell, mask, adv, k, nu, *, logp_new, w=None, group_size, eps=0.2, eps_low=0.2,
                 eps_high=0.28, tau_m2=0.04, clip_ratio_c=None, cispo_clamp="upper") -> dict:
    """Metrics of one batch (module table); inputs as prepared by ``policy_loss`` (validated there).

    ``tok_ell`` ``[N, T]`` (0 off-mask), ``mask`` bool, ``adv`` ``[N]``, ``k`` the stop-gradient weights
    ``k_{i,t}``, ``nu`` the normaliser ``ν_{i,t}``, ``logp_new`` detached, ``w`` ``[N]`` trajectory weights
    (``None`` for token-level names).
    """
    import torch

    from asyncgrpo.estimators import registry, torch_backend
    from asyncgrpo.estimators.clip_bounds import cispo_log_bounds

    f64 = torch.float64
    if tok_ell.device.type == "mps":  # no float64 there; metrics are cheap on the CPU
        tok_ell, mask, adv, k, nu, logp_new = (x.cpu() for x in (tok_ell, mask, adv, k, nu, logp_new))
        w = None if w is None else w.cpu()
    ell_t = tok_ell.to(f64)
    A = adv.to(f64)[:, None]
    nu = nu.to(f64)
    logp = logp_new.to(f64)
    mask = mask.to(torch.bool)
    rows = mask.any(dim=1)
    N, T = mask.shape
    n_tok = float(mask.sum())
    T_i = mask.sum(dim=1, keepdim=True).to(f64).clamp(min=1.0)
    nz = (A != 0).expand_as(mask)
    pos, neg = (A > 0).expand_as(mask), (A < 0).expand_as(mask)
    zero = torch.zeros((), dtype=f64, device=mask.device)
    ninf = torch.full((), -math.inf, dtype=f64, device=mask.device)
    out: dict = {}
    traj_logw = None  # log w_i of a trajectory-level map, for pg_loss's log-space sum
    hi, lo = math.log1p(eps_high), math.log1p(-eps_low)
    log_c = math.inf if clip_ratio_c is None else math.log(float(clip_ratio_c))

    def neg_adv_times(x):
        # −A·x with 0 where A = 0, so that an overflowed ratio never gives 0·inf = NaN
        return torch.where(A.expand_as(x) == 0, zero, -A * x)

    if name in ("grpo", "gspo", "luspo"):
        lr = ell_t if name == "grpo" else (ell_t.sum(dim=1, keepdim=True) / T_i).expand_as(ell_t)
        with torch.no_grad():
            r = torch.exp(lr)
            l1 = neg_adv_times(r)
            l2 = neg_adv_times(torch.clamp(r, 1 - eps_low, 1 + eps_high))
            lm = torch.maximum(l1, l2)
            if clip_ratio_c is not None:
                lm = torch.where(neg, torch.minimum(lm, neg_adv_times(torch.full_like(r, float(clip_ratio_c)))), lm)
        high, low, dual = pos & (lr > hi), neg & (lr < lo), neg & (lr > log_c)
        out["clipfrac_high"] = _frac(high, mask, n_tok)
        out["clipfrac_low"] = _frac(low, mask, n_tok)
        out["clipfrac"] = _frac(high | low, mask, n_tok)
        out["clipfrac_dual"] = _frac(dual, mask, n_tok)
        if name != "grpo":
            # over all N rows, as TRL divides (an empty row has ratio exp(0) = 1: counted, never clipped)
            for key, x in (("clipfrac_seq_high", high), ("clipfrac_seq_low", low), ("clipfrac_seq", high | low)):
                out[key] = float((x[:, 0] & rows).sum()) / N
            # TRL's clip_ratio/low_min, high_max at sequence level: the min / max over all N row values
            out["clipfrac_seq_low_min"] = float((low[:, 0] & rows).to(f64).min())
            out["clipfrac_seq_high_max"] = float((high[:, 0] & rows).to(f64).max())
        # TRL's clip_ratio/low_min, high_max at token level: min / max over the rows with a real token of the row's
        # share (TRL's nanmin/nanmax skip the empty rows' 0/0)
        share = lambda x: ((x & mask).sum(dim=1).to(f64) / T_i[:, 0])[rows]  # noqa: E731
        out["clipfrac_low_min"] = float(share(low).min())
        out["clipfrac_high_max"] = float(share(high).max())
        loss_mat = lm
        logk = torch.where(k > 0, lr, ninf)
        if name == "luspo":  # TRL sums the row's loss over its tokens: k = T_i·s_i
            loss_mat = loss_mat * T_i
            logk = logk + torch.log(T_i)
    elif name == "cispo":
        clo, chi = cispo_log_bounds(cispo_clamp, eps_low, eps_high)
        above, below = ell_t > chi, ell_t < clo
        out["clipfrac_high"] = _frac(above & nz, mask, n_tok)
        out["clipfrac_low"] = _frac(below & nz, mask, n_tok)
        out["clipfrac"] = _frac((above | below) & nz, mask, n_tok)
        out["clipfrac_dual"] = 0.0
        out["clipfrac_high_pos"] = _frac(above & pos, mask, n_tok)
        out["clamp_frac_all"] = _frac(above | below, mask, n_tok)
        loss_mat = neg_adv_times(k.to(f64)) * logp
        logk = torch.clamp(ell_t, min=clo, max=chi)
    elif name == "m2po":
        dropped = mask & ~(k > 0)
        out["m2po_masked_frac"] = _frac(dropped, mask, n_tok)
        out["clipfrac"] = _frac(dropped & nz, mask, n_tok)
        loss_mat = neg_adv_times(torch.where(dropped, zero, torch.exp(ell_t)))
        logk = torch.where(dropped, ninf, ell_t)
    elif registry.entry(name).level == "token":
        # any other registered token-level map (the peers' corrections): the clip fraction counts real tokens
        # with A ≠ 0 whose k fell below its reference (the token ratio, or 1 for a mask)
        spec = registry.entry(name)
        kk = k.to(f64)
        logk = torch.where(kk > 0, torch.log(kk), ninf)
        ref = torch.zeros_like(ell_t) if spec.clip_ratio == "unit" else ell_t
        # a map with no clip (clip_ratio "none") reports 0, as verl logs for sapo
        out["clipfrac"] = _frac((logk < ref) & nz, mask, n_tok) if spec.clip_ratio != "none" else 0.0
        if spec.clip_ratio == "none":  # no dual clip either: verl's sapo logs pg_clipfrac_lower = 0
            out["clipfrac_dual"] = 0.0
        if spec.objective is not None:
            loss_mat = spec.objective(ell_t, mask, A[:, 0], logp)
        elif spec.correction:  # the peer's logged objective in decoupled mode at π_old = π_θ (PPO ratio 1)
            loss_mat = neg_adv_times(kk)
        else:
            loss_mat = neg_adv_times(kk) * logp
    else:
        G = group_size
        ell = ell_t.sum(dim=1)
        rmask = rows.reshape(N // G, G)
        logw = torch.full((N // G, G), -math.inf, dtype=f64, device=mask.device)
        live = rmask.any(dim=1)
        if bool(live.any()):
            logw[live] = torch_backend.log_weights(name, ell.reshape(N // G, G)[live], eps, rmask[live],
                                                   ell_t.reshape(N // G, G, -1)[live], mask.reshape(N // G, G, -1)[live])
        logw = logw.reshape(N)
        cut = (logw < ell) & rows
        out["clipfrac"] = _frac(cut[:, None].expand_as(mask) & nz, mask, n_tok)
        loss_mat = neg_adv_times(w.to(f64)[:, None].expand_as(logp))
        if not registry.entry(name).correction:  # a peer correction's objective is −A·w at π_old = π_θ, the toolkit's −A·w·log π
            loss_mat = loss_mat * logp
        logk = logw[:, None].expand_as(ell_t)
        out["ess_group_w"] = _group_ess(logw, rows, G)
        traj_logw = logk  # pg_loss's terms in log space, should a w_i have overflowed (is)

    extra = registry.entry(name).metrics
    if extra is not None:
        out.update(extra(ell_t, mask, A[:, 0], rows))
    out["pg_loss"] = float(torch.where(mask, nu * loss_mat, zero).sum())
    if not math.isfinite(out["pg_loss"]) and traj_logw is not None:
        from asyncgrpo.functionals import signed_exp_sum
        # the same terms ν·(−A w_i [log π]) as (log|·|, sign) from log w_i, summed by sign: never inf − inf
        log_abs = torch.log(nu) + torch.log(A.abs()) + traj_logw
        sign = -torch.sign(A).expand_as(logp)
        if not registry.entry(name).correction:
            log_abs, sign = log_abs + torch.log(logp.abs()), sign * torch.sign(logp)
        sign = torch.where(torch.isnan(log_abs), zero, sign)
        out["pg_loss"] = signed_exp_sum(log_abs[mask].cpu().numpy(), sign[mask].cpu().numpy())
    # KL and χ² between π_θ and μ from the ratios alone (method-independent)
    lt = ell_t[mask]
    out["ppo_kl"] = float((-lt).mean())
    lt20 = lt.clamp(-20.0, 20.0)  # verl's SAFETY_BOUND: the values logged under verl's names
    out["ppo_kl_verl"] = float((-lt20).mean())
    out["kl_k3"] = float((torch.expm1(lt) - lt).mean())
    out["chi2_token"] = _expm1(_log_mean_exp(2 * lt))
    out["chi2_token_verl"] = _expm1(_log_mean_exp(2 * lt20))
    ell_all = ell_t.sum(dim=1)
    # verl averages ρ_i² over every row, an empty row with ρ = exp(0) = 1; the project's own χ² keeps
    # the real rows only (an empty row is an absent trajectory)
    out["chi2_seq"] = _expm1(_log_mean_exp(2 * ell_all))
    out["chi2_seq_verl"] = _expm1(_log_mean_exp(2 * ell_all.clamp(-20.0, 20.0)))
    ell_rows = ell_all[rows]
    out["chi2_seq_centered"] = float(torch.expm1(ell_rows).pow(2).mean())
    out["ess_batch_rho"] = _ess_fraction(ell_t.sum(dim=1, keepdim=True).expand_as(ell_t)[mask])
    out["ess_batch_w"] = _ess_fraction(logk[mask])
    # verl's ESS clamps the ratios to [1/thr, thr] first (up to 0.51 away from the unclamped ESS);
    # thr = 1+ε makes verl's sequence-level truncated IS the toolkit's tis
    out["ess_verl_seq"] = clamped_ess(ell_t, mask, 1.0 + float(eps), "sequence")
    out["ess_verl_token"] = clamped_ess(ell_t, mask, 1.0 + float(eps), "token")
    out["ess_group_rho"] = _group_ess(ell_t.sum(dim=1), rows, group_size)
    spec = registry.entry(name)
    if (spec.defaults or {}).get("rollout_is"):  # verl's IS level and threshold of this correction
        out["rollout_is_ess"] = verl_is_ess(ell_t, mask, spec.defaults["rollout_is_threshold"],
                                            spec.defaults["rollout_is"])
    if spec.correction:
        # the PPO ratio π_θ/π_old beside the correction: policy_loss takes no π_old, i.e. π_old = π_θ (one
        # step per batch, decoupled), so its log-ratio is logp − sg(logp) = 0 and nothing is clipped
        lp = logp - logp.detach()
        out["ppo_kl_prox"] = float((-lp[mask]).mean())
        out["clipfrac_prox_high"] = _frac(pos & (lp > hi), mask, n_tok)
        out["clipfrac_prox_low"] = _frac(neg & (lp < lo), mask, n_tok)
        out["clipfrac_prox"] = _frac((pos & (lp > hi)) | (neg & (lp < lo)), mask, n_tok)
        prox_share = lambda x: ((x & mask).sum(dim=1).to(f64) / T_i[:, 0])[rows]  # noqa: E731
        out["clipfrac_prox_low_min"] = float(prox_share(neg & (lp < lo)).min())
        out["clipfrac_prox_high_max"] = float(prox_share(pos & (lp > hi)).max())
        out["clipfrac_prox_dual"] = _frac(neg & (lp > math.log(3.0)), mask, n_tok)  # verl's dual clip, c = 3
    return out


def _group_ess(logw, rows, G):
    """Mean over groups (with a real row) of ``ESS/G_real`` from ``log w`` ``[N]``; rows without tokens skipped."""
    vals = []
    for g in range(logw.numel() // G):
        sel = rows[g * G:(g + 1) * G]
        if bool(sel.any()):
            vals.append(_ess_fraction(logw[g * G:(g + 1) * G][sel]))
    return float(sum(vals) / len(vals))


__all__ = ["PEER_NAMES", "peer_names", "to_peer", "to_logged", "loss_metrics", "clamped_ess", "verl_is_ess"]
