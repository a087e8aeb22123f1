"""Mutation testing of the core with cosmic-ray: ``make mutate`` or ``python mutation/run.py [FILE ...]``.

For each source file in :data:`TARGETS` this copies the repository (tracked and untracked, not
ignored files) into a scratch folder, lets cosmic-ray mutate that copy one small edit at a time
(flipped comparison, swapped arithmetic operator, changed constant, negated condition, removed
loop, ...) and runs only the tests related to that file against each mutant. A mutant is *killed*
when the tests fail or time out, *survived* when they pass. Mutants listed in
``mutation/equivalent.txt`` (no behavioural change, one line of reason each) are not run and are
counted apart. The score is killed / (killed + survived), i.e. the share of non-equivalent
mutants killed.

Why cosmic-ray and not mutmut 3: mutmut 3 does not mutate decorated functions, so every
``@njit`` kernel of ``asyncgrpo/estimators/kernels.py`` and every ``@property`` of
``simulate/delays.py`` would produce no mutant at all. cosmic-ray edits the source text, so
decorators do not matter. It edits files in place, hence the scratch copy: the working tree is
never touched. ``NUMBA_DISABLE_JIT=1`` is set for the test runs: the kernels then run as plain
Python with the same formulas, and each mutant costs no recompilation (with the JIT on, every
mutant of kernels.py recompiles every kernel its tests call). The registry asks every kernel for its
``py_func``, which a JIT-less ``njit`` does not give: a ``sitecustomize.py`` written into the scratch copy
(:data:`NO_JIT_SHIM`) gives each such function itself as ``py_func``. Files without a kernel whose tests
train (:data:`JIT_ON`) keep the JIT instead: their mutants never touch a kernel, so the cache the baseline
fills stays valid (``asyncgrpo.numba_cache`` keys it on the files that hold ``njit``).

Usage::

    python mutation/run.py                      # every target, one after another
    python mutation/run.py simulate/delays.py   # one target
    python mutation/run.py --report             # re-print the table of the last runs
    python mutation/run.py --count              # mutants per file, nothing run
    python mutation/run.py --sample 12 --seed 0 simulate/training/overlap.py   # 12 mutants, chosen by the seed

Results stay in the scratch folder (``--workdir``, default ``$TMPDIR/asyncgrpo-mutation``):
one cosmic-ray session per file (``<file>.sqlite``) and ``<file>.survivors.txt`` with the diff of
each surviving mutant.
"""
from __future__ import annotations

import argparse
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = Path(__file__).resolve().parent / "equivalent.txt"

from targets import TARGETS  # noqa: E402  (mutation/targets.py: the file → tests table, shared with mutmut_run)

#: Targets run with the JIT on (module docstring): no kernel in the file, and tests that train.
JIT_ON = {"simulate/training/overlap.py", "simulate/protocol/c9.py",
          # issue 55: their unit tests draw family instances (a warm start by exact-J gradient descent, kernels)
          "simulate/protocol/families.py", "simulate/protocol/spec.py",
          # the ladder's exact J runs in Numba kernels; rungs.py and ladder.py hold none
          "simulate/bridge/rungs.py", "simulate/bridge/ladder.py"}
#: ``sitecustomize.py`` of a JIT-less scratch copy: ``njit`` then returns the plain function, which has no
#: ``py_func`` for the registry to check and read; give it itself as one.
NO_JIT_SHIM = '''"""Written by mutation/run.py: under NUMBA_DISABLE_JIT, njit-decorated functions get py_func = themselves."""
import os

if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
    import numba

    def _mark(f):
        f.py_func = getattr(f, "py_func", f)
        return f

    def _wrap(orig):
        def decorator(*args, **kwargs):
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return _mark(orig(args[0]))
            inner = orig(*args, **kwargs)
            return lambda f: _mark(inner(f))
        return decorator

    numba.njit, numba.jit = _wrap(numba.njit), _wrap(numba.jit)
'''
NOT_SAMPLED = "not sampled"  # output of a mutant left out by --sample (counted as "not run")

