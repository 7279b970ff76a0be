"""Which clients take part in a round: the cohort, sampled on the host from ``(seed, round)``.

:func:`sample_cohort` draws one round's cohort with NumPy (uniform: exactly m distinct
clients; Poisson: each client independently with probability m/N), reproducibly and
independently of chunking and device count; :func:`cohort_capacity` is the fixed padded
size of a Poisson cohort, so every round runs the same compiled program.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from ldpsim._src.fl import _policy
from ldpsim._src.fl.config import SimulationConfig

__all__ = ["cohort_capacity", "sample_cohort"]


def sample_cohort(seed: int, round_idx: int, population: int, clients_per_round: int,
                  sampling: str = "uniform", capacity: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Sample one round's cohort on the host, reproducibly from ``(seed, round_idx)``.

    Args:
        seed, round_idx: seed the NumPy generator ``default_rng([seed, round_idx])``.
        population: N.
        clients_per_round: m (uniform: exactly m distinct clients; Poisson: each client
            independently with probability m/N).
        sampling: ``"uniform"`` or ``"poisson"``.
        capacity: length of the returned arrays (padding slots have mask False);
            defaults to the number sampled.  Grows if a Poisson draw exceeds it.

    Returns:
        ``(ids int32[capacity], mask bool[capacity])``; ids sorted ascending.
    """
    rng = np.random.default_rng([seed, round_idx, 0x636F68])  # "coh"
    if sampling == "uniform":
        ids = np.sort(rng.choice(population, size=clients_per_round, replace=False))
    elif sampling == "poisson":
        ids = np.flatnonzero(rng.random(population) < clients_per_round / population)
    else:
        raise ValueError(f"sampling must be uniform or poisson, got {sampling!r}")
    size = max(int(capacity or 0), len(ids), 1)
    out = np.zeros(size, np.int32)
    out[: len(ids)] = ids
    mask = np.arange(size) < len(ids)
    return out, mask


def cohort_capacity(config: SimulationConfig) -> int:
    """Fixed cohort capacity under Poisson sampling: exceeded with probability < 1e-9."""
    q = config.clients_per_round / config.population
    cap = int(stats.binom.ppf(1 - 1e-9, config.population, q))
    chunk = _policy.resolve_chunk_size(config.chunk_size)   # None: the backend default
    return max(chunk * -(-cap // chunk), 1) if cap > chunk else max(cap, 1)
