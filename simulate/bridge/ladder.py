"""The ladder's rungs (issue 33; docs/bridge.md): one ingredient of the LM setting added per rung.

A rung is an instance (:func:`simulate.bridge.rungs.prompt_answer`) and the learner settings that differ from
the defaults. Rungs 1–8 add, in order: shared parameters over several contexts, many distinct prompts per step,
a larger vocabulary, a longer horizon, a supervised warm start, a sparse (exact-match) reward, GRPO's
std-normalised advantages, Adam. The sparse reward comes after the warm start because from the uniform policy
an exact match of 12 tokens out of 16 is never sampled (``J₀ = 16⁻¹²``: no learner gets a gradient). The
controls remove one ingredient from the full stack (rung 7), or (issue 54) separate the sparse reward from the
strength of the warm start it came with: ``c-dense-warm6`` is rung 6 with the dense per-token reward and a warm
start matched to rung 6's per-token accuracy, ``c-sparse-warm5`` is rung 6 (sparse reward) with a warm start
matched to rung 5's (:attr:`Rung.warm_match`, :func:`simulate.bridge.rungs.token_accuracy`, within
:data:`TOKEN_TOL`). The issue's last rung, the LM harness's own
transformer on a synthetic task with exact J, is not a Numba instance: it is :mod:`simulate.bridge.transformer`
(rung ``9-transformer``: the tiny Qwen3, its warm start and learner step on 1-digit sums, strict exact-match
reward, J by teacher forcing), run by its own sweep and drawn beside these rungs by ``fig_bridge``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from simulate.bridge.rungs import answers, prompt_answer, token_accuracy, token_argmax_accuracy

__all__ = ["Rung", "RUNGS", "CONTROLS", "get_rung", "LM_FAITHFUL", "TOKEN_TOL"]

#: The rung registered in simulate.protocol.instances as the LM-faithful toy (if the ladder finds one).
LM_FAITHFUL = "lm-faithful"
M = 6       # hidden size of the log-linear policy's h(c, t)
C = 8       # contexts
WARM = 0.5  # warm start's exact J (the LM's warm start: 0.56–0.74 accuracy)
#: a matched warm start's per-token accuracy lies in [target, target + TOKEN_TOL] (else the build raises)
TOKEN_TOL = 0.005


@dataclass(frozen=True)
class Rung:
    """One rung: its id, the ingredient it adds, the instance's arguments and the learner's settings.
    ``warm_match``: the rung whose warm start's per-token accuracy (:func:`simulate.bridge.rungs.token_accuracy`)
    is this rung's warm-start target (reached within :data:`TOKEN_TOL`, else the build raises)."""

    name: str
    ingredient: str
    instance: dict
    learner: dict = field(default_factory=dict)
    warm_match: str | None = None

    def instance_kw(self) -> dict:
        """The arguments of :func:`simulate.bridge.rungs.prompt_answer`, a matched warm start's target resolved."""
        kw = dict(self.instance)
        if self.warm_match is not None:
            kw.update(warm=get_rung(self.warm_match).token_accuracy(), warm_metric="token", warm_tol=TOKEN_TOL)
        return kw

    def build(self):
        """The rung's :class:`simulate.protocol.instances.TrainingInstance` (built once per process)."""
        return _build(tuple(sorted(self.instance_kw().items())))

    def answers(self) -> np.ndarray:
        """``ans (C, T)``: the rung's answers (:func:`simulate.bridge.rungs.answers`)."""
        kw = self.instance
        return answers(kw["C"], kw["V"], kw["T"], kw["seed"], kw["features"] or 6)

    def token_accuracy(self, argmax: bool = False) -> float:
        """Per-token accuracy of the rung's starting policy (``w_init``, or ``w = 0`` without a warm start):
        the mean probability of the right answer token (or, with ``argmax``, the share of answer tokens whose
        most probable token is right)."""
        inst = self.build()
        w = inst.w_init if inst.w_init is not None else np.zeros(inst.n_params)
        return (token_argmax_accuracy if argmax else token_accuracy)(inst, self.answers(), w)


@lru_cache(maxsize=None)
def _build(items):
    """One instance per distinct argument set (rungs that differ only in the learner share it)."""
    kw = dict(items)
    name = "pa-C{C}-V{V}-T{T}-{reward}".format(**kw) + ("" if kw["features"] is None else f"-m{kw['features']}")
    if kw.get("warm") is not None:
        name += f"-warm{kw['warm']}" if kw.get("warm_metric", "J") == "J" else f"-tok{kw['warm']:.6f}"
    return prompt_answer(name, **kw)


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
    # issue 54: the sparse reward and the warm start's strength apart (rung 5's per-token accuracy ≈ 0.50, rung 6's
    # ≈ 0.94 at the same exact J target); the target is set by warm_match in build()
    Rung("c-dense-warm6", "rung 6 with the dense per-token reward, warm start at rung 6's per-token accuracy",
         dict(_LONG), _MANY, warm_match="6-sparse"),
    Rung("c-sparse-warm5", "rung 6 (sparse reward) with a warm start at rung 5's per-token accuracy",
         dict(_LONG, reward="exact"), _MANY, warm_match="5-warm"),
)
_ALL = {r.name: r for r in RUNGS + CONTROLS}


def get_rung(name: str) -> Rung:
    """The rung or control called ``name``."""
    if name not in _ALL:
        raise ValueError(f"rung must be one of {', '.join(_ALL)}, got {name!r}")
    return _ALL[name]
