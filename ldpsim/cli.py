"""The ``ldpsim`` command (``ldpsim --help``); :func:`main` runs it from Python."""

from ldpsim._src.cli import main

__all__ = ["main"]
