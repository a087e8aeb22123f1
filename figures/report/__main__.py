"""``python -m figures.report``: rebuild the report from existing sidecars, running no figure.

``--out DIR`` is the folder of the sidecars (default figures/out); ``--report PATH`` where REPORT.md goes
(REPORT-details.md and REPORT.html beside it). The committed figures/REPORT.md is written only by
``python -m figures``; this command refuses to overwrite it unless ``--report`` names it explicitly.

Every sidecar a full run writes (``figures.report.data.expected_figures``: one per figure module) must be there, readable, well formed, its seal
matching its content and its protocol the one its siblings ran: a claim judged by a missing or damaged one reads
``not run (evidence missing: <file>, <reason>)``, and the command names every problem and exits 1 (issue 56).
The report's stamp is the sidecars' own (commit, code hash, protocol), with the rebuilding commit beside it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import figures
from figures.report import check, data, render

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
    md, page, rep = _write(args.out, args.report, run_checks=not args.no_derive)
    text = md.read_text()
    bad = [f"evidence {pb['file']}: {pb['reason']} → {', '.join(pb['rows']) or 'no claim row'} not run"
           for pb in rep["evidence_problems"]]
    bad += check.problems(text) + check.first_screen_problems(text) + check.size_problems(text)
    print(f"[report] {md}, {md.with_name(md.stem + '-details.md')} and {page}")
    for b in bad:
        print(f"  problem: {b}")
    return 1 if bad else 0


def _write(out_dir: Path, report_path: Path, *, run_checks: bool):
    """:func:`figures.report.render.write`, every figure's sidecar expected (a missing one is a problem here). A
    sidecar well formed at the top but malformed deeper down (the report raises reading it) is found by leaving
    each out in turn, and is then left out like any damaged one: its rows not run, never a traceback."""
    exclude: dict[str, str] = {}
    while True:
        rep = data.build(out_dir, quick=False, run_checks=run_checks, report_path=report_path,
                         expected=data.expected_figures(), exclude=exclude, strict=True)
        try:
            main, details = render.blocks(rep), render.detail_blocks(rep)
            break
        except Exception as exc:  # noqa: BLE001 - the sidecars' content: find which one, or say none could be blamed
            why = f"malformed content: the report raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            culprit = _culprit(out_dir, rep, exclude)
            if culprit is None:
                raise SystemExit(f"python -m figures.report: error: the report cannot be built from {out_dir} and no "
                                 f"single sidecar is to blame ({why.split(': ', 1)[1]})") from None
            exclude[culprit] = why
    rp = rep["report_path"]
    rp.parent.mkdir(parents=True, exist_ok=True)
    rp.write_text(render.markdown(main, rp.parent))
    rep["details_path"].write_text(render.markdown(details, rp.parent))
    rp.with_suffix(".html").write_text(render.html_page(main + details[1:]))
    return rp, rp.with_suffix(".html"), rep


def _culprit(out_dir: Path, rep: dict, exclude: dict) -> str | None:
    """The first sidecar without which the report builds (symbolic checks skipped: only the layout is tried)."""
    for m in rep["sidecars"]:
        trial = data.build(out_dir, quick=False, run_checks=False, report_path=rep["report_path"],
                           expected=data.expected_figures(), exclude={**exclude, m["figure"]: "probe"},
                           strict=True)
        try:
            render.blocks(trial), render.detail_blocks(trial)
        except Exception:  # noqa: BLE001 - still failing without it: not this one
            continue
        return m["figure"]
    return None


if __name__ == "__main__":
    sys.exit(main())
