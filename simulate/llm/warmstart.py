"""Supervised warm start (cached) and the held-out accuracy used everywhere.

RL from a random-init policy gets ``R = 0`` on every trajectory, so ``A_i = 0`` and no estimator
learns anything. A short supervised phase on training problems,
``min_θ −Σ_t log π_θ(a*_t | s_t)`` over one correct completion ``a*`` per prompt, gives a policy with
non-trivial success from which staleness can be studied. The result is cached under
``cache_dir/warmstart/<key>.pt``, where ``key`` hashes everything that determines the weights
(:func:`simulate.llm.config.warmstart_key`, settings and the source of the modules that compute it),
so the runs of an experiment share it. The cache file carries a SHA-256 of its weights; a file that
does not load, lacks the checksum or fails it is reported with a warning naming it and recomputed.
A *frozen* warm start (``cfg.warmstart.frozen``, LM protocol v7) is loaded from its committed file instead
(:mod:`simulate.llm.portability.frozen_warmstart`).
"""
from __future__ import annotations

import json
import os
import time
import warnings

import torch
from asyncgrpo.progress import progress as tqdm

from simulate.llm import tasks
from simulate.llm.config import TrainConfig, warmstart_key
from simulate.llm.portability.frozen_warmstart import load_frozen, state_checksum, write_frozen  # noqa: F401 (state_checksum re-exported)
from simulate.llm.model import completion_logprobs, generate, left_pad, make_policy
from simulate.llm.tokenizer import CharTokenizer


def prompt_ids(tok, problem: tasks.Problem) -> list[int]:
    """Prompt tokens: compact text for the character tokenizer, the chat template for a checkpoint."""
    return tok.encode_prompt(problem.prompt if isinstance(tok, CharTokenizer) else problem.question)


def lenient(tok) -> bool:
    """Chat checkpoints may wrap the answer in words; character models must emit exactly the answer."""
    return not isinstance(tok, CharTokenizer)


@torch.no_grad()
def heldout_accuracy(model, tok, problems: list[tasks.Problem], max_new_tokens: int, batch_size: int = 256) -> float:
    """Greedy exact-match accuracy ``(1/n) Σ_j R(greedy(x_j))`` on held-out problems."""
    was_training = model.training
    model.eval()
    hits = 0.0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        r = generate(model, [prompt_ids(tok, p) for p in chunk], max_new_tokens=max_new_tokens,
                     eos_id=tok.eos_id, pad_id=tok.pad_id, greedy=True)
        hits += sum(tasks.reward(p, tok.decode(c), lenient(tok)) for p, c in zip(chunk, r.completion))
    model.train(was_training)
    return hits / len(problems)


def supervised_batch(tok, problems: list[tasks.Problem], device):
    """``(seq, attn, mask, P)`` for teacher forcing the solutions, in the layout of :mod:`model`."""
    ids, attn = left_pad([prompt_ids(tok, p) for p in problems], tok.pad_id, device)
    comps = [tok.encode_completion(p.solution) for p in problems]
    T = max(len(c) for c in comps)
    ctok = torch.full((len(comps), T), tok.pad_id, dtype=torch.long)
    cmask = torch.zeros((len(comps), T), dtype=torch.bool)
    for i, c in enumerate(comps):
        ctok[i, :len(c)] = torch.tensor(c)
        cmask[i, :len(c)] = True
    ctok, cmask = ctok.to(device), cmask.to(device)
    return torch.cat([ids, ctok], 1), torch.cat([attn, cmask.long()], 1), cmask, ids.shape[1]


def load_cached(path: str, model, device: str) -> dict | None:
    """Load a cached warm start into ``model`` and return its ``info``; ``None`` (with a warning naming the
    file) when it does not load, lacks its checksum, fails it, or does not fit the model."""
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
        state, info, digest = blob["state_dict"], json.loads(blob["info"]), blob["sha256"]
        if state_checksum(state) != digest:
            raise ValueError("checksum mismatch")
        model.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 — any damage means the same thing: recompute
        warnings.warn(f"warm-start cache {path} is damaged ({type(exc).__name__}: {exc}); recomputing it",
                      stacklevel=3)
        return None
    return info


