"""Damaged sweep caches are detected and recomputed, ids are injective, bad roots fail early.

The fault ids keep their first names ("empty csv", …) so that docs/faults.md's references hold; the
data file they damage is the cell's ``.parquet`` since issue 27 item 7.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sweep as sw

FN = "sweep:example_cell"
REPO = Path(__file__).resolve().parents[2]


def _sweep(xs=(0.0, 1.0, 2.0)):
    return sw.Sweep.from_grid("t", FN, {"x": list(xs)}, fixed={"n": 50}, seed=3)


def _run(s, root, **kw):
    return sw.run_sweep(s, root=root, backend="serial", progress=False, version="v", **kw)


def _files(root, s, cell_id):
    key = sw.cell_key(FN, next(c for c in s.cells if c.id == cell_id).settings, "v")
    return root / s.id / f"{key}.parquet", root / s.id / f"{key}.json"


def _truncate(p: Path):
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def _edit_value(p: Path):
    # Same size, one byte of the data pages changed: only the checksum can tell.
    data = bytearray(p.read_bytes())
    i = len(data) // 3
    data[i] ^= 0x01
    p.write_bytes(bytes(data))


def _drop_rows_json(p: Path):
    meta = json.loads(p.read_text())
    meta["rows"] = 7
    p.write_text(json.dumps(meta))


DAMAGE = {
    "empty csv": ("csv", lambda p: p.write_bytes(b""), "checksum"),
    "truncated csv": ("csv", _truncate, "checksum"),
    "garbage csv": ("csv", lambda p: p.write_bytes(b"\x00\xff garbage,,\n\"unclosed"), "checksum"),
    "one digit changed": ("csv", _edit_value, "checksum"),
    "csv deleted": ("csv", lambda p: p.unlink(), "without data file"),
    "json deleted": ("json", lambda p: p.unlink(), "without metadata"),
    "json garbage": ("json", lambda p: p.write_text("{not json"), "metadata unreadable"),
    "json truncated": ("json", _truncate, "metadata unreadable"),
    "json empty": ("json", lambda p: p.write_bytes(b""), "metadata unreadable"),
    "json without checksum": ("json", lambda p: p.write_text(json.dumps({"cell": "x=1", "key": "?"})),
                              "metadata unreadable"),
    "json row count wrong": ("json", _drop_rows_json, "rows"),
}


@pytest.mark.parametrize("fault", sorted(DAMAGE))
def test_damaged_cell_is_recomputed_with_a_warning_naming_it(tmp_path, fault):
    s = _sweep()
    first = _run(s, tmp_path)
    which, damage, why = DAMAGE[fault]
    csv, meta = _files(tmp_path, s, "x=1")
    damage(csv if which == "csv" else meta)
    with pytest.warns(sw.SweepCacheWarning, match=r"cell 'x=1' .*" + why):
        again = _run(s, tmp_path)
    assert again.computed == ("x=1",) and set(again.cached) == {"x=0", "x=2"}
    pd.testing.assert_frame_equal(again.table.drop(columns="pid"), first.table.drop(columns="pid"))
    # Repaired: a third run trusts every cell, silently.
    with warnings.catch_warnings():
        warnings.simplefilter("error", sw.SweepCacheWarning)
        third = _run(s, tmp_path)
    assert third.computed == ()


def test_load_cells_leaves_out_a_damaged_cell_and_says_which(tmp_path):
    s = _sweep()
    _run(s, tmp_path)
    _files(tmp_path, s, "x=2")[0].write_bytes(b"")
    with pytest.warns(sw.SweepCacheWarning, match="cell 'x=2'"):
        assert set(sw.load_cells(s, tmp_path, version="v")) == {"x=0", "x=1"}


def test_metadata_records_rows_and_checksum(tmp_path):
    import hashlib

    s = _sweep()
    _run(s, tmp_path)
    csv, meta_path = _files(tmp_path, s, "x=0")
    meta = json.loads(meta_path.read_text())
    assert meta["rows"] == 1 and meta["sha256"] == hashlib.sha256(csv.read_bytes()).hexdigest()
    assert not list((tmp_path / "t").glob(".*"))  # no temporary file left behind


def test_verify_command_lists_damaged_cells(tmp_path):
    s = _sweep()
    _run(s, tmp_path)
    cmd = [sys.executable, "-m", "sweep", str(tmp_path), "--verify"]
    ok = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert ok.returncode == 0 and "t: 3 cells, all verified" in ok.stdout, ok.stdout + ok.stderr
    _truncate(_files(tmp_path, s, "x=0")[0])
    bad = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 1 and "1 damaged" in bad.stdout and "checksum" in bad.stdout


def test_module_help_prints_usage():
    res = subprocess.run([sys.executable, "-m", "sweep", "--help"], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert res.returncode == 0 and "usage: python -m sweep" in res.stdout and "--verify" in res.stdout


# ----------------------------------------------------------------------------- injective cell ids
def test_near_equal_floats_get_distinct_cells(tmp_path):
    s = sw.Sweep.from_grid("near", FN, {"x": [0.1, 0.1000001, 0.10000000000000002]}, fixed={"n": 5}, seed=1)
    ids = [c.id for c in s.cells]
    assert ids == ["x=0.1", "x=0.1000001", "x=0.10000000000000002"]
    res = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    assert len(res.computed) == 3 and len(list((tmp_path / "near").glob("*.json"))) == 3
    assert res.table["x"].tolist() == [0.1, 0.1000001, 0.10000000000000002]


def test_ids_keep_short_form_when_exact():
    # Unchanged ids keep their seeds (cell_seed hashes the id), so old results stay comparable.
    assert [sw.format_value(v) for v in (0.2, 1e-05, 16.0, 3, "gmc")] == ["0.2", "1e-05", "16", "3", "gmc"]


_scalar = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(),
    st.booleans(),
    st.none(),
    st.text(max_size=6),
)
_value = st.one_of(_scalar, st.lists(_scalar, max_size=3))


def _canonical(v):
    # Numbers are compared by value (0 == 0.0 and True != 1 for ids); lists element-wise.
    if isinstance(v, list):
        return ("list", tuple(_canonical(x) for x in v))
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    return ("num", v)


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b"]), _value, min_size=2, max_size=2), min_size=2,
                max_size=2))
def test_cell_ids_are_injective(pair):
    a, b = pair
    ida = ",".join(f"{k}={sw.format_value(v)}" for k, v in sorted(a.items()))
    idb = ",".join(f"{k}={sw.format_value(v)}" for k, v in sorted(b.items()))
    if ida == idb:
        assert {k: _canonical(v) for k, v in a.items()} == {k: _canonical(v) for k, v in b.items()}


# ----------------------------------------------------------------------------- unwritable root
def test_root_that_cannot_be_created_fails_before_computing(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    calls = []
    with pytest.raises(ValueError, match="not writable"):
        sw.run_sweep(_sweep(), root=blocker / "cells", backend="serial", progress=False, version="v",
                     on_result=lambda c, n: calls.append(c))
    assert calls == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_root_fails_before_computing(tmp_path):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o555)
    calls = []
    try:
        with pytest.raises(ValueError, match="not writable"):
            sw.run_sweep(_sweep(), root=root, backend="serial", progress=False, version="v",
                         on_result=lambda c, n: calls.append(c))
    finally:
        root.chmod(0o755)
    assert calls == []


def test_read_only_root_still_serves_finished_cells(tmp_path, monkeypatch):
    s = _sweep()
    _run(s, tmp_path)

    def refuse(directory):
        raise AssertionError("a fully cached sweep must not need a writable root")

    monkeypatch.setattr("sweep.engine.check_writable", refuse)
    assert _run(s, tmp_path).computed == ()
