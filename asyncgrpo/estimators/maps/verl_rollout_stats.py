"""verl's ``rollout_corr/*`` statistics (verl 0.9.1 ``compute_is_metrics``, ``compute_rs_metrics``,
``compute_offpolicy_metrics``), by verl's names and definitions, for
:class:`~asyncgrpo.estimators.maps.verl_rollout_config.RolloutCorrection` (PyTorch, float64 or wider).

Means over tokens are over the real tokens (``n_tok``); per-row means divide by ``T_i`` and count an empty row as 0
(verl's ``masked_mean`` adds 1e-8 to an integer count, which float32 drops); "seq" statistics of the IS weights run
over all ``N`` rows, those of a rejection statistic over the rows with a real token. verl's ESS alone keeps its
``+1e-8`` (added to a float mean, where it does not vanish): ``1/mean_tok((w/(w̄ + 1e-8))²)`` of ``w`` clamped to
``[0, C]``. Sample standard deviations (``std``) divide by ``n − 1`` as ``torch.std``.
"""
from __future__ import annotations

from asyncgrpo.estimators.maps.verl_rollout_corr import SAFETY_BOUND


def _tok_mean(x, m):
    import torch

    return torch.where(m, x, torch.zeros_like(x)).sum() / m.sum()


def _row_mean(x, m):
    import torch

    return torch.where(m, x, torch.zeros_like(x)).sum(dim=1) / m.sum(dim=1).clamp(min=1)


def _std_clamped(x, m, lo, hi):
    """verl's ``std`` of a statistic clamped to ``[lo, hi]``: ``sqrt(max(E x² − (E x)², 0))`` over tokens, 0 if ≤ 1."""
    import torch

    if int(m.sum()) <= 1:
        return 0.0
    c = x.clamp(min=lo, max=hi)
    var = _tok_mean(c * c, m) - _tok_mean(c, m) ** 2
    return float(torch.sqrt(var.clamp(min=0.0)))


def is_stats(w, raw, log_stat, mask, level: str, upper: float, lower: float | None) -> dict[str, float]:
    """``rollout_is_*`` of verl's IS weights ``w`` (before batch normalisation), ``raw = exp(clamp(log_stat, ±20))``
    on the mask, ``log_stat`` the token log-ratios or the row sums ``[N, 1]`` (``level``), bounds ``upper``/``lower``
    (``lower`` None: TIS, its statistics use ``1/upper``)."""
    import torch

    m = mask.to(torch.bool)
    lo = 1.0 / upper if lower is None else lower
    out: dict[str, float] = {"rollout_is_mean": float(_tok_mean(w, m))}
    if level == "sequence":
        out["rollout_is_max"] = float(torch.exp(log_stat.max().clamp(max=SAFETY_BOUND)))
        out["rollout_is_min"] = float(torch.exp(log_stat.min()))
    else:
        out["rollout_is_max"] = float(w[m].max())
        out["rollout_is_min"] = float(w[m].min())
    out["rollout_is_std"] = _std_clamped(w, m, 0.0, upper)
    wc = w.clamp(min=0.0, max=upper)
    wn = wc / (_tok_mean(wc, m) + 1e-8)
    out["rollout_is_eff_sample_size"] = 1.0 / float(_tok_mean(wn * wn, m))
    seq = _row_mean(w, m)
    out.update({"rollout_is_seq_mean": float(seq.mean()),
                "rollout_is_seq_std": float(seq.std()) if seq.numel() > 1 else 0.0,
                "rollout_is_seq_max": float(seq.max()), "rollout_is_seq_min": float(seq.min()),
                "rollout_is_seq_max_deviation": float((seq - 1.0).abs().max())})
    raw_seq = _row_mean(raw, m)
    out["rollout_is_seq_fraction_high"] = float((raw_seq > upper).double().mean())
    out["rollout_is_seq_fraction_low"] = float((raw_seq < lo).double().mean())
    if lower is not None:
        out["rollout_is_oob_ratio"] = float(_tok_mean(((raw < lower) | (raw > upper)).double(), m))
    return out


