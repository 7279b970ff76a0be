"""Sweeps: a grid of runs (ε × clients per round × seeds × …) -> one tidy, resumable CSV.

* :class:`SweepConfig` / :func:`load_sweep_config` -- the grid and its fingerprint.
* :class:`ResultsStore` -- the CSV + ``.sweep.json`` sidecar, written cell by cell.
* :func:`run_sweep` -- run the unfinished cells with a runner (the engine by default).
"""

from ldpsim._src.sweep.config import Cell, SweepConfig, load_sweep_config, parse_epsilon, parse_list
from ldpsim._src.sweep.run import Runner, SweepSummary, group_cells, run_sweep
from ldpsim._src.sweep.store import CELL_COLUMN, ResultsStore, sidecar_path

__all__ = [
    "CELL_COLUMN",
    "Cell",
    "ResultsStore",
    "Runner",
    "SweepConfig",
    "SweepSummary",
    "group_cells",
    "load_sweep_config",
    "parse_epsilon",
    "parse_list",
    "run_sweep",
    "sidecar_path",
]