#: Operators left out, with the reason (regular expressions matched against cosmic-ray's names).
#: What stays is the classic set (as mutmut's): a comparison's boundary moved (``<`` ↔ ``<=``) or
#: negated (``<`` ↔ ``>=``, ``==`` ↔ ``!=``), ``+`` ↔ ``-``, ``*`` ↔ ``/``, ``**`` → ``*``, a number
#: changed by ±1, a condition negated (``not`` added or removed), ``and`` ↔ ``or``, ``True`` ↔
#: ``False``, a loop that runs zero times, a caught exception type changed, ``-x`` → ``+x``.
EXCLUDED_OPERATORS = [
    # arithmetic replaced by an operator of another family (bit shifts, bitwise, //, %, or + by *):
    # the core has no integer bit arithmetic, and these are killed whenever the family swap is.
    r"core/ReplaceBinaryOperator_\w+_(FloorDiv|Mod|RShift|LShift|BitOr|BitAnd|BitXor)$",
    r"core/ReplaceBinaryOperator_(FloorDiv|Mod|RShift|LShift|BitOr|BitAnd|BitXor)_\w+$",
    r"core/ReplaceBinaryOperator_(Add|Sub)_(Mul|Div|Pow)$",
    r"core/ReplaceBinaryOperator_(Mul|Div)_(Add|Sub|Pow)$",
    r"core/ReplaceBinaryOperator_Pow_(Add|Sub|Div)$",
    # comparisons: keep boundary shift and negation; drop the other four targets of each operator
    # (`a < b` -> `a == b`, `a is b`, ...), which a test killing the two kept ones almost always kills.
    r"core/ReplaceComparisonOperator_(Lt|GtE)_(Eq|NotEq|Is|IsNot)$",
    r"core/ReplaceComparisonOperator_(Gt|LtE)_(Eq|NotEq|Is|IsNot)$",
    r"core/ReplaceComparisonOperator_Lt_Gt$", r"core/ReplaceComparisonOperator_Gt_Lt$",
    r"core/ReplaceComparisonOperator_LtE_GtE$", r"core/ReplaceComparisonOperator_GtE_LtE$",
    r"core/ReplaceComparisonOperator_(Eq|NotEq)_(Lt|LtE|Gt|GtE|Is|IsNot)$",
    r"core/ReplaceComparisonOperator_(Is|IsNot)_(Eq|NotEq|Lt|LtE|Gt|GtE)$",
    # bitwise invert (TypeError on floats) and `-x` -> `not x`: trivially killed.
    r"core/ReplaceUnaryOperator_\w*Invert\w*$",
    r"core/ReplaceUnaryOperator_(UAdd|USub)_Not$",
    # removing @njit gives the same function run by Python (equivalent by construction); removing
    # @dataclass/@property breaks every caller at once.
    r"core/RemoveDecorator$",
    # replace/insert a variable by another in scope: combinatorial count, mostly type errors.
    r"core/VariableReplacer$",
    r"core/VariableInserter$",
]


def _scratch(workdir: Path, tag: str, source: Path | None = None) -> Path:
    """A fresh copy of the repository's tracked and untracked (not ignored) files, or of ``source``
    (a plain folder made by ``--snapshot``) when given."""
    src = workdir / f"src-{tag}"
    if src.exists():
        shutil.rmtree(src)
    if source is not None:
        shutil.copytree(source, src)
        return src
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        p = ROOT / rel
        if p.is_file() and not rel.startswith(("mutation/", "results/", "notebooks/")):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, src / rel)
    return src


def _equivalents() -> dict[tuple, str]:
    """``(path, line, col, operator, index) -> reason`` from equivalent.txt.

    Line format ``path:line:col:operator[#index] | reason``. ``index`` tells apart the mutants one
    operator makes at the same place (``NumberReplacer`` makes ``n + 1`` then ``n − 1``: ``#0``,
    ``#1``); without it the entry covers all of them.
    """
    out = {}
    for raw in EQUIVALENT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, reason = line.partition("|")
        path, ln, col, op = key.strip().split(":", 3)
        op, _, idx = op.strip().partition("#")
        if not reason.strip():
            raise ValueError(f"equivalent.txt: entry without a reason: {raw!r}")
        out[(path, int(ln), int(col), op, int(idx) if idx else None)] = reason.strip()
    return out


