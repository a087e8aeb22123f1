"""One learner step of asynchronous GRPO-family RL on a causal LM, on a run's state (:class:`RunState`).

At learner step ``k`` the policy is at version ``v_k`` (number of updates applied). A group of ``G``
completions per prompt is sampled from the behaviour snapshot ``μ = π_{θ_{v_k − d_k}}`` (THEORY §1),
its log-probs ``log μ(a_t|s_t)`` recorded at generation time as an inference engine would. The
learner recomputes ``log π_θ(a_t|s_t)`` and takes one AdamW step on the surrogate of
:func:`asyncgrpo.estimators.token_level.policy_loss`, whose autograd gradient is ``−ĝ`` with

    ĝ = (1/G) Σ_i A_i Σ_t c_{i,t} ∇log π_θ(a_{i,t}|s_{i,t}),   A_i = R_i − R̄   (per group),

``c_{i,t} = w_i`` from the registry for the trajectory-level maps (``w = W_ε(ℓ)`` with
``ℓ_i = Σ_t ℓ_{i,t}``; ``w_i/T_i`` with ``cfg.length_normalize``), or the token-level coefficients (grpo, gspo,
cispo, m2po). No estimator math lives here.

:func:`rl_step` reads top to bottom: behaviour snapshot (:func:`behaviour_of`), rollouts (:func:`sample_batch`),
advantages, surrogate, guarded update (:func:`update_step`, :func:`commit_update`), metrics row
(:func:`finish_row`). The batched engine (:mod:`simulate.llm.batched`) runs the same pieces for many runs at
once; a whole run with its files, resume and checkpoints is :mod:`simulate.llm.train`.

Numerics: log-probs are float32 even for a bf16 model (float64 for a float64 one); a NaN/inf loss or gradient
skips the update (weights and optimiser untouched) and logs the reason.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from asyncgrpo.estimators.token_level import policy_loss
from asyncgrpo.functionals import advantages
from simulate.llm import tasks
from simulate.llm.config import TrainConfig
from simulate.llm.diagnostics import ratio_stats
from simulate.llm.model import Rollout, completion_logprobs, generate
from simulate.llm.warmstart import heldout_accuracy, lenient, prompt_ids

# ----------------------------------------------------------------------------- a run's state


@dataclass
class RunState:
    """Everything a run carries from one step to the next (copied whole to branch a run, :mod:`simulate.llm.tree`).

    ``snapshots`` maps a policy version to a detached copy of its weights (the last ``D + 1`` are
    kept); ``rows`` are the metrics rows so far; ``last_acc`` the latest held-out accuracy. The batched
    engine keeps no snapshots and no behaviour copy (``None`` both): it queues rollouts instead
    (:mod:`simulate.llm.rollout_queue`).
    """

    model: torch.nn.Module
    behaviour: torch.nn.Module | None
    opt: torch.optim.Optimizer
    snapshots: dict
    version: int
    rows: list
    last_acc: float | None


def new_state(cfg: TrainConfig, model, *, snapshots: bool = True) -> RunState:
    """A fresh run's state from ``model`` (the warm start): AdamW at ``cfg.eta``, version 0 snapshotted (with
    ``snapshots=False``: neither snapshots nor a behaviour copy, for a run whose rollouts are queued)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.eta, weight_decay=cfg.weight_decay)
    if not snapshots:
        return RunState(model, None, opt, None, 0, [], None)
    behaviour = copy.deepcopy(model).eval()
    for p in behaviour.parameters():
        p.requires_grad_(False)
    return RunState(model, behaviour, opt, {0: _snapshot(model)}, 0, [], None)


def copy_state(cfg: TrainConfig, st: RunState) -> RunState:
    """An independent copy of ``st`` (model, optimiser moments, snapshots, rows): continuing the copy gives
    bit for bit what continuing ``st`` would."""
    model = copy.deepcopy(st.model)
    behaviour = copy.deepcopy(st.behaviour)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.eta, weight_decay=cfg.weight_decay)  # as new_state
    opt.load_state_dict(copy.deepcopy(st.opt.state_dict()))
    snaps = None if st.snapshots is None else {v: {k: t.clone() for k, t in s.items()} for v, s in st.snapshots.items()}
    return RunState(model, behaviour, opt, snaps, st.version, copy.deepcopy(st.rows), st.last_acc)


