"""Run a sweep: every unfinished cell, grouped so cells that differ only in ε share a program.

The work itself is done by a *runner*: a callable ``runner(cells, on_round)`` that receives
a group of cells (same settings except ε) and yields ``(cell, rows)`` for each cell as
soon as it is finished, calling ``on_round()`` once per completed round of any cell
(for the progress bar). The default runner, :class:`ldpsim._src.sweep.engine.EngineRunner`,
runs the simulation engine; tests inject fast fake runners.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from ldpsim._src._checks import LdpsimError
from ldpsim._src.sweep.config import Cell, SweepConfig
from ldpsim._src.sweep.store import CELL_COLUMN, ResultsStore

__all__ = ["Runner", "SweepSummary", "group_cells", "run_sweep"]


class Runner(Protocol):
    """Runs a group of cells that differ only in ε, yielding each finished cell's rows."""

    def __call__(self, cells: Sequence[Cell], on_round: Callable[[], None]) -> Iterable[tuple[Cell, list[dict]]]:
        ...


@dataclasses.dataclass(frozen=True)
class SweepSummary:
    """What :func:`run_sweep` did.

    Attributes:
        path: the results CSV.
        total: cells in the grid. skipped: cells already finished in the file.
        ran: cells run now. rows: result rows written now.
        dropped_rows: rows of unfinished cells removed from the file on resume.
        seconds: wall time of this call.
    """

    path: Path
    total: int
    skipped: int
    ran: int
    rows: int
    dropped_rows: int
    seconds: float


def group_cells(cells: Sequence[Cell]) -> list[list[Cell]]:
    """Group cells by everything but ε (order kept); a group can run as one vmapped program."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group_key, []).append(cell)
    return list(groups.values())


def _rounds(cell: Cell) -> int:
    return int(cell.params.get("rounds", 1))


def run_sweep(
    config: SweepConfig,
    out: str | Path,
    *,
    runner: Runner | None = None,
    overwrite: bool = False,
    progress: bool = True,
    vmap_epsilon: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_cell: Callable[[Cell, list[dict]], None] | None = None,
    workers: int = 1,
) -> SweepSummary:
    """Run every cell of ``config`` that ``out`` does not already hold, writing each as it finishes.

    Re-running the same call after an interruption resumes: finished cells are skipped,
    rows of the interrupted cell are discarded and that cell runs again, so the final file
    equals an uninterrupted run's (same rows, none duplicated; only timing columns differ).

    Args:
        config: the sweep.
        out: results CSV; its sidecar ``<stem>.sweep.json`` records the sweep's fingerprint.
        runner: runs groups of cells; default :class:`~ldpsim._src.sweep.engine.EngineRunner`.
        overwrite: discard an existing results file instead of resuming it.
        progress: show tqdm bars over cells and rounds (on stderr).
        vmap_epsilon: let the default runner run the ε values of a group in one vmapped
            program (results equal running them one by one, up to float rounding). Off by
            default: on the 2-core CPU it measured 5× slower than one by one (MLP, m = 100,
            benchmarks/sweep_vmap_epsilon.py); cells still share one compilation.
        on_start: called with (cells in the grid, cells already finished) once ``out`` is
            open and locked, before any cell runs.
        on_cell: called with each cell and its rows once they are in ``out`` (the CLI
            updates the run manifest, ``ldpsim._src._manifest``, with it).
        workers: run this many cells at once, each in its own process pinned to its own share
            of the CPU cores (:mod:`ldpsim._src.sweep.parallel`; CPU backend only). The rows
            equal a one-process run's up to float summation order (and the timing columns);
            cells are written in the order they finish. ``runner`` must then be picklable, and
            ``vmap_epsilon`` off. The workers are started with ``spawn``: a script that calls
            this must guard its entry point (``if __name__ == "__main__":``), as any
            :mod:`multiprocessing` program.

    Returns:
        A :class:`SweepSummary`.

    Raises:
        LdpsimError: ``out`` belongs to a different sweep, a cell's settings are invalid
            (checked for every cell before anything runs), or ``workers`` is not a positive
            integer up to the number of cores, or is combined with ``vmap_epsilon``.
    """
    start = time.perf_counter()
    if workers != 1:
        from ldpsim._src.sweep.parallel import cpu_shares

        cpu_shares(workers)   # a clear error before anything runs
        if vmap_epsilon:
            raise LdpsimError("vmap_epsilon runs a group of cells as one program in one process; "
                              "use it with workers = 1")
    if runner is None:
        from ldpsim._src.sweep.engine import EngineRunner

        # Cells run one by one are checkpointed next to the CSV (<stem>.checkpoints/, one
        # folder per running cell, removed once its rows are written): an interrupted
        # cell continues from its last checkpoint instead of from round 1.
        out_path = Path(out)
        runner = EngineRunner(vmap_epsilon=vmap_epsilon,
                              checkpoint_dir=out_path.with_name(out_path.stem + ".checkpoints"))
    cells = config.cells()
    check = getattr(runner, "check", None)
    if check is not None:
        for cell in cells:
            check(cell)
    with ResultsStore(out, fingerprint=config.fingerprint(), config=config.normalized(),
                      overwrite=overwrite, describe_difference=config.describe_difference) as store:
        todo = [c for c in cells if not store.is_done(c.key)]
        skipped = len(cells) - len(todo)
        if on_start is not None:
            on_start(len(cells), skipped)
        written = ran = 0
        bars = _Bars(progress, total=len(cells), done=skipped, rounds=sum(_rounds(c) for c in todo))
        if workers == 1:
            finished = (pair for group in group_cells(todo) for pair in runner(group, bars.round))
        else:
            from ldpsim._src.sweep.parallel import run_cells_in_workers

            ordered = [cell for group in group_cells(todo) for cell in group]
            finished = run_cells_in_workers(ordered, workers, runner, on_round=bars.round)
        try:
            for cell, rows in finished:
                rows = [{**row, CELL_COLUMN: cell.key} for row in rows]
                store.write_cell(cell.key, rows)
                if on_cell is not None:
                    on_cell(cell, rows)
                written += len(rows)
                ran += 1
                bars.cell(cell)
        finally:
            finished.close()   # a generator: stops the workers at once on an error or an interrupt
            bars.close()
        return SweepSummary(
            path=Path(out), total=len(cells), skipped=skipped, ran=ran, rows=written,
            dropped_rows=store.dropped_rows, seconds=time.perf_counter() - start,
        )


class _Bars:
    """tqdm bars: finished cells (outer) and completed rounds of the remaining cells (inner)."""

    def __init__(self, enabled: bool, *, total: int, done: int, rounds: int) -> None:
        self.cells = self.rounds = None
        if not enabled:
            return
        from ldpsim._src._progress import progress_bar   # tqdm on a terminal, else plain lines

        self.cells = progress_bar(total=total, initial=done, desc="cells", unit="cell", position=0,
                                  dynamic_ncols=True)
        self.rounds = progress_bar(total=rounds, desc="rounds", unit="round", position=1,
                                   leave=False, dynamic_ncols=True)

    def round(self) -> None:
        if self.rounds is not None:
            self.rounds.update(1)

    def cell(self, cell: Cell) -> None:
        if self.cells is not None:
            self.cells.set_postfix_str(cell.key, refresh=False)
            self.cells.update(1)

    def close(self) -> None:
        for bar in (self.rounds, self.cells):
            if bar is not None:
                bar.close()
