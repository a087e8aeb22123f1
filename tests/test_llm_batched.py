"""The batched forest (simulate/llm/batched.py) against the one-run-at-a-time path (simulate/llm/train.py).

Tolerances: float32 results are compared to ``K·eps·max|ref|`` with ``eps = torch.finfo(float32).eps`` and
``K = 64``: the stacked products may add the same terms in another order (on this machine they happen to
agree bit for bit in the learner, and to a few eps in the sampler's recorded ``log μ``), and a reordered
sum of ``n`` terms is off by at most ~``n·eps`` of its magnitude; ``K`` covers the few dozen sums deep
the tiny model's forward is. Full runs are compared for a few steps only: sampling turns a last-bit change
of a probability into a different token now and then, and from there the runs legitimately differ.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from _llm_snapshot_rollouts import sample_step

from simulate.llm import batched
from simulate.llm import stacked_model as sm
from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
from simulate.llm.train import (
    _loss_options,
    copy_state,
    delay_schedule,
    new_state,
    rl_step,
    sample_batch,
)
from simulate.llm.tree import train_forest
from simulate.llm.warmstart import warm_start

K = 64
EPS = torch.finfo(torch.float32).eps


def close(a: torch.Tensor, ref: torch.Tensor) -> bool:
    tol = K * EPS * max(1.0, float(ref.abs().max()))
    return float((a - ref).abs().max()) <= tol


def text_parity_reward(problem, text: str, lenient=None) -> float:
    """A stand-in task reward, ``R = (Σ character codes of the completion) mod 2``: varies within groups and across
    held-out problems from the first step on (the briefly warm-started tiny model earns no task reward, so its
    updates would all be zero, its accuracy 0, and the comparison empty); every caller (sampling rewards of
    both engines, both held-out evaluations) reaches it through ``tasks.reward``."""
    return float(sum(map(ord, text)) % 2)


@pytest.fixture(autouse=True)
def _rewards(monkeypatch):
    from simulate.llm import tasks

    monkeypatch.setattr(tasks, "reward", text_parity_reward)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batched")
    base = TrainConfig(preset="tiny", steps=3, n_prompts=4, G=4, eval_every=2, D=2, length_normalize=True,
                       task=TaskConfig(n_eval=16), warmstart=WarmStartConfig(steps=20, batch_size=16),
                       cache_dir=str(tmp / "cache"))
    torch.set_num_threads(1)
    model0, tok, _ = warm_start(base, progress=False)
    return tmp, base, model0, tok


def test_one_step_per_run_matches_the_serial_step(setup):
    """Three runs at behaviour versions 2, 1, 0 (d = 0, 1, 2 after two steps): each run's rollout, log π,
    loss and clipped gradient of step 2 equal the serial step's to K·eps·max|ref|."""
    tmp, base, model0, tok = setup
    cfgs = [base.replace(estimator=e, d=d, out_dir=str(tmp / f"{e}{d}"))
            for e, d in (("gmc", 0), ("grpo", 1), ("onpolicy", 2))]
    from simulate.llm import tasks

    evalset = tasks.eval_set(base.task)
    states = []
    for c in cfgs:  # two serial steps: versions 0, 1, 2 in every run's snapshots
        st = new_state(c, __import__("copy").deepcopy(model0))
        for k in (0, 1):
            rl_step(c, st, k, tok=tok, evalset=evalset, delays=delay_schedule(c), loss_opts=_loss_options(c))
        states.append(st)
    serial = [copy_state(c, st) for c, st in zip(cfgs, states)]
    mine = [copy_state(c, st) for c, st in zip(cfgs, states)]
    k = 2
    dv = [(d, 2 - d) for d in (0, 1, 2)]
    names, arch = sm.weight_names(mine[0].model), sm.arch_of(mine[0].model)
    got = sample_step(cfgs, mine, [v for _, v in dv], k, tok, names, arch)  # the stacked decode from snapshots
    logp_ref = []
    for c, st, (_, v), g in zip(cfgs, serial, dv, got):
        st.behaviour.load_state_dict(st.snapshots[v])
        ref = sample_batch(c, st.behaviour, tok, k)
        assert torch.equal(g[1].seq, ref[1].seq) and torch.equal(g[1].mask, ref[1].mask)
        assert close(g[1].logp_old, ref[1].logp_old), float((g[1].logp_old - ref[1].logp_old).abs().max())
        np.testing.assert_array_equal(g[2], ref[2])
        from simulate.llm.model import completion_logprobs

        with torch.no_grad():
            logp_ref.append(completion_logprobs(st.model, ref[1].seq, ref[1].attn, ref[1].mask, ref[1].prompt_len))
        row = rl_step(c, st, k, tok=tok, evalset=evalset, delays=delay_schedule(c), loss_opts=_loss_options(c),
                      batch_source=lambda kk, vv, ref=ref: ref)
        st.ref_row = row
    learned = batched.learner_step(cfgs, mine, got, names, arch, [_loss_options(c) for c in cfgs])
    for st_ref, st, out, lp in zip(serial, mine, learned, logp_ref):
        logp_new, _, loss, _, _, grad_norm, skipped = out
        assert skipped is None and st.version == st_ref.version == 3 and grad_norm > 0
        assert close(logp_new.detach(), lp)
        assert close(loss.detach(), torch.tensor(st_ref.ref_row["loss"]))
        assert abs(grad_norm - st_ref.ref_row["grad_norm"]) <= K * EPS * st_ref.ref_row["grad_norm"]
        for (n, p), q in zip(st.model.named_parameters(), st_ref.model.parameters()):
            assert close(p.grad, q.grad), n


