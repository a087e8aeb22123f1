"""``python -m asyncgrpo.check MODULE:FUNCTION --eps 0.2``: property-test a weight map from the shell.

``FUNCTION`` is any callable ``fn(ell, eps) -> w`` (one group's log-ratios in, weights out; see
:func:`asyncgrpo.testing.check_weight_map` for the optional ``[n_groups, G]`` input and ``mask=``).
``registry:NAME`` checks the toolkit's own estimator ``NAME`` (torch backend). Prints one row per
property with its verdict (``holds`` / ``refuted`` with a shrunk counterexample / ``out of scope``).

The report ends with one line per question: membership of ``𝒲_ε`` (docs/THEORY.md §3: real weights,
nonnegative, ``w_i ≤ ρ_i``, mean ``≤ 1+ε``, judged where the output is finite), numerical robustness
(finite for ``|ℓ| ≤ 1e4``, else the first failing ``ℓ``), C2 optimality (checked for every member) and
purity (the input is left unchanged).

Exit status: 0 only if every property holds (a member, robust, pure, the C2 minimiser, and every
applicable structure row), 1 if one is refuted or membership could not be established, 2 with one line on
stderr for a usage error: the module cannot be imported (missing, syntax error, raises on import), no
such attribute, not callable, bad ε, or the map calls ``sys.exit`` while being checked. On the command line the
check runs in a child process that reports its end: a map that ends the process another way (``os._exit(0)``, a
crash, a signal) is exit 2 with one line saying nothing was checked, never a silent pass (issue 56 item 9).
"""
from __future__ import annotations

import argparse
import importlib
import sys


def load_map(spec: str):
    """The callable named by ``spec``: ``"pkg.module:attr"`` (dots allowed in ``attr``) or ``"registry:NAME"``.

    Raises ``ValueError`` with a plain message if the module cannot be imported, the attribute does
    not exist, or it is not callable.
    """
    if spec.startswith("registry:"):
        from asyncgrpo.testing import registry_map

        return registry_map(spec.split(":", 1)[1])
    if spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"expected MODULE:FUNCTION (e.g. mypkg.weights:my_map) or registry:NAME, got {spec!r}")
    mod_name, attr = spec.split(":")
    try:
        obj = importlib.import_module(mod_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module: any failure is a usage error
        raise ValueError(f"cannot import module {mod_name!r}: {_one_line(exc)}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"module {mod_name!r} has no attribute {attr!r}") from None
        except Exception as exc:  # noqa: BLE001 - a module __getattr__ or property that raises
            raise ValueError(f"cannot read {attr!r} from module {mod_name!r}: {_one_line(exc)}") from exc
    if not callable(obj):
        raise ValueError(f"{spec!r} is a {type(obj).__name__}, not a callable fn(ell, eps) -> w")
    return obj


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line; a syntax error with its file and line."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit status (0 every property holds, 1 one fails, 2 usage error)."""
    parser = argparse.ArgumentParser(
        prog="python -m asyncgrpo.check",
        description="Property-test a weight map fn(ell, eps) -> w: membership of W_eps, numerical robustness, "
                    "C2 optimality and purity.",
    )
    parser.add_argument("map", help="MODULE:FUNCTION, or registry:NAME for a built-in estimator")
    parser.add_argument("--eps", type=float, default=0.2, help="threshold eps > 0 (default 0.2)")
    parser.add_argument("--draw-eps", action="store_true", help="let hypothesis draw eps too (ignores --eps)")
    parser.add_argument("--max-examples", type=int, default=100, help="hypothesis examples per property (default 100)")
    parser.add_argument("--batched", action="store_true",
                        help="fn also takes [n_groups, G] input: check batch-shape agreement (automatic with a mask= keyword)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    args = parser.parse_args(argv)
    try:
        fn = load_map(args.map)
        from asyncgrpo.testing import check_weight_map

        report = check_weight_map(fn, eps=None if args.draw_eps else args.eps,
                                  max_examples=args.max_examples, name=args.map,
                                  batched=True if args.batched else None)
    except ValueError as exc:
        print(f"python -m asyncgrpo.check: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        # the map (or its import) ended the process: without this, sys.exit(0) inside it read as a pass
        print(f"python -m asyncgrpo.check: error: {args.map} called sys.exit({exc.code!r}) instead of returning "
              "weights; nothing was checked", file=sys.stderr)
        return 2
    if args.format == "table":
        print(report)
    else:
        frame = report.to_frame().drop(columns=["description"]).astype({"counterexample": str})
        print(frame.to_csv() if args.format == "csv" else frame.to_json(orient="index", indent=1))
    return 0 if report.all_hold else 1


#: Set in the child of :func:`run_isolated`: the file it writes its exit status to once the check has ended.
_DONE_ENV = "ASYNCGRPO_CHECK_DONE_FILE"


def run_isolated(argv: list[str] | None = None) -> int:
    """The command line's entry: :func:`main` in a child process that writes its exit status to a file as its last
    act. A child that ends without it (the map called ``os._exit``, crashed, was killed) ended the process before
    the check finished: exit 2 and one line on stderr, never the child's own status (``os._exit(0)`` read as 0)."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else list(argv)
    if os.environ.get(_DONE_ENV):  # the child: check, then say so
        done = Path(os.environ.pop(_DONE_ENV))
        try:
            rc = main(argv)
        except SystemExit as exc:  # --help, a parse error
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        sys.stdout.flush()
        sys.stderr.flush()
        done.write_text(str(rc))
        return rc
    with tempfile.TemporaryDirectory(prefix="asyncgrpo-check-") as tmp:
        done = Path(tmp) / "done"
        rc = subprocess.run([sys.executable, "-m", "asyncgrpo.check", *argv], env={**os.environ, _DONE_ENV: str(done)}).returncode
        said = done.read_text() if done.exists() else None
    if said != str(rc):
        how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        print(f"python -m asyncgrpo.check: error: the check ended before it finished ({how}, no result written): "
              f"{next((a for a in argv if ':' in a), 'the map')} (or its import) ended the process, e.g. with os._exit; nothing was "
              "checked", file=sys.stderr)
        return 2
    return rc


if __name__ == "__main__":
    sys.exit(run_isolated())
