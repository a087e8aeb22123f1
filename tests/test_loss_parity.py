"""Parity of ``policy_loss`` with verl and TRL (issue 16), float64, tolerance 1e-10.

Each reference below is written here from the peer's published formula (verl
``verl/trainer/ppo/core_algos.py``: ``agg_loss``, ``compute_policy_loss_vanilla``/``_gspo``/``_cispo``,
``compute_policy_loss_reinforce``; ``verl/trainer/ppo/rollout_corr_helper.py`` for χ², k3 and ESS; TRL
``GRPOTrainer._compute_loss``), never imported, except the aggregation: ``verl_agg`` calls verl 0.9.1's own
``agg_loss`` (tests/_peer_verl.py), so every verl mode, ``seq-mean-token-sum-norm``'s ``1/(n_seq·L)`` included, is
verl's code, not a transcription of an older verl. Batches are ragged and random: 2–16 rows × 1–40 tokens,
holes in the mask, token log-ratios up to ±3, advantages ±2 with 10 % exact zeros. Where the toolkit
differs on purpose (docs/losses.md), a test asserts the documented difference.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo.estimators import aggregation as agg
from asyncgrpo.estimators import loss_metrics as lm
from asyncgrpo.estimators import token_level as tl

import _peer_verl

CA, _RCH, _VF, _MISSING = _peer_verl.load_or_missing()

TOL = dict(rtol=1e-10, atol=1e-10)
EPS_PAIRS = [(0.2, 0.2), (0.2, 0.28)]
SEEDS = range(6)


# ----------------------------------------------------------------------------- batches
def ragged_batch(seed, *, G=None, empty_rows=False):
    """``(logp_old, ell, adv, mask)`` float64 tensors; rows ordered group by group when ``G`` is given."""
    rng = np.random.default_rng(seed)
    if G is None:
        N = int(rng.integers(2, 17))
    else:
        N = G * int(rng.integers(1, 5))
    T = int(rng.integers(1, 41))
    lengths = rng.integers(1, T + 1, N)
    mask = np.arange(T)[None, :] < lengths[:, None]
    mask &= rng.random((N, T)) > 0.15  # holes inside the sequences
    mask[np.arange(N), rng.integers(0, lengths)] = True  # every row keeps a token ...
    if empty_rows:
        mask[rng.random(N) < 0.3] = False  # ... unless asked otherwise
        mask[0, 0] = True
    ell = np.clip(rng.normal(0, 1.0, (N, T)), -3, 3) * (rng.random((N, T)) < 0.7)
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.1] = 0.0
    adv[int(rng.integers(N))] = 0.0
    logp_old = rng.normal(-2, 0.7, (N, T))
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    return t(logp_old), t(np.where(mask, ell, 0.0)), t(adv), torch.tensor(mask)


def toolkit(name, logp_old, ell, adv, mask, **kw):
    """(objective value, gradient of the returned loss w.r.t. log π_θ, metrics)."""
    lp = (logp_old + ell).clone().requires_grad_(True)
    loss, m = tl.policy_loss(name, lp, logp_old, adv, mask, return_metrics=True, **kw)
    loss.backward()
    return m["pg_loss"], lp.grad.clone(), m, float(loss.detach())


def reference(fn, logp_old, ell, adv, mask, **kw):
    """(value, gradient) of a reference loss built by ``fn`` on a fresh leaf ``log π_θ``."""
    lp = (logp_old + ell).clone().requires_grad_(True)
    loss = fn(logp_old, lp, adv, mask, **kw)
    loss.backward()
    return float(loss.detach()), lp.grad.clone()


# ----------------------------------------------------------------------------- verl, from core_algos.py
def masked_mean(x, m):
    return (x * m).sum() / m.sum()


def verl_agg(loss_mat, mask, mode, loss_scale_factor=None, plus_1e8=True):
    """verl 0.9.1's own ``agg_loss`` on one data-parallel rank, local counts (``plus_1e8=False``: the
    seq-mean-token-mean reference without verl's ``+1e-8``, for the toolkit's exact ``1/T_i``)."""
    _peer_verl.verl_is_installed(_MISSING)
    m = mask.double()
    if mode == "seq-mean-token-mean" and not plus_1e8:
        cnt = m.sum(-1)
        seq = (loss_mat * m).sum(-1) / torch.where(cnt > 0, cnt, 1.0)
        keep = (cnt > 0).double()
        return (seq * keep).sum() / keep.sum()
    return CA.agg_loss(loss_mat, m, mode, loss_scale_factor=loss_scale_factor)


def verl_vanilla(old, new, adv, mask, *, el, eh, c, mode, plus_1e8=True, metrics=None):
    A = adv[:, None]
    nkl = torch.clamp(new - old, -20.0, 20.0)
    ratio = torch.exp(nkl)
    l1 = -A * ratio
    l2 = -A * torch.clamp(ratio, 1 - el, 1 + eh)
    cl1 = torch.maximum(l1, l2)
    if c is None:  # the pre-dual-clip PPO loss (verl's formula without its third term)
        losses = cl1
        lower = torch.zeros(())
    else:
        l3 = -A * c
        losses = torch.where(A < 0, torch.min(l3, cl1), cl1)
        lower = masked_mean((cl1 > l3).double() * (A < 0).double(), mask.double())
    if metrics is not None:
        metrics.update({"actor/pg_clipfrac": float(masked_mean((l2 > l1).double(), mask.double()).detach()),
                        "actor/pg_clipfrac_lower": float(lower),
                        "actor/ppo_kl": float(masked_mean(-nkl, mask.double()).detach())})
    return verl_agg(losses, mask, mode, plus_1e8=plus_1e8)


def verl_gspo(old, new, adv, mask, *, el, eh, mode, plus_1e8=True, metrics=None):
    A = adv[:, None]
    nkl = new - old
    lens = mask.double().sum(-1).clamp(min=1)
    seq = (nkl * mask).sum(-1) / lens
    log_s = torch.clamp(new - new.detach() + seq.detach()[:, None], max=10.0)
    s = torch.exp(log_s)
    l1 = -A * s
    l2 = -A * torch.clamp(s, 1 - el, 1 + eh)
    if metrics is not None:
        metrics["actor/pg_clipfrac"] = float(masked_mean((l2 > l1).double(), mask.double()))
    # verl's gspo always aggregates with seq-mean-token-mean; other modes apply verl's agg_loss to its loss matrix
    return verl_agg(torch.maximum(l1, l2), mask, mode, plus_1e8=plus_1e8)


def verl_cispo(old, new, adv, mask, *, el, eh, mode, plus_1e8=True, metrics=None):
    ratio = torch.exp(torch.clamp(new - old, -20.0, 20.0))
    clipped = torch.clamp(ratio, 1 - el, 1 + eh)
    losses = -clipped.detach() * adv[:, None] * new
    if metrics is not None:
        metrics["actor/pg_clipfrac"] = float(masked_mean((ratio != clipped).double(), mask.double()))
    return verl_agg(losses, mask, mode, plus_1e8=plus_1e8)


def verl_reinforce(old, new, adv, mask, *, w, mode, plus_1e8=True):
    """``compute_policy_loss_reinforce`` with sequence-level ``rollout_is_weights`` ``w_i`` on every token."""
    return verl_agg(-adv[:, None] * new * w[:, None], mask, mode, plus_1e8=plus_1e8)


# ----------------------------------------------------------------------------- TRL, from GRPOTrainer._compute_loss
def trl_loss(old, new, adv, mask, *, loss_type, el, eh, level="token", delta=None, max_completion_length=None,
             metrics=None):
    """One process, no gradient accumulation, no KL term (beta = 0), no vLLM IS correction."""
    A = adv[:, None]
    m = mask.double()
    log_ratio = new - old
    if level == "token":
        liw = log_ratio
    else:
        liw = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
    coef_1 = torch.exp(liw)
    if loss_type == "cispo":
        per_tok = -torch.clamp(coef_1, max=eh).detach() * A * new
    else:
        coef_2 = torch.clamp(coef_1, 1 - el, 1 + eh)
        if delta is not None:
            coef_1 = torch.clamp(coef_1, max=delta)
        per_tok = -torch.min(coef_1 * A, coef_2 * A)
    if loss_type == "grpo":
        loss = ((per_tok * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (per_tok * m).sum() / m.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        L = mask.shape[1] if max_completion_length is None else max_completion_length
        loss = (per_tok * m).sum() / (per_tok.size(0) * L)
    elif loss_type in ("dapo", "cispo"):
        loss = (per_tok * m).sum() / m.sum().clamp(min=1.0)  # num_items_in_batch: the batch's active tokens
    else:
        raise AssertionError(loss_type)
    if metrics is not None:
        def gmean(x):
            if x.shape[1] == 1:
                return float(x.sum() / x.shape[0])
            return float((x * m).sum() / m.sum())
        if loss_type == "cispo":
            metrics["cispo_clip_ratio"] = gmean(((coef_1 > eh) & (A > 0)).double())
        else:
            low = (coef_1 < 1 - el) & (A < 0)
            high = (coef_1 > 1 + eh) & (A > 0)
            metrics.update({"clip_ratio/low_mean": gmean(low.double()), "clip_ratio/high_mean": gmean(high.double()),
                            "clip_ratio/region_mean": gmean((low | high).double())})
    return loss


def assert_same(got, want):
    gv, gg = got[0], got[1]
    wv, wg = want
    np.testing.assert_allclose(gv, wv, **TOL)
    np.testing.assert_allclose(gg.numpy(), wg.numpy(), **TOL)


# ----------------------------------------------------------------------------- grpo
@pytest.mark.parametrize("mode", agg.LOSS_AGG_MODES)
@pytest.mark.parametrize("clip_c", [None, 3.0])
@pytest.mark.parametrize("el,eh", EPS_PAIRS)
def test_grpo_matches_verl_vanilla(mode, clip_c, el, eh):
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("grpo", old, ell, adv, mask, eps_low=el, eps_high=eh, clip_ratio_c=clip_c, loss_agg_mode=mode)
        ref_m: dict = {}
        want = reference(verl_vanilla, old, ell, adv, mask, el=el, eh=eh, c=clip_c, mode=mode, plus_1e8=False,
                         metrics=ref_m)
        assert_same(got, want)
        m = got[2]
        for key, peer_key in lm.peer_names("grpo", "verl").items():
            if peer_key in ref_m:
                assert m[key] == pytest.approx(ref_m[peer_key], rel=1e-12, abs=1e-12), key
        if mode == "seq-mean-token-mean":
            # documented difference: verl adds 1e-8 to each T_i; relative effect ≤ 1e-8/min T_i
            v8, g8 = reference(verl_vanilla, old, ell, adv, mask, el=el, eh=eh, c=clip_c, mode=mode)
            np.testing.assert_allclose(got[0], v8, rtol=1.01e-8, atol=1e-14)
            np.testing.assert_allclose(got[1].numpy(), g8.numpy(), rtol=1.01e-8, atol=1e-14)


def test_toolkit_default_grpo_differs_from_verl_default_only_through_the_dual_clip():
    """Documented difference: verl's default dual clip (c = 3) changes the gradient iff some A<0 token has r > 3."""
    differs = 0
    for s in range(20):
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("grpo", old, ell, adv, mask, eps_low=0.2, eps_high=0.2, loss_agg_mode="token-mean")
        want = reference(verl_vanilla, old, ell, adv, mask, el=0.2, eh=0.2, c=3.0, mode="token-mean")
        hit = bool(((adv[:, None] < 0) & mask & (ell > math.log(3.0))).any())
        assert np.allclose(got[1].numpy(), want[1].numpy(), **TOL) == (not hit)
        differs += hit
    assert differs > 0


