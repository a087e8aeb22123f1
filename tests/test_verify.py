"""`make verify` (figures/verify.py, issue 59): the stamp the report quotes, and the Numba comparison's rule on
synthetic child outputs (the real children run in `make verify`, minutes, not here)."""
from __future__ import annotations

import json

import pytest

from figures import verify as v


def _runs(nauc=0.5, failed=False):
    return [dict(cell="c", phase="eval", seed=s, eta=1.0, nauc=nauc + 0.1 * s, failed=failed and s == 0) for s in range(3)]


def test_compare_numba_counts_equal_runs_gaps_and_failure_flips(monkeypatch):
    outs = {False: _runs(), True: _runs(nauc=0.5 + 1e-15, failed=True)}
    monkeypatch.setattr(v, "_child", lambda env: outs["NUMBA_CPU_NAME" in env])
    r = v.compare_numba()
    assert r["runs"] == 3 and r["equal"] == 0 and r["max_abs_nauc"] == pytest.approx(1e-15, rel=0.2)
    assert r["failure_flips"] == [["c", "eval", 0, 1.0]]
    outs[True] = _runs()
    r = v.compare_numba()
    assert r["equal"] == 3 and r["max_abs_nauc"] == 0.0 and r["failure_flips"] == []
    outs[True] = _runs()[:2]
    with pytest.raises(RuntimeError, match="cover different"):
        v.compare_numba()


def test_stamp_line_and_load_refuse_a_damaged_stamp(tmp_path):
    assert "never run" in v.stamp_line(None)
    st = dict(date="2026-12-07T06:00:00+00:00", commit="abcdef0123456789", ok=True,
              lm=dict(protocol="lm-c9 v8 (x)", parts=13, fragile=[], identity={"avx2+COMPATIBLE": dict(equal=4, runs=4)}),
              numba=dict(runs=10, equal=9, max_abs_nauc=1e-15, failure_flips=[]))
    line = v.stamp_line(st)
    assert "passed" in line and "13 parts, 0 fragile (avx2+COMPATIBLE: 4/4 runs equal)" in line and "9/10 runs" in line
    assert "**FAILED**" in v.stamp_line(dict(st, ok=False))
    p = tmp_path / "verify.json"
    assert v.load_stamp(p) is None
    p.write_text(json.dumps(st))
    assert v.load_stamp(p) == st
    p.write_text(json.dumps({k: x for k, x in st.items() if k != "numba"}))
    with pytest.raises(ValueError, match="lacks 'numba'"):
        v.load_stamp(p)
    p.write_text("{")
    with pytest.raises(ValueError, match="unreadable"):
        v.load_stamp(p)
