"""Rollouts queued (simulate/llm/rollout_queue.py) against weight snapshots (tests/_llm_snapshot_rollouts.py, the
batched engine's former path): every metrics row bit for bit equal in float64 on CPU, with ``==``.

The forest covers what could break the identity: three estimators; the fixed delay model at d ∈ {0, 2, 3} (forked
branches whose early batches come from the trunk's weights, shared version-0 batches), the uniform model (several
steps sampled at one version, some versions sampling nothing) and the actor-queue model; two seeds (their own warm
starts, prompts of different widths in one forest); a held-out evaluation every 3 steps. The stand-in reward of
tests/test_llm_batched.py makes every update non-zero. A perturbed queue (each batch sampled one version early)
must fail the comparison: the test has the power to see a wrong version.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from simulate.llm import batched, rollout_queue
from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
from _llm_snapshot_rollouts import SnapshotRollouts
from test_llm_batched import text_parity_reward

#: Columns that measure wall time, not the run.
TIMING = ("gen_tokens_per_s", "tokens_per_s")


@pytest.fixture(autouse=True)
def _rewards(monkeypatch):
    from simulate.llm import tasks

    monkeypatch.setattr(tasks, "reward", text_parity_reward)


def forest(root) -> list[TrainConfig]:
    base = TrainConfig(preset="tiny", dtype="float64", steps=7, n_prompts=2, G=4, eval_every=3, D=3,
                       length_normalize=True, task=TaskConfig(n_eval=8), warmstart=WarmStartConfig(steps=3, batch_size=8),
                       cache_dir=str(root / "cache"))
    delays = [dict(delay="fixed", d=d) for d in (0, 2, 3)] + [dict(delay="uniform"), dict(delay="queue", n_actors=2)]
    return [base.replace(seed=s, estimator=e, **dl, out_dir=str(root / f"s{s}-{e}-{dl['delay']}{dl.get('d', '')}"))
            for s in (0, 1) for e in ("gmc", "grpo", "tis") for dl in delays]


def rows_of(cfgs, path) -> list[list[dict]]:
    out = []
    for c in cfgs:
        with open(f"{path}/{c.out_dir.rsplit('/', 1)[1]}/metrics.jsonl") as f:
            out.append([json.loads(line) for line in f])
    return out


def train(root, rollouts) -> list[list[dict]]:
    torch.set_num_threads(1)
    cfgs = forest(root)
    batched.train_forest_batched(cfgs, rollouts=rollouts)
    return rows_of(cfgs, root)


def same(a, b) -> bool:
    """``a == b``, NaN equal to NaN (a NaN column means the same thing in both)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def differences(ref, got) -> list[str]:
    out = []
    for r, (ra, rb) in enumerate(zip(ref, got)):
        assert len(ra) == len(rb), r
        for a, b in zip(ra, rb):
            assert a.keys() == b.keys()
            out += [f"run {r} step {a['step']} {k}: {a[k]!r} != {b[k]!r}" for k in a
                    if k not in TIMING and not same(a[k], b[k])]
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from simulate.llm import tasks

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tasks, "reward", text_parity_reward)
        return train(tmp_path_factory.mktemp("snapshots"), SnapshotRollouts)


def test_queued_rollouts_equal_the_snapshot_path_bit_for_bit(reference, tmp_path):
    got = train(tmp_path, rollout_queue.RolloutQueue)
    assert differences(reference, got) == []
    # the comparison is not empty: updates move, delays are realised, versions lag, evaluations happen
    flat = [row for run in got for row in run]
    assert sum(row["grad_norm"] > 0 for row in flat) == len(flat)
    assert {row["delay"] for row in flat} >= {0, 1, 2, 3}
    assert any(row["behaviour_version"] > 0 and row["delay"] > 0 for row in flat)
    assert sum(row["heldout_acc"] is not None for row in flat) == 3 * len(got)
    assert len({row["reward"] for row in flat}) > 3


def test_a_queue_one_version_early_is_seen(reference, tmp_path, monkeypatch):
    """Each batch sampled one step (one version) before its behaviour version: the rows must differ."""
    def early(delays, start, steps):
        return {k: max(0, t - 1) for k, t in orig(delays, start, steps).items()}

    orig = rollout_queue.sample_times
    monkeypatch.setattr(rollout_queue, "sample_times", early)
    diff = differences(reference, train(tmp_path, rollout_queue.RolloutQueue))
    numeric = [d for d in diff if " loss:" in d or " ell_mean:" in d]
    assert diff and numeric, diff[:5]


def test_the_queue_holds_at_most_min_d_plus_one_batches_per_run(tmp_path):
    """Run by run the queue holds the batches sampled and not yet trained on: at most ``min(D, d) + 1`` each (the
    planner's count, simulate/llm/gpu_plan.py), and nothing once the forest is done."""
    cfgs = [c for c in forest(tmp_path) if c.seed == 0 and c.estimator == "gmc"]
    sched = [batched.delay_schedule(c) for c in cfgs]
    q = rollout_queue.RolloutQueue(cfgs, sched, batched.fork_plan(cfgs), tok=None, names=None, arch=None)
    pending = {i: 0 for i in range(len(cfgs))}
    due = {t: list(v) for t, v in q.due.items()}
    for t in range(cfgs[0].steps):
        for i, _k in due.get(t, ()):
            pending[i] += 1
        for i, c in enumerate(cfgs):
            assert pending[i] <= min(c.D, c.d if c.delay == "fixed" else c.D) + 1, (i, t)
            start = q.forks[i][1] + 1 if i in q.forks else 0
            pending[i] -= t >= start
    assert all(v == 0 for v in pending.values())
