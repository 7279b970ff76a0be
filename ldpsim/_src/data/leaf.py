"""LEAF FEMNIST: handwritten characters, naturally partitioned by writer.

Reads LEAF's JSON splits (Caldas et al. 2018, "LEAF: A Benchmark for Federated
Settings", arXiv:1812.01097) as produced by ``preprocess.sh``: files
``{train,test}/*.json`` or ``*.json.gz``, each an object
``{"users": [...], "num_samples": [...], "user_data": {uid: {"x": [[784]], "y": [..]}}}``.

Every writer is one natural client.  Images are 28x28 float32 in [0, 1]
(LEAF's ``k/255``; white background = 1.0, unlike MNIST), returned as
``[n, 28, 28, 1]``; labels 0..61 (0-9 digits, 10-35 upper case, 36-61 lower case).

LEAF splits are generated locally from seeds, so no official checksum exists.
Files whose name matches a known split (the ``niid --sf 0.05 -k 0 -t sample``
split with seeds 0, see ``shared/data/README.md``) are verified against the MD5 of
their uncompressed JSON; other files are accepted after structural checks.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.data._files import FIX_HINT, find_subdir, resolve_data_dir
from ldpsim._src.data.dataset import Dataset

__all__ = ["load_femnist", "read_leaf_json"]

FOLDER_NAMES = ("femnist", "leaf_femnist_niid05_subset", "leaf_femnist")
NUM_CLASSES = 62

#: MD5 of the uncompressed JSON of LEAF FEMNIST ``niid --sf 0.05 -k 0 -t sample`` shards.
KNOWN_JSON_MD5 = {
    "train/all_data_0_niid_05_keep_0_train_9.json": "2c88910c305ed2085465a64accadd2de",
    "test/all_data_0_niid_05_keep_0_test_9.json": "02ed032da43b6d34ee88606f2ab74110",
    "train/all_data_1_niid_05_keep_0_train_9.json": "b7e3f5c4f4db522fdaa7c3ddfde7ce5f",
    "test/all_data_1_niid_05_keep_0_test_9.json": "6f2eb63439cf0d9eda70398e1a2dbb75",
    "train/all_data_2_niid_05_keep_0_train_9.json": "c2324ea70f94b83454d10be6d478fcc1",
    "test/all_data_2_niid_05_keep_0_test_9.json": "8f60063207a0f9beaa25b6e88753be29",
    "train/all_data_3_niid_05_keep_0_train_9.json": "86fb123fcb02e8e55eecc3b45a39bcb7",
    "test/all_data_3_niid_05_keep_0_test_9.json": "6523969251cc51859f29b0f4f9e47953",
    "train/all_data_4_niid_05_keep_0_train_9.json": "112e796d9b33c9ece47802497f276d23",
    "test/all_data_4_niid_05_keep_0_test_9.json": "f598f52b8641a07b9c2415f28994ebd9",
    "train/all_data_5_niid_05_keep_0_train_9.json": "7d5ced534c252bfbae1a57116c234632",
    "test/all_data_5_niid_05_keep_0_test_9.json": "5a2befcd55a3c1d4f1a86bfcf515ee57",
    "train/all_data_6_niid_05_keep_0_train_9.json": "8dd5ef350f9ed8e569a682a710de0be3",
    "test/all_data_6_niid_05_keep_0_test_9.json": "47877e041735583ccf7eceecc14577b3",
    "train/all_data_7_niid_05_keep_0_train_9.json": "174dd19e03a20c5b15f1b1946478a4bc",
    "test/all_data_7_niid_05_keep_0_test_9.json": "0c8526ecf530350a9d109e0944e38dd9",
    "train/all_data_8_niid_05_keep_0_train_9.json": "36adb0d9564e176b90927b0446bed0a0",
    "test/all_data_8_niid_05_keep_0_test_9.json": "d94b2e62bfa34a7fbcf796e80ec8ac0d",
    "train/all_data_9_niid_05_keep_0_train_9.json": "17fd33fef4631e811101fb94d72820c0",
    "test/all_data_9_niid_05_keep_0_test_9.json": "8e610455a840ef60c3c5e8572e24a722",
    "train/all_data_10_niid_05_keep_0_train_9.json": "0b3ee3ba103c03947a92af4620a80532",
    "test/all_data_10_niid_05_keep_0_test_9.json": "6bcab52b5ee8130a2452289dfb484fcd",
    "train/all_data_16_niid_05_keep_0_train_9.json": "26545c0e3e1db0a13162c93389ca8185",
    "test/all_data_16_niid_05_keep_0_test_9.json": "6806e0fe9787b26ebdd25ef18bc7d261",
    "train/all_data_17_niid_05_keep_0_train_9.json": "e9f1f932f40b7c6e6983909684e9ab65",
    "test/all_data_17_niid_05_keep_0_test_9.json": "eb836f89f6b1baaf2f0d14232951f8bb",
    "train/all_data_18_niid_05_keep_0_train_9.json": "0ae438e6cb5ad502f1e4f8d9c439b10d",
    "test/all_data_18_niid_05_keep_0_test_9.json": "4a0c3b59544d07b9e12a1ba03a45dd24",
    "train/all_data_19_niid_05_keep_0_train_9.json": "a96516c0d34abb8abd37c4750b1ecdc8",
    "test/all_data_19_niid_05_keep_0_test_9.json": "600cab0708b8fce379f9d6e14cdc0650",
    "train/all_data_20_niid_05_keep_0_train_9.json": "ad92d90d99e22150b38897dc322dfb1c",
    "test/all_data_20_niid_05_keep_0_test_9.json": "a17417669b0d2f256f81c88a4f068032",
    "train/all_data_31_niid_05_keep_0_train_9.json": "b5f4fdc5f9f02e7d688d080228f66adc",
    "test/all_data_31_niid_05_keep_0_test_9.json": "f0ff09fffaea8939193fa38649a84f4f",
    "train/all_data_32_niid_05_keep_0_train_9.json": "d9c65bee3bea0f5f4641d20b0576beae",
    "test/all_data_32_niid_05_keep_0_test_9.json": "6e29f8afe084c246bb04d43791825002",
    "train/all_data_33_niid_05_keep_0_train_9.json": "07757b5bb222d99f7be42e8a9847250e",
    "test/all_data_33_niid_05_keep_0_test_9.json": "8110dd5deeec9f11ba85c0aa68908846",
    "train/all_data_34_niid_05_keep_0_train_9.json": "9df498b96b7d9bf64689b42b89bda6df",
    "test/all_data_34_niid_05_keep_0_test_9.json": "a96351052d21f1e01f1200ef0eb0ffdb",
}


def read_leaf_json(path: str | os.PathLike, *, split: str | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read one LEAF JSON (or .json.gz) file -> ``{writer: (x float32[n, 784], y int32[n])}``.

    The uncompressed content is checked against :data:`KNOWN_JSON_MD5` when the
    file name is a known shard (``split`` is ``"train"`` or ``"test"``).

    Raises:
      LdpsimError: unreadable, corrupt or inconsistent file (names the file and fix).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as err:
        raise LdpsimError(f"cannot read LEAF file {path}: {err}; {FIX_HINT}") from None
    base = path.name[:-3] if path.suffix == ".gz" else path.name
    expected = KNOWN_JSON_MD5.get(f"{split}/{base}")
    if expected is not None:
        actual = hashlib.md5(raw).hexdigest()
        if actual != expected:
            raise LdpsimError(
                f"LEAF file {path} is corrupt: MD5 of its JSON is {actual}, expected {expected}; {FIX_HINT}"
            )
    try:
        obj = json.loads(raw)
        users, nums, data = obj["users"], obj["num_samples"], obj["user_data"]
    except (ValueError, KeyError, TypeError) as err:
        raise LdpsimError(f"{path} is not a LEAF JSON file ({err!r}); {FIX_HINT}") from None
    if not len(users) == len(nums) == len(data):
        raise LdpsimError(f"{path}: users, num_samples and user_data disagree in length")
    out = {}
    for uid, n in zip(users, nums):
        x = np.asarray(data[uid]["x"], dtype=np.float32)
        y = np.asarray(data[uid]["y"], dtype=np.int32)
        if x.shape != (n, 784) or y.shape != (n,):
            raise LdpsimError(f"{path}: writer {uid} has x {x.shape}, y {y.shape}, num_samples {n}")
        out[uid] = (x, y)
    return out


def _read_split(folder: Path, split: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    files = sorted((folder / split).glob("*.json*"), key=lambda p: p.name)
    files = [p for p in files if p.name.endswith((".json", ".json.gz"))]
    if not files:
        raise LdpsimError(f"no LEAF *.json or *.json.gz files in {folder / split}; {FIX_HINT}")
    writers: dict[str, tuple[list, list]] = {}
    for path in files:
        for uid, (x, y) in read_leaf_json(path, split=split).items():
            xs, ys = writers.setdefault(uid, ([], []))
            xs.append(x)
            ys.append(y)
    return {u: (np.concatenate(xs), np.concatenate(ys)) for u, (xs, ys) in writers.items()}


@functools.lru_cache(maxsize=2)
def _load_femnist(folder: str) -> Dataset:
    train = _read_split(Path(folder), "train")
    test = _read_split(Path(folder), "test")
    names = tuple(sorted(train))
    index = {u: i for i, u in enumerate(names)}
    missing = sorted(set(test) - set(train))
    if missing:
        raise LdpsimError(f"FEMNIST test writers without train data in {folder}: {missing[:5]}")

    def stack(split):
        uids = [u for u in names if u in split]
        x = np.concatenate([split[u][0] for u in uids]).reshape(-1, 28, 28, 1)
        y = np.concatenate([split[u][1] for u in uids])
        cid = np.concatenate([np.full(len(split[u][1]), index[u], np.int32) for u in uids])
        return x, y, cid

    x_tr, y_tr, c_tr = stack(train)
    x_te, y_te, c_te = stack(test)
    for arr, what in ((y_tr, "train"), (y_te, "test")):
        if arr.size and (arr.min() < 0 or arr.max() >= NUM_CLASSES):
            raise LdpsimError(f"FEMNIST {what} labels outside 0..61 in {folder}")
    return Dataset(
        name="femnist",
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        num_classes=NUM_CLASSES,
        train_client_ids=c_tr,
        test_client_ids=c_te,
        client_names=names,
        info={"source": "leaf-json", "folder": folder},
    )


def load_femnist(data_dir: str | os.PathLike | None = None) -> Dataset:
    """Load LEAF FEMNIST (one natural client per writer).

    Looks for ``train/`` and ``test/`` in ``<data_dir>/femnist``,
    ``<data_dir>/leaf_femnist_niid05_subset``, ``<data_dir>/leaf_femnist`` or
    ``<data_dir>`` itself.  Clients are the writers sorted by id; the dataset's
    ``train_client_ids``/``test_client_ids`` give every example's writer.  LEAF
    has no canonical download (splits are generated by LEAF's ``preprocess.sh``).

    Raises:
      LdpsimError: folder or files missing or corrupt.
    """
    root = resolve_data_dir(data_dir)
    folder = find_subdir(root, FOLDER_NAMES, ("train", "test"))
    if folder is None:
        raise LdpsimError(
            f"LEAF FEMNIST not found under {root} (looked for train/ and test/ in "
            f"{', '.join(FOLDER_NAMES)} or the folder itself); generate it with LEAF's "
            f"preprocess.sh (e.g. -s niid --sf 0.05 -k 0 -t sample) and {FIX_HINT}"
        )
    return _load_femnist(str(folder.resolve()))
