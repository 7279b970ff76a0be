"""Recording a command: :func:`collect` starts a manifest (every field, status ``"running"``)
and :class:`Recorder` keeps its file up to date until the command finishes, is interrupted
or fails (a resumed sweep keeps its earlier sessions).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ldpsim._src._manifest.facts import environment, hardware, software
from ldpsim._src._manifest.jsonfile import FORMAT, jsonable, load, now, write

__all__ = ["Recorder", "collect"]

#: Keys of a session kept in ``earlier_sessions``.
_SESSION_KEYS = ("status", "started_at", "ended_at", "wall_seconds", "command_line", "software",
                 "hardware", "results")


def collect(kind: str, configuration: Any, *, out: str | os.PathLike | None = None,
            seeds: Sequence[int] = (), data: Sequence[Mapping[str, Any]] = (),
            argv: Sequence[str] | None = None) -> dict[str, Any]:
    """A new manifest (status ``"running"``, started now) with every field that
    :mod:`ldpsim._src._manifest` lists; ``configuration`` is a dataclass or a mapping."""
    if dataclasses.is_dataclass(configuration) and not isinstance(configuration, type):
        configuration = dataclasses.asdict(configuration)
    argv = list(sys.argv if argv is None else argv)
    if argv and os.path.basename(argv[0]) in ("ldpsim", "__main__.py"):
        argv[0] = "ldpsim"
    return {
        "ldpsim_manifest": FORMAT,
        "kind": kind,
        "status": "running",
        "started_at": now(),
        "ended_at": None,
        "wall_seconds": None,
        "error": None,
        "command_line": argv,
        "command": shlex.join(argv),
        "cwd": os.getcwd(),
        "results": {"csv": None if out is None else os.fspath(out), "rows": 0},
        "configuration": jsonable(dict(configuration)),
        "resolved": None,
        "seeds": [int(s) for s in seeds],
        "data": [dict(d) for d in data],
        "privacy": None,
        "software": software(),
        "hardware": hardware(),
        "environment": environment(),
        "earlier_sessions": [],
    }


class Recorder:
    """Keeps a manifest file up to date while a command runs.

    Use as a context manager: the manifest is written on entry (``running``) and on exit
    with ``finished``, ``interrupted`` (``KeyboardInterrupt``: SIGINT or SIGTERM through
    :mod:`ldpsim._src._interrupt`) or ``failed`` (any other exception, named in ``error``).

    Args:
        path: the manifest file.
        manifest: from :func:`collect`.
        resume: keep the earlier sessions (and a sweep's per-cell privacy records) of an
            existing manifest at ``path`` (a resumed sweep).
    """

    def __init__(self, path: str | os.PathLike, manifest: dict[str, Any], *,
                 resume: bool = False) -> None:
        self.path = Path(path)
        self.manifest = manifest
        self._start = time.monotonic()
        if resume and self.path.is_file():
            try:
                old = load(self.path)
            except ValueError:  # unreadable: start a new record
                old = None
            if old is not None and old.get("kind") == manifest.get("kind"):
                sessions = list(old.get("earlier_sessions") or [])
                sessions.append({k: old.get(k) for k in _SESSION_KEYS})
                manifest["earlier_sessions"] = sessions
                if isinstance(old.get("privacy"), Mapping) and "cells" in old["privacy"]:
                    manifest["privacy"] = {"cells": dict(old["privacy"]["cells"])}
                    if isinstance(old.get("resolved"), Mapping):
                        manifest["resolved"] = dict(old["resolved"])

    def update(self, **fields: Any) -> None:
        """Set top-level fields and write the file."""
        self.manifest.update(fields)
        write(self.path, self.manifest)

    def add_rows(self, n: int) -> None:
        self.manifest["results"]["rows"] = int(self.manifest["results"].get("rows") or 0) + n

    def finish(self, status: str, **fields: Any) -> None:
        self.update(status=status, ended_at=now(),
                    wall_seconds=round(time.monotonic() - self._start, 3), **fields)

    def __enter__(self) -> "Recorder":
        write(self.path, self.manifest)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish("finished")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("interrupted")
        else:
            self.finish("failed", error=f"{exc_type.__name__}: {' '.join(str(exc).split())}")
