"""Shared plumbing of the figure scripts: saving (PNG + PDF + JSON sidecar), claim evidence, sweeps.

Plot functions elsewhere return ``(fig, ax)`` and never save (STYLE §6); only :func:`save` writes.
Each figure's sidecar ``<name>.json`` holds its settings, seeds, sweep ids, code version, git commit
and the claim *evidence* rows that :mod:`figures.report` turns into the claims table.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

import sweep as _sweep
from asyncgrpo.plugins import plugin_fingerprint


@dataclass(frozen=True)
class Evidence:
    """One measured check of a claim, at one named point of the grid.

    ``measured ± z·se`` is compared with ``bound`` (or, for ``kind="equal"``, with an exact
    prediction) and ``verdict`` is computed by :mod:`figures.stats` from these numbers.
    """

    claim: str  #: "C1" … "C9"
    quantity: str  #: what was measured, e.g. "E[𝔅_gmc]"
    point: str  #: where, e.g. "bandit, ε=0.2, G=8, d=4"
    measured: float | None
    se: float | None
    bound: float | None
    verdict: str
    figure: str = ""
    note: str = ""

    def to_dict(self) -> dict:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


@dataclass
class FigureResult:
    """What a figure's ``main`` returns: files written, evidence rows, and why parts are missing."""

    name: str
    files: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    seconds: float = 0.0


def clean_json(v):
    """A JSON-ready copy of ``v``: NumPy scalars as Python numbers, non-finite floats as ``None`` (JSON has
    no NaN), tuples as lists, mapping keys as strings, DataFrames as lists of records, paths as strings."""
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [clean_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): clean_json(x) for k, x in v.items()}
    if hasattr(v, "to_dict") and hasattr(v, "columns"):
        return [clean_json(r) for r in v.to_dict(orient="records")]
    return v


def _jsonable(v):
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Path):
        return str(v)
    return v


#: The commit of the whole ``python -m figures`` run, taken before it writes anything (set by
#: ``figures.__main__``): the figures it has already written change tracked files, so asking git per
#: figure would stamp every later sidecar of a clean-tree run "-dirty".
RUN_COMMIT: str | None = None


def sidecar(name: str, *, quick: bool, settings: dict, seeds, sweeps=(), evidence=(), missing=()) -> dict:
    """The provenance record saved next to a figure (STYLE §6)."""
    return {
        "figure": name,
        "quick": bool(quick),
        "settings": settings,
        "seeds": seeds,
        "sweeps": list(sweeps),
        "git_commit": RUN_COMMIT or _sweep.git_commit(),
        "code_version": _sweep.code_version(),
        # plugin estimators ($ASYNCGRPO_ESTIMATORS) shape results: their source hashes travel with every figure
        "estimator_plugins": plugin_fingerprint(),
        "python": platform.python_version(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "evidence": [e.to_dict() for e in evidence],
        "missing": list(missing),
    }


def save(fig, out_dir, name: str, meta: dict) -> list[str]:
    """Write ``<out_dir>/<name>.png``, ``.pdf`` and ``.json``; returns the paths. Closes ``fig``.

    The sidecar is sealed (issue 56): ``seal`` = SHA-256 of its canonical JSON (:func:`figures.report.data.seal`),
    over everything in it, the stamp (``git_commit``, ``code_version``, ``protocol``) included, so the report
    builder refuses a sidecar whose numbers or stamp were edited after it was written."""
    import matplotlib.pyplot as plt

    from figures.report.data import seal

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf", out / f"{name}.json"]
    fig.savefig(paths[0])
    fig.savefig(paths[1])
    body = json.loads(json.dumps(clean_json({k: v for k, v in meta.items() if k != "seal"}), default=_jsonable,
                                 allow_nan=False))
    body["seal"] = seal(body)
    tmp = paths[2].with_name(f".{paths[2].name}.tmp")
    tmp.write_text(json.dumps(body, indent=1, allow_nan=False))
    tmp.replace(paths[2])  # atomic: a killed run leaves the old sidecar or the new one, never half of one
    plt.close(fig)
    return [str(p) for p in paths]


def tightest(df, claim: str, quantity: str, point, figure: str, names=("tis", "tic", "gmc")) -> list[Evidence]:
    """Per estimator, the row of ``df`` where ``value/bound`` is largest (the bound's tightest point).

    ``quantity`` is formatted with ``name``; ``point(row)`` names where the row was measured.
    """
    from figures import stats

    ev = []
    for name in names:
        s = df[df.estimator == name]
        r = s.loc[(s.value / s.bound).idxmax()]
        ev.append(Evidence(claim, quantity.format(name=name), point(r), r.value, r.se, r.bound,
                           stats.verdict(r.value, r.se, r.bound), figure))
    return ev


def sweep_figure(name: str, out_dir, quick: bool, sweep, plot, evidence, *, settings: dict, seeds,
                 sweep_opts: dict | None = None, caption: str = "") -> FigureResult:
    """The ``main`` of a one-sweep figure: run ``sweep`` (cached cells), ``plot(table)``,
    ``evidence(table)``, save PNG + PDF + sidecar (with its ``caption``: what is plotted, what the
    claim predicts, what to look for), and return the :class:`FigureResult`."""
    import time

    from figures import style

    t0 = time.perf_counter()
    style.apply()
    df = run(sweep, sweep_opts).table
    fig, _ = plot(df)
    ev = evidence(df)
    meta = sidecar(name, quick=quick, settings=settings, seeds=seeds, sweeps=[sweep.id], evidence=ev)
    if caption:
        meta["caption"] = caption
    return FigureResult(name, save(fig, out_dir, name, meta), ev, [], time.perf_counter() - t0)


def run(sweep, sweep_opts: dict | None):
    """Run ``sweep`` with the options chosen on the command line (backend, cells root, progress)."""
    opts = {"backend": "local", "progress": True, **(sweep_opts or {})}
    return _sweep.run_sweep(sweep, **opts)


def placeholder(ax, text: str) -> None:
    """Say on the axes that a panel has no data (never draw invented numbers)."""
    import textwrap

    ax.text(0.5, 0.5, textwrap.fill(text, 45), ha="center", va="center", fontsize=8, transform=ax.transAxes, color="#AA0000")
    ax.set_xticks([])
    ax.set_yticks([])


def unavailable(name: str, out_dir, quick: bool, settings: dict, why: str, t0: float) -> FigureResult:
    """Save a figure that only says why it has no data, and return that as its result."""
    import time

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.4, 2.0))
    placeholder(ax, why)
    meta = sidecar(name, quick=quick, settings=settings, seeds=None, missing=[why])
    return FigureResult(name, save(fig, out_dir, name, meta), [], [why], time.perf_counter() - t0)
