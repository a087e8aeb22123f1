"""The estimator core ``asyncgrpo`` imports nothing from the layers built on it (issue 15).

``asyncgrpo`` may depend on numpy/numba/torch (and optional integrations), never on ``simulate``,
``figures``, ``theory``, ``bench``, the sweep engine ``sweep`` or Dask. Checked in a fresh
interpreter so that modules imported by other tests cannot hide (or fake) an upward import.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UPPER = ("simulate", "figures", "theory", "bench", "sweep", "dask", "distributed")

_PROBE = """
import importlib, json, pkgutil, sys
upper = set(sys.argv[1].split(","))
import asyncgrpo
names = ["asyncgrpo"] + sorted(m.name for m in pkgutil.walk_packages(asyncgrpo.__path__, "asyncgrpo."))
seen, culprits = set(), {}
for name in names:
    importlib.import_module(name)
    loaded = {m for m in sys.modules if m.split(".")[0] in upper} - seen
    if loaded:
        culprits[name] = sorted(loaded)
    seen |= loaded
print(json.dumps({"modules": names, "upward": culprits}))
"""


def test_core_imports_no_upper_layer():
    res = subprocess.run([sys.executable, "-c", _PROBE, ",".join(UPPER)], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(out["modules"]) >= 5, out["modules"]  # the walk really found the core's modules
    assert out["upward"] == {}, f"core modules import upper layers: {out['upward']}"


def _top(name: str) -> str:
    return name.split(":")[0].split(".")[0]


def _upward_references(path: Path) -> list[str]:
    """References to upper layers anywhere in ``path``: imports (also inside functions, which the
    probe above cannot see until they run), module names passed to ``import_module``/``find_spec``
    or written as ``"pkg.module"``/``"pkg:function"``, and package lists naming ``asyncgrpo`` next to
    an upper layer (what the old engine hashed). A plain word such as a mode called ``"theory"`` is
    not a reference."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fn in {"import_module", "find_spec", "__import__"}:
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value:
            names = [node.value] if ("." in node.value or ":" in node.value) else []
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            names = words if "asyncgrpo" in words else []
        found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if _top(n) in UPPER]
    return found


def test_core_sources_name_no_upper_layer():
    files = sorted((REPO / "asyncgrpo").rglob("*.py"))
    assert files
    bad = [ref for p in files for ref in _upward_references(p)]
    assert bad == [], "\n".join(bad)


# Two modules importing each other (issue 27 item 17) is the shortest import circle: tests/test_import_circles.py
# checks that no circle of any length exists in any of the project's packages (issue 60).
