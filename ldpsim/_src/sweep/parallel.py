"""Run a sweep's cells in worker processes, each on its own share of the host's CPU cores.

Why: a cell of the project's grids is a long chain of small XLA programs (clients of a few
examples, a few hundred small ops each), whose small ops one process may not spread well over many cores;
cells are independent (each has its own seed-derived keys), so they can run side by side.
The rows do not depend on which worker ran a cell or in which order, up to float summation
order (a worker has one host device per core of its share, :mod:`ldpsim._src._devices`).
What it buys depends on the host: on the 2-core machine the project's grids run on, one
process already keeps both cores busy through its two host devices, and two workers
finished a grid of seed-000 cells only 1.04× sooner (benchmarks/sweep_workers.py,
benchmarks/README.md); it is meant for hosts with more cores than one process uses (the
command line asks XLA for at most 8 host devices).

How: a ``spawn`` process pool of ``workers`` processes. Each worker pins itself
(:func:`os.sched_setaffinity`) to one of :func:`cpu_shares` before JAX starts its CPU
backend (XLA sizes its thread pool from that affinity) and asks for one host device per core
of its share (replacing the parent's ``XLA_FLAGS`` count, one per core of the host),
ignores SIGINT (the parent owns interrupts) and builds its runner once, so the data and
the compiled programs of a worker are reused by the cells it runs next; with the compilation cache on
(:func:`ldpsim.enable_compilation_cache`, inherited through the environment) a program
compiled by one worker is loaded by the others. The parent hands out cells in the sweep's
order, writes each cell's rows as soon as it finishes, and forwards the workers' round
ticks to the progress bar. On an error in a cell, a worker that dies, or an interrupt, the
parent stops the other workers at once; finished cells are already in the results file
and a running cell's checkpoint (if any) lets the next run continue it. A parent killed
outright (SIGKILL) takes its workers with it (Linux: ``PR_SET_PDEATHSIG``). A worker removes
its cell's checkpoint as soon as the cell's rows are made, a moment before the parent writes
them: an interrupt in that moment costs the cell's rerun, never a wrong row.

CPU only: on an accelerator the workers would share one device, so a worker whose default
backend is not the CPU refuses with an error.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import queue
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ldpsim._src._checks import LdpsimError
from ldpsim._src.sweep.config import Cell

__all__ = ["available_cpus", "cpu_shares", "run_cells_in_workers"]

#: Seconds between the parent's looks at the round ticks while it waits for cells.
_POLL = 0.2


def available_cpus() -> list[int]:
    """The CPU cores this process may run on (its affinity; all cores where that is unknown)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:   # pragma: no cover  (no affinity API: macOS, Windows)
        return list(range(os.cpu_count() or 1))


def cpu_shares(workers: int, cpus: Sequence[int] | None = None) -> list[tuple[int, ...]]:
    """Split ``cpus`` (default :func:`available_cpus`) into ``workers`` disjoint, contiguous
    shares whose sizes differ by at most one.

    Raises:
        LdpsimError: ``workers`` is not a positive integer or exceeds the number of cores.
    """
    cpus = list(available_cpus() if cpus is None else cpus)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise LdpsimError(f"workers must be a positive integer, got {workers!r}")
    if workers > len(cpus):
        raise LdpsimError(f"workers = {workers} exceeds the {len(cpus)} CPU core(s) this process "
                          f"may use ({', '.join(map(str, cpus))}); each worker needs one")
    base, extra = divmod(len(cpus), workers)
    shares, start = [], 0
    for i in range(workers):
        size = base + (i < extra)
        shares.append(tuple(cpus[start:start + size]))
        start += size
    return shares


# ----------------------------------------------------------------------- the worker side

_worker: dict[str, Any] = {}


def _die_with_parent() -> None:
    """Linux: have the kernel kill this process when its parent dies (``PR_SET_PDEATHSIG``), so
    that a parent killed without clean-up (SIGKILL, out of memory) leaves no worker running."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):   # pragma: no cover
        return
    if os.getppid() == 1:   # the parent died before the call
        os._exit(1)


def _host_devices(cores: int) -> None:
    """One host device per core of the worker's share (at most ``MAX_HOST_DEVICES``), in place
    of the parent's count (set for all the cores) that ``XLA_FLAGS`` passed down. JAX is not
    imported yet in a fresh worker, so XLA reads this."""
    from ldpsim._src._devices import HOST_DEVICES_FLAG, MAX_HOST_DEVICES

    flags = re.sub(re.escape(HOST_DEVICES_FLAG) + r"=\S*", "", os.environ.get("XLA_FLAGS", ""))
    n = min(cores, MAX_HOST_DEVICES)
    flags = " ".join(flags.split() + ([f"{HOST_DEVICES_FLAG}={n}"] if n > 1 else []))
    if flags:
        os.environ["XLA_FLAGS"] = flags
    else:
        os.environ.pop("XLA_FLAGS", None)


def _init_worker(shares: Any, ticks: Any, runner: Any) -> None:
    """Pool initializer: take a CPU share, ignore SIGINT, keep the runner and the tick queue."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    share = shares.get()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, share)
    _host_devices(len(share))
    _worker.update(ticks=ticks, runner=runner, share=share, checked=False)


