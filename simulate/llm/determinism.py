"""Deterministic CPU runs of the LM harness: one definition, used by the training loop and the warm start
(so that :mod:`simulate.llm.train` and :mod:`simulate.llm.warmstart` import it, not each other)."""
from __future__ import annotations

import os

import torch

from simulate.llm.config import TrainConfig


def set_determinism(cfg: TrainConfig) -> None:
    """Fixed thread count and deterministic kernels: the same config gives the same numbers on CPU.

    On CUDA, cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` for determinism, and scaled-dot-product attention is
    held to its math kernel (the flash, memory-efficient and cuDNN kernels have non-deterministic backward
    passes; cuDNN's warned on the H200, issue 35); ops without a deterministic kernel only warn there
    (``warn_only``), so a GPU run's reproducibility is a re-run comparison, not a guarantee.
    """
    if cfg.device == "cpu":
        torch.set_num_threads(cfg.threads)
    else:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.set_num_threads(cfg.threads)
        for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
            if hasattr(torch.backends.cuda, name):  # older torch lacks the cuDNN switch
                getattr(torch.backends.cuda, name)(False)
    torch.use_deterministic_algorithms(True, warn_only=cfg.device != "cpu")


__all__ = ["set_determinism"]
