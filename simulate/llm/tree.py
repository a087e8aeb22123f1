"""Runs of one seed at several fixed delays as one tree: shared prefixes computed once, bit for bit.

Why it is exact. With the ``fixed`` delay model the behaviour version at step ``k`` is
``v_k − min(d, v_k)`` where ``v_k ≤ k`` is the number of updates applied so far. For every
``k ≤ d`` this is ``0``: the run samples from the warm start ``θ_0``. Two runs of one seed and one
estimator that differ only in ``d`` (and the number ``D`` of snapshots kept, which changes no number)
therefore execute the same computation on the same inputs for ``k = 0 … min(d, d')`` — prompts come
from ``[seed, 1, k]``, the sampler from ``[seed, 3, k]``, nothing else is random — and reach the same
state (weights, AdamW moments, snapshots, metrics rows). :func:`train_tree` runs the largest delay
(the *trunk*) and, after step ``d_j``, copies the whole state (:func:`simulate.llm.train.copy_state`)
into the run with delay ``d_j``, which continues from step ``d_j + 1``. Per estimator and seed at
``d ∈ {0, 2, 4, 8, 16, 32}``, ``K = 40``: 40 + 37 + 35 + 31 + 23 (+ 39 for ``d = 0``) steps instead of
200 (240).

The same argument shares rollouts across estimators: every step with behaviour version 0 samples
the warm start with the step's seeds, so :class:`Version0Batches` draws each such batch once per
seed and hands it to every run that needs it; and every run of a seed starts with the held-out
accuracy of the same warm start, computed once. ``tests/test_llm_v3.py`` checks that a tree's runs
equal separately trained runs in every metric, bit for bit (timing columns aside).

A tree run writes ``config.json``, ``metrics.jsonl``, ``metrics.csv`` and ``summary.json`` like
:func:`simulate.llm.train.train`, but no ``checkpoint.pt``: it is a sweep cell, recomputed whole if
interrupted (the sweep engine's resume works per cell), and a 33-snapshot checkpoint per run was
disk traffic for nothing.
"""
from __future__ import annotations

import copy
import json
import os

from simulate.llm import tasks
from simulate.llm.config import TrainConfig
from simulate.llm.portability import set_determinism
from simulate.llm.run_files import write_run  # noqa: F401 (re-exported: tree.write_run)
from simulate.llm.train import (
    _loss_options,
    copy_state,
    delay_schedule,
    kept_versions,
    new_state,
    rl_step,
    sample_batch,
    summarise_run,
)
from simulate.llm.warmstart import heldout_accuracy, warm_start

#: Fields in which the runs of one tree may differ (everything else must be equal).
BRANCH_FIELDS = ("d", "D", "out_dir")
#: Fields in which the runs sharing :class:`Version0Batches` may differ beyond :data:`BRANCH_FIELDS`:
#: none of them enters the sampling of a version-0 batch.
SHARED_BATCH_FIELDS = BRANCH_FIELDS + ("estimator", "eta")
#: Ways to train a forest: ``batched`` (:mod:`simulate.llm.batched`: all runs in one stacked step; the harness's
#: engine, issue 60) or ``serial`` (this module: run by run, shared prefixes, bit-exact to separate runs; the
#: reference the tests hold the batched engine to).
ENGINES = ("serial", "batched")
#: The engine the protocol's cells train on (:func:`train_forest`'s default; the report names it).
HARNESS_ENGINE = "batched"


def _common(cfg: TrainConfig, fields: tuple[str, ...]) -> TrainConfig:
    return cfg.replace(**{f: getattr(TrainConfig(), f) for f in fields})


class Version0Batches:
    """Step ``k``'s batch drawn from the warm start, computed on first request and reused
    (``rl_step``'s ``batch_source``); ``None`` for any other behaviour version."""

    def __init__(self, cfg: TrainConfig, model0, tok):
        self.cfg, self.tok = cfg, tok
        self.model0 = copy.deepcopy(model0).eval()
        for p in self.model0.parameters():
            p.requires_grad_(False)
        self.cache: dict[int, tuple] = {}
        self.hits = 0

    def __call__(self, k: int, behaviour_version: int):
        if behaviour_version != 0:
            return None
        if k in self.cache:
            self.hits += 1
        else:
            self.cache[k] = sample_batch(self.cfg, self.model0, self.tok, k)
        return self.cache[k]


