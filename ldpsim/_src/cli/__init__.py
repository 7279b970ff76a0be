"""The ``ldpsim`` command.

Each subcommand lives in its own module ``ldpsim/cli/cmd_<name>.py`` that defines
``register(subparsers)``; the module is discovered automatically.  Command modules
import heavy libraries (jax, matplotlib) inside their handlers so that ``--help``
stays fast.

Host CPU devices: before JAX starts, the command asks XLA for one host CPU device per core
(at most 8; ``--xla_force_host_platform_device_count``) so that ``ldpsim run`` and
``ldpsim sweep`` split each round's cohort over the cores (``SimulationConfig.devices``
None = every device; measured 1.3-1.7x on 2 cores by ``benchmarks/throughput.py
--host-devices 1 2``). Results equal one device's up to float summation order. An
``XLA_FLAGS`` that already sets the count wins; ``LDPSIM_HOST_DEVICES=K`` sets K (1: off).
It has no effect on GPU/TPU backends, whose devices are used instead.

Errors: an :class:`~ldpsim.LdpsimError` raised by a handler is printed as one line
``ldpsim <command>: error: ...`` and the process exits with status 2 (the same
status argparse uses for a bad command line); no traceback is shown. Other failures
(out of memory, a file system error met while working, an unexpected exception) are
one line too, with status 1; ``LDPSIM_DEBUG=1`` shows the traceback of an unexpected one.
Checks that need no work run first (``ldpsim._src.cli._guards``, built on ``_parsing``,
``_files``, ``_rules`` and ``_memory``); ``args._given`` holds the options the command line
typed, so an option that does not apply is refused only then.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from ldpsim import __version__
from ldpsim._src import _interrupt
from ldpsim._src._checks import LdpsimError


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump), exit status 2, with a "did
    you mean" for a misspelt command, choice or option (:func:`suggest`)."""

    #: The command line being parsed (set by :func:`main`), to find the subcommand whose
    #: options an unrecognised one is compared with.
    argv: Sequence[str] = ()

    def error(self, message: str):  # noqa: D102
        hint = suggest(self, message, self.argv)
        prog = _deepest(self, self.argv).prog if message.startswith("unrecognized") else self.prog
        self.exit(2, f"{prog}: error: {message}{hint} (see '{prog} --help')\n")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _deepest(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)parser the command line reached: ``ldpsim account ldp ...`` -> ``ldp``'s."""
    for token in argv:
        sub = _subparsers(parser).get(token)
        if sub is not None:
            parser = sub
    return parser


def suggest(parser: argparse.ArgumentParser, message: str, argv: Sequence[str]) -> str:
    """``"; did you mean X?"`` for an argparse error about an unknown command, choice or
    option (closest names by :func:`difflib.get_close_matches`), else ``""``."""
    import difflib
    import re

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        options = re.findall(r"'([^']*)'", choice.group(2)) or \
            [c.strip() for c in choice.group(2).split(",")]
        close = difflib.get_close_matches(choice.group(1), options, n=2, cutoff=0.6)
        return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    unknown = re.match(r"unrecognized arguments: (.*)", message)
    if unknown:
        target = _deepest(parser, argv)
        flags = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
        hints = []
        for token in unknown.group(1).split():
            name = token.split("=", 1)[0]
            if not name.startswith("-"):
                continue
            close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
            if close:
                hints.append(f"{close[0]} for {name}")
        return f"; did you mean {', '.join(hints)}?" if hints else ""
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ldpsim",
        description=(
            "Simulate federated learning under local differential privacy at scale "
            "(JAX). Run `ldpsim <command> --help` for the options of a command."
        ),
        epilog=("Compiled programs are kept in ~/.cache/ldpsim/xla and reused by later runs "
                "(a rerun or a resumed run skips most of its start-up); "
                "LDPSIM_COMPILATION_CACHE=DIR moves the cache, =off turns it off."),
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


