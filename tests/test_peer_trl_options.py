"""TRL's loss at NON-default settings against TRL's OWN ``GRPOTrainer._compute_loss`` (the installed TRL 1.16.0).

``trl_policy_loss`` (asyncgrpo.integrations.trl) takes ``GRPOConfig``'s option names: ``off_policy_mask_threshold``,
``sapo_temperature_pos/neg``, ``delta``, ``importance_sampling_level`` (token-level luspo), ``top_entropy_quantile``,
the vLLM importance-sampling correction (``vllm_importance_sampling_mode`` × clip bounds) and the loss types'
normalisers. TRL's ``_compute_loss`` runs on a bare trainer whose attributes are set as ``GRPOTrainer.__init__`` sets
them from the options (a real ``GRPOConfig()``'s defaults otherwise), with the test's ``log π_θ`` and entropies as
the model's output; three policies (``π_θ ≠ π_old ≠ μ``). Compared: the gradient wrt ``log π_θ`` (TRL's is finite
on these batches, asserted), ``k = 8·N·T`` float64 ulps of the largest (float32 for sapo: TRL's ``τ`` is a float32
tensor).

The vLLM ratio ``ρ̃`` is TRL's own too: TRL computes it in ``_generate_and_score_completions`` (generation);
:func:`trl_vllm_ratio` runs that method on a bare trainer whose sampler (``_generate``) returns the test's
completions and log-probs (TRL stores them in float32, so the test's ``μ`` is float32-representable) and whose
model returns ``log π_old``, and reads ``vllm_importance_sampling_ratio`` at TRL's next model call (the reference
model's, ``beta ≠ 0``), where the test stops it.
"""
from __future__ import annotations

import functools
import inspect
import math
import types
from collections import defaultdict

import numpy as np
import pytest
import torch

from _tol import assert_close
from asyncgrpo.estimators.maps.trl_loss_config import TRLLoss

try:
    import trl.trainer.grpo_trainer as trl_grpo
    from asyncgrpo.integrations.trl import trl_policy_loss
    _MISSING = None
except ImportError as e:
    trl_grpo = trl_policy_loss = None
    _MISSING = f"TRL is not installed (pip install -e '.[trl]'): {e}"


@pytest.fixture(autouse=True)
def _trl_is_installed():
    if _MISSING:
        pytest.fail(_MISSING)


SEEDS = (0, 1, 2)


@functools.lru_cache(maxsize=1)
def _defaults():
    a = trl_grpo.GRPOConfig(report_to=[], use_cpu=True, bf16=False)
    return dict(vars(a))


def batch(seed, drift=0.0):
    """``(log π_θ, log π_old, log μ, A, mask, entropies)`` float64 with every policy different; ``drift`` is added
    to every ``log π_θ − log π_old``."""
    rng = np.random.default_rng([seed, 3636])
    N, T = int(rng.integers(5, 12)), int(rng.integers(3, 12))
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, N)[:, None]
    mu = rng.normal(-2.0, 0.7, (N, T))
    old = mu + rng.normal(0.0, 0.15, (N, T))
    cur = old + rng.normal(0.0, 0.15, (N, T)) + 0.8 * (rng.random((N, T)) < 0.1) + drift
    adv = rng.uniform(-2, 2, N)
    adv[rng.random(N) < 0.15] = 0.0
    ent = rng.gamma(2.0, 1.0, (N, T))
    t = lambda a: torch.tensor(np.where(mask, a, 0.0), dtype=torch.float64)  # noqa: E731
    mu = mu.astype(np.float32).astype(np.float64)  # the sampler's log-probs as TRL stores them (float32)
    return t(cur), t(old), t(mu), torch.tensor(adv), torch.tensor(mask), t(ent)


class _Stop(Exception):
    pass


