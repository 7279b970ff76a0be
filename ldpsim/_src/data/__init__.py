"""Implementation of :mod:`ldpsim.data` (private; the public names are re-exported there)."""
