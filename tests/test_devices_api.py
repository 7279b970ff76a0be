"""ldpsim.use_host_devices: the API asks for the same host CPU devices as the command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "LDPSIM_HOST_DEVICES")}
    proc = subprocess.run([sys.executable, "-W", "always", "-c", code], env={**base, **env},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip() + "|" + proc.stderr.strip()


def test_requests_devices_before_jax_and_jax_sees_them():
    out = _run("import ldpsim; n = ldpsim.use_host_devices(3); import jax; "
               "print(n, jax.device_count())")
    assert out.startswith("3 3|")


def test_environment_count_and_existing_flags_win():
    assert _run("import ldpsim; print(ldpsim.use_host_devices())",
                LDPSIM_HOST_DEVICES="2").startswith("2|")
    # An XLA_FLAGS that already sets the count is never overridden.
    out = _run("import ldpsim; print(ldpsim.use_host_devices(4))",
               XLA_FLAGS="--xla_force_host_platform_device_count=1")
    assert out.startswith("1|")


def test_after_jax_is_imported_it_changes_nothing_and_says_so():
    out = _run("import jax, ldpsim; print(ldpsim.use_host_devices(4), jax.device_count())")
    assert out.startswith("None 1|") and "before jax is imported" in out


@pytest.mark.parametrize("bad", ["0", "-2", "many"])
def test_bad_environment_value_is_a_clear_error(bad):
    proc = subprocess.run([sys.executable, "-c", "import ldpsim; ldpsim.use_host_devices()"],
                          env={**os.environ, "LDPSIM_HOST_DEVICES": bad, "XLA_FLAGS": ""},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "LDPSIM_HOST_DEVICES must be an integer" in proc.stderr
