"""The harness's Qwen3-architecture policy evaluated for ``R`` weight sets at once (an ensemble forward).

The runs of a forest (:mod:`simulate.llm.batched`) share one architecture and differ only in their weights.
Here every weight is a stacked tensor ``[R, ...]`` (:func:`stack_weights`, differentiable, so the
gradient of a sum of per-run losses lands in each run's own ``.grad``) and every projection is one
batched matrix product ``[R, M, in] @ [R, in, out]`` instead of ``R`` separate ones: one kernel call
serves every run. Per layer, as in ``transformers``' ``Qwen3ForCausalLM`` (the serial path's model):

    x ← x + W_o·attn(RoPE(q_norm(W_q·n₁(x))), RoPE(k_norm(W_k·n₁(x))), W_v·n₁(x))
    x ← x + W_down·(silu(W_gate·n₂(x)) ⊙ W_up·n₂(x)),      n(x) = w ⊙ x / √(mean x² + ε)

then the final norm and the tied output head ``logits = x·Eᵀ``. Attention is causal over real tokens
(``attn = 1``); a query on a pad token attends to itself only, so that every row stays finite (its output
is never read). Sampling keeps a static KV cache ``[R·N, n_kv, P + T, d_head]`` per layer, filled slot by
slot; a decode step attends to the filled slots only (the serial cache's key length). The tensor layout is the serial path's (:mod:`simulate.llm.model`) with a leading run axis:
``seq, attn [R, N, P+T]``, ``mask, log-probs [R, N, T]``.

Not bit-identical to the serial model: a batched product may sum in another order than ``R`` separate
ones (and than ``transformers``' attention kernels), so results agree to float round-off
(``tests/test_llm_batched.py`` bounds the gap by a multiple of the dtype's eps times the magnitude).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from simulate.llm.model import logit_dtype


@dataclass(frozen=True)
class Arch:
    """The architecture numbers the forward needs (read from a ``transformers`` Qwen3 config)."""

    n_layers: int
    n_heads: int
    n_kv: int
    head_dim: int
    eps: float
    rope_theta: float
    padding_idx: int | None = None
    """The embedding's padding row (``nn.Embedding(padding_idx)``): its lookups pass no gradient."""


def arch_of(model) -> Arch:
    """:class:`Arch` of a ``Qwen3ForCausalLM``; ``ValueError`` naming a setting this forward does not cover."""
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {"rope_type": "default", "rope_theta": c.rope_theta}
    unsupported = {
        "model_type": (c.model_type, "qwen3"), "hidden_act": (c.hidden_act, "silu"),
        "attention_bias": (bool(c.attention_bias), False), "tie_word_embeddings": (bool(c.tie_word_embeddings), True),
        "rope_type": (rope.get("rope_type", "default"), "default"),
    }
    for name, (got, want) in unsupported.items():
        if got != want:
            raise ValueError(f"the stacked forward needs {name}={want!r}, got {got!r}")
    if any(t != "full_attention" for t in getattr(c, "layer_types", None) or ()):
        raise ValueError("the stacked forward needs full attention in every layer (no sliding window)")
    return Arch(c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads, float(c.rms_norm_eps),
                float(rope["rope_theta"]), model.get_input_embeddings().padding_idx)


def weight_names(model) -> list[str]:
    """The model's parameter names (the tied output head appears once, as the embedding)."""
    return [n for n, _ in model.named_parameters()]


def stack_weights(weights: list, names: list[str]) -> dict[str, torch.Tensor]:
    """``{name: [R, ...]}`` from ``R`` models or state dicts (``torch.stack``: differentiable in the inputs)."""
    get = [(w.get_parameter if isinstance(w, torch.nn.Module) else w.__getitem__) for w in weights]
    return {n: torch.stack([g(n) for g in get]) for n in names}


# ----------------------------------------------------------------------------- pieces


