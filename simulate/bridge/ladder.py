"""The ladder's rungs (issue 33; docs/bridge.md): one ingredient of the LM setting added per rung.

A rung is an instance (:func:`simulate.bridge.rungs.prompt_answer`) and the learner settings that differ from
the defaults. Rungs 1–8 add, in order: shared parameters over several contexts, many distinct prompts per step,
a larger vocabulary, a longer horizon, a supervised warm start, a sparse (exact-match) reward, GRPO's
std-normalised advantages, Adam. The sparse reward comes after the warm start because from the uniform policy
an exact match of 12 tokens out of 16 is never sampled (``J₀ = 16⁻¹²``: no learner gets a gradient). The
controls remove one ingredient from the full stack (rung 7). The issue's last rung, the LM harness's own
transformer on a synthetic task with exact J, is not a Numba instance: it is :mod:`simulate.bridge.transformer`
(rung ``9-transformer``: the tiny Qwen3, its warm start and learner step on 1-digit sums, strict exact-match
reward, J by teacher forcing), run by its own sweep and drawn beside these rungs by ``fig_bridge``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from simulate.bridge.rungs import prompt_answer

__all__ = ["Rung", "RUNGS", "CONTROLS", "get_rung", "LM_FAITHFUL"]

#: The rung registered in simulate.protocol.instances as the LM-faithful toy (if the ladder finds one).
LM_FAITHFUL = "lm-faithful"
M = 6       # hidden size of the log-linear policy's h(c, t)
C = 8       # contexts
WARM = 0.5  # warm start's exact J (the LM's warm start: 0.56–0.74 accuracy)


@dataclass(frozen=True)
class Rung:
    """One rung: its id, the ingredient it adds, the instance's arguments and the learner's settings."""

    name: str
    ingredient: str
    instance: dict
    learner: dict = field(default_factory=dict)

    def build(self):
        """The rung's :class:`simulate.protocol.instances.TrainingInstance` (built once per process)."""
        return _build(tuple(sorted(self.instance.items())))


@lru_cache(maxsize=None)
def _build(items):
    """One instance per distinct argument set (rungs that differ only in the learner share it)."""
    kw = dict(items)
    name = "pa-C{C}-V{V}-T{T}-{reward}".format(**kw) + ("" if kw["features"] is None else f"-m{kw['features']}")
    return prompt_answer(name + ("" if kw.get("warm") is None else f"-warm{kw['warm']}"), **kw)


_BASE = dict(C=1, V=3, T=5, reward="frac", features=None, seed=0)
_SHARED = dict(_BASE, C=C, features=M)
_VOCAB = dict(_SHARED, V=16)
_LONG = dict(_VOCAB, T=12)
_WARMF = dict(_LONG, warm=WARM)
_SPARSE = dict(_LONG, reward="exact", warm=WARM)
_MANY = dict(n_prompts=C)

RUNGS = (
    Rung("0-tabular", "tabular softmax, one prompt (V = 3, T = 5, partial credit)", _BASE),
    Rung("1-shared", "+ shared parameters over C = 8 contexts (log-linear, p = 6V)", _SHARED),
    Rung("2-prompts", "+ 8 distinct prompts per step", _SHARED, _MANY),
    Rung("3-vocab", "+ vocabulary V = 16", _VOCAB, _MANY),
    Rung("4-horizon", "+ horizon T = 12", _LONG, _MANY),
    Rung("5-warm", "+ supervised warm start (J₀ = 0.5)", _WARMF, _MANY),
    Rung("6-sparse", "+ sparse exact-match reward (J₀ = 0.5)", _SPARSE, _MANY),
    Rung("7-grpo-norm", "+ std-normalised advantages (GRPO)", _SPARSE, dict(_MANY, adv_norm=True)),
    Rung("8-adam", "+ Adam (control)", _SPARSE, dict(_MANY, adv_norm=True, optimizer="adam")),
)
CONTROLS = (
    Rung("c-no-shared", "rung 7 without shared parameters (tabular over the same states)", dict(_SPARSE, features=None),
         dict(_MANY, adv_norm=True)),
    Rung("c-one-prompt", "rung 7 with one prompt per step", _SPARSE, dict(adv_norm=True)),
    Rung("c-warm-only", "rung 2 + warm start (V = 3, T = 5, partial credit)", dict(_SHARED, warm=WARM), _MANY),
)
_ALL = {r.name: r for r in RUNGS + CONTROLS}


def get_rung(name: str) -> Rung:
    """The rung or control called ``name``."""
    if name not in _ALL:
        raise ValueError(f"rung must be one of {', '.join(_ALL)}, got {name!r}")
    return _ALL[name]
