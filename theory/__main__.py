"""``python -m theory``: derive every claim (docs/THEORY.md §3), print the claims table, exit 1 on any failure.

Default: a short table that fits 100 columns (derived exponents in plain notation, e.g. ``ε^-2 G^-2/5``)
followed by the C7 bias decomposition and the C5 local-exponent sections."""
from __future__ import annotations

import argparse
import sys
import time

from .claims import ALL
from .report import c5_section, c7_section, failures, latex, markdown, short


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m theory", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--full", action="store_true", default=False,
                     help="print the full Markdown table (statements and full expressions) instead of the short one")
    out.add_argument("--latex", action="store_true", default=False, help="print a LaTeX tabular (sympy.latex)")
    ap.add_argument("--steps", action="store_true", default=False, help="also list every certified step")
    ap.add_argument("--no-sections", action="store_true", default=False,
                    help="omit the C7 decomposition and C5 local-exponent sections after the table")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    claims = list(ALL.values())
    print(latex(claims) if args.latex else markdown(claims) if args.full else short(claims))
    if not (args.latex or args.no_sections):
        print("\n" + c7_section() + "\n\n" + c5_section())
    if args.steps:
        for c in claims:
            for st in c.steps:
                print(f"{c.id} [{'ok' if st.ok else 'FAIL'}] {st.claim}" + (f"  — {st.certificate}" if st.certificate else ""))
    bad = failures(claims)
    n_steps = sum(len(c.steps) for c in claims)
    print(f"\n{'% ' if args.latex else ''}{len(claims)} results, {n_steps} certified steps, {len(bad)} failed, "
          f"{time.perf_counter() - t0:.1f} s")
    for b in bad:
        print(f"FAILED {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
