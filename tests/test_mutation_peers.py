"""The peers' maps at their exact thresholds, in every backend (issue 39).

Expected values come from the documented formulas (docs/losses.md, docs/estimators.md "The peers' off-policy
corrections", the Estimator docstrings), which follow the peers' own definitions:

* ``trl_seq_mask`` (TRL ``get_off_policy_mask``): ``k_{i,t} = 1{A_i ≥ 0 or −ℓ_i/T_i ≤ δ}``, δ = 0.5, the mean over
  ``clamp(T_i, min=1)`` real tokens;
* ``verl_seq_rs`` (verl ``seq_sum_k1``, ``"0.5_2.0"``, C = 2): ``w_i = min(exp(clamp(ℓ_i, ±20)), 2)·1{log ½ ≤ −ℓ_i
  ≤ log 2}`` (both ends kept), and verl's ``is_frac_high``/``_low`` count rows with ``ℓ_i > log 2`` / ``< −log 2``
  (strict); ``verl_seq_tis``, ``verl_tok_tis``, ``verl_geo_rs`` as in the same table;
* ``luspo`` (TRL): ``c_{i,t} = s_i·1{unclipped}``, ``s_i = exp(ℓ_i/T_i)``, clipped when ``A ≥ 0`` and
  ``ℓ_i/T_i > log(1+ε_high)`` or ``A < 0`` and ``ℓ_i/T_i < log(1−ε_low)`` (a ratio on a boundary is unclipped);
* ``sapo``: ``k = 4σ(x)(1−σ(x))·r``, ``x = τ(r−1)``, ``τ = 1`` if ``A > 0`` else 1.05; ``gpg``: ``k = 1``; both ignore ε.

Every ε is passed explicitly (another issue may change the defaults). Each row is built so that its statistic is
exact in float64 (equal tokens: ``2a/2 = a``; halves: ``a/2 + a/2 = a``), and probed at, one ulp below and one ulp
above its threshold.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from asyncgrpo import estimators as est
from asyncgrpo.estimators import registry
from asyncgrpo.estimators import token_level as tl

EPS = np.finfo(np.float64).eps
LOG2 = math.log(2.0)
KW = dict(eps_low=0.2, eps_high=0.2, tau_m2=0.04)  # explicit: no test below reads a default


def up(x):
    return float(np.nextafter(x, np.inf))


def down(x):
    return float(np.nextafter(x, -np.inf))


def coefs(name, ell, mask, adv, **kw):
    """``c_{i,t}`` from the three backends (NumPy reference, Numba, torch), as NumPy arrays."""
    kw = {**KW, **kw}
    ell, mask, adv = np.asarray(ell, float), np.asarray(mask, bool), np.asarray(adv, float)
    out = {"numpy": tl.token_coefficients(name, ell, mask, adv, **kw),
           "numba": tl.token_coefficients_numba(name, ell, mask, adv, **kw)}
    t = tl.token_coefficients_torch(name, torch.tensor(ell), torch.tensor(mask), torch.tensor(adv), **kw)
    out["torch"] = t.numpy()
    return out


def rows(*token_lists):
    """``(ell, mask)`` of ragged rows padded to the longest (padding ℓ = 0, mask False)."""
    T = max(len(r) for r in token_lists)
    ell = np.zeros((len(token_lists), T))
    mask = np.zeros((len(token_lists), T), bool)
    for i, r in enumerate(token_lists):
        ell[i, : len(r)] = r
        mask[i, : len(r)] = True
    return ell, mask


# ----------------------------------------------------------------------------- TRL's off-policy sequence mask
DELTA = 0.5


def trl_keep(ell, mask, adv):
    """TRL: kl_i = Σ_t(−ℓ)·mask / clamp(T_i, min=1); keep = A ≥ 0 or kl ≤ δ."""
    kl = -(ell * mask).sum(1) / np.maximum(mask.sum(1), 1)
    return (adv >= 0) | (kl <= DELTA)


def test_trl_seq_mask_threshold_rows():
    """Negative-advantage rows with T = 1, 2, 3 whose mean −ℓ is δ exactly (kept), one ulp above (dropped) and
    one ulp below (kept); the same rows with A = 0 and A > 0 are always kept."""
    third = -1.5  # −(−1.5)/3 = 0.5 exactly
    toks = [[-0.5], [-0.25, -0.75], [third / 3, third / 3, third / 3],
            [down(-0.5)], [0.0, down(-1.0)],  # mean −ℓ one ulp above δ (the sum one ulp beyond −1: exact)
            [up(-0.5)], [0.0, up(-1.0)],  # one ulp below δ
            [-0.75], [-0.2, -0.2, -0.2], [-1.6, 0.4]]  # far above; far below (T = 3); T = 2 mean 0.6 above
    ell, mask = rows(*toks)
    n = len(toks)
    kept = [True, True, True, False, False, True, True, False, True, False]
    assert trl_keep(ell, mask, -np.ones(n)).tolist() == kept  # the transcription agrees with the table
    T_i = mask.sum(1, keepdims=True)
    for adv, want in ((-np.ones(n), kept), (np.zeros(n), [True] * n), (np.full(n, 0.3), [True] * n),
                      (np.full(n, -1e-300), kept)):
        expect = np.where(mask & np.asarray(want)[:, None], 1.0 / T_i, 0.0)
        for backend, c in coefs("trl_seq_mask", ell, mask, adv).items():
            np.testing.assert_array_equal(c, expect, err_msg=f"{backend}, A = {adv[0]}")


def test_trl_seq_mask_map_floors_the_length_at_one():
    """The map's own contract (registry ``numpy(ell, mask, adv, T_i, p)``) takes a row with no real token: TRL's
    ``clamp(min=1)`` makes its mean 0, so it is kept (a 0/0 would drop it). One-token rows divide by 1."""
    e = registry.entry("trl_seq_mask")
    ell = np.array([[0.0, 0.0], [-0.75, 0.0], [-0.5, 0.0], [-0.6, -0.4]])
    mask = np.array([[False, False], [True, False], [True, False], [True, True]])
    adv = -np.ones(4)
    T_i = mask.sum(1, keepdims=True).astype(float)
    p = registry.TokenParams(0.2, 0.2, 0.04, math.inf, "upper", 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.asarray(e.numpy(ell, mask, adv, T_i, p))
    assert k[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]
    kt = e.torch(torch.tensor(ell), torch.tensor(mask), torch.tensor(adv), torch.tensor(T_i).clamp(min=1.0), p)
    assert kt[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]
    # the Numba kernel (c = k/T_i, 0 off the mask) on the same rows: the empty row is all 0, no 0/0
    out = np.full(ell.shape, np.nan)
    e.numba(ell, mask, adv, 0.2, 0.2, 0.04, math.inf, 0, out)
    np.testing.assert_array_equal(out, [[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.5, 0.5]])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), N=st.integers(1, 6), T=st.integers(1, 7))
def test_trl_seq_mask_matches_trl_on_rows_near_the_threshold(seed, N, T):
    """Random ragged rows whose mean −ℓ is within 1e-3 of δ (most with A < 0): the three backends give TRL's
    mask, divided by T_i."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, N)
    mask = np.arange(T)[None, :] < lengths[:, None]
    ell = rng.normal(0, 0.3, (N, T)) * mask
    shift = (-DELTA - ell.sum(1) / lengths) + rng.uniform(-1e-3, 1e-3, N)
    ell = np.where(mask, ell + shift[:, None], 0.0)
    adv = np.where(rng.random(N) < 0.8, -rng.uniform(0.1, 2.0, N), rng.uniform(0, 2.0, N))
    expect = np.where(mask & trl_keep(ell, mask, adv)[:, None], 1.0 / lengths[:, None], 0.0)
    for backend, c in coefs("trl_seq_mask", ell, mask, adv).items():
        np.testing.assert_allclose(c, expect, rtol=0, atol=0, err_msg=backend)


