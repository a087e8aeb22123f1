"""figures/: statistics and verdicts, palette, report writer, plot contract, and the quick end-to-end run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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


def test_mean_ci_matches_normal_interval():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 1.0, 400)
    m, lo, hi, se = stats.mean_ci(x)
    assert se == pytest.approx(x.std(ddof=1) / 20)
    assert (lo, hi) == pytest.approx((m - 1.96 * se, m + 1.96 * se))
    assert lo < 2.0 < hi  # z = 1.96 on a fixed seed
    with pytest.raises(ValueError, match="finite"):
        stats.mean_ci([np.nan])


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


# ----------------------------------------------------------------------------- end to end
def test_quick_run_writes_every_figure_and_the_report(tmp_path):
    """``python -m figures --quick`` from a clean cell cache: every figure, REPORT.md/.html, no violated C1/C2/C4."""
    from figures.__main__ import SLOW_IN_QUICK, discover

    out, cells = tmp_path / "out", tmp_path / "cells"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "figures", "--quick", "--out", str(out), "--cells", str(cells),
                           "--workers", "1", "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert wall < 180, f"--quick took {wall:.0f} s (budget: 3 minutes)"
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
    assert any(cells.iterdir())  # the sweeps stored their cells
    # A second run recomputes nothing: every sweep is served from the cache.
    from figures import fig_bias_G

    from asyncgrpo import sweep

    sweep._VERSION_CACHE.clear()  # this process may have hashed the sources before the run
    again = sweep.run_sweep(fig_bias_G.sweep(quick=True), root=cells, backend="serial", progress=False)
    assert again.computed == ()
