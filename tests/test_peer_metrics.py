"""Metric parity beyond the formulas of tests/test_loss_parity.py (issue 28, items 1–3).

Overflow: every metric of ``policy_loss(..., return_metrics=True)`` is a float, finite or ``+inf``,
for log-ratios up to ``|ℓ| = 1e4`` (docs/losses.md §6) — never an exception, never NaN.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo.estimators import loss_metrics as lm
from asyncgrpo.estimators import token_level as tl

ALL = ("grpo", "gspo", "cispo", "m2po", "onpolicy", "tis", "tic", "gmc", "snis", "is")
#: metrics that are ratio moments: they may overflow to +inf, never to NaN or -inf
MOMENTS = ("chi2_seq", "chi2_token", "chi2_seq_centered", "kl_k3")


def _extreme_batch(seq_ell, dtype, both_signs=False):
    """4 rows × 5 tokens; row 0 carries the sequence log-ratio ``seq_ell`` (ℓ_{0,t} = seq_ell/5), A of both signs.

    ``both_signs``: row 1 (A > 0) carries ``seq_ell`` too, so that unbounded weights meet as ``inf − inf``.
    """
    N, T = 4, 5
    old = torch.full((N, T), -2.0, dtype=dtype)
    ell = torch.zeros(N, T, dtype=dtype)
    ell[0] = seq_ell / T
    ell[1] = seq_ell / T if both_signs else 0.1
    adv = torch.tensor([-1.0, 1.0, 0.5, 0.0], dtype=dtype)
    return old, old + ell, adv, torch.ones(N, T, dtype=torch.bool)


@pytest.mark.parametrize("both_signs", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seq_ell", [400.0, 709.0, 710.0, 1e3, 1e4, -1e4])
def test_metrics_overflow_to_inf_never_raise_nor_nan(seq_ell, dtype, both_signs):
    """Sequence ℓ beyond ≈ 355 made ``ρ²`` overflow inside ``math.expm1`` (OverflowError) for every name."""
    old, new, adv, mask = _extreme_batch(seq_ell, dtype, both_signs)
    for name in ALL:
        _, m = tl.policy_loss(name, new.clone().requires_grad_(True), old, adv, mask, group_size=4,
                              return_metrics=True)
        for key, v in m.items():
            if key == "loss_agg_mode":
                continue
            assert isinstance(v, float), (name, key, v)
            assert not math.isnan(v), (name, key)
        for key in MOMENTS:
            assert m[key] > -math.inf, (name, key)
        if seq_ell > 0:
            # exp(2·400) overflows float64: the sequence χ² is +inf, not a large finite number
            assert m["chi2_seq"] == math.inf and m["chi2_seq_centered"] == math.inf, name
        else:
            # ρ_0 = 0 (exp(−1e4) underflows), ρ_1 = e^{0.5} (or 0), ρ_2 = ρ_3 = 1: mean ρ² − 1
            want = (0.0 if both_signs else math.e) / 4 + 2 / 4 - 1
            assert m["chi2_seq"] == pytest.approx(want, rel=1e-6), name


def test_plain_is_objective_is_summed_by_sign_when_overflowed_rows_disagree_in_sign():
    """docs/losses.md §6: plain ``is``'s weights overflow; its ``pg_loss`` is summed by sign in log space, so two
    overflowed rows of opposite advantage (row 0: A = −1, row 1: A = +1, equal ρ) cancel to float64 precision
    relative to their size (0.0), where the direct sum was ``inf − inf = NaN``; one alone is ``+inf``. The returned
    loss stays ``+inf`` (a coefficient overflowed the dtype), whatever the signs."""
    for both, want in ((False, math.inf), (True, 0.0)):
        old, new, adv, mask = _extreme_batch(1e4, torch.float64, both)
        loss, m = tl.policy_loss("is", new.clone().requires_grad_(True), old, adv, mask, group_size=4,
                                 return_metrics=True)
        assert m["pg_loss"] == want
        assert float(loss) == math.inf and m["surrogate_loss"] == math.inf


# ----------------------------------------------------------------------------- batches with empty rows and extremes
def peer_batch(seed, *, G=4, extreme=False):
    """``(logp_old, ell, adv, mask)`` float64: ``G·(1..4)`` rows × 1–30 tokens, one or more empty rows.

    ``extreme``: one row's token log-ratios scaled so that its ``|ℓ_i|`` reaches 1e4 (sign drawn).
    """
    rng = np.random.default_rng(seed)
    N = G * int(rng.integers(1, 5))
    T = int(rng.integers(1, 31))
    lengths = rng.integers(1, T + 1, N)
    mask = np.arange(T)[None, :] < lengths[:, None]
    mask &= rng.random((N, T)) > 0.15
    mask[np.arange(N), rng.integers(0, lengths)] = True
    empty = rng.random(N) < 0.25
    empty[int(rng.integers(N))] = True  # at least one empty row ...
    mask[empty] = False
    keep = int(np.flatnonzero(~empty)[0]) if (~empty).any() else 0
    mask[keep, 0] = True  # ... and at least one real token
    ell = np.clip(rng.normal(0, 0.3, (N, T)), -3, 3) * (rng.random((N, T)) < 0.8)
    if extreme:
        i = int(rng.integers(N))
        mask[i, 0] = True
        ell[i] = np.where(mask[i], rng.choice([-1.0, 1.0]) * 1e4 / mask[i].sum(), 0.0)
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.1] = 0.0
    logp_old = rng.normal(-2, 0.7, (N, T))
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    return t(logp_old), t(np.where(mask, ell, 0.0)), t(adv), torch.tensor(mask)


def metrics_of(name, old, ell, adv, mask, **kw):
    lp = (old + ell).clone().requires_grad_(True)
    return tl.policy_loss(name, lp, old, adv, mask, return_metrics=True, **kw)[1]


# ----------------------------------------------------------------------------- verl, from rollout_corr_helper.py
SAFETY_BOUND = 20.0


def verl_is_ess(log_ratio, mask, level, thr):
    """verl ``compute_rollout_correction_weights`` → ``compute_is_metrics``: ``rollout_is_eff_sample_size``."""
    m = mask.double()
    if level == "token":
        w = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    else:
        s = (log_ratio * m).sum(-1, keepdim=True)
        w = torch.exp(torch.clamp(s, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    w = w * m
    c = w.clamp(min=1.0 / thr, max=thr)
    mean = (c * m).sum() / m.sum()
    wn = c / (mean + 1e-8)
    return float(1.0 / ((wn ** 2 * m).sum() / m.sum()))


@pytest.mark.parametrize("eps", [0.2, 1.0])
@pytest.mark.parametrize("name", ["tis", "gmc", "grpo", "cispo"])
def test_ess_logged_for_verl_is_verls_clamped_ess(name, eps):
    """Item 2: verl clamps the ratios to [1/thr, thr] before its ESS; the unclamped ESS differed by up to 0.51.

    ``eps = 1`` is verl's default ``rollout_is_threshold = 2``. Tolerance: verl's +1e-8 in the mean changes
    the ESS by a relative ≤ 2e-8·thr ≤ 4e-8 (rel=1e-7); without it the two agree to 1e-12.
    """
    worst_unclamped = 0.0
    for s in range(8):
        old, ell, adv, mask = peer_batch(s, extreme=s % 2 == 1)
        m = metrics_of(name, old, ell, adv, mask, eps=eps, group_size=4)
        want = verl_is_ess(ell, mask, "sequence", 1 + eps)
        # verl logs rollout_is_eff_sample_size only with its own IS (threshold 2, issue 36): not for these maps
        assert "rollout_corr/rollout_is_eff_sample_size" not in lm.to_peer(m, name, "verl")
        got = m["ess_verl_seq"]
        assert got == pytest.approx(want, rel=1e-7), s
        assert m["ess_verl_token"] == pytest.approx(verl_is_ess(ell, mask, "token", 1 + eps), rel=1e-7), s
        if name == "tis":
            worst_unclamped = max(worst_unclamped, abs(m["ess_batch_w"] - want))
    if name == "tis":
        # the unclamped ESS stays, under its own name, and it is a different number
        assert worst_unclamped > 0.05


def test_clamped_ess_is_exact_without_verls_1e8():
    old, ell, adv, mask = peer_batch(3, extreme=True)
    m = mask.double()
    s = (ell * m).sum(-1, keepdim=True).expand_as(ell)
    c = torch.exp(torch.clamp(s, -math.log(2.0), math.log(2.0)))
    want = float(((c * m).sum() / m.sum()) ** 2 / ((c * c * m).sum() / m.sum()))
    assert lm.clamped_ess(ell, mask, 2.0, "sequence") == pytest.approx(want, rel=1e-12, abs=0)
    with pytest.raises(ValueError, match="threshold"):
        lm.clamped_ess(ell, mask, 1.0)
    with pytest.raises(ValueError, match="level"):
        lm.clamped_ess(ell, mask, 2.0, "group")


# ----------------------------------------------------------------------------- empty rows (item 3)
def verl_chi2_seq(log_ratio, mask):
    """verl ``compute_offpolicy_metrics``: ``exp(2·clamp(Σ_t ℓ, ±20)).mean() − 1`` over **all** rows."""
    s = (log_ratio * mask.double()).sum(-1)
    return float(torch.exp(2.0 * torch.clamp(s, -SAFETY_BOUND, SAFETY_BOUND)).mean() - 1.0)


def trl_sequence_clip_ratios(log_ratio, adv, mask, el, eh):
    """TRL ``GRPOTrainer._compute_loss`` at ``importance_sampling_level="sequence"``: one value per row,
    ``global_masked_mean`` = sum over the ``N`` rows / ``N`` (an empty row has ratio exp(0/1) = 1)."""
    m = mask.double()
    coef = torch.exp(((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None])
    A = adv[:, None]
    low, high = (coef < 1 - el) & (A < 0), (coef > 1 + eh) & (A > 0)
    n = float(coef.shape[0])
    return {"clip_ratio/low_mean": float(low.sum()) / n, "clip_ratio/high_mean": float(high.sum()) / n,
            "clip_ratio/region_mean": float((low | high).sum()) / n}


def test_empty_rows_are_counted_as_the_peers_count_them():
    """Item 3: verl's chi2_seq and TRL's sequence-level clip ratios divide by every row, empty ones included."""
    el, eh = 0.2, 0.28
    seen = 0
    for s in range(8):
        old, ell, adv, mask = peer_batch(s)
        ell = ell * 3  # sequence ratios beyond the clip range on both sides, inside verl's ±20
        seen += int((~mask.any(1)).sum())
        m = metrics_of("gspo", old, ell, adv, mask, eps_low=el, eps_high=eh, loss_agg_mode="grpo")
        assert m["chi2_seq"] == pytest.approx(verl_chi2_seq(ell, mask), rel=1e-12, abs=1e-12), s
        want = trl_sequence_clip_ratios(ell, adv, mask, el, eh)
        got = lm.to_peer(m, "gspo", "trl")
        for key, v in want.items():
            assert got[key] == pytest.approx(v, rel=1e-12, abs=1e-12), (s, key)
    assert seen > 0


def test_one_empty_row_changes_the_peer_metrics_by_its_share():
    """A fixed batch: 4 rows, row 3 empty; ρ_i² of the real rows known, so the expected numbers are exact."""
    ell = torch.zeros(4, 2, dtype=torch.float64)
    ell[0] = 0.5  # ℓ_0 = 1: sequence ratio e^{0.5} > 1.28, A > 0: clipped high
    ell[1, 0] = -0.4  # ℓ_1 = −0.4 on one token: ratio e^{−0.4} < 0.8, A < 0: clipped low
    mask = torch.tensor([[True, True], [True, False], [True, True], [False, False]])
    adv = torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=torch.float64)
    m = metrics_of("gspo", torch.zeros_like(ell), ell, adv, mask)
    assert m["chi2_seq"] == pytest.approx((math.exp(2.0) + math.exp(-0.8) + 1 + 1) / 4 - 1, rel=1e-13)
    assert m["clipfrac_seq"] == 0.5 and m["clipfrac_seq_high"] == 0.25 and m["clipfrac_seq_low"] == 0.25
    # the toolkit's own χ² keeps the real rows only (an empty row is an absent trajectory)
    assert m["chi2_seq_centered"] == pytest.approx((math.expm1(1.0) ** 2 + math.expm1(-0.4) ** 2 + 0) / 3,
                                                   rel=1e-13)


# ----------------------------------------------------------------------------- the parity table of docs/losses.md §8
def masked_mean(x, m):
    return float((x * m).sum() / m.sum())


def measured_parity(seeds=range(12)):
    """``{(peer, peer key, toolkit key): max |Δ|}`` over random batches with empty rows, float64.

    Peers' formulas as written above (verl ``rollout_corr_helper.py``/``core_algos.py``, TRL
    ``GRPOTrainer._compute_loss``); batches keep ``|ℓ_i|`` inside verl's ±20 safety clamp.
    """
    worst: dict = {}

    def put(peer, key, ours, d):
        k = (peer, key, ours)
        worst[k] = max(worst.get(k, 0.0), abs(d))

    for s in seeds:
        old, ell, adv, mask = peer_batch(s)
        m = mask.double()
        ell = ell * 2
        g = metrics_of("grpo", old, ell, adv, mask, eps=1.0, eps_low=0.2, eps_high=0.28, group_size=4)
        r = torch.exp(ell)
        put("verl", "rollout_corr/chi2_seq", "chi2_seq", g["chi2_seq"] - verl_chi2_seq(ell, mask))
        put("verl", "rollout_corr/chi2_token", "chi2_token", g["chi2_token"] - (masked_mean(r * r, m) - 1))
        put("verl", "rollout_corr/k3_kl", "kl_k3", g["kl_k3"] - masked_mean(r - ell - 1, m))
        put("verl", "actor/ppo_kl", "ppo_kl", g["ppo_kl"] - masked_mean(-ell, m))
        for level, key in (("sequence", "ess_verl_seq"), ("token", "ess_verl_token")):
            put("verl", f"rollout_corr/rollout_is_eff_sample_size ({level})", key,
                g[key] - verl_is_ess(ell, mask, level, 2.0))
        A = adv[:, None]
        l1, l2 = -A * r, -A * torch.clamp(r, 0.8, 1.28)
        put("verl", "actor/pg_clipfrac (grpo)", "clipfrac", g["clipfrac"] - masked_mean((l2 > l1).double(), m))
        low, high = (r < 0.8) & (A < 0), (r > 1.28) & (A > 0)
        for side, x in (("low", low), ("high", high), ("region", low | high)):
            key = "clipfrac" if side == "region" else f"clipfrac_{side}"
            put("trl", f"clip_ratio/{side}_mean (grpo)", key, g[key] - masked_mean(x.double(), m))
        q = metrics_of("gspo", old, ell, adv, mask, eps_low=0.2, eps_high=0.28, loss_agg_mode="grpo")
        got = lm.to_peer(q, "gspo", "trl")
        for key, v in trl_sequence_clip_ratios(ell, adv, mask, 0.2, 0.28).items():
            ours = {v2: k2 for k2, v2 in lm.peer_names("gspo", "trl").items()}[key]
            put("trl", f"{key} (gspo, sequence level)", ours, got[key] - v)
    return worst


def _doc_table():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "losses.md").read_text()
    block = text.split("<!-- parity:start -->")[1].split("<!-- parity:end -->")[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        peer, key, ours, bound = (c.strip().strip("`") for c in line.strip().strip("|").split(" | "))
        rows[(peer, key, ours)] = float(bound.lstrip("≤ "))
    return rows


def test_parity_table_in_docs_holds_for_every_row():
    """docs/losses.md §8 lists every metric compared here with a bound on its measured max |Δ|; both ways."""
    measured = measured_parity()
    documented = _doc_table()
    assert set(documented) == set(measured), set(documented) ^ set(measured)
    for k, d in measured.items():
        assert d <= documented[k], (k, d, documented[k])


@pytest.mark.parametrize("name", ["verl_tok_tis", "verl_seq_rs", "trl_seq_mask", "sapo", "grpo", "tis"])
@pytest.mark.parametrize("peer", ["verl", "trl"])
def test_to_logged_keeps_the_toolkits_statistics_off_the_peers_names(name, peer):
    """``to_logged``: the peer's names carry exactly ``to_peer``'s values; every other numeric entry is under
    ``asyncgrpo/<key>`` (so the toolkit's own k1 / truncation share / ESS at 1+ε never sit under a peer's name)."""
    old, ell, adv, mask = peer_batch(0)
    m = metrics_of(name, old, ell, adv, mask, eps=0.2, group_size=4)
    logged, named = lm.to_logged(m, name, peer), lm.to_peer(m, name, peer)
    assert {k: logged[k] for k in named} == named
    own = {k for k in logged if k not in named}
    assert own and all(k.startswith("asyncgrpo/") for k in own)
    assert {k.removeprefix("asyncgrpo/") for k in own} == {k for k, v in m.items()
                                                          if isinstance(v, (int, float))} - set(lm.peer_names(name, peer))
