"""Publication figures from ldpsim's tidy tables (matplotlib, headless).

:func:`plot` draws one of :data:`KINDS` -- ``accuracy-vs-epsilon``,
``accuracy-vs-clients``, ``noise-vs-clients`` (with the theory line) and
``convergence`` -- with mean ± std bands over seeds, and saves PNG, SVG or PDF.
"""

from ldpsim._src.plots.figures import KINDS, load_results, plot

__all__ = ["KINDS", "load_results", "plot"]
