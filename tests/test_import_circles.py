"""No import circle of any length in the project's packages (issue 60): the module graph is acyclic.

Every module of ``asyncgrpo``, ``sweep``, ``theory``, ``simulate``, ``figures``, ``bench``, ``mutation`` and
``notebooks`` is a node; every import in it (module level or inside a function: a lazy import is still a
dependency, only deferred) is an arrow to the most specific project module it names (``from a.b import c``
goes to ``a.b.c`` when that is a module, else to ``a.b``; relative imports resolved), and, as Python runs them
first, to that module's packages ``a.b`` and ``a`` (their ``__init__``), except the importer's own packages,
which are already running when it runs. A package's arrows to its own submodules count (its ``__init__`` runs
them). A circle is a strongly connected component of more than one module (Tarjan), reported with one cycle
through it. tests/test_import_graph.py keeps the packages themselves in layers.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("asyncgrpo", "sweep", "theory", "simulate", "figures", "bench", "mutation", "notebooks")
#: Circles known to exist, each named by modules that all lie on it (a component holding them all is this circle),
#: with why it is still there (empty: none left). An entry must name a circle that exists (test below), so it goes
#: when the circle is broken.
KNOWN_CIRCLES: dict[frozenset[str], str] = {
}


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file of :data:`PACKAGES` under ``root``."""
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" not in f.parts:
                out[".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = f
    return out


def _targets(node: ast.AST, here: str, is_pkg: bool, mods) -> set[str]:
    """The project modules an import node reaches (``from a import b``: ``a.b`` if that is a module, else ``a``)."""
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: a module's own name (not a package's) and level − 1 packages more go
            parts = here.split(".") if is_pkg else here.split(".")[:-1]
            base = ".".join(parts[:len(parts) - (node.level - 1)] + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        f = node.func
        if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in ("import_module", "__import__"):
            names = [node.args[0].value]
    return {m for m in map(lambda n: _resolve(n, mods), names) if m is not None}


def _resolve(name: str, mods) -> str | None:
    """The longest prefix of ``name`` that is a project module."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in mods:
            return ".".join(parts[:k])
    return None


def _runs(importer: str, target: str, mods) -> set[str]:
    """What importing ``target`` from ``importer`` runs: ``target`` and its packages, less the importer's own
    packages (already running) and the importer itself."""
    parts = target.split(".")
    ran = {".".join(parts[:k]) for k in range(1, len(parts) + 1)} & set(mods)
    return {m for m in ran if not (importer == m or importer.startswith(m + "."))}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the project's packages (module docstring)."""
    files = module_files(root)
    graph = {}
    for mod, f in files.items():
        tree = ast.parse(f.read_text(encoding="utf-8"), str(f))
        reached = set().union(*(_targets(n, mod, f.name == "__init__.py", files) for n in ast.walk(tree)))
        graph[mod] = set().union(*(_runs(mod, m, files) for m in reached))
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[m0, m1, …, m0]``) through each strongly connected component of more than one module."""
    return [_one_cycle(graph, comp) for comp in components(graph)]


def components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan, recursive: the graph is a few hundred modules deep at most
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(set(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def _one_cycle(graph, comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first inside the component)."""
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in component {sorted(comp)}")


def test_every_package_is_read():
    graph = import_graph()
    assert all(any(m == p or m.startswith(p + ".") for m in graph) for p in PACKAGES), PACKAGES
    assert len(graph) > 200 and sum(map(len, graph.values())) > 500, (len(graph), sum(map(len, graph.values())))


def test_no_import_circle_anywhere():
    graph = import_graph()
    found = [_one_cycle(graph, c) for c in components(graph) if not any(k <= c for k in KNOWN_CIRCLES)]
    assert found == [], "import circles:\n" + "\n".join(" → ".join(c) for c in found)


def test_every_known_circle_still_exists():
    """A known circle that is gone must leave :data:`KNOWN_CIRCLES` (so the list only shrinks; empty now)."""
    comps = components(import_graph()) if KNOWN_CIRCLES else []
    gone = [why for members, why in KNOWN_CIRCLES.items() if not any(members <= c for c in comps)]
    assert not gone, f"gone, remove them: {gone}"


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


@pytest.mark.parametrize("files, expected", [
    # the circle of issue 60, as it was: a lazy import closes a circle of three across two packages
    ({"simulate/bridge/__init__.py": "", "simulate/protocol/__init__.py": "",
      "simulate/bridge/ladder.py": "from simulate.bridge.rungs import answers\n",
      "simulate/bridge/rungs.py": "from simulate.protocol.instances import TrainingInstance\n",
      "simulate/protocol/instances.py": "def f():\n    from simulate.bridge.ladder import get_rung\n"},
     ["simulate.bridge.ladder", "simulate.bridge.rungs", "simulate.protocol.instances", "simulate.bridge.ladder"]),
    # through a package's __init__ (the first fix of issue 60 left this one): rungs imports a submodule of
    # simulate.protocol, whose __init__ loads the instances, which load the ladder
    ({"simulate/bridge/__init__.py": "",
      "simulate/protocol/__init__.py": "from simulate.protocol.instances import INSTANCES\n",
      "simulate/bridge/ladder.py": "from simulate.bridge.rungs import answers\n",
      "simulate/bridge/rungs.py": "from simulate.protocol.training_instance import TrainingInstance\n",
      "simulate/protocol/training_instance.py": "x = 1\n",
      "simulate/protocol/instances.py": "def f():\n    from simulate.bridge.ladder import get_rung\n"},
     ["simulate.bridge.ladder", "simulate.bridge.rungs", "simulate.protocol", "simulate.protocol.instances",
      "simulate.bridge.ladder"]),
    # relative imports, a module named by ``from pkg import module``, and a literal import_module
    ({"theory/a.py": "from . import b\n", "theory/b.py": "from .c import x\n",
      "theory/c.py": "import importlib\nimportlib.import_module('theory.a')\n"},
     ["theory.a", "theory.b", "theory.c", "theory.a"]),
    # across layers: the layer test sees figures → simulate, not the way back inside bench
    ({"bench/x.py": "import bench.y\n", "bench/y.py": "from bench import x\n"}, ["bench.x", "bench.y", "bench.x"]),
])
def test_a_planted_circle_is_caught(tmp_path, files, expected):
    """Seen failing: each planted tree gives exactly its circle (and the real tree, before issue 60's fix, gave
    the ladder's: simulate.bridge.ladder → simulate.bridge.rungs → simulate.protocol.instances → the ladder)."""
    assert circles(import_graph(_plant(tmp_path, files))) == [expected]


def test_a_tree_without_circles_passes(tmp_path):
    """A package importing its own submodules, a submodule importing its package, and a chain: no circle."""
    root = _plant(tmp_path, {"simulate/p/__init__.py": "from simulate.p.m import f\n",
                             "simulate/p/m.py": "from simulate.p import g\nimport simulate.q\n",
                             "simulate/q.py": "import asyncgrpo\nfrom theory import t\n", "theory/t.py": "x = 1\n"})
    assert circles(import_graph(root)) == []
