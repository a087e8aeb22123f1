"""TRL integration: AsyncGRPOTrainer trains a tiny random Qwen3 on CPU and its loss is policy_loss.

trl is part of the ``all`` extra, so these tests run in CI (no importorskip: a missing trl is a
broken install, not a reason to skip).
"""
import math

import pytest
import torch

from asyncgrpo.estimators.token_level import policy_loss
from asyncgrpo.integrations import trl as atrl

from _tol import approx, assert_close

# float32 gradients of a 2-layer tiny Qwen3 computed along two paths (the trainer vs a direct call, or vs
# TRL's own loss): they share the forward pass but sum the loss's terms in another order, so they differ by
# a few eps32 of the tensor's largest entry (measured ≤ 4.7·eps·max|r| under ATEN_CPU_CAPABILITY default,
# avx2 and avx512 on an AMD EPYC). k = 64 leaves room for other CPUs and is still ~1e4 times below a
# wrong normaliser (≥ 1.2×).
K_GRAD32 = 64

G = 4


def _reward(completions, **kwargs):
    # toy reward: how many 'a' the completion holds
    return [float(c.count("a")) for c in completions]


def _trainer(tmp_path, estimator="gmc", per_device=8, steps_per_generation=2, num_iterations=2, max_steps=4, **kw):
    from datasets import Dataset
    from trl import GRPOConfig

    model, tok = atrl.tiny_qwen3(seed=0)
    ds = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"] * 4})
    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=per_device, num_generations=G,
        max_completion_length=6, max_steps=max_steps, steps_per_generation=steps_per_generation,
        num_iterations=num_iterations, learning_rate=3e-3, logging_steps=1, report_to="none",
        use_cpu=True, seed=0, save_strategy="no", bf16=False, temperature=1.0,
    )
    return atrl.AsyncGRPOTrainer(model=model, reward_funcs=_reward, args=args, train_dataset=ds,
                                 processing_class=tok, estimator=estimator, eps=0.2, **kw)


def test_trains_tiny_qwen3_on_stale_rollouts_with_groups_intact(tmp_path):
    tr = _trainer(tmp_path)
    seen = []
    inner = tr._compute_loss

    def spy(model, inputs):
        seen.append(inputs["group_ids"].clone())
        return inner(model, inputs)

    tr._compute_loss = spy
    before = [p.detach().clone() for p in tr.model.parameters()]
    tr.train()
    logs = [h for h in tr.state.log_history if "loss" in h]
    assert len(logs) == 4
    assert all(math.isfinite(h["loss"]) for h in logs)
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, tr.model.parameters()))
    # stale rollouts: steps_per_generation=2 and num_iterations=2 reuse a generation for 4 optimizer steps
    assert max(h["traj_is/staleness/max"] for h in logs) >= 1
    for key in ("traj_is/cap_frac", "traj_is/removed_mass/mean", "traj_is/chi2/mean", "traj_is/ess/mean"):
        assert all(math.isfinite(h[key]) for h in logs), key
    # every micro-batch reached the loss as whole groups of G consecutive rows
    assert len(seen) == 4
    for ids in seen:
        assert ids.numel() == 8
        blocks = ids.reshape(-1, G)
        assert bool((blocks == blocks[:, :1]).all()), ids
        assert blocks[:, 0].unique().numel() == 2