# ----------------------------------------------------------------------------- verl: sequence IS + rejection
def _seq_rs_expected(ell):
    """verl's seq_sum_k1 band on −ℓ_i, the TIS cap C = 2, and the kept rows renormalised within the group (G/G_kept,
    as verl's seq-mean divides by the rows its rejection keeps; issue 57 item 6)."""
    keep = (-ell >= -LOG2) & (-ell <= LOG2)
    renorm = ell.size / max(int(keep.sum()), 1)
    return np.where(keep, np.minimum(np.exp(np.clip(ell, -20, 20)), 2.0) * renorm, 0.0)


def test_verl_seq_rs_keeps_both_ends_of_its_band():
    ell = np.array([LOG2, down(LOG2), up(LOG2), -LOG2, up(-LOG2), down(-LOG2), 0.0, 1.0, -1.0, 25.0, -25.0])
    kept = [True, True, False, True, True, False, True, False, False, False, False]
    want = _seq_rs_expected(ell)
    assert (want > 0).tolist() == kept and want[0] == 2.0 * 11 / 5 and want[3] == 0.5 * 11 / 5
    m = est.get("verl_seq_rs", 0.2)
    for backend, w in (("numpy", m(ell)), ("numba", m.numba(ell)), ("torch", m.torch(torch.tensor(ell)).numpy())):
        np.testing.assert_allclose(w, want, rtol=2 * EPS, atol=0, err_msg=backend)
        assert (w > 0).tolist() == kept, backend
    np.testing.assert_array_equal(m.log_weights(ell) == -np.inf, ~np.asarray(kept))