def _norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in ``promote(dtype(x), float32)``: float32 as ``Qwen3RMSNorm``, float64 for a float64 model as the serial
    path's :class:`simulate.llm.portability.float64_model.WideRMSNorm`; ``w`` broadcasts against ``x``."""
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _lin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x [R, ..., in] · wᵀ`` with ``w [R, out, in]``: one batched product over the runs."""
    R = x.shape[0]
    return torch.bmm(x.reshape(R, -1, x.shape[-1]), w.transpose(1, 2)).reshape(*x.shape[:-1], w.shape[1])


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def _rope_tables(arch: Arch, pos: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin [R, N, 1, L, d_head]`` of positions ``pos [R, N, L]`` (``θ_j = pos·base^{−2j/d}``), computed in
    ``promote(dtype, float32)``: float32 as Qwen3's rotary tables, float64 for a float64 model as the serial path's
    :class:`simulate.llm.portability.float64_model.WideRotary`."""
    d = arch.head_dim
    wide = torch.promote_types(dtype, torch.float32)
    inv = 1.0 / (arch.rope_theta ** (torch.arange(0, d, 2, dtype=wide, device=pos.device) / d))
    f = pos[..., None].to(wide) * inv
    emb = torch.cat((f, f), dim=-1)[:, :, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _block(W: dict, i: int, arch: Arch, x, cos, sin, allowed, cache, at: int):
    """One decoder layer on ``x [R, N, L, h]``; ``allowed [R·N, 1, L, Lk]`` (bool); with ``cache`` the new
    keys/values go to slots ``at … at+L−1`` and attention reads the whole cache."""
    R, N, L, _ = x.shape
    p = f"model.layers.{i}."
    H, K, d = arch.n_heads, arch.n_kv, arch.head_dim
    h = _norm(x, W[p + "input_layernorm.weight"][:, None, None], arch.eps)
    q = _lin(h, W[p + "self_attn.q_proj.weight"]).reshape(R, N, L, H, d)
    k = _lin(h, W[p + "self_attn.k_proj.weight"]).reshape(R, N, L, K, d)
    v = _lin(h, W[p + "self_attn.v_proj.weight"]).reshape(R, N, L, K, d)
    q = _rope(_norm(q, W[p + "self_attn.q_norm.weight"][:, None, None, None], arch.eps).transpose(2, 3), cos, sin)
    k = _rope(_norm(k, W[p + "self_attn.k_norm.weight"][:, None, None, None], arch.eps).transpose(2, 3), cos, sin)
    q, k, v = q.reshape(R * N, H, L, d), k.reshape(R * N, K, L, d), v.transpose(2, 3).reshape(R * N, K, L, d)
    if cache is not None:
        kc, vc = cache[i]
        kc[:, :, at:at + L], vc[:, :, at:at + L] = k, v
        k, v = kc[:, :, :at + L], vc[:, :, :at + L]  # the filled slots only: the serial cache's key length
    if H != K:  # grouped-query attention: each key/value head serves H/K query heads
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=d ** -0.5)
    a = a.reshape(R, N, H, L, d).transpose(2, 3).reshape(R, N, L, H * d)
    x = x + _lin(a, W[p + "self_attn.o_proj.weight"])
    h = _norm(x, W[p + "post_attention_layernorm.weight"][:, None, None], arch.eps)
    m = F.silu(_lin(h, W[p + "mlp.gate_proj.weight"])) * _lin(h, W[p + "mlp.up_proj.weight"])
    return x + _lin(m, W[p + "mlp.down_proj.weight"])


def logits(W: dict, arch: Arch, ids: torch.Tensor, pos: torch.Tensor, allowed: torch.Tensor, cache=None,
           at: int = 0) -> torch.Tensor:
    """``[R, N, L, V]`` logits of token ids ``ids [R, N, L]`` at positions ``pos`` under stacked weights ``W``."""
    E = W["model.embed_tokens.weight"]  # [R, V, h], also the output head (tied)
    R, V = E.shape[:2]
    offs = (torch.arange(R, device=ids.device) * V)[:, None, None]
    x = E.reshape(R * V, -1)[ids + offs]
    if arch.padding_idx is not None:  # as nn.Embedding(padding_idx): a pad lookup trains nothing (the row is the
        x = torch.where((ids == arch.padding_idx)[..., None], x.detach(), x)  # tied head's too, so it matters)
    cos, sin = _rope_tables(arch, pos, x.dtype)
    for i in range(arch.n_layers):
        x = _block(W, i, arch, x, cos, sin, allowed, cache, at)
    x = _norm(x, W["model.norm.weight"][:, None, None], arch.eps)
    return _lin(x, E)


def positions(attn: torch.Tensor) -> torch.Tensor:
    """Positions of left-padded rows: real tokens count 0, 1, 2, … (as :func:`simulate.llm.model._positions`)."""
    return (attn.cumsum(-1) - 1).clamp(min=0)


def causal_allowed(attn: torch.Tensor) -> torch.Tensor:
    """``[R·N, 1, L, L]`` bool: query ``i`` sees key ``j ≤ i`` when ``j`` is a real token, and always itself."""
    L = attn.shape[-1]
    tri = torch.ones(L, L, dtype=torch.bool, device=attn.device).tril()
    eye = torch.eye(L, dtype=torch.bool, device=attn.device)
    ok = attn.reshape(-1, 1, 1, L).bool()
    return (tri & ok) | eye


