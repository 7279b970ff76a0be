"""The cohort loop of a round, split over devices with JAX's own sharding.

:func:`map_cohort` is the one place where a round walks its cohort: the cohort slots
(client ids + mask) are cut into ``devices`` equal contiguous slices, each device runs a
``lax.scan`` over chunks of its slice (vmapped client work inside ``chunk_fn``) and adds
up the chunks' contributions, and a ``lax.psum`` over the mesh axis :data:`CLIENT_AXIS`
combines the per-device partial sums (``jax.shard_map`` over a 1-D
:class:`jax.sharding.Mesh`).  Every client's randomness comes from its id
(``fold_in(fold_in(root, round), client_id)``), never from its slot, chunk or device, so
the result on ``D`` devices equals the one-device result up to the float rounding of the
final cross-device sum (the per-device sums are added in a different order).  With one
device no ``shard_map`` is built at all: the program is exactly the single-device scan.

Multi-host: after :func:`jax.distributed.initialize` every process runs the same program
on the same (replicated) inputs; ``jax.devices()`` then lists the devices of all
processes and the mesh spans them, so the cohort is split across hosts the same way.

Devices on CPU: ``XLA_FLAGS=--xla_force_host_platform_device_count=K`` (set before jax
is imported) makes the host platform expose ``K`` devices.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.fl._policy import chunk_layout, resolve_chunks_in_flight

PyTree = Any

__all__ = ["CLIENT_AXIS", "cohort_layout", "cohort_mesh", "map_cohort", "replicate",
           "resolve_devices"]

#: Name of the mesh axis the cohort is split along.
CLIENT_AXIS = "clients"

def resolve_devices(devices: int | None) -> int:
    """Number of devices to split the cohort over: ``devices``, or all of them for None.

    All devices are ``jax.device_count()``: every local device, and after
    :func:`jax.distributed.initialize` every device of every process.

    Raises:
        LdpsimError: ``devices`` is not an integer >= 1, exceeds the devices JAX sees, or
            (multi-process) does not cover every process's devices.
    """
    available = jax.device_count()
    if devices is None:
        return available
    n = check_positive_int("devices", devices)
    if n > available:
        platform = jax.devices()[0].platform
        hint = (" (on CPU: LDPSIM_HOST_DEVICES=K for the ldpsim command, or "
                "XLA_FLAGS=--xla_force_host_platform_device_count=K before jax is imported)"
                if platform == "cpu" else "")
        raise LdpsimError(f"devices must be <= {available}, the number of {platform} devices "
                          f"JAX sees, got {n}; use devices=None for all of them{hint}")
    if jax.process_count() > 1 and n != available:
        raise LdpsimError(f"devices must be all {available} devices of the "
                          f"{jax.process_count()} processes (or None) in a multi-process run, "
                          f"got {n}")
    return n


@functools.lru_cache(maxsize=None)
def cohort_mesh(devices: int) -> Mesh:
    """The 1-D mesh ``(CLIENT_AXIS,)`` over the first ``devices`` of ``jax.devices()``."""
    return Mesh(np.asarray(jax.devices()[:devices]), (CLIENT_AXIS,))


def replicate(tree: PyTree, devices: int) -> PyTree:
    """``tree`` placed (once) on every device of :func:`cohort_mesh`; unchanged for one
    device. Saves a host-to-device copy of the population per round and device."""
    if devices == 1:
        return tree
    target = NamedSharding(cohort_mesh(devices), PartitionSpec())
    if jax.process_count() == 1:
        return jax.device_put(tree, target)

    # Multi-process: every process holds the same value (same seed, same data); a
    # process-local device array cannot be put on other hosts' devices, its host copy can
    # (jax.device_put checks that the copies agree across processes).
    def put(x):
        if jnp.issubdtype(jnp.result_type(x), jax.dtypes.prng_key):
            data = put(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        return jax.device_put(np.asarray(x), target)

    return jax.tree_util.tree_map(put, tree)


def cohort_layout(m: int, chunk_size: int | None, devices: int = 1) -> tuple[int, int]:
    """``(n_chunks, chunk)`` per device for a cohort of ``m`` slots on ``devices`` devices.

    Each device gets ``ceil(m / devices)`` slots, laid out by
    :func:`ldpsim._src.fl._policy.chunk_layout`; the cohort is padded (mask False) to
    ``devices × n_chunks × chunk`` slots.  One device: exactly ``chunk_layout(m, ...)``.
    """
    return chunk_layout(-(-m // devices), chunk_size)


def map_cohort(chunk_fn: Callable[[PyTree, jax.Array, jax.Array], PyTree], zeros: PyTree,
               operands: PyTree, ids: jax.Array, mask: jax.Array, *,
               chunk_size: int | None, devices: int = 1,
               chunks_in_flight: int | None = None) -> PyTree:
    """Σ over the chunks of the cohort of ``chunk_fn(operands, chunk_ids, chunk_mask)``.

    Args:
        chunk_fn: one chunk's contribution, a pytree shaped like ``zeros``;
            ``chunk_ids`` int32[chunk], ``chunk_mask`` bool[chunk] (False: padding slot,
            which must contribute nothing).  It sees only ``operands`` and its chunk, so
            it may run on any device.
        zeros: the additive identity the sums start from (every device starts from it).
        operands: everything ``chunk_fn`` reads (params, keys, population, knobs),
            replicated on every device.
        ids, mask: the cohort, int32[m] / bool[m]; padded here.
        chunk_size: clients per chunk (None: the backend default).
        devices: devices to split the cohort over (resolved, see :func:`resolve_devices`).
        chunks_in_flight: chunks per scan iteration (the scan's ``unroll``; the chunks are
            padded to a multiple of it); None: see :func:`ldpsim._src.fl._policy.resolve_chunks_in_flight`.  The
            chunks are still added to the carry one by one in cohort order, so the sum
            does not depend on it beyond float rounding.

    Returns:
        The summed pytree, replicated.  One device: ``lax.scan`` adding the chunks in
        order (carry + contribution).  ``D`` devices: each device does that over its
        contiguous ``1/D`` of the slots, then ``lax.psum`` over :data:`CLIENT_AXIS`.
    """
    ids = jnp.asarray(ids, jnp.int32)
    mask = jnp.asarray(mask, bool)
    n_chunks, chunk = cohort_layout(ids.shape[0], chunk_size, devices)
    in_flight = resolve_chunks_in_flight(chunks_in_flight, devices, n_chunks)
    # Whole iterations only (a remainder would compile the body once more): at most
    # in_flight - 1 extra chunks of padding slots, which contribute nothing.
    n_chunks = in_flight * -(-n_chunks // in_flight)
    pad = devices * n_chunks * chunk - ids.shape[0]
    if pad:
        ids = jnp.concatenate([ids, jnp.zeros((pad,), jnp.int32)])
        mask = jnp.concatenate([mask, jnp.zeros((pad,), bool)])

    def local(zeros, operands, ids, mask):
        def body(carry, chunk_in):
            contribution = chunk_fn(operands, *chunk_in)
            return jax.tree_util.tree_map(jnp.add, carry, contribution), None

        sums, _ = lax.scan(body, zeros, (ids.reshape(n_chunks, chunk),
                                         mask.reshape(n_chunks, chunk)),
                           unroll=in_flight)
        return sums

    if devices == 1:
        return local(zeros, operands, ids, mask)

    def per_device(zeros, operands, ids, mask):
        return lax.psum(local(zeros, operands, ids, mask), CLIENT_AXIS)

    rep, split = PartitionSpec(), PartitionSpec(CLIENT_AXIS)
    sharded = jax.shard_map(per_device, mesh=cohort_mesh(devices),
                            in_specs=(rep, rep, split, split), out_specs=rep,
                            check_vma=False)
    return sharded(zeros, operands, ids, mask)
