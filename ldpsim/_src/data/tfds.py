"""Image-classification datasets through tensorflow-datasets (the ``tfds`` extra).

Any TFDS dataset with an image and a class label (``mnist``, ``fashion_mnist``,
``cifar10``, ``emnist``, ...) loads by name.  Prepared TFDS data goes to
``<ldpsim cache>/tfds`` (see :func:`ldpsim.data.cache_dir`), never the
repository.  Offline preparation: with ``manual_dir=DIR`` holding the raw files
(for MNIST the four IDX ``.gz`` files), TFDS prepares the dataset without network,
as in ``tfds.builder("mnist").download_and_prepare(
download_config=tfds.download.DownloadConfig(manual_dir=DIR))``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.data._files import cache_dir
from ldpsim._src.data.dataset import Dataset

__all__ = ["load_tfds", "tfds_available"]


def tfds_available() -> bool:
    """Whether ``tensorflow_datasets`` (and TensorFlow) can be imported."""
    try:
        import tensorflow_datasets  # noqa: F401
    except Exception:
        return False
    return True


def _import_tfds():
    try:
        import tensorflow_datasets as tfds
    except Exception as err:
        raise LdpsimError(
            f"tensorflow-datasets is not usable ({type(err).__name__}: {err}); install the extra "
            f"with `pip install 'ldpsim[tfds]'` (tensorflow-datasets and tensorflow-cpu)"
        ) from None
    return tfds


@functools.lru_cache(maxsize=4)
def _load(name: str, manual_dir: str | None, tfds_dir: str) -> Dataset:
    tfds = _import_tfds()
    try:
        builder = tfds.builder(name, data_dir=tfds_dir)
    except Exception as err:  # DatasetNotFoundError and friends
        raise LdpsimError(f"unknown TFDS dataset {name!r}: {err}") from None
    features = builder.info.features
    keys = getattr(builder.info, "supervised_keys", None)
    if not keys or len(keys) != 2:
        raise LdpsimError(f"TFDS dataset {name!r} has no (input, label) supervised keys")
    label_feature = features[keys[1]]
    num_classes = getattr(label_feature, "num_classes", None)
    if num_classes is None:
        raise LdpsimError(f"TFDS dataset {name!r} is not a classification dataset")
    config = tfds.download.DownloadConfig(manual_dir=manual_dir) if manual_dir else None
    try:
        builder.download_and_prepare(download_config=config)
    except Exception as err:
        hint = f" from manual_dir={manual_dir}" if manual_dir else " (network needed unless prepared)"
        raise LdpsimError(
            f"TFDS could not prepare {name!r}{hint}: {type(err).__name__}: {err}. For offline use "
            f"put the raw files in a folder and pass it as --data-dir"
        ) from None
    splits = builder.info.splits
    test_split = "test" if "test" in splits else "validation" if "validation" in splits else None
    if "train" not in splits or test_split is None:
        raise LdpsimError(f"TFDS dataset {name!r} lacks a train and a test/validation split")
    arrays = {}
    for split in ("train", test_split):
        x, y = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1, as_supervised=True))
        if x.dtype == np.uint8:
            x = x.astype(np.float32) / np.float32(255.0)
        arrays[split] = (np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int32))
    return Dataset(
        name=name,
        x_train=arrays["train"][0],
        y_train=arrays["train"][1],
        x_test=arrays[test_split][0],
        y_test=arrays[test_split][1],
        num_classes=int(num_classes),
        info={"source": "tfds", "tfds_data_dir": tfds_dir, "manual_dir": manual_dir},
    )


def load_tfds(
    name: str,
    *,
    manual_dir: str | os.PathLike | None = None,
    tfds_data_dir: str | os.PathLike | None = None,
) -> Dataset:
    """Load a TFDS image-classification dataset as float32 NHWC images in [0, 1].

    Args:
      name: TFDS name (``"mnist"``, ``"fashion_mnist"``, ``"cifar10"``, ...).
      manual_dir: folder with the raw files for offline preparation.
      tfds_data_dir: where TFDS keeps prepared data (default ``<cache>/tfds``).

    Raises:
      LdpsimError: tensorflow-datasets missing, unknown name, not a classification
        dataset, or preparation failed (e.g. no network and no ``manual_dir``).
    """
    tfds_dir = Path(tfds_data_dir) if tfds_data_dir is not None else cache_dir() / "tfds"
    manual = str(Path(manual_dir).resolve()) if manual_dir is not None else None
    return _load(name, manual, str(tfds_dir))