def _snapshot(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@dataclass
class StepView:
    """What a test or a caller's ``on_step`` hook may inspect right before the update of step ``k``."""

    step: int
    version: int
    behaviour_version: int
    model: torch.nn.Module
    behaviour: torch.nn.Module
    rollout: Rollout
    rewards: np.ndarray
    adv: np.ndarray

# ----------------------------------------------------------------------------- the step


def rl_step(cfg: TrainConfig, st: RunState, k: int, *, tok, evalset, delays, loss_opts, on_step=None,
            batch_source=None) -> dict:
    """One learner step ``k`` on ``st`` (in place): behaviour snapshot ``d_k`` versions old, its rollouts,
    the estimator's surrogate, one guarded AdamW update, the metrics row (returned and appended to
    ``st.rows``). ``batch_source(k, behaviour_version)`` may return a batch of :func:`sample_batch`
    drawn elsewhere from the same weights (``None``: sample here). The batched engine
    (:mod:`simulate.llm.batched`) runs the same pieces for many runs at once."""
    t0 = time.perf_counter()
    model = st.model
    # 1. behaviour snapshot, d_k versions old
    d, behaviour_version = behaviour_of(st, delays, k)
    got = batch_source(k, behaviour_version) if batch_source is not None else None
    if got is None:
        st.behaviour.load_state_dict(st.snapshots[behaviour_version])
        # 2. rollouts: G completions per prompt from μ, log μ recorded while sampling
        got = sample_batch(cfg, st.behaviour, tok, k)
    batch, ro, R, t_gen = got
    A, adv = group_advantages(cfg, R)

    # 3. learner: current log-probs, the estimator's surrogate, one guarded update
    logp_new = completion_logprobs(model, ro.seq, ro.attn, ro.mask, ro.prompt_len, cfg.temperature)
    if on_step is not None:
        st.behaviour.load_state_dict(st.snapshots[behaviour_version])
        on_step(StepView(k, st.version, behaviour_version, model, st.behaviour, ro, R, A))
    loss, loss_metrics = surrogate(cfg, logp_new, ro, adv, loss_opts)
    lr = set_step_size(cfg, st)
    grad_norm, skipped = update_step(model, st.opt, loss, cfg.max_grad_norm)
    if skipped is None:
        commit_update(cfg, st)

    # 4. metrics
    return finish_row(cfg, st, k, tok=tok, evalset=evalset, batch=batch, ro=ro, R=R, adv=adv, logp_new=logp_new,
                      loss=loss, loss_metrics=loss_metrics, lr=lr, grad_norm=grad_norm, skipped=skipped, d=d,
                      behaviour_version=behaviour_version, t_gen=t_gen, t_step=time.perf_counter() - t0)


def behaviour_of(st: RunState, delays, k: int) -> tuple[int, int]:
    """``(d, behaviour version)`` of step ``k``: ``d = min(d_k, v)``, version ``v − d``."""
    d = int(min(delays[k], st.version))
    return d, st.version - d

# ----------------------------------------------------------------------------- rollouts


def sample_batch(cfg: TrainConfig, behaviour, tok, k: int):
    """Step ``k``'s rollouts from ``behaviour``: ``(problems, rollout, rewards, seconds)``.

    A function of (the behaviour's weights, ``cfg.seed``, ``k`` and the sampling settings) only: the
    prompts are drawn from ``[seed, 1, k]`` and the sampler from ``[seed, 3, k]``, so two runs of a
    seed whose behaviour weights are the same at step ``k`` draw the same batch (:mod:`simulate.llm.tree`
    reuses it).
    """
    t0 = time.perf_counter()
    batch = step_problems(cfg, k)
    ro = generate(behaviour, [prompt_ids(tok, p) for p in batch], max_new_tokens=cfg.max_new_tokens,
                  eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=cfg.temperature, generator=sampler(cfg, k))
    t_gen = time.perf_counter() - t0
    return batch, ro, rewards(tok, batch, ro), t_gen


def step_problems(cfg: TrainConfig, k: int) -> list:
    """Step ``k``'s ``n_prompts`` problems from ``[seed, 1, k]``, each repeated ``G`` times (group by group)."""
    problems = tasks.draw_problems([cfg.seed, 1, k], cfg.n_prompts, cfg.task)
    return [p for p in problems for _ in range(cfg.G)]


def sampler(cfg: TrainConfig, k: int) -> torch.Generator:
    """Step ``k``'s sampling generator, seeded from ``[seed, 3, k]``."""
    return torch.Generator(device=cfg.device).manual_seed(_sampler_seed(cfg.seed, k))


def _sampler_seed(seed: int, step: int) -> int:
    return int(np.random.default_rng([seed, 3, step]).integers(0, 2**62))


def rewards(tok, batch: list, ro: Rollout) -> np.ndarray:
    """Rewards ``R_i`` of the decoded completions (the task's lenient parser)."""
    return np.array([tasks.reward(p, tok.decode(c), lenient(tok)) for p, c in zip(batch, ro.completion)])

# ----------------------------------------------------------------------------- the update


def group_advantages(cfg: TrainConfig, R: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
    """Per-group advantages ``A_i`` (:func:`asyncgrpo.functionals.advantages`), NumPy and in the log-probs' dtype."""
    A = np.concatenate([advantages(r, cfg.adv_norm) for r in R.reshape(cfg.n_prompts, cfg.G)])
    return A, torch.as_tensor(A, dtype=torch.float64 if cfg.dtype == "float64" else torch.float32, device=cfg.device)


def surrogate(cfg: TrainConfig, logp_new: torch.Tensor, ro: Rollout, adv: torch.Tensor, loss_opts: dict):
    """``(loss, metrics)`` of the estimator's surrogate (:func:`asyncgrpo.estimators.token_level.policy_loss`)."""
    out = policy_loss(cfg.estimator, logp_new, ro.logp_old, adv, ro.mask, eps=cfg.eps, eps_low=cfg.eps_low,
                      eps_high=cfg.eps_high, tau_m2=cfg.tau_m2, group_size=cfg.G,
                      length_normalize=cfg.length_normalize, **loss_opts)
    return _split_loss(out)


def _split_loss(out) -> tuple[torch.Tensor, dict]:
    """``policy_loss(..., return_metrics=True)`` gives ``(loss, metrics)``; metrics become floats.

    The loss's metrics keep their own (peer-aligned) names — ``pg_loss``, ``clipfrac_low``/``_high``,
    ``chi2_seq``, ``ppo_kl``, ESS, … — so a curve can be overlaid on a verl or TRL one; a name this
    loop already logs (its own diagnostics) gets the prefix ``loss/`` instead of being overwritten.
    """
    loss, m = out
    flat = {}
    for k, v in m.items():
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            flat[str(k)] = float(v)
    return loss, flat


def set_step_size(cfg: TrainConfig, st: RunState) -> float:
    """Set the optimiser's step size for this update (:func:`step_size`, η itself without warm-up); returns it."""
    lr = step_size(cfg, st.version)
    for group in st.opt.param_groups:
        group["lr"] = lr
    return lr


def step_size(cfg: TrainConfig, version: int) -> float:
    """AdamW step size of the update that makes version ``version + 1``: ``η·min(1, (version+1)/warmup_steps)``
    (linear warm-up over the applied updates; ``η`` when ``warmup_steps = 0``)."""
    if cfg.warmup_steps <= 0:
        return cfg.eta
    return cfg.eta * min(1.0, (version + 1) / cfg.warmup_steps)


def update_step(model, opt, loss: torch.Tensor, max_grad_norm: float) -> tuple[float, str | None]:
    """Backward and AdamW step unless the loss or the gradient is not finite.

    Returns ``(pre-clip grad norm, reason)``; ``reason`` is ``None`` when the step was applied, else
    why it was skipped (weights and optimiser state are then untouched).
    """
    opt.zero_grad(set_to_none=True)
    if not torch.isfinite(loss.detach()).all():
        return math.nan, f"loss not finite ({loss.item()})"
    loss.backward()
    return clip_and_step(model, opt, max_grad_norm)


def clip_and_step(model, opt, max_grad_norm: float) -> tuple[float, str | None]:
    """The part of :func:`update_step` after the backward pass (the gradients are in ``.grad``): clip the
    gradient to norm ``max_grad_norm`` and take the AdamW step, unless the norm is not finite (then the
    gradients are cleared and the step skipped). Returns ``(pre-clip grad norm, reason or None)``."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, error_if_nonfinite=False)
    norm = float(norm)
    if not math.isfinite(norm):
        opt.zero_grad(set_to_none=True)
        return norm, f"gradient not finite (norm {norm})"
    opt.step()
    return norm, None


def commit_update(cfg: TrainConfig, st: RunState) -> None:
    """After an applied update: the version advances, its snapshot is kept, snapshots the delay never reads go
    (a run without snapshots only advances its version)."""
    st.version += 1
    if st.snapshots is None:
        return
    st.snapshots[st.version] = _snapshot(st.model)
    for old in [v for v in st.snapshots if v < st.version - kept_versions(cfg)]:
        del st.snapshots[old]


def kept_versions(cfg: TrainConfig) -> int:
    """How many versions back the snapshots are kept: ``D``, or ``min(D, d)`` for the fixed model, which
    never reads a version older than ``version − d`` (a forest's short-delay branches then hold a few
    snapshots, not ``D + 1``: the ``gpu`` preset's are 170 MB each)."""
    return min(cfg.D, cfg.d) if cfg.delay == "fixed" else cfg.D

# ----------------------------------------------------------------------------- metrics


def finish_row(cfg: TrainConfig, st: RunState, k: int, *, tok, evalset, batch, ro, R, adv, logp_new, loss,
               loss_metrics, lr, grad_norm, skipped, d, behaviour_version, t_gen, t_step, acc=None) -> dict:
    """Step ``k``'s metrics row (diagnostics, the loss's metrics, the held-out accuracy when due), appended to
    ``st.rows`` and returned. ``acc``: the due accuracy computed elsewhere (the batched forest decodes every
    run's at once); ``None``: computed here."""
    tok_ell = torch.where(ro.mask, logp_new.detach() - ro.logp_old, torch.zeros_like(logp_new))
    n_tok = int(ro.mask.sum())
    row = {
        "step": k, "version": st.version, "behaviour_version": behaviour_version, "delay": d,
        "reward": float(R.mean()), "loss": float(loss.detach()), "grad_norm": grad_norm,
        "skipped": skipped, "lr": lr, "completion_tokens": n_tok, "mean_len": n_tok / len(batch),
        "gen_tokens_per_s": n_tok / max(t_gen, 1e-9),
        "tokens_per_s": n_tok / max(t_step, 1e-9),
        **ratio_stats(cfg, tok_ell, ro.mask, adv),
        "heldout_acc": None,
    }
    row.update({(f"loss/{k}" if k in row else k): v for k, v in loss_metrics.items()})
    if eval_due(cfg, k):
        acc = heldout_accuracy(st.model, tok, evalset, cfg.max_new_tokens) if acc is None else acc
        st.last_acc = row["heldout_acc"] = acc
    st.rows.append(row)
    return row


def eval_due(cfg: TrainConfig, k: int) -> bool:
    """Whether step ``k`` ends with a held-out evaluation (every ``eval_every`` steps and at the last)."""
    return (k + 1) % cfg.eval_every == 0 or k == cfg.steps - 1
