"""TRL's losses and mask against TRL's OWN code: the installed ``trl`` (the ``trl`` extra, 1.16.0) runs
``GRPOTrainer._compute_loss`` and ``GRPOTrainer.get_off_policy_mask`` on the batch, with the defaults of a real
``GRPOConfig()``. Not transcriptions: a change in TRL changes what is compared.

The trainer is a bare ``GRPOTrainer`` instance (``object.__new__``) whose attributes are set from the config as
``GRPOTrainer.__init__`` sets them; the model forward (``_get_per_token_logps_and_entropies``) returns the
test's ``log π_θ`` and one process' accelerator is the identity. Compared in float64: the loss value and its
gradient with respect to ``log π_θ``; tolerances from the dtype (tests/_tol.py), ``k = 8·N·T`` ulps of the
largest term for sums of ``N·T`` terms in another order.
"""
from __future__ import annotations

import functools
import types
from collections import defaultdict

import numpy as np
import pytest
import torch

from asyncgrpo.estimators import token_level as tl

from _tol import assert_close
from test_peer_parity_verl import CASES, SEEDS, batch  # the same edge cases as the verl suite

try:  # the trl extra is part of `make install` (.[all]): a missing TRL fails every test here, never skips
    import trl.trainer.grpo_trainer as trl_grpo
    _MISSING = None
except ImportError as e:
    trl_grpo, _MISSING = None, f"TRL is not installed (pip install -e '.[trl]'): {e}"


@pytest.fixture(autouse=True)
def _trl_is_installed():
    if _MISSING:
        pytest.fail(_MISSING)


@functools.lru_cache(maxsize=1)
def config():
    """A real ``GRPOConfig()`` on CPU (its defaults are what a TRL user gets)."""
    return trl_grpo.GRPOConfig(report_to=[], use_cpu=True, bf16=False)


def trl_loss(loss_type, logp_roll, ell, adv, mask, *, level=None, old_is_rollout=True, **overrides):
    """TRL's ``_compute_loss`` on ``log π_θ = logp_roll + ell``: returns ``(loss, d loss/d log π_θ, metrics)``.

    ``old_is_rollout``: ``old_per_token_logps = logp_roll`` (TRL's multi-iteration or vLLM case, the ratio
    is ``π_θ/μ``); else it is absent (``π_old = π_θ``) and ``sampling_per_token_logps = logp_roll`` feeds the
    off-policy mask only."""
    args = config()
    tr = object.__new__(trl_grpo.GRPOTrainer)
    s = dict(loss_type=loss_type, importance_sampling_level=level or args.importance_sampling_level,
             off_policy_mask_threshold=args.off_policy_mask_threshold, top_entropy_quantile=args.top_entropy_quantile,
             epsilon_low=args.epsilon, epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
             beta=0.0, use_vllm=False, vllm_importance_sampling_correction=args.vllm_importance_sampling_correction,
             aux_loss_enabled=False, _entropy_bonus_enabled=False, current_gradient_accumulation_steps=1,
             args=args, model=types.SimpleNamespace(training=True), _metrics={"train": defaultdict(list)},
             accelerator=types.SimpleNamespace(gather=lambda x: x, reduce=lambda x, reduction: x, num_processes=1,
                                               gather_for_metrics=lambda x: x, sync_gradients=True))
    s.update(overrides)
    tr.__dict__.update(s)
    lp = (logp_roll + ell).clone().requires_grad_(True)
    tr._get_per_token_logps_and_entropies = lambda *a, **k: (lp, torch.zeros_like(lp), None)
    N, T = mask.shape
    inputs = dict(prompt_ids=torch.zeros(N, 1, dtype=torch.long), prompt_mask=torch.ones(N, 1, dtype=torch.long),
                  completion_ids=torch.zeros(N, T, dtype=torch.long), completion_mask=mask.long(),
                  advantages=adv.clone())
    if old_is_rollout:
        inputs["old_per_token_logps"] = logp_roll
    else:
        inputs["sampling_per_token_logps"] = logp_roll
    loss = tr._compute_loss(None, inputs)
    if loss.requires_grad:
        loss.backward()
    grad = lp.grad if lp.grad is not None else torch.zeros_like(lp)
    return loss.detach(), grad, {k: v[-1] for k, v in tr._metrics["train"].items()}


def toolkit_loss(name, logp_roll, ell, adv, mask, **kw):
    lp = (logp_roll + ell).clone().requires_grad_(True)
    loss = tl.policy_loss(name, lp, logp_roll, adv, mask, loss_agg_mode="grpo", **kw)
    loss.backward()
    return loss.detach(), lp.grad


