"""Files replaced whole: written to a temporary sibling, flushed to disk, renamed over."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_open"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, **open_kw) -> Iterator[IO[str]]:
    """Open ``path + ".tmp"`` for writing text; when the block ends without an error, flush
    and fsync it and rename it over ``path`` (``os.replace``: readers see the old file or the
    new one, never a part). SIGINT/SIGTERM wait for the block to end
    (:func:`ldpsim._src._interrupt.critical`). ``open_kw``: ``open``'s (``newline``,
    ``encoding``)."""
    from ldpsim._src._interrupt import critical

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with critical():
        try:
            with open(tmp, "w", **open_kw) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():   # the block raised: leave the old file as it was
                tmp.unlink()