@pytest.mark.parametrize("loss_agg_mode", [None, "seq-mean-token-mean"])
def test_loss_and_gradient_equal_policy_loss_on_a_fixed_batch(tmp_path, loss_agg_mode):
    tr = _trainer(tmp_path, max_steps=1, loss_agg_mode=loss_agg_mode)
    model = tr.model
    gen = torch.Generator().manual_seed(1)
    n_groups, P, T = 2, 3, 5
    N = n_groups * G
    prompt_ids = torch.randint(3, 30, (N, P), generator=gen)
    prompt_mask = torch.ones(N, P, dtype=torch.long)
    prompt_mask[0, 0] = 0  # one left-padded prompt
    prompt_ids[0, 0] = 0
    completion_ids = torch.randint(3, 30, (N, T), generator=gen)
    completion_mask = torch.ones(N, T, dtype=torch.long)
    completion_mask[1, 3:] = 0
    completion_mask[5, 2:] = 0
    adv = torch.randn(N, generator=gen)
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        am = torch.cat([prompt_mask, completion_mask], 1)
        logits = model(input_ids=ids, attention_mask=am).logits[:, P - 1:-1].float()
        logp0 = torch.log_softmax(logits, -1).gather(-1, completion_ids[..., None]).squeeze(-1)
    # behaviour log-probs: below the current ones in group 0 (ρ̄ > 1+ε, GMC caps), near them in group 1
    shift = torch.cat([torch.full((G, T), 0.3), 0.01 * torch.randn(G, T, generator=gen)])
    old = logp0 - shift
    # rows handed over in a shuffled group order, as the trainer's whole-group shuffle would
    perm = torch.cat([torch.arange(G, 2 * G), torch.arange(G)])
    inputs = {
        "prompt_ids": prompt_ids[perm], "prompt_mask": prompt_mask[perm],
        "completion_ids": completion_ids[perm], "completion_mask": completion_mask[perm],
        "advantages": adv[perm], "old_per_token_logps": old[perm],
        "generation_step": torch.zeros(N, dtype=torch.long), "num_items_in_batch": completion_mask.sum(),
    }
    # group ids follow the rows: rows 0..3 are group 7, rows 4..7 group 3 in the original order
    inputs["group_ids"] = torch.tensor([7] * G + [3] * G)[perm]
    model.train()
    loss = tr.compute_loss(model, inputs)
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])

    logits = model(input_ids=ids, attention_mask=am).logits[:, P - 1:-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, completion_ids[..., None]).squeeze(-1)
    kw = {} if loss_agg_mode is None else {"loss_agg_mode": loss_agg_mode}
    ref = policy_loss("gmc", logp, old, adv, completion_mask.bool(), eps=0.2, group_size=G, **kw)
    ref_grads = torch.autograd.grad(ref, [p for p in model.parameters() if p.requires_grad])

    assert tr.args.gradient_accumulation_steps == 1
    # the loss is a mean of w·A·(log-prob terms): its rounding scales with max|A|·max|logp|, not with the
    # (cancelling) result
    scale = float(adv.abs().max() * logp.detach().abs().max())
    assert float(loss.detach()) == approx(float(ref.detach()), K_GRAD32, scale=scale, dtype=torch.float32)
    for g, r in zip(grads, ref_grads):
        assert_close(g, r, K_GRAD32)
    # the fixed batch exercises the cap: group 0 is capped, group 1 is not
    assert tr._metrics["train"]["traj_is/cap_frac"][-1] == pytest.approx(0.5)


def test_overflowing_is_weights_raise_instead_of_nan_gradients(tmp_path):
    tr = _trainer(tmp_path, estimator="is", max_steps=1)
    N, P, T = 2 * G, 2, 3
    ids = torch.randint(3, 30, (N, P + T), generator=torch.Generator().manual_seed(0))
    inputs = {
        "prompt_ids": ids[:, :P], "prompt_mask": torch.ones(N, P, dtype=torch.long),
        "completion_ids": ids[:, P:], "completion_mask": torch.ones(N, T, dtype=torch.long),
        "advantages": torch.linspace(-1, 1, N),
        "old_per_token_logps": torch.full((N, T), -60.0),  # ℓ_i ≈ 3·60 = 180 > 88.7: exp overflows float32
        "group_ids": torch.arange(N) // G, "generation_step": torch.zeros(N, dtype=torch.long),
    }
    tr.model.train()
    with pytest.raises(ValueError, match="not finite"):
        tr.compute_loss(tr.model, inputs)
    tr.estimator = "gmc"  # the same batch is fine for a capped map
    assert bool(torch.isfinite(tr.compute_loss(tr.model, inputs)))


def test_shuffle_whole_groups_keeps_each_group_together_and_in_order():
    from trl.trainer.utils import shuffle_sequence_dict

    n_groups = 16
    batch = {"group_ids": torch.arange(n_groups * G) // G, "row": torch.arange(n_groups * G),
             "text": [f"r{i}" for i in range(n_groups * G)], "scalar": torch.tensor(3)}
    out = atrl.shuffle_whole_groups(batch, G, generator=torch.Generator().manual_seed(0))
    blocks = out["row"].reshape(n_groups, G)
    assert bool((blocks[:, 1:] - blocks[:, :-1] == 1).all()) and bool((blocks[:, 0] % G == 0).all())
    assert not torch.equal(out["row"], batch["row"])  # it did shuffle
    assert out["text"] == [f"r{i}" for i in out["row"].tolist()] and int(out["scalar"]) == 3
    for chunk in out["group_ids"].reshape(4, -1):
        atrl.group_order(chunk, G)  # every micro-batch of 4 groups is whole
    # TRL's own row shuffle splits groups across micro-batches; group_order refuses that
    torch.manual_seed(0)
    rows = shuffle_sequence_dict(batch)["group_ids"]
    with pytest.raises(ValueError, match="expected num_generations"):
        for chunk in rows.reshape(4, -1):
            atrl.group_order(chunk, G)


