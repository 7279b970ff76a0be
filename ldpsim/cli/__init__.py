"""The ``ldpsim`` command.

Each subcommand lives in its own module ``ldpsim/cli/cmd_<name>.py`` that defines
``register(subparsers)``; the module is discovered automatically.  Command modules
import heavy libraries (jax, matplotlib) inside their handlers so that ``--help``
stays fast.

Errors: an :class:`~ldpsim.LdpsimError` raised by a handler is printed as one line
``ldpsim <command>: error: ...`` and the process exits with status 2 (the same
status argparse uses for a bad command line); no traceback is shown.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from ldpsim import __version__
from ldpsim._checks import LdpsimError


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump), exit status 2."""

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ldpsim",
        description=(
            "Simulate federated learning under local differential privacy at scale "
            "(JAX). Run `ldpsim <command> --help` for the options of a command."
        ),
    )
    parser.add_argument("--version", action="version", version=f"ldpsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    modules = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("cmd_"):
            modules.append(importlib.import_module(f"{__name__}.{info.name}"))
    for module in sorted(modules, key=lambda m: (getattr(m, "ORDER", 100), m.__name__)):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except LdpsimError as err:
        print(f"ldpsim {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ldpsim {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
