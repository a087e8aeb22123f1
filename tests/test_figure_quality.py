"""Figure quality: every figure, drawn by its own ``main`` on small synthetic data, has labelled axes and a caption.

Each figure module's ``main`` runs as ``python -m figures`` runs it, except that its data source is replaced
by a small synthetic table (the Monte Carlo sweep, the training protocol) and :func:`figures.common.save` is
replaced by a recorder, so nothing is computed and nothing is written. Checked on what ``main`` hands to
``save``: every axes has an x and a y label (its own, or that of an axes it shares the axis with; a colour
bar a label along its length; a secondary axis its own label), the sidecar carries a non-empty caption that
says what is predicted, and a printed "± number" is explained ("s.e.") in the figure or its caption.
The theory figures (fig_heatmap, fig_c5_exponent) run their real quick mode. fig_llm_delay is re-plotted
from its committed sidecar. Runs in a few seconds on 2 cores.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from figures import common, protocol_data  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ESTIMATORS = ("onpolicy", "is", "tis", "tic", "gmc", "snis")
SWEEP_FIGURES = ("fig_bias_G", "fig_bias_eps", "fig_second_moment", "fig_delay")
THEORY_FIGURES = ("fig_heatmap", "fig_c5_exponent")
PROTOCOL_FIGURES = ("fig_c5_protocol", "fig_c9_protocol")


# ----------------------------------------------------------------------------- checks
def _all_axes(fig) -> list:
    """Every axes of ``fig``, those of its subfigures included."""
    out = list(fig.axes)
    for sf in getattr(fig, "subfigs", []):
        out += [a for a in _all_axes(sf) if a not in out]
    return out


def _has(label) -> bool:
    return bool(label and label.strip())


def unlabelled(fig) -> list[str]:
    """What lacks a label in ``fig``: ['axes 2 "title": y', …] (empty when every axis is labelled)."""
    problems = []
    axes = _all_axes(fig)
    for i, ax in enumerate(axes):
        name = f'axes {i} "{ax.get_title() or ax.get_label()}"'
        cb = getattr(ax, "_colorbar", None)
        if cb is not None:  # a colour bar: one label, along its length
            along = ax.get_ylabel() if cb.orientation == "vertical" else ax.get_xlabel()
            if not _has(along):
                problems.append(f"{name}: colour bar label")
            continue
        if not ax.axison:
            continue
        for which, get, shared in (("x", "get_xlabel", ax.get_shared_x_axes()), ("y", "get_ylabel", ax.get_shared_y_axes())):
            if not _has(getattr(ax, get)()) and not any(_has(getattr(o, get)()) for o in shared.get_siblings(ax)):
                problems.append(f"{name}: {which}")
        for child in ax.child_axes:  # secondary axes (e.g. r beside the exponent): their own label
            if type(child).__name__ == "SecondaryAxis":
                lab = child.get_ylabel() if child._orientation == "y" else child.get_xlabel()
                if not _has(lab):
                    problems.append(f"{name}: secondary {child._orientation}")
    return problems


def texts(fig) -> str:
    """All text drawn in ``fig`` (titles, labels, legends, annotations), joined."""
    from matplotlib.text import Text

    return "\n".join(t.get_text() for t in fig.findobj(Text))


def check(fig, meta) -> None:
    problems = unlabelled(fig)
    cap = (meta.get("caption") or "").strip()
    if not cap:
        problems.append("no caption in the sidecar")
    elif "predict" not in cap.lower():
        problems.append("the caption does not say what is predicted")
    drawn = texts(fig)
    if re.search(r"±\s*\d", drawn) and "s.e." not in drawn + cap:
        problems.append("a '± number' is printed without saying what ± is")
    assert not problems, f"{meta.get('figure')}: " + "; ".join(problems)


@pytest.fixture
def saved(monkeypatch):
    """Replace figures.common.save by a recorder: {name: (fig, meta)}; figures are closed afterwards."""
    import matplotlib.pyplot as plt

    got = {}

    def record(fig, out_dir, name, meta):
        got[name] = (fig, meta)
        return []

    monkeypatch.setattr(common, "save", record)
    monkeypatch.setattr(common, "sidecar", lambda name, **kw: {"figure": name, "evidence": kw.get("evidence", [])})
    yield got
    plt.close("all")


# ----------------------------------------------------------------------------- synthetic data
def sweep_table(x: str, values) -> pd.DataFrame:
    """A bias_table-shaped table over ``x`` (G, eps or d): every quantity the sweep figures read, positive
    values with small standard errors, bounds above them, exact values where the count engine would give them,
    and one exact zero (gmc's E𝔅 at the last point) as the Monte Carlo gives when no group is capped."""
    fixed = {"G": 8, "eps": 0.1, "d": 4}
    rows = []
    for k, xv in enumerate(values):
        at = {**fixed, x: xv}
        scale = (k + 1.0) if x == "d" else 1.0 / (k + 1.0)
        for j, e in enumerate(ESTIMATORS):
            for q in ("weighting_bias", "grad_bias", "bias_functional", "removed_mass", "sq_norm"):
                v = 0.01 * (j + 1) * scale
                if e == "gmc" and q == "bias_functional" and k == len(values) - 1:
                    v = 0.0
                rows.append(dict(estimator=e, quantity=q, value=v, se=0.02 * v, bound=3 * v + 0.1, exact=v, **at))
        for q, v in (("baseline_bias", 0.1 * scale), ("chi2", 0.001 * scale**2)):
            rows.append(dict(estimator="-", quantity=q, value=v, se=0.01 * v, bound=np.nan, exact=v,
                             **{**at, "eps": np.nan if q == "chi2" else at["eps"]}))
    return pd.DataFrame(rows)


SWEEP_DATA = {"fig_bias_G": ("G", [2, 8, 32]), "fig_bias_eps": ("eps", [0.02, 0.1, 0.5, 1.0]),
              "fig_second_moment": ("eps", [0.02, 0.1, 0.5, 1.0]), "fig_delay": ("d", [1, 4, 16])}


def fake_protocol(instances=("inst-a", "inst-with-a-long-name"), delays=(0, 4, 8), Gs=(4, 8, 32), seeds=(0, 1, 2)):
    """A ProtocolResult-shaped object: the attributes the protocol figures read, on a handful of rows."""
    rng = np.random.default_rng(0)
    c5 = dict(steps=64, estimators=["gmc", "tic"], G=list(Gs), d=max(delays), eps=0.2, slope_margin=0.1, flat_margin=0.02)
    proto = SimpleNamespace(instances=list(instances), delays=list(delays), primary=dict(eps=0.2, G=8, d=max(delays)),
                            c5=c5, tune_seeds=[0], eval_seeds=list(seeds),
                            version=3)  # the layout test: v4's report keys need a real v4 result (test_protocol_v4)

    def table(kind, ests, ds, gs):
        return pd.DataFrame([dict(instance=i, estimator=e, d=d, G=g, eps=0.2, seed=s, eta_kind=kind, phase="eval",
                                  nauc=0.9 - 0.01 * d + 0.01 * rng.normal())
                             for i in instances for e in ests for d in ds for g in gs for s in seeds])

    sub = ["is-unstable", "gmc-best-or-tied", "gmc-stable"]
    words = ["holds", "refuted", "inconclusive", "out of scope"]
    matrix = pd.DataFrame([[words[(a + b) % 4] for b in range(len(instances))] for a in range(len(sub))],
                          index=sub, columns=list(instances))
    c9 = dict(matrix=matrix, aggregate={s: "refuted" for s in sub}, verdict="refuted")
    per = {i: dict(chi2_median=0.5, verdict="refuted", in_scope=True, reason="") for i in instances}
    return SimpleNamespace(protocol=proto, table=table("tuned", ESTIMATORS + ("grpo",), delays, [8]),
                           c5_table=table("tuned", ["gmc", "tic"], [0, max(delays)], Gs),
                           fixed=table("fixed", ["gmc", "tic"], [0, max(delays)], Gs), c9=c9,
                           c5=dict(per_instance=per, verdict="refuted"))


# ----------------------------------------------------------------------------- the figures
@pytest.mark.parametrize("module", SWEEP_FIGURES)
def test_sweep_figure_is_labelled_and_captioned(module, saved, monkeypatch, tmp_path):
    import importlib

    mod = importlib.import_module(f"figures.{module}")
    x, values = SWEEP_DATA[module]
    monkeypatch.setattr(common, "run", lambda sweep, opts: SimpleNamespace(table=sweep_table(x, values)))
    mod.main(tmp_path, quick=True)
    (fig, meta), = saved.values()
    check(fig, meta)


@pytest.mark.parametrize("module", THEORY_FIGURES)
def test_theory_figure_is_labelled_and_captioned(module, saved, tmp_path):
    import importlib

    importlib.import_module(f"figures.{module}").main(tmp_path, quick=True)
    (fig, meta), = saved.values()
    check(fig, meta)


@pytest.mark.parametrize("module", PROTOCOL_FIGURES)
@pytest.mark.parametrize("n_instances", [2, 7])
def test_protocol_figure_is_labelled_and_captioned(module, n_instances, saved, monkeypatch, tmp_path):
    """The C5/C9 figures on a fake protocol run, with few and with many instances (the layout sizes itself)."""
    import importlib

    insts = [f"instance-{k}" + ("-with-a-long-name" if k % 2 else "") for k in range(n_instances)]
    res = fake_protocol(tuple(insts))
    monkeypatch.setattr(protocol_data, "result", lambda quick, opts=None: res)
    monkeypatch.setattr(protocol_data, "protocol_meta", lambda r: {})
    monkeypatch.setattr(protocol_data, "c9_sidecar", lambda r: {"matrix": {s: dict(r.c9["matrix"].loc[s])
                                                                          for s in r.c9["matrix"].index}})
    monkeypatch.setattr(protocol_data, "c5_sidecar", lambda r: {})
    importlib.import_module(f"figures.{module}").main(tmp_path, quick=True)
    (fig, meta), = saved.values()
    check(fig, meta)


def test_c9_matrix_labels_fit_their_cells():
    """Every word written in a verdict cell is narrower than the cell (rendered text extents, not a guess)."""
    import matplotlib.pyplot as plt

    from figures import fig_c9_protocol as f9

    res = fake_protocol(tuple(f"instance-{k}" for k in range(6)))
    fig, axes = f9.plot(res.c9, {}, eps=0.2, G=8)
    ax = axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    cell_w = abs(ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0])
    cell_h = abs(ax.transData.transform((0, 1))[1] - ax.transData.transform((0, 0))[1])
    words = [t for t in ax.texts]
    assert words
    for t in words:
        bb = t.get_window_extent(renderer)
        assert bb.width < cell_w and bb.height < cell_h, (t.get_text(), bb.width, cell_w, bb.height, cell_h)
    plt.close(fig)


