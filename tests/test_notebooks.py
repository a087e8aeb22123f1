"""The notebooks: each jupytext pair is in sync, each executes top to bottom in quick mode, and the
ε/G sliders recompute when their values change.

The kernel is a throw-away kernelspec pointing at *this* interpreter (``sys.executable``): the
default ``python3`` spec may say plain ``python``, which on CI can be an interpreter without the
project installed. nbclient raises ``CellExecutionError`` at the first cell that raises
(``allow_errors`` stays False; :func:`test_a_raising_cell_fails_the_run` holds it to that).

Headless, an ``ipywidgets.Output`` captures its figures into the notebook's widget state rather
than into the cell outputs; the slider test reads them from there.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ("eps_G_tradeoff", "estimator_explorer", "tour")


def _sources(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_every_notebook_is_listed():
    assert {p.stem for p in NB_DIR.glob("*.py")} == set(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_only_the_py_source_is_tracked_and_the_paired_ipynb_is_ignored(name):
    """Opening a notebook in JupyterLab writes outputs into its paired .ipynb; that file must be git-ignored
    so running a notebook never dirties the tree (issue 27 item 15), and the .py must declare the pairing."""
    import subprocess

    py = jupytext.read(NB_DIR / f"{name}.py")
    assert "py:percent" in py.metadata["jupytext"]["formats"] and "ipynb" in py.metadata["jupytext"]["formats"]
    root = NB_DIR.parent
    ignored = subprocess.run(["git", "check-ignore", "-q", f"notebooks/{name}.ipynb"], cwd=root)
    assert ignored.returncode == 0, f"notebooks/{name}.ipynb is not git-ignored"
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", f"notebooks/{name}.ipynb"], cwd=root,
                             capture_output=True)
    assert tracked.returncode != 0, f"notebooks/{name}.ipynb is tracked"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "asyncgrpo-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "asyncgrpo test", "language": "python"}))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(root))
    mp.setenv("ASYNCGRPO_NOTEBOOK_QUICK", "1")  # the kernel inherits it: small grids and sweeps
    mp.delenv("MPLBACKEND", raising=False)  # inline figures, so the test can see them
    yield "asyncgrpo-test"
    mp.undo()


#: Per-cell time limits (s). A notebook cell in quick mode takes seconds warm and under a minute with
#: cold Numba caches. The appended slider cells change widget values from the kernel; after such a
#: cell nbclient sometimes reads the execute_reply only when its poll times out (measured 2 runs in
#: 10, with ipykernel 6.31 and 7.4 alike; the cell then passes), so that wait is whatever the limit
#: is: a short limit for those cells (they take ~1 s) keeps the stall short instead of 15 minutes.
CELL_TIMEOUT = 300
SLIDER_CELL_TIMEOUT = 60
SLIDER_TAG = "test-slider"


def _slider_cell(src: str):
    return nbformat.v4.new_code_cell(src, metadata={"tags": [SLIDER_TAG]})


def _cell_timeout(cell) -> int:
    return SLIDER_CELL_TIMEOUT if SLIDER_TAG in cell.get("metadata", {}).get("tags", []) else CELL_TIMEOUT


def _execute(nb, kernel_name, cwd):
    # cwd: the notebooks' sweep cells write results/cells there, not into the repository
    client = nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout_func=_cell_timeout,
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _outputs(nb) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _widget_outputs(nb) -> list[dict]:
    """Outputs captured by ``ipywidgets.Output`` widgets (the notebook's saved widget state)."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return [o for m in state.values() if m.get("model_name") == "OutputModel" for o in m["state"].get("outputs", [])]


def _has_png(outputs) -> bool:
    return any("image/png" in o.get("data", {}) for o in outputs)


# Appended to estimator_explorer: move two sliders, then check (next cell: widget messages are handled
# between cells) that the callback ran once per change and drew the group those settings define.
_EXPLORER_SLIDER_CELLS = [
    'n0 = state["n_updates"]\nW_["G"].value = 16\nW_["sigma"].value = 1.5',
    'assert state["n_updates"] == n0 + 2, state["n_updates"]\n'
    'assert len(state["ell"]) == 16 and state["sigma"] == 1.5\n'
    'pd.testing.assert_frame_equal(state["table"], weights_table(draw_group(16, 1.5, DEFAULTS["seed"]), DEFAULTS["eps"])[0])',
]


@pytest.mark.parametrize("name", ["estimator_explorer", "tour"])
def test_notebook_executes_in_quick_mode(name, kernel_name, tmp_path):
    nb = jupytext.read(NB_DIR / f"{name}.py")
    if name == "estimator_explorer" and importlib.util.find_spec("ipywidgets"):
        nb.cells += [_slider_cell(src) for src in _EXPLORER_SLIDER_CELLS]
    nb = _execute(nb, kernel_name, tmp_path)
    assert not [o for o in _outputs(nb) if o.get("output_type") == "error"]
    assert _has_png(_outputs(nb) + _widget_outputs(nb)), "the notebook drew no figure"
    if name == "estimator_explorer":
        assert (tmp_path / "results" / "cells").is_dir()


# Appended to eps_G_tradeoff: move three sliders programmatically, then check in the next cell (the
# widget comm messages are handled between cells) that the callback ran once per change, at the new
# settings, and that its table equals a direct call of the exact engine at those settings.
_SLIDER_CELLS = [
    'n0 = last["n_updates"]\nW["eps"].value = 0.5\nW["G"].value = 32\nW["d"].value = 4\n'
    'W["estimators"].value = ("tic", "gmc")',
    'assert last["n_updates"] == n0 + 4, last["n_updates"]\n'
    'assert (last["eps"], last["G"], last["d"], last["estimators"]) == (0.5, 32, 4, ("tic", "gmc"))\n'
    'direct = exact_curves(0.5, 32, 4, ("tic", "gmc"))\n'
    'pd.testing.assert_frame_equal(last["table"], direct)\n'
    'assert set(last["table"].estimator) == {"tic", "gmc"}\n'
    'print(f"slider update: {last[\'seconds\']:.2f} s")',
    # the regime map's controls: a new ε recomputes the map for it, and its table is the engine's own
    'm0 = map_last["n_updates"]\nMW["eps"].value = 0.5',
    'assert map_last["n_updates"] == m0 + 1 and map_last["eps"] == 0.5\n'
    'm = map_last["map"]\n'
    'assert set(m.comparisons.eps) == {0.5} and set(m.comparisons.arm) == {"common", "tuned"}\n'
    'direct = rm.regime_map(instances=(map_last["instance"],), delays=MAP_DELAYS, eta_factors=MAP_FACTORS, G=(8,), '
    'eps=(0.5,), tuned_arm=rm.TUNED_ESTIMATORS, quick=True)\n'
    'assert direct.computed == 0\n'
    'pd.testing.assert_frame_equal(map_last["boundary"], direct.boundary)',
]


def test_eps_G_notebook_executes_and_its_sliders_update(kernel_name, tmp_path):
    pytest.importorskip("ipywidgets")
    nb = jupytext.read(NB_DIR / "eps_G_tradeoff.py")
    nb.cells += [_slider_cell(src) for src in _SLIDER_CELLS]
    nb = _execute(nb, kernel_name, tmp_path)
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert _has_png(outputs), "the theory cells drew no figure"
    assert any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json") for o in outputs), "no widget shown"
    captured = _widget_outputs(nb)
    assert _has_png(captured), "the sliders' Output widget holds no figure"
    # issue 58: with widgets too, every default figure is a plain cell output (GitHub and nbconvert show no widget)
    for marker in ("update()  # headless", "measured = run_mc_cell()", "update_map()\nmap_last"):
        cell = next(c for c in nb.cells if c.cell_type == "code" and marker in c.source)
        assert _has_png(cell.outputs), f"the cell with {marker!r} has no plain image output"
    assert any("your delay d = 8" in o.get("text", "") for o in outputs), "the my-delay cell printed nothing"
    text = "".join(o.get("text", "") for o in captured)
    assert "update: exact curves" in text and "map: " in text
    assert (tmp_path / "results" / "cells").is_dir()  # the Monte Carlo cell went through the sweep engine


@pytest.mark.slow
@pytest.mark.parametrize("name, n_png", [("eps_G_tradeoff", 4), ("estimator_explorer", 2)])
def test_sliders_degrade_to_plain_figures_without_ipywidgets(name, n_png, kernel_name, tmp_path):
    """Without ipywidgets every cell still runs and the default state is drawn as a plain figure."""
    nb = jupytext.read(NB_DIR / f"{name}.py")
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys\nsys.modules['ipywidgets'] = None  # import fails"))
    nb = _execute(nb, kernel_name, tmp_path)
    outputs = _outputs(nb)
    assert not any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json") for o in outputs)
    # eps_G: the sliders' figure, two theory figures, Monte Carlo; explorer: the group, figure 1
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= n_png
    sliders = [c for c in nb.cells if c.cell_type == "code" and "update()  # headless" in c.source]
    assert len(sliders) == 1
    assert sum("image/png" in o.get("data", {}) for o in sliders[0].outputs) == 1, "the default state, drawn once"


def test_a_raising_cell_fails_the_run(kernel_name, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("raise ValueError('boom')")])
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="boom"):
        _execute(nb, kernel_name, tmp_path)


