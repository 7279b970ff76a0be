"""Publication figures from ldpsim's tidy tables (matplotlib, headless).

:func:`plot` draws one of :data:`KINDS` -- ``accuracy-vs-epsilon``,
``accuracy-vs-clients``, ``noise-vs-clients`` (with the theory line) and
``convergence`` -- with mean ± std bands over seeds, and saves PNG, SVG or PDF.

:func:`plot_accuracy_ci`, :func:`plot_curves_ci` and :func:`plot_gap_table` draw a
converged verdict (:func:`ldpsim.sweep.accuracy_verdict`) with t-intervals over seeds.
"""

from ldpsim._src.plots.figures import KINDS, load_results, plot
from ldpsim._src.plots.verdict import plot_accuracy_ci, plot_curves_ci, plot_gap_table

__all__ = ["KINDS", "load_results", "plot", "plot_accuracy_ci", "plot_curves_ci", "plot_gap_table"]
