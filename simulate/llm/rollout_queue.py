"""Rollouts queued instead of weight snapshots: each batch is sampled while its behaviour policy is the current
policy, and waits in a queue until the step that trains on it (how an asynchronous RL system works).

The snapshot path keeps, per run, the last ``min(D, d) + 1`` weight versions and samples step ``k``'s batch from
version ``b_k = v_k − min(d_k, v_k)`` when step ``k`` runs (``v_k`` = updates applied before step ``k``). With
every update applied, ``v_k = k`` and ``b_k = max(0, k − d_k) =: t_k``: the weights ``θ_{b_k}`` are the current
weights at the start of step ``t_k``. The delay schedule ``d_k`` is a function of the config
(:func:`simulate.llm.train.delay_schedule`: ``fixed``, ``uniform`` and ``queue`` alike, seeded ``[seed, 2]``), so
which batches to sample at each step is known before the run starts. :class:`RolloutQueue` therefore samples,
at the start of step ``t`` and before its update, every batch ``(i, k)`` with ``t_k(i) = t`` from run ``i``'s
current weights with the batch's own seeds (prompts ``[seed, 1, k]``, sampler ``[seed, 3, k]``: the snapshot
path's), and hands it to run ``i`` at step ``k ≥ t``::

    step t:  θ_t (current) ──decode──▶ batches {(i, k): t_k(i) = t} ──▶ queue
             queue ──pop (i, t)──▶ learner (log π_θt, surrogate, AdamW) ──▶ θ_{t+1}

A run holds its weights, gradient and AdamW moments plus at most ``min(D, d) + 1`` queued batches (token ids,
attention mask, completion mask, ``log μ``, rewards, problems: ``≈ N·(16·L + 5·T + 8)`` bytes each) instead of
``min(D, d) + 1`` weight snapshots and a behaviour copy.

Bit for bit the snapshot path's (``tests/test_llm_queue.py``, float64 on CPU, every metrics row with ``==``):
``θ_{b_k}`` is the same tensor values whether snapshotted or current; a stacked decode computes each entry
independently of the others in the stack (one ``bmm`` per projection, one generator per entry), and entries are
decoded together only when their prompt width is equal, the width of step ``k``'s batch being the snapshot
path's, ``P_k = max`` over the forest's seeds of step ``k``'s prompt widths (a further-left pad is masked, but
could change a reduction's order). Version-0 batches are shared by the runs of a seed (one warm start), as in
the snapshot path. A branch of :func:`simulate.llm.batched.fork_plan` that is not yet forked gets its batches
from its trunk's current weights (equal to the branch's until the fork). **Where the two paths differ**: after a
skipped update (a non-finite loss or gradient, ``v_k < k``) the snapshot path samples from version
``v_k − min(d_k, v_k)``, which is not known at step ``t_k``; the queue keeps sampling at step ``t_k`` (the version
current then), and its rows record that version and the realised delay ``v_k − b`` — the staleness an actual
asynchronous system would have. No registered run skips an update.
"""
from __future__ import annotations

import time

import torch

from simulate.llm import stacked_model as sm
from simulate.llm.config import warmstart_key
from simulate.llm.learner_step import rewards, sampler, step_problems
from simulate.llm.model import Rollout, left_pad
from simulate.llm.warmstart import prompt_ids


def sample_times(delays, start: int, steps: int) -> dict[int, int]:
    """``{k: t_k}`` for ``k = start … steps−1``: ``t_k = k − min(d_k, k)``, the step at whose start ``θ_{b_k}`` is
    current when every update is applied (module docstring)."""
    return {k: k - min(int(delays[k]), k) for k in range(start, steps)}


