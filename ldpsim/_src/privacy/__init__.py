"""Implementation of :mod:`ldpsim.privacy` (private; the public names are re-exported there)."""
