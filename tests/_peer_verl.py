"""Load verl's own ``core_algos``, ``rollout_corr_helper`` and ``torch_functional`` on a CPU-only machine.

verl 0.9.1 is installed from PyPI *without its dependencies* into ``.venv/peers/verl-0.9.1`` (not on
``sys.path``, so ``import verl`` elsewhere still fails and ``asyncgrpo.integrations.verl`` does not
auto-register into a broken verl):

    .venv/bin/python -m pip install -q --no-deps --target .venv/peers/verl-0.9.1 verl==0.9.1

(5 s, 15 MB). Its package ``__init__`` files pull in Ray, tensordict and omegaconf; they are not run: the
packages are bare module objects whose ``__path__`` points at verl's files, and the few names the three
modules import at load from the GPU/config stack are stubbed below. The modules are loaded inside a
``sys.modules`` patch that is undone afterwards, so no other test sees a ``verl`` module. No verl source
is copied: a change in verl's functions changes what the parity tests compare.
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path
from unittest import mock

VERL_VERSION = "0.9.1"
ROOT = Path(os.environ.get("ASYNCGRPO_VERL_PEER",
                           Path(sys.prefix) / "peers" / f"verl-{VERL_VERSION}"))
INSTALL = (f"{sys.executable} -m pip install --no-deps --target {ROOT} verl=={VERL_VERSION}")


class Cfg(dict):
    """verl's ActorConfig as its loss functions read it: attributes, ``.get`` and ``global_batch_info``."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError as e:
            raise AttributeError(k) from e


def _pkg(name, path=None, **attrs):
    m = types.ModuleType(name)
    if path is not None:
        m.__path__ = [str(path)]
    m.__dict__.update(attrs)
    return m


_LOADED: dict = {}


def patched():
    """Context manager: ``sys.modules`` holds the stubs and verl's loaded modules, so code that writes
    ``from verl.trainer.ppo.core_algos import …`` (asyncgrpo.integrations.verl) runs against verl's own code;
    undone on exit."""
    load()
    return mock.patch.dict(sys.modules, _LOADED)


def load():
    """``(core_algos, rollout_corr_helper, torch_functional)`` of the pinned verl; a clear error if absent."""
    if _LOADED:
        return (_LOADED["verl.trainer.ppo.core_algos"], _LOADED["verl.trainer.ppo.rollout_corr_helper"],
                _LOADED["verl.utils.torch_functional"])
    src = ROOT / "verl"
    version = (src / "version" / "version")
    if not version.exists():
        raise RuntimeError(f"verl {VERL_VERSION} (no deps) not found at {ROOT}; install it with: {INSTALL}")
    got = version.read_text().strip()
    if got != VERL_VERSION:
        raise RuntimeError(f"verl at {ROOT} is {got}, the parity tests pin {VERL_VERSION}")
    import torch

    class _Any:  # a config/protocol class the modules only name in annotations
        def __init__(self, *a, **k):
            pass

    stubs = {
        "verl": _pkg("verl", src),
        "verl.utils": _pkg("verl.utils", src / "utils"),
        "verl.utils.device": _pkg("verl.utils.device", get_device_name=lambda: "cpu",
                                  get_torch_device=lambda: torch.cpu, is_npu_available=False),
        "verl.trainer": _pkg("verl.trainer", src / "trainer"),
        "verl.trainer.ppo": _pkg("verl.trainer.ppo", src / "trainer" / "ppo"),
        "verl.trainer.config": _pkg("verl.trainer.config", AlgoConfig=_Any),
        "verl.trainer.config.algorithm": _pkg("verl.trainer.config.algorithm", RolloutCorrectionConfig=_Any),
        "verl.workers": _pkg("verl.workers", src / "workers"),
        "verl.workers.config": _pkg("verl.workers.config", ActorConfig=_Any),
        "verl.workers.config.actor": _pkg("verl.workers.config.actor", PolicyLossConfig=_Any),
        "verl.protocol": _pkg("verl.protocol", DataProto=_Any),
        "tensordict": _pkg("tensordict", TensorDict=_Any),
        "omegaconf": _pkg("omegaconf", DictConfig=dict, MISSING="???"),
    }
    with mock.patch.dict(sys.modules, stubs):
        groupwise = importlib.import_module("verl.utils.groupwise")
        sys.modules["verl.utils"].__dict__.update(as_torch_index=groupwise.as_torch_index,
                                                  group_mean_std=groupwise.group_mean_std)
        tf = importlib.import_module("verl.utils.torch_functional")
        ca = importlib.import_module("verl.trainer.ppo.core_algos")
        rch = importlib.import_module("verl.trainer.ppo.rollout_corr_helper")
        _LOADED.update({k: v for k, v in sys.modules.items() if k in stubs or k.startswith("verl.")})
    return ca, rch, tf


def rollout_correction_config():
    """verl's own ``RolloutCorrectionConfig`` class (``verl/trainer/config/algorithm.py``, its presets as
    classmethods), loaded like the three modules above (bare ``verl`` package, ``verl.base_config`` real)."""
    if "algorithm" in _LOADED:
        return _LOADED["algorithm"].RolloutCorrectionConfig
    load()
    import importlib.util

    src = ROOT / "verl"
    stubs = {"verl": _pkg("verl", src)}
    with mock.patch.dict(sys.modules, stubs):
        importlib.import_module("verl.base_config")
        path = src / "trainer" / "config" / "algorithm.py"
        spec = importlib.util.spec_from_file_location("verl_algorithm_config", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    _LOADED["algorithm"] = mod
    return mod.RolloutCorrectionConfig


def load_or_missing():
    """``(CA, RCH, VF, missing)``: :func:`load`'s three verl modules, or ``None`` each and the install line (so that
    each test fails with it through :func:`verl_is_installed`; a collection error would stop the whole suite)."""
    try:
        return (*load(), None)
    except RuntimeError as e:
        return None, None, None, str(e)


def verl_is_installed(missing):
    """Fail the calling test with the install line when verl could not be loaded (never a skip)."""
    import pytest

    if missing:
        pytest.fail(missing)
