"""The few-step LM fixture shared by the harness's fault and reliability tests (tests/test_llm_faults.py,
tests/test_llm_reliability.py): a 3-step warm start and a run config sized for seconds, and a trainer that
starts every run from a copy of the warmed model."""
from __future__ import annotations

import copy

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``(cfg, model, tok)``: a few-step warm start and a run config sized for seconds."""
    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
    from simulate.llm.warmstart import warm_start

    cache = str(tmp_path_factory.mktemp("cache"))
    cfg = TrainConfig(steps=4, n_prompts=2, G=4, d=1, D=1, eval_every=100, task=TaskConfig(n_eval=8),
                      warmstart=WarmStartConfig(steps=3, batch_size=8), cache_dir=cache, eta=1e-3)
    model, tok, _ = warm_start(cfg, progress=False)
    return cfg, model, tok


def train_tiny(cfg, tiny, **kw):
    """:func:`simulate.llm.train.train` of ``cfg`` from a copy of the fixture's warmed model (no progress bar)."""
    from simulate.llm.train import train

    return train(cfg, model=copy.deepcopy(tiny[1]), tok=tiny[2], progress=False, **kw)
