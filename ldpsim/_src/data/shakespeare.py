"""Federated Shakespeare (TFF HDF5): next-character prediction, one client per role.

Reads TensorFlow Federated's ``shakespeare_{train,test}.h5`` (layout
``/examples/<client_id>/snippets``, one byte string per snippet), built from
LEAF's Shakespeare preprocessing (Caldas et al. 2018, arXiv:1812.01097): 715
speaking roles, 16,068 train and 2,356 test snippets.

Task (LEAF's formulation): predict the next character from the previous
``seq_len`` characters (default 80, as in LEAF).  Each snippet is encoded as
``[PAD] * (seq_len - 1) + [BOS] + chars + [EOS]`` and cut into windows: example
``j`` has input ``tokens[t - seq_len : t]`` and label ``tokens[t]`` for
``t = seq_len + j * stride`` (``stride`` defaults to ``seq_len``: every
character is a target about once per ``stride`` positions).  Every snippet, even
an empty one, yields at least one example (its first target is its first
character, or EOS).

Vocabulary (:data:`VOCAB`, size 90): 0 = PAD, 1 = BOS, 2 = EOS, 3 = OOV, then
the 86 characters of TFF's ``CHAR_VOCAB`` in TFF's order as ids 4..89.
Inputs are int32 token ids ``[n, seq_len]``; labels are int32 ids in 0..89.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.data._files import FIX_HINT, find_subdir, resolve_data_dir, verify_file
from ldpsim._src.data.dataset import Dataset

__all__ = ["VOCAB", "decode", "encode", "load_shakespeare", "read_snippets"]

PAD, BOS, EOS, OOV = 0, 1, 2, 3
#: TFF's character vocabulary (tff.simulation.datasets.shakespeare), ids 4..89.
CHAR_VOCAB = "dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#'/37;?bfjnrvzBFJNRVZ\"&*.26:\naeimquyAEIMQUY]!%)-159\r"
VOCAB: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<oov>") + tuple(CHAR_VOCAB)
_LOOKUP = np.full(256, OOV, dtype=np.int32)
for _i, _c in enumerate(CHAR_VOCAB):
    _LOOKUP[ord(_c)] = _i + 4

FOLDER_NAMES = ("shakespeare", "tff_shakespeare")
FILES = {"train": "shakespeare_train.h5", "test": "shakespeare_test.h5"}
#: SHA-256 of the TFF HDF5 files (as extracted from TFF's shakespeare.tar.bz2).
SHA256 = {
    "shakespeare_train.h5": "67100f52adfb6d5ece73c1a942b6863731a477bf09421a3c79c9937612895344",
    "shakespeare_test.h5": "55d3a635bffe5c4f71610a8d0cf86c1b369bfd7793e0635b5a83cde1f195689e",
}
TFF_ARCHIVE_URL = "https://storage.googleapis.com/tff-datasets-public/shakespeare.tar.bz2"


def encode(text: str | bytes) -> np.ndarray:
    """Character ids of ``text`` (bytes are decoded as Latin-1; unknown -> OOV)."""
    if isinstance(text, str):
        text = text.encode("latin-1", errors="replace")
    return _LOOKUP[np.frombuffer(text, dtype=np.uint8)]


def decode(ids) -> str:
    """Inverse of :func:`encode` (special tokens rendered as ``<pad>`` etc.)."""
    return "".join(VOCAB[int(i)] for i in np.asarray(ids).ravel())


def windows(snippet: bytes, seq_len: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Next-character examples of one snippet: ``(x int32[k, seq_len], y int32[k])``."""
    tokens = np.concatenate(
        [np.full(seq_len - 1, PAD, np.int32), [BOS], encode(snippet), [EOS]]
    ).astype(np.int32)
    targets = np.arange(seq_len, len(tokens), stride)
    x = np.lib.stride_tricks.sliding_window_view(tokens, seq_len)[targets - seq_len]
    return np.ascontiguousarray(x), tokens[targets]


def read_snippets(path: str | os.PathLike) -> dict[str, list[bytes]]:
    """``{client_id: [snippet bytes, ...]}`` from one TFF Shakespeare HDF5 file."""
    import h5py

    try:
        with h5py.File(path, "r") as fh:
            group = fh["examples"]
            return {cid: list(group[cid]["snippets"][()]) for cid in group}
    except (OSError, KeyError) as err:
        raise LdpsimError(f"{path} is not a TFF Shakespeare HDF5 file ({err}); {FIX_HINT}") from None


@functools.lru_cache(maxsize=2)
def _snippets(folder: str) -> tuple[dict, dict]:
    return (read_snippets(Path(folder) / FILES["train"]), read_snippets(Path(folder) / FILES["test"]))


def _find_folder(data_dir) -> Path:
    root = resolve_data_dir(data_dir)
    folder = find_subdir(root, FOLDER_NAMES, (FILES["train"],))
    if folder is None:
        raise LdpsimError(
            f"Shakespeare not found: no {FILES['train']} in {root}/shakespeare, "
            f"{root}/tff_shakespeare or {root} (expected sha256 {SHA256[FILES['train']]}); "
            f"extract both .h5 files from {TFF_ARCHIVE_URL} there, or {FIX_HINT}"
        )
    for fname, digest in SHA256.items():
        verify_file(folder / fname, digest, what="Shakespeare file")
    return folder.resolve()


@functools.lru_cache(maxsize=4)
def _load(folder: str, seq_len: int, stride: int) -> Dataset:
    train, test = _snippets(folder)
    names = tuple(sorted(train))
    index = {c: i for i, c in enumerate(names)}

    def build(split):
        xs, ys, cs = [], [], []
        for cid in names:
            for snip in split.get(cid, ()):
                x, y = windows(snip, seq_len, stride)
                xs.append(x)
                ys.append(y)
                cs.append(np.full(len(y), index[cid], np.int32))
        return np.concatenate(xs), np.concatenate(ys), np.concatenate(cs)

    x_tr, y_tr, c_tr = build(train)
    x_te, y_te, c_te = build(test)
    return Dataset(
        name="shakespeare",
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        num_classes=len(VOCAB),
        train_client_ids=c_tr,
        test_client_ids=c_te,
        client_names=names,
        info={
            "source": "tff-hdf5",
            "folder": folder,
            "seq_len": seq_len,
            "stride": stride,
            "num_train_snippets": sum(len(v) for v in train.values()),
            "num_test_snippets": sum(len(v) for v in test.values()),
        },
    )


def load_shakespeare(
    data_dir: str | os.PathLike | None = None, *, seq_len: int = 80, stride: int | None = None
) -> Dataset:
    """Load federated Shakespeare as next-character examples (see module docstring).

    Args:
      data_dir: folder holding ``shakespeare_{train,test}.h5`` (directly or in
        ``shakespeare/`` or ``tff_shakespeare/``); both are SHA-256 verified.
      seq_len: characters of context per example (LEAF: 80).
      stride: distance between consecutive targets of a snippet (default ``seq_len``).

    Returns:
      A :class:`Dataset` with int32 inputs ``[n, seq_len]``, labels in
      ``[0, 90)``, one natural client per speaking role (client ids sorted).
    """
    seq_len = check_positive_int("seq_len", seq_len)
    stride = seq_len if stride is None else check_positive_int("stride", stride)
    return _load(str(_find_folder(data_dir)), seq_len, stride)
