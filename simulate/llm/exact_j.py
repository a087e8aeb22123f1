"""Exact expected reward of the LM harness's policy under a strict exact-match reward, by teacher forcing.

For the **strict** reward ``R_s(p, y) = 1{y = a*(p) ⊕ EOS}`` (the completion's tokens are exactly the canonical
answer's, then EOS) the expected reward of prompt ``p`` is one sequence's probability,

    J(θ; p) = π_θ(a* ⊕ EOS | p) = exp Σ_t log π_θ(y_t | p, y_<t),

so ``J(θ) = (1/|P|) Σ_{p∈P} J(θ; p)`` over a finite prompt set ``P`` is exact: one batched forward pass in the
harness's own layout (:func:`simulate.llm.warmstart.supervised_batch`, :func:`simulate.llm.model.completion_logprobs`,
the temperature of the sampler), no sampling noise.

The harness's training reward (:func:`simulate.llm.tasks.reward`) is more lenient: its parser accepts any
completion whose decoded text matches ``\\s*-?\\d+\\s*`` with the right value ("012" and " 12 " for 12; pad or
BOS tokens, which decoding drops; a completion cut at ``max_new_tokens`` without EOS). So ``R_h ≥ R_s``
pointwise (a strict hit decodes to the canonical answer) and ``E_π R_h − J = P_π(R_h = 1, R_s = 0) ≥ 0``. A run
that wants ``J`` as its objective trains on :func:`strict_rewards`; :func:`reward_gap` measures the difference
on a batch (an unbiased estimate of ``P_μ(R_h ≠ R_s)`` under the policy that sampled it).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from simulate.llm import tasks
from simulate.llm.model import completion_logprobs
from simulate.llm.warmstart import lenient, supervised_batch

__all__ = ["all_problems", "split_problems", "answer_logprob", "exact_J", "strict_rewards", "reward_gap"]


def all_problems(cfg) -> list[tasks.Problem]:
    """Every ``a+b`` prompt of an ``arithmetic`` :class:`~simulate.llm.config.TaskConfig`, ``a, b ∈ [0, 10^digits)``
    in lexicographic order (the support of :func:`simulate.llm.tasks.draw_problems`). At most 3 digits (10⁶ prompts)."""
    if cfg.task != "arithmetic":
        raise ValueError(f"task must be 'arithmetic' for an enumerable prompt set, got {cfg.task!r}")
    if cfg.digits > 3:
        raise ValueError(f"digits must be in 1..3 to enumerate the prompts, got {cfg.digits!r}")
    hi = 10 ** cfg.digits
    return [tasks.Problem("arithmetic", f"A{a}+{b}=", f"Compute {a}+{b}.", str(a + b), (a, b), a + b)
            for a in range(hi) for b in range(hi)]


def split_problems(cfg) -> tuple[list[tasks.Problem], list[tasks.Problem]]:
    """``(train, held_out)``: the prompts the RL sampler draws (uniformly: ``a, b`` uniform, rejection on the split)
    and the held-out ones (:func:`simulate.llm.tasks.is_heldout`)."""
    probs = all_problems(cfg)
    held = [p for p in probs if tasks.is_heldout(p.prompt, cfg.heldout_fraction)]
    train = [p for p in probs if not tasks.is_heldout(p.prompt, cfg.heldout_fraction)]
    return train, held


def answer_logprob(model, tok, problems: list[tasks.Problem], temperature: float = 1.0,
                   batch_size: int = 512) -> torch.Tensor:
    """``log π_θ(a*(p) ⊕ EOS | p)`` (float32 ``[len(problems)]``) by teacher forcing, without gradient."""
    if not problems:
        raise ValueError("problems must be a non-empty list")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for s in range(0, len(problems), batch_size):
            seq, attn, mask, P = supervised_batch(tok, problems[s:s + batch_size], device)
            lp = completion_logprobs(model, seq, attn, mask, P, temperature)  # 0 where masked
            out.append(lp.sum(1))
    return torch.cat(out)


def exact_J(model, tok, problems: list[tasks.Problem], temperature: float = 1.0) -> float:
    """``J(θ) = (1/|P|) Σ_p exp log π_θ(a*(p) ⊕ EOS | p)``: the exact expected strict reward on ``problems``."""
    lp = answer_logprob(model, tok, problems, temperature).double()
    return float(torch.exp(lp).mean())


def _targets(tok, batch) -> list[list[int]]:
    return [tok.encode_completion(p.solution) for p in batch]


def strict_rewards(tok, batch: list[tasks.Problem], ro) -> np.ndarray:
    """``R_s ∈ {0, 1}`` per rollout row: 1 iff its completion tokens (up to and including EOS, :attr:`Rollout.mask`)
    are exactly ``encode_completion(solution)`` — the reward whose expectation :func:`exact_J` computes."""
    if len(batch) != ro.mask.shape[0]:
        raise ValueError(f"batch has {len(batch)} problems but the rollout {ro.mask.shape[0]} rows")
    comp, mask = ro.completion.cpu(), ro.mask.cpu()
    out = np.zeros(len(batch))
    for i, y in enumerate(_targets(tok, batch)):
        n = int(mask[i].sum())
        out[i] = float(n == len(y) and comp[i, :n].tolist() == y)
    return out


def reward_gap(tok, batch: list[tasks.Problem], ro, strict: np.ndarray) -> int:
    """How many rows the harness's reward (:func:`simulate.llm.tasks.reward`) scores 1 and the strict one 0 (never
    the reverse: ``R_h ≥ R_s``; a reverse case raises, since it would break the bound of the module docstring)."""
    harness = np.array([tasks.reward(p, tok.decode(c), lenient(tok)) for p, c in zip(batch, ro.completion)])
    if np.any(harness < strict):
        raise RuntimeError("a strict hit that the harness's reward scores 0: R_h >= R_s does not hold")
    return int(np.sum(harness > strict))
