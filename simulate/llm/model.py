"""Qwen3-architecture policy: build (random init, one size dial) or load (local checkpoint), sample, score.

Layout of a batch of ``N`` trajectories (one row each)::

    seq  [N, P+T]   left-padded prompt (P) | completion (T), pad after EOS
    attn [N, P+T]   1 on real tokens (prompt and completion up to and including EOS)
    mask [N, T]     bool, the completion's real tokens: the actions a_{i,t}

``log π(a_{i,t}|s_{i,t})`` is computed in float32 from float32 or bf16 logits (in float64 from a float64
model: :func:`logit_dtype`), with the
same temperature for the behaviour policy ``μ`` (recorded while sampling, as an inference engine
does) and the learner's ``π_θ`` (recomputed by a full forward), so ``ℓ_i = Σ_t (log π − log μ)``
is the log-ratio of THEORY §1 up to kernel round-off.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass

import torch

from simulate.llm.config import PRESETS
from simulate.llm.tokenizer import CharTokenizer, HFTokenizer

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def logit_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype log-probs are computed in: float32 for float32 and narrower models, float64 for a float64
    model (a float64 run keeps kernel round-off at ~1e-16, so other CPU kernels do not move a sampled token)."""
    return torch.promote_types(dtype, torch.float32)


def build_model(preset: str, vocab_size: int, seed: int, dtype: str = "float32", device: str = "cpu"):
    """Random-init ``Qwen3ForCausalLM`` of size ``PRESETS[preset]``; init drawn from ``seed`` only (for
    ``float64``: by NumPy, in a model float64 throughout, :mod:`simulate.llm.portability.float64_model`)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    p = PRESETS[preset]
    tok = CharTokenizer()
    cfg = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers,
        num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads,
        head_dim=p.head_dim,
        max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_id,
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
    )
    # fork_rng: the init must not depend on, or disturb, the caller's global torch RNG
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg)
    model = model.to(device=device, dtype=_DTYPES[dtype])
    if dtype == "float64":  # float64 throughout, initial weights from NumPy (simulate.llm.portability.float64_model)
        from simulate.llm.portability import float64_model

        float64_model.widen(model)
        float64_model.numpy_init(model, seed)
    return model


def check_checkpoint(path: str) -> None:
    """Raise ``ValueError`` naming what is missing in a local checkpoint directory."""
    if not os.path.isdir(path):
        raise ValueError(f"model_path {path!r} is not a directory; give a local checkpoint (no download at run time)")
    files = set(os.listdir(path))
    if "config.json" not in files:
        raise ValueError(f"model_path {path!r} has no config.json: not a transformers checkpoint")
    if not any(f.endswith(".safetensors") or (f.startswith("pytorch_model") and f.endswith(".bin")) for f in files):
        raise ValueError(f"model_path {path!r} has no weights (*.safetensors or pytorch_model*.bin): incomplete checkpoint")
    if not files & {"tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json"}:
        raise ValueError(f"model_path {path!r} has no tokenizer files (tokenizer.json / tokenizer_config.json)")


def load_model(path: str, dtype: str = "float32", device: str = "cpu"):
    """``(model, tokenizer)`` from a local checkpoint directory, offline; clear error if incomplete."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_checkpoint(path)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=_DTYPES[dtype])
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, torch_dtype=_DTYPES[dtype])
    if dtype == "float64":  # Qwen3's norms and rotary tables in float64 too (simulate.llm.portability.float64_model)
        from simulate.llm.portability import float64_model

        float64_model.widen(model)
    return model.to(device), HFTokenizer(tok)


def make_policy(cfg):
    """``(model, tokenizer)`` for a :class:`~simulate.llm.config.TrainConfig`: preset or checkpoint."""
    if cfg.model_path is not None:
        return load_model(cfg.model_path, cfg.dtype, cfg.device)
    tok = CharTokenizer()
    return build_model(cfg.preset, tok.vocab_size, cfg.init_seed, cfg.dtype, cfg.device), tok


# ----------------------------------------------------------------------------- batches


