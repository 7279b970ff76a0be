"""Implementation of :mod:`ldpsim.audit` (private; the public names are re-exported there)."""