def trl_vllm_ratio(cfg, old, mu, mask):
    """TRL's own vLLM IS ratio: ``GRPOTrainer._generate_and_score_completions`` run up to it (module docstring)."""
    N = mask.shape[0]
    tr = object.__new__(trl_grpo.GRPOTrainer)
    args = types.SimpleNamespace(per_device_train_batch_size=N, steps_per_generation=1, gradient_accumulation_steps=1,
                                 gradient_checkpointing_kwargs=None)
    tr.__dict__.update(
        environment_factories=None, environments=None, tools=None, _is_vlm=False, pad_to_multiple_of=None,
        mask_truncated_completions=False, args=args, num_iterations=1, beta=0.1, ref_model=object(), use_vllm=True,
        accelerator=types.SimpleNamespace(device="cpu", gather=lambda x: x),
        _tokenizer=types.SimpleNamespace(pad_token_id=0),
        model=types.SimpleNamespace(training=True, is_gradient_checkpointing=False),
        vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=cfg.vllm_importance_sampling_mode,
        vllm_importance_sampling_clip_min=cfg.vllm_importance_sampling_clip_min,
        vllm_importance_sampling_clip_max=cfg.vllm_importance_sampling_clip_max)
    lengths = mask.sum(1).tolist()
    sampled = [[float(mu[i, t]) for t in range(L)] for i, L in enumerate(lengths)]
    tr._generate = lambda prompts: ([[1, 2]] * N, [[5] * L for L in lengths], None, ["x"] * N, sampled, {}, None, None)
    calls = []

    def model_logps(model, *a, **k):
        calls.append(model)
        if len(calls) == 1:
            return old.clone(), None, None
        raise _Stop(inspect.currentframe().f_back.f_locals["vllm_importance_sampling_ratio"])

    tr._get_per_token_logps_and_entropies = model_logps
    try:
        tr._generate_and_score_completions([{"prompt": "ab"}] * N)
    except _Stop as stop:
        return stop.args[0]
    raise AssertionError("TRL's generation step did not reach its vLLM importance-sampling ratio")


def trl_grad(opts, cur, old, mu, adv, mask, ent, accum=1):
    """TRL's ``_compute_loss`` gradient wrt ``log π_θ`` under ``opts`` (``GRPOConfig`` names)."""
    cfg = TRLLoss.from_config(opts)
    args = types.SimpleNamespace(**{**_defaults(), **opts})
    tr = object.__new__(trl_grpo.GRPOTrainer)
    tr.__dict__.update(
        loss_type=cfg.loss_type, importance_sampling_level=cfg.importance_sampling_level,
        off_policy_mask_threshold=cfg.off_policy_mask_threshold, top_entropy_quantile=cfg.top_entropy_quantile,
        epsilon_low=cfg.epsilon, epsilon_high=cfg.eps_high, beta=0.0, use_vllm=cfg.use_vllm,
        vllm_importance_sampling_correction=cfg.vllm_importance_sampling_correction,
        max_completion_length=cfg.max_completion_length, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=accum, args=args, model=types.SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list)},
        accelerator=types.SimpleNamespace(gather=lambda x: x, reduce=lambda x, reduction: x, num_processes=1,
                                          gather_for_metrics=lambda x: x, sync_gradients=True,
                                          pad_across_processes=lambda x, dim=0, pad_index=0: x))
    lp = cur.clone().requires_grad_(True)
    tr._get_per_token_logps_and_entropies = lambda *a, **k: (lp, ent, None)
    N, T = mask.shape
    inputs = dict(prompt_ids=torch.zeros(N, 1, dtype=torch.long), prompt_mask=torch.ones(N, 1, dtype=torch.long),
                  completion_ids=torch.zeros(N, T, dtype=torch.long), completion_mask=mask.long(),
                  advantages=adv.clone(), old_per_token_logps=old, sampling_per_token_logps=mu,
                  num_items_in_batch=mask.sum())
    if cfg.vllm_is_on:
        inputs["importance_sampling_ratio"] = trl_vllm_ratio(cfg, old, mu, mask)
    loss = tr._compute_loss(None, inputs)
    loss.backward()
    return lp.grad


def check(opts, tol_dtype=None, drift=0.0, accum=1):
    for seed in SEEDS:
        cur, old, mu, adv, mask, ent = batch(seed, drift)
        want = trl_grad(opts, cur, old, mu, adv, mask, ent, accum)
        lp = cur.clone().requires_grad_(True)
        # one process, steps_per_generation = 1: TRL's dapo/vespo count is num_items_in_batch·accum
        trl_policy_loss(lp, old, adv, mask, opts, sampling_logp=mu, entropies=ent, accumulation_steps=accum,
                        num_items_in_batch=float(mask.sum()) * accum).backward()
        fin = torch.isfinite(want)
        assert bool(fin.all()), (opts, seed)
        assert_close(lp.grad, want, 8.0 * mask.numel(), scale=max(float(want.abs().max()), 1.0), dtype=tol_dtype,
                     msg=f"{opts} seed {seed}")