@pytest.mark.parametrize("mode", agg.TRL_LOSS_TYPES)
@pytest.mark.parametrize("el,eh", EPS_PAIRS)
@pytest.mark.parametrize("delta", [None, 2.0])
def test_grpo_matches_trl(mode, el, eh, delta):
    """TRL's ``delta`` (two-sided GRPO, δ > 1+ε_high) is the dual clip ``clip_ratio_c = δ``."""
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("grpo", old, ell, adv, mask, eps_low=el, eps_high=eh, clip_ratio_c=delta, loss_agg_mode=mode)
        ref_m: dict = {}
        want = reference(trl_loss, old, ell, adv, mask, loss_type=mode, el=el, eh=eh, delta=delta, metrics=ref_m)
        assert_same(got, want)
        for key, peer_key in lm.peer_names("grpo", "trl").items():
            if peer_key in ref_m:
                assert got[2][key] == pytest.approx(ref_m[peer_key], rel=1e-12, abs=1e-12), key


def test_trl_delta_below_one_plus_eps_is_not_the_dual_clip():
    """Documented difference: with δ ≤ 1+ε_high TRL also caps A>0 ratios in (δ, 1+ε_high]; the dual clip does not."""
    el, eh, delta = 0.2, 0.28, 1.1
    diffs = 0
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("grpo", old, ell, adv, mask, eps_low=el, eps_high=eh, clip_ratio_c=delta, loss_agg_mode="grpo")
        want = reference(trl_loss, old, ell, adv, mask, loss_type="grpo", el=el, eh=eh, delta=delta)
        hit = ((adv[:, None] > 0) & mask & (ell > math.log(delta)) & (ell <= math.log1p(eh))).any()
        same = np.allclose(got[1].numpy(), want[1].numpy(), **TOL)
        assert same == (not bool(hit))
        diffs += int(not same)
    assert diffs > 0