def test_per_device_batch_must_hold_whole_groups(tmp_path):
    with pytest.raises(ValueError, match="multiple of num_generations"):
        _trainer(tmp_path, per_device=6, steps_per_generation=2)


def test_bad_estimator_and_eps_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="estimator must be one of"):
        _trainer(tmp_path, estimator="grpo")
    with pytest.raises(ValueError, match="eps"):
        atrl.AsyncGRPOTrainer(estimator="gmc", eps=0.0)


def test_behaviour_logps_prefer_the_sampler_and_fill_its_nan_tokens():
    cur = torch.full((2, 3), -1.0)
    old = torch.full((2, 3), -2.0)
    samp = torch.tensor([[-3.0, float("nan"), -3.0], [-3.0, -3.0, -3.0]])
    assert torch.equal(atrl.behaviour_logps({}, cur), cur)
    assert torch.equal(atrl.behaviour_logps({"old_per_token_logps": old}, cur), old)
    out = atrl.behaviour_logps({"old_per_token_logps": old, "sampling_per_token_logps": samp}, cur)
    assert out.tolist() == [[-3.0, -2.0, -3.0], [-3.0, -3.0, -3.0]]
    out = atrl.behaviour_logps({"sampling_per_token_logps": samp}, cur)
    assert out[0, 1] == -1.0  # no old log-probs: the current one, ℓ_t = 0 as TRL does