def _k(mask):
    return 8.0 * max(int(mask.numel()), 1)


def _compare(name, case, trl_kw, tk_kw, tol_dtype=None):
    """Gradient of the toolkit's loss equals TRL's, every seed of ``case``, at the finite entries of TRL's
    (TRL overflows to NaN where the toolkit, in log space, stays finite: asserted, not hidden)."""
    trl_kw = dict(trl_kw)
    loss_type = trl_kw.pop("loss_type")
    for seed in SEEDS:
        lr, ell, adv, mask = batch(case, seed)
        t_loss, t_grad, _ = trl_loss(loss_type, lr, ell, adv, mask, **trl_kw)
        o_loss, o_grad = toolkit_loss(name, lr, ell, adv, mask, **tk_kw)
        assert bool(torch.isfinite(o_grad).all()), f"{name} {case} seed {seed}: toolkit gradient not finite"
        fin = torch.isfinite(t_grad)
        if case != "big_1e3":
            assert bool(fin.all()), f"{name} {case} seed {seed}: TRL gradient not finite"
        scale = max(float(t_grad[fin].abs().max()) if fin.any() else 0.0, 1.0)
        assert_close(o_grad[fin], t_grad[fin], _k(mask), scale=scale, dtype=tol_dtype,
                     msg=f"{name} {case} seed {seed}: gradient")


@pytest.mark.parametrize("case", CASES)
def test_trl_seq_mask_equals_trls_get_off_policy_mask_in_compute_loss(case):
    """OPSM at δ = 0.5 (``off_policy_mask_threshold``), ``loss_type="grpo"``, π_old = π_θ, μ the sampler."""
    _compare("trl_seq_mask", case, dict(loss_type="grpo", off_policy_mask_threshold=0.5, old_is_rollout=False), {})


@pytest.mark.parametrize("case", CASES)
def test_luspo_at_matched_settings_equals_trls_compute_loss(case):
    """luspo at TRL's paper setting (``importance_sampling_level="sequence"``) and the toolkit's ε = (0.2, 0.28)."""
    _compare("luspo", case, dict(loss_type="luspo", level="sequence", epsilon_low=0.2, epsilon_high=0.28),
             dict(eps_low=0.2, eps_high=0.28))


@pytest.mark.parametrize("case", CASES)
def test_sapo_equals_trls_compute_loss(case):
    """sapo at TRL's default temperatures (``sapo_temperature_pos/neg`` = 1.0/1.05), token level.

    TRL builds ``τ`` with ``torch.where(A > 0, 1.0, 1.05)`` from Python floats, a float32 tensor (1.05 becomes
    1.0499999523), so its float64 gradient carries float32 rounding of ``τ``: compared at float32's eps."""
    _compare("sapo", case, dict(loss_type="sapo", level="token"), {}, tol_dtype=torch.float32)


def test_trl_defaults_are_the_values_the_docs_name():
    """The defaults a TRL user gets, read from TRL itself, as docs/losses.md names them."""
    a = config()
    assert (a.epsilon, a.epsilon_high, a.importance_sampling_level) == (0.2, None, "token")
    assert a.off_policy_mask_threshold is None and (a.sapo_temperature_pos, a.sapo_temperature_neg) == (1.0, 1.05)


def test_trl_seq_mask_on_rows_around_the_threshold():
    """Rows whose mean KL ``−ℓ_i/T_i`` spans [0, 1] around δ = 0.5 (both advantage signs): the toolkit keeps
    exactly the rows TRL's ``get_off_policy_mask`` keeps, and its gradient is TRL's."""
    rng = np.random.default_rng(7)
    N, T = 40, 6
    mask = torch.tensor(np.arange(T)[None, :] < rng.integers(1, T + 1, N)[:, None])
    kl = torch.tensor(rng.uniform(0.0, 1.0, N), dtype=torch.float64)
    ell = torch.where(mask, -kl[:, None] + torch.tensor(rng.normal(0, 0.05, (N, T))), torch.zeros(N, T).double())
    adv = torch.tensor(rng.choice([-1.0, 1.0], N) * rng.uniform(0.1, 2, N), dtype=torch.float64)
    lr = torch.tensor(rng.normal(-2, 0.7, (N, T)), dtype=torch.float64)
    keep = trl_grpo.GRPOTrainer.get_off_policy_mask(adv[:, None], lr + ell, lr, mask.long(), 0.5)[:, 0].bool()
    assert 5 <= int((~keep).sum()) <= N - 5  # the threshold binds on both sides
    k = tl.token_coefficients_torch("trl_seq_mask", ell, mask, adv)
    assert ((k > 0).any(dim=1) == (keep & mask.any(dim=1))).all()
    _, t_grad, _ = trl_loss("grpo", lr, ell, adv, mask, off_policy_mask_threshold=0.5, old_is_rollout=False)
    _, o_grad = toolkit_loss("trl_seq_mask", lr, ell, adv, mask)
    assert_close(o_grad, t_grad, _k(mask), scale=max(float(t_grad.abs().max()), 1.0))