# ----------------------------------------------------------------------------- gspo
@pytest.mark.parametrize("mode", agg.LOSS_AGG_MODES)
@pytest.mark.parametrize("el,eh", EPS_PAIRS)
def test_gspo_matches_verl(mode, el, eh):
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("gspo", old, ell, adv, mask, eps_low=el, eps_high=eh, loss_agg_mode=mode)
        ref_m: dict = {}
        want = reference(verl_gspo, old, ell, adv, mask, el=el, eh=eh, mode=mode, plus_1e8=False, metrics=ref_m)
        assert_same(got, want)
        assert got[2]["clipfrac"] == pytest.approx(ref_m["actor/pg_clipfrac"], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("mode", agg.TRL_LOSS_TYPES)
@pytest.mark.parametrize("el,eh", EPS_PAIRS)
def test_gspo_matches_trl_sequence_level(mode, el, eh):
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("gspo", old, ell, adv, mask, eps_low=el, eps_high=eh, loss_agg_mode=mode)
        ref_m: dict = {}
        want = reference(trl_loss, old, ell, adv, mask, loss_type=mode, el=el, eh=eh, level="sequence", metrics=ref_m)
        assert_same(got, want)
        for key, peer_key in lm.peer_names("gspo", "trl").items():
            if peer_key in ref_m:
                assert got[2][key] == pytest.approx(ref_m[peer_key], rel=1e-12, abs=1e-12), key


def test_gspo_dual_clip_matches_verl_vanilla_on_the_sequence_ratio():
    """verl's gspo has no dual clip; the toolkit's option applies verl's vanilla dual clip to ``s_i``."""
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("gspo", old, ell, adv, mask, clip_ratio_c=1.5, loss_agg_mode="token-mean")
        T_i = mask.double().sum(1, keepdim=True)
        seq = (ell.sum(1, keepdim=True) / T_i).expand_as(ell)

        def ref(old, new, adv, mask):
            # token log-ratio replaced by the straight-through sequence log-ratio sg(ℓ_i/T_i) + log π − sg(log π)
            return verl_vanilla(torch.zeros_like(new), new - new.detach() + seq, adv, mask, el=0.2, eh=0.28,
                                c=1.5, mode="token-mean")
        assert_same(got, reference(ref, old, ell, adv, mask))


# ----------------------------------------------------------------------------- cispo
@pytest.mark.parametrize("mode", agg.LOSS_AGG_MODES)
@pytest.mark.parametrize("el,eh", EPS_PAIRS)
def test_cispo_two_sided_matches_verl(mode, el, eh):
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("cispo", old, ell, adv, mask, eps_low=el, eps_high=eh, cispo_clamp="two-sided",
                      loss_agg_mode=mode)
        ref_m: dict = {}
        want = reference(verl_cispo, old, ell, adv, mask, el=el, eh=eh, mode=mode, plus_1e8=False, metrics=ref_m)
        assert_same(got, want)
        # verl's cispo pg_clipfrac counts A = 0 tokens too: the toolkit keeps it as clamp_frac_all
        assert got[2]["clamp_frac_all"] == pytest.approx(ref_m["actor/pg_clipfrac"], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("mode", agg.LOSS_AGG_MODES)
def test_cispo_default_is_verl_with_no_lower_clamp_and_differs_from_verl_default(mode):
    """Documented difference: the toolkit's default clamp is ``min(r, 1+ε_high)``, i.e. verl with ε_low = 1."""
    differs = 0
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("cispo", old, ell, adv, mask, eps_low=0.2, eps_high=0.28, loss_agg_mode=mode)
        assert_same(got, reference(verl_cispo, old, ell, adv, mask, el=1.0, eh=0.28, mode=mode, plus_1e8=False))
        two = reference(verl_cispo, old, ell, adv, mask, el=0.2, eh=0.28, mode=mode, plus_1e8=False)
        binds = bool(((ell < math.log1p(-0.2)) & mask & (adv[:, None] != 0)).any())
        assert np.allclose(got[1].numpy(), two[1].numpy(), **TOL) == (not binds)
        differs += binds
    assert differs > 0


@pytest.mark.parametrize("cap", [0.28, 1.28, 5.0])
def test_cispo_absolute_matches_trl(cap):
    """TRL's cispo: ``epsilon_high`` is the absolute cap, aggregated by active tokens (toolkit mode ``dapo``)."""
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("cispo", old, ell, adv, mask, eps_high=cap, cispo_clamp="absolute", loss_agg_mode="dapo")
        ref_m: dict = {}
        assert_same(got, reference(trl_loss, old, ell, adv, mask, loss_type="cispo", el=0.2, eh=cap, metrics=ref_m))
        assert lm.to_peer(got[2], "cispo", "trl")["cispo_clip_ratio"] == pytest.approx(ref_m["cispo_clip_ratio"],
                                                                                         rel=1e-12, abs=1e-12)


# ----------------------------------------------------------------------------- m2po (no peer implementation)
@pytest.mark.parametrize("mode", agg.AGG_MODES)
def test_m2po_matches_its_paper_formula(mode):
    """M2PO: drop the largest (log r)² until the kept batch mean is ≤ τ; objective −A r over kept tokens."""
    tau = 0.04
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s)
        got = toolkit("m2po", old, ell, adv, mask, tau_m2=tau, loss_agg_mode=mode)
        sq = [(float(ell[i, t]) ** 2, i * ell.shape[1] + t) for i, t in zip(*np.nonzero(mask.numpy()))]
        sq.sort(key=lambda p: (-p[0], p[1]))
        keep = mask.clone()
        total, n = sum(v for v, _ in sq), len(sq)
        for v, j in sq:
            if total <= tau * n:
                break
            keep[j // ell.shape[1], j % ell.shape[1]] = False
            total, n = total - v, n - 1

        def ref(old, new, adv, mask):
            loss_mat = -adv[:, None] * torch.exp(new - old) * keep
            if mode in agg.TRL_LOSS_TYPES:
                norm = agg.token_normaliser(mode, mask)  # the aggregation itself is tested against TRL above
                return (norm * loss_mat).sum()
            return verl_agg(loss_mat, mask, mode, plus_1e8=False)
        assert_same(got, reference(ref, old, ell, adv, mask))


# ----------------------------------------------------------------------------- trajectory-level
def theory_weights(name, ell_i, eps, G):
    """THEORY §2 weights, written out: ``ρ``, ``min(ρ,1+ε)``, ``ρ·1{ρ≤1+ε}``, ``ρ·min(1,(1+ε)/ρ̄)``, ``ρ/ρ̄``."""
    rho = torch.exp(ell_i).reshape(-1, G)
    bar = rho.mean(1, keepdim=True)
    w = {"onpolicy": torch.ones_like(rho), "is": rho, "tis": torch.clamp(rho, max=1 + eps),
         "tic": torch.where(rho <= 1 + eps, rho, torch.zeros_like(rho)),
         "gmc": rho * torch.clamp((1 + eps) / bar, max=1.0), "snis": rho / bar}[name]
    return w.reshape(-1)


@pytest.mark.parametrize("name", ["onpolicy", "is", "tis", "tic", "gmc", "snis"])
@pytest.mark.parametrize("mode", [None] + list(agg.LOSS_AGG_MODES))
def test_trajectory_maps_match_verl_reinforce(name, mode):
    """verl's REINFORCE with sequence-level IS weights ``w_i``; THEORY's ĝ (default) is ``seq-mean-token-sum``."""
    G, eps = 4, 0.2
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s, G=G)
        ell = ell / 4  # trajectory sums of up to 40 tokens; keep ρ in a range where gmc and tis both bind
        got = toolkit(name, old, ell, adv, mask, eps=eps, group_size=G, loss_agg_mode=mode)
        w = theory_weights(name, ell.sum(1), eps, G)
        want = reference(verl_reinforce, old, ell, adv, mask, w=w, mode=mode or "seq-mean-token-sum", plus_1e8=False)
        assert_same(got, want)


def test_length_normalize_is_seq_mean_token_mean():
    old, ell, adv, mask = ragged_batch(3, G=4)
    a = toolkit("gmc", old, ell, adv, mask, group_size=4, length_normalize=True)
    b = toolkit("gmc", old, ell, adv, mask, group_size=4, loss_agg_mode="seq-mean-token-mean")
    assert a[3] == b[3] and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="length_normalize=True means"):
        toolkit("gmc", old, ell, adv, mask, group_size=4, length_normalize=True, loss_agg_mode="token-mean")