def test_verl_seq_rs_band_is_symmetric():
    """a·b = 1 ("0.5_2.0"), and exactly so in float64: log ½ == −log 2. mutation/equivalent.txt relies on it
    (the sign of verl's k1 = −ℓ_i cannot matter); a preset with a·b ≠ 1 would make it matter."""
    from asyncgrpo.estimators.maps import verl_rollout_corr as v

    assert v.SEQ_RS_LOWER * v.SEQ_RS_UPPER == 1.0 and math.log(v.SEQ_RS_LOWER) == -math.log(v.SEQ_RS_UPPER)


def _metrics(name, ell, mask, adv=None, mode="token-mean"):
    ell_t, mask_t = torch.tensor(ell), torch.tensor(mask)
    adv_t = torch.ones(ell.shape[0], dtype=torch.float64) if adv is None else torch.tensor(adv)
    lp = ell_t.clone().requires_grad_(True)  # logp_old = 0: ℓ = logp − logp_old is exactly ell
    kw = dict(group_size=1) if name in est.TRAJECTORY_ESTIMATORS else {}
    _, m = tl.policy_loss(name, lp, torch.zeros_like(ell_t), adv_t, mask_t, loss_agg_mode=mode, return_metrics=True,
                          **KW, **kw)
    return m


def test_verl_seq_rs_metrics_at_rows_summing_to_plus_and_minus_log2():
    """Rows of two tokens (halves, so the sum is exact). Rejection (float64 band, ends kept): ℓ_i = ±log 2 kept, one
    ulp beyond rejected. verl's ``is_frac_high``/``_low`` compare ℓ_i with ``log C`` computed in float32 (issue 36,
    docs/losses.md), strictly: a row at that float32 bound is not counted, one ulp beyond it is."""
    h = LOG2 / 2
    H = float(np.float32(LOG2)) / 2  # float32 log 2 = 0.6931471824…, above the float64 one; log ½ = −log 2 there too
    ell, mask = rows([h, h], [-h, -h], [up(h), up(h)], [down(-h), down(-h)],
                     [H, H], [up(H), up(H)], [-H, -H], [down(-H), down(-H)])
    m = _metrics("verl_seq_rs", ell, mask)
    # shares of rows or tokens: a mean of ≤ 16 zeros and ones, exact to a few ulp
    assert m["is_frac_high"] == pytest.approx(1 / 8, rel=4 * EPS)
    assert m["is_frac_low"] == pytest.approx(1 / 8, rel=4 * EPS)
    assert m["rs_seq_masked_frac"] == pytest.approx(6 / 8, rel=4 * EPS)
    assert m["rs_masked_frac"] == pytest.approx(12 / 16, rel=4 * EPS)
    # only the row at −log 2: kept, nothing high or low
    m = _metrics("verl_seq_rs", *rows([-h, -h]))
    assert m["rs_masked_frac"] == 0.0 and m["rs_seq_masked_frac"] == 0.0 and m["is_frac_low"] == 0.0
    m = _metrics("verl_seq_tis", *rows([H, H], [-H, -H], [up(H), up(H)], [down(-H), down(-H)]))
    assert m["is_frac_high"] == 0.25 and m["is_frac_low"] == 0.25