class RolloutQueue:
    """The batches of a forest's runs, sampled ahead (module docstring).

    ``cfgs``: the forest's configs; ``delays``: each run's delay schedule; ``forks``: :func:`fork_plan`'s
    ``{branch: (trunk, step)}`` (a branch computes steps ``step+1 …`` only); ``max_entries``: at most this many
    entries per stacked decode (default: the number of runs, the snapshot path's largest decode).
    """

    def __init__(self, cfgs, delays, forks: dict, tok, names, arch, max_entries: int | None = None):
        self.cfgs, self.forks, self.tok, self.names, self.arch = cfgs, forks, tok, names, arch
        self.max_entries = max_entries or len(cfgs)
        self.due: dict[int, list[tuple[int, int]]] = {}  # t -> [(run, step)] sampled at the start of step t
        for i, c in enumerate(cfgs):
            start = forks[i][1] + 1 if i in forks else 0
            for k, t in sample_times(delays[i], start, c.steps).items():
                self.due.setdefault(t, []).append((i, k))
        self.ready: dict[tuple[int, int], tuple] = {}
        self._width: dict[int, int] = {}

    def holder(self, i: int, t: int) -> int:
        """The run whose current weights at the start of step ``t`` are run ``i``'s: its trunk until it is forked."""
        return self.forks[i][0] if i in self.forks and t <= self.forks[i][1] else i

    def width(self, k: int) -> int:
        """``P_k``: the widest step-``k`` prompt over the forest's seeds (the snapshot path's padded width)."""
        if k not in self._width:
            seeds = {c.seed: c for c in self.cfgs}.values()
            self._width[k] = max(len(prompt_ids(self.tok, p)) for c in seeds for p in step_problems(c, k))
        return self._width[k]

    def sample(self, t: int, states) -> None:
        """At the start of step ``t`` (before its update): decode every batch due at ``t`` from the current weights
        of ``states`` (the forest's, ``None`` for a branch not yet forked) and queue it."""
        entries: dict = {}  # sampling key -> (run whose config seeds it, weights' run, step)
        keys = []
        for i, k in self.due.pop(t, ()):
            c = self.cfgs[i]
            key = (c.seed, warmstart_key(c), k) if t == 0 else (i, k)  # version 0: one warm start per seed
            entries.setdefault(key, (i, self.holder(i, t), k))
            keys.append((i, k, key))
        by_width: dict[int, list] = {}
        for key, (i, h, k) in entries.items():
            by_width.setdefault(self.width(k), []).append((key, i, h, k))
        got = {}
        for P, group in sorted(by_width.items()):
            for a in range(0, len(group), self.max_entries):
                got.update(self._decode(group[a:a + self.max_entries], P, states, t))
        for i, k, key in keys:
            self.ready[(i, k)] = got[key]

    def _decode(self, group, P: int, states, t: int) -> dict:
        """One stacked decode of ``group`` (entries of prompt width ``P``); ``{key: (problems, Rollout, rewards,
        seconds, version)}``, each tensor its own copy (a queued batch must not hold the whole decode's)."""
        t0 = time.perf_counter()
        c0, tok = self.cfgs[0], self.tok
        batches = [step_problems(self.cfgs[i], k) for _key, i, _h, k in group]
        padded = [left_pad([prompt_ids(tok, p) for p in b], tok.pad_id, c0.device) for b in batches]
        ids = torch.stack([_pad_left(x, P - x.shape[1], tok.pad_id) for x, _ in padded])
        attn = torch.stack([_pad_left(a, P - a.shape[1], 0) for _, a in padded])
        with torch.no_grad():  # the current weights, stacked without a graph
            W = sm.stack_weights([states[h].model for _key, _i, h, _k in group], self.names)
            seq, at, mask, logp = sm.generate(W, self.arch, ids, attn, max_new_tokens=c0.max_new_tokens,
                                              eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=c0.temperature,
                                              generators=[sampler(self.cfgs[i], k) for _key, i, _h, k in group])
        del W
        t_gen = time.perf_counter() - t0
        out = {}
        for j, (key, i, h, k) in enumerate(group):
            ro = Rollout(seq=seq[j].clone(), attn=at[j].clone(), mask=mask[j].clone(), logp_old=logp[j].clone(),
                         prompt_len=P)
            out[key] = (batches[j], ro, rewards(tok, batches[j], ro), t_gen, states[h].version)
        return out

    def pop(self, i: int, k: int) -> tuple:
        """Run ``i``'s batch for step ``k``: ``(problems, Rollout, rewards, seconds, behaviour version)``."""
        return self.ready.pop((i, k))

    def queued_bytes(self) -> int:
        """Bytes of the queued batches' tensors (a shared version-0 batch counted once)."""
        seen = {id(b[1]): b[1] for b in self.ready.values()}
        return sum(x.numel() * x.element_size() for ro in seen.values()
                   for x in (ro.seq, ro.attn, ro.mask, ro.logp_old))


def _pad_left(x: torch.Tensor, extra: int, value: int) -> torch.Tensor:
    """``x [N, L]`` with ``extra`` more columns of ``value`` on the left (a further-left pad is a masked key)."""
    return torch.nn.functional.pad(x, (extra, 0), value=value) if extra > 0 else x
