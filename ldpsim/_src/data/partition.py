"""Partition a dataset into clients: IID, Dirichlet label skew, shards, natural.

Every disjoint partitioner returns a list of index arrays, one per client, that
together assign every example exactly once (``iid`` and ``shards`` hold exactly
``n // num_clients`` or one more, resp. two shards; ``dirichlet`` the same sizes).
All are deterministic functions of their arguments and ``seed``.
:func:`to_population` turns a partition into the engine's padded arrays, and
:func:`make_population` does both from a :class:`Dataset` (including the
``"sampled"`` scheme for populations larger than the dataset).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ldpsim._src._checks import LdpsimError, check_choice, check_positive, check_positive_int
from ldpsim._src.data.dataset import Dataset
from ldpsim._src.data.population import PaddedPopulation, SampledPopulation

__all__ = [
    "PARTITIONS",
    "dirichlet_partition",
    "iid_partition",
    "make_population",
    "natural_partition",
    "shard_partition",
    "to_population",
]

PARTITIONS = ("iid", "dirichlet", "shards", "natural", "sampled")


def _check_disjoint(num_examples: int, num_clients: int, per_client: int = 1) -> None:
    if num_clients * per_client > num_examples:
        raise LdpsimError(
            f"num_clients={num_clients} needs at least {num_clients * per_client} examples for "
            f"a disjoint partition, but the dataset has {num_examples}; use partition='sampled' "
            f"(SampledPopulation: each client samples its own examples with replacement) for "
            f"populations larger than the dataset"
        )


def _sizes(n: int, num_clients: int) -> np.ndarray:
    return np.full(num_clients, n // num_clients) + (np.arange(num_clients) < n % num_clients)


def iid_partition(num_examples: int, num_clients: int, *, seed: int = 0) -> list[np.ndarray]:
    """Shuffle and split into ``num_clients`` near-equal parts (sizes differ by <= 1)."""
    num_clients = check_positive_int("num_clients", num_clients)
    _check_disjoint(num_examples, num_clients)
    perm = np.random.default_rng(seed).permutation(num_examples)
    return np.split(perm, np.cumsum(_sizes(num_examples, num_clients))[:-1])


def dirichlet_partition(
    labels: np.ndarray, num_clients: int, alpha: float, *, seed: int = 0
) -> list[np.ndarray]:
    """Dirichlet label skew with equal client sizes (Hsu et al. 2019, arXiv:1909.06335).

    Client ``c`` draws ``q_c ~ Dirichlet(alpha * p)``, with ``p`` the dataset's class
    frequencies, then fills its ``n // num_clients`` (+1) slots with labels drawn from
    ``q_c`` restricted to classes that still have unassigned examples (renormalised),
    taking examples without replacement from shuffled class pools.  Large ``alpha``
    approaches the IID split; small ``alpha`` gives each client (nearly) one class,
    as long as that class has examples left.  ``alpha = inf`` means ``q_c = p``.
    """
    num_clients = check_positive_int("num_clients", num_clients)
    alpha = check_positive("alpha", alpha, allow_inf=True)
    labels = np.asarray(labels)
    _check_disjoint(len(labels), num_clients)
    rng = np.random.default_rng(seed)
    classes, inverse = np.unique(labels, return_inverse=True)
    pools = [rng.permutation(np.flatnonzero(inverse == k)) for k in range(len(classes))]
    remaining = np.array([len(p) for p in pools])
    prior = remaining / remaining.sum()
    taken = np.zeros(len(classes), dtype=np.int64)
    parts = []
    for size in _sizes(len(labels), num_clients):
        q = prior if math.isinf(alpha) else rng.dirichlet(alpha * prior)
        want = np.zeros(len(classes), dtype=np.int64)
        need = int(size)
        while need > 0:
            avail = remaining - want
            w = np.where(avail > 0, q, 0.0)
            if w.sum() <= 0:  # q puts no mass on the classes left: fall back to their sizes
                w = avail.astype(np.float64)
            draw = rng.multinomial(need, w / w.sum())
            draw = np.minimum(draw, avail)
            want += draw
            need -= int(draw.sum())
        parts.append(
            np.concatenate([pools[k][taken[k] : taken[k] + want[k]] for k in range(len(classes))])
        )
        taken += want
        remaining -= want
    return parts


def shard_partition(
    labels: np.ndarray, num_clients: int, *, shards_per_client: int = 2, seed: int = 0
) -> list[np.ndarray]:
    """McMahan et al. 2017 (arXiv:1602.05629, Sec. 3) pathological non-IID split.

    Sort the examples by label, cut them into ``num_clients * shards_per_client``
    shards of near-equal size, and give each client ``shards_per_client`` shards
    chosen at random (so most clients see at most two classes).
    """
    num_clients = check_positive_int("num_clients", num_clients)
    shards_per_client = check_positive_int("shards_per_client", shards_per_client)
    labels = np.asarray(labels)
    _check_disjoint(len(labels), num_clients, shards_per_client)
    rng = np.random.default_rng(seed)
    # Stable sort of a shuffled order: random order inside each class.
    perm = rng.permutation(len(labels))
    order = perm[np.argsort(labels[perm], kind="stable")]
    num_shards = num_clients * shards_per_client
    shards = np.split(order, np.cumsum(_sizes(len(labels), num_shards))[:-1])
    assign = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.concatenate([shards[s] for s in row]) for row in assign]


def natural_partition(
    client_ids: np.ndarray, num_clients: int | None = None, *, seed: int = 0
) -> list[np.ndarray]:
    """One part per natural client (writer, speaking role, device), in id order.

    With ``num_clients`` smaller than the number of natural clients, a random
    subset of that many (chosen with ``seed``) is kept, in id order.
    """
    client_ids = np.asarray(client_ids)
    total = int(client_ids.max()) + 1 if client_ids.size else 0
    order = np.argsort(client_ids, kind="stable")
    bounds = np.searchsorted(client_ids[order], np.arange(total + 1))
    keep = np.arange(total)
    if num_clients is not None:
        num_clients = check_positive_int("num_clients", num_clients)
        if num_clients > total:
            raise LdpsimError(
                f"num_clients={num_clients} exceeds the {total} natural clients of this dataset; "
                f"use partition='sampled' for larger populations"
            )
        keep = np.sort(np.random.default_rng(seed).choice(total, num_clients, replace=False))
    return [order[bounds[c] : bounds[c + 1]] for c in keep]


def to_population(
    x: np.ndarray,
    y: np.ndarray,
    parts: Sequence[np.ndarray],
    *,
    num_classes: int | None = None,
    max_examples: int | None = None,
    seed: int = 0,
) -> PaddedPopulation:
    """Padded per-client arrays from a partition: ``x[c, :counts[c]] = x[parts[c]]``.

    Args:
      x, y: the examples and labels being partitioned.
      parts: index arrays, one per client.
      num_classes: defaults to ``max(y) + 1``.
      max_examples: pad width; clients holding more keep a random subset of that
        many (seeded).  Defaults to the largest client.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    width = int(counts.max()) if max_examples is None else check_positive_int("max_examples", max_examples)
    width = max(width, 1)
    rng = np.random.default_rng(seed)
    idx = np.zeros((len(parts), width), dtype=np.int64)
    for c, p in enumerate(parts):
        p = np.asarray(p, dtype=np.int64)
        if len(p) > width:
            p = np.sort(rng.choice(p, width, replace=False))
        idx[c, : len(p)] = p
    counts = np.minimum(counts, width)
    if num_classes is None:
        num_classes = int(y.max()) + 1
    from ldpsim._src.data.population import _compact_inputs

    return PaddedPopulation.from_arrays(
        _compact_inputs(x)[idx], y[idx], counts, num_classes, compact=False
    )


