"""Sub-commands of ``python -m simulate`` (one module each; see simulate/__main__.py) and the CLI
runner shared with ``python -m simulate.llm``."""
from __future__ import annotations

import argparse
import re
import sys

# A value that reads as a negative or non-finite number: -3, -1e4, -.5, -inf, -nan. argparse's own
# rule (-\d+ or -\d*.\d+ on Python 3.11) takes -1e4 and -inf for unknown options.
_NUMBER = re.compile(r"^-(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan)$", re.IGNORECASE)


def accept_negative_numbers(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Let ``parser`` and its sub-parsers read ``-1e4``, ``-inf`` etc. as values, not options.

    Skipped for a parser that defines an option which itself looks like a negative number
    (then argparse must keep telling the two apart). Returns ``parser``.
    """
    stack = [parser]
    while stack:
        p = stack.pop()
        if not p._has_negative_number_optionals:
            p._negative_number_matcher = _NUMBER
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    return parser


def run_cli(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and call the chosen command's ``_main``; bad input is one ``error:`` line, exit 2.

    Negative numbers and infinities are accepted as option values (:func:`accept_negative_numbers`);
    the command's own checks then say whether the value is in range.
    """
    args = accept_negative_numbers(parser).parse_args(argv)
    try:
        return int(args._main(args) or 0)
    except ValueError as exc:  # bad input: one clear line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
