"""The runs of a forest trained together: one stacked forward/backward and one decode per step for every run.

A forest's runs (estimators × delays, and several seeds) share the model's shape and the step's batch
shape, and differ in their weights, optimiser state, queued rollouts and loss. Each step ``k`` of
:func:`train_forest_batched`:

1. rollouts (:class:`simulate.llm.rollout_queue.RolloutQueue`): before the update, every batch whose behaviour
   policy is the current one is decoded now, all together (:func:`simulate.llm.stacked_model.generate`: stacked
   current weights, static KV cache, each batch's own generator ``[seed, 3, k']`` as in the serial path), and
   queued; run ``r`` then takes its step-``k`` batch from the queue, sampled ``min(d_k, k)`` steps ago from
   ``θ_{k − min(d_k, k)}`` (no weight snapshots are kept); runs of a seed share its version-0 batches;
2. the batch's rewards and advantages come from the serial code;
3. one stacked forward gives every run's ``log π_θ`` (:func:`simulate.llm.stacked_model.completion_logprobs`),
   each run's loss is the serial path's surrogate (:func:`simulate.llm.train.surrogate`, the estimator
   registry's torch path), and one ``backward`` of ``Σ_r loss_r`` fills every run's own gradients (a
   run's weights enter only its own loss, so ``∂Σ/∂θ_r = ∂loss_r/∂θ_r``);
4. each run clips its gradient and takes its own AdamW step (:func:`simulate.llm.train.clip_and_step`,
   the serial optimiser, skipped when the loss or gradient is not finite), and logs the serial metrics row
   (:func:`simulate.llm.train.finish_row`; its behaviour version is the one the batch was sampled from, its
   delay ``v_k −`` that version); when an evaluation is due, every run's greedy held-out accuracy comes from
   one stacked decode (:func:`heldout_accuracies`).

The queue gives every metrics row bit for bit what sampling from weight snapshots at step ``k`` gave
(``tests/test_llm_queue.py``; the argument and the one exception, a skipped update, are in
:mod:`simulate.llm.rollout_queue`).

A run's state is the serial :class:`simulate.llm.train.RunState`, so everything after the forward is the
serial code. The numbers agree with the one-run-at-a-time path to float round-off, not bit for bit: the
stacked products may sum in another order, and sampling turns a last-bit change of a probability into a
different token now and then, after which the runs' trajectories differ (``tests/test_llm_batched.py``
checks one step's log-probs, losses and gradients per run to a tolerance from float32's eps). Like
:func:`simulate.llm.tree.train_forest`, runs that differ only in a smaller fixed delay are forked from the
larger-delay run after their common prefix (:func:`fork_plan`); the timing columns of a row are the whole
batched step's.
"""
from __future__ import annotations

import copy
import time

import torch

from asyncgrpo.progress import progress as tqdm
from simulate.llm import stacked_model as sm
from simulate.llm import tasks
from simulate.llm.config import TrainConfig, warmstart_key
from simulate.llm.portability import set_determinism
from simulate.llm.model import Rollout, left_pad
from simulate.llm.train import (
    _loss_options,
    clip_and_step,
    commit_update,
    copy_state,
    delay_schedule,
    eval_due,
    finish_row,
    group_advantages,
    kept_versions,
    new_state,
    rewards,
    set_step_size,
    summarise_run,
    surrogate,
)
from simulate.llm.rollout_queue import RolloutQueue, _pad_left  # noqa: F401  (_pad_left: the learner's too)
from simulate.llm.run_files import write_run
from simulate.llm.warmstart import heldout_accuracy, prompt_ids, warm_start

#: Fields in which the runs of one batched forest may differ: weights, loss, optimiser, delays and seed
#: are per run; everything that shapes a step's batch or the model must be common.
PER_RUN_FIELDS = ("estimator", "eps", "eps_low", "eps_high", "tau_m2", "loss_agg_mode", "clip_ratio_c",
                  "cispo_clamp", "eta", "weight_decay", "warmup_steps", "max_grad_norm", "length_normalize",
                  "adv_norm", "delay", "d", "D", "n_actors", "seed", "warmstart_seed", "out_dir")


def check_forest(cfgs: list[TrainConfig]) -> None:
    """``ValueError`` when two configs differ outside :data:`PER_RUN_FIELDS` or repeat an ``out_dir``."""
    def common(c):
        return c.replace(**{f: getattr(TrainConfig(), f) for f in PER_RUN_FIELDS})

    ref = common(cfgs[0])
    for c in cfgs:
        if common(c) != ref:
            diff = [k for k, v in common(c).to_dict().items() if ref.to_dict()[k] != v]
            raise ValueError(f"cfgs: the runs of a batched forest may differ only in {', '.join(PER_RUN_FIELDS)}; "
                             f"these differ: {', '.join(diff)}")
    if len({c.out_dir for c in cfgs}) != len(cfgs):
        raise ValueError("cfgs: every run needs its own out_dir")


