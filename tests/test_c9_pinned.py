"""C9's decisions under every registered protocol version, pinned on one hand-made table (issue 39, third round).

The protocol is pre-registered: what C9 compares, on which arm, at which level, which rival counts, when a
sub-claim is out of scope and how the words combine must not move unless a new protocol version says so. The
seeded mutation samples showed that tests of single rules do not generalise (seed 39: 7/16 killed, seed 40: 9/16,
seed 41: 9/16 on ``simulate/protocol/c9.py``): most surviving mutants change a number or a word that no rule test
reads. So this file pins the **complete** output of :func:`simulate.protocol.c9.c9_verdicts` (every comparison
row and column, the sub-claim frames in order, the matrix, the aggregates, the word, the held-out check and the
sensitivity line) for protocol versions 1–5 on one deterministic table, with a relative tolerance of 1e-9 (the
numbers are scipy t and binomial quantiles of sums of 6-decimal inputs: no CPU's last bit moves them that far).

The table is built so that the right answers of the rules are known (``test_the_pinned_table_has_the_answers_the_
rules_give``): on ``alpha`` onpolicy collapses with the delay and is unstable, gmc is stable and the rivals fail at
chosen rates (tic exactly at p₀ on the common arm, grpo above it); on ``beta`` there is no onpolicy (the
reference of the ceiling check is the first estimator by name), ``is`` already fails at d = 0 (the rate premise),
some cells lack seeds (comparisons pair by the seeds both sides have); on ``delta`` nothing degrades, ``is`` is
stable and gmc fails in 7 of 10 runs and trails tis by 0.2 (the refuted words); ``gamma`` is saturated.

A deliberate change of C9's logic means a new protocol version: regenerate with
``python tests/test_c9_pinned.py --regen`` and review the diff of ``tests/data/c9_pinned.json``.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulate import verdicts as vd
from simulate.protocol import load_protocol
from simulate.protocol.c9 import c9_verdicts
from simulate.protocol.spec import V1_PATH, V2_PATH, V3_PATH, V4_PATH

GOLDEN = Path(__file__).with_name("data") / "c9_pinned.json"
VERSIONS = {1: V1_PATH, 2: V2_PATH, 3: V3_PATH, 4: V4_PATH, 5: None}
KINDS = ("tuned", "neighbour", "lower", "common", "common-neighbour", "common-lower")
MODES = ("diverged", "collapsed", "locked_in")
REL = 1e-9


def _fails(n_fail: int, seeds, kind_offset: int) -> set:
    """Which seeds fail: ``n_fail`` of them, the choice rotated by the η kind so the two arms differ."""
    s = list(seeds)
    return {s[(i + kind_offset) % len(s)] for i in range(n_fail)}


def pinned_table(proto) -> pd.DataFrame:
    """The hand-made table (module docstring) at ``proto``'s primary cell; values rounded to 6 decimals."""
    p = proto.primary
    d, G, eps = int(p["d"]), int(p["G"]), float(p["eps"])
    rng = np.random.default_rng(20261205)
    seeds = list(range(1000, 1010))
    # (instance) -> {(estimator, d): (mean nAUC, s.d., failing runs per η kind, χ² scale)}
    spec = {
        "alpha": {("onpolicy", 0): (0.70, 0.03, 0, 0.05), ("onpolicy", d): (0.35, 0.08, 6, 9.0),
                  ("is", 0): (0.70, 0.03, 0, 0.05), ("is", d): (0.45, 0.10, 7, 30.0),
                  ("tis", 0): (0.70, 0.03, 0, 0.05), ("tis", d): (0.66, 0.02, 1, 0.9),
                  ("tic", 0): (0.70, 0.03, 0, 0.05), ("tic", d): (0.60, 0.03, 2, 1.5),
                  ("gmc", 0): (0.70, 0.03, 0, 0.05), ("gmc", d): (0.685, 0.015, 0, 0.6),
                  ("grpo", 0): (0.72, 0.03, 0, 0.05), ("grpo", d): (0.69, 0.04, 4, 2.0)},
        "beta": {("is", 0): (0.55, 0.05, 6, 0.1), ("is", d): (0.40, 0.08, 8, 40.0),
                 ("tis", 0): (0.60, 0.02, 0, 0.1), ("tis", d): (0.59, 0.02, 0, 1.2),
                 ("gmc", 0): (0.60, 0.02, 0, 0.1), ("gmc", d): (0.62, 0.02, 1, 1.1),
                 ("cispo", 0): (0.61, 0.02, 0, 0.1), ("cispo", d): (0.58, 0.03, 0, 1.0)},
        "delta": {("onpolicy", 0): (0.60, 0.02, 0, 0.1), ("onpolicy", d): (0.605, 0.01, 0, 0.3),
                  ("is", 0): (0.60, 0.02, 0, 0.1), ("is", d): (0.60, 0.01, 0, 0.4),
                  ("tis", 0): (0.60, 0.02, 0, 0.1), ("tis", d): (0.61, 0.01, 0, 0.5),
                  ("gmc", 0): (0.60, 0.02, 0, 0.1), ("gmc", d): (0.40, 0.05, 7, 0.7)},
        "gamma": {("onpolicy", 0): (0.985, 0.002, 0, 0.01), ("onpolicy", d): (0.97, 0.005, 0, 0.5),
                  ("gmc", 0): (0.985, 0.002, 0, 0.01), ("gmc", d): (0.98, 0.004, 0, 0.4),
                  ("tic", 0): (0.985, 0.002, 0, 0.01), ("tic", d): (0.95, 0.01, 0, 0.6)},
    }
    missing = {("beta", "tis", d): {1008, 1009}, ("beta", "cispo", 0): {1000}}
    rows = []
    for inst, cells in spec.items():
        for (e, dd), (m, sd, nf, c2) in cells.items():
            cell_seeds = [s for s in seeds if s not in missing.get((inst, e, dd), set())]
            tune = round(m + 0.01, 6)
            for j, k in enumerate(KINDS):
                shift = {"tuned": 0.0, "neighbour": -0.01, "lower": 0.005, "common": -0.02,
                         "common-neighbour": -0.03, "common-lower": -0.015}[k]
                failing = _fails(nf, cell_seeds, j)
                for s in cell_seeds:
                    f = s in failing
                    chi = float(np.round(c2 * math.exp(rng.normal(0.0, 0.4)), 6))
                    rows.append(dict(
                        phase="eval", eta_kind=k, instance=inst, estimator=e, d=dd, eps=eps, G=G, seed=s,
                        eta=round(2.0 ** (1 + 0.5 * j), 6), nauc=float(np.round(m + shift + rng.normal(0.0, sd), 6)),
                        failed=f, failure=MODES[s % 3] if f else "none", chi2_med=chi,
                        chi2_learn_med=chi if dd or s % 4 else np.nan, chi2_learn_mean=round(chi * 1.3, 6),
                        chi2_learn_p90=round(chi * 2.1, 6), chi2_learn_max=round(chi * 4.0, 6),
                        zero_frac=float(np.round(0.6 if inst == "gamma" else 0.05 + 0.1 * rng.random(), 6)),
                        eta_tuned=4.0, eta_at_edge=(inst == "beta" and e == "gmc"), tune_nauc=tune,
                        tune_lcb=round(tune - 0.03, 6)))
    # tuning-phase rows ride along (the sensitivity line keeps them; no C9 number reads them)
    rows += [dict(phase="tune", eta_kind="grid", instance="alpha", estimator="gmc", d=d, eps=eps, G=G, seed=s, eta=2.0,
                  nauc=0.5, failed=False, failure="none") for s in range(3)]
    return pd.DataFrame(rows)


