"""Data folders, checksums and verified downloads (host side, standard library only).

Where data is looked for (first match wins):

1. the ``data_dir`` argument (the CLI's ``--data-dir``);
2. the environment variable ``LDPSIM_DATA_DIR``;
3. the download cache ``$LDPSIM_CACHE_DIR/data``, by default
   ``$XDG_CACHE_HOME/ldpsim/data`` (``~/.cache/ldpsim/data``).

Inside the chosen folder a dataset lives in its own sub-folder (``mnist/``,
``fashion_mnist/``, ...), or directly in the folder itself.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

from ldpsim._src._checks import LdpsimError

__all__ = [
    "DATA_DIR_ENV",
    "cache_dir",
    "download_file",
    "resolve_data_dir",
    "sha256_of",
    "verify_file",
]

DATA_DIR_ENV = "LDPSIM_DATA_DIR"
CACHE_DIR_ENV = "LDPSIM_CACHE_DIR"

FIX_HINT = f"pass --data-dir DIR (Python: data_dir=DIR) or set {DATA_DIR_ENV} to a folder holding a verified copy"
#: Default seconds to wait for a mirror to connect or send (per socket operation).
CONNECT_TIMEOUT = 8.0
#: Default seconds after which no further mirror is tried: offline, a download fails in about
#: this long instead of hanging.
DOWNLOAD_BUDGET = 15.0


def cache_dir() -> Path:
    """ldpsim's cache folder (downloads, TFDS-prepared data); never inside the repo."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ldpsim"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data folder: ``data_dir``, else ``$LDPSIM_DATA_DIR``, else the download cache."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return cache_dir() / "data"


def find_subdir(root: Path, names: tuple[str, ...], required: tuple[str, ...]) -> Path | None:
    """First of ``root/<name>`` or ``root`` itself that contains every path in ``required``."""
    for cand in [root / n for n in names] + [root]:
        if all((cand / r).exists() for r in required):
            return cand
    return None


@functools.lru_cache(maxsize=256)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_of(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file (memoised on path, size and mtime)."""
    st = os.stat(path)
    return _sha256_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def verify_file(path: str | os.PathLike, expected_sha256: str, *, what: str = "file") -> Path:
    """Check that ``path`` exists and has the expected SHA-256.

    Raises:
      LdpsimError: naming the file, the expected and actual checksum, and the fix.
    """
    path = Path(path)
    if not path.is_file():
        raise LdpsimError(
            f"{what} {path} is missing (expected sha256 {expected_sha256}); {FIX_HINT}"
        )
    actual = sha256_of(path)
    if actual != expected_sha256:
        raise LdpsimError(
            f"{what} {path} is corrupt: sha256 {actual}, expected {expected_sha256}; delete it "
            f"so that it is downloaded again, or {FIX_HINT}"
        )
    return path


Opener = Callable[[str], "object"]


def download_file(
    urls: str | list[str] | tuple[str, ...],
    dest: str | os.PathLike,
    expected_sha256: str,
    *,
    opener: Opener | None = None,
    timeout: float = CONNECT_TIMEOUT,
    budget: float | None = DOWNLOAD_BUDGET,
) -> Path:
    """Download ``dest`` from the first URL that works and verify its SHA-256.

    The file is written to a temporary name beside ``dest`` and renamed only after
    its checksum matches, so a failed or corrupt download never leaves a file that
    looks valid.  ``file://`` URLs work too (useful offline and in tests).

    Args:
      urls: one URL or mirrors tried in order.
      dest: final path.
      expected_sha256: hex digest the content must have.
      opener: ``opener(url)`` returning a binary file-like object (default
        ``urllib.request.urlopen``); injectable for tests.
      timeout: seconds per connect / read for the default opener (a dead mirror fails in
        this long, not the operating system's minutes).
      budget: once this many seconds have passed, the remaining mirrors are not tried
        (None: try all); with no network the call fails in about ``budget`` seconds.

    Raises:
      LdpsimError: when every URL fails or the content's checksum differs; the
        message lists each URL's error, the expected checksum and the fix.
    """
    if isinstance(urls, str):
        urls = [urls]
    dest = Path(dest)
    if opener is None:
        def opener(url: str):  # noqa: E306 - small local default
            return urllib.request.urlopen(url, timeout=timeout)
    errors = []
    start = time.monotonic()
    for i, url in enumerate(urls):
        if i and budget is not None and time.monotonic() - start >= budget:
            errors.append(f"{len(urls) - i} more mirror(s) not tried (over the {budget:g} s budget)")
            break
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
        except OSError as err:
            raise LdpsimError(f"cannot write {dest}: {err}; {FIX_HINT}") from None
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, opener(url) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
            actual = digest.hexdigest()
            if actual != expected_sha256:
                errors.append(f"{url}: sha256 {actual}, expected {expected_sha256}")
                continue
            shutil.move(tmp, dest)
            return dest
        except Exception as err:  # network errors come in many types
            errors.append(f"{url}: {type(err).__name__}: {err}")
        finally:
            tmp.unlink(missing_ok=True)
    raise LdpsimError(
        f"could not download {dest.name} (expected sha256 {expected_sha256}): "
        + "; ".join(errors)
        + f". Copy the file into {dest.parent} by hand, or {FIX_HINT}"
    )
