"""The second, independent operator set (issue 55): mutmut 3 on the files of :data:`run.TARGETS`.

cosmic-ray (``run.py``) and mutmut 3 are written independently and mutate differently: mutmut works on the
concrete syntax tree (libcst) and, besides flipped comparisons and swapped operators, replaces string constants
(``"x"`` → ``"XXxXX"``), ``None``-s an assignment's value, drops or ``None``-s a call's arguments one at a
time, swaps ``min``/``max``-like names and ``break``/``continue``, changes ``return x`` to ``return None`` and
edits every number and keyword argument. Decorated functions are not mutated (mutation/README.md); the decision
files have none that matter.

Like ``run.py`` it works in a scratch copy (``<workdir>/mutmut-<file>/``) of the tracked and untracked (not
ignored) files, never in the working tree. mutmut runs one child at a time (``--max-children 1``) and only the
tests of :data:`run.TARGETS` for the file (``pytest_add_cli_args_test_selection``); it first runs those tests
once to learn which test reaches which function, then forks one pytest per mutant from that warm process.

A mutant that survives and is listed in ``equivalent-mutmut.txt`` (``path | mutant name | the mutated line |
reason``) counts as equivalent; the mutated line is checked against the mutant's diff, so a stale entry (the
function changed and the numbering moved) stops matching and shows as a survivor.

Usage::

    python mutation/mutmut_run.py FILE [FILE ...]   # run every mutant of each file, print the table
    python mutation/mutmut_run.py --report FILE ...  # the table of the last runs
    python mutation/mutmut_run.py --rerun-survivors FILE ...  # after adding tests: the survivors only
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as cr  # noqa: E402  (mutation/run.py: TARGETS, the scratch copy)

EQUIVALENT = Path(__file__).resolve().parent / "equivalent-mutmut.txt"
#: Packages whose files mutmut copies into ``mutants/`` (the importable code); only the target is mutated.
PACKAGES = ("asyncgrpo", "simulate", "figures", "theory", "sweep")
#: mutmut's exit codes (``mutmut.stats.status_by_exit_code``) that mean the tests caught the mutant.
KILLED = {1, 3, -24, 24, 152, 255, 36, -11, -9}
NO_TESTS = {5, 33}


def _config(src: Path, target: str, tests: list[str]) -> None:
    sel = [t for t in tests if not t.startswith("--")]
    extra = [t for t in tests if t.startswith("--")]
    also = sorted(p.name for p in src.iterdir() if p.name not in PACKAGES and p.name != "mutants")
    block = (
        "\n[tool.mutmut]\n"
        f"source_paths = {json.dumps(list(PACKAGES))}\n"
        f"only_mutate = {json.dumps([target])}\n"
        f"also_copy = {json.dumps(also)}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(sel)}\n"
        f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-o', 'addopts=', '-m', 'not slow', '-q', *extra])}\n"
        "use_git_change_detection = false\ntrack_dependencies = false\n"
        "timeout_multiplier = 10.0\ntimeout_constant = 5.0\n"
    )
    pp = src / "pyproject.toml"
    text = pp.read_text()
    if "[tool.mutmut]" in text:
        text = text[: text.index("\n[tool.mutmut]")]
    pp.write_text(text + block)


def _env(src: Path, target: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # mutmut puts mutants/ first on sys.path itself
    env["NUMBA_CACHE_DIR"] = str(src / ".numba_cache")
    env.setdefault("OMP_NUM_THREADS", "1")
    # The JIT stays on: the registry refuses a JIT-less kernel at import (run.py's shim is a sitecustomize, which a
    # console script does not import from the scratch copy), and the mutated files hold no kernel, so the Numba
    # cache of the scratch copy, filled by the first (stats) run, stays valid for every mutant.
    env.pop("NUMBA_DISABLE_JIT", None)
    return env


def _tag(target: str) -> str:
    return "mutmut-" + cr._tag(target)


def _equivalents() -> dict[tuple[str, str], tuple[str, str]]:
    """``(path, mutant name) -> (mutated line, reason)`` from equivalent-mutmut.txt."""
    out = {}
    if not EQUIVALENT.exists():
        return out
    for raw in EQUIVALENT.read_text().splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in raw.split(" | ", 3)]
        if len(parts) != 4 or not parts[3]:
            raise ValueError(f"equivalent-mutmut.txt: need 'path | mutant | mutated line | reason', got {raw!r}")
        out[(parts[0], parts[1])] = (parts[2], parts[3])
    return out


def mutated_lines(diff: str) -> list[str]:
    """The ``+`` lines of a mutant's unified diff, stripped (the mutated code)."""
    return [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def run_target(target: str, workdir: Path) -> None:
    src = workdir / f"src-{_tag(target)}"
    if src.exists():
        shutil.rmtree(src)
    tmp = cr._scratch(workdir, _tag(target))  # tracked + untracked files, as run.py copies them
    assert tmp == src
    shutil.rmtree(src / "mutants", ignore_errors=True)
    _config(src, target, cr._expand(cr.TARGETS[target], src))
    t0 = time.time()
    p = subprocess.run([_bin("mutmut"), "run", "--max-children", "1"], cwd=src, env=_env(src, target),
                       capture_output=True, text=True)
    (workdir / f"{_tag(target)}.log").write_text(p.stdout[-20000:] + "\n--- stderr ---\n" + p.stderr[-20000:])
    print(f"{target}: mutmut done in {time.time() - t0:.0f} s (exit {p.returncode}; log {workdir}/{_tag(target)}.log)",
          flush=True)
    _write_survivors(target, workdir)


def rerun_survivors(target: str, workdir: Path) -> None:
    """Run the last run's survivors again (not the listed equivalents), against the working tree's tests copied into
    the scratch copy: mutmut collects the new tests' coverage, then runs only the named mutants."""
    src = workdir / f"src-{_tag(target)}"
    res = _results(target, workdir)
    if res is None:
        sys.exit(f"{target}: no earlier mutmut run in {workdir}")
    equiv = _equivalents()
    names = sorted(n for n, code in res.items() if code is not None and code not in KILLED and (target, n) not in equiv)
    print(f"{target}: running {len(names)} earlier survivors again", flush=True)
    if not names:
        return
    shutil.copytree(cr.ROOT / "tests", src / "tests", dirs_exist_ok=True)
    _config(src, target, cr._expand(cr.TARGETS[target], src))
    t0 = time.time()
    p = subprocess.run([_bin("mutmut"), "run", "--max-children", "1", *names], cwd=src, env=_env(src, target),
                       capture_output=True, text=True)
    (workdir / f"{_tag(target)}.rerun.log").write_text(p.stdout[-20000:] + "\n--- stderr ---\n" + p.stderr[-20000:])
    print(f"{target}: mutmut rerun done in {time.time() - t0:.0f} s (exit {p.returncode})", flush=True)
    _write_survivors(target, workdir)


def _results(target: str, workdir: Path) -> dict[str, int | None] | None:
    meta = workdir / f"src-{_tag(target)}" / "mutants" / (target + ".meta")
    if not meta.exists():
        return None
    return json.loads(meta.read_text())["exit_code_by_key"]


_DIFFS = """import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
names, path = json.loads(sys.argv[1]), sys.argv[2]
print(json.dumps({n: get_diff_for_mutant(n, path=path) for n in names}))
"""


def _diffs(target: str, workdir: Path, names) -> dict[str, str]:
    """The diffs of ``names`` (mutmut's ``show``), read in one process and cached beside the results."""
    cache = workdir / f"{_tag(target)}.diffs.json"
    have = json.loads(cache.read_text()) if cache.exists() else {}
    todo = sorted(set(names) - set(have))
    if todo:
        src = workdir / f"src-{_tag(target)}"
        p = subprocess.run([sys.executable, "-c", _DIFFS, json.dumps(todo), target], cwd=src, env=_env(src, target),
                           capture_output=True, text=True, check=True)
        have.update(json.loads(p.stdout.strip().splitlines()[-1]))
        cache.write_text(json.dumps(have))
    return {n: have[n] for n in names}


def _diff(target: str, workdir: Path, name: str) -> str:
    return _diffs(target, workdir, [name])[name]


def _write_survivors(target: str, workdir: Path) -> None:
    (workdir / f"{_tag(target)}.diffs.json").unlink(missing_ok=True)  # a new run: new mutants
    res = _results(target, workdir) or {}
    names = sorted(n for n, code in res.items() if code is not None and code not in KILLED)
    diffs = _diffs(target, workdir, names)
    out = [f"## {n} (exit {res[n]})\n{diffs[n]}\n" for n in names]
    (workdir / f"{_tag(target)}.survivors.txt").write_text("\n".join(out))


def score(target: str, workdir: Path) -> tuple[int, int, int, int] | None:
    """``(killed, survived, equivalent, not run)``; a listed mutant counts as equivalent only while its diff still
    shows the recorded mutated line."""
    res = _results(target, workdir)
    if res is None:
        return None
    equiv = _equivalents()
    k = s = e = pending = 0
    for name, code in res.items():
        if code is None:
            pending += 1
        elif code in KILLED:
            k += 1
            if (target, name) in equiv:
                print(f"warning: {name} is listed as equivalent but was killed")
        else:  # survived, no tests reached it, suspicious
            listed = equiv.get((target, name))
            if listed and listed[0] in mutated_lines(_diff(target, workdir, name)):
                e += 1
            else:
                if listed:
                    print(f"warning: {name}: listed as equivalent but its diff no longer shows {listed[0]!r}")
                s += 1
    return k, s, e, pending


def report(workdir: Path, targets) -> int:
    print(f"\nmutmut 3\n{'file':44s} {'killed':>7s} {'survived':>9s} {'equiv.':>7s} {'not run':>8s} {'score':>7s}")
    worst = 100.0
    for t in targets:
        sc = score(t, workdir)
        if sc is None:
            print(f"{t:44s} {'(not run)':>42s}")
            continue
        k, s, e, p = sc
        pct = 100.0 * k / (k + s) if k + s else float("nan")
        worst = min(worst, pct) if k + s else worst
        print(f"{t:44s} {k:7d} {s:9d} {e:7d} {p:8d} {pct:6.1f}%")
    print(f"score = killed / (killed + survived); survivors' diffs: {workdir}/mutmut-<file>.survivors.txt")
    return 0 if worst >= 95.0 else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="targets (keys of run.TARGETS; default: all of them)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "asyncgrpo-mutation")
    ap.add_argument("--report", action="store_true", help="only print the table of the last runs")
    ap.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sample", default=None, help=argparse.SUPPRESS)
    # run.py's other options (`make mutate FILES="--timeout 90 FILE"` passes them to both): accepted, not used
    for opt in ("--timeout", "--seed", "--max-minutes", "--snapshot", "--source"):
        ap.add_argument(opt, help=argparse.SUPPRESS)
    ap.add_argument("--rerun-survivors", action="store_true",
                    help="run only the last run's survivors again, with the working tree's tests")
    args = ap.parse_args(argv)
    files = args.files or list(cr.TARGETS)
    for t in files:
        if t not in cr.TARGETS:
            ap.error(f"unknown target {t!r}; choose from {', '.join(cr.TARGETS)}")
    if args.count or args.sample is not None:
        print("mutmut: runs every mutant of a file (no --count, no --sample); left out", flush=True)
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    if not args.report:
        for t in files:
            rerun_survivors(t, args.workdir) if args.rerun_survivors else run_target(t, args.workdir)
    return report(args.workdir, files)


if __name__ == "__main__":
    sys.exit(main())
