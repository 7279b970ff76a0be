"""ldpsim: federated learning under local differential privacy, simulated at scale in JAX.

Layers (dependencies point downwards only):

* :mod:`ldpsim.privacy` -- clipping, mechanisms, calibration, accounting (no FL).
* :mod:`ldpsim.data`, :mod:`ldpsim.models` -- datasets, partitions, flax models.
* :mod:`ldpsim.fl` -- the simulation engine (one client written once, vmapped).
* :mod:`ldpsim.sweep`, :mod:`ldpsim.plots`, :mod:`ldpsim.cli` -- what users run.
"""

from ldpsim._checks import LdpsimError

__version__ = "0.1.0"

__all__ = ["LdpsimError", "__version__"]
