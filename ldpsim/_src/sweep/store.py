"""The results file of a sweep: a tidy CSV written cell by cell, plus a JSON sidecar.

Layout: ``results.csv`` holds one row per (run, evaluated round) with a ``cell`` column;
``results.sweep.json`` beside it records the sweep's fingerprint and normalised config,
the CSV columns, and the keys of the finished cells.

Crash safety ("nothing lost, nothing duplicated"):

1. a finished cell's rows are appended to the CSV, flushed and fsync'ed;
2. only then is the cell added to the sidecar's ``done`` list (written to a temporary
   file and atomically renamed over the old sidecar).

If the process dies between 1 and 2, or in the middle of 1, the CSV holds rows of a cell
that is not ``done``. On the next open those rows (and any torn last line) are removed
(the CSV is rewritten atomically) and the cell runs again. A file lock (``fcntl.flock``
on ``results.sweep.lock``, released by the OS when the process dies) stops two sweeps
from writing the same file at once.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldpsim import __version__
from ldpsim._src._atomic import atomic_open
from ldpsim._src._checks import LdpsimError
from ldpsim._src._interrupt import critical

try:  # POSIX only; elsewhere the lock is skipped.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

__all__ = ["CELL_COLUMN", "ResultsStore", "sidecar_path"]

CELL_COLUMN = "cell"
SIDECAR_FORMAT = 1


def sidecar_path(path: str | Path) -> Path:
    """``results.csv`` -> ``results.sweep.json``."""
    return Path(path).with_suffix(".sweep.json")


def _lock_path(path: Path) -> Path:
    return path.with_suffix(".sweep.lock")


def _text(value: Any) -> str:
    """CSV text of a value: full float precision, ``inf``/``nan`` spelled as pandas reads them."""
    if value is None:
        return ""
    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    elif hasattr(value, "shape") and getattr(value, "shape", None) == ():  # jax scalar
        value = np.asarray(value).item()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


def _atomic_write(path: Path, text: str) -> None:
    with atomic_open(path, newline="") as f:
        f.write(text)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _same_results(meta: Mapping[str, Any], fingerprint: str) -> bool:
    """Whether a sidecar's recorded config hashes, execution-only settings left out, to ``fingerprint``."""
    from ldpsim._src.sweep.config import fingerprint_of

    config = meta.get("config")
    if not isinstance(config, Mapping):
        return False
    try:
        return fingerprint_of(config) == fingerprint
    except (TypeError, ValueError):
        return False


