"""Shared pytest fixtures.

Real datasets are read from ``$LDPSIM_DATA_DIR`` (``.ci/run`` points it at
``../shared/data``).  When the variable is unset, ``../shared/data`` beside the
checkout is used if it exists.  A test that needs the data *fails* in CI
(``CI=true``) when the data is missing, and is skipped with a message elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _data_root() -> Path | None:
    env = os.environ.get("LDPSIM_DATA_DIR")
    if env:
        return Path(env)
    fallback = REPO.parent / "shared" / "data"
    return fallback if fallback.is_dir() else None


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = _data_root()
    if root is None or not root.is_dir():
        msg = f"real datasets not found (LDPSIM_DATA_DIR={os.environ.get('LDPSIM_DATA_DIR')!r})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg + ": CI must provide them")
        pytest.skip(msg)
    return root
