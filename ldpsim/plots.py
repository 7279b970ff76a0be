"""Publication figures from ldpsim's tidy tables (matplotlib, headless).

:func:`plot` draws one of :data:`KINDS` -- ``accuracy-vs-epsilon``,
``accuracy-vs-clients``, ``noise-vs-clients`` (with the theory line) and
``convergence`` -- with mean ± std bands over seeds, and saves PNG, SVG or PDF.

:func:`plot_accuracy_ci`, :func:`plot_curves_ci` and :func:`plot_gap_table` draw a
converged verdict (:func:`ldpsim.sweep.accuracy_verdict`) with t-intervals over seeds.
:func:`plot_frontier` draws the mechanism frontier of :func:`ldpsim.privacy.frontier`
(MSE of the decoded mean against ε, measured and theory, beside the minimax order).

Importing this module does not import JAX: the figures read tables, they compute nothing.
"""

from __future__ import annotations

from ldpsim._src.plots.figures import KINDS, load_results, plot
from ldpsim._src.plots.frontier import plot_frontier
from ldpsim._src.plots.verdict import plot_accuracy_ci, plot_curves_ci, plot_gap_table

__all__ = ["KINDS", "load_results", "plot", "plot_accuracy_ci", "plot_curves_ci", "plot_gap_table",
           "plot_frontier"]
