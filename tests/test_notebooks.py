"""The notebooks: the jupytext pair is in sync, and each executes top to bottom in quick mode.

The kernel is a throw-away kernelspec pointing at *this* interpreter (``sys.executable``): the
default ``python3`` spec may say plain ``python``, which on CI can be an interpreter without the
project installed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ("eps_G_tradeoff", "estimator_explorer")


def _sources(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_pair_in_sync(name):
    py = jupytext.read(NB_DIR / f"{name}.py")
    ipynb = jupytext.read(NB_DIR / f"{name}.ipynb")
    assert _sources(py) == _sources(ipynb), f"run: jupytext --sync notebooks/{name}.py"
    assert "py:percent" in py.metadata["jupytext"]["formats"]


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


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes_in_quick_mode(name, kernel_name, tmp_path):
    nb = jupytext.read(NB_DIR / f"{name}.py")
    # cwd = tmp_path: the notebooks' sweep cells go to tmp_path/results/cells, not the repository.
    client = nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout=300,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the notebook drew no figure"
    assert (tmp_path / "results" / "cells").is_dir()
