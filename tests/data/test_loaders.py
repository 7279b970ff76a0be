"""Dataset loaders: IDX (checksums, download), FEMNIST, Shakespeare, synthetic, errors."""

from __future__ import annotations

import gzip
import shutil
import urllib.error
from pathlib import Path

import numpy as np
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim.data import (
    download_file,
    load_dataset,
    load_femnist,
    load_idx_dataset,
    load_shakespeare,
    load_synthetic,
    parse_idx,
    verify_file,
)
from ldpsim._src.data import idx as idx_mod
from ldpsim._src.data import shakespeare as shk

MNIST_SHA = idx_mod.IDX_DATASETS["mnist"]["sha256"]
LABELS = "train-labels-idx1-ubyte.gz"


def test_parse_idx_roundtrip_and_errors():
    arr = np.arange(24, dtype=">i4").reshape(2, 3, 4)
    raw = bytes([0, 0, 0x0C, 3]) + np.array([2, 3, 4], ">u4").tobytes() + arr.tobytes()
    np.testing.assert_array_equal(parse_idx(raw), arr)
    with pytest.raises(LdpsimError, match="bad magic"):
        parse_idx(b"\x01" + raw[1:])
    with pytest.raises(LdpsimError, match="data bytes"):
        parse_idx(raw[:-4])


