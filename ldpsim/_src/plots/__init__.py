"""Implementation of :mod:`ldpsim.plots` (private; the public names are re-exported there)."""