def make_population(
    dataset: Dataset,
    partition: str = "iid",
    num_clients: int | None = None,
    *,
    alpha: float = math.inf,
    examples_per_client: int | None = None,
    max_examples: int | None = None,
    shards_per_client: int = 2,
    seed: int = 0,
) -> PaddedPopulation | SampledPopulation:
    """Build the engine's population from a dataset's training split.

    Args:
      dataset: a loaded :class:`Dataset`.
      partition: ``"iid"``, ``"dirichlet"`` (uses ``alpha``), ``"shards"``,
        ``"natural"`` (by writer/role/device; ``num_clients`` optional), or
        ``"sampled"``: a :class:`SampledPopulation` of any size (10^4..10^6) in
        which each client draws ``examples_per_client`` examples with replacement
        from its own ``Dirichlet(alpha)`` label distribution (``inf``: IID).
      num_clients: number of clients (required except for ``"natural"``).
      alpha: Dirichlet concentration for ``"dirichlet"`` and ``"sampled"``, > 0.
      examples_per_client: for ``"sampled"`` (default ``n_train // num_clients``,
        at least 1, at most 600).
      max_examples: pad width cap for the disjoint schemes (see :func:`to_population`).
      shards_per_client: for ``"shards"`` (McMahan et al.: 2).
      seed: partition seed.

    Raises:
      LdpsimError: unknown scheme, alpha <= 0, more clients than examples for a
        disjoint scheme, or ``"natural"`` on a dataset without natural clients.
    """
    check_choice("partition", partition, PARTITIONS)
    if partition in ("dirichlet", "sampled"):
        alpha = check_positive("alpha", alpha, allow_inf=True)
    if partition != "natural":
        if num_clients is None:
            raise LdpsimError(f"num_clients is required for partition={partition!r}")
        num_clients = check_positive_int("num_clients", num_clients)
    x, y = dataset.x_train, dataset.y_train
    if partition == "sampled":
        if examples_per_client is None:
            examples_per_client = min(600, max(1, len(y) // num_clients))
        return SampledPopulation.create(
            x, y, num_clients=num_clients, examples_per_client=examples_per_client,
            alpha=alpha, seed=seed, num_classes=dataset.num_classes,
        )
    if partition == "iid":
        parts = iid_partition(len(y), num_clients, seed=seed)
    elif partition == "dirichlet":
        parts = dirichlet_partition(y, num_clients, alpha, seed=seed)
    elif partition == "shards":
        parts = shard_partition(y, num_clients, shards_per_client=shards_per_client, seed=seed)
    else:
        if dataset.train_client_ids is None:
            raise LdpsimError(
                f"dataset {dataset.name!r} has no natural clients; use partition='iid', "
                f"'dirichlet', 'shards' or 'sampled'"
            )
        parts = natural_partition(dataset.train_client_ids, num_clients, seed=seed)
    return to_population(
        x, y, parts, num_classes=dataset.num_classes, max_examples=max_examples, seed=seed
    )
