"""An independent mutation sample (issue 55): a mutator of its own, on Python's ``ast``, not cosmic-ray's or mutmut's.

Operators: a comparison flipped (``<`` ↔ ``>=``, ``<=`` ↔ ``>``, ``==`` ↔ ``!=``, ``in`` ↔ ``not in``, ``is`` ↔
``is not``), ``+`` ↔ ``-`` and ``*`` ↔ ``/``, a number changed (``0`` → ``1``, ``n`` → ``n + 1``, ``x.y`` → ``2·x.y``),
a ``not`` removed, ``and`` ↔ ``or``, ``return x`` → ``return None``, an integer index or ``range`` bound off by one,
``True`` ↔ ``False`` and ``a if c else b`` → ``b if c else a``. For each file, ``N`` mutants are drawn by
``random.Random(f"{seed}:{file}")`` from all its sites (docstrings and ``__all__`` skipped) and run, one at a time, against
the tests of :data:`targets.TARGETS` in a scratch copy (``run.py``'s), never in the working tree: killed if the tests fail
or time out. Survivors are printed with their diff, to be judged equivalent or not by hand.

Usage::

    python mutation/independent_sample.py [-n 10] [--seed 0] FILE [FILE ...]
"""
from __future__ import annotations

import argparse
import ast
import copy
import difflib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as cr  # noqa: E402  (the scratch copy, the JIT shim, TARGETS)

CMP_FLIP = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
BIN_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


def _docstrings(tree) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets):
            out |= {id(x) for x in ast.walk(n)}
    return out


def sites(tree) -> list[tuple[str, int]]:
    """``(operator, index of the node in ast.walk order)`` of every mutable place."""
    skip = _docstrings(tree)
    out = []
    for i, n in enumerate(ast.walk(tree)):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Compare):
            out += [(f"cmp{j}", i) for j, op in enumerate(n.ops) if type(op) in CMP_FLIP]
        elif isinstance(n, ast.BinOp) and type(n.op) in BIN_SWAP:
            out.append(("binop", i))
        elif isinstance(n, ast.Constant) and type(n.value) in (int, float):
            out.append(("number", i))
        elif isinstance(n, ast.Constant) and type(n.value) is bool:
            out.append(("bool", i))
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            out.append(("not", i))
        elif isinstance(n, ast.BoolOp):
            out.append(("boolop", i))
        elif isinstance(n, ast.Return) and n.value is not None and not (
                isinstance(n.value, ast.Constant) and n.value.value is None):
            out.append(("return", i))
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and type(n.slice.value) is int:
            out.append(("index", i))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "range" and n.args:
            out.append(("range", i))
        elif isinstance(n, ast.IfExp):
            out.append(("ifexp", i))
    return out


def mutate(tree, op: str, idx: int):
    """A mutated deep copy of ``tree`` (the node found at the same ``ast.walk`` index)."""
    t = copy.deepcopy(tree)
    n = list(ast.walk(t))[idx]
    if op.startswith("cmp"):
        j = int(op[3:])
        n.ops[j] = CMP_FLIP[type(n.ops[j])]()
    elif op == "binop":
        n.op = BIN_SWAP[type(n.op)]()
    elif op == "number":
        v = n.value
        n.value = (v + 1 if v != 0 else 1) if isinstance(v, int) else (v * 2.0 if v != 0 else 1.0)
    elif op == "bool":
        n.value = not n.value
    elif op == "not":  # remove the negation: replace the UnaryOp in its parent by its operand
        _replace(t, n, n.operand)
    elif op == "boolop":
        n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()
    elif op == "return":
        n.value = ast.Constant(None)
    elif op == "index":
        n.slice = ast.Constant(n.slice.value + 1 if n.slice.value >= 0 else n.slice.value - 1)
    elif op == "range":
        a = n.args[-1] if len(n.args) <= 2 else n.args[1]
        k = n.args.index(a)
        n.args[k] = ast.BinOp(a, ast.Sub(), ast.Constant(1))
    elif op == "ifexp":
        n.body, n.orelse = n.orelse, n.body
    return ast.fix_missing_locations(t)


def _replace(tree, old, new) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list):
                for k, v in enumerate(value):
                    if v is old:
                        value[k] = new
                        return


def run_file(target: str, n: int, seed: int, workdir: Path, timeout: float) -> list[dict]:
    tag = "independent-" + cr._tag(target)
    src = cr._scratch(workdir, tag)
    if target not in cr.JIT_ON:
        (src / "sitecustomize.py").write_text(cr.NO_JIT_SHIM)
    tests = cr._expand(cr.TARGETS[target], src)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-m", "not slow",
           *tests]
    path = src / target
    orig = path.read_text()
    tree = ast.parse(orig)
    base = ast.unparse(tree)
    all_sites = sites(tree)
    rng = random.Random(f"{seed}:{target}")
    rng.shuffle(all_sites)
    env = cr._env(src)
    path.write_text(base)  # the unparsed original must pass too (ast.unparse drops comments only)
    p = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        path.write_text(orig)
        sys.exit(f"{target}: the tests fail on the unparsed original\n{p.stdout[-3000:]}")
    results = []
    for op, idx in all_sites:
        if len(results) >= n:
            break
        code = ast.unparse(mutate(tree, op, idx))
        if code == base:
            continue
        diff = "".join(difflib.unified_diff(base.splitlines(True), code.splitlines(True), target, target, n=0))
        path.write_text(code)
        t0 = time.time()
        try:
            p = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=timeout)
            killed = p.returncode != 0
        except subprocess.TimeoutExpired:
            killed = True
        finally:
            path.write_text(base)
        results.append(dict(file=target, op=op, node=idx, killed=killed, seconds=round(time.time() - t0, 1), diff=diff))
        print(f"{target} {op}@{idx}: {'killed' if killed else 'SURVIVED'} ({time.time() - t0:.0f} s)", flush=True)
    path.write_text(orig)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-n", type=int, default=10, help="mutants per file (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "asyncgrpo-mutation")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    allres = []
    for f in args.files:
        if f not in cr.TARGETS:
            ap.error(f"unknown target {f!r}; choose from {', '.join(cr.TARGETS)}")
        allres += run_file(f, args.n, args.seed, args.workdir, args.timeout)
    out = args.workdir / f"independent-seed{args.seed}.json"
    out.write_text(json.dumps(allres, indent=1))
    print(f"\n{'file':48s} killed/run")
    for f in args.files:
        r = [x for x in allres if x["file"] == f]
        print(f"{f:48s} {sum(x['killed'] for x in r)}/{len(r)}")
    for x in allres:
        if not x["killed"]:
            print(f"\n## survived: {x['file']} {x['op']}@{x['node']}\n{x['diff']}")
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