def _request_host_devices() -> None:
    """One host CPU device per core for the command (:func:`ldpsim.use_host_devices`, the
    same request a script makes)."""
    from ldpsim._src._devices import use_host_devices

    use_host_devices(quiet=True)


#: Argument names that are files a command writes; checked before any work starts.
OUTPUT_ARGS = ("out", "plot", "trace")


def check_output_path(path: os.PathLike | str, option: str) -> None:
    """One rule for every file a command writes, applied before any work starts: it is not
    a folder, its missing parent folders are created, and it can be opened for writing
    (checked by opening it for appending; a file created by the check is removed).

    Raises:
        LdpsimError: naming the option, the path and the problem.
    """
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        raise LdpsimError(f"{option} {str(path)!r} is a folder; give a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise LdpsimError(f"{option} {str(path)!r}: {str(parent)!r} is a file, "
                                  "not a folder")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LdpsimError(f"{option} {str(path)!r}: cannot create its folder "
                          f"({err.strerror or err})") from None
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as err:
        raise LdpsimError(f"{option} {str(path)!r} is not writable "
                          f"({err.strerror or err})") from None
    if not existed:
        path.unlink(missing_ok=True)


def _check_outputs(args: argparse.Namespace) -> None:
    for name in OUTPUT_ARGS:
        value = getattr(args, name, None)
        if value is not None and not isinstance(value, bool):
            check_output_path(value, "--" + name.replace("_", "-"))


def _one_line_warnings(command: str) -> None:
    """Show Python warnings as one line ``ldpsim <command>: warning: ...`` on stderr, and
    silence the per-order convergence chatter dp_accounting logs through absl."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
        text = " ".join(str(message).split())
        print(f"ldpsim {command}: warning: {text}", file=file or sys.stderr)

    warnings.showwarning = show
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:  # pragma: no cover (absl comes with dp-accounting)
        pass


@_interrupt.guarded  # SIGINT/SIGTERM: one line, exit 130/143, never mid-compile
def main(argv: Sequence[str] | None = None) -> int:
    try:
        _request_host_devices()
    except LdpsimError as err:
        print(f"ldpsim: error: {err}", file=sys.stderr)
        return 2
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    _Parser.argv = argv
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        print("ldpsim: error: no command given (see 'ldpsim --help')", file=sys.stderr)
        return 2
    from ldpsim._src.cli._parsing import given_dests

    args._given = given_dests(parser, argv)  # options typed, not defaulted (_parsing.was_given)
    _one_line_warnings(args.command)
    from ldpsim._src._compile_cache import enable_compilation_cache

    enable_compilation_cache()   # compiled rounds reused by later runs (LDPSIM_COMPILATION_CACHE)
    try:
        _check_outputs(args)
        return int(args.handler(args) or 0)
    except BrokenPipeError:
        # The reader went away (`ldpsim ... | head -1`): end quietly, as Unix tools do.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (no flush error at exit)
        except OSError:  # pragma: no cover
            pass
        return 0
    except LdpsimError as err:
        print(f"ldpsim {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # SIGINT or SIGTERM (ldpsim._src._interrupt): 130 or 143
        print(_interrupt.message(args.command), file=sys.stderr)
        return _interrupt.exit_status()
    except MemoryError as err:
        print(f"ldpsim {args.command}: error: out of memory ({_one_line(err) or 'MemoryError'}); "
              "ask for less (smaller sizes or counts)", file=sys.stderr)
        return 1
    except OSError as err:  # disk full, permissions, ... met while working
        where = f" {err.filename!r}" if getattr(err, "filename", None) else ""
        print(f"ldpsim {args.command}: error:{where} {err.strerror or _one_line(err)}",
              file=sys.stderr)
        return 1
    except Exception as err:  # the last resort: one line, never a traceback
        if os.environ.get("LDPSIM_DEBUG", "").strip() not in ("", "0"):
            raise
        print(f"ldpsim {args.command}: error: unexpected {type(err).__name__}: {_one_line(err)} "
              "(a bug in ldpsim, please report it; LDPSIM_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 1


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
