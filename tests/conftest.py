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


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def examples(n: int) -> int:
    """Hypothesis ``max_examples`` for a property test: ``n`` in CI and in the full suite,
    a fifth of it (at least 10) in the fast tier (``-m "not slow"``) outside CI.  Each new
    input shape is a new compilation, so the example count is most of such a test's cost."""
    fast = os.environ.get("LDPSIM_FAST_TIER") == "1"
    return n if _in_ci() or not fast else max(10, n // 5)


def pytest_configure(config):
    # Runs before collection in the main process and in every xdist worker.
    if "not slow" in (config.getoption("markexpr", "") or ""):
        os.environ["LDPSIM_FAST_TIER"] = "1"


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = _data_root()
    if root is None or not root.is_dir():
        msg = f"real datasets not found (LDPSIM_DATA_DIR={os.environ.get('LDPSIM_DATA_DIR')!r})"
        if _in_ci():
            pytest.fail(msg + ": CI must provide them")
        pytest.skip(msg)
    return root