@dataclass
class Rollout:
    """A batch of sampled completions and what the behaviour policy recorded while sampling."""

    seq: torch.Tensor
    """long [N, P+T]: left-padded prompts then completions."""
    attn: torch.Tensor
    """long [N, P+T]: 1 on real tokens."""
    mask: torch.Tensor
    """bool [N, T]: real completion tokens (incl. EOS)."""
    logp_old: torch.Tensor
    """float32 (float64 for a float64 model) [N, T]: ``log μ(a_{i,t}|s_{i,t})`` recorded at generation time,
    0 where masked."""
    prompt_len: int
    """``P``."""

    @property
    def completion(self) -> torch.Tensor:
        return self.seq[:, self.prompt_len:]


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, attn)`` of shape ``[N, P]`` with prompts right-aligned (generation continues at the right)."""
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p):] = torch.tensor(p, dtype=torch.long)
        attn[i, P - len(p):] = 1
    return ids.to(device), attn.to(device)


def _positions(attn: torch.Tensor) -> torch.Tensor:
    # left padding: real tokens count 0,1,2,... from the first real one; pads get 0 (masked anyway)
    return (attn.cumsum(-1) - 1).clamp(min=0)


_CACHE_KW: str | None = None


def _cache_kw(model) -> str:
    # transformers 5 renamed `past_key_values` to `cache`; support both spellings
    global _CACHE_KW
    if _CACHE_KW is None:
        params = inspect.signature(model.forward).parameters
        _CACHE_KW = "cache" if "cache" in params else "past_key_values"
    return _CACHE_KW


@torch.no_grad()
def generate(model, prompts: list[list[int]], *, max_new_tokens: int, eos_id: int, pad_id: int,
             temperature: float = 1.0, greedy: bool = False, generator: torch.Generator | None = None) -> Rollout:
    """Sample (or greedily decode) completions with a KV cache, recording ``log μ`` of each action.

    Randomness comes only from ``generator`` (``torch.multinomial``), so a seeded generator gives the
    same completions. Rows stop at EOS; later positions hold ``pad_id`` and are masked.
    """
    from transformers.cache_utils import DynamicCache

    device = next(model.parameters()).device
    ids, attn = left_pad(prompts, pad_id, device)
    N, P = ids.shape
    T = max_new_tokens
    out_tok = torch.full((N, T), pad_id, dtype=torch.long, device=device)
    logp = torch.zeros((N, T), dtype=logit_dtype(next(model.parameters()).dtype), device=device)
    mask = torch.zeros((N, T), dtype=torch.bool, device=device)
    alive = torch.ones(N, dtype=torch.bool, device=device)
    cache = DynamicCache()
    kw = _cache_kw(model)
    pos = _positions(attn)
    step_in, step_pos = ids, pos
    full_attn = attn
    for t in range(T):
        logits = model(input_ids=step_in, attention_mask=full_attn, position_ids=step_pos, use_cache=True,
                       **{kw: cache}).logits[:, -1]
        logits = logits.to(logit_dtype(logits.dtype))
        logprobs = torch.log_softmax(logits / temperature, dim=-1)
        if greedy:
            tok = logprobs.argmax(-1)
        else:
            tok = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
        tok = torch.where(alive, tok, torch.full_like(tok, pad_id))
        out_tok[:, t] = tok
        logp[:, t] = torch.where(alive, logprobs.gather(-1, tok[:, None]).squeeze(-1), torch.zeros_like(logp[:, t]))
        mask[:, t] = alive
        alive = alive & (tok != eos_id)
        if not bool(alive.any()):
            break
        step_in = tok[:, None]
        step_pos = step_pos[:, -1:] + 1
        full_attn = torch.cat([full_attn, mask[:, t:t + 1].long()], dim=1)
    seq = torch.cat([ids, out_tok], dim=1)
    return Rollout(seq=seq, attn=torch.cat([attn, mask.long()], dim=1), mask=mask, logp_old=logp, prompt_len=P)


def completion_logprobs(model, seq: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor, prompt_len: int,
                        temperature: float = 1.0) -> torch.Tensor:
    """``log π_θ(a_{i,t}|s_{i,t})`` float32 (float64 for a float64 model) ``[N, T]`` by one full forward
    (differentiable), 0 where masked."""
    logits = model(input_ids=seq, attention_mask=attn, position_ids=_positions(attn)).logits
    logits = logits[:, prompt_len - 1:-1]  # position P-1+t predicts completion token t
    logits = logits.to(logit_dtype(logits.dtype))
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    tok = seq[:, prompt_len:]
    out = logprobs.gather(-1, tok[..., None]).squeeze(-1)
    return torch.where(mask, out, torch.zeros_like(out))
