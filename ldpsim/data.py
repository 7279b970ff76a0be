"""Datasets (real and synthetic), partitioners and client populations.

Typical use::

    from ldpsim import data
    ds = data.load_dataset("mnist", data_dir)            # Dataset (NumPy arrays)
    pop = data.make_population(ds, "dirichlet", 100, alpha=0.5, seed=0)
    big = data.make_population(ds, "sampled", 10**6, alpha=0.5, examples_per_client=32)
    x, y, counts = pop.gather(client_ids)                 # jittable, inside the engine

Host-side NumPy except the populations' ``gather``, which is JAX.
"""

from ldpsim._src.data._files import DATA_DIR_ENV, cache_dir, download_file, resolve_data_dir, verify_file
from ldpsim._src.data.dataset import Dataset
from ldpsim._src.data.idx import load_idx_dataset, parse_idx, read_idx_file
from ldpsim._src.data.leaf import load_femnist
from ldpsim._src.data.partition import (
    PARTITIONS,
    dirichlet_partition,
    iid_partition,
    make_population,
    natural_partition,
    shard_partition,
    to_population,
)
from ldpsim._src.data.population import PaddedPopulation, SampledPopulation, decode_inputs
from ldpsim._src.data.registry import KNOWN_DATASETS, load_dataset
from ldpsim._src.data.shakespeare import load_shakespeare
from ldpsim._src.data.synthetic import load_synthetic
from ldpsim._src.data.tfds import load_tfds, tfds_available

__all__ = [
    "DATA_DIR_ENV",
    "KNOWN_DATASETS",
    "PARTITIONS",
    "Dataset",
    "PaddedPopulation",
    "SampledPopulation",
    "cache_dir",
    "decode_inputs",
    "dirichlet_partition",
    "download_file",
    "iid_partition",
    "load_dataset",
    "load_femnist",
    "load_idx_dataset",
    "load_shakespeare",
    "load_synthetic",
    "load_tfds",
    "make_population",
    "natural_partition",
    "parse_idx",
    "read_idx_file",
    "resolve_data_dir",
    "shard_partition",
    "tfds_available",
    "to_population",
    "verify_file",
]
