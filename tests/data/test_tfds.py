"""The TFDS path gives exactly the IDX path's examples (offline, via manual_dir)."""

from __future__ import annotations

import numpy as np
import pytest

from ldpsim.data import load_idx_dataset, load_tfds


def _canonical(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Rows (label, pixel bytes) sorted: equal iff the two splits hold the same examples."""
    pixels = np.rint(x.reshape(len(x), -1) * 255).astype(np.uint8)
    assert np.array_equal(pixels.astype(np.float32) / np.float32(255), x.reshape(len(x), -1))
    rows = np.concatenate([y.astype(np.uint8)[:, None], pixels], axis=1)
    return np.sort(np.ascontiguousarray(rows).view(f"V{rows.shape[1]}").ravel())


@pytest.mark.slow
def test_mnist_idx_equals_tfds(data_root, tmp_path_factory):
    # Prepares MNIST with TFDS from the four IDX files, no network (~30-80 s on 2 cores),
    # into a fresh TFDS data dir so that the offline preparation itself is tested.
    tfds_dir = tmp_path_factory.mktemp("tfds")
    via_tfds = load_tfds("mnist", manual_dir=data_root / "mnist", tfds_data_dir=tfds_dir)
    via_idx = load_idx_dataset("mnist", data_root, download=False)
    assert via_tfds.info["source"] == "tfds" and via_idx.info["source"] == "idx"
    assert via_tfds.num_classes == via_idx.num_classes == 10
    for split in ("train", "test"):
        xt, yt = getattr(via_tfds, f"x_{split}"), getattr(via_tfds, f"y_{split}")
        xi, yi = getattr(via_idx, f"x_{split}"), getattr(via_idx, f"y_{split}")
        assert (xt.dtype, xt.shape, yt.dtype) == (xi.dtype, xi.shape, yi.dtype)
        # TFDS stores examples in its own (hashed-key) order; the IDX files in the
        # original order.  The same multiset of (image, label) pairs, bit for bit:
        np.testing.assert_array_equal(_canonical(xt, yt), _canonical(xi, yi), err_msg=split)
        assert not np.array_equal(yt, yi)  # (the order does differ, so sorting is needed)
