"""Implementation of :mod:`ldpsim.sweep` (private; the public names are re-exported there)."""
