"""Play the distinguishing game: n outputs of ``M(x0)`` and n of ``M(x1)``, scored in one kernel.

Trial ``i`` under input ``which`` (0 for ``x0``, 1 for ``x1``) runs the mechanism with the key
``fold_in(fold_in(key, which), i)``: keys come from positions, so any chunking, any order
and any split of the trials into selection and evaluation parts reproduces the same
outputs. The trials of a chunk are ``vmap``-ped inside one jitted kernel that also applies
the score, so only scalars (or, when counting, a histogram) reach the host; memory is
O(chunk × output size) whatever the number of trials.

For threefry keys (JAX's default) the per-trial keys are derived with ldpsim's unrolled
Threefry (:func:`ldpsim._src.privacy.noise.sampling.threefry2x32`, bit-for-bit ``jax.random.fold_in``,
about 3× faster on CPU); other key types use ``jax.random.fold_in``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src import _xla
from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.audit._mechanisms import Mechanism, Score
from ldpsim._src.privacy.noise import sampling

PyTree = Any

#: Trials × output coordinates that one chunk holds at most (16 MiB of float32).
CHUNK_ELEMENTS = 2**22
#: The most trials in one chunk (scalar mechanisms).
MAX_CHUNK = 2**20
#: Thresholds that :meth:`Game.count_above` compares directly (more: binary search + histogram).
DIRECT_THRESHOLDS = 16
#: Trials per input are counted with uint32 positions.
MAX_TRIALS = 2**32


class Scores(NamedTuple):
    """Scores of the trials, in trial order (float64 copies of the kernel's values)."""

    x0: np.ndarray
    x1: np.ndarray


def _raw_threefry(key: jax.Array) -> tuple[jax.Array, bool] | None:
    """``(uint32[2] words, typed)`` for a threefry key (typed or raw); None for other keys."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if "threefry" not in str(jax.random.key_impl(key)) or key.shape != ():
            return None
        return jax.random.key_data(key), True
    if key.shape == (2,) and key.dtype == jnp.uint32:
        return key, False
    return None


def trial_keys(key: jax.Array, which: int, start: int | jax.Array, count: int) -> jax.Array:
    """The keys ``fold_in(fold_in(key, which), start + j)`` for ``j < count`` (a batch of keys).

    Args:
        key: the root key of the game (typed or raw).
        which: 0 for the trials of ``x0``, 1 for those of ``x1``.
        start: the position of the first trial (may be traced).
        count: how many keys (static).

    Returns:
        A batch of ``count`` keys of the same kind as ``key``.
    """
    inner = jax.random.fold_in(key, which)
    idx = jnp.asarray(start, jnp.uint32) + jnp.arange(count, dtype=jnp.uint32)
    raw = _raw_threefry(inner)
    if raw is None:
        return jax.vmap(lambda i: jax.random.fold_in(inner, i))(idx)
    words, typed = raw
    a, b = sampling.threefry2x32(words[0], words[1], jnp.zeros_like(idx), idx)
    data = jnp.stack([a, b], axis=-1)
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(inner)) if typed else data


def _output_size(mechanism: Mechanism, x: PyTree, key: jax.Array) -> int:
    shapes = jax.eval_shape(mechanism, key, x)
    return max(1, sum(math.prod(s.shape) for s in jax.tree_util.tree_leaves(shapes)))


def default_chunk(mechanism: Mechanism, x: PyTree, key: jax.Array) -> int:
    """Trials per chunk: ``CHUNK_ELEMENTS // output size``, between 1 and ``MAX_CHUNK``."""
    return int(min(MAX_CHUNK, max(1, CHUNK_ELEMENTS // _output_size(mechanism, x, key))))


def _kernels(mechanism: Mechanism, score: Score, chunk: int) -> tuple:
    """The three jitted chunk kernels of a game: scores, direct counts, histogram counts."""

    def scores(key, which, x, start):
        keys = trial_keys(key, which, start, chunk)
        return jax.vmap(lambda k: jnp.reshape(score(mechanism(k, x)), ()))(keys)

    def direct(key, which, x, start, valid, thresholds):
        # #{s > t_j} for a few thresholds and #{NaN}, in one variadic reduction (XLA would
        # recompute the mechanism for each output of separate reductions)
        s = scores(key, which, x, start).astype(jnp.float32)
        live = jnp.arange(chunk) < valid
        rows = [((s > thresholds[j]) & live).astype(jnp.int32) for j in range(thresholds.shape[0])]
        rows.append((jnp.isnan(s) & live).astype(jnp.int32))
        zeros = tuple(np.int32(0) for _ in rows)
        return jax.lax.reduce(tuple(rows), zeros, lambda a, b: tuple(u + v for u, v in zip(a, b)), (0,))

    def histogram(key, which, x, start, valid, thresholds, lo, inv_step):
        # counts of #{t_j < s} in [0, m], NaN in bin m + 1; a uniform grid (inv_step > 0) is
        # located arithmetically, other sorted thresholds by binary search
        s = scores(key, which, x, start).astype(jnp.float32)
        live = jnp.arange(chunk) < valid
        m = thresholds.shape[0]
        pos = jax.lax.cond(inv_step > 0, lambda: _grid_position(s, thresholds, lo, inv_step),
                           lambda: jnp.searchsorted(thresholds, s, side="left").astype(jnp.int32))
        pos = jnp.where(jnp.isnan(s), m + 1, pos)
        return jnp.zeros(m + 2, jnp.int32).at[pos].add(live.astype(jnp.int32))

    return _xla.jit(scores), _xla.jit(direct), _xla.jit(histogram)


@functools.lru_cache(maxsize=16)
def _cached_kernels(mechanism: Mechanism, score: Score, chunk: int) -> tuple:
    """:func:`_kernels`, shared by every game of the same mechanism, score and chunk (JAX's
    own cache then reuses the compiled code for inputs of the same shapes)."""
    return _kernels(mechanism, score, chunk)


class Game:
    """The distinguishing game of one mechanism, pair, score and root key, compiled once.

    :meth:`scores` and :meth:`count_above` reuse one jitted chunk kernel each (the trial
    positions are traced), so selection and evaluation of an audit compile once, and games
    of the same mechanism, score and chunk share the kernels.

    Args:
        mechanism: ``(key, x) -> output``, pure and vmappable over the key.
        x0, x1: the neighbouring inputs (pytrees of the same structure).
        score: ``output -> scalar``, jittable.
        key: the root key; trial ``i`` of input ``w`` uses ``fold_in(fold_in(key, w), i)``.
        chunk_size: trials per kernel call (default :func:`default_chunk`).
    """

    def __init__(self, mechanism: Mechanism, x0: PyTree, x1: PyTree, score: Score, *, key: jax.Array,
                 chunk_size: int | None = None) -> None:
        if not isinstance(key, jax.Array):
            raise LdpsimError(f"key must be a JAX PRNG key, got {type(key).__name__}")
        self.inputs, self.key = (x0, x1), key
        if chunk_size is None:
            chunk = default_chunk(mechanism, x0, key)
        else:
            chunk = check_positive_int("chunk_size", chunk_size)
        self.chunk = chunk

        try:
            kernels = _cached_kernels(mechanism, score, chunk)
        except TypeError:  # an unhashable callable: compile for this game only
            kernels = _kernels(mechanism, score, chunk)
        self._scores, self._direct, self._histogram = kernels

    def _chunks(self, start: int, trials: int):
        trials = check_positive_int("trials", trials)
        if start < 0 or start + trials > MAX_TRIALS:
            raise LdpsimError(f"trial positions must lie in [0, 2**32); got {start} + {trials} trials")
        for lo in range(0, trials, self.chunk):
            yield lo, min(self.chunk, trials - lo)

    def scores(self, *, trials: int, start: int = 0, progress: Callable[[int], Any] | None = None) -> Scores:
        """Scores of trials ``start, …, start + trials − 1`` under each input (see :func:`play`)."""
        out = []
        for which, x in enumerate(self.inputs):
            s = np.empty(trials, np.float64)
            for lo, m in self._chunks(start, trials):
                chunk = self._scores(self.key, np.uint32(which), x, np.uint32(start + lo))
                s[lo:lo + m] = np.asarray(chunk)[:m]
                if progress is not None:
                    progress(m)
            out.append(s)
        return Scores(*out)

    def count_above(self, thresholds: np.ndarray, *, trials: int, start: int = 0,
                    progress: Callable[[int], Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Counts of scores above each threshold, taken in the kernel (see :func:`count_above`).

        Up to :data:`DIRECT_THRESHOLDS` thresholds are compared directly (about 10⁸ scalar
        trials/s on 2 cores); more go through a binary search and a histogram (about 10⁷).
        """
        t = np.asarray(thresholds, np.float32)
        if t.ndim != 1 or t.size < 1 or np.any(np.diff(t) < 0):
            raise LdpsimError("thresholds must be a non-empty 1-D increasing array")
        if trials <= self.chunk:  # one chunk: count its scores on the host (reuses the scores kernel)
            return self._host_counts(t, trials, start, progress)
        if t.size <= DIRECT_THRESHOLDS:
            out = self._run(self._direct, trials, start, progress, jnp.asarray(t))
            return out[0][:-1], out[1][:-1]
        out = self._run(self._histogram, trials, start, progress, jnp.asarray(t), np.float32(0), np.float32(0))
        return tuple(trials - np.cumsum(h)[:-2] for h in out)

    def count_above_grid(self, lo: float, step: float, size: int, *, trials: int, start: int = 0,
                         progress: Callable[[int], Any] | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Counts above the grid ``float32(lo + j·step)``, ``j < size``: O(1) per score at any size.

        Returns:
            ``(thresholds, above0, above1)``.
        """
        size = check_positive_int("size", size)
        grid = (lo + step * np.arange(size, dtype=np.float64)).astype(np.float32)
        reach = float(np.max(np.abs(grid)))
        if size < 2 or not step >= 64 * float(np.spacing(np.float32(reach))):
            raise LdpsimError("the grid needs size >= 2 and a step of at least 64 float32 ulps of its values")
        if trials <= self.chunk:
            return (grid, *self._host_counts(grid, trials, start, progress))
        out = self._run(self._histogram, trials, start, progress, jnp.asarray(grid), np.float32(lo),
                        np.float32(1.0 / step))
        return grid, trials - np.cumsum(out[0])[:-2], trials - np.cumsum(out[1])[:-2]

    def _host_counts(self, t: np.ndarray, trials: int, start: int, progress) -> tuple[np.ndarray, np.ndarray]:
        s = self.scores(trials=trials, start=start, progress=progress)
        for which, v in enumerate(s):
            nans = int(np.isnan(v).sum())
            if nans:
                raise LdpsimError(f"{nans} of {trials} scores under x{which} are NaN: "
                                  "the mechanism or score is broken")
        # float32 scores and thresholds compared in float64: the same order as in the kernel
        return tuple(trials - np.searchsorted(np.sort(v), t, side="right") for v in s)

    def _run(self, kernel, trials, start, progress, *args) -> list[np.ndarray]:
        """Sum ``kernel``'s int counts over the chunks, per input; the last entry counts NaNs."""
        out = []
        for which, x in enumerate(self.inputs):
            acc = None
            for lo, m in self._chunks(start, trials):
                part = np.asarray(kernel(self.key, np.uint32(which), x, np.uint32(start + lo), np.int32(m), *args),
                                  np.int64)
                acc = part if acc is None else acc + part
                if progress is not None:
                    progress(m)
            if acc[-1]:
                raise LdpsimError(f"{acc[-1]} of {trials} scores under x{which} are NaN: "
                                  "the mechanism or score is broken")
            out.append(acc)
        return out


def _grid_position(s: jax.Array, grid: jax.Array, lo: jax.Array, inv_step: jax.Array) -> jax.Array:
    """``#{j: grid_j < s}`` for an increasing, nearly uniform grid: the guess ``⌈(s − lo)/step⌉``
    is within one of the answer (float32 rounding of a few ulps, far below a step), so one
    comparison on each side corrects it."""
    m = grid.shape[0]
    if m == 0:
        return jnp.zeros(s.shape, jnp.int32)
    guess = jnp.clip(jnp.ceil((s - lo) * inv_step), 0, m)
    g = jnp.where(jnp.isnan(guess), 0, guess).astype(jnp.int32)
    up = (g < m) & (s > grid[jnp.minimum(g, m - 1)])
    down = (g > 0) & (s <= grid[jnp.maximum(g - 1, 0)])
    return g + up.astype(jnp.int32) - down.astype(jnp.int32)


def play(
    mechanism: Mechanism,
    x0: PyTree,
    x1: PyTree,
    score: Score,
    *,
    key: jax.Array,
    trials: int,
    start: int = 0,
    chunk_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> Scores:
    """Scores of ``trials`` outputs of ``mechanism(·, x0)`` and as many of ``mechanism(·, x1)``.

    Args:
        mechanism: ``(key, x) -> output``, pure and vmappable over the key.
        x0, x1: the neighbouring inputs (pytrees of the same structure).
        score: ``output -> scalar``, jittable.
        key: the root key; trial ``i`` of input ``w`` uses ``fold_in(fold_in(key, w), i)``.
        trials: trials per input (≥ 1).
        start: position of the first trial (the trials are ``start, …, start + trials − 1``).
        chunk_size: trials per kernel call (default :func:`default_chunk`).
        progress: called with the number of trials just finished, after every chunk.

    Returns:
        :class:`Scores` with ``trials`` float64 scores per input (the kernel computes in
        the score's dtype, float32 for ldpsim's mechanisms).

    Raises:
        LdpsimError: ``trials`` < 1, positions beyond 2**32, or a bad ``chunk_size``.
    """
    trials = check_positive_int("trials", trials)
    game = Game(mechanism, x0, x1, score, key=key, chunk_size=_chunk(chunk_size, mechanism, x0, key, trials))
    return game.scores(trials=trials, start=start, progress=progress)


def count_above(
    mechanism: Mechanism,
    x0: PyTree,
    x1: PyTree,
    score: Score,
    thresholds: np.ndarray,
    *,
    key: jax.Array,
    trials: int,
    start: int = 0,
    chunk_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """How many of the trials score strictly above each threshold, counted in the kernel.

    Same game as :func:`play` (same keys, so the same outputs), but only a histogram over
    ``thresholds`` leaves the kernel: memory is O(chunk) for any number of trials.

    Args:
        thresholds: increasing float32 thresholds ``t_j``; the other arguments as in :func:`play`.

    Returns:
        ``(above0, above1)``: int64 arrays, ``above_w[j] = #{i: score_i > t_j}`` under ``x_w``.

    Raises:
        LdpsimError: as :func:`play`; a NaN score (the mechanism or score is broken).
    """
    trials = check_positive_int("trials", trials)
    game = Game(mechanism, x0, x1, score, key=key, chunk_size=_chunk(chunk_size, mechanism, x0, key, trials))
    return game.count_above(thresholds, trials=trials, start=start, progress=progress)


def _chunk(chunk_size: int | None, mechanism: Mechanism, x: PyTree, key: jax.Array, trials: int) -> int:
    """The chunk of a game: ``chunk_size``, or :func:`default_chunk` whatever ``trials`` is (a
    fixed chunk lets games of any size share compiled kernels; the spare trials of the last
    chunk are computed and dropped)."""
    if not isinstance(key, jax.Array):
        raise LdpsimError(f"key must be a JAX PRNG key, got {type(key).__name__}")
    if chunk_size is None:
        return default_chunk(mechanism, x, key)
    return check_positive_int("chunk_size", chunk_size)
