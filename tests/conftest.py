"""Shared pytest fixtures.

Real datasets are read from ``$LDPSIM_DATA_DIR`` (``.ci/run`` points it at
``../shared/data``).  When the variable is unset, ``../shared/data`` beside the
checkout is used if it exists.  A test that needs the data *fails* in CI
(``CI=true``) when the data is missing, and is skipped with a message elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
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


#: XLA option of the test suite (both tiers): LLVM's backend optimisation off.  The HLO (fusion,
#: layout, the program the tests inspect) is unchanged; only the machine-code optimisation that
#: is most of a CPU compilation's cost is skipped (about one compilation per test).  Users
#: compile with XLA's defaults: tests/test_xla_defaults.py runs rounds of every mode both ways
#: and checks they agree up to float rounding.  An XLA_FLAGS that already sets the level wins;
#: LDPSIM_TEST_XLA_DEFAULTS=1 runs the suite with XLA's defaults.
FAST_TIER_XLA_FLAG = "--xla_backend_optimization_level=0"

#: XLA option of the test suite: XLA:CPU's older elemental code generator instead of its MLIR
#: fusion emitters, which take about half of what is left of a small program's compile time.
#: The lowered program and XLA's fusion decisions are unchanged (the optimised HLO only no
#: longer wraps each unfused operation in a fusion of its own); what differs is how each loop
#: is emitted.  Added only when this XLA knows the flag (XLA aborts on an unknown one, and
#: newer XLAs are retiring this one) and unless your XLA_FLAGS names it.
FAST_TIER_XLA_EMITTER_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _xla_knows(flag: str) -> bool:
    """Whether this JAX's XLA starts with ``flag`` in XLA_FLAGS (asked in a child process,
    since XLA aborts the process on a flag it does not know)."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    probe = "import jax; jax.devices()"
    try:
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_configure(config):
    # Runs before collection in the main process and in every xdist worker, before JAX starts.
    # Both tiers compile with the suite's XLA options (see tests/README.md): compilation is
    # most of the suite's cost, and tests/test_xla_defaults.py checks that XLA's default
    # options, which users get, give the same round up to float rounding.
    if "not slow" in (config.getoption("markexpr", "") or ""):
        os.environ["LDPSIM_FAST_TIER"] = "1"
    if os.environ.get("LDPSIM_TEST_XLA_DEFAULTS") != "1":
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_backend_optimization_level" not in flags:
            flags = f"{flags} {FAST_TIER_XLA_FLAG}".strip()
        # Decided once, by the controller; the xdist workers inherit its XLA_FLAGS.
        if (os.environ.get("PYTEST_XDIST_WORKER") is None and "xla_cpu_use_fusion_emitters"
                not in flags and _xla_knows(FAST_TIER_XLA_EMITTER_FLAG)):
            flags = f"{flags} {FAST_TIER_XLA_EMITTER_FLAG}"
        os.environ["XLA_FLAGS"] = flags
    # With -n, every test of a file runs in one worker: a module's fixtures and the
    # compilations its tests share are paid once, not once per worker.
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadfile"
    # ... and the files are handed out in collection order, which pytest_collection_modifyitems
    # below makes longest first (xdist's default reorders them by their number of tests, so
    # a long file of few tests, a notebook or a subprocess run, started last and ran alone).
    if getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False
    config.pluginmanager.register(_LongestFilesFirst(), "ldpsim-longest-files-first")
    # One JAX compilation cache for this run (both tiers), shared by the xdist workers, the
    # command-line subprocesses the tests start and tests that build the same program again:
    # a compiled program is reused, never rebuilt (compilation is most of a slow test's cost).
    # A new empty folder per run (made here by the controller, inherited by the workers,
    # removed at the end), so a run's figures never depend on an earlier run.  A
    # JAX_COMPILATION_CACHE_DIR you set yourself is used as it is and kept.
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="ldpsim-tests-jax-cache-")
        config._ldpsim_jax_cache = folder
        os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"


def xla_default_flags() -> str:
    """``XLA_FLAGS`` without the suite's two compile options: XLA's defaults, as users get
    them (for a child process whose cost is running compiled code, not compiling it)."""
    return " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                    if not f.startswith(("--xla_backend_optimization_level",
                                         "--xla_cpu_use_fusion_emitters")))


def run_with_xla_defaults(code: str, timeout: float = 1800) -> str:
    """Run ``code`` in a fresh Python with XLA's default compile options (the suite's two
    options removed from XLA_FLAGS) and return its stdout.  For the few tests whose cost is
    execution, not compilation (a recurrent model trained for rounds): LLVM's optimisation,
    off in the suite, makes such a program several times faster."""
    env = {**os.environ, "XLA_FLAGS": xla_default_flags()}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    if proc.returncode:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def _measured_slow() -> set[str]:
    path = Path(__file__).with_name("slow_tests.txt")
    return {line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # The tests listed in slow_tests.txt (measured: see its header) get the slow marker here,
    # before -m "not slow" deselects; the others carry it in their own decorators.
    slow = _measured_slow()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


def _file_seconds(fast_tier: bool) -> dict[str, float]:
    path = Path(__file__).with_name("file_seconds.txt")
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            full, fast, name = line.split()
            out[name] = float(fast if fast_tier else full)
    return out


class _LongestFilesFirst:
    """After -m has deselected (a second collection hook, run last): the files in decreasing
    order of their measured seconds in this tier (tests/file_seconds.txt; a file not listed
    comes first, its cost unknown), each file's tests in their own order.  With --dist loadfile
    the xdist workers take whole files in this order, so the longest start first and the
    short ones fill in at the end."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        seconds = _file_seconds(os.environ.get("LDPSIM_FAST_TIER") == "1")
        rank = {}
        for item in items:
            name = item.nodeid.split("::")[0]
            rank.setdefault(name, -seconds.get(name, float("inf")))
        items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])   # stable


def pytest_unconfigure(config):
    folder = getattr(config, "_ldpsim_jax_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = _data_root()
    if root is None or not root.is_dir():
        msg = f"real datasets not found (LDPSIM_DATA_DIR={os.environ.get('LDPSIM_DATA_DIR')!r})"
        if _in_ci():
            pytest.fail(msg + ": CI must provide them")
        pytest.skip(msg)
    return root
