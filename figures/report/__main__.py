"""``python -m figures.report``: rebuild the report from existing sidecars, running no figure.

``--out DIR`` is the folder of the sidecars (default figures/out); ``--report PATH`` where REPORT.md goes
(REPORT-details.md and REPORT.html beside it). The committed figures/REPORT.md is written only by
``python -m figures``; this command refuses to overwrite it unless ``--report`` names it explicitly.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import figures
from figures.report import check, render

HERE = Path(figures.__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    """Rebuild the report; print its path and any problem :mod:`figures.report.check` finds; exit 1 on one."""
    p = argparse.ArgumentParser(prog="python -m figures.report", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "out", help="folder of the figures' sidecars")
    p.add_argument("--report", type=Path, required=True, help="REPORT.md path to write")
    p.add_argument("--no-derive", action="store_true", help="skip the symbolic checks (~10 s of sympy)")
    args = p.parse_args(argv)
    if not args.out.is_dir():
        p.error(f"--out must be a folder of figure sidecars, got {args.out}")
    md, page, _ = render.write(args.out, args.report, run_checks=not args.no_derive)
    text = md.read_text()
    bad = check.problems(text) + check.first_screen_problems(text) + check.size_problems(text)
    print(f"[report] {md}, {md.with_name(md.stem + '-details.md')} and {page}")
    for b in bad:
        print(f"  problem: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
