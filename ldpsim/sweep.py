"""Sweeps: a grid of runs (ε × clients per round × seeds × …) -> one tidy, resumable CSV.

* :class:`SweepConfig` / :func:`load_sweep_config` -- the grid and its fingerprint.
* :class:`ResultsStore` -- the CSV + ``.sweep.json`` sidecar, written cell by cell.
* :func:`run_sweep` -- run the unfinished cells with a runner (the engine by default).
* :func:`accuracy_verdict` -- final accuracy per (setting, ε, m) with t-intervals over seeds,
  the gap to non-private (paired by seed), the smallest m within a point of it, and the
  total ε over rounds; :func:`verdict_markdown` prints it; :func:`concat_results` joins
  the pieces of a grid.
"""

from ldpsim._src.sweep.config import Cell, SweepConfig, load_sweep_config, parse_epsilon, parse_list
from ldpsim._src.sweep.run import Runner, SweepSummary, group_cells, run_sweep
from ldpsim._src.sweep.store import CELL_COLUMN, ResultsStore, sidecar_path
from ldpsim._src.sweep.verdict import (
    NON_PRIVATE,
    SETTING_LABELS,
    Verdict,
    accuracy_by_round,
    accuracy_verdict,
    concat_results,
    final_accuracy,
    setting_label,
    setting_order,
    total_epsilon,
    verdict_markdown,
)

__all__ = [
    "CELL_COLUMN",
    "Cell",
    "NON_PRIVATE",
    "SETTING_LABELS",
    "Verdict",
    "accuracy_by_round",
    "accuracy_verdict",
    "concat_results",
    "final_accuracy",
    "setting_label",
    "setting_order",
    "total_epsilon",
    "verdict_markdown",
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