def test_verl_seq_rs_loss_keeps_rows_at_the_band_ends_token_by_token():
    """``policy_loss("verl_seq_rs")`` reads each token (verl's ``seq_sum_k1``: ``k1 = −Σ_t clamp(ℓ_t, ±20)``) and
    keeps a row with ``log ½ ≤ k1 ≤ log 2``, both ends included, as verl's ``(k1 >= lower) & (k1 <= upper)``: rows
    of two exact halves at ``k1 = ±log 2`` keep their gradient, one ulp beyond loses it. A row +25, −25.9 has
    ``k1 = −(20 − 20) = 0`` token by token: kept (the clamped sum, ``−ℓ_i = 0.9 > log 2``, would reject it)."""
    h = LOG2 / 2
    cases = [([-h, -h], True), ([h, h], True), ([down(-h), down(-h)], False), ([up(h), up(h)], False),
             ([25.0, -25.9], True), ([19.0, -19.9], False)]
    for toks, kept in cases:
        ell, mask = rows(toks)
        lp = torch.tensor(ell).requires_grad_(True)
        tl.policy_loss("verl_seq_rs", lp, torch.zeros_like(lp), torch.ones(1, dtype=torch.float64), torch.tensor(mask),
                       group_size=1, loss_agg_mode="token-mean", **KW).backward()
        assert bool(lp.grad.abs().sum() > 0) == kept, toks


def test_sapo_logged_objective_per_sign_of_the_advantage():
    """Both peers log ``−A·σ(τ(r−1))·4/τ`` per token with ``τ = τ_pos`` for ``A > 0`` and ``τ_neg`` otherwise; a
    token with ``A = 0`` logs exactly 0 (also where the gate is huge), whatever the other rows' advantages."""
    from asyncgrpo.estimators.maps import sapo

    ell = torch.tensor([[0.3, -0.2], [0.3, -0.2], [0.3, -0.2], [50.0, 0.1], [0.3, -0.2]], dtype=torch.float64)
    adv = torch.tensor([-1.0, 0.0, 2.0, 0.0, 1.0], dtype=torch.float64)
    got = sapo.gate_objective(ell, adv, tau_pos=1.0, tau_neg=1.05)
    r = torch.exp(ell)
    want_neg = 1.0 * torch.sigmoid(1.05 * (r[0] - 1.0)) * (4.0 / 1.05)  # −A·gate with A = −1
    want_pos = -2.0 * torch.sigmoid(1.0 * (r[2] - 1.0)) * 4.0
    torch.testing.assert_close(got[0], want_neg, rtol=4 * EPS, atol=0)
    torch.testing.assert_close(got[2], want_pos, rtol=4 * EPS, atol=0)
    torch.testing.assert_close(got[4], want_pos / 2.0, rtol=4 * EPS, atol=0)  # A = 1: the gate itself, negated
    assert got[1].tolist() == [0.0, 0.0] and got[3].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("bad", [True, False, "1.0", None, 0.0, -1.0, math.inf, math.nan])
def test_sapo_temperatures_are_positive_finite_numbers_by_name(bad):
    from asyncgrpo.estimators.maps import sapo

    with pytest.raises(ValueError, match=r"tau_pos \(sapo_temperature_pos\) must be a finite number > 0"):
        sapo.check_taus(bad, 1.05)
    with pytest.raises(ValueError, match=r"tau_neg \(sapo_temperature_neg\) must be a finite number > 0"):
        sapo.check_taus(1.0, bad)
    assert sapo.check_taus(2, 0.5) == (2.0, 0.5)


def test_verl_seq_tis_floor_and_cap():
    ell = np.array([-25.0, -20.0, down(-20.0), -1.0, LOG2, up(LOG2), 30.0])
    want = np.minimum(np.exp(np.clip(ell, -20, 20)), 2.0)
    m = est.get("verl_seq_tis", 0.2)
    for backend, w in (("numpy", m(ell)), ("numba", m.numba(ell)), ("torch", m.torch(torch.tensor(ell)).numpy())):
        np.testing.assert_allclose(w, want, rtol=2 * EPS, atol=0, err_msg=backend)
    assert m(ell)[0] == m(ell)[1] and m(ell)[-1] == 2.0


