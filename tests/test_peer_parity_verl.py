"""verl's corrections and gpg against verl's OWN functions (verl 0.9.1 from PyPI, loaded by tests/_peer_verl.py).

Not transcriptions: ``compute_rollout_correction_weights``, ``compute_rollout_rejection_mask``,
``compute_policy_loss_vanilla``, ``compute_policy_loss_gpg`` and ``agg_loss`` are verl's code, run on CPU.
The setting is verl's decoupled mode at ``π_old = π_θ`` (one update per batch, PPO ratio 1), verl's
response mask an integer tensor as in its trainer (``attention_mask`` slice), ``token-mean`` aggregation
over the rejection-modified mask (``compute_rollout_correction_and_add_to_batch`` rewrites
``response_mask``). Compared: the loss and its gradient with respect to ``log π_θ``.

Tolerances from the dtype (tests/_tol.py): both sides sum the same ≤ N·T terms in another order, so
``k = 8·(N·T)`` ulps of the largest term; bf16 inputs are compared at bf16's eps (the toolkit computes in
float32 or float64, verl in the input dtype).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo import estimators as est
from asyncgrpo.estimators import token_level as tl

import _peer_verl
from _tol import assert_close

CA, RCH, VF, _MISSING = _peer_verl.load_or_missing()


@pytest.fixture(autouse=True)
def _verl_is_installed():
    _peer_verl.verl_is_installed(_MISSING)

CASES = ("spread_1e-3", "spread_1", "big_20", "big_25", "big_1e3", "empty_rows", "length_1", "adv_0", "n_1")
SEEDS = (0, 1, 2, 3)


def batch(case, seed):
    """``(logp_rollout, ell, adv, mask)`` in float64; ``ell`` the token log-ratios log π_θ − log π_rollout."""
    rng = np.random.default_rng([seed, CASES.index(case)])
    N = 1 if case == "n_1" else int(rng.integers(3, 10))
    T = 1 if case == "length_1" else int(rng.integers(2, 20))
    lengths = rng.integers(1, T + 1, N)
    mask = np.arange(T)[None, :] < lengths[:, None]
    if case == "empty_rows":
        mask[rng.random(N) < 0.4] = False
        mask[0, 0] = True
    scale = 1e-3 if case == "spread_1e-3" else (1e-2 if case.startswith("big") else 1.0)
    ell = rng.normal(0.0, scale, (N, T))
    if case.startswith("big"):
        big = {"big_20": 20.0, "big_25": 25.0, "big_1e3": 1e3}[case]
        ell[rng.random((N, T)) < 0.2] = big * rng.choice([-1.0, 1.0])
    adv = rng.uniform(-2, 2, N)
    if case == "adv_0":
        adv[:] = 0.0
    else:
        adv[rng.random(N) < 0.2] = 0.0
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    return t(rng.normal(-2, 0.7, (N, T))), t(np.where(mask, ell, 0.0)), t(adv), torch.tensor(mask)


VERL = {  # toolkit name → verl's rollout-correction options (the presets in verl/trainer/config/algorithm.py)
    "verl_tok_tis": dict(rollout_is="token", rollout_is_threshold=2.0),
    "verl_seq_tis": dict(rollout_is="sequence", rollout_is_threshold=2.0),
    "verl_seq_rs": dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_sum_k1",
                        rollout_rs_threshold="0.5_2.0"),
    "verl_geo_rs": dict(rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001"),
}


def verl_loss(name, logp_roll, ell, adv, mask, dtype=torch.float64):
    """verl's loss and gradient wrt log π_θ (decoupled mode, π_old = π_θ, token-mean), computed by verl."""
    logp = (logp_roll + ell).to(dtype).clone().requires_grad_(True)
    resp = mask.long()  # verl's response_mask is an integer slice of attention_mask
    log_ratio = (logp.detach() - logp_roll.to(dtype))
    opts = VERL.get(name, {})
    w = None
    if opts.get("rollout_is"):
        w, _ = RCH.compute_rollout_correction_weights(log_ratio, resp, opts["rollout_is"],
                                                      opts["rollout_is_threshold"])
    if opts.get("rollout_rs"):
        resp, _ = RCH.compute_rollout_rejection_mask(log_ratio, resp, opts["rollout_rs"],
                                                     opts["rollout_rs_threshold"])
    cfg = _peer_verl.Cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
                         global_batch_info={})
    A = adv.to(dtype)[:, None].expand_as(logp)
    fn = CA.compute_policy_loss_gpg if name == "gpg" else CA.compute_policy_loss_vanilla
    loss, _ = fn(logp.detach(), logp, A, resp, loss_agg_mode="token-mean", config=cfg, rollout_is_weights=w)
    if not resp.any():
        return loss.detach(), torch.zeros_like(logp)
    loss.backward()
    return loss.detach(), logp.grad


