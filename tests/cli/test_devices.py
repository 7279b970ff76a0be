"""The ldpsim command asks XLA for host CPU devices before JAX starts (ldpsim.cli)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ldpsim import LdpsimError
from ldpsim._src._devices import MAX_HOST_DEVICES, host_devices_default

REPO = Path(__file__).resolve().parents[2]
SCRIPT = ("from ldpsim._src.cli import _request_host_devices; _request_host_devices(); "
          "import jax; print(jax.device_count('cpu'))")


def _devices(**env) -> int:
    full = {k: v for k, v in os.environ.items()
            if k not in ("XLA_FLAGS", "LDPSIM_HOST_DEVICES")}
    full.update(env, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True,
                         text=True, timeout=120, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_default_count(monkeypatch):
    monkeypatch.delenv("LDPSIM_HOST_DEVICES", raising=False)
    assert host_devices_default() == max(1, min(len(os.sched_getaffinity(0)), MAX_HOST_DEVICES))
    monkeypatch.setenv("LDPSIM_HOST_DEVICES", "3")
    assert host_devices_default() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("LDPSIM_HOST_DEVICES", bad)
        with pytest.raises(LdpsimError, match="LDPSIM_HOST_DEVICES"):
            host_devices_default()


def test_request_in_a_fresh_process():
    assert _devices(LDPSIM_HOST_DEVICES="3") == 3
    assert _devices(LDPSIM_HOST_DEVICES="1") == 1
    # An explicit XLA_FLAGS count wins over the environment default.
    assert _devices(LDPSIM_HOST_DEVICES="3",
                    XLA_FLAGS="--xla_force_host_platform_device_count=2") == 2
    assert _devices() == host_devices_default_clean()


def host_devices_default_clean() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), MAX_HOST_DEVICES))
