"""No import runs upward (issue 38, the house): the project's packages form layers, each importing only below.

    layer 0  asyncgrpo              the estimators, their checks and integrations (the core)
    layer 1  sweep, theory          the cell engine; the symbolic and numeric theory
    layer 2  simulate               instances, Monte Carlo, training, protocol, LM harness
    layer 3  figures, bench         what reads results and measures the code
    layer 4  notebooks              tours over all of the above

Every ``import``/``from … import`` of every file (at module level or inside a function: a lazy import runs
upward all the same) and every ``importlib.import_module("…")``/``__import__("…")`` with a literal name is
an arrow; an arrow into a package of the same layer or a higher one is a defect (same layer: two packages
that need each other are one concept, or a third belongs below both). ``mutation/`` is tooling that imports
none of them. tests/test_core_imports.py checks the stronger run-time property for the core, and
tests/test_import_circles.py that no module-level circle exists inside any package either (issue 60).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"asyncgrpo": 0, "sweep": 1, "theory": 1, "simulate": 2, "figures": 3, "bench": 3, "notebooks": 4}
#: Arrows known to run upward, each with the issue that removes it (empty: none left).
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()


def imported_names(tree: ast.AST):
    """``(lineno, module name)`` of every absolute import and literal ``import_module``/``__import__`` in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                yield node.lineno, node.args[0].value


def arrows(root: Path = ROOT):
    """``(file, line, from package, to package)`` for every import between two layered packages."""
    for pkg in LAYERS:
        for f in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" in f.parts:
                continue
            for line, name in imported_names(ast.parse(f.read_text(encoding="utf-8"), str(f))):
                top = name.split(".")[0]
                if top in LAYERS and top != pkg:
                    yield f.relative_to(root).as_posix(), line, pkg, top


def upward(root: Path = ROOT):
    return [f"{f}:{line}: {a} (layer {LAYERS[a]}) imports {b} (layer {LAYERS[b]})"
            for f, line, a, b in arrows(root) if LAYERS[b] >= LAYERS[a] and (f, b) not in KNOWN_UPWARD]


def test_every_layered_package_exists():
    assert all((ROOT / p).is_dir() for p in LAYERS), [p for p in LAYERS if not (ROOT / p).is_dir()]


def test_no_import_runs_upward_or_sideways():
    bad = upward()
    assert not bad, "\n".join(bad)


def test_the_graph_is_read_the_check_can_fail(tmp_path):
    """The real tree has arrows (so the walk reads it), and a planted upward import, a lazy one and a literal
    ``import_module`` are each caught (seen failing: the planted tree gives exactly these three)."""
    assert sum(1 for a in arrows() if a[2:] == ("simulate", "asyncgrpo")) > 10
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir()
    (tmp_path / "asyncgrpo" / "a.py").write_text("import numpy\nfrom asyncgrpo import b\n\n\ndef g():\n    import simulate.delays\n")
    (tmp_path / "sweep" / "s.py").write_text("def f():\n    from theory import bounds\n")
    (tmp_path / "simulate" / "m.py").write_text("import importlib\nx = importlib.import_module('bench.bench_llm')\n")
    (tmp_path / "figures" / "ok.py").write_text("from simulate import delays\nimport asyncgrpo\n")
    (tmp_path / "theory" / "t.py").write_text("from asyncgrpo.estimators import registry\n")
    got = upward(tmp_path)
    assert len(got) == 3, got
    assert any("sweep/s.py:2: sweep (layer 1) imports theory" in g for g in got)
    assert any("simulate/m.py:2: simulate (layer 2) imports bench" in g for g in got)
    assert any("asyncgrpo/a.py:6: asyncgrpo (layer 0) imports simulate" in g for g in got)


@pytest.mark.parametrize("path", ["simulate/llm/gpu_check.py"])
def test_the_once_known_upward_import_is_gone(path):
    """simulate/llm/gpu_check.py imported bench/bench_llm.py (issue 38); the shared measurement now lives below."""
    assert not any(f == path and b == "bench" for f, _, _, b in arrows())
