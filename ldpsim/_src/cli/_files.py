"""One rule for every file or folder a command reads: it exists, is of the right kind, can be
read, and (for text) is UTF-8. No JAX, no data."""

from __future__ import annotations

import os
from pathlib import Path

from ldpsim._src._checks import LdpsimError


def check_input_file(path: os.PathLike | str, what: str) -> Path:
    """A file a command reads: it exists, is a file (not a folder) and can be opened.

    ``what`` names it in the message (an option such as ``--config``, or ``results file``).
    """
    path = Path(path)
    if not path.exists():
        raise LdpsimError(f"{what} {str(path)!r} not found")
    if path.is_dir():
        raise LdpsimError(f"{what} {str(path)!r} is a folder; give a file")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as err:
        raise LdpsimError(f"{what} {str(path)!r} cannot be read ({err.strerror or err}, "
                          "permission?)") from None
    return path


def check_text_file(path: os.PathLike | str, what: str, kind: str = "text") -> str:
    """:func:`check_input_file`, then the whole file as UTF-8 text (a binary or
    undecodable file is an error naming the file and the byte)."""
    path = check_input_file(path, what)
    data = path.read_bytes()
    if b"\x00" in data[:65536]:
        raise LdpsimError(f"{what} {str(path)!r} is a binary file, not a {kind} file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LdpsimError(f"{what} {str(path)!r} is not UTF-8 {kind} (byte 0x{data[err.start]:02x} "
                          f"at offset {err.start}); is it binary or compressed?") from None


def check_data_dir(value: os.PathLike | str | None, what: str = "--data-dir") -> None:
    """A data folder given by the user must exist (a mistyped one is never created empty)."""
    if value is None:
        return
    path = Path(value).expanduser()
    if not path.exists():
        raise LdpsimError(f"{what} {str(value)!r} does not exist; create it (or fix the name) "
                          "and put the dataset there")
    if not path.is_dir():
        raise LdpsimError(f"{what} {str(value)!r} is not a folder")
