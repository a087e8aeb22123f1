"""A whole asynchronous RL run on a causal LM with controlled staleness: the delay schedule, then
:func:`simulate.llm.learner_step.rl_step` step by step, with its files, checkpoints and resume.

One learner step (behaviour snapshot ``d_k`` versions old, rollouts, the estimator's surrogate, one guarded AdamW
update, the metrics row) is :mod:`simulate.llm.learner_step`; its names are re-exported here.

Delay models for ``d_k`` (:mod:`simulate.delays`, capped at ``min(D, v_k)`` — a snapshot older than
version 0 does not exist):

- ``fixed``: ``d_k = d``;
- ``uniform``: ``d_k ~ Uniform{0..D}`` i.i.d.;
- ``queue``: ``n_actors`` workers; each pulls the newest weights when it starts a batch and takes a
  lognormal generation time (log-sd 1, mean 1 learner step); the learner consumes batches in order
  of completion, so staleness emerges from the queue (``d_k = k − version pulled``).

Files and faults (issue 14; the file handling is :mod:`simulate.llm.run_files`). Metrics go to ``out_dir/metrics.jsonl``, one line per step written with
one ``write`` on an append-only descriptor and ``fsync``-ed, so a kill leaves at most a torn *last*
line, which resume drops with a warning; ``metrics.csv`` is a tidy copy written at the end.
``checkpoint.pt`` (temp file + rename) makes a run resumable and loads with
``torch.load(weights_only=True)`` (tensors and plain containers only, no arbitrary pickle). A run
holds an exclusive ``flock`` on ``out_dir/.lock`` for its whole duration, so a second run writing the
same folder is refused (the lock dies with its process: no stale locks). ``resume=True`` refuses
when there is no checkpoint (it never restarts silently) and when the saved ``config.json`` differs
from the current config (it lists the differing keys; ``force`` names the ones to accept).

Reproducibility: the same config on the same commit gives the same numbers on CPU: every random
draw is seeded from the config (prompts ``[seed, 1, k]``, delays ``[seed, 2]``, sampler
``[seed, 3, k]``, init and warm start ``init_seed``), the thread count is fixed (``threads``) and
``torch.use_deterministic_algorithms(True)`` is on.
"""
from __future__ import annotations

import json
import os

import numpy as np
import torch

from asyncgrpo.progress import progress as tqdm
from simulate import delays
from simulate.llm import tasks
from simulate.llm.config import TrainConfig, check_runtime
from simulate.llm.portability import set_determinism
from simulate.llm.diagnostics import ratio_stats  # noqa: F401  (re-exported: one row's diagnostics)
from simulate.llm.learner_step import (  # noqa: F401  (re-exported: the harness's engines import them from here)
    RunState,
    StepView,
    behaviour_of,
    clip_and_step,
    commit_update,
    copy_state,
    eval_due,
    finish_row,
    group_advantages,
    kept_versions,
    new_state,
    rewards,
    rl_step,
    sample_batch,
    sampler,
    set_step_size,
    step_problems,
    step_size,
    surrogate,
    update_step,
)
from simulate.llm.run_files import (
    append_line,
    check_fresh,
    check_resume,
    output_lock,
    read_metrics,
    write_config,
    write_lines,
)
from simulate.llm.warmstart import heldout_accuracy, warm_start


def delay_schedule(cfg: TrainConfig) -> np.ndarray:
    """Requested delays ``d_k`` for ``k = 0..K−1`` (int64), capped at ``D`` (snapshots kept).

    The delay models are the simulator's (:mod:`simulate.delays`): ``fixed`` → ``d_k = d``,
    ``uniform`` → uniform on ``{0..D}``, ``queue`` → the actor–learner queue with
    ``n_actors`` actors and lognormal generation times (log-sd 1). Seeded by ``[seed, 2]`` only, so the
    schedule is a function of the config.
    """
    spec = {
        "fixed": lambda: delays.fixed(cfg.d),
        "uniform": lambda: delays.uniform(cfg.D),
        "queue": lambda: delays.queue(cfg.n_actors),
    }[cfg.delay]()
    seed = int(np.random.SeedSequence([cfg.seed, 2]).generate_state(1)[0])
    return np.minimum(spec.sample(cfg.steps, seed=seed), cfg.D)


def _loss_options(cfg: TrainConfig) -> dict:
    """Options of ``policy_loss`` beyond the thresholds (values checked by the config), and
    ``return_metrics`` so that the loss's peer-named metrics are logged per step."""
    opts = {k: v for k, v in (("loss_agg_mode", cfg.loss_agg_mode), ("clip_ratio_c", cfg.clip_ratio_c),
                              ("cispo_clamp", cfg.cispo_clamp)) if v is not None}
    return {**opts, "return_metrics": True}