def _auto_equivalents(target: str, root: Path = ROOT) -> dict[tuple, str]:
    """``cache=True`` → ``False`` in an ``@njit(...)`` decorator of ``target``: equivalent by construction (whether
    Numba keeps compiled code on disk is not behaviour), keyed as in equivalent.txt."""
    out = {}
    for n, line in enumerate((root / target).read_text().splitlines(), 1):
        if line.lstrip().startswith(("@njit(", "@numba.njit(")) and "cache=True" in line:
            col = line.index("cache=True") + len("cache=")
            out[(target, n, col, "core/ReplaceTrueWithFalse", None)] = "njit cache flag: on-disk caching, not behaviour"
    return out


def _keyed(items, target: str):
    """``(item, result, (path, line, col, operator, index))`` for each work item, index as in equivalent.txt."""
    seen: dict[tuple, int] = {}
    out = []
    for item, res in sorted(items, key=lambda ir: (ir[0].mutations[0].operator_name, ir[0].mutations[0].occurrence)):
        m = item.mutations[0]
        place = (target, m.start_pos[0], m.start_pos[1], m.operator_name)
        idx = seen.get(place, 0)
        seen[place] = idx + 1
        out.append((item, res, (*place, idx)))
    return out


def _reason(equiv: dict, key: tuple) -> str | None:
    return equiv.get(key, equiv.get((*key[:4], None)))


def _expand(tests: list[str], src: Path) -> list[str]:
    """``tests`` with each ``*`` pattern replaced by the files it matches in ``src`` (none: dropped)."""
    out = []
    for t in tests:
        out += sorted(str(p.relative_to(src)) for p in src.glob(t)) if "*" in t and "::" not in t else [t]
    return out


def _config(target: str, tests: list[str], timeout: float) -> str:
    cmd = f"{sys.executable} -m pytest -x -q -p no:cacheprovider -o addopts= -m 'not slow' " + " ".join(tests)
    excl = ", ".join(f"'{e}'" for e in EXCLUDED_OPERATORS)
    return (f"[cosmic-ray]\nmodule-path = \"{target}\"\ntimeout = {timeout}\nexcluded-modules = []\n"
            f"test-command = \"{cmd}\"\n[cosmic-ray.distributor]\nname = \"local\"\n"
            f"[cosmic-ray.filters.operators-filter]\nexclude-operators = [{excl}]\n")


def _tag(target: str) -> str:
    return target.replace("/", "__")


def _items(db_path: Path):
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(db_path), WorkDB.Mode.open) as db:
        results = dict(db.results)
        return [(item, results.get(item.job_id)) for item in db.work_items]


def _mark_equivalent(db_path: Path, target: str, equiv: dict) -> int:
    """Mark the listed equivalent mutants as skipped before the run (they are not executed)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    n = 0
    keyed = _keyed(_items(db_path), target)
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for item, res, key in keyed:
            why = _reason(equiv, key)
            if res is None and why is not None:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="equivalent: " + why))
                n += 1
    return n


def _env(src: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)  # the mutated copy, not the editable install of the working tree
    if (src / "sitecustomize.py").exists():  # written for a JIT-less target (run_target)
        env["NUMBA_DISABLE_JIT"] = "1"
    else:
        env.pop("NUMBA_DISABLE_JIT", None)
    env["NUMBA_CACHE_DIR"] = str(src / ".numba_cache")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _cr(args: list[str], src: Path, **kw):
    bindir = Path(sys.executable).parent
    return subprocess.run([str(bindir / args[0]), *args[1:]], cwd=src, env=_env(src), **kw)


def _sample(db_path: Path, target: str, equiv: dict, n: int, seed: int) -> tuple[int, int]:
    """Keep ``n`` of the pending non-equivalent mutants, drawn by ``random.Random(f"{seed}:{target}")`` from
    their keys in sorted order (so the draw depends on the seed and the file only, not on cosmic-ray's job
    ids nor on which other files run); mark the rest skipped as not sampled. Returns ``(kept, pending)``."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    pool = sorted(((key, item) for item, res, key in _keyed(_items(db_path), target)
                   if res is None and _reason(equiv, key) is None), key=lambda ki: ki[0])
    keep = set(random.Random(f"{seed}:{target}").sample(range(len(pool)), min(n, len(pool))))
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for j, (_, item) in enumerate(pool):
            if j not in keep:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED,
                                                      output=f"{NOT_SAMPLED}: --sample {n} --seed {seed}"))
    return len(keep), len(pool)