def warm_start(cfg: TrainConfig, *, use_cache: bool = True, progress: bool = True):
    """``(model, tok, info)``: the policy after the supervised phase, loaded from cache when present.

    ``info`` holds the cache path, the held-out accuracy after warm start and the wall time.
    """
    from simulate.llm.portability import set_determinism

    set_determinism(cfg)
    model, tok = make_policy(cfg)
    if cfg.warmstart.frozen:  # a committed file, checked by its SHA-256 (simulate.llm.portability.frozen_warmstart)
        info = load_frozen(cfg, model)
        # re-measured in this model's dtype: greedy argmax near-ties may resolve otherwise than where it was made
        info["heldout_accuracy"] = heldout_accuracy(model, tok, tasks.eval_set(cfg.task), cfg.max_new_tokens)
        return model, tok, info
    key = warmstart_key(cfg)
    path = os.path.join(cfg.cache_dir, "warmstart", f"{key}.pt")
    if use_cache and os.path.exists(path):
        info = load_cached(path, model, cfg.device)
        if info is not None:
            return model, tok, info
        model, tok = make_policy(cfg)  # a partial load_state_dict may have touched the weights

    t0 = time.time()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmstart.eta, weight_decay=0.0)
    model.train()
    bar = tqdm(range(cfg.warmstart.steps), desc="warm start", disable=not progress, leave=False)
    for step in bar:
        batch = tasks.draw_problems([cfg.init_seed, 7_000_001, step], cfg.warmstart.batch_size, cfg.task)
        seq, attn, mask, P = supervised_batch(tok, batch, cfg.device)
        lp = completion_logprobs(model, seq, attn, mask, P)
        loss = -(lp.sum() / mask.sum())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0:
            bar.set_postfix(nll=f"{loss.item():.3f}")
    acc = heldout_accuracy(model, tok, tasks.eval_set(cfg.task), cfg.max_new_tokens)
    info = {"key": key, "path": path, "heldout_accuracy": acc, "seconds": time.time() - t0,
            "steps": cfg.warmstart.steps}
    if use_cache:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        state = model.state_dict()
        torch.save({"state_dict": state, "info": json.dumps(info), "sha256": state_checksum(state)}, tmp)
        os.replace(tmp, path)  # atomic: a parallel run never reads a half-written cache
    return model, tok, info


def freeze(cfg: TrainConfig, out: str, *, progress: bool = True) -> dict:
    """Write the warm start of ``cfg`` (its settings without ``frozen``; trained, or loaded from the cache) to
    ``out`` with its provenance (:func:`simulate.llm.portability.frozen_warmstart.write_frozen`); returns ``{"path", "sha256", "info"}``.
    Refuses to overwrite ``out``."""
    import dataclasses
    import subprocess

    from simulate.llm.portability.fingerprint import cpu_name

    if os.path.exists(out):
        raise ValueError(f"--out {out!r} exists; a frozen warm start is never overwritten (choose another name)")
    cfg = cfg.replace(warmstart=dataclasses.replace(cfg.warmstart, frozen="", frozen_sha256=""))
    model, _, info = warm_start(cfg, progress=progress)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    prov = dict(heldout_accuracy=info["heldout_accuracy"], steps=cfg.warmstart.steps, key=info["key"],
                settings=dict(preset=cfg.preset, dtype=cfg.dtype, kernels=cfg.kernels or "native",
                              warmstart=dataclasses.asdict(cfg.warmstart), task=dataclasses.asdict(cfg.task),
                              init_seed=cfg.init_seed, max_new_tokens=cfg.max_new_tokens),
                cpu=cpu_name(), torch=torch.__version__, capability=torch.backends.cpu.get_cpu_capability(),
                commit=commit)
    return dict(path=out, sha256=write_frozen(state, prov, out), info=prov)