def train(cfg: TrainConfig, *, model=None, tok=None, resume: bool = False, force=(), overwrite: bool = False,
          stop_at: int | None = None, on_step=None, progress: bool = True) -> dict:
    """Run ``cfg.steps`` asynchronous RL updates; returns a summary dict (also written to ``summary.json``).

    ``model``/``tok`` default to the cached warm start of ``cfg``. ``resume`` continues from
    ``out_dir/checkpoint.pt`` (refused if it is missing or its config differs in a key not named in
    ``force``); a new run refuses an ``out_dir`` that holds a run unless ``overwrite``;
    ``stop_at`` ends the call after that step (an interruption, for testing resume);
    ``on_step(StepView)`` is called before each update. Everything that can be checked without a
    model (runtime, lock, resume) is checked before one is built.
    """
    check_runtime(cfg)
    loss_opts = _loss_options(cfg)
    with output_lock(cfg.out_dir):
        if not resume:
            check_fresh(cfg, overwrite)
        ck = check_resume(cfg, force) if resume else None
        return _train_locked(cfg, ck, model, tok, loss_opts, stop_at, on_step, progress)


def summarise_run(cfg: TrainConfig, rows: list[dict], last_acc, warm_info: dict) -> dict:
    """The run's summary (``summary.json``) from its metrics rows."""
    import pandas as pd

    df = pd.DataFrame(rows)
    first = rows[0] if rows else {}
    return {
        "estimator": cfg.estimator, "delay": cfg.delay, "d": cfg.d, "D": cfg.D, "seed": cfg.seed,
        "steps_done": len(rows), "initial_acc": first.get("heldout_acc_start"),
        "final_acc": last_acc, "warmstart": warm_info,
        "mean_realised_delay": float(df["delay"].mean()) if rows else None,
        "skipped_steps": int(df["skipped"].notna().sum()) if rows else 0,
        "mean_reward_last10": float(df["reward"].tail(10).mean()) if rows else None,
    }


def _train_locked(cfg, ck, model, tok, loss_opts, stop_at, on_step, progress) -> dict:
    set_determinism(cfg)
    if ck is None:
        write_config(cfg, None, 0, cfg.steps)
    warm_info = {}
    if model is None:
        model, tok, warm_info = warm_start(cfg, progress=progress)
    st = new_state(cfg, model)
    evalset = tasks.eval_set(cfg.task)
    delays = delay_schedule(cfg)

    start = 0
    ckpt_path = os.path.join(cfg.out_dir, "checkpoint.pt")
    metrics_path = os.path.join(cfg.out_dir, "metrics.jsonl")
    if ck is not None:
        st.model.load_state_dict(ck["model"])
        st.opt.load_state_dict(ck["optimizer"])
        st.snapshots = {int(v): s for v, s in ck["snapshots"].items()}
        st.version, start = int(ck["version"]), int(ck["step"]) + 1
        st.rows = [r for r in read_metrics(metrics_path) if r["step"] < start]
    # rewritten atomically: steps after the checkpoint are redone, not duplicated
    write_lines(metrics_path, st.rows)

    def save_checkpoint(step: int) -> None:
        tmp = ckpt_path + ".tmp"
        torch.save({"model": st.model.state_dict(), "optimizer": st.opt.state_dict(), "snapshots": st.snapshots,
                    "version": st.version, "step": step, "config": cfg.to_dict()}, tmp)
        os.replace(tmp, ckpt_path)

    acc0 = heldout_accuracy(st.model, tok, evalset, cfg.max_new_tokens) if start == 0 else None
    st.last_acc = acc0 if acc0 is not None else next((r["heldout_acc"] for r in reversed(st.rows)
                                                       if r.get("heldout_acc") is not None), None)
    end = cfg.steps if stop_at is None else min(cfg.steps, stop_at + 1)
    if ck is not None:
        write_config(cfg, ck, start, end)
    bar = tqdm(range(start, end), desc=f"{cfg.estimator} {cfg.delay_label}", disable=not progress)
    for k in bar:
        row = rl_step(cfg, st, k, tok=tok, evalset=evalset, delays=delays, loss_opts=loss_opts, on_step=on_step)
        if k == 0 and acc0 is not None:
            row["heldout_acc_start"] = acc0
        append_line(metrics_path, row)
        bar.set_postfix(R=f"{row['reward']:.2f}", acc=f"{st.last_acc:.2f}" if st.last_acc is not None else "-",
                        d=row["delay"], skip="y" if row["skipped"] else "")
        if cfg.checkpoint_every and (k + 1) % cfg.checkpoint_every == 0:
            save_checkpoint(k)
    bar.close()
    if end > start:
        save_checkpoint(end - 1)

    import pandas as pd  # tidy copy of the metrics for analysis code

    pd.DataFrame(st.rows).to_csv(os.path.join(cfg.out_dir, "metrics.csv"), index=False)
    summary = summarise_run(cfg, st.rows, st.last_acc, warm_info)
    with open(os.path.join(cfg.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary
