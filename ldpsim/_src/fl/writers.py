"""Optional writers built on :func:`~ldpsim.simulate`'s per-round callback.

:func:`tensorboard_callback` writes each history row's numeric columns as TensorBoard
scalars through tensorboardX (a small, maintained package that needs no TensorFlow;
``pip install 'ldpsim[tensorboard]'``). It is off unless asked for (``ldpsim run
--tensorboard DIR``)::

    from ldpsim._src.fl.writers import tensorboard_callback

    with tensorboard_callback("runs/eps10") as tb:
        history = ldpsim.simulate(config, callback=tb)
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

from ldpsim._src._checks import LdpsimError

__all__ = ["TensorBoardCallback", "tensorboard_callback"]

#: Columns that are settings or indices, not curves.
_SKIP = frozenset({"round", "seed", "population", "clients_per_round"})


class TensorBoardCallback:
    """A per-round callback writing every numeric column of a row as the scalar
    ``<prefix><column>`` at step ``row["round"]``; never stops the run. Flushed after
    every row (a live TensorBoard sees each evaluation at once); :meth:`close` it at the
    end, or use it as a context manager."""

    def __init__(self, logdir: str | Path, prefix: str = "") -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise LdpsimError("the TensorBoard writer needs the tensorboard extra: pip install "
                              "'ldpsim[tensorboard]' (tensorboardX)") from None
        path = Path(logdir).expanduser()
        if path.exists() and not path.is_dir():
            raise LdpsimError(f"TensorBoard log folder {str(path)!r} is a file; give a folder")
        self.logdir = path
        self.prefix = prefix
        self._writer = SummaryWriter(logdir=str(path))

    def __call__(self, row: dict) -> None:
        step = int(row["round"])
        for key, value in row.items():
            if (key in _SKIP or isinstance(value, bool)
                    or not isinstance(value, numbers.Real)):
                continue
            value = float(value)
            if math.isfinite(value):   # NaN/inf (e.g. no privacy) would break the plots
                self._writer.add_scalar(self.prefix + key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (and stop tensorboardX's writer thread)."""
        self._writer.close()

    def __enter__(self) -> "TensorBoardCallback":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def tensorboard_callback(logdir: str | Path, prefix: str = "") -> TensorBoardCallback:
    """A callback for :func:`~ldpsim.simulate` that writes the numeric
    columns of each history row (accuracy, loss, noise_norm, epsilon_spent, ...) to
    TensorBoard event files in ``logdir``, at step = the row's round. NaN and infinite
    values are left out. See :class:`TensorBoardCallback`.

    Raises:
        LdpsimError: tensorboardX is not installed (the ``tensorboard`` extra), or
            ``logdir`` is a file.
    """
    return TensorBoardCallback(logdir, prefix)
