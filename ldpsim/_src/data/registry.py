"""``load_dataset(name, data_dir)``: one entry point for every dataset."""

from __future__ import annotations

import os
import re

from ldpsim._src._checks import LdpsimError, check_choice, suggestion
from ldpsim._src.data._files import find_subdir, resolve_data_dir
from ldpsim._src.data.dataset import Dataset
from ldpsim._src.data import idx, leaf, shakespeare, synthetic, tfds

__all__ = ["KNOWN_DATASETS", "load_dataset"]

#: Built-in names; any other TFDS image-classification name also works (``tfds`` extra).
KNOWN_DATASETS = ("mnist", "fashion_mnist", "femnist", "shakespeare", "synthetic", "synthetic_iid")
SOURCES = ("auto", "idx", "tfds")

_SYNTH = re.compile(r"^synthetic\(\s*([0-9.eE+-]+)\s*,\s*([0-9.eE+-]+)\s*\)$")


def _known_message(name: str) -> str:
    return (
        f"unknown dataset {name!r}" + suggestion(str(name).lower().replace("-", "_"),
                                                 KNOWN_DATASETS)
        + f"; known: {', '.join(KNOWN_DATASETS)}, 'synthetic(ALPHA,BETA)', "
        f"or any TFDS image-classification dataset by name (needs `pip install 'ldpsim[tfds]'`)"
    )


def load_dataset(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    source: str = "auto",
    download: bool = True,
    **kwargs,
) -> Dataset:
    """Load a dataset by name (arrays cached in memory per process).

    Names:
      * ``mnist``, ``fashion_mnist``: IDX files (verified by SHA-256) or TFDS.
        ``source="auto"`` reads the IDX files from the data folder, downloading
        missing ones from the canonical mirrors (verified; offline this fails in
        about 15 s with the files, the folder and the fix named).  TFDS (which
        may download on its own, and hangs for minutes offline) is used only with
        ``source="tfds"``.  Both paths give identical arrays (tested).
      * ``femnist``: LEAF JSON, one natural client per writer.
      * ``shakespeare``: TFF HDF5, next-character windows (kwargs ``seq_len``, ``stride``).
      * ``synthetic``, ``synthetic(ALPHA,BETA)``, ``synthetic_iid``: FedProx
        synthetic data, no files (kwargs of :func:`~ldpsim.data.load_synthetic`:
        ``num_clients``, ``alpha``, ``beta``, ``seed``, ...).
      * any other name: a TFDS image-classification dataset (``tfds`` extra).

    Args:
      name: dataset name (case-insensitive; ``-`` and ``_`` are equivalent).
      data_dir: data folder (``--data-dir``); default ``$LDPSIM_DATA_DIR``, then the
        download cache.  For TFDS datasets it is used as TFDS' ``manual_dir`` when
        it holds ``<name>/``.
      source: ``"auto"``, ``"idx"`` or ``"tfds"`` (for MNIST and Fashion-MNIST).
      download: allow downloading missing IDX files.
      **kwargs: passed to the specific loader.

    Raises:
      LdpsimError: unknown name (lists the known ones), missing or corrupt files
        (names file, expected checksum and fix), or bad parameters.
    """
    check_choice("source", source, SOURCES)
    key = str(name).strip().lower().replace("-", "_")
    match = _SYNTH.match(key)
    if match:
        kwargs.setdefault("alpha", float(match.group(1)))
        kwargs.setdefault("beta", float(match.group(2)))
        return synthetic.load_synthetic(**kwargs)
    if key == "synthetic":
        return synthetic.load_synthetic(**kwargs)
    if key == "synthetic_iid":
        return synthetic.load_synthetic(iid=True, **kwargs)
    if key == "femnist":
        return leaf.load_femnist(data_dir, **kwargs)
    if key == "shakespeare":
        return shakespeare.load_shakespeare(data_dir, **kwargs)
    root = resolve_data_dir(data_dir)
    if key in idx.IDX_DATASETS:
        if source in ("idx", "auto"):
            return idx.load_idx_dataset(key, data_dir, download=download)
        local = find_subdir(root, (key,), idx.FILES)
        return tfds.load_tfds(key, manual_dir=local, **kwargs)
    if source == "idx":
        raise LdpsimError(f"source='idx' supports only {', '.join(idx.IDX_DATASETS)}; got {name!r}")
    if not tfds.tfds_available():
        raise LdpsimError(_known_message(name))
    local = find_subdir(root, (key,), ())
    manual = local if local is not None and local != root else None
    try:
        return tfds.load_tfds(key, manual_dir=manual, **kwargs)
    except LdpsimError as err:
        if "unknown TFDS dataset" in str(err):
            raise LdpsimError(_known_message(name)) from None
        raise