def test_batched_forest_follows_the_serial_forest(setup):
    """train_forest(engine='batched') against the serial engine on a 3-step forest (2 estimators × d ∈ {0, 2}):
    the bookkeeping columns equal, the learner's numbers within K·eps of their magnitude (the per-token
    log-ratio columns: of T·max|log π| ≤ 8·20)."""
    tmp, base, _, _ = setup
    out = {}
    for eng in ("serial", "batched"):
        cfgs = [base.replace(estimator=e, d=d, out_dir=str(tmp / eng / f"{e}{d}"))
                for e in ("gmc", "grpo") for d in (0, 2)]
        train_forest(cfgs, engine=eng)
        out[eng] = [pd.read_csv(f"{c.out_dir}/metrics.csv") for c in cfgs]
    for a, b in zip(out["serial"], out["batched"]):
        assert (a["grad_norm"] > 0).all() and (a["ell_mean"].iloc[1:].abs() > 1e-3).any() == (a["delay"] > 0).any()
        assert 0 < a["heldout_acc"].dropna().min() and a["heldout_acc"].dropna().max() < 1
        for col in ("step", "version", "behaviour_version", "delay", "completion_tokens", "reward", "heldout_acc",
                    "heldout_acc_start"):
            pd.testing.assert_series_equal(a[col], b[col])
        for col in ("loss", "grad_norm"):
            assert np.all(np.abs(a[col] - b[col]) <= K * EPS * np.maximum(1, np.abs(a[col]))), col
        for col in ("ell_mean", "ell_max", "ell_min"):
            assert np.all(np.abs(a[col] - b[col]) <= K * EPS * 8 * 20), col


def test_forest_refuses_runs_that_cannot_share_a_batch(setup):
    tmp, base, _, _ = setup
    a = base.replace(out_dir=str(tmp / "r1"))
    with pytest.raises(ValueError, match="G"):
        batched.train_forest_batched([a, a.replace(G=2, out_dir=str(tmp / "r2"))])
    with pytest.raises(ValueError, match="own out_dir"):
        batched.train_forest_batched([a, a.replace(d=2)])
    with pytest.raises(ValueError, match="engine must be one of"):
        train_forest([a], engine="vmap")


def test_bench_forest_row_compares_the_same_work():
    """``bench llm``'s forest row: both engines train the same runs and steps (the same completion tokens), and
    the ratio and MFU are what its parts say."""
    from simulate.llm.throughput import forest_training

    r = forest_training("tiny", ("gmc", "grpo"), (0, 1), steps=2, n_prompts=2, G=2)
    assert r["runs"] == 4 and r["steps_timed"] == 1
    assert r["serial"]["tokens"] == r["batched"]["tokens"] > 0
    assert r["ratio"] == pytest.approx(r["batched"]["tokens_per_s"] / r["serial"]["tokens_per_s"])
    for eng in ("serial", "batched"):
        assert 0 < r[f"mfu_{eng}"] == pytest.approx(r[eng]["model_flops_per_s"] / r["peak_flops_per_s"])


def test_several_seeds_in_one_batch_follow_their_serial_runs(setup):
    """Two seeds (their own warm starts and prompts) in one batched forest: each run follows its seed's serial run
    (bookkeeping equal, loss to K·eps)."""
    tmp, base, _, _ = setup
    cfgs = [base.replace(steps=2, seed=s, d=1, out_dir=str(tmp / "seeds" / f"b{s}")) for s in (0, 1)]
    batched.train_forest_batched(cfgs)
    for c in cfgs:
        ref = c.replace(out_dir=c.out_dir.replace("/b", "/s"))
        train_forest([ref])
        a, b = pd.read_csv(f"{ref.out_dir}/metrics.csv"), pd.read_csv(f"{c.out_dir}/metrics.csv")
        assert (a["grad_norm"] > 0).all()
        for col in ("version", "behaviour_version", "completion_tokens", "reward"):
            pd.testing.assert_series_equal(a[col], b[col])
        assert np.all(np.abs(a["loss"] - b["loss"]) <= K * EPS * np.maximum(1, np.abs(a["loss"])))