def _enc(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else str(float(v))  # "nan", "inf", "-inf"
    if v is None or v is pd.NA:
        return None
    return str(v)


def _frame(df: pd.DataFrame) -> dict:
    return {"columns": [str(c) for c in df.columns], "index": [_enc(i) for i in df.index],
            "data": [[_enc(v) for v in row] for row in df.itertuples(index=False, name=None)]}


def snapshot(version: int) -> dict:
    """Everything :func:`c9_verdicts` returns for ``version`` on :func:`pinned_table`, JSON-ready."""
    proto = load_protocol(VERSIONS[version])
    r = c9_verdicts(pinned_table(proto), proto)
    out = {"comparisons": _frame(r["comparisons"]), "subclaims": _frame(r["subclaims"]),
           "matrix": _frame(r["matrix"]), "aggregate": {k: _enc(v) for k, v in r["aggregate"].items()},
           "verdict": r["verdict"]}
    if "heldout" in r:
        out["heldout"] = _frame(r["heldout"])
    if "sensitivity" in r:
        s = r["sensitivity"]
        out["sensitivity"] = {"matrix": _frame(s["matrix"]), "aggregate": {k: _enc(v) for k, v in s["aggregate"].items()},
                              "verdict": s["verdict"]}
    return out


def _same(a, b, path="") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{path}: keys {list(b)} != pinned {list(a)}"
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: length {len(b) if isinstance(b, list) else b} != {len(a)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, (int, float)):
        assert math.isclose(a, b, rel_tol=REL, abs_tol=1e-12), f"{path}: {b!r} != pinned {a!r}"
    else:
        assert type(a) is type(b) and a == b, f"{path}: {b!r} != pinned {a!r}"


@pytest.fixture(scope="module")
def pinned():
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_c9_output_is_the_pinned_one(version, pinned):
    _same(pinned[str(version)], snapshot(version), f"v{version}")


def _rows_of(frame: dict) -> list[dict]:
    return [dict(zip(frame["columns"], row)) for row in frame["data"]]


def test_the_pinned_table_has_the_answers_the_rules_give(pinned):
    """Checks of the pinned outputs that follow from the rules alone (docs/protocol.md), so the file pins right
    answers, not just today's."""
    p0 = load_protocol().failure_p0
    for v in ("4", "5"):
        s = pinned[v]
        agg, mat = s["aggregate"], s["matrix"]
        # gamma: nAUC(onpolicy, 0) ≈ 0.985 and zero-gradient fraction 0.6 > 0.5: saturated, every word out of scope
        col = mat["columns"].index("gamma")
        assert {row[col] for row in mat["data"] if row[col] not in (None, "nan")} == {vd.OUT_OF_SCOPE}
        comps = _rows_of(s["comparisons"])
        # v4+: no rival dropped — grpo fails 4/10 per η kind (> p₀) and is still compared
        assert any(c["name"].startswith("gmc − grpo") and c["instance"] == "alpha" for c in comps)
        assert all(c["rival_fail_rate"] == pytest.approx(0.4) for c in comps
                   if c["instance"] == "alpha" and c["name"].startswith("gmc − grpo"))
        # beta: is fails 6/10 at d = 0 on every η kind, its CP interval lies above p₀: the premise removes it
        prem = [c for c in comps if c["instance"] == "beta" and c["subclaim"] == "is-unstable"]
        assert prem and all(c["verdict"] == vd.OUT_OF_SCOPE and "already fails" in c["premise"] for c in prem)
        # onpolicy collapses on alpha: 0.70 → 0.35 at the common η, far beyond the margin
        deg = [c for c in comps if c["instance"] == "alpha" and c["subclaim"] == "onpolicy-degrades"]
        assert [c["verdict"] for c in deg] == [vd.HOLDS]
        # delta: gmc fails 7/10 per η kind (rate far above p₀) and trails tis by ≈ 0.2 ≫ δ; is never fails
        col = mat["columns"].index("delta")
        word = dict(zip(mat["index"], (row[col] for row in mat["data"])))
        assert word["gmc-stable"] == word["gmc-best-or-tied (tuned η)"] == word["is-unstable"] == vd.REFUTED
        # across instances: gmc-stable holds on alpha, is inconclusive on beta, refuted on delta — one refuted of
        # three in scope is no majority, and holds needs none refuted: inconclusive (simulate.verdicts.aggregate)
        assert [word for word in (mat["data"][mat["index"].index("gmc-stable")])] == [vd.HOLDS, vd.INCONCLUSIVE,
                                                                                       vd.REFUTED, vd.OUT_OF_SCOPE]
        assert agg["gmc-stable"] == vd.INCONCLUSIVE
        # on delta nothing degrades (onpolicy 0.60 → 0.605, tis 0.60 → 0.61): "degrades by more than δ" is refuted
        assert word["onpolicy-degrades"] == word["tis-degrades"] == vd.REFUTED
    for v in ("2", "3"):
        comps = _rows_of(pinned[v]["comparisons"])
        names = {c["name"] for c in comps if c["instance"] == "alpha"}
        d = load_protocol(VERSIONS[int(v)]).primary["d"]
        # v2/v3 compare only stable rivals: tic fails 2/10 per kind (≤ p₀ = 0.25), grpo 4/10 (> p₀)
        assert 2 / 10 <= p0 < 4 / 10
        assert f"gmc − tic (d={d}, common η)" in names and f"gmc − grpo (d={d}, common η)" not in names


def test_median_interval_uses_the_extremes_from_six_values_and_none_from_five():
    """The order-statistic interval ``x_(j) ≤ m ≤ x_(n+1−j)`` needs ``P(Bin(n, ½) < j) ≤ 2.5 %``: at n = 6,
    j = 1 (P = 1/64), so the interval is [min, max]; at n = 5 even j = 1 has P = 1/32 > 2.5 %: unbounded."""
    from simulate.protocol.c9 import median_interval

    x6 = [5.0, 1.0, 3.0, 2.0, 6.0, 4.0]
    assert median_interval(x6) == (3.5, 1.0, 6.0)
    m, lo, hi = median_interval(x6[:5])
    assert m == 3.0 and lo == -math.inf and hi == math.inf
    x10 = list(range(10))  # j = 2 (P(Bin(10, ½) < 2) = 11/1024 ≤ 2.5 % < P(< 3))
    assert median_interval(x10) == (4.5, 1.0, 8.0)


def test_the_ceiling_reference_is_the_first_estimator_by_name_without_onpolicy():
    from simulate.protocol.c9 import saturation

    proto = load_protocol()
    t = pinned_table(proto)
    beta = t[t.instance == "beta"]
    s = saturation(beta, proto)
    first = sorted(set(beta.estimator))[0]
    assert first == "cispo" and s["reference"] == first
    ev = beta[(beta.estimator == first) & (beta.d == 0) & (beta.eta_kind == "tuned")]
    assert s["nauc_d0"] == pytest.approx(float(ev.nauc.mean()), rel=1e-12)


@pytest.mark.parametrize("version", (1, 2, 3))
def test_before_v4_a_rival_failing_in_exactly_p0_of_its_runs_is_compared(version):
    """v1–v3 compare gmc only with the rivals stable at d ("failure rate at most p₀"): a rival failing in exactly
    p₀ of its runs at the η and the neighbour η is compared, one more failure drops it."""
    proto = load_protocol(VERSIONS[version])
    d = int(proto.primary["d"])
    t = pinned_table(proto)
    t = t[t.instance == "alpha"].copy()
    kinds = ("tuned", "neighbour") if version == 1 else ("common", "common-neighbour")
    cell = (t.estimator == "tic") & (t.d == d) & t.eta_kind.isin(kinds)
    n = int(cell.sum())
    k = proto.failure_p0 * n
    assert float(k).is_integer(), "premise: p₀·n is a whole number of runs"
    idx = t[cell].index
    for n_fail, compared in ((int(k), True), (int(k) + 1, False)):
        t.loc[idx, "failed"] = False
        t.loc[idx[:n_fail], "failed"] = True
        comp = c9_verdicts(t, proto)["comparisons"]
        name = f"gmc − tic (d={d})" if version == 1 else f"gmc − tic (d={d}, common η)"  # the arm judged here
        assert (comp.name == name).any() == compared, (n_fail, n)


@pytest.mark.parametrize("col", ("eta_tuned", "tune_nauc", "tune_lcb", "eta_at_edge"))
def test_heldout_check_refuses_a_cell_whose_tuning_values_disagree(col):
    """η, the tuning mean, its bound and the edge flag are one value per tuned cell (run_cell writes the cell's on
    each row); rows of one cell that disagree come from a damaged or merged table and are refused, by name."""
    from simulate.protocol.c9 import heldout_check

    proto = load_protocol()
    t = pinned_table(proto)
    heldout_check(t, proto)  # the pinned table is consistent
    i = t[(t.phase == "eval") & (t.eta_kind == "tuned")].index[-1]
    t.loc[i, col] = (not t.loc[i, col]) if col == "eta_at_edge" else t.loc[i, col] + 0.125
    with pytest.raises(ValueError, match=f"{col} must take one value per tuned cell"):
        heldout_check(t, proto)


@pytest.mark.parametrize("version", (2, 4, 5))
def test_saturation_needs_a_value_above_its_threshold_not_at_it(version):
    """v2/v3 compare the mean, v4+ the one-sided lower t-bound, with ``saturation_nauc`` and ``saturation_zero``,
    strictly ("exceeds"): a reference learner whose every held-out value sits exactly at a threshold (zero spread, so
    the bound is the value) is not saturated; one ulp above is."""
    from simulate.protocol.c9 import saturation

    proto = load_protocol(VERSIONS[version])
    p = proto.primary

    def table(nauc, zero):
        return pd.DataFrame([dict(phase="eval", eta_kind="tuned", instance="t", estimator="onpolicy", d=0,
                                  eps=float(p["eps"]), G=int(p["G"]), seed=s, nauc=nauc, zero_frac=zero)
                             for s in (0, 1)])  # two equal values: their mean is the value exactly

    at_n, at_z = proto.saturation_nauc, proto.saturation_zero
    assert not saturation(table(at_n, 0.0), proto)["saturated"]
    assert not saturation(table(0.1, at_z), proto)["saturated"]
    assert saturation(table(float(np.nextafter(at_n, 1.0)), 0.0), proto)["saturated"]
    assert saturation(table(0.1, float(np.nextafter(at_z, 1.0))), proto)["saturated"]


if __name__ == "__main__" and "--regen" in sys.argv:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({str(v): snapshot(v) for v in sorted(VERSIONS)}, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {GOLDEN}")
