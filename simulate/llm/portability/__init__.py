"""Portability of the LM harness, in one place: what keeps a run's numbers the same across CPUs and kernel paths,
and what measures how they move (docs/portability.md; issue 60).

**The entry point.** Before every run the harness calls one function, :func:`set_determinism` ``(cfg)``
(train, tree, batched, the warm start, gpu-run, the bridge's rung): a fixed thread count, deterministic kernels,
and the refusal of a process that does not run the kernel path ``cfg.kernels`` records. A sweep driver
(:func:`simulate.llm.experiment.run`) calls :func:`run_on_its_path` first: ``None`` when this process may run the
sweep, else the table from a child process started on the sweep's path. It imports these two from this face. Beyond
them only the CLI (re-executing itself on a path, ``kernel_paths.reexec_argv``) and the config and protocol
dataclasses (checking their ``kernels`` / ``kernel_pin`` field, ``kernel_paths.parse_path``) name a kernel path.

Modules, one idea each::

    kernel_paths.py      what a path "<aten>+<mkl>" is, the environment that starts a process on it, whether this
                         process runs it (config and protocol validate their field with parse_path), and
                         set_determinism: the run's deterministic setup
    sweep_on_path.py     a sweep run in a child process started on a path (run_on_its_path, run_under)
    float64_model.py     float64 models float64 throughout (RMSNorm, rotary tables) with a NumPy init (model.py)
    frozen_warmstart.py  frozen warm starts: committed files (simulate/llm/warmstarts/) checked by SHA-256
                         (warmstart.py)
    fingerprint.py       hashes of each kernel's output on fixed inputs (``python -m simulate.llm kernels``)
    perturbation.py      the perturbation check: the protocol's verdicts re-made on other paths (``--perturb``,
                         ``make verify``); ``python -m simulate.llm.portability.perturbation`` is its child process

Old paths (before issue 60): determinism.py → kernel_paths.py, pinned.py → sweep_on_path.py,
perturb.py → perturbation.py, fingerprint.py, frozen.py → frozen_warmstart.py, wide.py → float64_model.py.
"""
from simulate.llm.portability.kernel_paths import set_determinism
from simulate.llm.portability.sweep_on_path import run_on_its_path

__all__ = ["set_determinism", "run_on_its_path"]
