"""``python -m simulate <command>``: one sub-command per module in ``simulate/commands/``.

Each command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``main(args) -> int``; adding a file there adds a command.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from simulate import commands
from simulate.commands import run_cli


def _plain(text: str | None) -> str | None:
    # docstrings use reST literals; a terminal shows them as raw ``…``
    return None if text is None else text.replace("``", "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulate", description=_plain(__doc__.splitlines()[0]),
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"simulate.commands.{info.name}")
        # Defaults appear in --help from the parser itself, so help texts never restate them.
        p = sub.add_parser(mod.NAME, help=_plain(mod.HELP), description=_plain(mod.HELP),
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
        mod.add_arguments(p)
        for action in p._actions:
            action.help = _plain(action.help)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    from simulate.jit_notice import announce_if_cold

    from simulate.jit_notice import COMMAND_MODULES

    # --help compiles nothing (kernels are compiled at their first call), so it gets no compile notice
    asks_help = any(a in ("-h", "--help") for a in sys.argv[1:])
    if argv is None and len(sys.argv) > 1 and sys.argv[1] in COMMAND_MODULES and not asks_help:
        announce_if_cold(COMMAND_MODULES[sys.argv[1]])  # one line instead of a silent first compile
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