def _run_cell(index: int, cell: Cell) -> tuple[int, list[dict]]:
    """One cell in a worker: its rows (the runner's), round ticks sent to the parent."""
    if not _worker["checked"]:
        import jax

        backend = jax.default_backend()
        if backend != "cpu":
            raise LdpsimError(f"workers > 1 splits the CPU cores between processes, but this host's "
                              f"default JAX backend is {backend!r}: run one process (workers = 1) "
                              "so that the accelerator is not shared")
        _worker["checked"] = True
    ticks = _worker["ticks"]
    rows: list[dict] = []
    for _, cell_rows in _worker["runner"]([cell], lambda: ticks.put(index)):
        rows = cell_rows
    return index, rows


# ----------------------------------------------------------------------- the parent side

def run_cells_in_workers(cells: Sequence[Cell], workers: int, runner: Any, *,
                         on_round: Callable[[], None] = lambda: None,
                         cpus: Sequence[int] | None = None) -> Iterator[tuple[Cell, list[dict]]]:
    """Run ``cells`` in ``workers`` processes; yield ``(cell, rows)`` as each one finishes.

    Args:
        cells: the cells to run, in the order they are handed out.
        workers: number of processes (at most the number of cores in ``cpus``).
        runner: a picklable sweep runner (:class:`~ldpsim._src.sweep.run.Runner`); each
            worker gets its own copy, called with one cell at a time.
        on_round: called in this process once per completed round of any cell.
        cpus: the cores to share out (default: this process's affinity).

    Raises:
        LdpsimError: a worker process died (its cell is named), or a worker's backend is
            not the CPU. An exception raised by the runner for a cell is re-raised here.
    """
    cpu_shares(workers, cpus)   # refuse a bad count even when nothing is left to run
    if not cells:
        return
    shares = cpu_shares(min(workers, len(cells)), cpus)   # no idle worker: fewer cells than workers
    try:
        pickle.dumps(runner)
    except Exception as err:   # noqa: BLE001  (any pickling failure)
        raise LdpsimError(f"workers > 1 sends the runner to each worker process, but "
                          f"{type(runner).__name__} cannot be pickled ({err}); define it at the "
                          "top level of an importable module, or run with workers = 1") from None
    ctx = multiprocessing.get_context("spawn")
    share_queue, ticks = ctx.Queue(), ctx.Queue()
    for share in shares:
        share_queue.put(share)
    pool = cf.ProcessPoolExecutor(max_workers=len(shares), mp_context=ctx, initializer=_init_worker,
                                  initargs=(share_queue, ticks, runner))
    clean = False
    try:
        pending = {pool.submit(_run_cell, i, cell): i for i, cell in enumerate(cells)}

        def drain() -> None:
            while True:
                try:
                    ticks.get_nowait()
                except queue.Empty:
                    return
                on_round()

        while pending:
            done, _ = cf.wait(pending, timeout=_POLL, return_when=cf.FIRST_COMPLETED)
            drain()
            for future in done:
                i = pending.pop(future)
                try:
                    _, rows = future.result()
                except cf.process.BrokenProcessPool:
                    raise LdpsimError(
                        f"a worker process died while running cell {cells[i].key} (out of memory? "
                        "killed?); finished cells are saved: run again to resume, with fewer "
                        "workers if memory is short") from None
                yield cells[i], rows
        drain()
        clean = True
    finally:
        if clean:
            pool.shutdown(wait=True)
        else:   # an error, an interrupt or a consumer that stopped early: stop every worker now
            processes = list(getattr(pool, "_processes", {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in processes:
                if p.is_alive():
                    p.terminate()
            for p in processes:
                p.join(timeout=5)
        for q in (share_queue, ticks):
            q.close()
            q.cancel_join_thread()
