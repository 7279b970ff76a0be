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
status argparse uses for a bad command line); no traceback is shown.
"""

from __future__ import annotations

import argparse
import importlib
import os
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


HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
MAX_HOST_DEVICES = 8


def host_devices_default() -> int:
    """Host CPU devices the command asks for: ``$LDPSIM_HOST_DEVICES`` or min(cores, 8)."""
    value = os.environ.get("LDPSIM_HOST_DEVICES", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise LdpsimError(f"LDPSIM_HOST_DEVICES must be an integer >= 1, got {value!r}")
        return int(value)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_HOST_DEVICES))


def _request_host_devices() -> None:
    """Add the host-device count to XLA_FLAGS unless set already or JAX has started."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" in sys.modules or HOST_DEVICES_FLAG in flags:
        return
    n = host_devices_default()
    if n > 1:
        os.environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICES_FLAG}={n}".strip()


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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        _request_host_devices()
    except LdpsimError as err:
        print(f"ldpsim: error: {err}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    _one_line_warnings(args.command)
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
        print(f"ldpsim {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ldpsim {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
