"""Implementation of :mod:`ldpsim.fl` (private; the public names are re-exported there)."""
