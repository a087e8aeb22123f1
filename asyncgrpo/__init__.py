"""asyncgrpo — stale-rollout GRPO estimators and their checks.

The core package holds what every other part of the project shares: the one
registry of importance-weight maps (:mod:`asyncgrpo.estimators`) with its three
backends (NumPy reference, Numba kernels, PyTorch), the group functionals of
THEORY.md (§1–§3: group mass ρ̄, bias functional 𝔅, removed mass, ESS,
advantages) and input validation. ``theory/``, ``simulate/``, the sweep engine
``sweep/`` and ``figures/`` build on it; the core depends on NumPy and Numba (PyTorch
for the torch backend) and never imports those layers (tests/test_core_imports.py).
"""
from asyncgrpo import numba_cache as _numba_cache

_numba_cache.configure()  # before any kernel is decorated: the cache is keyed by every kernel source

from asyncgrpo.estimators import ESTIMATORS, WeightMap, get, names  # noqa: E402

__all__ = ["ESTIMATORS", "WeightMap", "get", "names"]
__version__ = "0.1.0"
