"""A fingerprint of this process's CPU kernel path (issue 35): hashes of what the LM harness's kernels compute on
fixed inputs, so two machines (or two kernel paths) can be compared without running an experiment.

The LM row's numbers are a function of the kernels' last bits: a pinned path (``avx2+COMPATIBLE``,
:mod:`simulate.llm.portability.kernel_paths`) is meant to give the same bits on every x86-64 CPU with AVX2, and the
fingerprint is how a user checks that claim on their machine: ``python -m simulate.llm kernels --kernels
avx2+COMPATIBLE`` on two machines, same torch, must print the same hashes wherever the pin holds. Each entry is
the first 12 hex digits of SHA-256 over the float32 bytes of one output: torch's own normal draws (its RNG
kernels depend on the ATen path too), then one op per entry on inputs drawn by NumPy (so an entry moves only with
its own kernel: MKL's ``sgemm`` via ``nn.Linear``, ``bmm``, ATen's softmax, RMS norm, ``exp``, SiLU, ``rsqrt``, a
mean), then the ``tiny`` preset's initial weights, forward loss, gradient and one AdamW step — the first entry
that differs names the kernel that does.
"""
from __future__ import annotations

import hashlib
import platform

__all__ = ["OPS", "kernel_fingerprint", "cpu_name", "report", "add_parser"]

#: The fingerprint's entries, in the order they are computed (a difference in an early one explains later ones).
OPS = ("torch_randn", "sgemm_linear", "bmm", "softmax", "rms_norm", "exp", "silu", "rsqrt", "mean", "tiny_init",
       "tiny_loss", "tiny_grad", "tiny_adamw")


def _h(t) -> str:
    return hashlib.sha256(t.detach().contiguous().float().numpy().tobytes()).hexdigest()[:12]


def kernel_fingerprint(seed: int = 0) -> dict[str, str]:
    """``{op: 12-hex SHA-256 of its float32 output}`` for :data:`OPS`, inputs from ``numpy.random.default_rng(seed)``
    (one thread; the process's kernel path as it started)."""
    import numpy as np
    import torch

    from simulate.llm.model import build_model

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    r = lambda *s: torch.from_numpy(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    out = {"torch_randn": _h(torch.randn(4096, generator=torch.Generator().manual_seed(seed)))}
    lin = torch.nn.Linear(96, 80)
    with torch.no_grad():
        lin.weight.copy_(r(80, 96))
        lin.bias.copy_(r(80))
    out["sgemm_linear"] = _h(lin(r(7, 13, 96)))
    out["bmm"] = _h(torch.bmm(r(4, 9, 16), r(4, 16, 9)))
    out["softmax"] = _h(torch.softmax(r(8, 333), -1))
    x = r(5, 64)
    out["rms_norm"] = _h(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    out["exp"] = _h(torch.exp(r(1000)))
    out["silu"] = _h(torch.nn.functional.silu(r(1000)))
    out["rsqrt"] = _h(torch.rsqrt(r(1000).abs() + 0.1))
    out["mean"] = _h(r(64, 1000).mean(-1))
    model = build_model("tiny", vocab_size=32, seed=seed)
    out["tiny_init"] = _h(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    ids = torch.from_numpy(rng.integers(0, 32, (4, 12)))
    logits = model(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 32), ids[:, 1:].reshape(-1))
    out["tiny_loss"] = _h(loss.reshape(1))
    loss.backward()
    out["tiny_grad"] = _h(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    opt.step()
    out["tiny_adamw"] = _h(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    return out


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else :func:`platform.processor`."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def report(seed: int = 0) -> dict:
    """The fingerprint with what produced it: CPU, kernel state (:func:`simulate.llm.portability.kernel_paths.kernel_state`)."""
    from simulate.llm.portability.kernel_paths import kernel_state

    return {"cpu": cpu_name(), "kernels": kernel_state(), "seed": seed, "fingerprint": kernel_fingerprint(seed)}


def add_parser(sub) -> None:
    """The ``kernels`` subcommand of ``python -m simulate.llm``: :func:`report` as JSON (the CLI re-executes itself
    on ``--kernels PATH`` first, :func:`simulate.llm.portability.kernel_paths.reexec_argv`)."""
    p = sub.add_parser("kernels", help="fingerprint of the CPU kernel path (--kernels PATH): compare two machines")
    p.add_argument("--kernels", default="", help="kernel path to run under, e.g. avx2+COMPATIBLE (default: as started)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fixed inputs (default 0)")
    p.set_defaults(_main=_main)


def _main(args) -> int:
    import json

    print(json.dumps(report(args.seed), indent=1))
    return 0