# ----------------------------------------------------------------------------- verl: token TIS and Geo-RS
def test_verl_tok_tis_cap_clamp_and_metrics():
    toks = [[LOG2, LOG2 + 1e-12, 25.0], [-LOG2, -LOG2 - 1e-12, -25.0], [0.1, -0.1, -20.0]]
    ell, mask = rows(*toks)
    want = np.minimum(np.exp(np.clip(ell, -20, 20)), 2.0) / 3
    for backend, c in coefs("verl_tok_tis", ell, mask, np.array([1.0, -1.0, 0.5])).items():
        np.testing.assert_allclose(c, want, rtol=4 * EPS, atol=0, err_msg=backend)
    assert math.exp(LOG2) == 2.0 and math.exp(-LOG2) == 0.5  # the boundary tokens sit exactly on C and 1/C
    m = _metrics("verl_tok_tis", ell, mask)
    # w > 2: LOG2 + 1e-12 and 25 (not LOG2 itself); w < ½: −LOG2 − 1e-12, −25 and −20 (not −LOG2)
    assert m["is_frac_high"] == pytest.approx(2 / 9, rel=4 * EPS)
    assert m["is_frac_low"] == pytest.approx(3 / 9, rel=4 * EPS)


def test_verl_geo_rs_band_and_clamp():
    """Keep a row iff log 0.999 ≤ mean_t(−clamp(ℓ, ±20)) ≤ log 1.001 (|log 1.001| ≈ 1e-3); a row of ±25 tokens is
    judged on the clamped values."""
    toks = [[0.0, 0.0], [-5e-4, -5e-4, -5e-4], [-2e-3, 0.0], [1.1e-3], [9e-4, 9e-4], [25.0, -24.99], [25.0, -25.0],
            [-1.2e-3, -1.2e-3, 0.0]]
    kept = [True, True, False, False, True, True, True, True]
    ell, mask = rows(*toks)
    T_i = mask.sum(1)
    stat = -(np.clip(ell, -20, 20) * mask).sum(1) / T_i
    assert ((stat >= math.log(0.999)) & (stat <= math.log(1.001))).tolist() == kept
    n_kept = sum(kept)
    # verl's rejection leaves the normaliser: the kept rows carry the batch (scale N/N_kept, docs/estimators.md)
    expect = np.where(mask & np.asarray(kept)[:, None], (len(kept) / n_kept) / T_i[:, None], 0.0)
    for backend, c in coefs("verl_geo_rs", ell, mask, np.ones(len(kept))).items():
        np.testing.assert_allclose(c, expect, rtol=4 * EPS, atol=0, err_msg=backend)
    m = _metrics("verl_geo_rs", ell, mask)
    assert m["rs_seq_masked_frac"] == pytest.approx(2 / 8, rel=4 * EPS)
    assert m["rs_masked_frac"] == pytest.approx(3 / int(T_i.sum()), rel=4 * EPS)


def test_verl_geo_rs_band_ends_divide_by_T():
    """verl divides the row's k1 sum by T_i (its ``+ 1e-8`` on an integer mask vanishes in float32; docs and
    issue 36): a row whose mean −ℓ is a band end exactly is kept (both ends inclusive), 1e-12 (relative)
    beyond it is rejected, 1e-12 inside kept. T = 1, 2 equal tokens (sum and mean exact in any order)."""
    hi, lo = math.log(1.001), math.log(0.999)
    toks, kept = [], []
    for T in (1, 2):
        for end in (hi, lo):
            for f, keep in ((1.0, True), (1 - 1e-12, True), (1 + 1e-12, False)):
                toks.append([-end * f] * T)  # mean −ℓ = end·f
                kept.append(keep)
    ell, mask = rows(*toks)
    T_i = mask.sum(1)
    stat = -(ell * mask).sum(1) / T_i
    assert ((stat >= lo) & (stat <= hi)).tolist() == kept
    expect = np.where(mask & np.asarray(kept)[:, None], (len(kept) / sum(kept)) / T_i[:, None], 0.0)
    for backend, c in coefs("verl_geo_rs", ell, mask, np.ones(len(kept))).items():
        np.testing.assert_allclose(c, expect, rtol=4 * EPS, atol=0, err_msg=backend)


# ----------------------------------------------------------------------------- luspo
HI, LO = math.log1p(0.2), math.log1p(-0.2)


def _luspo_expected(seq, adv):
    ok = np.where(adv >= 0, seq <= HI, seq >= LO)
    return np.where(ok, np.exp(seq), 0.0)