def learner_step(cfgs, states, got, names, arch, loss_opts) -> list[tuple]:
    """One stacked forward/backward and each run's guarded AdamW step; per run
    ``(logp_new, adv, loss, loss_metrics, lr, grad_norm, skipped)``."""
    P = max(g[1].prompt_len for g in got)
    seq = torch.stack([_pad_left(g[1].seq, P - g[1].prompt_len, 0) for g in got])  # any id: masked
    attn = torch.stack([_pad_left(g[1].attn, P - g[1].prompt_len, 0) for g in got])
    mask = torch.stack([g[1].mask for g in got])
    for st in states:
        st.opt.zero_grad(set_to_none=True)
    W = sm.stack_weights([st.model for st in states], names)
    logp_new = sm.completion_logprobs(W, arch, seq, attn, mask, P, cfgs[0].temperature)
    out, total = [], 0.0
    for r, (c, st, g) in enumerate(zip(cfgs, states, got)):
        A, adv = group_advantages(c, g[2])
        loss, metrics = surrogate(c, logp_new[r], g[1], adv, loss_opts[r])
        finite = bool(torch.isfinite(loss.detach()).all())
        if finite:
            total = total + loss
        out.append([logp_new[r], adv, loss, metrics, set_step_size(c, st), finite])
    if isinstance(total, torch.Tensor):
        total.backward()
    for o, c, st in zip(out, cfgs, states):
        if o[5]:
            o[5:] = clip_and_step(st.model, st.opt, c.max_grad_norm)
        else:
            st.opt.zero_grad(set_to_none=True)
            o[5:] = [float("nan"), f"loss not finite ({o[2].item()})"]
        if o[6] is None:
            commit_update(c, st)
    return [tuple(o) for o in out]


def forest_step(cfgs, states, queue, k: int, *, tok, evalset, names, arch, loss_opts) -> list[dict]:
    """Step ``k`` of every run whose state exists (``states[i] is None``: a branch not yet forked; module docstring,
    steps 1–4); returns those runs' metrics rows (also appended to each state's ``rows``). ``queue``: the forest's
    :class:`simulate.llm.rollout_queue.RolloutQueue` (or an object with its ``sample``/``pop``)."""
    t0 = time.perf_counter()
    on = [i for i, st in enumerate(states) if st is not None]
    queue.sample(k, states)
    got = [queue.pop(i, k) for i in on]
    run_cfgs, run_states = [cfgs[i] for i in on], [states[i] for i in on]
    dv = [(st.version - g[4], g[4]) for st, g in zip(run_states, got)]  # realised delay, behaviour version
    learned = learner_step(run_cfgs, run_states, got, names, arch, [loss_opts[i] for i in on])
    t_step = time.perf_counter() - t0
    accs = heldout_accuracies(cfgs[0], [st.model for st in run_states], tok, evalset, names, arch) \
        if eval_due(cfgs[0], k) else [None] * len(on)
    rows = []
    for c, st, g, (d, v), out, acc in zip(run_cfgs, run_states, got, dv, learned, accs):
        logp_new, adv, loss, metrics, lr, grad_norm, skipped = out
        rows.append(finish_row(c, st, k, tok=tok, evalset=evalset, batch=g[0], ro=g[1], R=g[2], adv=adv,
                               logp_new=logp_new, loss=loss, loss_metrics=metrics, lr=lr, grad_norm=grad_norm,
                               skipped=skipped, d=d, behaviour_version=v, t_gen=g[3], t_step=t_step, acc=acc))
    return rows


@torch.no_grad()
def heldout_accuracies(cfg: TrainConfig, models, tok, problems, names, arch) -> list[float]:
    """Every run's greedy held-out accuracy ``(1/n) Σ_j R(greedy(x_j))`` in one stacked decode (the serial
    :func:`simulate.llm.warmstart.heldout_accuracy` decodes run by run; same prompts, scoring by
    :func:`simulate.llm.train.rewards`)."""
    ids, attn = left_pad([prompt_ids(tok, p) for p in problems], tok.pad_id, cfg.device)
    R = len(models)
    seq, at, mask, logp = sm.generate(sm.stack_weights(models, names), arch, ids.expand(R, -1, -1),
                                      attn.expand(R, -1, -1), max_new_tokens=cfg.max_new_tokens, eos_id=tok.eos_id,
                                      pad_id=tok.pad_id, greedy=True)
    P = ids.shape[1]
    return [float(rewards(tok, problems, Rollout(seq[r], at[r], mask[r], logp[r], P)).sum()) / len(problems)
            for r in range(R)]