@pytest.mark.parametrize("empty_rows", (False, True))
def test_luspo_at_its_defaults_is_trls_luspo_at_trls_defaults(empty_rows):
    """A TRL user's luspo (``GRPOConfig()`` defaults, the paper's sequence level) and the toolkit's luspo with no
    option given: the same gradient, on rows whose ratio ``s_i`` lies in 1.22 or 1.26 (between TRL's 1 + 0.2 and
    the toolkit's 1 + 0.28) or 0.75/1.1, with every other row's advantage positive so that ε_high binds."""
    from asyncgrpo.estimators.maps.luspo import PEER_DEFAULTS

    assert PEER_DEFAULTS["epsilon"] == config().epsilon
    assert PEER_DEFAULTS["epsilon_high"] == (config().epsilon_high or config().epsilon)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        lr, ell, adv, mask = batch("empty_rows" if empty_rows else "spread_1", seed)
        s_i = torch.tensor(rng.choice([0.75, 1.1, 1.22, 1.26], mask.shape[0]), dtype=torch.float64)
        adv[::2] = adv[::2].abs() + 0.1
        ell = torch.where(mask, torch.log(s_i)[:, None].expand_as(ell), torch.zeros_like(ell))
        _, t_grad, _ = trl_loss("luspo", lr, ell, adv, mask, level=PEER_DEFAULTS["importance_sampling_level"])
        lp = (lr + ell).clone().requires_grad_(True)
        tl.policy_loss("luspo", lp, lr, adv, mask).backward()
        assert_close(lp.grad, t_grad, _k(mask), scale=max(float(t_grad.abs().max()), 1.0))


TRL_RUNS = {  # toolkit name → (TRL loss_type, _compute_loss settings); the toolkit side at loss_agg_mode="grpo"
    "trl_seq_mask": ("grpo", dict(off_policy_mask_threshold=0.5, old_is_rollout=False), {}),
    "luspo": ("luspo", dict(level="sequence"), {}),  # TRL's defaults on both sides (ε = 0.2, 0.2)
    "sapo": ("sapo", dict(level="token"), {}),
    "grpo": ("grpo", dict(level="token"), dict(eps_low=0.2, eps_high=0.2)),
    "gspo": ("grpo", dict(level="sequence"), dict(eps_low=0.2, eps_high=0.2)),
}
#: what TRL's _compute_loss logs besides its loss that policy_loss cannot know (it takes no entropies)
_NOT_KNOWN = {"entropy"}


@pytest.mark.parametrize("name", ["sapo", "trl_seq_mask", "luspo", "grpo", "gspo"])
def test_every_trl_name_the_toolkit_emits_carries_trls_value(name):
    """``to_peer(metrics, name, "trl")``: each name it emits is one TRL's ``_compute_loss`` logs for this loss
    (``loss``: the value it returns), with TRL's value; float32 ulps for TRL's ``.float()`` shares."""
    from asyncgrpo.estimators import loss_metrics as lm

    loss_type, kw, tk = TRL_RUNS[name]
    for case in ("spread_1", "empty_rows", "adv_0"):
        for seed in SEEDS:
            lr, ell, adv, mask = batch(case, seed)
            t_loss, _, theirs = trl_loss(loss_type, lr, ell, adv, mask, **kw)
            theirs["loss"] = float(t_loss)
            lp = (lr + ell).clone().requires_grad_(True)
            m = tl.policy_loss(name, lp, lr, adv, mask, loss_agg_mode="grpo", return_metrics=True, **tk)[1]
            emitted = lm.to_peer(m, name, "trl")
            # every name TRL logs for this loss is emitted (issue 57: low_min/high_max were missing), and no other
            assert set(emitted) == set(theirs) - _NOT_KNOWN, (name, sorted(set(emitted) ^ (set(theirs) - _NOT_KNOWN)))
            for k, v in emitted.items():
                assert k in theirs, (name, case, k, "emitted, TRL logs no such name for this loss")
                assert v == pytest.approx(theirs[k], rel=8 * torch.finfo(torch.float32).eps, abs=1e-7), \
                    (name, case, seed, k, v, theirs[k])
