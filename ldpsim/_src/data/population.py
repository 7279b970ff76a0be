"""Client populations: what the simulation engine reads a cohort's data from.

A *population* is a pytree with static metadata and one jittable method::

    x, y, counts = population.gather(client_ids)   # client_ids: int32[m]
    # x: float32[m, max_examples, *input_shape]  (int32 for token inputs)
    # y: int32[m, max_examples]
    # counts: int32[m]; rows i >= counts[c] of client c are padding (any value)

Static fields (Python values, part of the jit cache key): ``num_clients``,
``max_examples``, ``input_shape``, ``num_classes``.  Host side,
``client_counts()`` returns every client's example count as a NumPy array.

Two kinds exist:

* :class:`PaddedPopulation` wraps materialised per-client arrays (the output of a
  partitioner or of a naturally federated dataset); ``gather`` is ``jnp.take``.
* :class:`SampledPopulation` is *virtual*: 10^4 .. 10^6 (or more) clients over a
  base dataset.  Client ``c``'s data is generated inside ``jit`` from
  ``fold_in(key, c)``: its own label distribution ``p_c ~ Dirichlet(alpha * 1)``
  (``alpha = inf``: uniform, i.e. IID), then ``examples_per_client`` labels
  ``y ~ Categorical(p_c)`` and, for each, an example drawn uniformly *with
  replacement* from that class's pool.  Nothing per client is ever materialised;
  a client's data depends only on ``(key, c)``, not on the cohort it is drawn in.
  This is the Dirichlet label-skew model of Hsu et al. 2019 ("Measuring the
  effects of non-identical data distribution for federated visual
  classification", arXiv:1909.06335), with per-client sampling instead of a
  disjoint split so that the population can exceed the dataset.

Input encoding in ``gather``: ``uint8`` storage is returned as ``float32`` in
[0, 1] (``x / 255``), other floating storage as ``float32``, integer storage
(token ids) as ``int32``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import LdpsimError, check_positive, check_positive_int

__all__ = ["PaddedPopulation", "SampledPopulation", "decode_inputs"]


# k / 255 correctly rounded (NumPy division); XLA would compute x * (1/255) instead,
# which differs from NumPy's k / 255 in the last bit for about half of the values.
_U8_TO_UNIT = np.arange(256, dtype=np.float32) / np.float32(255.0)


def decode_inputs(x: jax.Array) -> jax.Array:
    """Map stored inputs to model inputs: uint8 -> float32 k/255, float -> float32, int -> int32.

    The uint8 decoding is a table lookup, bit-identical to NumPy's
    ``x.astype(np.float32) / 255``.
    """
    if x.dtype == jnp.uint8:
        return jnp.asarray(_U8_TO_UNIT)[x]
    if jnp.issubdtype(x.dtype, jnp.floating):
        return x.astype(jnp.float32)
    return x.astype(jnp.int32)


def _compact_inputs(x: np.ndarray) -> np.ndarray:
    """Lossless compact storage: float multiples of 1/255 in [0, 1] -> uint8, small token ids -> int8."""
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.integer) and x.dtype != np.uint8:
        # Token ids: int8 when they fit (decoded back to int32).
        if x.size and x.min() >= 0 and x.max() < 128:
            return x.astype(np.int8)
        return x.astype(np.int32)
    if x.dtype == np.uint8 or not np.issubdtype(x.dtype, np.floating):
        return x
    if x.size and (x.min() < 0.0 or x.max() > 1.0):
        return x.astype(np.float32)
    as_u8 = np.rint(x * 255.0).astype(np.uint8)
    if np.array_equal(as_u8.astype(np.float32) / np.float32(255.0), x.astype(np.float32)):
        return as_u8
    return x.astype(np.float32)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PaddedPopulation:
    """Materialised per-client data, padded to one shape.

    Attributes:
      x: stored inputs ``[num_clients, max_examples, *input_shape]`` (uint8 images,
        float features or integer tokens; see :func:`decode_inputs`).
      y: labels ``int32[num_clients, max_examples]``.
      counts: ``int32[num_clients]``, examples held by each client (>= 0).
      num_classes: number of label classes (static).
    """

    x: jax.Array
    y: jax.Array
    counts: jax.Array
    num_classes: int = dataclasses.field(metadata=dict(static=True))

    @classmethod
    def from_arrays(
        cls,
        x: Any,
        y: Any,
        counts: Any,
        num_classes: int | None = None,
        *,
        compact: bool = True,
    ) -> "PaddedPopulation":
        """Wrap padded arrays ``x [N, M, ...]``, ``y [N, M]``, ``counts [N]``.

        Args:
          x, y, counts: host or device arrays; padding rows may hold any value.
          num_classes: defaults to ``max(y over real rows) + 1``.
          compact: store float inputs that are exact multiples of 1/255 as uint8
            (4x less memory; ``gather`` returns the identical float32 values).

        Raises:
          LdpsimError: on inconsistent shapes or counts outside ``[0, M]``.
        """
        x = np.asarray(x)
        y = np.asarray(y)
        counts = np.asarray(counts)
        if x.ndim < 2 or y.ndim != 2 or counts.ndim != 1:
            raise LdpsimError(
                "PaddedPopulation needs x [N, M, ...], y [N, M], counts [N]; got shapes "
                f"x={x.shape}, y={y.shape}, counts={counts.shape}"
            )
        if x.shape[:2] != y.shape or y.shape[0] != counts.shape[0]:
            raise LdpsimError(
                f"PaddedPopulation shapes disagree: x={x.shape}, y={y.shape}, counts={counts.shape}"
            )
        if counts.size and (counts.min() < 0 or counts.max() > y.shape[1]):
            raise LdpsimError(
                f"counts must lie in [0, max_examples={y.shape[1]}], got range "
                f"[{counts.min()}, {counts.max()}]"
            )
        if num_classes is None:
            mask = np.arange(y.shape[1])[None, :] < counts[:, None]
            num_classes = int(y[mask].max()) + 1 if mask.any() else 1
        num_classes = check_positive_int("num_classes", num_classes)
        if compact:
            x = _compact_inputs(x)
        return cls(
            x=jnp.asarray(x),
            y=jnp.asarray(y, dtype=jnp.int32),
            counts=jnp.asarray(counts, dtype=jnp.int32),
            num_classes=num_classes,
        )

    @property
    def num_clients(self) -> int:
        return int(self.counts.shape[0])

    @property
    def max_examples(self) -> int:
        return int(self.y.shape[1])

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.x.shape[2:])

    def client_counts(self) -> np.ndarray:
        """All clients' example counts (host NumPy int64 array)."""
        return np.asarray(self.counts, dtype=np.int64)

    def gather(self, client_ids: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Data of the clients ``client_ids`` (int32[m]); jittable.

        Returns:
          ``(x, y, counts)`` with shapes ``[m, max_examples, *input_shape]``,
          ``[m, max_examples]``, ``[m]``.  Ids must lie in ``[0, num_clients)``;
          out-of-range ids are clamped (JAX indexing semantics), not checked.
        """
        ids = jnp.asarray(client_ids, dtype=jnp.int32)
        x = decode_inputs(jnp.take(self.x, ids, axis=0, mode="clip"))
        y = jnp.take(self.y, ids, axis=0, mode="clip")
        counts = jnp.take(self.counts, ids, axis=0, mode="clip")
        return x, y, counts


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SampledPopulation:
    """A virtual population of clients sampled, per id, from a base dataset.

    Build it with :meth:`create`.  Client ``c`` (``0 <= c < num_clients``) has
    ``examples_per_client`` examples generated from ``k_c = fold_in(key, c)``:

    1. ``p_c ~ Dirichlet(alpha * 1_K)`` over the ``K`` classes present in the base
       data (sampled as normalised Gamma(alpha) in log space, so it is exact and
       finite for very small alpha); ``alpha = inf`` gives ``p_c`` uniform over
       classes (class-balanced IID sampling).
    2. labels ``y_i ~ Categorical(p_c)``, i.i.d.;
    3. for each label, an example index uniform in that class's pool, with
       replacement.

    Every client therefore holds exactly ``examples_per_client`` examples
    (``counts`` is constant).  The result is deterministic in ``(key, c)`` and
    does not depend on which other clients are in the cohort or on the cohort size.

    Attributes:
      base_x: base inputs ``[n, *input_shape]`` stored once (uint8 for images).
      base_y: base labels ``int32[n]``.
      class_pools: ``int32[K, max_pool]``, indices into ``base_x`` per class
        (padded by repeating; only the first ``class_sizes[k]`` are used).
      class_sizes: ``int32[K]``.
      key: the population's PRNG key (typed key array).
      alpha: Dirichlet concentration, a float32 scalar (traced; ``inf`` = IID).
      num_clients, max_examples, num_classes, input_shape: static.
    """

    base_x: jax.Array
    base_y: jax.Array
    class_pools: jax.Array
    class_sizes: jax.Array
    key: jax.Array
    alpha: jax.Array
    num_clients: int = dataclasses.field(metadata=dict(static=True))
    max_examples: int = dataclasses.field(metadata=dict(static=True))
    num_classes: int = dataclasses.field(metadata=dict(static=True))
    input_shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))

    @classmethod
    def create(
        cls,
        x: Any,
        y: Any,
        *,
        num_clients: int,
        examples_per_client: int,
        alpha: float = math.inf,
        seed: int | jax.Array = 0,
        num_classes: int | None = None,
    ) -> "SampledPopulation":
        """Build a sampled population over the base examples ``(x, y)``.

        Args:
          x: base inputs ``[n, *input_shape]``; floats that are multiples of 1/255
            are stored as uint8 (lossless).
          y: base labels, integers in ``[0, num_classes)``.
          num_clients: population size (any positive int, e.g. 10**6).
          examples_per_client: examples each client holds (its ``max_examples``).
          alpha: Dirichlet label-skew concentration in ``(0, inf]``; ``inf`` = IID.
          seed: int seed or a JAX PRNG key.
          num_classes: defaults to ``max(y) + 1``.

        Raises:
          LdpsimError: alpha <= 0, non-positive sizes, or empty base data.
        """
        num_clients = check_positive_int("num_clients", num_clients)
        examples_per_client = check_positive_int("examples_per_client", examples_per_client)
        alpha = check_positive("alpha", alpha, allow_inf=True)
        x = _compact_inputs(np.asarray(x))
        y = np.asarray(y).astype(np.int64)
        if y.ndim != 1 or x.shape[0] != y.shape[0] or y.size == 0:
            raise LdpsimError(
                f"SampledPopulation needs base x [n, ...] and y [n] with n >= 1; got "
                f"x={x.shape}, y={y.shape}"
            )
        if num_classes is None:
            num_classes = int(y.max()) + 1
        num_classes = check_positive_int("num_classes", num_classes)
        if y.min() < 0 or y.max() >= num_classes:
            raise LdpsimError(f"labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
        sizes = np.bincount(y, minlength=num_classes)
        order = np.argsort(y, kind="stable")
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        width = int(sizes.max())
        cols = np.arange(width)[None, :]
        # Pad each pool by cycling its own indices (never read beyond class_sizes).
        pos = starts[:, None] + np.where(sizes[:, None] > 0, cols % np.maximum(sizes, 1)[:, None], 0)
        pools = order[np.minimum(pos, len(order) - 1)].astype(np.int32)
        key = jax.random.key(seed) if isinstance(seed, (int, np.integer)) else seed
        return cls(
            base_x=jnp.asarray(x),
            base_y=jnp.asarray(y, dtype=jnp.int32),
            class_pools=jnp.asarray(pools),
            class_sizes=jnp.asarray(sizes, dtype=jnp.int32),
            key=key,
            alpha=jnp.asarray(alpha, dtype=jnp.float32),
            num_clients=num_clients,
            max_examples=examples_per_client,
            num_classes=num_classes,
            input_shape=tuple(int(d) for d in x.shape[1:]),
        )

    def client_counts(self) -> np.ndarray:
        """Every client holds ``max_examples`` examples: a constant array."""
        return np.full(self.num_clients, self.max_examples, dtype=np.int64)

    def label_log_probs(self, client_ids: jax.Array) -> jax.Array:
        """``log p_c`` (float32[m, num_classes]) of each client's label distribution.

        Classes with no base examples get probability 0 (``-inf``).
        """
        ids = jnp.asarray(client_ids, dtype=jnp.int32)
        return jax.vmap(self._log_probs)(ids)

    def _client_key(self, cid: jax.Array, stream: int) -> jax.Array:
        return jax.random.fold_in(jax.random.fold_in(self.key, cid), stream)

    def _log_probs(self, cid: jax.Array) -> jax.Array:
        present = self.class_sizes > 0
        iid = jnp.isinf(self.alpha)
        safe_alpha = jnp.where(iid, 1.0, self.alpha)
        log_g = jax.random.loggamma(
            self._client_key(cid, 0), jnp.full((self.num_classes,), safe_alpha)
        )
        logits = jnp.where(iid, 0.0, log_g)
        logits = jnp.where(present, logits, -jnp.inf)
        return logits - jax.scipy.special.logsumexp(logits)

    def _one_client(self, cid: jax.Array) -> tuple[jax.Array, jax.Array]:
        log_p = self._log_probs(cid)
        labels = jax.random.categorical(
            self._client_key(cid, 1), log_p, shape=(self.max_examples,)
        ).astype(jnp.int32)
        slot = jax.random.randint(
            self._client_key(cid, 2), (self.max_examples,), 0, self.class_sizes[labels]
        )
        idx = self.class_pools[labels, slot]
        return jnp.take(self.base_x, idx, axis=0), labels

    def gather(self, client_ids: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Generate the data of clients ``client_ids`` (int32[m]); jittable.

        Returns:
          ``(x float32[m, max_examples, *input_shape], y int32[m, max_examples],
          counts int32[m])`` with ``counts == max_examples``.
        """
        ids = jnp.asarray(client_ids, dtype=jnp.int32)
        x, y = jax.vmap(self._one_client)(ids)
        counts = jnp.full(ids.shape, self.max_examples, dtype=jnp.int32)
        return decode_inputs(x), y, counts