def test_extra_left_padding_changes_no_log_prob(setup):
    """Seeds whose prompts differ in width share a batch by padding further left (batched._pad_left): a row's
    log π must not change by it (pads are masked keys), to K·eps."""
    _, base, model0, tok = setup
    cfg = base.replace(n_prompts=2, G=2)
    ro = sample_batch(cfg, model0, tok, 0)[1]
    names, arch = sm.weight_names(model0), sm.arch_of(model0)
    W = sm.stack_weights([model0], names)
    with torch.no_grad():
        ref = sm.completion_logprobs(W, arch, ro.seq[None], ro.attn[None], ro.mask[None], ro.prompt_len)
        P = ro.prompt_len + 3
        seq, attn = batched._pad_left(ro.seq, 3, tok.pad_id), batched._pad_left(ro.attn, 3, 0)
        got = sm.completion_logprobs(W, arch, seq[None], attn[None], ro.mask[None], P)
    assert seq.shape[1] == ro.seq.shape[1] + 3 and close(got, ref)


def test_stacked_forward_gradients_match_the_model_with_padded_rows():
    """Two random-init tiny models, rows ending early (pad tokens after EOS): the stacked forward's log π and every
    weight's gradient equal the serial model's to K·eps·max|ref| (the pad row of the tied embedding included:
    ``nn.Embedding(padding_idx)`` passes no gradient through a pad lookup, and neither may the stacked one)."""
    from simulate.llm.model import build_model, completion_logprobs, generate
    from simulate.llm.throughput import prompt_batch

    tok, prompts = prompt_batch(16)
    models = [build_model("tiny", tok.vocab_size, seed=s) for s in (0, 1)]
    ros = [generate(m, prompts, max_new_tokens=8, eos_id=tok.eos_id, pad_id=tok.pad_id,
                    generator=torch.Generator().manual_seed(5)) for m in models]
    assert all(bool((~ro.mask).any()) for ro in ros)  # some rows stopped at EOS: pads in the learner batch
    w = torch.randn(ros[0].mask.shape, generator=torch.Generator().manual_seed(1))
    names, arch = sm.weight_names(models[0]), sm.arch_of(models[0])
    stack = lambda f: torch.stack([f(ro) for ro in ros])  # noqa: E731
    lp = sm.completion_logprobs(sm.stack_weights(models, names), arch, stack(lambda r: r.seq), stack(lambda r: r.attn),
                                stack(lambda r: r.mask), ros[0].prompt_len)
    (lp * w).sum().backward()
    got = [{n: p.grad.clone() for n, p in m.named_parameters()} for m in models]
    for m, ro, g, lp_r in zip(models, ros, got, lp):
        m.zero_grad()
        ref = completion_logprobs(m, ro.seq, ro.attn, ro.mask, ro.prompt_len)
        (ref * w).sum().backward()
        assert close(lp_r.detach(), ref.detach())
        for n, p in m.named_parameters():
            assert close(g[n], p.grad), n


def test_a_float64_model_samples_and_scores_in_float64_as_the_serial_path():
    """(found re-making LM v8 on the batched engine) the stacked decode and forward cast logits to float32 whatever
    the model's dtype, so a float64 run's ``log μ`` and ``log π`` carried float32 round-off (~1e-7) that the serial
    path does not: they are in ``logit_dtype`` now, equal to the serial ones to float64's eps."""
    from simulate.llm import model as serial
    from simulate.llm.tokenizer import CharTokenizer

    tok = CharTokenizer()
    m64 = serial.build_model("tiny", tok.vocab_size, seed=3, dtype="float64")
    prompts = [tok.encode_prompt(p) for p in ("A12+34=", "A7+8=", "A40+2=")]
    g = torch.Generator().manual_seed(11)
    ref = serial.generate(m64, prompts, max_new_tokens=6, eos_id=tok.eos_id, pad_id=tok.pad_id, generator=g)
    ids, attn = serial.left_pad(prompts, tok.pad_id, "cpu")
    W = sm.stack_weights([m64], sm.weight_names(m64))
    seq, at, mask, logp = sm.generate(W, sm.arch_of(m64), ids[None], attn[None], max_new_tokens=6, eos_id=tok.eos_id,
                                      pad_id=tok.pad_id, generators=[torch.Generator().manual_seed(11)])
    assert logp.dtype == torch.float64 and torch.equal(seq[0], ref.seq) and torch.equal(mask[0], ref.mask)
    eps64 = K * torch.finfo(torch.float64).eps
    assert float((logp[0] - ref.logp_old).abs().max()) <= eps64 * max(1.0, float(ref.logp_old.abs().max()))
    with torch.no_grad():
        lp = sm.completion_logprobs(W, sm.arch_of(m64), seq, at, mask, ids.shape[1])
        lp_ref = serial.completion_logprobs(m64, ref.seq, ref.attn, ref.mask, ids.shape[1])
    assert lp.dtype == torch.float64
    assert float((lp[0] - lp_ref).abs().max()) <= eps64 * max(1.0, float(lp_ref.abs().max()))
