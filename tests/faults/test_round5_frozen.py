"""Issue 56 item 11: a malformed frozen warm start whose SHA-256 matches its own file (registered by mistake, or
written by something else) is refused with a ValueError naming the file and what is wrong, never a raw KeyError,
TypeError, PytorchStreamReader error, or a torch.multinomial error later on."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from simulate.llm.portability.frozen_warmstart import file_sha256, load_frozen, state_checksum, write_frozen


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).double()


def _cfg(path):
    return SimpleNamespace(warmstart=SimpleNamespace(frozen=str(path), frozen_sha256=file_sha256(str(path))),
                           device="cpu", preset="tiny")


def _good_state():
    return {k: v.clone() for k, v in _model().state_dict().items()}


def _blob(**over):
    state = _good_state()
    blob = {"state_dict": state, "info": json.dumps({"heldout_accuracy": 0.5}), "sha256": state_checksum(state)}
    blob.update(over)
    return blob


def _nan_state():
    st = _good_state()
    st["0.weight"][0, 0] = float("nan")
    return st


def _huge_state():
    st = _good_state()
    st["0.weight"][0, 0] = 1e300
    return st


def _with_checksum(state):
    return _blob(state_dict=state, sha256=state_checksum(state))


MALFORMED = {
    "no info": (lambda: {k: v for k, v in _blob().items() if k != "info"}, "lacks ['info']"),
    "no state_dict": (lambda: {k: v for k, v in _blob().items() if k != "state_dict"}, "lacks ['state_dict']"),
    "a list": (lambda: [1, 2, 3], "holds a list, not a dict"),
    "state_dict a list": (lambda: _blob(state_dict=[1]), "state_dict is list"),
    "a non-tensor weight": (lambda: _blob(state_dict={"0.weight": 1.0}), "not a name → tensor pair"),
    "sha256 a number": (lambda: _blob(sha256=7), "sha256 is int"),
    "info not JSON": (lambda: _blob(info="{oops"), "info is not JSON text"),
    "info a number": (lambda: _blob(info=5), "info is not JSON text"),
    "info a JSON list": (lambda: _blob(info="[1]"), "info is JSON list, not an object"),
    "NaN weights": (lambda: _with_checksum(_nan_state()), "non-finite weights (NaN or inf)"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_with_a_matching_sha_is_a_clear_error(tmp_path, case):
    make, why = MALFORMED[case]
    p = tmp_path / "ws.pt"
    torch.save(make(), p)
    with pytest.raises(ValueError, match=r"^warmstart\.frozen " + str(p).replace(".", r"\.")) as exc:
        load_frozen(_cfg(p), _model())
    assert why in str(exc.value)


@pytest.mark.parametrize("raw", [b"", b"not a torch file at all", "truncate"])
def test_a_truncated_or_foreign_file_is_a_clear_error(tmp_path, raw):
    p = tmp_path / "ws.pt"
    if raw == "truncate":
        good = tmp_path / "good.pt"
        torch.save(_blob(), good)
        raw = good.read_bytes()[: good.stat().st_size // 2]
    p.write_bytes(raw)
    with pytest.raises(ValueError, match="unreadable by torch.load") as exc:
        load_frozen(_cfg(p), _model())
    assert str(p) in str(exc.value)


def test_weights_that_overflow_the_models_dtype_are_refused(tmp_path):
    p = tmp_path / "ws.pt"
    torch.save(_with_checksum(_huge_state()), p)
    with pytest.raises(ValueError, match="overflow the model's dtype"):
        load_frozen(_cfg(p), _model().float())


def test_a_well_formed_file_still_loads(tmp_path):
    state = _good_state()
    sha = write_frozen(state, {"heldout_accuracy": 0.5}, str(tmp_path / "ws.pt"))
    m = _model()
    info = load_frozen(_cfg(tmp_path / "ws.pt"), m)
    assert info["file_sha256"] == sha and info["made_heldout_accuracy"] == 0.5 and info["frozen"] is True
