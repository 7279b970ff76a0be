"""Resource guards: refuse before allocating what the host cannot hold.

:func:`host_memory_limit` (physical memory, a cgroup or RLIMIT_AS limit) and
:func:`check_memory`, with lower estimates for ``run``/``sweep`` (:func:`run_memory`) and
``noise`` (:func:`noise_memory`); ``--no-memory-check`` overrides.

Everything here is cheap: no JAX, no data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import registry

NO_MEMORY_CHECK = "--no-memory-check"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def host_memory_limit() -> tuple[int, str]:
    """``(bytes, what)``: the memory this process may use: physical memory (os.sysconf),
    or a smaller cgroup or RLIMIT_AS limit."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        what = "physical memory"
    except (ValueError, OSError, AttributeError):  # pragma: no cover (not POSIX)
        limit, what = 2**63, "unknown"
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < limit:
            limit, what = int(text), "cgroup memory limit"
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if 0 < soft < limit:
            limit, what = soft, "RLIMIT_AS"
    except (ImportError, ValueError, OSError):  # pragma: no cover
        pass
    return int(limit), what


def check_memory(estimate: float, parts: str, fix: str, *, skip: bool = False,
                 subject: str = "this command") -> None:
    """Refuse before allocating when ``estimate`` bytes exceed the host's limit."""
    if skip:
        return
    limit, what = host_memory_limit()
    if estimate > limit:
        raise LdpsimError(f"{subject} needs about {_fmt_bytes(estimate)} of memory ({parts}) but this host "
                          f"has {_fmt_bytes(limit)} ({what}); {fix}, or pass {NO_MEMORY_CHECK} "
                          "to try anyway")


#: Synthetic (FedProx) data: 60 float32 features + an int32 label per sample.
_SYNTH_SAMPLE = 61 * 4
#: Mean samples per synthetic device (LogNormal(4, 2) + 50, capped at 1000; measured 215).
_SYNTH_MEAN_SAMPLES = 200
#: Pad width of a synthetic client in the disjoint partitions (0.9 x the 1000 cap).
_SYNTH_PAD = 900


def run_memory(p: Mapping[str, Any]) -> tuple[float, str]:
    """``(bytes, parts)``: a lower estimate of the host memory of one run with settings ``p``:
    cohort sampling and per-round cohort arrays (O(m), O(N) for Poisson sampling or when m
    is large), synthetic data (O(N): generated per device, padded unless sampled) and
    MindSpore's per-client clip state (O(N)). The model and real datasets are not counted."""
    n = int(p.get("population", 1000))
    m = int(p.get("clients_per_round", 100))
    parts = []
    cohort = 24 * m + 32 * m  # sampling (ids + hash set), per-round ids/mask/metrics
    if p.get("sampling") == "poisson":
        cohort += 9 * n
    elif m > 10000 and m > n // 50:
        cohort += 8 * n
    parts.append(f"cohort of {m} clients {_fmt_bytes(cohort)}")
    total = cohort
    dataset = str(p.get("dataset", "synthetic")).lower().replace("-", "_")
    if dataset.startswith("synthetic"):
        data = n * _SYNTH_MEAN_SAMPLES * _SYNTH_SAMPLE
        if p.get("partition", "iid") != "sampled":
            data += n * _SYNTH_PAD * _SYNTH_SAMPLE
        parts.append(f"synthetic data for {n} clients {_fmt_bytes(data)}")
        total += data
    if registry.mode(str(p.get("privacy_mode", registry.MODES[0].name))).per_client_state:
        state = 9 * n
        parts.append(f"per-client clip state {_fmt_bytes(state)}")
        total += state
    return float(total), ", ".join(parts)


def check_run_memory(p: Mapping[str, Any], *, skip: bool = False, where: str = "",
                     workers: int = 1) -> None:
    """Refuse a run whose :func:`run_memory` estimate exceeds the host's memory (``workers``
    such runs at once: ``ldpsim sweep --workers``)."""
    estimate, parts = run_memory(p)
    fix = "lower --population or --clients-per-round"
    if workers > 1:
        estimate, parts, fix = (workers * estimate, f"{workers} workers x ({parts})",
                                "lower --workers, --population or --clients-per-round")
    check_memory(estimate, parts, fix, skip=skip, subject=f"{where}this run")



def noise_memory(clients: Sequence[int], dim: int, draw: str, chunk_size: int | None) -> tuple[float, str]:
    """``(bytes, parts)``: memory of the largest trial of ``ldpsim noise`` (float32 buffers:
    a chunk of clients x d per-client, or a few d-vectors for the aggregate draw; the same
    rule as :func:`ldpsim._src.privacy.analysis.averaging.choose_method`)."""
    worst, parts = 0.0, ""
    for n in clients:
        method = draw if draw != "auto" else ("per-client" if n * dim <= 2**27 else "aggregate")
        if method == "aggregate":
            need, what = 6.0 * 4 * dim, f"aggregate draw of {dim} coordinates"
        else:
            chunk = chunk_size if chunk_size is not None else max(1, 2**22 // dim)
            chunk = min(chunk, 1 << max(n - 1, 0).bit_length())
            need, what = 4.0 * dim * (2 * chunk + 6), f"{chunk} clients x {dim} coordinates per chunk"
        if need > worst:
            worst, parts = need, what
    return worst, parts
