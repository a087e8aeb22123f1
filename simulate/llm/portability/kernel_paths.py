"""The CPU *kernel path* a run is made on (LM protocol v5, issue 35): what a path is, how a process starts on
one, whether this process runs it, and :func:`set_determinism`, the run's deterministic setup (the one function the
harness calls before a run, through the package's face).

**Kernel paths.** The same config on the same commit gives the same numbers on one CPU, but the float
kernels choose their code from the CPU: ATen's SIMD kernels from ``ATEN_CPU_CAPABILITY`` (``default``,
``avx2``, ``avx512``; by default the best the CPU has) and MKL's ``sgemm``/``sgemv`` (every ``nn.Linear``,
``matmul`` and ``bmm`` on CPU here; oneDNN runs no fp32 primitive in these runs, checked with
``ONEDNN_VERBOSE``) from the CPU's vendor and features. A path is written ``"<aten>+<mkl>"``:

- ``<aten>`` ∈ ``native`` (the variable unset: the CPU's own choice), ``default``, ``avx2``, ``avx512``;
- ``<mkl>`` ∈ ``native`` (``MKL_CBWR`` unset: MKL dispatches on the CPU), ``COMPATIBLE``, ``AUTO``
  (MKL's Conditional Numerical Reproducibility branches);
- ``"native"`` alone is ``"native+native"``.

:data:`PIN` = ``avx2+COMPATIBLE`` is the path that gives the same numbers on every x86-64 CPU with AVX2:
ATen's AVX2 kernels are the same machine code on every such CPU, and ``MKL_CBWR=COMPATIBLE`` (SSE2
without the approximate ``rcpps``/``rsqrtps``) is the only CNR branch MKL documents for Intel *and*
non-Intel processors — ``MKL_CBWR=AVX2`` is honoured on Intel CPUs only and falls back to ``AUTO``
elsewhere (on this AMD EPYC ``MKL_VERBOSE`` reports ``CNR:AUTO`` for it). Both variables are read once,
when torch/MKL initialise, so a process must *start* with them: :func:`reexec_argv` and
:func:`path_env` give the command line and environment, :func:`check_kernels` refuses a run whose
process does not run its recorded path. CPUs without AVX2 (and other architectures) are not covered.
"""
from __future__ import annotations

import os
import sys


#: The environment variables a kernel path sets (ATen's capability, MKL's CNR branch).
ATEN_VAR, MKL_VAR = "ATEN_CPU_CAPABILITY", "MKL_CBWR"
ATEN_CHOICES: tuple[str, ...] = ("native", "default", "avx2", "avx512")
MKL_CHOICES: tuple[str, ...] = ("native", "COMPATIBLE", "AUTO")
#: LM protocol v5's kernel pin: the same numbers on every x86-64 CPU with AVX2 (module docstring).
PIN = "avx2+COMPATIBLE"
#: Set in a process this module re-executed, so that a pin the CPU cannot honour fails instead of looping.
MARK = "ASYNCGRPO_KERNEL_PATH"


def parse_path(spec: str) -> dict[str, str | None]:
    """``"avx2+COMPATIBLE"`` → ``{ATEN_CPU_CAPABILITY: "avx2", MKL_CBWR: "COMPATIBLE"}``; a ``native`` part →
    ``None`` (the variable unset). Raises ``ValueError`` naming the valid parts."""
    aten, _, mkl = str(spec).partition("+")
    mkl = mkl or "native"
    if aten not in ATEN_CHOICES or mkl not in MKL_CHOICES:
        raise ValueError(f"kernel path must be '<aten>+<mkl>' with aten in {', '.join(ATEN_CHOICES)} and mkl in "
                         f"{', '.join(MKL_CHOICES)} (or 'native'), got {spec!r}")
    return {ATEN_VAR: None if aten == "native" else aten, MKL_VAR: None if mkl == "native" else mkl}