class ResultsStore:
    """Append-only, resumable results of one sweep (use as a context manager).

    Args:
        path: the CSV file.
        fingerprint: the sweep's :meth:`~ldpsim.sweep.SweepConfig.fingerprint`.
        config: the sweep's normalised config (stored in the sidecar, used in error messages).
        overwrite: replace an existing results file instead of resuming it.
        describe_difference: optional ``f(other_normalised_config) -> str`` for the refusal message.

    Raises:
        LdpsimError: the file holds finished cells of a different sweep (or was not written
            by a sweep), or another sweep holds its lock. The record of a different sweep
            that finished no cell (it failed or was stopped before its first cell's rows)
            is replaced: there is nothing to mix.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        fingerprint: str,
        config: Mapping[str, Any],
        overwrite: bool = False,
        describe_difference=None,
    ) -> None:
        self.path = Path(path)
        self.sidecar = sidecar_path(self.path)
        self.fingerprint = fingerprint
        self.config = dict(config)
        self.overwrite = overwrite
        self._describe = describe_difference
        self.done: list[str] = []
        self.columns: list[str] = []
        self.dropped_rows = 0
        self._lock_file = None
        self._meta: dict[str, Any] = {}

    # ------------------------------------------------------------------ open / close

    def __enter__(self) -> "ResultsStore":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Take the lock, validate an existing file against this sweep, drop unfinished rows."""
        if self.path.suffix.lower() != ".csv":
            raise LdpsimError(f"results file must end in .csv, got {str(self.path)!r}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            if self.overwrite:
                for p in (self.path, self.sidecar):
                    p.unlink(missing_ok=True)
            self._load_or_create()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the lock."""
        if self._lock_file is not None:
            if fcntl is not None:
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
            _lock_path(self.path).unlink(missing_ok=True)

    def _acquire_lock(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        f = open(_lock_path(self.path), "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise LdpsimError(
                f"another ldpsim sweep is writing {str(self.path)!r} right now; wait for it, "
                "or write this sweep to a different --out"
            ) from None
        self._lock_file = f

    def _fix(self) -> str:
        return (f"write this sweep to a new file (--out OTHER.csv) or pass --overwrite "
                f"to replace {str(self.path)!r}")

    def preflight(self) -> None:
        """The checks of :meth:`open` that take no lock and write nothing, for a command to
        run before any work: the suffix, and (unless ``overwrite``) that an existing file
        belongs to this sweep.

        Raises:
            LdpsimError: as :meth:`open` would.
        """
        if self.path.suffix.lower() != ".csv":
            raise LdpsimError(f"results file must end in .csv, got {str(self.path)!r}")
        if self.overwrite:
            return
        has_csv, has_meta = self.path.is_file(), self.sidecar.exists()
        if has_csv and not has_meta:
            raise self._no_record()
        if has_meta:
            meta = self._read_meta()
            if (meta["fingerprint"] != self.fingerprint and not _same_results(meta, self.fingerprint)
                    and meta.get("done")):
                raise self._foreign(meta, meta["fingerprint"])

    def _no_record(self) -> LdpsimError:
        return LdpsimError(
            f"{str(self.path)!r} exists but has no sweep record {str(self.sidecar)!r}, so ldpsim cannot "
            f"tell which sweep wrote it; {self._fix()}"
        )

    def _read_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads(self.sidecar.read_text())
            meta["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise LdpsimError(f"sweep record {str(self.sidecar)!r} is unreadable ({err}); {self._fix()}") from None
        return meta

    def _foreign(self, meta: Mapping[str, Any], fingerprint: str) -> LdpsimError:
        diff = self._describe(meta.get("config", {})) if self._describe else ""
        return LdpsimError(
            f"{str(self.path)!r} holds results of a different sweep (fingerprint {fingerprint} in "
            f"{str(self.sidecar)!r}; this sweep is {self.fingerprint})"
            + (f"; differences: {diff}" if diff else "") + f". Refusing to mix them: {self._fix()}"
        )

    def _load_or_create(self) -> None:
        has_csv, has_meta = self.path.exists(), self.sidecar.exists()
        if has_csv and not has_meta:
            raise self._no_record()
        if not has_meta:
            self._meta = {
                "ldpsim_sweep": SIDECAR_FORMAT, "fingerprint": self.fingerprint, "config": self.config,
                "columns": [], "done": [], "created": _now(), "ldpsim_version": __version__,
            }
            self._write_meta()
            return
        meta = self._read_meta()
        fingerprint = meta["fingerprint"]
        if fingerprint != self.fingerprint and _same_results(meta, self.fingerprint):
            # Written before execution-only settings left the fingerprint (or with other
            # values of them): same results, so resume, and record this sweep's identity.
            meta["fingerprint"], meta["config"] = self.fingerprint, self.config
            fingerprint = self.fingerprint
            self._meta = meta
            self._write_meta()
        if fingerprint != self.fingerprint:
            if meta.get("done"):
                raise self._foreign(meta, fingerprint)
            # The other sweep finished no cell (it failed or was stopped before its first
            # cell's rows were written), so there is nothing to mix: start this one afresh.
            for p in (self.path, self.sidecar):
                p.unlink(missing_ok=True)
            self._load_or_create()
            return
        self._meta = meta
        self.done = list(meta.get("done", []))
        self.columns = list(meta.get("columns", []))
        if has_csv:
            self._drop_unfinished_rows()
        elif self.done:
            # The CSV was deleted but the record survived: those results are gone, start over.
            self.done, self.columns = [], []
            self._meta.update(done=[], columns=[])
            self._write_meta()

    def _drop_unfinished_rows(self) -> None:
        raw = self.path.read_bytes()
        text = raw.decode("utf-8", errors="replace")
        torn = bool(text) and not text.endswith("\n")
        if torn:  # the last line was cut mid-write
            text = text[: text.rfind("\n") + 1]
        rows = list(csv.reader(io.StringIO(text, newline="")))
        if not rows:
            keep_header, body = self.columns, []
        else:
            keep_header, body = rows[0], rows[1:]
        if CELL_COLUMN not in keep_header:
            if body or keep_header:
                raise LdpsimError(f"{str(self.path)!r} has no {CELL_COLUMN!r} column, so it was not written by "
                                  f"ldpsim sweep; {self._fix()}")
            return
        idx = keep_header.index(CELL_COLUMN)
        done = set(self.done)
        kept = [r for r in body if len(r) == len(keep_header) and r[idx] in done]
        self.dropped_rows = len(body) - len(kept) + int(torn)
        self.columns = keep_header
        if self.dropped_rows:
            self._rewrite(keep_header, kept)

    # ------------------------------------------------------------------ writing

    def _write_meta(self) -> None:
        self._meta["updated"] = _now()
        _atomic_write(self.sidecar, json.dumps(self._meta, indent=1) + "\n")

    def _rewrite(self, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        buf = io.StringIO(newline="")
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        _atomic_write(self.path, buf.getvalue())

    def _widen(self, new_columns: list[str]) -> None:
        """Rewrite the CSV with extra columns (empty in earlier rows)."""
        old = self.columns
        body: list[list[str]] = []
        if self.path.exists() and old:
            with open(self.path, newline="") as f:
                body = list(csv.reader(f))[1:]
        columns = [c for c in old if c != CELL_COLUMN] + new_columns + [CELL_COLUMN]
        pos = {c: i for i, c in enumerate(old)}
        rewritten = [[r[pos[c]] if c in pos else "" for c in columns] for r in body]
        self._rewrite(columns, rewritten)
        self.columns = columns
        self._meta["columns"] = columns
        self._write_meta()

    def is_done(self, key: str) -> bool:
        """Whether the cell ``key`` is finished and its rows are in the CSV."""
        return key in self._done_set()

    def _done_set(self) -> set[str]:
        return set(self.done)

    def write_cell(self, key: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append a finished cell's rows, then mark it done (see the module docstring)."""
        if key in self._done_set():
            raise LdpsimError(f"cell {key!r} is already recorded in {str(self.path)!r}")
        if not rows:
            raise LdpsimError(f"cell {key!r} produced no result rows")
        seen: list[str] = []
        for row in rows:
            for c in row:
                if c != CELL_COLUMN and c not in seen:
                    seen.append(c)
        new = [c for c in seen if c not in self.columns]
        # SIGINT/SIGTERM wait for the block to end (ldpsim._src._interrupt.critical): the CSV
        # never holds half a row, and a cell in it is marked done, when the command stops.
        with critical():
            if new or not self.path.exists():
                self._widen(new)
            with open(self.path, "a", newline="") as f:
                writer = csv.writer(f, lineterminator="\n")
                for row in rows:
                    writer.writerow([key if c == CELL_COLUMN else _text(row.get(c)) for c in self.columns])
                f.flush()
                os.fsync(f.fileno())
            self.done.append(key)
            self._meta["done"] = self.done
            self._write_meta()