def test_the_check_fails_when_a_label_is_removed(saved, monkeypatch, tmp_path):
    """The checks above can fail: the same figure with one y label blanked, or without its caption, is caught."""
    from figures import fig_delay

    monkeypatch.setattr(common, "run", lambda sweep, opts: SimpleNamespace(table=sweep_table("d", [1, 4, 16])))
    fig_delay.main(tmp_path, quick=True)
    (fig, meta), = saved.values()
    check(fig, meta)
    fig.axes[1].set_ylabel("")
    with pytest.raises(AssertionError, match="y"):
        check(fig, meta)
    fig.axes[1].set_ylabel("E𝔅")
    with pytest.raises(AssertionError, match="caption"):
        check(fig, {**meta, "caption": " "})


def test_llm_figure_from_its_sidecar():
    from figures import fig_llm_delay
    from simulate.llm import experiment as ex
    from simulate.llm.protocol import LMProtocol

    meta = json.loads((REPO / "figures" / "out" / "fig_llm_delay.json").read_text())
    # the protocol the committed runs were made under (the sidecar's), not today's default
    protocol = LMProtocol(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["lm_protocol"].items()})
    df = pd.DataFrame(meta["runs"])
    fig, _ = fig_llm_delay.plot(df, ex.c9_result(df, protocol, quick=False), protocol.metric)
    check(fig, meta)
