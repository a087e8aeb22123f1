"""Sub-commands of ``python -m simulate`` (one module each; see simulate/__main__.py)."""
from __future__ import annotations

import argparse
import sys


def run_cli(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and call the chosen command's ``_main``; bad input is one ``error:`` line, exit 2."""
    args = parser.parse_args(argv)
    try:
        return int(args._main(args) or 0)
    except ValueError as exc:  # bad input: one clear line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
