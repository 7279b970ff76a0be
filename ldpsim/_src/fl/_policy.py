"""The engine's per-backend speed choices, in one place (nothing here changes results).

Every number below was measured, and the measurement is named next to it. The round kernel
(:mod:`ldpsim._src.fl.round`) and the cohort loop (:mod:`ldpsim._src.fl.sharding`) ask this module
how wide a chunk of clients is, how many chunks are in flight and how many devices a
cohort is split over; they never test the backend themselves. Results are independent of
every choice here up to float rounding (client randomness comes from client ids).
"""

from __future__ import annotations

import jax

from ldpsim._src._checks import check_positive_int
from ldpsim._src._devices import usable_cores

__all__ = ["AUTO_CHUNK", "AUTO_CHUNK_ACCELERATOR", "CPU_CHUNKS_IN_FLIGHT_MIN_CHUNKS",
           "CPU_MULTI_DEVICE_MAX_CLIENTS", "CPU_ONE_DEVICE_CHUNKS_IN_FLIGHT", "chunk_layout",
           "cohort_devices", "resolve_chunk_size", "resolve_chunks_in_flight"]

#: Default clients per chunk by backend (measured with benchmarks/throughput.py: on the
#: 2-core CPU, vmap widths of 4-8 LeNet-5 clients beat 16-64; accelerators want wide vmaps).
#: CPU: a chunk of 1 (the scan is a loop over single clients inside XLA, no grouped or
#: batched ops) beat 2, 4, 8 in the same run: 6.0 vs 7.0, 7.2, 7.3 CPU-ms per LeNet-5
#: round update at m = 200 (benchmarks/client_formulations.py for training alone).
AUTO_CHUNK = {"cpu": 1}
AUTO_CHUNK_ACCELERATOR = 1024

#: Chunks in flight per scan iteration on a one-device CPU cohort loop.  The scan body is
#: unrolled this many times; the chunks of one iteration do not depend on each other, so
#: XLA's CPU runtime runs their kernels concurrently on its thread pool.  Measured with
#: benchmarks/throughput.py (LeNet-5, m = 1,000, chunk 1, 2-core CPU, one device):
#: 330 client-updates/s with 1, 416 with 3, 399 with 4, 379 with 6.  With one device per
#: core the cores are already busy: 2 devices ran 538/s with 1 and 474/s with 2.
CPU_ONE_DEVICE_CHUNKS_IN_FLIGHT = 3

#: ... and only when the process may run on more than one core (``os.sched_getaffinity``):
#: on one core the chunks cannot overlap and the unrolled body costs time.  Measured with a
#: one-core pinned process (``taskset -c 0``, LeNet-5, 3 examples in 3 steps of batch 3,
#: m = 1,000, clipping only, idle 2-core Xeon): 1.50 CPU-ms per client update with 1 chunk in
#: flight, 1.59 with 3 (benchmarks/README.md, "Small clients on one core").
#:
#: ... but only for cohorts of at least this many chunks per round: the unrolled body
#: compiles k times (LeNet-5 4.4 s -> 8.9 s, an MLP 3.3 s -> 6.0 s), which a round of a few
#: hundred LeNet-5 clients repays within a few rounds and a small cohort never does.
CPU_CHUNKS_IN_FLIGHT_MIN_CHUNKS = 256

#: With ``devices=None`` on several host CPU devices, cohorts larger than this run on one
#: device. Measured (jax 0.10.2, benchmarks/scale.py --lenet-round M with 2 host devices):
#: XLA's CPU runtime holds about 46 KB per client until a multi-device round ends (peak RSS
#: 1.25 GB at m = 2,000, 1.56 GB at 8,000, 5.4 GB at 100,000; one device: 1.1 GB at any m),
#: although the compiled program's buffers do not grow with m. glibc's per-thread malloc
#: arenas are part of the cause, not all of it: with MALLOC_ARENA_MAX=1 the LeNet-5 peak was
#: 915 / 932 MB at m = 2,000 / 8,000 but still 1,784 MB at 30,000. Below this size the split
#: costs < 1 GB and runs 1.3-1.7x faster on 2 cores than one device with chunks in flight;
#: above it memory stays set by the chunk. An explicit ``devices=K`` is always honoured.
CPU_MULTI_DEVICE_MAX_CLIENTS = 20_000


def resolve_chunk_size(chunk_size: int | None, backend: str | None = None) -> int:
    """``chunk_size``, or the backend's default (:data:`AUTO_CHUNK`) when it is None."""
    if chunk_size is not None:
        return int(chunk_size)
    backend = backend or jax.default_backend()
    return AUTO_CHUNK.get(backend, AUTO_CHUNK_ACCELERATOR)


def chunk_layout(m: int, chunk_size: int | None) -> tuple[int, int]:
    """``(n_chunks, chunk)`` for a cohort of ``m`` slots: the fewest chunks of at most
    ``chunk_size`` clients (None: :func:`resolve_chunk_size`), evened out so that padding
    is under ``n_chunks`` slots (m = 1,000 with chunk_size 64: 16 chunks of 63)."""
    chunk_size = resolve_chunk_size(chunk_size)
    n_chunks = -(-m // max(1, min(chunk_size, m)))
    return n_chunks, -(-m // n_chunks)


def resolve_chunks_in_flight(chunks_in_flight: int | None, devices: int, n_chunks: int,
                             backend: str | None = None) -> int:
    """Chunks per iteration of the cohort scan: ``chunks_in_flight`` if given, else
    :data:`CPU_ONE_DEVICE_CHUNKS_IN_FLIGHT` for one CPU device scanning at least
    :data:`CPU_CHUNKS_IN_FLIGHT_MIN_CHUNKS` chunks, else 1; never more than ``n_chunks``."""
    if chunks_in_flight is not None:
        k = check_positive_int("chunks_in_flight", chunks_in_flight)
    else:
        backend = backend or jax.default_backend()
        k = (CPU_ONE_DEVICE_CHUNKS_IN_FLIGHT if backend == "cpu" and devices == 1
             and n_chunks >= CPU_CHUNKS_IN_FLIGHT_MIN_CHUNKS and usable_cores() > 1 else 1)
    return max(1, min(k, n_chunks))


def cohort_devices(requested: int | None, resolved: int, clients_per_round: int) -> int:
    """Devices a simulation splits each cohort over: ``resolved`` (from
    :func:`ldpsim._src.fl.sharding.resolve_devices`), except that an unspecified request
    (``requested=None``) on several host CPU devices of one process uses one device for
    cohorts above :data:`CPU_MULTI_DEVICE_MAX_CLIENTS`."""
    if (requested is None and resolved > 1 and jax.process_count() == 1
            and jax.default_backend() == "cpu"
            and clients_per_round > CPU_MULTI_DEVICE_MAX_CLIENTS):
        return 1
    return resolved