@pytest.mark.parametrize("T", [1, 2, 3])
def test_luspo_clip_at_log1p_of_plus_and_minus_eps(T):
    """Rows of T equal tokens a (so ℓ_i/T_i = a exactly) at log1p(0.2) and log1p(−0.2), one ulp either side, with
    A > 0, A = 0 and A < 0: c = s·1{unclipped} on every real token, the same in the three backends."""
    a = np.array([HI, down(HI), up(HI), LO, down(LO), up(LO), 0.0, 1.0, -1.0])
    if T == 3:  # (a + a + a)/3 is not always a: keep the values whose mean is exact
        a = np.array([x for x in a if (x + x + x) / 3 == x])
    for A in (1.0, 0.0, -1.0):
        ell = np.repeat(a[:, None], T, axis=1)
        mask = np.ones_like(ell, bool)
        adv = np.full(len(a), A)
        want = np.repeat(_luspo_expected(a, adv)[:, None], T, axis=1)
        for backend, c in coefs("luspo", ell, mask, adv, eps_low=0.2, eps_high=0.2).items():
            np.testing.assert_allclose(c, want, rtol=2 * EPS, atol=0, err_msg=f"{backend}, A = {A}")
    # the boundary rows themselves: kept at both ends, dropped one ulp outside
    assert (_luspo_expected(np.array([HI, up(HI)]), np.ones(2)) > 0).tolist() == [True, False]
    assert (_luspo_expected(np.array([LO, down(LO)]), -np.ones(2)) > 0).tolist() == [True, False]


def test_luspo_ragged_rows_and_its_eps():
    """T_i differs per row (the loss is summed over tokens, so c = s_i, not s_i/T_i); ε_high/ε_low move the clip."""
    ell, mask = rows([0.1, 0.1], [0.05, 0.05, 0.05, 0.05], [-0.3], [0.3, -0.1, 0.1])
    adv = np.array([1.0, 1.0, -1.0, 1.0])
    seq = (ell * mask).sum(1) / mask.sum(1)
    for eh, el in ((0.2, 0.2), (0.05, 0.5), (0.12, 0.2)):
        ok = np.where(adv >= 0, seq <= math.log1p(eh), seq >= math.log1p(-el))
        want = np.where(mask & ok[:, None], np.exp(seq)[:, None], 0.0)
        for backend, c in coefs("luspo", ell, mask, adv, eps_low=el, eps_high=eh).items():
            np.testing.assert_allclose(c, want, rtol=4 * EPS, atol=0, err_msg=f"{backend}, eps = {eh, el}")
    assert registry.entry("luspo").uses_eps is True


# ----------------------------------------------------------------------------- sapo and gpg ignore ε
@pytest.mark.parametrize("name", ["sapo", "gpg"])
def test_sapo_and_gpg_ignore_eps(name):
    assert registry.entry(name).uses_eps is False
    ell, mask = rows([0.5, -0.3, 1.2], [-2.0], [0.0, 3.0])
    adv = np.array([1.0, -0.5, 0.0])
    a = coefs(name, ell, mask, adv, eps_low=0.1, eps_high=0.1)
    b = coefs(name, ell, mask, adv, eps_low=0.9, eps_high=5.0)
    for backend in a:
        np.testing.assert_array_equal(a[backend], b[backend], err_msg=backend)


def test_gpg_is_one_over_the_row_length():
    ell, mask = rows([0.5, -0.3, 1.2], [-2.0], [0.0, 3.0], [9.0, -9.0, 0.1, 0.2])
    mask[3, 1] = False
    expect = np.where(mask, 1.0 / mask.sum(1, keepdims=True), 0.0)
    for backend, c in coefs("gpg", ell, mask, np.array([1.0, -1.0, 0.0, 2.0])).items():
        np.testing.assert_array_equal(c, expect, err_msg=backend)