# ----------------------------------------------------------------------------- empty rows: verl vs TRL conventions
@pytest.mark.parametrize("mode", agg.AGG_MODES)
def test_empty_rows_follow_each_peer(mode):
    """verl's seq-mean-* modes skip all-masked rows; TRL's grpo/dr_grpo divide by every row."""
    seen = 0
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s, empty_rows=True)
        seen += int((~mask.any(1)).sum())
        got = toolkit("grpo", old, ell, adv, mask, loss_agg_mode=mode)
        if mode in agg.TRL_LOSS_TYPES:
            want = reference(trl_loss, old, ell, adv, mask, loss_type=mode, el=0.2, eh=0.28)
        else:
            want = reference(verl_vanilla, old, ell, adv, mask, el=0.2, eh=0.28, c=None, mode=mode, plus_1e8=False)
        assert_same(got, want)
        assert torch.all(got[1][~mask.any(1)] == 0)
    assert seen > 0


# ----------------------------------------------------------------------------- rollout-correction metrics
def test_kl_chi2_ess_match_verl_rollout_corr():
    for s in SEEDS:
        old, ell, adv, mask = ragged_batch(s, G=4)
        ell = ell / 8  # verl clamps log-ratio sums at ±20 (SAFETY_BOUND); stay inside so both are exact
        *_, m, _ = toolkit("tis", old, ell, adv, mask, eps=0.2, group_size=4)
        md = mask.double()
        lr = ell
        assert m["kl_k3"] == pytest.approx(float(masked_mean(torch.exp(lr) - lr - 1, md)), rel=1e-10, abs=1e-13)
        assert m["ppo_kl"] == pytest.approx(float(masked_mean(-lr, md)), rel=1e-10, abs=1e-13)
        assert m["chi2_token"] == pytest.approx(float(masked_mean(torch.exp(lr) ** 2, md) - 1), rel=1e-10, abs=1e-12)
        seq = (lr * md).sum(-1)
        assert m["chi2_seq"] == pytest.approx(float(torch.exp(2 * seq).mean() - 1), rel=1e-10, abs=1e-12)
        assert m["chi2_seq_centered"] == pytest.approx(float(((torch.exp(seq) - 1) ** 2).mean()), rel=1e-10, abs=1e-12)
        # ess_batch_w: the toolkit's unclamped ESS of tis's weights min(ρ, 1+ε); verl's own ESS (ratios clamped
        # to [1/thr, thr]) is ess_verl_seq, tested against verl's formula in tests/test_peer_metrics.py
        w = torch.clamp(torch.exp(seq), max=1.2)[:, None].expand_as(lr)
        wn0 = w / masked_mean(w, md)
        assert m["ess_batch_w"] == pytest.approx(float(1.0 / masked_mean(wn0 ** 2, md)), rel=1e-10)


