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

#: The three losses, at the top level (docs/losses.md): the registry's one form for every estimator, verl 0.9.1's
#: actor loss under any ``algorithm.rollout_correction``, TRL 1.16's ``GRPOTrainer`` loss under any ``GRPOConfig``.
#: Pure torch, imported on first use (neither needs verl or TRL installed).
_LOSSES = {"policy_loss": "asyncgrpo.estimators.token_level",
           "verl_policy_loss": "asyncgrpo.integrations._peer_verl",
           "trl_policy_loss": "asyncgrpo.estimators.maps.trl_loss_config"}


def __getattr__(name):
    if name in _LOSSES:
        import importlib

        fn = getattr(importlib.import_module(_LOSSES[name]), name)
        globals()[name] = fn
        return fn
    raise AttributeError(f"module 'asyncgrpo' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LOSSES))


__all__ = ["ESTIMATORS", "WeightMap", "get", "names", "policy_loss", "verl_policy_loss", "trl_policy_loss"]
__version__ = "0.1.0"