def train_forest(cfgs: list[TrainConfig], *, progress: bool = False, engine: str = HARNESS_ENGINE) -> list[dict]:
    """Train every config of ``cfgs`` (one seed; any estimators, fixed delays, step sizes); returns their summaries
    in input order and writes each run's files to its ``out_dir``. ``engine="batched"`` (the default, the
    harness's engine) trains them together (:func:`simulate.llm.batched.train_forest_batched`: one stacked
    forward/backward and decode per step, equal to the serial path to float round-off, not bit for bit);
    ``"serial"`` is this module's, with the shared prefixes and version-0 batches of the module docstring.

    Raises ``ValueError`` when the configs differ in a field other than estimator, ``eta``, ``d``, ``D``
    and ``out_dir``, use a delay model other than ``fixed``, or repeat an ``out_dir``.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if not cfgs:
        return []
    ref = _common(cfgs[0], SHARED_BATCH_FIELDS)
    for c in cfgs:
        if c.delay != "fixed":
            raise ValueError(f"cfgs: train_forest needs the fixed delay model, got delay={c.delay!r}")
        if _common(c, SHARED_BATCH_FIELDS) != ref:
            raise ValueError("cfgs: the runs of a forest may differ only in estimator, eta, d, D and out_dir")
    if len({c.out_dir for c in cfgs}) != len(cfgs):
        raise ValueError("cfgs: every run needs its own out_dir")
    if engine == "batched":
        from simulate.llm.batched import train_forest_batched  # imports this module: imported late

        return train_forest_batched(cfgs, progress=progress)
    c0 = cfgs[0]
    set_determinism(c0)
    model0, tok, warm_info = warm_start(c0, progress=progress)
    evalset = tasks.eval_set(c0.task)
    acc0 = heldout_accuracy(model0, tok, evalset, c0.max_new_tokens)  # the same warm start for every run
    batches = Version0Batches(c0, model0, tok)
    out: dict[str, dict] = {}
    trees: dict[TrainConfig, list[TrainConfig]] = {}
    for c in cfgs:
        trees.setdefault(_common(c, BRANCH_FIELDS), []).append(c)
    for group in trees.values():
        for c, summary in zip(group, _train_tree(group, model0, tok, evalset, acc0, batches, warm_info)):
            out[c.out_dir] = summary
    return [out[c.out_dir] for c in cfgs]


def _train_tree(cfgs, model0, tok, evalset, acc0, batches, warm_info) -> list[dict]:
    """One estimator and step size, several delays: the trunk (largest ``d``) and a branch per other delay.

    A branch is finished as soon as it is forked (the trunk waits), so at most two states are alive at
    once (each holds its snapshots: 33 of 170 MB for the ``gpu`` preset's trunk); the numbers do not depend
    on the order, since a branch shares nothing mutable with the trunk but the version-0 batches, which are
    a function of the warm start and the step."""
    order = sorted(range(len(cfgs)), key=lambda i: -cfgs[i].d)
    trunk = cfgs[order[0]]
    K = trunk.steps
    loss_opts = _loss_options(trunk)
    fork_at: dict[int, list[int]] = {}
    for i in order[1:]:
        fork_at.setdefault(min(cfgs[i].d, K - 1), []).append(i)
    summaries = [None] * len(cfgs)

    def finish(i: int, s, done: int) -> None:
        cfg = cfgs[i]
        sched = delay_schedule(cfg)
        for k in range(done + 1, K):
            rl_step(cfg, s, k, tok=tok, evalset=evalset, delays=sched, loss_opts=loss_opts, batch_source=batches)
        summaries[i] = summarise_run(cfg, s.rows, s.last_acc, warm_info)
        write_run(cfg, s.rows, summaries[i])

    st = new_state(trunk, copy.deepcopy(model0))
    st.last_acc = acc0
    sched = delay_schedule(trunk)
    for k in range(K):
        row = rl_step(trunk, st, k, tok=tok, evalset=evalset, delays=sched, loss_opts=loss_opts, batch_source=batches)
        if k == 0:
            row["heldout_acc_start"] = acc0
        for i in fork_at.get(k, ()):
            branch = copy_state(trunk, st)
            for v in [v for v in branch.snapshots if v < branch.version - kept_versions(cfgs[i])]:
                del branch.snapshots[v]  # versions the branch's delay never reads (train.kept_versions)
            finish(i, branch, k)
    finish(order[0], st, K - 1)
    return summaries