def toolkit_loss(name, logp_roll, ell, adv, mask, dtype=torch.float64, mode="token-mean"):
    lp = (logp_roll + ell).to(dtype).clone().requires_grad_(True)
    kw = dict(group_size=1) if name in est.TRAJECTORY_ESTIMATORS else {}
    loss = tl.policy_loss(name, lp, logp_roll.to(dtype), adv.to(dtype), mask, loss_agg_mode=mode, **kw)
    loss.backward()
    return loss.detach(), lp.grad


def _k(mask):
    return 8.0 * max(int(mask.numel()), 1)


NAMES = tuple(VERL) + ("gpg",)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", NAMES)
def test_loss_and_gradient_equal_verls_own_functions(name, case):
    """At ``token-mean``: the toolkit's gradient is verl's, every seed; the loss too where verl's is defined.

    The loss compared is the gradient-carrying surrogate, so gpg (verl: ``−A·log π``) is compared as a value
    and the corrections (verl: ``−A·w·ratio``, value ``−A·w``) through their gradient and their value."""
    for seed in SEEDS:
        lr, ell, adv, mask = batch(case, seed)
        v_loss, v_grad = verl_loss(name, lr, ell, adv, mask)
        t_loss, t_grad = toolkit_loss(name, lr, ell, adv, mask)
        assert_close(t_grad, v_grad, _k(mask), scale=max(float(v_grad.abs().max()), 1.0) * 2.0,
                     msg=f"{name} {case} seed {seed}: gradient")
        if name == "gpg":
            assert_close(t_loss, v_loss, _k(mask), scale=float((adv[:, None] * (lr + ell)).abs().max()),
                         msg=f"{name} {case} seed {seed}: loss")


@pytest.mark.parametrize("name", NAMES)
def test_bf16_inputs_agree_with_verl_at_bf16_resolution(name):
    """bf16 log-probs: verl computes in bf16, the toolkit in float32 (docs/losses.md); they agree to a few bf16
    ulps of the largest gradient entry (``k = 8``: the weights' exp and the clamp round once each in bf16)."""
    for seed in SEEDS:
        lr, ell, adv, mask = batch("spread_1", seed)
        lr, ell = lr.to(torch.bfloat16).double(), ell.to(torch.bfloat16).double()  # bf16-representable inputs
        v_loss, v_grad = verl_loss(name, lr, ell, adv, mask, dtype=torch.bfloat16)
        t_loss, t_grad = toolkit_loss(name, lr, ell, adv, mask, dtype=torch.bfloat16)
        assert_close(t_grad.double(), v_grad.double(), 8.0, dtype=torch.bfloat16,
                     scale=float(v_grad.double().abs().max()), msg=f"{name} seed {seed}: bf16 gradient")


def _geo_edge_row(T):
    """One row whose mean k1 statistic sits just above ``log 1.001`` (relative 5e-10), so dividing its sum by
    ``T + 1e-8`` instead of ``T`` moves it inside verl's band."""
    x = -np.log(1.001) * (1 + 5e-10)
    return torch.full((1, T), x, dtype=torch.float64)