def fork_plan(cfgs: list[TrainConfig]) -> dict[int, tuple[int, int]]:
    """``{branch: (trunk, step)}``: a fixed-delay run whose config equals another's but for a smaller ``d`` (and
    ``D``, ``out_dir``) is the larger-delay trunk's copy until after step ``min(d, K−1)``
    (:mod:`simulate.llm.tree`'s argument: both sample the warm start until then), so it is forked from it there
    instead of being computed; trunks and runs of other delay models are absent."""
    groups: dict = {}
    for i, c in enumerate(cfgs):
        if c.delay == "fixed":
            groups.setdefault(c.replace(d=0, D=0, out_dir=""), []).append(i)
    plan = {}
    for members in groups.values():
        trunk = max(members, key=lambda i: cfgs[i].d)
        for i in members:
            if i != trunk:
                plan[i] = (trunk, min(cfgs[i].d, cfgs[i].steps - 1))
    return plan


def warm_starts(cfgs: list[TrainConfig], *, progress: bool = False) -> dict:
    """``{warmstart_key: (model0, tok, info, held-out accuracy)}`` for the forest's warm starts (trained or loaded
    by :func:`simulate.llm.warmstart.warm_start`, measured once); chunks of one forest may share it."""
    warm, evalset = {}, tasks.eval_set(cfgs[0].task)
    for c in cfgs:
        key = warmstart_key(c)
        if key not in warm:
            model0, tok, info = warm_start(c, progress=progress)
            warm[key] = (model0, tok, info, heldout_accuracy(model0, tok, evalset, c.max_new_tokens))
    return warm


def train_forest_batched(cfgs: list[TrainConfig], *, progress: bool = False, share_prefixes: bool = True,
                         rollouts=RolloutQueue, warm: dict | None = None) -> list[dict]:
    """Train every config of ``cfgs`` together (module docstring); returns their summaries in input order and
    writes each run's ``config.json``, ``metrics.jsonl``, ``metrics.csv`` and ``summary.json`` like
    :func:`simulate.llm.tree.train_forest`. With ``share_prefixes`` a run that differs from another only in a
    smaller fixed delay is forked from it (:func:`fork_plan`) rather than computed until then. ``rollouts``:
    the batches' source, ``rollouts(cfgs, delays, forks, tok, names, arch)`` (the tests' snapshot reference
    sets ``keeps_snapshots``). ``warm``: :func:`warm_starts` of these configs, when already loaded (chunks of a
    forest share it; default: loaded here). ``ValueError`` from :func:`check_forest`."""
    if not cfgs:
        return []
    check_forest(cfgs)
    c0 = cfgs[0]
    set_determinism(c0)
    states = []
    evalset = tasks.eval_set(c0.task)
    plan = fork_plan(cfgs) if share_prefixes else {}
    snaps = getattr(rollouts, "keeps_snapshots", False)
    if warm is None or any(warmstart_key(c) not in warm for c in cfgs):
        warm = {**(warm or {}), **warm_starts(cfgs, progress=progress)}
    for i, c in enumerate(cfgs):
        model0, tok, info, acc0 = warm[warmstart_key(c)]
        st = None if i in plan else new_state(c, copy.deepcopy(model0), snapshots=snaps)
        if st is not None:
            st.last_acc = acc0
        states.append(st)
    arch, names = sm.arch_of(model0), sm.weight_names(model0)
    sched = [delay_schedule(c) for c in cfgs]
    loss_opts = [_loss_options(c) for c in cfgs]
    queue = rollouts(cfgs, sched, plan, tok, names, arch)
    for k in tqdm(range(c0.steps), desc=f"batched forest ({len(cfgs)} runs)", disable=not progress):
        on = [i for i, st in enumerate(states) if st is not None]
        rows = forest_step(cfgs, states, queue, k, tok=tok, evalset=evalset, names=names, arch=arch,
                           loss_opts=loss_opts)
        if k == 0:
            for i, row in zip(on, rows):
                row["heldout_acc_start"] = warm[warmstart_key(cfgs[i])][3]
        for i, (trunk, at) in plan.items():
            if at == k:
                st = states[i] = copy_state(cfgs[trunk], states[trunk])
                for v in [v for v in st.snapshots or () if v < st.version - kept_versions(cfgs[i])]:
                    del st.snapshots[v]  # versions the branch's delay never reads
    out = []
    for c, st in zip(cfgs, states):
        summary = summarise_run(c, st.rows, st.last_acc, warm[warmstart_key(c)][2])
        write_run(c, st.rows, summary)
        out.append(summary)
    return out