SETTINGS = {
    "opsm_0.02": dict(loss_type="grpo", off_policy_mask_threshold=0.02),
    "opsm_0.1_seq": dict(loss_type="grpo", off_policy_mask_threshold=0.1, importance_sampling_level="sequence"),
    "grpo_delta_1.5": dict(loss_type="grpo", delta=1.5, epsilon_high=0.28),
    "grpo_delta_below_1+eps_high": dict(loss_type="grpo", delta=1.1, epsilon_high=0.28),
    "luspo_token": dict(loss_type="luspo"),
    "luspo_seq_eps": dict(loss_type="luspo", importance_sampling_level="sequence", epsilon=0.1, epsilon_high=0.15),
    "entropy_q0.4": dict(loss_type="grpo", top_entropy_quantile=0.4),
    "entropy_q0.6_seq": dict(loss_type="luspo", importance_sampling_level="sequence", top_entropy_quantile=0.6),
    "bnpo_opsm": dict(loss_type="bnpo", off_policy_mask_threshold=0.05),
    "dr_grpo_L64": dict(loss_type="dr_grpo", max_completion_length=64, epsilon=0.1),
    "dapo_entropy": dict(loss_type="dapo", top_entropy_quantile=0.5),
    "vespo_defaults": dict(loss_type="vespo"),
    "vespo_k_lambda": dict(loss_type="vespo", vespo_k_pos=1.5, vespo_lambda_pos=2.5, vespo_k_neg=0.5,
                           vespo_lambda_neg=4.0),
    "vespo_opsm_entropy_seq": dict(loss_type="vespo", off_policy_mask_threshold=0.02, top_entropy_quantile=0.5,
                                   importance_sampling_level="sequence"),
}
VLLM = {
    f"vllm_{mode}": dict(loss_type="grpo", use_vllm=True, vllm_importance_sampling_mode=mode,
                         vllm_importance_sampling_clip_min=0.9, vllm_importance_sampling_clip_max=1.1)
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
}
for mode in ("token_truncate", "token_mask"):
    VLLM[f"vespo_vllm_{mode}"] = dict(loss_type="vespo", use_vllm=True, vllm_importance_sampling_mode=mode,
                                      vllm_importance_sampling_clip_min=0.9, vllm_importance_sampling_clip_max=1.1)
VLLM["vllm_default_seq_level"] = dict(loss_type="luspo", use_vllm=True, importance_sampling_level="sequence",
                                      vllm_importance_sampling_mode="token_mask",
                                      vllm_importance_sampling_clip_max=1.1)


@pytest.mark.parametrize("name", tuple(SETTINGS) + tuple(VLLM))
def test_trl_options_equal_trls_compute_loss(name):
    check({**SETTINGS, **VLLM}[name])


@pytest.mark.parametrize("loss_type", ("grpo", "luspo", "dapo", "vespo"))
def test_gradient_accumulation_divides_as_trl(loss_type):
    """Two accumulation steps: TRL divides grpo/luspo by them and scales dapo/vespo's token count instead."""
    check(dict(loss_type=loss_type), accum=2)


@pytest.mark.parametrize("drift", (-3.0, 3.0))
def test_vespo_log_weight_clamps_as_trl(drift):
    """Rows whose ``Σ_t ℓ`` passes VESPO's clamps (``log 1e-8`` below, 20 above); small ``k`` (float32-exact, as
    TRL's ``torch.where`` of Python floats makes them) so that ``φ`` at the clamp is not 0."""
    check(dict(loss_type="vespo", vespo_k_pos=0.125, vespo_k_neg=0.25, vespo_lambda_pos=0.5,
               vespo_lambda_neg=0.25), drift=drift)


@pytest.mark.parametrize("taus", [(2.0, 0.5), (0.3, 3.0)])
@pytest.mark.parametrize("level", ("token", "sequence"))
def test_sapo_temperatures_equal_trls(taus, level):
    check(dict(loss_type="sapo", sapo_temperature_pos=taus[0], sapo_temperature_neg=taus[1],
               importance_sampling_level=level), tol_dtype=torch.float32)