def _code_cells(name: str) -> list[str]:
    return [c.source for c in jupytext.read(NB_DIR / f"{name}.py").cells if c.cell_type == "code"]


def test_eps_G_delay_zero_draws_empty_panels_with_a_note(monkeypatch):
    """Issue 27 item 14: the delay slider offers d = 0, where every bias is exactly 0; drawing its log
    panels raised ``ValueError: Data cannot be log-scaled``. Now they are empty with a note. Runs the
    notebook's definitions in-process (no kernel): the cells up to the sliders, and the Monte Carlo
    cell's imports and functions only (its sweep is not run)."""
    import ast

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    monkeypatch.setenv("ASYNCGRPO_NOTEBOOK_QUICK", "1")
    ns = {"display": lambda *a, **k: None}
    cells = _code_cells("eps_G_tradeoff")
    for src in cells:
        if src.startswith("out = widgets.Output()"):
            break
        exec(src, ns)
    mc_cell = next(src for src in cells if "def draw_mc" in src)
    keep = [n for n in ast.parse(mc_cell).body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))
            or (isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "N_GROUPS")]
    exec(compile(ast.Module(keep, type_ignores=[]), "eps_G_tradeoff-mc", "exec"), ns)

    def notes(fig):
        return ["nothing > 0 to draw" in " ".join(t.get_text() for t in ax.texts) for ax in fig.axes]

    fig = ns["draw"](ns["exact_curves"](0.2, 8, 0, ns["DEFAULTS"]["estimators"]), 0.2, 8, 0)
    fig.canvas.draw()  # raised here
    assert notes(fig) == [True, False, True, True]  # (b) E‖ĝ‖² is positive at d = 0
    plt.close(fig)
    fig = ns["draw"](ns["exact_curves"](0.2, 8, 8, ns["DEFAULTS"]["estimators"]), 0.2, 8, 8)
    fig.canvas.draw()
    assert not any(notes(fig))
    plt.close(fig)

    rows = [dict(estimator=e, G=g, quantity=q, value=0.0 if q == "bias_functional" else 1e-3, se=0.0,
                 exact=0.0, bound=0.0) for e in ("tis", "gmc") for g in (2, 4) for q in ("weighting_bias", "bias_functional")]
    fig = ns["draw_mc"](pd.DataFrame(rows), {"eps": 0.2, "d": 0})
    fig.canvas.draw()
    assert notes(fig) == [False, True]
    plt.close(fig)
