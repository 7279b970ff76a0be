"""Progress: tqdm bars on a terminal (and in notebooks), plain lines in a redirected log.

tqdm redraws its bar with carriage returns and cursor moves; written to a file
(``ldpsim sweep ... 2> sweep.log``) they become one unreadable line per redraw. Where the
stream is not a terminal, :func:`progress_bar` returns :class:`PlainProgress` instead: the
same small interface (``update``, ``set_description``, ``set_postfix``,
``set_postfix_str``, ``close``, ``n``, ``total``), writing one ordinary line now and then
at the start, at every tenth of the work (at most one a second, at least one a minute) and
at the end. ``LDPSIM_PROGRESS=bars`` or ``plain`` forces either.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, TextIO

__all__ = ["PlainProgress", "progress_bar", "wants_bars"]

#: Seconds between plain lines at most (a line at least this often while work goes on).
MAX_SILENCE_S = 60.0
#: Seconds between plain lines at least.
MIN_GAP_S = 1.0


def wants_bars(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stderr) should get tqdm bars: a terminal or a notebook,
    unless ``LDPSIM_PROGRESS`` says ``plain`` (or ``bars``)."""
    forced = os.environ.get("LDPSIM_PROGRESS", "").strip().lower()
    if forced in ("plain", "bars"):
        return forced == "bars"
    stream = sys.stderr if stream is None else stream
    if type(stream).__name__ == "OutStream" and "ipykernel" in sys.modules:
        return True   # Jupyter: tqdm.auto draws a widget, no control codes in a file
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def progress_bar(*, total: int | None = None, initial: int = 0, desc: str = "", unit: str = "it",
                 file: TextIO | None = None, **tqdm_options: Any):
    """A tqdm bar where the stream is a terminal, else a :class:`PlainProgress`."""
    if wants_bars(file):
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=file, **tqdm_options)
    return PlainProgress(total=total, initial=initial, desc=desc, unit=unit, file=file)


def _format_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class PlainProgress:
    """Plain progress lines (``rounds: 4/20 round (20%), 0:12 elapsed, ETA 0:48, accuracy=0.31``)
    for logs: no carriage returns, no cursor codes."""

    def __init__(self, *, total: int | None = None, initial: int = 0, desc: str = "",
                 unit: str = "it", file: TextIO | None = None) -> None:
        self.total, self.n, self.desc, self.unit = total, int(initial), desc, unit
        self._file = file
        self._postfix = ""
        self._start = time.monotonic()
        self._last = -math.inf
        self._initial = int(initial)
        self._printed_n = None
        self._tenth = self._tenth_of(self.n)
        self._closed = False
        if total is None or self.n < total:   # where it starts ("rounds (compiling): 0/20 ...")
            self._write()

    def _tenth_of(self, n: int) -> int:
        return (10 * n) // self.total if self.total else 0

    def line(self) -> str:
        """The current progress as one line."""
        elapsed = time.monotonic() - self._start
        parts = [f"{self.desc}: " if self.desc else ""]
        if self.total:
            parts.append(f"{self.n}/{self.total} {self.unit} ({100 * self.n // self.total}%)")
        else:
            parts.append(f"{self.n} {self.unit}")
        parts.append(f", {_format_seconds(elapsed)} elapsed")
        done = self.n - self._initial
        if self.total and 0 < done and self.n < self.total:
            parts.append(f", ETA {_format_seconds(elapsed / done * (self.total - self.n))}")
        if self._postfix:
            parts.append(f", {self._postfix}")
        return "".join(parts)

    def _write(self) -> None:
        print(self.line(), file=self._file if self._file is not None else sys.stderr, flush=True)
        self._last = time.monotonic()
        self._printed_n = self.n

    def update(self, n: int = 1) -> None:
        self.n += int(n)
        now = time.monotonic()
        tenth = self._tenth_of(self.n)
        if (tenth > self._tenth and now - self._last >= MIN_GAP_S) or now - self._last >= MAX_SILENCE_S:
            self._tenth = tenth
            self._write()

    def set_description(self, desc: str, refresh: bool = True) -> None:  # noqa: ARG002
        self.desc = desc

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kwargs: Any) -> None:  # noqa: ARG002
        items = {**(ordered_dict or {}), **kwargs}
        self._postfix = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in items.items())

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:  # noqa: ARG002
        self._postfix = str(s)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if not self._closed and self._printed_n != self.n and self.n != self._initial:
            self._write()
        self._closed = True

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