def completion_logprobs(W: dict, arch: Arch, seq: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                        prompt_len: int, temperature: float = 1.0) -> torch.Tensor:
    """``log π_θr(a_{r,i,t}|s_{r,i,t})`` ``[R, N, T]`` by one stacked forward, 0 where masked; in the serial path's
    dtype (:func:`simulate.llm.model.logit_dtype`: float32, float64 for a float64 model)."""
    lg = logits(W, arch, seq, positions(attn), causal_allowed(attn))
    lg = lg[:, :, prompt_len - 1:-1]
    lg = lg.to(logit_dtype(lg.dtype))
    lp = torch.log_softmax(lg / temperature, dim=-1)
    out = lp.gather(-1, seq[:, :, prompt_len:, None]).squeeze(-1)
    return torch.where(mask, out, torch.zeros_like(out))


@torch.no_grad()
def generate(W: dict, arch: Arch, ids: torch.Tensor, attn: torch.Tensor, *, max_new_tokens: int, eos_id: int,
             pad_id: int, temperature: float = 1.0, greedy: bool = False, generators=None):
    """Sample ``R`` runs' completions in one decode with a static KV cache, recording ``log μ`` of each action.

    ``ids, attn [R, N, P]`` left-padded prompts; ``generators``: one ``torch.Generator`` per run, each
    drawn as :func:`simulate.llm.model.generate` draws (one ``multinomial`` over the run's ``N`` rows per
    token), so a run's tokens are those of the serial sampler given the same probabilities. Returns
    ``(seq, attn, mask, logp)``: ``[R, N, P+T]``, ``[R, N, P+T]``, bool ``[R, N, T]``, ``[R, N, T]`` in
    :func:`simulate.llm.model.logit_dtype` of the weights (float32; float64 for a float64 model, as the serial sampler).
    """
    R, N, P = ids.shape
    T = max_new_tokens
    dev, dt = ids.device, W["model.embed_tokens.weight"].dtype
    cache = [(torch.zeros(R * N, arch.n_kv, P + T, arch.head_dim, dtype=dt, device=dev),
              torch.zeros(R * N, arch.n_kv, P + T, arch.head_dim, dtype=dt, device=dev)) for _ in range(arch.n_layers)]
    full_attn = torch.cat([attn, torch.zeros(R, N, T, dtype=attn.dtype, device=dev)], -1)
    out_tok = torch.full((R, N, T), pad_id, dtype=torch.long, device=dev)
    ldt = logit_dtype(dt)  # a float64 run samples from and records float64 log-probs, as the serial path does
    logp = torch.zeros((R, N, T), dtype=ldt, device=dev)
    mask = torch.zeros((R, N, T), dtype=torch.bool, device=dev)
    alive = torch.ones((R, N), dtype=torch.bool, device=dev)
    pos = positions(attn)
    allowed = causal_allowed(attn)  # prefill: the prompt's P slots
    step_in, step_pos, at = ids, pos, 0
    for t in range(T):
        lg = logits(W, arch, step_in, step_pos, allowed, cache, at)[:, :, -1].to(ldt)
        lp = torch.log_softmax(lg / temperature, dim=-1)
        if greedy:
            tok = lp.argmax(-1)
        else:
            tok = torch.stack([torch.multinomial(lp[r].exp(), 1, generator=generators[r]).squeeze(-1)
                               for r in range(R)])
        tok = torch.where(alive, tok, torch.full_like(tok, pad_id))
        out_tok[:, :, t] = tok
        logp[:, :, t] = torch.where(alive, lp.gather(-1, tok[..., None]).squeeze(-1), torch.zeros_like(logp[:, :, t]))
        mask[:, :, t] = alive
        alive = alive & (tok != eos_id)
        if not bool(alive.any()):
            break
        full_attn[:, :, P + t] = mask[:, :, t].long()
        at = P + t
        step_in, step_pos = tok[..., None], step_pos[..., -1:] + 1
        # the new query (slot P+t) sees the real slots so far, and itself
        allowed = full_attn[..., :P + t + 1].reshape(R * N, 1, 1, P + t + 1).bool()
        allowed[:, 0, 0, P + t] = True
    seq = torch.cat([ids, out_tok], -1)
    return seq, torch.cat([attn, mask.long()], -1), mask, logp
