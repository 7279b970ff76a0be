"""Host CPU devices: one rule for the ``ldpsim`` command and the Python API.

XLA exposes one CPU device unless asked for more before JAX starts
(``--xla_force_host_platform_device_count``). The engine splits each round's cohort over
every device it sees (``SimulationConfig.devices=None``), which on CPU runs 1.3-1.7x faster
with one device per core (measured on 2 cores by ``benchmarks/throughput.py
--host-devices 1 2``); results equal one device's up to float summation order.

:func:`use_host_devices` is that request. The ``ldpsim`` command makes it before it imports
JAX; a script or notebook makes it by calling ``ldpsim.use_host_devices()`` first thing,
so that both run on the same devices. It never overrides an ``XLA_FLAGS`` that already sets
the count, and does nothing once JAX has been imported (it then says so). GPU and TPU
backends ignore it.
"""

from __future__ import annotations

import os
import sys
import warnings

from ldpsim._src._checks import LdpsimError

__all__ = ["HOST_DEVICES_FLAG", "MAX_HOST_DEVICES", "host_devices_default", "usable_cores",
           "use_host_devices"]

HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
MAX_HOST_DEVICES = 8


def host_devices_default() -> int:
    """``$LDPSIM_HOST_DEVICES``, else min(usable cores, :data:`MAX_HOST_DEVICES`).

    Raises:
        LdpsimError: ``LDPSIM_HOST_DEVICES`` is not an integer >= 1.
    """
    value = os.environ.get("LDPSIM_HOST_DEVICES", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise LdpsimError(f"LDPSIM_HOST_DEVICES must be an integer >= 1, got {value!r}")
        return int(value)
    return max(1, min(usable_cores(), MAX_HOST_DEVICES))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return os.cpu_count() or 1


def use_host_devices(count: int | None = None, *, quiet: bool = False) -> int | None:
    """Ask XLA for ``count`` host CPU devices (None: :func:`host_devices_default`).

    Returns:
        The count now requested in ``XLA_FLAGS``, or None when nothing could be changed
        (JAX already imported: a warning says so unless ``quiet``).

    Raises:
        LdpsimError: ``count`` (or ``LDPSIM_HOST_DEVICES``) is not an integer >= 1.
    """
    n = host_devices_default() if count is None else count   # validated even when unused
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise LdpsimError(f"count must be an integer >= 1, got {n!r}")
    flags = os.environ.get("XLA_FLAGS", "")
    if HOST_DEVICES_FLAG in flags:
        value = flags.split(HOST_DEVICES_FLAG + "=", 1)[-1].split()[0]
        return int(value) if value.isdigit() else None
    if "jax" in sys.modules:
        if not quiet:
            warnings.warn("ldpsim.use_host_devices() must run before jax is imported; the "
                          "device count is unchanged", stacklevel=2)
        return None
    if n > 1:
        os.environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICES_FLAG}={n}".strip()
    return n
