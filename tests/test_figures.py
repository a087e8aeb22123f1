"""figures/: statistics and verdicts, palette, report writer, plot contract, and the quick end-to-end run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from figures import common, report, stats, style

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- stats
def test_loglog_slope_recovers_power_law_and_flags_too_few_points():
    x = np.geomspace(1, 100, 7)
    s, se = stats.loglog_slope(x, 3.0 * x**-0.4)
    assert s == pytest.approx(-0.4, abs=1e-12) and se == pytest.approx(0.0, abs=1e-9)
    assert np.isnan(stats.loglog_slope([1.0], [2.0])[0])
    assert np.isnan(stats.loglog_slope([1.0, 2.0], [-1.0, -2.0])[0])  # y ≤ 0 dropped


def test_loglog_slope_standard_error_covers_truth():
    """Noisy power laws (fixed seed): the true slope lies within z = 3 standard errors in ≥ 95 % of 200 fits."""
    rng = np.random.default_rng(0)
    x = np.geomspace(1, 1000, 10)
    hits = 0
    for _ in range(200):
        y = x**-2.0 * np.exp(rng.normal(0, 0.2, x.size))
        s, se = stats.loglog_slope(x, y)
        hits += abs(s + 2.0) <= 3 * se
    assert hits >= 190


@pytest.mark.parametrize(
    "measured, se, bound, want",
    [
        (1.0, 0.1, 1.05, "holds"),
        (1.2, 0.1, 1.0, "holds"),  # above, but within 3·se: Monte Carlo error, not a violation
        (1.5, 0.1, 1.0, "violated"),
        (0.1, 0.01, 1.0, "loose by ×10"),
        (0.0, 0.0, 1.0, "holds (measured 0)"),
        (1.0, 0.1, None, "no bound"),
        (float("nan"), 0.1, 1.0, "not measured"),
    ],
)
def test_verdict_from_numbers(measured, se, bound, want):
    assert stats.verdict(measured, se, bound) == want


def test_verdict_equal():
    assert stats.verdict_equal(1.0, 0.1, 1.25) == "holds"
    assert stats.verdict_equal(1.0, 0.1, 1.35) == "violated"


# ----------------------------------------------------------------------------- style
def test_palette_covers_every_estimator_with_distinct_colours_and_markers():
    from asyncgrpo.estimators import ESTIMATORS
    from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

    names = (*ESTIMATORS, *TOKEN_ESTIMATORS)
    assert set(names) <= set(style.PALETTE) and set(names) <= set(style.MARKERS)
    assert len({style.color(n) for n in names}) == len(names)
    assert len({style.marker(n) for n in names}) == len(names)
    assert style.ordered(["gmc", "zzz", "is"]) == ["is", "gmc", "zzz"]


# ----------------------------------------------------------------------------- plots and report
def _toy_table():
    rows = []
    for name in ("tis", "tic", "gmc"):
        for G in (2, 8, 32):
            rows.append(dict(estimator=name, G=G, eps=0.2, d=4, quantity="bias_functional", value=0.01 / G,
                             se=0.001 / G, bound=0.05 / G, exact=np.nan))
    return pd.DataFrame(rows)


def test_plot_functions_return_fig_ax_and_write_nothing(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from figures import plots

    monkeypatch.chdir(tmp_path)
    fig, ax = plots.quantity_vs(_toy_table(), "G", "bias_functional")
    assert ax.figure is fig and len(ax.lines) >= 3
    assert list(tmp_path.iterdir()) == []


def test_report_from_sidecars(tmp_path):
    ev = [
        common.Evidence("C1", "E‖ĝ‖²", "toy", 0.5, 0.01, 1.0, stats.verdict(0.5, 0.01, 1.0), "figX"),
        common.Evidence("C7", "removed mass", "toy", 2.0, 0.01, 1.0, stats.verdict(2.0, 0.01, 1.0), "figX"),
    ]
    (tmp_path / "figX.json").write_text(json.dumps(common.sidecar("figX", quick=True, settings={}, seeds=[0],
                                                                  evidence=ev, missing=["not available: x"])))
    md, page, rep = report.write(tmp_path, quick=True, timings={"figX": 1.0}, failures={"figY": "boom"},
                                 run_checks=False)
    text = md.read_text()
    for cid in report.CLAIM_IDS:
        assert f"**{cid}**" in text
    assert "| 0.5 [0.48, 0.52] | 1 | holds |" in text
    assert report.summary(rep, "C7") == "violated"  # a measurement above its bound is reported, never hidden
    assert report.summary(rep, "C2") == "not measured"
    assert "not available: x" in text and "boom" in text
    assert page.read_text().startswith("<!doctype html>")


# ----------------------------------------------------------------------------- C5/C9 in two regimes
def test_c5_slope_verdict_against_an_upper_bound_exponent():
    """Above the exponent = violated; below = loose by (G_max/G_min)^(exponent − slope); containing = holds."""
    from figures.fig_tuned_delay import slope_verdict

    assert slope_verdict(0.15, 0.10, 0.22, -0.4, 128.0) == "violated"
    assert slope_verdict(-0.5, -1.38, -0.31, -0.4, 128.0) == "holds"
    assert slope_verdict(0.03, -0.03, 0.12, 0.0, 128.0) == "holds"
    k = 128.0 ** 0.38
    assert slope_verdict(-0.38, -0.66, -0.25, 0.0, 128.0) == f"loose by ×{k:.2g}"
    assert slope_verdict(float("nan"), -1.0, 1.0, 0.0, 128.0) == "not measured"


def _toy_g_table(regime, slopes, edges=0):
    rows = []
    for name, (sl, lo, hi, th) in slopes.items():
        for j, G in enumerate((2, 8, 32)):
            dlt = 0.1 * G**sl
            rows.append(dict(estimator=name, G=G, d=8, eps=0.2, delta=dlt, delta_lo=0.8 * dlt, delta_hi=1.2 * dlt,
                             delta_se=0.1 * dlt, chi2_d=0.5 + j, edge_d=j < edges, edge_0=False, slope=sl, slope_lo=lo,
                             slope_hi=hi, slope_theory=th, n_points=3, n_seeds=5, steps=120, regime=regime,
                             instance="toy"))
    return pd.DataFrame(rows)


def test_fig4_measured_panels_evidence_and_regime_meta(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from figures import fig_tuned_delay as f4

    monkeypatch.chdir(tmp_path)
    df = _toy_g_table("local", {"gmc": (-0.5, -1.38, -0.31, -0.4), "tic": (-0.38, -0.66, -0.25, 0.0)}, edges=1)
    fig, ax = f4.plot_measured(df, title="local")
    assert ax.figure is fig and len(ax.lines) >= 4  # two series + two theory-slope references
    fig2, ax2 = f4.plot_slopes({"local": {"gmc": (-0.5, -1.38, -0.31, -0.4), "tic": (-0.38, -0.66, -0.25, 0.0)}})
    assert [t.get_text() for t in ax2.get_yticklabels()] == ["local: gmc", "local: tic"]
    assert list(tmp_path.iterdir()) == []  # plots never save
    meta = f4.regime_meta(df, "local")
    assert (meta["n_edge"], meta["n_cells"]) == (2, 12) and meta["chi2_median"] == pytest.approx(1.5)
    assert meta["d"] == 8 and len(meta["edge_cells"]) == 2
    ev = dict(f4._measured_evidence(df, "local", meta))
    assert ev["gmc"].verdict == "holds" and ev["tic"].verdict.startswith("loose by ×")
    assert "upper bound" in ev["tic"].note and "2/12" in ev["tic"].note
    assert ev["χ²"].measured == pytest.approx(1.5) and ev["χ²"].verdict == "reported"


def _toy_tuned(regime_shift=0.0):
    rows = []
    for e in ("onpolicy", "is", "tis", "tic", "gmc"):
        for d in (0, 4):
            j = 0.9 if d == 0 else {"onpolicy": 0.85, "is": 0.5, "tis": 0.7, "tic": 0.7, "gmc": 0.8}[e]
            rows.append(dict(estimator=e, d=d, G=8, eps=0.2, steps=100, n_seeds=4, final_J=j + regime_shift,
                             final_J_lo=j - 0.01, final_J_hi=j + 0.01, final_J_se=0.005, div_rate=0.0,
                             div_rate_any=0.0, tail_any=3.0, tail_rel_any=3.0 if e == "is" and d else 1.0,
                             chi2=0.4, edge=False, eta=8.0))
    return pd.DataFrame(rows)


def test_fig5_evidence_and_plot_per_regime(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from figures import fig_convergence as f5

    monkeypatch.chdir(tmp_path)
    t = _toy_tuned()
    meta = f5.regime_meta(t, "local")
    assert meta["chi2_median"] == pytest.approx(0.4) and (meta["n_edge"], meta["n_cells"]) == (0, 10)
    ev = dict(f5.evidence(t, meta))
    assert ev["is_unstable"].verdict == "holds" and ev["tic_tis_degrade"].verdict == "holds"
    assert ev["onpolicy_worse"].verdict == "violated"  # onpolicy 0.85 > gmc 0.80: computed, not asserted
    assert ev["gmc_best_stable"].verdict == "violated"
    assert ev["spread"].measured == pytest.approx(0.35)
    curves = pd.DataFrame([dict(estimator="gmc", d=4, quantity=q, k=k, value=1.0 / (k + 1), se=0.01, n=4)
                           for q in ("gap", "grad_norm2") for k in range(5)])
    fig, axes = f5.plot({"local": (t, curves, "local"), "far": (t, curves, "far")})
    assert axes.shape == (2, 3) and axes[0, 0].figure is fig
    assert list(tmp_path.iterdir()) == []


def test_report_gives_one_verdict_per_regime(tmp_path):
    def ev(cid, q, m, v, regime=None, label=None):
        d = common.Evidence(cid, q, "toy", m, None, None, v, "figR").to_dict()
        if regime:
            d["regime"] = regime
        if label:
            d["label"] = label
        return d

    rows = [ev("C5", "bound slope", -0.4, "holds"),
            ev("C5", "slope gmc", 0.15, "violated", "far", "gmc"), ev("C5", "slope tic", 0.03, "holds", "far", "tic"),
            ev("C5", "slope gmc", -0.5, "holds", "local", "gmc"),
            ev("C5", "slope tic", -0.38, "loose by ×6.3", "local", "tic"),
            ev("C5", "χ²", 0.6, "reported", "local", "χ²")]
    meta = common.sidecar("figR", quick=True, settings={}, seeds=[0])
    meta["evidence"] = rows
    meta["regimes"] = {"far": {"claim": "C5", "chi2_median": 1.2e4, "d": 16, "what": "T=16"},
                       "local": {"claim": "C5", "chi2_median": 0.61, "d": 8, "what": "T=4"}}
    (tmp_path / "figR.json").write_text(json.dumps(meta))
    md, _, rep = report.write(tmp_path, quick=True, run_checks=False)
    s = report.summary(rep, "C5")
    assert s == ("theory check (scipy vs sympy): holds; far (median χ² 1.2e+04): violated (gmc); holds (tic); "
                 "local (median χ² 0.61): holds (gmc); loose by ×6.3 (tic)")
    text = md.read_text()
    assert "far: toy" in text and "local: toy" in text  # each row says its regime
    assert "Simulator regimes" in text and "0.61" in text and "upper bound" in text
    assert report.summary(rep, "C7") == "not measured"
    assert [r["regime"] for r in report.tag(rows[:1], "far", ["x"])] == ["far"]


# ----------------------------------------------------------------------------- end to end
def test_quick_run_writes_every_figure_and_the_report(tmp_path):
    """``python -m figures --quick`` from a clean cell cache: every figure, REPORT.md/.html, no violated C1/C2/C4."""
    from figures.__main__ import SLOW_IN_QUICK, discover

    out, cells = tmp_path / "out", tmp_path / "cells"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    # Its wall time is a measurement, not a test condition: `python -m figures` prints it (LOG.md).
    proc = subprocess.run([sys.executable, "-m", "figures", "--quick", "--out", str(out), "--cells", str(cells),
                           "--workers", "1", "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names = [json.loads(p.read_text())["figure"] for p in out.glob("*.json")]
    expected = [n for n in discover() if n not in SLOW_IN_QUICK]
    assert len(names) == len(expected)
    for n in set(discover()) & set(SLOW_IN_QUICK):
        assert f"[skip] {n}" in proc.stdout  # left out of --quick loudly, never silently
    for n in names:
        for ext in ("png", "pdf"):
            assert (out / f"{n}.{ext}").stat().st_size > 1000
        meta = json.loads((out / f"{n}.json").read_text())
        assert meta["git_commit"] and meta["code_version"] and meta["quick"] is True
    text = (out / "REPORT.md").read_text()
    for cid in report.CLAIM_IDS:
        assert f"**{cid}**" in text
    assert "data:image/png;base64," in (out / "REPORT.html").read_text()
    rep = report.build(out, quick=True, run_checks=False)
    for cid in ("C1", "C2", "C4"):  # mathematical bounds: a violation here is a bug somewhere
        assert report.summary(rep, cid) != "violated", report.claims_table_md(rep)
    for fig_name, cid in (("fig4_tuned_delay", "C5"), ("fig5_convergence", "C9")):  # both simulator regimes
        meta = json.loads((out / f"{fig_name}.json").read_text())
        assert set(meta["regimes"]) == {"far", "local"}
        for info in meta["regimes"].values():
            assert info["n_cells"] > 0 and 0 <= info["n_edge"] <= info["n_cells"] and info["chi2_median"] > 0
        assert {e.get("regime") for e in meta["evidence"] if e["claim"] == cid} >= {"far", "local"}
        s = report.summary(rep, cid)
        assert "far (median χ²" in s and "local (median χ²" in s, s
    assert any(cells.iterdir())  # the sweeps stored their cells
    # A second run recomputes nothing: every sweep is served from the cache.
    from figures import fig_bias_G

    import sweep

    sweep._VERSION_CACHE.clear()  # this process may have hashed the sources before the run
    again = sweep.run_sweep(fig_bias_G.sweep(quick=True), root=cells, backend="serial", progress=False)
    assert again.computed == ()
