"""Batch selection of centralised DP-SGD: Poisson sampling (a fixed-capacity padded batch
that never drops a sampled row) and shuffled disjoint batches (MindArmour's), both
derived from position-keyed randomness."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from scipy.stats import binom

from ldpsim._src._checks import check_open_unit, check_positive_int
from ldpsim._src.privacy.noise.sampling import random_bits

__all__ = ["POISSON_OVERFLOW_PROBABILITY", "epoch_keys", "epoch_permutation", "poisson_capacity",
           "poisson_sample"]

# P(a Poisson batch exceeds the padded capacity) per step; larger draws still run exactly.
POISSON_OVERFLOW_PROBABILITY = 1e-9


def poisson_capacity(num_train: int, batch_size: int,
                     overflow_probability: float = POISSON_OVERFLOW_PROBABILITY) -> int:
    """Padded batch capacity K with ``P(Binomial(num_train, q) > K) < overflow_probability``.

    ``q = batch_size / num_train``. A draw above K is still processed exactly (in more
    blocks of K rows), so K only trades memory and time, never privacy.
    """
    n = check_positive_int("num_train", num_train)
    b = check_positive_int("batch_size", batch_size)
    p = check_open_unit("overflow_probability", overflow_probability)
    q = min(b / n, 1.0)
    k = int(binom.isf(p, n, q))
    while k < n and binom.sf(k, n, q) >= p:  # isf is a float search: make sure
        k += 1
    return max(1, min(k, n))


def _poisson_threshold(batch_size: int, num_train: int) -> int:
    """``⌊q·2³²⌋`` for q = batch_size/num_train (exact integers), at most 2³²−1."""
    return min((batch_size << 32) // num_train, 2**32 - 1)


def poisson_sample(key: jax.Array, num_train: int, batch_size: int) -> jax.Array:
    """``bool[num_train]``: each example independently with probability ``≤ q = B/n``.

    Example ``i`` is included iff its 32 random bits are ``< ⌊q·2³²⌋``, so the rate is
    exactly ``⌊q·2³²⌋/2³²`` (``q`` up to < 2.4e-10): accounting with ``q`` is conservative.
    """
    bits = random_bits(key, (num_train,))
    return bits < jnp.uint32(_poisson_threshold(batch_size, num_train))


def epoch_keys(key: jax.Array, epoch: int, steps: int) -> jax.Array:
    """The ``steps`` Poisson-sampling keys of one epoch: ``split(fold_in(key, epoch), steps)``."""
    return jax.random.split(jax.random.fold_in(key, epoch), steps)


def epoch_permutation(key: jax.Array, epoch: int, num_train: int, steps: int,
                      batch_size: int) -> jax.Array:
    """Shuffle sampling: row indices ``int32[steps, batch_size]`` of one epoch.

    A fresh permutation ``jax.random.permutation(fold_in(key, epoch), num_train)``, cut
    into disjoint batches, remainder dropped: each row is in at most one batch per epoch.
    """
    perm = jax.random.permutation(jax.random.fold_in(key, epoch), num_train)
    return perm[: steps * batch_size].reshape(steps, batch_size).astype(jnp.int32)