def _reset_survivors(db: Path, target: str, equiv: dict) -> int:
    """Forget the outcome of the surviving mutants (and of equivalents no longer listed) so that
    ``exec`` runs them again. Killed mutants stay killed: tests were only added since."""
    import sqlite3

    again = []
    for item, res, key in _keyed(_items(db), target):
        listed = _reason(equiv, key) is not None
        if res is not None and (res.test_outcome == "survived" or
                                ((res.output or "").startswith("equivalent:") and not listed)):
            again.append(item.job_id)
    with sqlite3.connect(db) as con:
        con.executemany("DELETE FROM work_results WHERE job_id = ?", [(j,) for j in again])
    return len(again)


def run_target(target: str, workdir: Path, timeout: float, count_only: bool = False,
               rerun_survivors: bool = False, source: Path | None = None, max_minutes: float | None = None,
               sample: int | None = None, seed: int = 0) -> None:
    tag = _tag(target)
    src = _scratch(workdir, tag, source)
    if target not in JIT_ON:
        (src / "sitecustomize.py").write_text(NO_JIT_SHIM)
    cfg = workdir / f"{tag}.toml"
    cfg.write_text(_config(target, _expand(TARGETS[target], src), timeout))
    db = workdir / f"{tag}.sqlite"
    equiv = {**_equivalents(), **_auto_equivalents(target, src)}
    if rerun_survivors and db.exists():
        print(f"{target}: running {_reset_survivors(db, target, equiv)} earlier survivors again", flush=True)
    else:
        db.unlink(missing_ok=True)
        _cr(["cosmic-ray", "init", str(cfg), str(db)], src, check=True)
        _cr(["cr-filter-operators", str(db), str(cfg)], src, check=True, capture_output=True)
    n_eq = _mark_equivalent(db, target, equiv)
    if sample is not None and not rerun_survivors:
        kept, pool = _sample(db, target, equiv, sample, seed)
        print(f"{target}: sampled {kept} of {pool} mutants (--sample {sample} --seed {seed})", flush=True)
    pending = sum(1 for _, r in _items(db) if r is None)
    print(f"{target}: {pending} mutants to run, {n_eq} listed as equivalent", flush=True)
    if count_only:
        return
    if target in JIT_ON:  # fill the Numba cache once (a cold compile takes minutes), outside the per-mutant timeout
        test_cmd = tomllib.loads(cfg.read_text())["cosmic-ray"]["test-command"]
        subprocess.run(shlex.split(test_cmd), cwd=src, env=_env(src), capture_output=True)
    base = _cr(["cosmic-ray", "baseline", str(cfg)], src, capture_output=True, text=True)
    if base.returncode != 0:
        sys.exit(f"{target}: the related tests fail on unmutated code; fix that first\n{base.stdout}{base.stderr}")
    t0 = time.time()
    try:
        # cosmic-ray takes the pending mutants in random order, so a run cut short by
        # --max-minutes has scored a random sample; the rest shows as "not run".
        _cr(["cosmic-ray", "exec", str(cfg), str(db)], src, check=True,
            timeout=None if max_minutes is None else 60 * max_minutes)
    except subprocess.TimeoutExpired:
        print(f"{target}: stopped after {max_minutes} min (--max-minutes)", flush=True)
    print(f"{target}: done in {time.time() - t0:.0f} s", flush=True)
    _write_survivors(target, workdir)


def _write_survivors(target: str, workdir: Path) -> None:
    lines = []
    for _, res, key in _keyed(_items(workdir / f"{_tag(target)}.sqlite"), target):
        if res is not None and res.test_outcome == "survived":
            lines.append(f"## {':'.join(map(str, key[:4]))}#{key[4]}\n{res.diff}\n")
    (workdir / f"{_tag(target)}.survivors.txt").write_text("\n".join(lines))


