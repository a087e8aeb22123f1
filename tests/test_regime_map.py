"""The regime map (simulate/protocol/regime_map.py, figures/fig_regime_map.py; issue 24 item 2).

The boundary logic and the comparison table on synthetic tables (no training), the tidy schema and the
resume from cache on a tiny real map, and the figure's quick path. ~20 s on 2 cores once the Numba
kernels are compiled.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from simulate.protocol import load_protocol
from simulate.protocol import regime_map as rm

PROTO = load_protocol()
from simulate.protocol.spec import V3_PATH  # noqa: E402

V3 = load_protocol(V3_PATH)  # v2/v3's rule: "gmc − best stable" drops a rival that fails often


# ----------------------------------------------------------------------------- boundary (synthetic)
def _comp_rows(inst, f, intervals, G=8, eps=0.2):
    """gmc − onpolicy rows: {d: (estimate, lo, hi)}."""
    return [dict(instance=inst, G=G, eps=eps, eta_factor=f, d=d, comparison="gmc − onpolicy", estimate=e, lo=lo, hi=hi)
            for d, (e, lo, hi) in intervals.items()]


def test_boundary_smallest_significant_delay_on_a_synthetic_table():
    rows = []
    # A: gmc ahead first at d = 4 (not at 8), again from 16 on; onpolicy ahead only at d = 1
    rows += _comp_rows("A", 1.0, {0: (0, 0, 0), 1: (-0.05, -0.08, -0.01), 2: (0.01, -0.02, 0.04),
                                  4: (0.04, 0.01, 0.07), 8: (0.02, -0.01, 0.05), 16: (0.05, 0.02, 0.08),
                                  32: (0.06, 0.03, 0.09), 64: (0.07, 0.04, 0.10)})
    # B: never significant either way (an interval touching 0 is not "above 0")
    rows += _comp_rows("B", 1.0, {0: (0, 0, 0), 8: (0.02, 0.0, 0.04), 64: (-0.02, -0.04, 0.0)})
    # C: onpolicy ahead from d = 8; a delay listed out of order must not matter
    rows += _comp_rows("C", 0.5, {64: (-0.2, -0.3, -0.1), 0: (0, 0, 0), 8: (-0.1, -0.15, -0.05)})
    # rows of the other comparison are ignored
    rows += [dict(r, comparison="gmc − best stable", lo=1.0, hi=2.0) for r in _comp_rows("B", 1.0, {2: (0, 0, 0)})]
    b = rm.boundary(pd.DataFrame(rows), delays=(0, 1, 2, 4, 8, 16, 32, 64)).set_index("instance")
    assert list(b.index) == ["A", "B", "C"]
    assert b.loc["A", "d_gmc_ahead"] == 4 and b.loc["A", "d_onpolicy_ahead"] == 1
    assert b.loc["A", "d_gmc_ahead_from"] == 16  # the tail from which gmc stays ahead
    assert b.loc["A", "gmc_ahead_at"] == "4,16,32,64" and b.loc["A", "onpolicy_ahead_at"] == "1"
    assert b.loc["A", "gmc_ahead"] == "d = 4 (+0.040 [0.010, 0.070])"
    assert pd.isna(b.loc["B", "d_gmc_ahead"]) and pd.isna(b.loc["B", "d_onpolicy_ahead"])
    assert b.loc["B", "gmc_ahead"] == "none up to d = 64" and b.loc["B", "onpolicy_ahead"] == "none up to d = 64"
    assert pd.isna(b.loc["C", "d_gmc_ahead"]) and b.loc["C", "d_onpolicy_ahead"] == 8
    assert pd.isna(b.loc["C", "d_gmc_ahead_from"])
    assert str(b["d_gmc_ahead"].dtype) == "Int64"  # missing is <NA>, never a float NaN next to integers


# ----------------------------------------------------------------------------- comparisons (synthetic)
def _runs(nauc: dict, failure: dict | None = None, d=8, G=8, eps=0.2, f=1.0, n=6):
    """A run table: estimator → per-seed nAUC; ``failure``: estimator → list of failure words."""
    rows = []
    for e, vals in nauc.items():
        fails = (failure or {}).get(e, ["none"] * n)
        for s, (v, fl) in enumerate(zip(vals, fails)):
            rows.append(dict(instance="X", estimator=e, d=d, G=G, eps=eps if e in ("tis", "tic", "gmc") else 0.2,
                             eta_factor=f, eta=1.0, seed=1000 + s, nauc=v, final_nJ=v, failed=fl != "none", failure=fl,
                             locked_in=fl == "locked_in", chi2_learn_med=0.5, ess_early=5.0, entropy_final=0.1,
                             zero_frac=0.0))
    return pd.DataFrame(rows)


def test_comparisons_pair_by_seed_and_take_the_best_stable_rival():
    rng = np.random.default_rng(0)
    gmc = 0.6 + 0.05 * rng.standard_normal(6)
    onp = gmc - 0.1 + 0.01 * rng.standard_normal(6)  # gmc clearly ahead of onpolicy
    is_ = gmc + 0.3  # the best mean, but it fails in 3/6 runs > p0 = 0.25: not a stable rival
    tic = gmc + 0.01 + 0.02 * rng.standard_normal(6)  # the best stable rival
    tis = gmc - 0.2
    fails = {"is": ["diverged", "collapsed", "locked_in", "none", "none", "none"],
             "tic": ["locked_in", "none", "none", "none", "none", "none"]}  # 1/6 ≤ p0: still stable
    c = rm.comparisons(_runs(dict(onpolicy=onp, gmc=gmc, tis=tis, tic=tic, **{"is": is_}), fails), V3)
    assert list(c.comparison) == ["gmc − best stable", "gmc − onpolicy"]
    one = c.set_index("comparison")
    diff = gmc - onp
    m, se = diff.mean(), stats.sem(diff)
    q = stats.t.ppf(0.975, 5)
    r = one.loc["gmc − onpolicy"]
    assert r.rival == "onpolicy" and r.kind == "superiority" and r.threshold == V3.margin
    assert math.isclose(r.estimate, m) and math.isclose(r.lo, m - q * se) and math.isclose(r.hi, m + q * se)
    assert r.sign == "gmc ahead" and r.verdict == "holds"  # lo > +δ: ahead by more than the margin
    b = one.loc["gmc − best stable"]
    assert b.rival == "tic" and b.kind == "noninferiority" and b.threshold == -V3.margin
    assert math.isclose(b.estimate, (gmc - tic).mean())
    # v4: no rival is dropped — `is`, the best mean, is the rival although it fails in 3/6 runs
    c4 = rm.comparisons(_runs(dict(onpolicy=onp, gmc=gmc, tis=tis, tic=tic, **{"is": is_}), fails), PROTO)
    b4 = c4.set_index("comparison").loc["gmc − best rival"]
    assert b4.rival == "is" and math.isclose(b4.estimate, (gmc - is_).mean()) and b4.verdict == "refuted"
    # the failure split of every estimator, on both rows
    assert (r.is_diverged, r.is_collapsed, r.is_locked_in) == (1, 1, 1)
    assert (r.tic_diverged, r.tic_locked_in, r.gmc_locked_in) == (0, 1, 0)


def test_no_stable_rival_and_behind():
    gmc = np.array([0.5, 0.52, 0.49, 0.51, 0.5, 0.48])
    all_fail = ["collapsed"] * 6
    c = rm.comparisons(_runs(dict(onpolicy=gmc + 0.2, gmc=gmc), {"onpolicy": all_fail}), V3).set_index("comparison")
    assert pd.isna(c.loc["gmc − best stable", "rival"]) and c.loc["gmc − best stable", "sign"] == "no stable rival"
    assert c.loc["gmc − onpolicy", "sign"] == "gmc behind"  # onpolicy is compared whether it fails or not


@pytest.mark.parametrize("kw, msg", [
    (dict(delays=(0, 4, 4)), "delays must not repeat"),
    (dict(instances=("count-frac", "count-frac")), "instances must not repeat"),
    (dict(G=(8, 8)), "G must not repeat"),
    (dict(seeds=(1000, 1000)), "seeds must not repeat"),
    (dict(delays=(0, 2.5)), r"delays must be integers.*2\.5"),
    (dict(G=(10.7,)), r"G must be integers.*10\.7"),
    (dict(seeds=(1000.5,)), "seeds must be integers"),
    (dict(G=(0,)), "G must be integers >= 1"),
    (dict(G=(3,)), "G must divide budget"),
    (dict(seeds=()), "seeds must hold at least one value"),
    (dict(seeds=(-1,)), r"seeds must be integers \[0, 2³²\)"),
    (dict(instances=("nope",)), "instances: unknown"),
    (dict(eta_factors=(0.0,)), "eta_factors must be finite numbers > 0"),
])
def test_map_refuses_axes_that_would_silently_change_it(kw, msg):
    """Issue 38 items 3, 7, 20: refused before any cell runs (seen failing: delays=(0,4,4) doubled n, 2.5 ran
    as d = 2, G=(0,) raised ZeroDivisionError, seeds=() IndexError)."""
    args = dict(instances=("count-frac",), delays=(0, 4), eta_factors=(1.0,), G=(8,), eps=(0.2,), seeds=(1000, 1001))
    args.update(kw)
    with pytest.raises(ValueError, match=msg):
        rm.regime_map(**args, proto=PROTO)


# ----------------------------------------------------------------------------- a tiny real map
TINY = dict(instances=("count-frac",), delays=(0, 8), eta_factors=(1.0, 2.0), G=(8,), eps=(0.2, 0.5),
            seeds=(1000, 1001, 1002, 1003))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("cells")
    return root, rm.regime_map(**TINY, quick=True, root=root, backend="serial")


def test_tidy_table_schema(tiny):
    _, m = tiny
    c = m.comparisons
    keys = ["instance", "d", "G", "eps", "eta_factor", "comparison"]
    assert not c.duplicated(keys).any()
    assert len(c) == 1 * 2 * 2 * 1 * 2 * 2  # instances × d × factors × G × ε × comparisons
    for col in ["rival", "kind", "margin", "threshold", "n", "estimate", "se", "lo", "hi", "verdict", "sign",
                "nauc_gmc", "fail_rate_gmc", "chi2_learn_gmc", "ess_early_gmc", "entropy_final_gmc"]:
        assert col in c.columns, col
    for e in rm.ESTIMATORS:
        for f in rm.FAILURES:
            assert c[f"{e}_{f}"].between(0, 4).all()
    assert set(c.sign) <= {"gmc ahead", "gmc behind", "n.s.", "no stable rival"}
    ok = c.n >= 2
    assert ((c.sign[ok] == "gmc ahead") == (c.lo[ok] > 0)).all() and ((c.sign[ok] == "gmc behind") == (c.hi[ok] < 0)).all()
    # d = 0: every map is the on-policy gradient (ρ = 1), so gmc and onpolicy run identical curves
    z = c[(c.d == 0) & (c.comparison == "gmc − onpolicy")]
    assert (z.estimate == 0).all() and (z.sign == "n.s.").all()
    # onpolicy and is ignore ε: one cell each per (d, f), shared by both ε
    cells = m.cells
    assert len(cells[cells.estimator == "onpolicy"]) == 2 * 2 and len(cells[cells.estimator == "gmc"]) == 2 * 2 * 2
    assert (cells.n == 4).all() and (cells[[f"n_{f}" for f in rm.FAILURES]].sum(axis=1) <= cells.n).all()
    # η = f·η₀ with η₀ onpolicy's η tuned at d = 0
    eta0 = float(m.etas.eta_tuned.iloc[0])
    assert np.allclose(cells.eta, cells.eta_factor * eta0)
    assert len(m.boundary) == 2 * 2 and set(m.boundary.d_max) == {8}


def test_resume_computes_nothing(tiny):
    root, m = tiny
    again = rm.regime_map(**TINY, quick=True, root=root, backend="serial")
    assert again.computed == 0 and again.cached == m.computed + m.cached > 0
    pd.testing.assert_frame_equal(again.comparisons, m.comparisons)
    # a new η factor computes only its own cells
    more = rm.regime_map(**{**TINY, "eta_factors": (1.0, 2.0, 0.5)}, quick=True, root=root, backend="serial")
    assert more.computed == 8  # onpolicy, is, and tis/tic/gmc at each of the two ε; the tuning is cached


# ----------------------------------------------------------------------------- the figure
def test_figure_panels_are_labelled_and_the_colour_scale_is_centred():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from figures import fig_regime_map as fr

    est = np.array([[0.0, -0.1, 0.05], [0.0, 0.2, -0.3]])
    panel = dict(delays=[0, 4, 16], factors=[0.5, 1.0], est=est, sig=np.abs(est) > 0.1, unstable=est < -0.2, eta0=8.0)
    fig, axes = fr.plot({f"inst-{k}": panel for k in range(5)}, G=8, eps=0.2)
    try:
        used = [ax for ax in fig.axes if ax.axison]
        cbars = [ax for ax in used if getattr(ax, "_colorbar", None) is not None]
        assert len(cbars) == 1 and cbars[0].get_ylabel()
        panels = [ax for ax in used if ax not in cbars]
        assert len(panels) == 5  # 5 instances on a 2 × 4 grid: the 3 empty slots are switched off
        for ax in panels:
            assert ax.get_xlabel() == "delay d" and ax.get_ylabel() and ax.get_title()
            lo, hi = ax.images[0].norm.vmin, ax.images[0].norm.vmax
            assert lo == -hi == -0.3  # symmetric about 0: the colour says the sign
        texts = [t.get_text() for t in panels[0].texts]
        assert "0" in texts and "−.30†" in texts and "+.20" in texts
        assert sum(type(p).__name__ == "Rectangle" and not p.get_fill() for p in panels[0].patches) == 2
    finally:
        plt.close(fig)


def test_quick_figure_writes_png_pdf_and_a_sidecar(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from figures import fig_regime_map as fr

    res = fr.main(tmp_path / "out", quick=True, sweep_opts=dict(root=tmp_path / "cells", backend="serial"))
    for ext in ("png", "pdf", "json"):
        assert (tmp_path / "out" / f"{fr.NAME}.{ext}").stat().st_size > 1000
    meta = json.loads((tmp_path / "out" / f"{fr.NAME}.json").read_text())
    assert meta["quick"] is True and "predict" in meta["caption"].lower()
    n_inst, n_f = len(rm.QUICK["instances"]), len(rm.QUICK["eta_factors"])
    # per instance: the common arm's factors, the tuned arm, and the G and ε slices beyond the primary cell
    n_rows = n_f + 1 + (len(rm.QUICK_SLICES["G"]) - 1) + (len(rm.QUICK_SLICES["eps"]) - 1)
    assert len(meta["boundary"]) == n_inst * n_rows
    assert len(meta["comparisons"]) == n_inst * n_rows * len(rm.QUICK["delays"]) * 2
    assert sorted({b["arm"] for b in meta["boundary"]}) == ["common", "tuned"]
    assert [e["verdict"] for e in meta["evidence"]] == ["reported"] * n_inst
    assert all(b["gmc_ahead"].startswith(("d = ", "none up to d = 64")) for b in meta["boundary"])
    assert res.name == fr.NAME and res.evidence and not res.missing


# ----------------------------------------------------------------------------- the tuned arm and merged maps
def test_tuned_arm_is_the_protocols_tuned_cell_and_pairs_within_its_arm(tiny):
    """The tuned arm's η is the protocol cell's own tuned η (one per estimator and d), its runs are the
    cell's held-out runs at that η, and gmc − onpolicy on it pairs tuned gmc with tuned onpolicy only."""
    from simulate.protocol.cells import run_cell

    root, _ = tiny
    m = rm.regime_map(**{**TINY, "eps": (0.2,)}, tuned_arm=("onpolicy", "gmc"), quick=True, root=root, backend="serial")
    t = m.runs[m.runs.arm == "tuned"]
    assert set(t.estimator) == {"onpolicy", "gmc"} and set(t.d) == {0, 8} and (t.eta_factor == 1.0).all()
    proto = load_protocol(quick=True)
    cell = run_cell("count-frac", "gmc", 8, 0.2, 8, proto)
    ev = cell[(cell.phase == "eval") & (cell.eta_kind == "tuned")].set_index("seed").sort_index()
    mine = t[(t.estimator == "gmc") & (t.d == 8)].set_index("seed").sort_index()
    assert np.allclose(mine.eta, ev.eta) and np.array_equal(mine.nauc.to_numpy(), ev.nauc.to_numpy())
    comp = m.comparisons
    row = comp[(comp.arm == "tuned") & (comp.d == 8) & (comp.comparison == "gmc − onpolicy")]
    assert len(row) == 1
    on = t[(t.estimator == "onpolicy") & (t.d == 8)].set_index("seed").nauc
    diff = (mine.nauc - on).to_numpy()
    assert math.isclose(float(row.estimate.iloc[0]), float(diff.mean()), rel_tol=0, abs_tol=1e-12)
    # the tuned arm's cells are the protocol sweep's: a second call computes nothing
    again = rm.regime_map(**{**TINY, "eps": (0.2,)}, tuned_arm=("onpolicy", "gmc"), quick=True, root=root,
                          backend="serial")
    assert again.computed == 0
    with pytest.raises(ValueError, match="tuned_arm"):
        rm.regime_map(**TINY, tuned_arm=("cispo",), quick=True, root=root, backend="serial")


def test_merge_keeps_one_copy_of_a_shared_cell(tiny):
    root, m = tiny
    other = rm.regime_map(**{**TINY, "eta_factors": (1.0,), "G": (4, 8), "eps": (0.2,)}, quick=True, root=root,
                          backend="serial")
    merged = rm.merge([m, other])
    keys = rm.KEYS + ["seed"]
    assert not merged.runs.duplicated(keys).any()
    assert len(merged.runs) == len(pd.concat([m.runs, other.runs]).drop_duplicates(keys))
    assert merged.settings["G"] == [4, 8] and len(merged.settings["parts"]) == 2
    # the shared cells (G = 8, ε = 0.2, f = 1) carry the same numbers in both parts
    pd.testing.assert_frame_equal(
        merged.comparisons[(merged.comparisons.G == 8) & np.isclose(merged.comparisons.eps, 0.2)
                           & np.isclose(merged.comparisons.eta_factor, 1.0)].reset_index(drop=True),
        m.comparisons[np.isclose(m.comparisons.eps, 0.2) & np.isclose(m.comparisons.eta_factor, 1.0)].reset_index(drop=True),
        check_like=True)
