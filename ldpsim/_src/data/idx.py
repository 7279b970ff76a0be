"""MNIST and Fashion-MNIST from their original IDX files (NumPy only, no TensorFlow).

The IDX format (LeCun et al., http://yann.lecun.com/exdb/mnist/): a big-endian
header ``0x00 0x00 <dtype code> <ndim>``, then ``ndim`` big-endian uint32 sizes,
then the data in C order.  Files are read gzip-compressed as distributed.

Each file is verified against its published SHA-256 before it is parsed; a file
that is missing is downloaded from the canonical source (then verified).
"""

from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path
from typing import Callable

import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.data._files import DATA_DIR_ENV, FIX_HINT, download_file, find_subdir, resolve_data_dir, verify_file
from ldpsim._src.data.dataset import Dataset

__all__ = ["IDX_DATASETS", "load_idx_dataset", "parse_idx", "read_idx_file"]

_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)

#: Per dataset: canonical URLs (tried in order) and the published SHA-256 of each file.
IDX_DATASETS: dict[str, dict] = {
    "mnist": {
        "urls": (
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "http://yann.lecun.com/exdb/mnist/",
        ),
        "sha256": {
            "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        },
        "shape": (28, 28),
        "num_classes": 10,
    },
    "fashion_mnist": {
        "urls": (
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
            "https://storage.googleapis.com/tensorflow/tf-keras-datasets/",
        ),
        "sha256": {
            "train-images-idx3-ubyte.gz": "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "train-labels-idx1-ubyte.gz": "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "t10k-images-idx3-ubyte.gz": "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "t10k-labels-idx1-ubyte.gz": "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        },
        "shape": (28, 28),
        "num_classes": 10,
    },
}


def parse_idx(raw: bytes, *, name: str = "<bytes>") -> np.ndarray:
    """Parse uncompressed IDX bytes into a NumPy array (native byte order).

    Raises:
      LdpsimError: bad magic, unknown dtype code, or a size that disagrees with
        the header.
    """
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise LdpsimError(f"{name} is not an IDX file (bad magic {raw[:4].hex()})")
    code, ndim = raw[2], raw[3]
    if code not in _DTYPES:
        raise LdpsimError(f"{name}: unknown IDX dtype code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise LdpsimError(f"{name}: truncated IDX header")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_DTYPES[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise LdpsimError(
            f"{name}: IDX header says shape {shape} ({expected} bytes) but the file has "
            f"{len(raw) - header} data bytes"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def read_idx_file(path: str | os.PathLike, *, magic: int | None = None) -> np.ndarray:
    """Read one IDX file (gzip-compressed if it ends in ``.gz``).

    Args:
      path: the file.
      magic: expected magic number (2051 for images, 2049 for labels), checked if given.
    """
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise LdpsimError(f"{path} is not a valid gzip file ({err}); {FIX_HINT}") from None
    if magic is not None and len(raw) >= 4 and int.from_bytes(raw[:4], "big") != magic:
        raise LdpsimError(
            f"{path}: IDX magic {int.from_bytes(raw[:4], 'big')}, expected {magic}; {FIX_HINT}"
        )
    return parse_idx(raw, name=str(path))


def ensure_idx_files(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = True,
    opener: Callable | None = None,
) -> Path:
    """Folder holding the four verified IDX files of ``name``, downloading missing ones.

    Existing files are verified against the published SHA-256; missing files are
    downloaded into ``<data_dir>/<name>/`` when ``download`` is true.

    Raises:
      LdpsimError: a corrupt file (never overwritten silently), or a missing one
        that cannot be downloaded; the message names file, checksum and fix.
    """
    spec = IDX_DATASETS[name]
    root = resolve_data_dir(data_dir)
    folder = find_subdir(root, (name,), FILES[:1]) or root / name
    for fname in FILES:
        path = folder / fname
        expected = spec["sha256"][fname]
        if not path.exists():
            if not download:
                verify_file(path, expected, what=f"{name} file")
            try:
                download_file([u + fname for u in spec["urls"]], path, expected, opener=opener)
            except LdpsimError as err:
                # Fail at the first file that cannot be fetched (offline: the others would
                # fail the same way), naming every missing file, the folders and the fix.
                missing = [f for f in FILES if not (folder / f).exists()]
                searched = " and ".join(dict.fromkeys(str(p) for p in (root / name, root)))
                raise LdpsimError(
                    f"{name}: the IDX file(s) {', '.join(missing)} are not in {searched} and could "
                    f"not be downloaded ({err}). Fix: pass --data-dir DIR (Python: data_dir=DIR) "
                    f"or set {DATA_DIR_ENV}=DIR, where DIR/{name}/ (or DIR itself) holds the four "
                    f"files {', '.join(FILES)}"
                ) from None
        verify_file(path, expected, what=f"{name} file")
    return folder


@functools.lru_cache(maxsize=8)
def _load_verified(name: str, folder: str) -> Dataset:
    spec = IDX_DATASETS[name]
    arrays = {}
    for fname in FILES:
        is_images = "images" in fname
        arr = read_idx_file(Path(folder) / fname, magic=2051 if is_images else 2049)
        arrays[fname] = arr
    x_train, y_train = arrays[FILES[0]], arrays[FILES[1]]
    x_test, y_test = arrays[FILES[2]], arrays[FILES[3]]
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if x.shape[1:] != spec["shape"] or x.shape[0] != y.shape[0]:
            raise LdpsimError(
                f"{name} {split}: images {x.shape} and labels {y.shape} do not match "
                f"[n, {spec['shape']}] and [n]; {FIX_HINT}"
            )
    scale = np.float32(255.0)
    return Dataset(
        name=name,
        x_train=(x_train.astype(np.float32) / scale)[..., None],
        y_train=y_train.astype(np.int32),
        x_test=(x_test.astype(np.float32) / scale)[..., None],
        y_test=y_test.astype(np.int32),
        num_classes=spec["num_classes"],
        info={"source": "idx", "folder": folder},
    )


def load_idx_dataset(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = True,
    opener: Callable | None = None,
) -> Dataset:
    """Load MNIST or Fashion-MNIST from IDX files (verified, downloaded if missing).

    Images are float32 ``k / 255`` in [0, 1], shape ``[n, 28, 28, 1]`` (NHWC);
    labels int32.  Parsed arrays are cached in memory per folder.

    Args:
      name: ``"mnist"`` or ``"fashion_mnist"``.
      data_dir: folder holding ``<name>/`` (or the four files directly); see
        :func:`ldpsim.data.resolve_data_dir` for the default.
      download: fetch missing files from the canonical source.
      opener: URL opener for the download (tests).
    """
    if name not in IDX_DATASETS:
        raise LdpsimError(f"no IDX dataset {name!r}; known: {', '.join(IDX_DATASETS)}")
    folder = ensure_idx_files(name, data_dir, download=download, opener=opener)
    return _load_verified(name, str(folder.resolve()))