def test_mnist_idx_matches_published_statistics(data_root):
    ds = load_idx_dataset("mnist", data_root, download=False)
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    np.testing.assert_array_equal(
        np.bincount(ds.y_train), [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    )
    np.testing.assert_array_equal(
        np.bincount(ds.y_test), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    )
    assert abs(ds.x_train.mean() * 255 - 33.318) < 1e-3
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert load_dataset("mnist", data_root, source="idx") is ds  # cached in memory


def test_checksum_verification_good_and_corrupt(data_root, tmp_path):
    good = tmp_path / LABELS
    shutil.copy(data_root / "mnist" / LABELS, good)
    assert verify_file(good, MNIST_SHA[LABELS]) == good
    bad = tmp_path / "bad" / LABELS
    bad.parent.mkdir()
    raw = bytearray(good.read_bytes())
    raw[100] ^= 0xFF
    bad.write_bytes(bytes(raw))
    with pytest.raises(LdpsimError) as err:
        verify_file(bad, MNIST_SHA[LABELS], what="mnist file")
    msg = str(err.value)
    assert str(bad) in msg and MNIST_SHA[LABELS] in msg and "LDPSIM_DATA_DIR" in msg and "--data-dir" in msg


def _mnist_copy(data_root: Path, dest: Path, skip=(), corrupt=()):
    dest.mkdir(parents=True)
    for name in idx_mod.FILES:
        if name in skip:
            continue
        src = data_root / "mnist" / name
        if name in corrupt:
            (dest / name).write_bytes(gzip.compress(b"not mnist"))
        else:
            (dest / name).symlink_to(src)


def test_loader_rejects_corrupt_and_missing_files(data_root, tmp_path):
    _mnist_copy(data_root, tmp_path / "a" / "mnist", corrupt=(LABELS,))
    with pytest.raises(LdpsimError, match=f"corrupt.*{MNIST_SHA[LABELS]}"):
        load_idx_dataset("mnist", tmp_path / "a", download=False)
    _mnist_copy(data_root, tmp_path / "b" / "mnist", skip=(LABELS,))
    with pytest.raises(LdpsimError, match=f"{LABELS} is missing.*{MNIST_SHA[LABELS]}"):
        load_idx_dataset("mnist", tmp_path / "b", download=False)
    # With downloads on but no network: the error lists the URLs tried and the fix.
    def offline(url):
        raise urllib.error.URLError("network unreachable")

    with pytest.raises(LdpsimError, match="could not download.*network unreachable.*--data-dir"):
        load_idx_dataset("mnist", tmp_path / "b", opener=offline)
    assert not any(p.name.endswith(".part") for p in (tmp_path / "b" / "mnist").iterdir())


def test_download_verifies_and_fills_missing_files(data_root, tmp_path):
    src = data_root / "mnist" / LABELS
    # file:// URL through the default opener.
    out = download_file(src.resolve().as_uri(), tmp_path / "dl" / LABELS, MNIST_SHA[LABELS])
    assert out.read_bytes() == src.read_bytes()
    # Wrong content: rejected, nothing left behind.
    with pytest.raises(LdpsimError, match="expected " + MNIST_SHA["t10k-labels-idx1-ubyte.gz"]):
        download_file(src.resolve().as_uri(), tmp_path / "x" / "f.gz", MNIST_SHA["t10k-labels-idx1-ubyte.gz"])
    assert list((tmp_path / "x").iterdir()) == []
    # The loader downloads the missing file from the first canonical mirror that works.
    _mnist_copy(data_root, tmp_path / "c" / "mnist", skip=(LABELS,))
    seen = []

    def fake_opener(url):
        seen.append(url)
        if len(seen) == 1:
            raise urllib.error.URLError("mirror down")
        return open(data_root / "mnist" / url.rsplit("/", 1)[1], "rb")

    ds = load_idx_dataset("mnist", tmp_path / "c", opener=fake_opener)
    assert len(seen) == 2 and all(u.endswith(LABELS) for u in seen)
    assert seen[0].startswith(idx_mod.IDX_DATASETS["mnist"]["urls"][0])
    np.testing.assert_array_equal(ds.y_train, load_idx_dataset("mnist", data_root).y_train)


def test_femnist_counts(data_root):
    ds = load_femnist(data_root)
    assert ds.num_natural_clients == 105 and len(ds.client_names) == 105
    assert ds.num_train == 14708 and ds.num_test == 1685
    assert ds.x_train.shape == (14708, 28, 28, 1) and ds.num_classes == 62
    assert len(np.unique(ds.train_client_ids)) == 105 and len(np.unique(ds.test_client_ids)) == 105
    assert set(np.unique(ds.y_train)) == set(range(62))
    assert ds.x_train.min() >= 0.0 and ds.x_train.max() <= 1.0
    assert load_dataset("femnist", data_root) is ds


def test_femnist_corrupt_shard_is_named(data_root, tmp_path):
    folder = tmp_path / "femnist"
    for split in ("train", "test"):
        (folder / split).mkdir(parents=True)
    name = "all_data_0_niid_05_keep_0_train_9.json.gz"
    (folder / "train" / name).write_bytes(gzip.compress(b'{"users": [], "num_samples": [], "user_data": {}}'))
    with pytest.raises(LdpsimError, match=f"{name}.*corrupt.*2c88910c305ed2085465a64accadd2de"):
        load_femnist(tmp_path)


def test_shakespeare_counts_and_windows(data_root):
    ds = load_shakespeare(data_root)
    assert ds.num_natural_clients == 715
    assert ds.info["num_train_snippets"] == 16068 and ds.info["num_test_snippets"] == 2356
    assert ds.x_train.shape[1:] == (80,) and ds.x_train.dtype == np.int32
    assert ds.num_classes == len(shk.VOCAB) == 90
    assert ds.y_train.min() >= 0 and ds.y_train.max() < 90
    # Every role has train and test examples.
    assert len(np.unique(ds.train_client_ids)) == len(np.unique(ds.test_client_ids)) == 715


def test_shakespeare_window_encoding():
    x, y = shk.windows(b"abcdef", seq_len=4, stride=3)
    # tokens: PAD PAD PAD BOS a b c d e f EOS; targets at 4, 7, 10.
    assert shk.decode(y) == "ad<eos>"
    assert shk.decode(x[0]) == "<pad><pad><pad><bos>" and shk.decode(x[1]) == "<bos>abc"
    assert shk.decode(x[2]) == "cdef"
    empty_x, empty_y = shk.windows(b"", seq_len=4, stride=4)
    assert empty_y.tolist() == [shk.EOS] and len(empty_x) == 1
    assert shk.decode(shk.encode("Hello,\nworld!")) == "Hello,\nworld!"
    assert shk.encode("}").tolist() == [shk.OOV]


def test_synthetic_is_deterministic_and_per_device():
    a = load_synthetic(20, alpha=0.5, beta=0.5, seed=3)
    b = load_dataset("synthetic(0.5,0.5)", num_clients=40, seed=3)
    assert a.x_train.shape[1:] == (60,) and a.num_classes == 10 and a.num_natural_clients == 20
    # Device k's data does not depend on how many devices are generated.
    for k in (0, 7, 19):
        np.testing.assert_array_equal(a.x_train[a.train_client_ids == k], b.x_train[b.train_client_ids == k])
    c = load_synthetic(20, alpha=0.5, beta=0.5, seed=4)
    assert not np.array_equal(a.y_train[:50], c.y_train[:50])
    # Heterogeneity: with alpha = beta = 1 devices' label histograms differ much more
    # than under synthetic_iid (measured as mean total-variation distance to the pool).
    def mean_tv(ds):
        pool = np.bincount(ds.y_train, minlength=10) / ds.num_train
        tv = [0.5 * np.abs(np.bincount(ds.y_train[ds.train_client_ids == k], minlength=10)
                           / np.sum(ds.train_client_ids == k) - pool).sum() for k in range(30)]
        return np.mean(tv)

    het = load_synthetic(30, alpha=1, beta=1, samples_per_client=200)
    iid = load_dataset("synthetic_iid", num_clients=30, samples_per_client=200)
    assert mean_tv(het) > 2 * mean_tv(iid)


def test_bad_names_and_parameters():
    with pytest.raises(LdpsimError, match="unknown dataset 'no_such_set'; known: mnist, fashion_mnist, femnist"):
        load_dataset("no_such_set", "/nonexistent")
    with pytest.raises(LdpsimError, match="source"):
        load_dataset("mnist", source="torch")
    with pytest.raises(LdpsimError, match="alpha"):
        load_synthetic(5, alpha=-1)
    with pytest.raises(LdpsimError, match="Shakespeare not found"):
        load_shakespeare("/nonexistent")
    with pytest.raises(LdpsimError, match="FEMNIST not found"):
        load_femnist("/nonexistent")


def test_offline_mnist_fails_fast_without_tfds_and_names_the_fix(tmp_path, monkeypatch):
    # No --data-dir / LDPSIM_DATA_DIR and no network: every mirror times out. The loader must
    # not go through TFDS (which hangs for minutes offline) and must use a short timeout.
    import socket

    from ldpsim._src.data import _files, tfds as tfds_mod

    monkeypatch.delenv("LDPSIM_DATA_DIR", raising=False)
    monkeypatch.setenv("LDPSIM_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def dead_urlopen(url, timeout=None):
        calls.append((url, timeout))
        raise socket.timeout("timed out")

    def no_tfds(*a, **k):
        raise AssertionError("TFDS must only be used with source='tfds'")

    monkeypatch.setattr(_files.urllib.request, "urlopen", dead_urlopen)
    monkeypatch.setattr(tfds_mod, "load_tfds", no_tfds)
    with pytest.raises(LdpsimError) as err:
        load_dataset("mnist")
    msg = str(err.value)
    folder = tmp_path / "cache" / "data" / "mnist"
    for name in idx_mod.FILES:
        assert name in msg
    assert str(folder) in msg and "--data-dir" in msg and "LDPSIM_DATA_DIR" in msg
    assert "timed out" in msg
    # Stopped at the first file: one attempt per mirror, each with a short timeout.
    urls = idx_mod.IDX_DATASETS["mnist"]["urls"]
    assert [u for u, _ in calls] == [u + idx_mod.FILES[0] for u in urls]
    assert all(t is not None and t <= 10 for _, t in calls)
    assert not folder.exists() or not any(folder.iterdir())


def test_download_stops_trying_mirrors_after_the_budget(tmp_path, monkeypatch):
    from ldpsim._src.data import _files

    clock = iter(range(0, 1000, 10))  # each reading of the clock: 10 s later
    monkeypatch.setattr(_files.time, "monotonic", lambda: next(clock))
    tried = []

    def hanging(url):
        tried.append(url)
        raise TimeoutError("timed out")

    with pytest.raises(LdpsimError, match=r"1 more mirror\(s\) not tried \(over the 15 s budget\)"):
        download_file(["http://a/f", "http://b/f", "http://c/f"], tmp_path / "f", "0" * 64,
                      opener=hanging, budget=15.0)
    assert tried == ["http://a/f", "http://b/f"]
