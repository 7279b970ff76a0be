"""Datasets (real and synthetic), partitioners and client populations.

Public API (see each module):

* :class:`Dataset` -- NumPy arrays returned by every loader.
* :class:`PaddedPopulation`, :class:`SampledPopulation` -- what the engine gathers
  a cohort's data from (``population.gather(client_ids) -> (x, y, counts)``).
"""

from ldpsim.data.dataset import Dataset
from ldpsim.data.population import PaddedPopulation, SampledPopulation, decode_inputs

__all__ = ["Dataset", "PaddedPopulation", "SampledPopulation", "decode_inputs"]
