"""Float64 models in which no operation is narrower than float64, so a run does not move with the CPU's kernels.

A float32 run's numbers move in the last bit with the CPU's SIMD kernels (ATen's ``avx512`` / ``avx2`` /
``default`` paths and MKL's branches sum, and approximate ``exp``/``cos``, differently); the sampler turns such
a change into another token now and then, and the runs drift apart (issue 35: verdicts that flip with the
machine). In float64 the same kernel differences are ~1e-16 relative, which no sampled token or greedy argmax
of this harness resolves, so the discrete record of a run — tokens, rewards, accuracies, failures — is the
same on every kernel path, and the continuous one agrees to ~1e-12.

``Qwen3ForCausalLM`` cast to float64 is not float64 throughout; three things stay narrower or path-dependent
and are replaced here (:func:`widen`):

- **RMSNorm** (``Qwen3RMSNorm``) upcasts to float32, i.e. *down*casts a float64 input, and its mean is a float32
  reduction whose order is the kernel path's: :class:`WideRMSNorm` computes in the input's dtype (at least
  float32, so float32 and bf16 models are unchanged);
- **rotary tables** (``Qwen3RotaryEmbedding``) are float32 ``cos``/``sin`` of float32 frequencies from a float32
  ``pow``: :class:`WideRotary` computes them in float64 (default RoPE only; others are refused);
- **the initial weights** come from torch's normal draws, which depend on the ATen path (``python -m
  simulate.llm kernels``: ``torch_randn``): :func:`numpy_init` draws them from NumPy's generator instead,
  ``N(0, initializer_range²)`` for every matrix and embedding (the padding row zero), norms at 1 — the
  distribution of ``Qwen3PreTrainedModel._init_weights``, not its draws.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["WideRMSNorm", "WideRotary", "widen", "numpy_init", "narrow_ops"]


def _norm_class():
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    return Qwen3RMSNorm


def _rotary_class():
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    return Qwen3RotaryEmbedding


class WideRMSNorm(_norm_class()):
    """``w ⊙ x / sqrt(mean(x²) + ε)`` in ``promote(dtype(x), float32)`` (Qwen3's RMSNorm computes in float32)."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dt = hidden_states.dtype
        h = hidden_states.to(torch.promote_types(dt, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dt)


class WideRotary(_rotary_class()):
    """RoPE tables ``cos(p·θ_j)``, ``sin(p·θ_j)``, ``θ_j = base^(−2j/d)``, computed in float64 (default RoPE)."""

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        base = self.config.rope_parameters["rope_theta"]
        dim = getattr(self.config, "head_dim", None) or self.config.hidden_size // self.config.num_attention_heads
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=x.device) / dim))
        freqs = position_ids[..., None].to(torch.float64) * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def numpy_init(model, seed: int) -> None:
    """Overwrite ``model``'s weights with draws from ``numpy.random.default_rng([seed, 7])`` (parameter order):
    ``N(0, σ²)``, ``σ = config.initializer_range``, for every weight matrix and the (tied) embedding, whose
    ``padding_idx`` row is 0; norm weights 1, biases 0. The draws are the same on every CPU."""
    rng = np.random.default_rng([int(seed), 7])
    std = float(model.config.initializer_range)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights appear once
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) * std))
        emb = model.get_input_embeddings()
        if emb.padding_idx is not None:
            emb.weight[emb.padding_idx].zero_()


def widen(model) -> None:
    """Swap ``model``'s RMSNorms and rotary embedding for :class:`WideRMSNorm` / :class:`WideRotary` in place
    (same parameters and state; only ``forward`` changes). Raises ``ValueError`` for a RoPE other than default."""
    norm, rotary = _norm_class(), _rotary_class()
    for m in model.modules():
        if type(m) is norm:
            m.__class__ = WideRMSNorm
        elif type(m) is rotary:
            if m.rope_type != "default":
                raise ValueError(f"float64 models support the default RoPE only, got rope_type {m.rope_type!r}")
            m.__class__ = WideRotary


def narrow_ops(model) -> list[str]:
    """Names of the modules of ``model`` that would still compute narrower than its dtype (empty after
    :func:`widen`): Qwen3's own RMSNorm and rotary embedding."""
    norm, rotary = _norm_class(), _rotary_class()
    return [n for n, m in model.named_modules() if type(m) in (norm, rotary)]