def test_opsm_threshold_is_trls_get_off_policy_mask():
    """The rows kept at δ = 0.03 are those of TRL's own ``get_off_policy_mask`` (both outcomes occur)."""
    from asyncgrpo.estimators.maps.trl_opsm import keep_torch

    cur, old, mu, adv, mask, _ = batch(0)
    want = trl_grpo.GRPOTrainer.get_off_policy_mask(adv[:, None], cur, mu, mask.long(), 0.03)
    got = keep_torch(torch.where(mask, cur - mu, torch.zeros_like(cur)), mask, adv, 0.03)
    assert 0 < int(want.sum()) < mask.shape[0] and bool((got == want).all())


def test_entropy_mask_is_trls_get_high_entropy_mask():
    cur, old, mu, adv, mask, ent = batch(1)
    tr = object.__new__(trl_grpo.GRPOTrainer)
    tr.accelerator = types.SimpleNamespace(gather=lambda x: x, pad_across_processes=lambda x, dim=0, pad_index=0: x)
    for q in (0.2, 0.5, 0.9):
        want = tr.get_high_entropy_mask(ent, mask.long(), 1 - q)
        got = TRLLoss(top_entropy_quantile=q).entropy_mask(ent, mask)
        assert bool((got == want).all()) and 0 < int(got.sum()) < int(mask.sum()), q