def test_sapo_weight_and_its_temperature_by_the_sign_of_A():
    """k = 4σ(x)(1−σ(x))·r with τ = 1 for A > 0 and 1.05 for A ≤ 0 (A = 0 takes τ_neg); c = k/T_i."""
    ell, mask = rows([1.0, -0.5, 0.3], [1.0, 2.0], [1.0])
    for adv in (np.array([1.0, 1e-300, 2.0]), np.array([0.0, -1.0, -1e-300])):
        tau = np.where(adv > 0, 1.0, 1.05)[:, None]
        r = np.exp(ell)
        x = tau * (r - 1.0)
        # σ(x)(1 − σ(x)) = σ(x)σ(−x): no cancellation in 1 − σ(x) where σ(x) ≈ 1
        want = np.where(mask, 4 * expit(x) * expit(-x) * r / mask.sum(1, keepdims=True), 0.0)
        # the map sums log 4 − |x| − 2 log(1 + e^{−|x|}) + ℓ and exponentiates: a few ulp of the largest term
        rtol = 8 * EPS * (2.0 + np.abs(x).max() + np.abs(ell).max())
        for backend, c in coefs("sapo", ell, mask, adv).items():
            np.testing.assert_allclose(c, want, rtol=rtol, atol=0, err_msg=f"{backend}, A = {adv}")
    # τ matters at these ℓ: the two temperatures give different weights (a test that could fail)
    s1, s2 = expit(1.0 * (math.e - 1)), expit(1.05 * (math.e - 1))
    assert abs(s1 * (1 - s1) - s2 * (1 - s2)) > 1e-3


def test_sapo_objective_is_the_gate_the_peers_log():
    """The value verl and TRL log: −A·σ(τ(r−1))·4/τ per token (0 where A = 0)."""
    ell = torch.tensor([[1.0, -0.5], [0.2, 2.0], [0.5, 0.5]], dtype=torch.float64)
    mask = torch.ones_like(ell, dtype=torch.bool)
    adv = torch.tensor([1.5, -2.0, 0.0], dtype=torch.float64)
    got = registry.entry("sapo").objective(ell, mask, adv, ell).numpy()
    tau = np.array([[1.0], [1.05], [1.05]])
    want = -adv.numpy()[:, None] * expit(tau * (np.exp(ell.numpy()) - 1)) * 4 / tau
    np.testing.assert_allclose(got, want, rtol=16 * EPS, atol=0)
    assert np.all(got[2] == 0.0)


def test_the_peers_codes_are_fixed():
    """Built-in records fix their code "to keep it stable across registries" (docs/estimators.md): the Numba
    dispatch and the learner's run record (``RUN_DTYPE.code``) name an estimator by it, so moving one must be a
    deliberate change, never a silent one. All are below the plugins' bases (100, 200)."""
    fixed = {"verl_seq_tis": 7, "verl_seq_rs": 8, "verl_tok_tis": 14, "verl_geo_rs": 15, "trl_seq_mask": 16,
             "sapo": 17, "gpg": 18, "luspo": 19}
    assert {n: registry.code(n) for n in fixed} == fixed


@pytest.mark.parametrize("name", ["luspo", "sapo", "gpg", "trl_seq_mask", "verl_tok_tis"])
def test_the_peers_take_no_dual_clip(name):
    """luspo does not take TRL's delta, and no other peer map has a dual clip (docs/losses.md): refused."""
    ell, mask = rows([0.1, 0.2])
    with pytest.raises(ValueError, match="clip_ratio_c"):
        tl.token_coefficients(name, ell, mask, np.array([-1.0]), clip_ratio_c=3.0, **KW)


# ----------------------------------------------------------------------------- trl_seq_mask's δ
@pytest.mark.parametrize("good", [0, 0.0, 0.5, 3, 1e300])
def test_opsm_threshold_accepts_every_finite_number_at_least_zero(good):
    """δ (TRL's ``off_policy_mask_threshold``) is a mean-KL estimate bound: any finite δ ≥ 0, returned as a float."""
    from asyncgrpo.estimators.maps.trl_opsm import check_threshold

    out = check_threshold(good)
    assert out == float(good) and type(out) is float


@pytest.mark.parametrize("bad", [-1e-300, -1, math.inf, math.nan, -math.inf, True, "0.5", None, [0.5]])
def test_opsm_threshold_refuses_by_name_anything_else(bad):
    """Below 0 every negative-advantage row whose policy did not move would be dropped; inf/NaN and non-numbers
    are not thresholds (None means "off" one level up, in the loss configuration, not here)."""
    from asyncgrpo.estimators.maps.trl_opsm import check_threshold

    with pytest.raises(ValueError, match="off_policy_mask_threshold must be a finite number >= 0"):
        check_threshold(bad)