def rs_stats(option: str, stat, mask, upper: float, lower: float | None) -> dict[str, float]:
    """``rollout_rs_<option>_*`` of one rejection criterion: ``stat`` ``[N, T]`` (token options) or ``[N, 1]`` (per
    row), the bounds as verl compares them (``log`` ratio bounds for ``k1``, ``lower`` None for ``k2``/``k3``)."""
    import torch

    m = mask.to(torch.bool)
    p = f"rollout_rs_{option}"
    per_row = stat.shape[1] == 1
    rows = m.any(dim=1)
    tok = stat.expand_as(m)
    seq = (stat[:, 0] if per_row else _row_mean(stat, m))[rows]
    lo = 0.0 if lower is None else lower
    out = {f"{p}_mean": float(_tok_mean(tok, m))}
    if per_row and seq.numel():
        hi_frac = float((seq > upper).double().mean())
        lo_frac = float((seq < lower).double().mean()) if lower is not None else 0.0
        out.update({f"{p}_max": float(seq.max()), f"{p}_min": float(seq.min())})
    else:
        hi_frac = float(_tok_mean((tok > upper).double(), m))
        lo_frac = float(_tok_mean((tok < lower).double(), m)) if lower is not None else 0.0
        out.update({f"{p}_max": float(tok[m].max()), f"{p}_min": float(tok[m].min())})
    out.update({f"{p}_fraction_high": hi_frac, f"{p}_fraction_low": lo_frac,
                f"{p}_std": _std_clamped(tok, m, lo, upper)})
    if seq.numel():
        out.update({f"{p}_seq_mean": float(seq.mean()), f"{p}_seq_std": float(seq.std()) if seq.numel() > 1 else 0.0,
                    f"{p}_seq_max": float(seq.max()), f"{p}_seq_min": float(seq.min()),
                    f"{p}_seq_max_deviation": float(seq.abs().max()),
                    f"{p}_seq_fraction_high": float((seq > upper).double().mean())})
        if lower is not None:
            out[f"{p}_seq_fraction_low"] = float((seq < lower).double().mean())
    return out


def offpolicy_stats(train_logp, rollout_logp, mask) -> dict[str, float]:
    """verl's ``compute_offpolicy_metrics``: perplexities, ``kl``/``k3_kl`` and ``χ²`` of the training policy
    ``train_logp`` against the rollout ``rollout_logp`` (token ``χ²`` of ``exp(clamp(ℓ, ±20))``, sequence ``χ²`` of
    ``exp(2·clamp(ℓ_i, ±20))``)."""
    import torch

    m = mask.to(torch.bool)
    z = torch.zeros_like(train_logp)
    tr, ro = torch.where(m, train_logp, z), torch.where(m, rollout_logp, z)
    lr = tr - ro
    mt, mr = _row_mean(tr, m), _row_mean(ro, m)
    diff = mr - mt
    c = lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {"training_ppl": float(torch.exp(-mt).mean()), "training_log_ppl": float((-mt).mean()),
            "kl": float(_tok_mean(ro - tr, m)), "k3_kl": float(_tok_mean(torch.exp(lr) - lr - 1, m)),
            "rollout_ppl": float(torch.exp(-mr).mean()), "rollout_log_ppl": float((-mr).mean()),
            "log_ppl_diff": float(diff.mean()), "log_ppl_abs_diff": float(diff.abs().mean()),
            "log_ppl_diff_max": float(diff.max()), "log_ppl_diff_min": float(diff.min()),
            "ppl_ratio": float(torch.exp(diff).mean()),
            "chi2_token": float(_tok_mean(torch.exp(c) ** 2, m) - 1.0),
            "chi2_seq": float(torch.exp(2.0 * lr.sum(dim=1).clamp(-SAFETY_BOUND, SAFETY_BOUND)).mean() - 1.0)}


__all__ = ["is_stats", "rs_stats", "offpolicy_stats"]
