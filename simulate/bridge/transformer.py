"""The ladder's transformer rung (issue 33; docs/bridge.md): the LM harness's own model and learner on a task
small enough for exact J.

**Task and J.** 1-digit sums ``a+b`` (``a, b ∈ 0..9``: 100 prompts, 88 drawn by the RL sampler and 12 held out by
the harness's stable split), completions of at most 3 tokens. Reward: the **strict** exact match
(:func:`simulate.llm.exact_j.strict_rewards`: the completion is the canonical sum, then EOS), so the exact
objective is ``J(θ) = mean over the 88 training prompts of π_θ(a* ⊕ EOS | p)`` by teacher forcing
(:func:`simulate.llm.exact_j.exact_J`), recorded at every version. The harness's lenient parser would also
accept "07" or " 7"; each run records how many sampled completions it would have scored 1 and the strict
reward 0 (``gap_rate``), so the difference between the two objectives is measured, not assumed.

**Model and learner: the LM harness's, unchanged.** The ``tiny`` Qwen3 preset (random init, character
tokenizer), its supervised warm start (:func:`simulate.llm.warmstart.warm_start`, cached), and its learner
step (:func:`simulate.llm.train.rl_step`: behaviour snapshot ``d`` versions old, G = 8 rollouts per prompt,
8 prompts per step, the estimator's surrogate from :func:`asyncgrpo.estimators.token_level.policy_loss`,
grad-norm clip 1, AdamW) with LM protocol v5's RL settings (η = 3e-4 with a 10-update linear warm-up,
group-normalised advantages, length-normalised trajectory maps, ε = 0.2). Only the reward of the sampled batch
is replaced (``rl_step``'s ``batch_source``: the harness's :func:`~simulate.llm.train.sample_batch`, then the
strict reward); the outer loop adds the exact J after each update.

**Protocol** (fixed before any run of it was looked at, version ``PROTOCOL["version"]``): the warm start runs
110 supervised steps — the first multiple of 10 at which the training prompts' exact J reached 0.5 in a
warm-start-only measurement (J₀ = 0.572, held-out 0.481), a rule on the start alone; ``K = 64`` updates (the
LM protocol's 40 leave 7 steps after a lag of 32); onpolicy, is, gmc, grpo at d ∈ {0, 8, 32}; seeds 0–11 (RL
seeds: prompts and sampling; one shared warm start, as the LM protocol); no η tuning (the LM's η). Measures as
the ladder's (:func:`simulate.protocol.cells.run_metrics` with ``J* = 1``, the strict reward's optimum, which
the softmax transformer approaches but does not attain, and ``collapse_drop = 0.5``).

**Protocol t2** (6 Dec 2026, before any t2 run): t1's settings, with two changes so that a run does not move with
the CPU. (1) The warm start is a committed file (``PROTOCOL["warmstart_frozen"]``, :mod:`simulate.llm.frozen`, SHA-256
checked before use): t1's 110 supervised float32 steps as made on an AMD EPYC (AVX2) on 6 Dec 2026, where they
reach J₀ = 0.485 (the training prompts' exact J), against 0.572 on the AMD EPYC where t1's rule was fixed and 0.562
on the Intel Xeon (AVX-512) that made t1's report: the supervised warm start is chaotic across CPU kernels and
library versions (:mod:`simulate.llm.frozen`), so t1's rung started from another policy on each machine, and its
onpolicy failure counts at d = 8 and 32 moved from 12/12 and 8/12 (Intel) to 9/12 and 6/12 (this AMD). (2) The RL
phase runs in float64 (``dtype``), as LM protocol v7: from one start, kernel round-off then stays ~1e-16 and cannot
move a sampled token. :func:`freeze_warmstart` re-makes the file from t1's settings (on the machine it runs on).

Cells: one per run (seed × estimator × d), through the :mod:`sweep` engine (keyed by settings and code version,
verified reads: a damaged cell is recomputed), in long format (one row per version), so a warm ``make run``
recomputes nothing and an interrupted sweep resumes.
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np
import pandas as pd

__all__ = ["PROTOCOL", "MODES", "RUNG", "ARM", "ESTIMATORS", "DELAYS", "settings", "base_config", "freeze_warmstart",
           "cells", "run_cell", "run_rung", "run_rows", "rung_sweep"]

RUNG = "9-transformer"
ARM = "LM η = 3e-4"
ESTIMATORS = ("onpolicy", "is", "gmc", "grpo")
DELAYS = (0, 8, 32)
COLLAPSE_DROP = 0.5  # the ladder's (protocol v4's) failure rule
#: The rung's fixed settings (LM protocol v5's RL settings where the harness has them).
PROTOCOL = dict(version="t2", preset="tiny", digits=1, max_new_tokens=3, warmstart_steps=110, warmstart_batch_size=64,
                warmstart_eta=3e-3, warmstart_seed=0, G=8, n_prompts=8, eta=3e-4, warmup_steps=10, adv_norm=True,
                length_normalize=True, eps=0.2, max_grad_norm=1.0, threads=1, n_eval=12, dtype="float64",
                warmstart_dtype="float32", warmstart_frozen="bridge-rung9-t2.pt",
                warmstart_frozen_sha256="51818bff87ac201e6a73e93d51fba750a6ee9c7f0cfafab56e6f202bae7f4d68")
MODES = {
    "standard": dict(K=64, seeds=tuple(range(12))),
    "quick": dict(K=40, seeds=(0, 1)),
    "test": dict(K=3, seeds=(0,), warmstart_steps=5),  # unit tests only: a path check
}
CACHE_DIR = "results/bridge/llm-cache"


def settings(mode: str) -> dict:
    """Run length, seeds (and warm-start steps) of ``mode`` (``standard``, ``quick``, ``test``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return {"warmstart_steps": PROTOCOL["warmstart_steps"], **MODES[mode]}


def base_config(mode: str = "standard", *, estimator: str = "gmc", d: int = 0, seed: int = 0,
                cache_dir: str = CACHE_DIR, frozen: bool = True):
    """The run's :class:`simulate.llm.config.TrainConfig` (``estimator``, delay ``d``, RL ``seed``): the frozen warm
    start and float64 (protocol t2); ``frozen=False``: t1's, the supervised warm start trained here in float32."""
    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig

    s = settings(mode)
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d <= max(DELAYS):
        raise ValueError(f"d must be an integer in 0..{max(DELAYS)}, got {d!r}")
    P = PROTOCOL
    return TrainConfig(
        estimator=estimator, eps=P["eps"], G=P["G"], n_prompts=P["n_prompts"], steps=s["K"], eta=P["eta"],
        warmup_steps=P["warmup_steps"], max_grad_norm=P["max_grad_norm"], length_normalize=P["length_normalize"],
        adv_norm=P["adv_norm"], delay="fixed", d=int(d), D=max(DELAYS), max_new_tokens=P["max_new_tokens"],
        eval_every=s["K"], seed=int(seed), warmstart_seed=P["warmstart_seed"], preset=P["preset"],
        threads=P["threads"], out_dir=f"{cache_dir}/unused", cache_dir=cache_dir,
        task=TaskConfig(task="arithmetic", digits=P["digits"], n_eval=P["n_eval"]),
        dtype=P["dtype"] if frozen else P["warmstart_dtype"],
        warmstart=WarmStartConfig(steps=s["warmstart_steps"], batch_size=P["warmstart_batch_size"],
                                  eta=P["warmstart_eta"], frozen=P["warmstart_frozen"] if frozen else "",
                                  frozen_sha256=P["warmstart_frozen_sha256"] if frozen else ""))


def freeze_warmstart(out: str, *, cache_dir: str = CACHE_DIR, progress: bool = True) -> dict:
    """Write t1's warm start (110 supervised float32 steps, ``base_config(frozen=False)``; trained here, or read
    from the harness's cache) to ``out`` as a frozen file (:func:`simulate.llm.warmstart.freeze`); returns its
    ``{"path", "sha256", "info"}``. Register a new file by its SHA-256 in :data:`PROTOCOL` (a new version)."""
    from simulate.llm.warmstart import freeze

    return freeze(base_config("standard", frozen=False, cache_dir=cache_dir), out, progress=progress)


def cells(mode: str, cache_dir: str = CACHE_DIR) -> list[tuple[str, dict]]:
    """``(cell id, settings)`` of every run of ``mode``: estimator × delay × seed."""
    s = settings(mode)
    return [(f"{e}-d{d}-s{x}", dict(estimator=e, d=int(d), seed=int(x), mode=mode, cache_dir=cache_dir,
                                    protocol=PROTOCOL["version"]))
            for e in ESTIMATORS for d in DELAYS for x in s["seeds"]]


class _StrictBatches:
    """``rl_step``'s ``batch_source``: the harness's batch (:func:`simulate.llm.train.sample_batch` from the behaviour
    snapshot) with the strict reward in place of the harness's; counts the rows where the two differ."""

    def __init__(self, cfg, st, tok):
        self.cfg, self.st, self.tok = cfg, st, tok
        self.gap = []

    def __call__(self, k: int, behaviour_version: int):
        from simulate.llm.exact_j import reward_gap, strict_rewards
        from simulate.llm.train import sample_batch

        self.st.behaviour.load_state_dict(self.st.snapshots[behaviour_version])
        batch, ro, _, t_gen = sample_batch(self.cfg, self.st.behaviour, self.tok, k)
        R = strict_rewards(self.tok, batch, ro)
        self.gap.append(reward_gap(self.tok, batch, ro, R))
        return batch, ro, R, t_gen


def train_exact(cfg, model0, tok) -> pd.DataFrame:
    """One run from the warm start ``model0`` with the harness's learner step and the strict reward; one row per
    version ``k = 0..K`` with the exact J on the training and held-out prompts and step ``k``'s diagnostics."""
    from simulate.llm import tasks
    from simulate.llm.exact_j import answer_logprob, split_problems
    from simulate.llm.train import _loss_options, delay_schedule, new_state, rl_step

    train_p, held_p = split_problems(cfg.task)
    probs, n_tr = train_p + held_p, len(train_p)

    def J_now(model):
        p = np.exp(answer_logprob(model, tok, probs, cfg.temperature).double().numpy())
        return float(p[:n_tr].mean()), float(p[n_tr:].mean())

    st = new_state(cfg, copy.deepcopy(model0))
    src = _StrictBatches(cfg, st, tok)
    sched, opts, evalset = delay_schedule(cfg), _loss_options(cfg), tasks.eval_set(cfg.task)
    J, Jh = J_now(st.model)
    rows = [dict(k=0, J=J, J_heldout=Jh)]
    for k in range(cfg.steps):
        r = rl_step(cfg, st, k, tok=tok, evalset=evalset, delays=sched, loss_opts=opts, batch_source=src)
        J, Jh = J_now(st.model)
        ess = r["ess_w"] if math.isfinite(r.get("ess_w", math.nan)) else r["ess_rho"]
        rows.append(dict(k=k + 1, J=J, J_heldout=Jh, reward=r["reward"], chi2=r["chi2"], ess=ess,
                         zero=float(r["grad_norm"] == 0.0), skipped=r["skipped"] is not None,
                         delay=r["delay"], grad_norm=r["grad_norm"], gap=src.gap[-1] / cfg.n_traj,
                         heldout_acc=r["heldout_acc"]))
    return pd.DataFrame(rows)


def run_cell(*, estimator: str, d: int, seed: int, mode: str, cache_dir: str = CACHE_DIR,
             protocol: str = PROTOCOL["version"]) -> pd.DataFrame:
    """One sweep cell: the run ``(estimator, d, seed)`` of ``mode`` (:func:`train_exact`), in long format."""
    from simulate.llm.portability import set_determinism
    from simulate.llm.warmstart import warm_start

    if protocol != PROTOCOL["version"]:
        raise ValueError(f"protocol must be {PROTOCOL['version']!r} (this code's), got {protocol!r}")
    cfg = base_config(mode, estimator=estimator, d=d, seed=seed, cache_dir=cache_dir)
    set_determinism(cfg)
    t0 = time.perf_counter()
    model0, tok, _ = warm_start(cfg, progress=False)
    out = train_exact(cfg, model0, tok)
    return out.assign(estimator=estimator, d=int(d), seed=int(seed), seconds=time.perf_counter() - t0)


def _result(g: pd.DataFrame):
    """The run's rows as the fields :func:`simulate.protocol.cells.run_metrics` reads (J over versions 0..K, the
    per-step χ̂², ESS, zero-gradient flags)."""
    from types import SimpleNamespace

    g = g.sort_values("k")
    s = g.iloc[1:]
    gn = np.concatenate([[np.nan], s["grad_norm"].to_numpy(dtype=float) ** 2])
    return SimpleNamespace(J=g["J"].to_numpy(dtype=float), chi2=s["chi2"].to_numpy(dtype=float),
                           zero_grad=s["zero"].to_numpy(dtype=float), ess=s["ess"].to_numpy(dtype=float),
                           diverged=bool(s["skipped"].any() or not np.isfinite(g["J"]).all()), grad_norm2=gn)


def run_rows(long: pd.DataFrame) -> pd.DataFrame:
    """Per-run rows in the ladder's eval format (``rung``, ``arm``, ``estimator``, ``d``, ``eta``, ``seed``, ``J0``
    and :func:`simulate.protocol.cells.run_metrics`'s measures) from the cells' long table; the mechanism
    diagnostic of the numba rungs is not recorded here (NaN)."""
    from simulate.protocol.cells import run_metrics

    rows = []
    for (e, d, seed), g in long.groupby(["estimator", "d", "seed"], sort=True):
        r = _result(g)
        s = g.sort_values("k")
        rows.append(dict(rung=RUNG, phase="eval", arm=ARM, estimator=e, d=int(d), eta=PROTOCOL["eta"], seed=int(seed),
                         J0=float(r.J[0]), **run_metrics(r, 1.0, COLLAPSE_DROP),
                         J_final=float(r.J[-1]), Jh0=float(s["J_heldout"].iloc[0]),
                         Jh_final=float(s["J_heldout"].iloc[-1]), gap_rate=float(s["gap"].iloc[1:].mean()),
                         acc_final=float(s["heldout_acc"].dropna().iloc[-1]), seconds=float(s["seconds"].iloc[0]),
                         gneg_early=math.nan, gdot_early=math.nan, down_frac=math.nan, negpush_frac=math.nan))
    return pd.DataFrame(rows)


def rung_sweep(mode: str = "standard", cache_dir: str = CACHE_DIR):
    """The :class:`sweep.Sweep` of ``mode``'s runs (one cell per run, :func:`cells`)."""
    from sweep import Cell, Sweep

    return Sweep(f"bridge-transformer-{mode}", "simulate.bridge.transformer:run_cell",
                 tuple(Cell(i, s) for i, s in cells(mode, cache_dir)))


def run_rung(mode: str = "standard", sweep_kw: dict | None = None, cache_dir: str = CACHE_DIR) -> pd.DataFrame:
    """Every run of ``mode`` (warm start made once here first, then the cells through the sweep engine, cached
    under ``results/cells``); returns :func:`run_rows` of them."""
    from simulate.protocol.run import run_pinned
    from sweep import DEFAULT_ROOT, load_cells

    sw, cs = rung_sweep(mode, cache_dir), cells(mode, cache_dir)
    kw = dict(backend="serial", progress=True)
    kw.update(sweep_kw or {})
    if len(load_cells(sw, kw.get("root", DEFAULT_ROOT), code_packages=kw.get("code_packages"))) < len(cs):
        from simulate.llm.warmstart import warm_start

        warm_start(base_config(mode, cache_dir=cache_dir), progress=kw.get("progress", True))  # once, before the cells
    long = run_pinned(sw, **kw).table
    return run_rows(long)
