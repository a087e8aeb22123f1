"""The batched engine's former rollout source, kept as the reference of tests/test_llm_queue.py: weight snapshots.

Each run keeps its last ``min(D, d) + 1`` weight versions (:func:`simulate.llm.train.commit_update`) and step
``k`` samples from version ``b_k = v_k − min(d_k, v_k)`` at step ``k`` (:func:`simulate.llm.train.behaviour_of`),
all runs in one stacked decode; runs of a seed at version 0 share one sampler. ``sample_step`` is the body of
``simulate.llm.batched.sample_step`` at commit b421a09 (before the queue), unchanged; :class:`SnapshotRollouts`
gives it :class:`simulate.llm.rollout_queue.RolloutQueue`'s interface for
:func:`simulate.llm.batched.train_forest_batched` (``rollouts=SnapshotRollouts``).
"""
from __future__ import annotations

import time

import torch

from simulate.llm import stacked_model as sm
from simulate.llm.model import Rollout, left_pad
from simulate.llm.rollout_queue import _pad_left
from simulate.llm.train import behaviour_of, rewards, sampler, step_problems
from simulate.llm.warmstart import prompt_ids


def sample_step(cfgs, states, versions, k: int, tok, names, arch) -> list[tuple]:
    """Step ``k``'s batches ``(problems, Rollout, rewards, seconds)`` for every run, one decode for all."""
    t0 = time.perf_counter()
    key_of, samplers = [], {}
    for r, (c, st, v) in enumerate(zip(cfgs, states, versions)):
        key = (c.seed, c.init_seed) if v == 0 else r  # the forest's other warm-start settings are common
        key_of.append(key)
        samplers.setdefault(key, r)
    owners = list(samplers.values())
    batches = [step_problems(cfgs[r], k) for r in owners]
    padded = [left_pad([prompt_ids(tok, p) for p in b], tok.pad_id, cfgs[0].device) for b in batches]
    P = max(i.shape[1] for i, _ in padded)  # seeds' prompts may differ in width: more left padding, same numbers
    ids = torch.stack([_pad_left(i, P - i.shape[1], tok.pad_id) for i, _ in padded])
    attn = torch.stack([_pad_left(a, P - a.shape[1], 0) for _, a in padded])
    W = sm.stack_weights([states[r].snapshots[versions[r]] for r in owners], names)
    c0 = cfgs[0]
    seq, at, mask, logp = sm.generate(W, arch, ids, attn, max_new_tokens=c0.max_new_tokens, eos_id=tok.eos_id,
                                      pad_id=tok.pad_id, temperature=c0.temperature,
                                      generators=[sampler(cfgs[r], k) for r in owners])
    t_gen = time.perf_counter() - t0
    got = {}
    for j, r in enumerate(owners):
        ro = Rollout(seq=seq[j], attn=at[j], mask=mask[j], logp_old=logp[j], prompt_len=P)
        got[r] = (batches[j], ro, rewards(tok, batches[j], ro), t_gen)
    return [got[samplers[key]] for key in key_of]


class SnapshotRollouts:
    """Step ``k``'s batches sampled at step ``k`` from each run's snapshot of version ``b_k`` (module docstring)."""

    keeps_snapshots = True

    def __init__(self, cfgs, delays, forks, tok, names, arch):
        self.cfgs, self.delays, self.tok, self.names, self.arch = cfgs, delays, tok, names, arch
        self.ready = {}

    def sample(self, k: int, states) -> None:
        on = [i for i, st in enumerate(states) if st is not None]
        dv = [behaviour_of(states[i], self.delays[i], k) for i in on]
        got = sample_step([self.cfgs[i] for i in on], [states[i] for i in on], [v for _, v in dv], k, self.tok,
                          self.names, self.arch)
        for i, (_d, v), g in zip(on, dv, got):
            self.ready[(i, k)] = (*g, v)

    def pop(self, i: int, k: int) -> tuple:
        return self.ready.pop((i, k))
