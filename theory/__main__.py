"""``python -m theory [--latex] [--steps]``: derive every claim, print the table, exit 1 on any failure."""
from __future__ import annotations

import argparse
import sys
import time

from .claims import ALL
from .report import failures, latex, markdown


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m theory", description=__doc__)
    ap.add_argument("--latex", action="store_true", help="print a LaTeX tabular instead of Markdown")
    ap.add_argument("--steps", action="store_true", help="also list every certified step")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    claims = list(ALL.values())
    print(latex(claims) if args.latex else markdown(claims))
    if args.steps:
        for c in claims:
            for st in c.steps:
                print(f"{c.id} [{'ok' if st.ok else 'FAIL'}] {st.claim}" + (f"  — {st.certificate}" if st.certificate else ""))
    bad = failures(claims)
    n_steps = sum(len(c.steps) for c in claims)
    print(f"\n{'% ' if args.latex else ''}{len(claims)} results, {n_steps} certified steps, {len(bad)} failed, {time.perf_counter() - t0:.1f} s")
    for b in bad:
        print(f"FAILED {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
