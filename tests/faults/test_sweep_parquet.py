"""Issue 27 item 7: a sweep cell reads back equal to what the cell function returned.

Injected: a user table with the strings "NA", "None", "null", "" and "007" and a named index. The
CSV store gave NaN for the first four, 7.0 for "007" and dropped the index, even on the first run
(the engine returns what it re-read). Cells are now Parquet; a table Parquet cannot hold unchanged
is refused when stored, with the reason; cells of the old CSV format are recomputed.
"""
from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sweep as sw
from sweep import cache

FN = "sweep_table_cells:strings_cell"


@pytest.fixture(autouse=True)
def _cells_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def _sweep():
    return sw.Sweep.from_grid("strings", FN, {"x": [0.5, 1.5]}, seed=1)


def test_strings_and_named_index_survive_a_sweep(tmp_path):
    from sweep_table_cells import strings_cell

    s = _sweep()
    for attempt in ("computed", "cached"):
        res = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
        assert len(getattr(res, attempt)) == 2
        got = res.table[res.table["cell"] == "x=0.5"][["label", "code", "value"]].reset_index(drop=True)
        want = strings_cell(0.5, 0)[["label", "code", "value"]].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
    # per cell, the index (values and name) is kept as well
    tables = sw.load_cells(s, tmp_path, version="v")
    pd.testing.assert_frame_equal(tables["x=1.5"], strings_cell(1.5, 0), check_exact=True)


def test_old_csv_cells_are_recomputed_silently_and_removed(tmp_path):
    s = _sweep()
    sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    d = tmp_path / "strings"
    for meta_path in d.glob("*.json"):  # rewrite both cells as the old format left them
        key = meta_path.stem
        meta = json.loads(meta_path.read_text())
        (d / f"{key}.parquet").unlink()
        (d / f"{key}.csv").write_text("label,code,value\nNA,007,0.5\n")
        meta.update(format="csv-sha256-v1", rows=1)
        meta_path.write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sw.SweepCacheWarning)
        res = sw.run_sweep(s, root=tmp_path, backend="serial", progress=False, version="v")
    assert len(res.computed) == 2 and not list(d.glob("*.csv"))
    assert res.table["label"].tolist()[:2] == ["NA", "None"]


def test_a_table_parquet_cannot_hold_unchanged_is_refused_when_stored(tmp_path):
    mixed = pd.DataFrame({"m": pd.Series([1, "a"], dtype=object)})
    with pytest.raises(ValueError, match="cannot be stored as Parquet.*column m"):
        cache.store_cell(tmp_path, "k", "c", {}, mixed, {})
    tuples = pd.DataFrame({"t": pd.Series([(1, 2), (3,)], dtype=object)})  # would read back as lists
    with pytest.raises(ValueError, match="does not read back unchanged"):
        cache.store_cell(tmp_path, "k", "c", {}, tuples, {})
    with pytest.raises(ValueError, match="column names must be strings"):
        cache.store_cell(tmp_path, "k", "c", {}, pd.DataFrame({0: [1.0]}), {})
    assert not list(tmp_path.iterdir())  # nothing written


# ----------------------------------------------------------------------------- round trip, any dtype
_TEXT = st.one_of(st.sampled_from(["NA", "None", "null", "", "007", "nan", "N/A", "-0", "1e5", " x "]),
                  st.text(max_size=5))
_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


def _column(kind: str, n: int):
    if kind == "int64":
        return st.lists(st.integers(-2**63, 2**63 - 1), min_size=n, max_size=n).map(lambda v: pd.Series(v, dtype="int64"))
    if kind == "float64":
        return st.lists(_FLOAT, min_size=n, max_size=n).map(lambda v: pd.Series(v, dtype="float64"))
    if kind == "float32":
        return st.lists(st.floats(width=32), min_size=n, max_size=n).map(lambda v: pd.Series(v, dtype="float32"))
    if kind == "bool":
        return st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: pd.Series(v, dtype=bool))
    if kind == "str":
        return st.lists(st.one_of(_TEXT, st.none()), min_size=n, max_size=n).map(lambda v: pd.Series(v, dtype="str"))
    if kind == "object-str":
        return st.lists(st.one_of(_TEXT, st.none()), min_size=n, max_size=n).map(lambda v: pd.Series(v, dtype=object))
    if kind == "Int64":
        return st.lists(st.one_of(st.integers(-1000, 1000), st.none()), min_size=n, max_size=n).map(
            lambda v: pd.Series(v, dtype="Int64"))
    raise AssertionError(kind)


KINDS = ["int64", "float64", "float32", "bool", "str", "object-str", "Int64"]


@st.composite
def tables(draw):
    n = draw(st.integers(0, 5))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4))
    data = {f"c{i}_{k}": draw(_column(k, n)) for i, k in enumerate(kinds)}
    table = pd.DataFrame(data)
    index = draw(st.sampled_from(["range", "named int", "named str"]))
    if index == "named int":
        table.index = pd.Index(draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), dtype="int64", name="i")
    elif index == "named str":
        table.index = pd.Index(draw(st.lists(_TEXT, min_size=n, max_size=n)), dtype="str", name="name")
    return table


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_any_table_reads_back_equal(table):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cache.store_cell(d, "k", "c", {}, table, {})
        back, why = cache.load_cell(d, "k")
    assert why is None
    pd.testing.assert_frame_equal(back, table, check_exact=True)