def path_env(spec: str, base: dict | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with the path's variables set, or removed where it says ``native``."""
    env = dict(os.environ if base is None else base)
    for k, v in parse_path(spec).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env[MARK] = spec
    return env


def _start_environ() -> dict[str, str]:
    """The environment this process started with (``/proc/self/environ`` on Linux: what torch and MKL read
    at initialisation, whatever was assigned to ``os.environ`` since), else ``os.environ``."""
    try:
        with open("/proc/self/environ", "rb") as f:
            items = f.read().split(b"\0")
        return dict(x.decode(errors="replace").split("=", 1) for x in items if b"=" in x)
    except OSError:
        return dict(os.environ)


def env_matches(spec: str, env: dict | None = None) -> bool:
    """Whether ``env`` (default: this process's start environment) sets exactly the path's variables."""
    env = _start_environ() if env is None else env
    return all(env.get(k) == v for k, v in parse_path(spec).items())


def running(spec: str) -> str:
    """``""`` when this process runs the kernel path ``spec``, else why not: its start environment must set
    the path's variables and torch must run the ATen capability asked for (it falls back to the CPU's
    own, silently, when the CPU lacks it). Imports torch."""
    want = parse_path(spec)
    if not env_matches(spec):
        got = {k: _start_environ().get(k) for k in want}
        return (f"the process started with {got} but kernel path {spec!r} needs {want} (these are read when "
                f"torch/MKL initialise: start the process with them, e.g. via simulate.llm.portability.kernel_paths.path_env)")
    if want[ATEN_VAR] is not None:
        import torch

        eff = torch.backends.cpu.get_cpu_capability().lower()
        if eff != want[ATEN_VAR]:
            return (f"{ATEN_VAR}={want[ATEN_VAR]} requested but torch runs {eff}: this CPU lacks it, and the "
                    f"kernel path {spec!r} (LM protocol v5's guarantee: x86-64 CPUs with AVX2) does not cover it")
    return ""


def check_kernels(spec: str) -> None:
    """Raise ``RuntimeError`` (with :func:`running`'s reason) unless this process runs the path ``spec``;
    ``""`` (a config that records no path, before v5) passes."""
    why = running(spec) if spec else ""
    if why:
        raise RuntimeError(why)


def reexec_argv(spec: str, argv: list[str], module: str = "simulate.llm") -> None:
    """Re-execute ``python -m module argv`` with the kernel path ``spec`` set, unless this process already
    started with it (then return). A re-executed process that still lacks it raises (no loop)."""
    if not spec or env_matches(spec):
        return
    if os.environ.get(MARK) == spec:
        raise RuntimeError(f"re-executed with kernel path {spec!r} but the environment does not carry it")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], path_env(spec))


def kernel_state() -> dict:
    """What this process runs, for provenance: torch's ATen capability, the start environment's ATen, MKL and
    MKL_ENABLE_INSTRUCTIONS variables, the path name when one was set, and the CPU's own best capability."""
    import torch

    env = _start_environ()
    return {"aten": torch.backends.cpu.get_cpu_capability().lower(), ATEN_VAR: env.get(ATEN_VAR),
            MKL_VAR: env.get(MKL_VAR), "MKL_ENABLE_INSTRUCTIONS": env.get("MKL_ENABLE_INSTRUCTIONS"),
            "path": env.get(MARK), "torch": torch.__version__}


def set_determinism(cfg) -> None:  # cfg: a TrainConfig (config imports this package, not the other way round)
    """Fixed thread count and deterministic kernels: the same config gives the same numbers on CPU; a config
    that records a kernel path (``cfg.kernels``, v5) is refused unless this process runs it.

    On CUDA, cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` for determinism, and scaled-dot-product attention is
    held to its math kernel (the flash, memory-efficient and cuDNN kernels have non-deterministic backward
    passes; cuDNN's warned on the H200, issue 35); ops without a deterministic kernel only warn there
    (``warn_only``), so a GPU run's reproducibility is a re-run comparison, not a guarantee.
    """
    import torch

    if cfg.device == "cpu":
        check_kernels(getattr(cfg, "kernels", ""))
        torch.set_num_threads(cfg.threads)
    else:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.set_num_threads(cfg.threads)
        for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
            if hasattr(torch.backends.cuda, name):  # older torch lacks the cuDNN switch
                getattr(torch.backends.cuda, name)(False)
    torch.use_deterministic_algorithms(True, warn_only=cfg.device != "cpu")


__all__ = ["ATEN_VAR", "MKL_VAR", "PIN", "check_kernels", "env_matches", "kernel_state", "parse_path", "path_env",
           "reexec_argv", "running", "set_determinism"]