@pytest.mark.parametrize("T", (3, 7, 50))
def test_geo_rs_at_the_band_edge_divides_by_T_as_verl(T):
    """verl's ``masked_mean`` adds 1e-8 to the integer mask's count, in float32, where it vanishes: verl divides
    by ``T``. The toolkit's verl_geo_rs must reject the edge row as verl's own ``compute_rollout_rejection_mask``."""
    ell = _geo_edge_row(T)
    mask = torch.ones_like(ell, dtype=torch.bool)
    kept, _ = RCH.compute_rollout_rejection_mask(ell, mask.long(), "seq_mean_k1", "0.999_1.001")
    want = bool(kept.bool().any())
    k = tl.token_coefficients_torch("verl_geo_rs", ell, mask, torch.ones(1, dtype=torch.float64))
    assert bool((k > 0).any()) == want, ("torch", k, kept)
    for backend in (tl.token_coefficients, tl.token_coefficients_numba):
        k = backend("verl_geo_rs", ell.numpy(), mask.numpy(), np.ones(1))
        assert bool((np.asarray(k) > 0).any()) == want, (backend.__name__, k, kept)


def test_seq_rs_clamps_each_token_as_verl():
    """verl's ``seq_sum_k1`` clamps each token's ℓ to ±20 before summing: ℓ = [25, −20] has statistic 0 (kept,
    IS weight min(e^5, 2) = 2). ``verl_policy_loss`` with the ``verl_seq_rs`` setting (verl's
    ``decoupled_seq_is_rs``) keeps the row and has verl's gradient."""
    from asyncgrpo.integrations.verl import verl_policy_loss

    ell = torch.tensor([[25.0, -20.0]], dtype=torch.float64)
    mask = torch.ones_like(ell, dtype=torch.bool)
    lr = torch.zeros_like(ell)
    v_loss, v_grad = verl_loss("verl_seq_rs", lr, ell, torch.ones(1, dtype=torch.float64), mask)
    lp = (lr + ell).clone().requires_grad_(True)
    verl_policy_loss(lp, lp.detach(), lr, torch.ones(1, dtype=torch.float64), mask, "verl_seq_rs").backward()
    assert float(v_grad.abs().max()) > 0  # verl keeps the row
    assert_close(lp.grad, v_grad, 8.0, scale=1.0)


def test_registry_verl_seq_rs_clamps_each_token_as_verl():
    """The same row through ``policy_loss("verl_seq_rs")``: the rejection statistic clamps each token before
    summing (``Σ_t clamp(ℓ_t, ±20) = 0``: kept, as verl keeps it; the clamped sum 5 would reject it)."""
    ell = torch.tensor([[25.0, -20.0]], dtype=torch.float64)
    mask = torch.ones_like(ell, dtype=torch.bool)
    lr = torch.zeros_like(ell)
    v_loss, v_grad = verl_loss("verl_seq_rs", lr, ell, torch.ones(1, dtype=torch.float64), mask)
    t_loss, t_grad = toolkit_loss("verl_seq_rs", lr, ell, torch.ones(1, dtype=torch.float64), mask)
    assert float(v_grad.abs().max()) > 0  # verl keeps the row
    assert_close(t_grad, v_grad, 8.0, scale=1.0)
    _, m = tl.policy_loss("verl_seq_rs", lr + ell, lr, torch.ones(1, dtype=torch.float64), mask, group_size=1,
                          loss_agg_mode="token-mean", return_metrics=True)
    assert m["rs_masked_frac"] == 0.0 and m["rs_seq_masked_frac"] == 0.0  # verl's metrics: nothing rejected