def test_weight_metrics_match_the_functionals():
    ell = torch.tensor([[0.5, 0.4, -0.1, 0.2], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64).numpy()
    m = atrl.weight_metrics(ell, "gmc", 0.2)
    rho = torch.tensor(ell).exp()
    rbar = rho.mean(1)
    assert m["traj_is/cap_frac"] == pytest.approx(0.5)  # group 0 capped (ρ̄ > 1.2), group 1 not
    assert m["traj_is/removed_mass/mean"] == pytest.approx(float((rbar[0] - 1.2) / 2))
    assert m["traj_is/chi2/mean"] == pytest.approx(float(((rho - 1) ** 2).mean(1).mean()))
    assert m["traj_is/ess/mean"] == pytest.approx(float((rho[0].sum() ** 2 / (rho[0] ** 2).sum() + 4) / 2))


def test_example_script_runs(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "trl_gmc.py"
    spec = importlib.util.spec_from_file_location("trl_gmc_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    trainer = mod.main(["--steps", "2", "--output-dir", str(tmp_path)])
    assert trainer.state.global_step == 2
    assert "gmc (eps=0.2): 2 steps" in capsys.readouterr().out


# --------------------------------------------------------------------------- normalisation = installed TRL's (issue 28)
def _fixed_inputs(n_groups=2, P=3, T=5, seed=1):
    """A fixed micro-batch of ``n_groups·G`` rows, completion width ``T`` below ``max_completion_length = 6``."""
    gen = torch.Generator().manual_seed(seed)
    N = n_groups * G
    completion_mask = torch.ones(N, T, dtype=torch.long)
    completion_mask[1, 3:] = 0
    completion_mask[5, 1:] = 0
    return {
        "prompt_ids": torch.randint(3, 30, (N, P), generator=gen), "prompt_mask": torch.ones(N, P, dtype=torch.long),
        "completion_ids": torch.randint(3, 30, (N, T), generator=gen), "completion_mask": completion_mask,
        "advantages": torch.randn(N, generator=gen),
        # the generation batch spans steps_per_generation micro-batches: more tokens than this one holds
        "num_items_in_batch": torch.tensor(3 * int(completion_mask.sum()) + 5),
        "group_ids": torch.arange(N) // G, "generation_step": torch.zeros(N, dtype=torch.long),
    }


def _grads(trainer, inputs, train=True):
    model = trainer.model
    model.train(train)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # as TRL's loop sets it
    loss = trainer.compute_loss(model, dict(inputs))
    return torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])


@pytest.mark.parametrize("mode", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_loss_agg_mode_normalises_as_installed_trl(tmp_path, mode):
    """The trainer's gradient equals TRL's GRPOTrainer's for ``loss_type = loss_agg_mode``, with accumulation.

    ``onpolicy`` with ``ℓ = 0`` (no old log-probs): TRL's per-token gradient is ``−A ∇log π`` (ratio 1, no clip
    binds), the toolkit's ``−w A ∇log π`` with ``w = 1``, so the gradients differ only by the normaliser:
    TRL 1.16's ``num_items_in_batch·accum/steps_per_generation`` for dapo, ``N·max_completion_length`` for
    dr_grpo, each divided by ``accum`` but dapo. ``gradient_accumulation_steps = 2`` and
    ``steps_per_generation = 4`` make every factor visible (a wrong one is off by ≥ 1.2×, far above the float32
    tolerance of ``K_GRAD32·eps·max|g|``).
    """
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    def config():
        return GRPOConfig(
            output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=G, max_completion_length=6,
            gradient_accumulation_steps=2, steps_per_generation=4, max_steps=1, report_to="none", use_cpu=True,
            seed=0, save_strategy="no", bf16=False, loss_type=mode, beta=0.0,
        )

    ds = Dataset.from_dict({"prompt": ["ab", "cd"] * 8})
    model, tok = atrl.tiny_qwen3(seed=0)
    ours = atrl.AsyncGRPOTrainer(model=model, reward_funcs=_reward, args=config(), train_dataset=ds,
                                 processing_class=tok, estimator="onpolicy", loss_agg_mode=mode)
    model2, _ = atrl.tiny_qwen3(seed=0)
    trl = GRPOTrainer(model=model2, reward_funcs=_reward, args=config(), train_dataset=ds, processing_class=tok)
    inputs = _fixed_inputs()
    for train in ([True, False] if mode == "dapo" else [True]):
        for g, r in zip(_grads(ours, inputs, train), _grads(trl, inputs, train)):
            assert_close(g, r, K_GRAD32)


def test_dapo_trains_in_trls_loop_with_accumulation(tmp_path):
    """``num_items_in_batch`` reaches the loss through the whole-group shuffle and the split into steps."""
    tr = _trainer(tmp_path, max_steps=1, steps_per_generation=2, num_iterations=1, loss_agg_mode="dapo")
    tr.args.gradient_accumulation_steps = 2
    seen = []
    inner = tr._normalisation

    def spy(inputs, mode, accum):
        out = inner(inputs, mode, accum)
        seen.append((float(inputs["num_items_in_batch"]), accum, out[0]["batch_num_tokens"]))
        return out

    tr._normalisation = spy
    tr.train()
    assert math.isfinite(tr.state.log_history[0]["loss"])
    assert len(seen) == 2  # two micro-batches of one optimizer step
    for n_items, accum, b_tok in seen:
        assert accum == 2 and b_tok == pytest.approx(n_items * accum / 2)


def test_installed_trl_is_a_tested_release():
    """The normalisers above are read from this TRL release; a bump must re-read and re-test them."""
    import trl

    assert trl.__version__ in atrl.TESTED_TRL_VERSIONS


def test_dapo_without_num_items_in_batch_is_a_clear_error(tmp_path):
    tr = _trainer(tmp_path, max_steps=1, loss_agg_mode="dapo")
    inputs = _fixed_inputs()
    del inputs["num_items_in_batch"]
    tr.model.train()
    with pytest.raises(ValueError, match="num_items_in_batch"):
        tr.compute_loss(tr.model, inputs)


def test_rollout_delay_trains_on_rollouts_exactly_d_updates_old(tmp_path):
    """Issue 58: rollouts d = 8 optimizer steps old through the delay mechanism (TRL's own reuse cannot reach it):
    the logged staleness max over the window equals 8, and every rollout's generating version is max(0, g − 8)."""
    tr = _trainer(tmp_path, per_device=8, steps_per_generation=1, num_iterations=1, max_steps=10, rollout_delay=8)
    tr.args.logging_steps = 10
    versions = []
    inner = tr._compute_loss

    def spy(model, inputs):
        versions.append((int(tr.state.global_step), int(inputs["generation_step"][0])))
        return inner(model, inputs)

    tr._compute_loss = spy
    tr.train()
    logs = [h for h in tr.state.log_history if "traj_is/staleness/max" in h]
    assert len(logs) == 1 and logs[0]["traj_is/staleness/max"] == 8.0
    assert logs[0]["traj_is/staleness/mean"] < 8.0  # the first 8 steps are younger: the max is not a mean
    assert versions == [(g, max(0, g - 8)) for g in range(10)]
    assert len(tr._versions) <= 9  # d + 1 copies at most


def test_rollout_delay_and_config_checks_run_before_trls_setup(tmp_path):
    from trl import GRPOConfig

    with pytest.raises(ValueError, match="rollout_delay must be an integer"):
        _trainer(tmp_path, rollout_delay=-1)
    with pytest.raises(ValueError, match="rollout_delay must be an integer"):
        _trainer(tmp_path, rollout_delay=2.0)
    args = GRPOConfig(output_dir=str(tmp_path), beta=0.1, per_device_train_batch_size=8, num_generations=4,
                      report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match="beta must be 0"):  # refused with no model at all: before TRL's setup
        atrl.AsyncGRPOTrainer(model=None, reward_funcs=_reward, args=args)