def score(target: str, workdir: Path) -> tuple[int, int, int, int] | None:
    """``(killed, survived, equivalent, not run)`` of the last session of ``target``.

    A mutant listed in equivalent.txt counts as equivalent whether it was skipped or (listed after
    its run) survived; one that was killed is reported, as its entry is then wrong.
    """
    db = workdir / f"{_tag(target)}.sqlite"
    if not db.exists():
        return None
    equiv = {**_equivalents(), **_auto_equivalents(target)}
    k = s = e = pending = 0
    for _, res, key in _keyed(_items(db), target):
        listed = _reason(equiv, key) is not None
        if res is None:
            pending += 1
        elif res.worker_outcome == "skipped":
            e += (res.output or "").startswith("equivalent:")
            pending += (res.output or "").startswith(NOT_SAMPLED)
        elif res.test_outcome == "survived":
            e += listed
            s += not listed
        else:  # killed, incompetent (the mutant cannot even be imported) or timed out
            k += 1
            if listed:
                print(f"warning: {':'.join(map(str, key[:4]))}#{key[4]} is listed as equivalent but was killed")
    return k, s, e, pending


def report(workdir: Path, targets) -> int:
    print(f"\n{'file':40s} {'killed':>7s} {'survived':>9s} {'equiv.':>7s} {'not run':>8s} {'score':>7s}")
    worst = 100.0
    for t in targets:
        sc = score(t, workdir)
        if sc is None:
            print(f"{t:40s} {'(not run)':>42s}")
            continue
        k, s, e, p = sc
        if k + s == 0:
            print(f"{t:40s} {k:7d} {s:9d} {e:7d} {p:8d} {'—':>7s}")
            continue
        pct = 100.0 * k / (k + s)
        worst = min(worst, pct)
        print(f"{t:40s} {k:7d} {s:9d} {e:7d} {p:8d} {pct:6.1f}%")
    print("score = killed / (killed + survived): the share of non-equivalent mutants killed;"
          f" survivors' diffs: {workdir}/<file>.survivors.txt")
    return 0 if worst >= 95.0 else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help=f"targets (default: all of {', '.join(TARGETS)})")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "asyncgrpo-mutation")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant before it counts as killed")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="stop each file's run after this long (the mutants not reached count as not run)")
    ap.add_argument("--report", action="store_true", help="only print the table of the last runs")
    ap.add_argument("--count", action="store_true", help="only count the mutants of each file")
    ap.add_argument("--rerun-survivors", action="store_true",
                    help="keep the last session of each file and run only its survivors again (after adding tests)")
    ap.add_argument("--sample", type=int, metavar="N", default=None,
                    help="run only N mutants per file, drawn by --seed from the non-equivalent ones (the rest: not run)")
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample's draw (default 0)")
    ap.add_argument("--snapshot", type=Path, metavar="DIR",
                    help="only copy the tree as it is now into DIR (to score a fixed state of the tests later)")
    ap.add_argument("--source", type=Path, metavar="DIR", help="mutate a copy of DIR (from --snapshot), not of the tree")
    args = ap.parse_args(argv)
    if args.sample is not None and args.sample < 1:
        ap.error(f"--sample must be a positive number of mutants per file, got {args.sample}")
    if args.snapshot:
        shutil.copytree(_scratch(args.snapshot.parent, "snapshot-tmp"), args.snapshot, dirs_exist_ok=False)
        shutil.rmtree(args.snapshot.parent / "src-snapshot-tmp")
        return 0
    targets = args.files or list(TARGETS)
    for t in targets:
        if t not in TARGETS:
            ap.error(f"unknown target {t!r}; choose from {', '.join(TARGETS)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    if not args.report:
        for t in targets:
            run_target(t, args.workdir, args.timeout, count_only=args.count, rerun_survivors=args.rerun_survivors,
                       source=args.source, max_minutes=args.max_minutes, sample=args.sample, seed=args.seed)
    if args.count:
        return 0
    return report(args.workdir, targets)


if __name__ == "__main__":
    sys.exit(main())