@pytest.mark.parametrize("case", ("spread_1", "empty_rows"))
def test_gpg_at_its_defaults_is_verls_gpg_at_verls_defaults(case):
    """A verl user's gpg (``compute_policy_loss_gpg``, actor ``loss_agg_mode`` default) and the toolkit's gpg
    with no option given: the same loss and gradient."""
    from asyncgrpo.estimators.maps.gpg import PEER_DEFAULTS

    for seed in SEEDS:
        lr, ell, adv, mask = batch(case, seed)
        logp = (lr + ell).clone().requires_grad_(True)
        cfg = _peer_verl.Cfg(global_batch_info={})
        v_loss, _ = CA.compute_policy_loss_gpg(logp.detach(), logp, adv[:, None].expand_as(logp), mask.long(),
                                               loss_agg_mode=PEER_DEFAULTS["loss_agg_mode"], config=cfg)
        v_loss.backward()
        lp = (lr + ell).clone().requires_grad_(True)
        tl.policy_loss("gpg", lp, lr, adv, mask).backward()
        assert_close(lp.grad, logp.grad, _k(mask), scale=max(float(logp.grad.abs().max()), 1.0))


METRICS = {  # toolkit metric → verl's (rollout_corr/ prefix dropped), produced by verl's own functions
    "is_frac_high": "rollout_is_ratio_fraction_high", "is_frac_low": "rollout_is_ratio_fraction_low",
    "rs_masked_frac": "rollout_rs_masked_fraction", "rs_seq_masked_frac": "rollout_rs_seq_masked_fraction",
}


def verl_metrics(name, ell, mask):
    opts, out = VERL[name], {}
    if opts.get("rollout_is"):
        out.update(RCH.compute_rollout_correction_weights(ell, mask.long(), opts["rollout_is"],
                                                          opts["rollout_is_threshold"])[1])
    if opts.get("rollout_rs"):
        out.update(RCH.compute_rollout_rejection_mask(ell, mask.long(), opts["rollout_rs"],
                                                      opts["rollout_rs_threshold"])[1])
    return out


def toolkit_metrics(name, lr, ell, adv, mask):
    lp = (lr + ell).clone().requires_grad_(True)
    kw = dict(group_size=1) if name in est.TRAJECTORY_ESTIMATORS else {}
    return tl.policy_loss(name, lp, lr, adv, mask, loss_agg_mode="token-mean", return_metrics=True, **kw)[1]


def _check_metrics(name, lr, ell, adv, mask, where):
    ours, theirs = toolkit_metrics(name, lr, ell, adv, mask), verl_metrics(name, ell, mask)
    for k, v in METRICS.items():
        if v in theirs:
            # verl averages in float32 (``.float().mean()``) or with masked_mean's +1e-8: a share of ≤ N·T items,
            # exact in float64, off by ≤ a few float32 ulps there
            assert ours[k] == pytest.approx(theirs[v], rel=8 * torch.finfo(torch.float32).eps, abs=1e-7), \
                (where, k, ours[k], theirs[v])


@pytest.mark.parametrize("case", tuple(c for c in CASES if c != "empty_rows"))
@pytest.mark.parametrize("name", tuple(VERL))
def test_metrics_equal_verls_own(name, case):
    """The fractions the toolkit logs under verl's names are verl's values (``compute_is_metrics``,
    ``compute_rs_metrics`` through verl's two entry points). verl raises on a batch without a real token."""
    for seed in SEEDS:
        lr, ell, adv, mask = batch(case, seed)
        _check_metrics(name, lr, ell, adv, mask, f"{case} seed {seed}")


@pytest.mark.parametrize("name", ("verl_seq_tis", "verl_seq_rs"))
def test_sequence_fraction_high_compares_against_log_C_in_float32_as_verl(name):
    """verl compares ``ℓ_i`` with ``torch.log(torch.tensor(C))``, a float32 ``log 2`` (0.69314718246…, above the
    float64 0.69314718056…): rows with ``ℓ_i`` between the two count as high for a float64 comparison only. Same
    for ``log ½``."""
    ell = torch.tensor([[0.6931471815], [-0.6931471815], [0.1], [0.7]], dtype=torch.float64)
    mask = torch.ones_like(ell, dtype=torch.bool)
    _check_metrics(name, torch.zeros_like(ell), ell, torch.ones(4, dtype=torch.float64), mask, "log-2 edge")


