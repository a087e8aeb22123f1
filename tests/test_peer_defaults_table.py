"""The defaults table (docs/losses.md §2b, ``asyncgrpo.estimators.peer_defaults.DEFAULTS``) against the peers' own
default objects: verl 0.9.1's shipped YAML files (read from the installed package) and TRL 1.16's ``GRPOConfig()``;
the toolkit column against ``policy_loss``'s signature; and the peer wrappers' defaults (``verl_policy_loss``,
``RolloutCorrection.from_config(None)``, ``TRLLoss()``) against the same peer objects (issue 57)."""
from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import yaml

import _peer_verl
from asyncgrpo.estimators import peer_defaults as pd
from asyncgrpo.estimators import token_level as tl
from asyncgrpo.estimators.maps.trl_loss_config import TRLLoss
from asyncgrpo.estimators.maps.verl_rollout_config import RolloutCorrection
from asyncgrpo.integrations._peer_verl import verl_policy_loss

DOCS = Path(__file__).resolve().parents[1] / "docs" / "losses.md"
CONFIG = _peer_verl.ROOT / "verl" / "trainer" / "config"


def _yaml(rel):
    path = CONFIG / rel
    if not path.exists():
        pytest.fail(f"verl {_peer_verl.VERL_VERSION} is not installed: {_peer_verl.INSTALL}")
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def grpo_config():
    trl = pytest.importorskip("trl") if False else __import__("trl")
    return trl.GRPOConfig(report_to=[], use_cpu=True, bf16=False)


@pytest.mark.parametrize("row", pd.DEFAULTS, ids=[r[0] for r in pd.DEFAULTS])
def test_every_peer_default_cell_is_the_peers_own(row, grpo_config):
    what, toolkit, verl, trl = row
    if verl is not None:
        f, key, value = verl
        data = _yaml(f)
        assert key in data, (what, f, key)
        assert data[key] == value and type(data[key]) is type(value), (what, key, data[key], value)
    if trl is not None:
        field, value = trl
        assert getattr(grpo_config, field) == value, (what, field, getattr(grpo_config, field), value)


@pytest.mark.parametrize("row", pd.DEFAULTS, ids=[r[0] for r in pd.DEFAULTS])
def test_every_toolkit_cell_is_policy_loss_default(row):
    opt, value, _ = row[1]
    if opt is None:
        return
    default = inspect.signature(tl.policy_loss).parameters[opt].default
    if opt in ("eps_low", "eps_high"):  # None: the map's peer default, else the toolkit's (resolve_eps)
        assert default is None
        got = dict(zip(("eps_low", "eps_high"), tl.resolve_eps("grpo", None, None)))[opt]
        assert got == value, (opt, got, value)
    else:
        assert default == value, (opt, default, value)


def test_the_peer_wrappers_default_to_the_peers_defaults(grpo_config):
    actor, rc = _yaml(pd.ACTOR), _yaml(pd.ROLLOUT_CORR)
    sig = inspect.signature(verl_policy_loss).parameters
    for key in ("clip_ratio", "clip_ratio_c", "loss_agg_mode"):
        assert sig[key].default == actor[key], key
    for key in ("clip_ratio_low", "clip_ratio_high"):  # None: clip_ratio, as verl's loss reads them
        assert sig[key].default is None and actor[key] == actor["clip_ratio"], key
    default = RolloutCorrection.from_config(None)
    for key, value in rc.items():
        assert getattr(default, key) == value, key
    for f in dataclasses.fields(TRLLoss):
        assert getattr(TRLLoss(), f.name) == getattr(grpo_config, f.name), f.name


def test_the_docs_table_is_the_table():
    text = DOCS.read_text()
    block = re.search(r"<!-- defaults:start -->\n(.*?)\n<!-- defaults:end -->", text, re.S)
    assert block, "docs/losses.md lacks the defaults table markers"
    assert block.group(1).strip() == pd.markdown_table().strip()