def test_chi2_two_definitions_differ_and_agree_in_expectation_only():
    """``chi2_seq`` (verl, mean ρ² − 1) and ``chi2_seq_centered`` (project, mean (ρ−1)²) differ by 2(mean ρ − 1)."""
    old, ell, adv, mask = ragged_batch(11)
    ell = ell / 10
    *_, m, _ = toolkit("onpolicy", old, ell, adv, mask)
    rho = torch.exp(ell.sum(1))
    assert m["chi2_seq"] - m["chi2_seq_centered"] == pytest.approx(float(2 * (rho.mean() - 1)), rel=1e-9)
    assert m["chi2_seq"] != pytest.approx(m["chi2_seq_centered"], rel=1e-3)


def test_clip_fraction_excludes_zero_advantage():
    """Rows with A = 0 are never clipped (their gradient is 0); the old count included them."""
    old = torch.zeros(3, 3, dtype=torch.float64)
    ell = torch.log(torch.tensor([[1.5, 1.0, 0.5]] * 3, dtype=torch.float64))
    adv = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
    mask = torch.ones(3, 3, dtype=torch.bool)
    *_, m, _ = toolkit("grpo", old, ell, adv, mask)
    assert m["clipfrac_high"] == pytest.approx(1 / 9) and m["clipfrac_low"] == pytest.approx(1 / 9)
    assert m["clipfrac"] == pytest.approx(2 / 9)
    ref_m: dict = {}
    verl_vanilla(old, old + ell, adv, mask, el=0.2, eh=0.28, c=None, mode="token-mean", metrics=ref_m)
    assert m["clipfrac"] == pytest.approx(ref_m["actor/pg_clipfrac"])