def test_registration_into_verls_own_policy_loss_registry():
    """``asyncgrpo.integrations.verl.register_policy_losses`` registers into verl's own ``POLICY_LOSS_REGISTRY``
    (verl 0.9.1's ``register_policy_loss``/``get_policy_loss_fn``), and the registered loss equals verl's
    ``agg_loss`` on ``−A·sg(w)·log π`` at verl's default ``token-mean``."""
    from asyncgrpo.integrations import verl as av

    with _peer_verl.patched():
        av.register_policy_losses()
        for n in av.LOSS_NAMES:
            assert CA.get_policy_loss_fn(n) is av.trajectory_policy_loss
    lr, ell, adv, mask = batch("spread_1", 0)
    w = torch.rand(ell.shape[0], 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * mask
    lp = (lr + ell).clone().requires_grad_(True)
    cfg = _peer_verl.Cfg(global_batch_info={})
    ours, _ = av.trajectory_policy_loss(lr, lp, adv[:, None] * mask, mask, loss_agg_mode="token-mean", config=cfg,
                                        rollout_is_weights=w)
    ref = CA.agg_loss(-(adv[:, None] * mask) * w * lp, mask.long(), "token-mean")
    g1, = torch.autograd.grad(ours, lp)
    g2, = torch.autograd.grad(ref, lp)
    assert_close(g1, g2, _k(mask), scale=max(float(g2.abs().max()), 1.0))
    assert "verl" not in __import__("sys").modules  # the patch is undone: no other test sees a verl module


def verl_logged(name, lr, ell, adv, mask):
    """What verl logs for a correction run at π_old = π_θ: ``rollout_corr/*`` from its two entry points and
    ``actor/*`` from ``compute_policy_loss_vanilla``."""
    logp = lr + ell
    cfg = _peer_verl.Cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
                         global_batch_info={})
    _, actor = CA.compute_policy_loss_vanilla(logp, logp, adv[:, None].expand_as(logp), mask.long(), config=cfg)
    off = RCH.compute_offpolicy_metrics(logp, lr, mask.long())
    rc = {**verl_metrics(name, ell, mask), **off}
    return {**{f"rollout_corr/{k}": v for k, v in rc.items()}, **actor,
            "actor/pg_loss": float(verl_loss(name, lr, ell, adv, mask)[0])}


@pytest.mark.parametrize("name", tuple(VERL))
def test_every_verl_name_the_toolkit_emits_carries_verls_value(name):
    """``to_peer(metrics, name, "verl")``: each name it emits is one verl emits for this correction, with verl's
    value (verl 0.9.1's own functions, float32 averages: a few float32 ulps)."""
    from asyncgrpo.estimators import loss_metrics as lm

    for seed in SEEDS:
        lr, ell, adv, mask = batch("spread_1", seed)
        ours = lm.to_peer(toolkit_metrics(name, lr, ell, adv, mask), name, "verl")
        theirs = verl_logged(name, lr, ell, adv, mask)
        for k, v in ours.items():
            assert k in theirs, (name, k, "emitted, verl logs no such name for this correction")
            if k == "actor/pg_loss" and math.isnan(theirs[k]):
                # documented difference (docs/losses.md): every row rejected → verl's token-mean is 0/0 = NaN,
                # the toolkit logs 0; only then
                assert theirs["rollout_corr/rollout_rs_seq_masked_fraction"] == 1.0 and v == 0.0, (name, theirs)
                continue
            assert v == pytest.approx(theirs[k], rel=8 * torch.finfo(torch.float32).eps, abs=1e-7), (name, k, v, theirs[k])