@pytest.mark.parametrize("mode", ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"))
@pytest.mark.parametrize("bounds", [(0.9, 1.1), (None, 1.05), (0.95, None)])
def test_vllm_ratio_is_trls_own(mode, bounds):
    """``ρ̃`` equals the ratio TRL's own generation step computes, exactly (the same float64 operations)."""
    bound_hit = False
    for seed in SEEDS:
        cur, old, mu, adv, mask, _ = batch(seed)
        cfg = TRLLoss(use_vllm=True, vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=bounds[0],
                      vllm_importance_sampling_clip_max=bounds[1])
        want = trl_vllm_ratio(cfg, old, mu, mask)
        got = cfg.vllm_is_ratio(old, mu, mask)
        assert got.shape == want.shape and bool((got == want).all()), (mode, bounds, seed)
        hit = (got == 0) if mode.endswith("mask") else sum((got == b) for b in bounds if b is not None)
        bound_hit |= bool(torch.as_tensor(hit).any())
    assert bound_hit, (mode, bounds, "no ratio reached a bound: the case tests nothing")


def test_vllm_ratio_modes_by_their_definition():
    """``ρ̃`` on rows built by hand (log differences 0.1, −0.3, +0.4, one NaN): token ratios ``e^d``, sequence
    ratio ``e^{Σd}`` (NaN counted 0), truncated to ``[0.8, 1.2]`` or zeroed outside it."""
    old = torch.tensor([[0.1, -0.3, 0.4], [0.0, 0.0, 0.0]], dtype=torch.float64)
    mu = torch.tensor([[0.0, 0.0, 0.0], [0.0, math.nan, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    e = math.exp
    kw = dict(use_vllm=True, vllm_importance_sampling_clip_min=0.8, vllm_importance_sampling_clip_max=1.2)
    tok = TRLLoss(vllm_importance_sampling_mode="token_truncate", **kw).vllm_is_ratio(old, mu, mask)
    assert torch.allclose(tok, torch.tensor([[e(0.1), 0.8, 1.2], [1.0, 1.0, 1.0]], dtype=torch.float64), rtol=1e-15)
    tok = TRLLoss(vllm_importance_sampling_mode="token_mask", **kw).vllm_is_ratio(old, mu, mask)
    assert torch.allclose(tok, torch.tensor([[e(0.1), 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64), rtol=1e-15)
    seq = TRLLoss(vllm_importance_sampling_mode="sequence_truncate", **kw).vllm_is_ratio(old, mu, mask)
    assert torch.allclose(seq, torch.tensor([[1.2], [1.0]], dtype=torch.float64), rtol=1e-15)  # e^0.2 > 1.2
    seq = TRLLoss(vllm_importance_sampling_mode="sequence_truncate", use_vllm=True,
                  vllm_importance_sampling_clip_max=1.3).vllm_is_ratio(old, mu, mask)
    assert torch.allclose(seq, torch.tensor([[e(0.2)], [1.0]], dtype=torch.float64), rtol=1e-15)
    seq = TRLLoss(vllm_importance_sampling_mode="sequence_mask", use_vllm=True,
                  vllm_importance_sampling_clip_max=1.1).vllm_is_ratio(old, mu, mask)
    assert torch.allclose(seq, torch.tensor([[0.0], [1.0]], dtype=torch.float64))


def test_from_a_real_grpoconfig():
    """A TRL user's ``GRPOConfig`` is read as is: its defaults and the options they set."""
    a = trl_grpo.GRPOConfig(report_to=[], use_cpu=True, bf16=False, loss_type="sapo", sapo_temperature_neg=1.5,
                            off_policy_mask_threshold=0.2)
    cfg = TRLLoss.from_config(a)
    assert (cfg.loss_type, cfg.sapo_temperature_neg, cfg.off_policy_mask_threshold) == ("sapo", 1.5, 0.2)
    assert cfg.vllm_importance_sampling_mode == a.vllm_importance_sampling_mode
    assert cfg.vllm_importance_sampling_clip_max == a.vllm_importance_sampling_clip_max
    assert TRLLoss.from_config(trl_grpo.GRPOConfig(report_to=[], use_cpu=True, bf16=False)) == TRLLoss()
    assert TRLLoss.from_config({"vllm_importance_sampling_cap": 5.0}).vllm_importance_sampling_clip_max == 5.0


@pytest.mark.parametrize("bad, match", [
    (dict(off_policy_mask_threshold=-0.1), r"off_policy_mask_threshold must be a finite number >= 0"),
    (dict(sapo_temperature_neg=0.0), r"tau_neg \(sapo_temperature_neg\) must be a finite number > 0"),
    (dict(top_entropy_quantile=1.5), r"top_entropy_quantile must be a number in \[0, 1\]"),
    (dict(vllm_importance_sampling_mode="token"), r"vllm_importance_sampling_mode must be one of"),
    (dict(vllm_importance_sampling_clip_min=2.0, vllm_importance_sampling_clip_max=1.0), r"clip_min .* <= "),
    (dict(epsilon=1.0), r"epsilon must be a finite number in \(0, 1\)"),
    (dict(loss_type="ppo"), r"loss_type must be one of"),
    (dict(loss_type="vespo", use_vllm=True), r"vespo.*needs a token vllm_importance_sampling_mode"),
    (dict(vespo_lambda_neg=-1.0), r"vespo_lambda_neg must be a finite number in \[0, inf\)"),
    (dict(importance_sampling_level="seq"), r"importance_sampling_level must be 'token' or 'sequence'"),
    (dict(delta=-1.0), r"delta must be a finite number"),
    (dict(off_policy_mask=0.5), r"unknown TRL loss option"),
])
def test_bad_options_name_the_parameter_and_the_valid_range(bad, match):
    with pytest.raises(ValueError, match=match):
        TRLLoss.from_config(bad)


def test_diagnostics_carry_the_toolkits_prefix_and_their_values():
    """``return_metrics``: the kept share of rows (TRL's ``get_off_policy_mask``) and the mean vLLM ratio (TRL's own),
    under ``trl_loss/`` (they are not names TRL logs)."""
    cur, old, mu, adv, mask, ent = batch(0)
    opts = dict(loss_type="grpo", off_policy_mask_threshold=0.03, use_vllm=True,
                vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=1.1)
    _, m = trl_policy_loss(cur.clone().requires_grad_(True), old, adv, mask, opts, sampling_logp=mu,
                           return_metrics=True)
    keep = trl_grpo.GRPOTrainer.get_off_policy_mask(adv[:, None], cur, mu, mask.long(), 0.03)
    assert m["trl_loss/opsm_kept_row_frac"] == pytest.approx(float(keep.double().mean()), rel=1e-15)
    want = trl_vllm_ratio(TRLLoss.from_config(opts), old, mu, mask)
    assert m["trl_loss/vllm_is_ratio_mean"] == pytest.approx(float(want.mean()), rel=1e-15)
    assert {k for k in m if k.startswith("trl_loss/")} == {"trl_loss/opsm_kept_row_frac", "trl_loss/vllm_is_ratio_mean"}
