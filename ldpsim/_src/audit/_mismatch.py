"""The support-mismatch test: an event one input's releases hit and the other's never do.

Why a second test
-----------------
The threshold test of :func:`ldpsim.audit.audit` looks at one score, usually the likelihood
ratio of the *ideal* law. A float32 realisation can break a pure-ε claim in a place that
score ignores: an output the sampler produces under one input and can never produce under
the other. Examples: PrivUnitG's ``α`` comes from ``ndtri`` of a uniform that is at least
2⁻²³, so the coordinate along the input never falls below a floor that the raw Gaussian draws
on the other coordinates do go below; a SignDS count whose probability is below the float32
CDF's resolution is never drawn under one update and is common under another; bounded noise
(``|z| ≤ Tσ``) against a shifted input. An event of probability 0 under ``x_b`` and ``p > 0``
under ``x_a`` satisfies no finite ε at δ < p.

What it does
------------
The releases of both inputs are reduced to a vector of 1-D statistics (:class:`Statistics`;
:func:`default_statistics`: the audit's score, the projection on ``x1 − x0``, every output
coordinate or, for large releases, the coordinates where the inputs differ, each leaf's min
and max, and a hash of a small release with integer entries). The trials of each input are split three ways:

* **S1** (the first half of the selection trials): per statistic, each input's smallest and
  largest value, and for statistics with at most :data:`MAX_VALUES` distinct values on a
  pilot of S1, the set of values seen. Candidate regions: below the other input's minimum,
  above its maximum, and the values (or NaN) seen under one input and never under the other.
* **S2** (the rest of the selection trials): every candidate region's hits under both inputs.
  Each is rated by the bound its rates would give at the evaluation size; the best one is
  kept (one statistic, one region, one direction).
* **Evaluation** (the remaining trials, disjoint from S1 and S2): that one region's hits
  ``n_a`` under the input it was chosen for and ``n_b`` under the other.

The bound: with ``L`` the Clopper–Pearson lower bound of ``n_a/N`` and ``U`` the upper bound of
``n_b/N``, each at ``1 − α/2`` (``U = 1 − (α/2)^{1/N}`` when ``n_b = 0``), an (ε, δ)-DP
mechanism has ``P_a(R) ≤ e^ε·P_b(R) + δ``, so ``ε ≥ ε_lb = log((L − δ)/U)`` with probability
at least ``1 − α`` (union bound), and a claim with ``L > e^ε·U + δ`` is refuted. The region
is fixed before the evaluation trials are drawn, so the bound is valid however many
statistics and regions were tried on S1 and S2.

What it cannot do
-----------------
Sampling never proves a probability is 0: ``U ≥ 1 − (α/2)^{1/N} ≈ log(2/α)/N``, so ``ε_lb``
never exceeds ``epsilon_cap ≈ log(N/log(2/α))`` (13.0 for N = 10⁶ at 95 %). A region of
probability ``p`` under one input and 0 under the other refutes a claim ε only from about
``e^ε·log(2/α)/p`` evaluation trials per input (:meth:`SupportMismatch.trials_to_refute`).
A mismatch seen with ``n_b = 0`` (``observed``) but ``ε_lb`` below the claim is evidence, not
a refutation: the ideal law may give that region a probability too small to sample.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sstats

from ldpsim._src import _xla
from ldpsim._src._checks import LdpsimError, check_open_unit, check_positive_int
from ldpsim._src.audit import _bounds, _game
from ldpsim._src.audit._game import trial_keys
from ldpsim._src.audit._mechanisms import (  # noqa: F401  (Statistic: re-exported)
    Statistic,
    identity_score,
    projection_score,
)

PyTree = Any

#: A statistic with at most this many distinct values on the S1 pilot is also tested value by value.
MAX_VALUES = 256
#: Releases with at most this many coordinates have every coordinate as a statistic.
MAX_COORDINATES = 32
#: For larger releases, at most this many coordinates where ``x1 ≠ x0`` (when the release
#: has the input's shape) and this many leading coordinates of each leaf.
MAX_DIFF_COORDINATES = 4
MAX_LEAF_COORDINATES = 2
#: Releases with an integer or boolean leaf and at most this many coordinates get a hash of
#: the whole release (its set of distinct values is tested when it is small).
MAX_HASHED = 64
#: The most statistics :func:`default_statistics` returns.
MAX_STATISTICS = 64
#: S1 trials per input whose statistics are kept on the host (the value sets); beyond it
#: the extremes over S1 are taken in the kernel.
PILOT_TRIALS = 2**18
#: Trials per input and phase whose statistics are reduced on the host, chunk by chunk (one
#: compiled kernel for the whole test); beyond it the extremes and counts are taken in
#: kernels of their own (no transfer of every statistic: the large audits of an accelerator).
HOST_TRIALS = 2**24

KINDS = ("lt", "gt", "in")


class Statistics(NamedTuple):
    """The statistics of a support-mismatch test: names, orderedness and one vector function.

    ``fn(release) -> float32[m]``; ``names[j]`` and ``ordered[j]`` describe entry ``j``.
    Build with :func:`statistics_of` (memoised, so equal lists share compiled kernels).
    """

    names: tuple[str, ...]
    ordered: tuple[bool, ...]
    fn: Callable[[PyTree], jax.Array]

    @property
    def size(self) -> int:
        return len(self.names)


@functools.lru_cache(maxsize=256)
def statistics_of(items: tuple[Statistic, ...]) -> Statistics:
    """The :class:`Statistics` of a tuple of :class:`Statistic` (memoised on the tuple)."""
    if not items:
        raise LdpsimError("a support-mismatch test needs at least one statistic")
    sizes = tuple(len(s.name) if isinstance(s.name, tuple) else 0 for s in items)
    fns = tuple(s.fn for s in items)

    def fn(release):
        parts = [jnp.reshape(f(release), (n,) if n else (1,)).astype(jnp.float32) for f, n in zip(fns, sizes)]
        return jnp.concatenate(parts)

    names, ordered = [], []
    for s in items:
        block = s.name if isinstance(s.name, tuple) else (s.name,)
        names += block
        ordered += [bool(s.ordered)] * len(block)
    return Statistics(tuple(names), tuple(ordered), fn)


# ----------------------------------------------------------------------- default statistics


@functools.lru_cache(maxsize=1024)
def _coordinate(leaf: int, index: int) -> Callable:
    def fn(release):
        return jnp.ravel(jax.tree_util.tree_leaves(release)[leaf])[index]

    return fn


@functools.lru_cache(maxsize=256)
def _coordinates(sizes: tuple[int, ...], coords: tuple[tuple[int, int], ...]) -> Callable:
    """The release's coordinates ``coords`` (``(leaf, flat index)``) as one float32 vector."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    flat = np.asarray([offsets[i] + j for i, j in coords], np.int64)
    everything = flat.size == sum(sizes) and np.array_equal(flat, np.arange(flat.size))

    def fn(release):
        v = jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree_util.tree_leaves(release)])
        return v if everything else v[flat]

    return fn


@functools.lru_cache(maxsize=256)
def _leaf_extreme(leaf: int, which: str) -> Callable:
    def fn(release):
        x = jnp.ravel(jax.tree_util.tree_leaves(release)[leaf]).astype(jnp.float32)
        return jnp.min(x) if which == "min" else jnp.max(x)

    return fn


def _words(x: jax.Array) -> jax.Array:
    """The bits of a leaf as uint32 words (NaNs of every payload become one word)."""
    x = jnp.ravel(x)
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
        x = jnp.where(jnp.isnan(x), jnp.float32(jnp.nan), x)
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    return x.astype(jnp.int32).astype(jnp.uint32)


def _release_hash(release) -> jax.Array:
    """A 24-bit hash of every word of the release (exact in float32): ``Σ w_i·P^i`` in uint32
    arithmetic, then a multiply-xorshift finaliser. Equal releases hash equal; a set of hash
    values is an event like any other (collisions only cost power)."""
    words = jnp.concatenate([_words(leaf) for leaf in jax.tree_util.tree_leaves(release)])
    powers = np.ones(words.shape[0], np.uint64)
    for i in range(1, powers.size):
        powers[i] = (int(powers[i - 1]) * 16777619) % 2**32
    h = jnp.sum(words * jnp.asarray(powers.astype(np.uint32)), dtype=jnp.uint32)
    h = (h ^ (h >> 16)) * jnp.uint32(0x45D9F3B)
    h = h ^ (h >> 16)
    return (h >> 8).astype(jnp.float32)


def _leaf_names(shapes: PyTree) -> list[str]:
    paths = jax.tree_util.tree_flatten_with_path(shapes)[0]
    if len(paths) == 1 and not paths[0][0]:
        return ["output"]
    return [jax.tree_util.keystr(p).replace("'", "").strip("[]").replace("][", ".") or "output"
            for p, _ in paths]


def default_statistics(mechanism: Callable, x0: PyTree, x1: PyTree, key: jax.Array, *,
                       score: Callable | None = None,
                       extra: tuple[Statistic, ...] = ()) -> Statistics:
    """The statistics the audit examines by default (at most :data:`MAX_STATISTICS`).

    A scalar float release scored by itself (:func:`ldpsim.audit.identity_score`, or the
    projection on ``x1 − x0``) has that one statistic. Otherwise, in order: ``extra``; the
    audit's ``score``; the projection on ``(x1 − x0)/‖x1 − x0‖`` when the release has the
    input's structure (unless it is the score); every output coordinate when the release has at
    most :data:`MAX_COORDINATES`, else the coordinates where ``x1 ≠ x0`` (at most
    :data:`MAX_DIFF_COORDINATES`, same structure only) and the first
    :data:`MAX_LEAF_COORDINATES` of each leaf; each leaf's min and max (leaves with more than
    one coordinate); a hash of the whole release (releases with an integer or boolean leaf and
    2 to :data:`MAX_HASHED` coordinates), tested by its set of values only.
    """

    shapes = jax.eval_shape(mechanism, key, x0)
    leaves = jax.tree_util.tree_leaves(shapes)
    names = _leaf_names(shapes)
    sizes = [math.prod(s.shape) for s in leaves]
    total = sum(sizes)

    def label(leaf, index):
        return names[leaf] if sizes[leaf] == 1 and not leaves[leaf].shape else f"{names[leaf]}[{index}]"

    items: list[Statistic] = list(extra)
    in_leaves = jax.tree_util.tree_leaves(x0)
    same = (jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(x0)
            and [s.shape for s in leaves] == [tuple(jnp.shape(v)) for v in in_leaves])
    try:
        projection = projection_score(x0, x1) if same else None
    except LdpsimError:   # x0 == x1: no direction
        projection = None
    if (not extra and total == 1 and jnp.issubdtype(leaves[0].dtype, jnp.floating)
            and score is not None and score in (identity_score, projection)):
        # a scalar release whose score is itself (or ± itself): one statistic says it all
        return statistics_of((Statistic("output" if score is identity_score else "score", score),))
    if score is not None:
        items.append(Statistic("score", score))
    diff_coords: list[tuple[int, int]] = []
    if same:
        if projection is not None and projection is not score:
            items.append(Statistic("projection on x1 - x0", projection))
        for i, (a, b) in enumerate(zip(in_leaves, jax.tree_util.tree_leaves(x1))):
            nz = np.flatnonzero(np.ravel(np.asarray(a, np.float64) != np.asarray(b, np.float64)))
            diff_coords += [(i, int(j)) for j in nz[:MAX_DIFF_COORDINATES - len(diff_coords)]]
    if total <= MAX_COORDINATES:
        coords = [(i, j) for i, n in enumerate(sizes) for j in range(n)]
    else:
        coords = list(diff_coords)
        coords += [(i, j) for i, n in enumerate(sizes) for j in range(min(n, MAX_LEAF_COORDINATES))
                   if (i, j) not in coords]
    if coords:
        items.append(Statistic(tuple(label(i, j) for i, j in coords), _coordinates(tuple(sizes), tuple(coords))))
    for i, n in enumerate(sizes):
        if n > 1:
            items += [Statistic(f"min of {names[i]}", _leaf_extreme(i, "min")),
                      Statistic(f"max of {names[i]}", _leaf_extreme(i, "max"))]
    discrete = any(not jnp.issubdtype(s.dtype, jnp.floating) for s in leaves)
    if discrete and 1 < total <= MAX_HASHED:   # (a one-coordinate release is its own coordinate)
        items.append(Statistic("the whole release (hashed)", _release_hash, ordered=False))
    kept, count = [], 0
    for s in items:
        n = len(s.name) if isinstance(s.name, tuple) else 1
        if count + n > MAX_STATISTICS:
            break
        kept.append(s)
        count += n
    return statistics_of(tuple(kept))


# ---------------------------------------------------------------------------------- kernels


def _kernels(mechanism: Callable, statistics: Statistics, chunk: int) -> tuple:
    fn = statistics.fn

    def values(key, which, x, start):
        keys = trial_keys(key, which, start, chunk)
        # the barrier materialises the releases once: without it XLA may fuse the mechanism
        # into each statistic's reduction and compute it once per statistic
        releases = jax.lax.optimization_barrier(jax.vmap(lambda k: mechanism(k, x))(keys))
        return jax.vmap(fn)(releases)                                      # (chunk, m)

    def extremes(key, which, x, start, valid):
        s = jax.lax.optimization_barrier(values(key, which, x, start))
        live = (jnp.arange(chunk) < valid)[:, None]
        nan = jnp.isnan(s)
        ok = live & ~nan
        return (jnp.min(jnp.where(ok, s, jnp.inf), axis=0), jnp.max(jnp.where(ok, s, -jnp.inf), axis=0),
                jnp.sum(live & nan, axis=0, dtype=jnp.int32))

    def count(key, which, x, start, valid, column, kind, threshold, table, nan_in):
        s = jax.lax.optimization_barrier(values(key, which, x, start))
        live = (jnp.arange(chunk) < valid)[:, None]
        col = jnp.take(s, column, axis=1)                                  # (chunk, R)

        def one_value(w, acc):   # membership by comparison, one table column at a time (no gather)
            return acc | (col == jax.lax.dynamic_index_in_dim(table, w, axis=1, keepdims=False)[None, :])

        member = jax.lax.fori_loop(0, table.shape[1], one_value, jnp.isnan(col) & nan_in[None, :])
        hit = jnp.where(kind[None, :] == 0, col < threshold[None, :],
                        jnp.where(kind[None, :] == 1, col > threshold[None, :], member))
        return jnp.sum(hit & live, axis=0, dtype=jnp.int32)

    return _xla.jit(values), _xla.jit(extremes), _xla.jit(count)


@functools.lru_cache(maxsize=32)
def _cached_kernels(mechanism: Callable, statistics: Statistics, chunk: int) -> tuple:
    return _kernels(mechanism, statistics, chunk)


class _Runner:
    """Chunked calls of the three kernels over trial positions, per input. With ``game`` (a
    :class:`ldpsim.audit.Game` of the same mechanism, inputs and key, whose score is the one
    statistic) its compiled score kernel gives the values: nothing more is compiled for the
    host path."""

    def __init__(self, mechanism, x0, x1, statistics: Statistics, key, chunk, game=None):
        self.inputs, self.key, self.chunk = (x0, x1), key, chunk
        self._names = statistics.names
        if game is not None:
            self.chunk = game.chunk
            scores = game._scores
            self._values = lambda *a: jnp.reshape(scores(*a), (-1, 1))
            self._extremes = self._count = None
            self._fallback = lambda: _cached_kernels(mechanism, statistics, self.chunk)
            return
        try:
            kernels = _cached_kernels(mechanism, statistics, chunk)
        except TypeError:   # an unhashable mechanism: compile for this test only
            kernels = _kernels(mechanism, statistics, chunk)
        self._values, self._extremes, self._count = kernels

    def _kernel(self, which: int):
        if self._extremes is None:   # a game's score kernel: compile the reductions on first use
            _, self._extremes, self._count = self._fallback()
        return self._extremes if which == 0 else self._count

    def _chunks(self, start, trials):
        if start < 0 or start + trials > _game.MAX_TRIALS:
            raise LdpsimError(f"trial positions must lie in [0, 2**32); got {start} + {trials} trials")
        for lo in range(0, trials, self.chunk):
            yield start + lo, min(self.chunk, trials - lo)

    def values(self, which, start, trials, progress):
        out = []
        for pos, m in self._chunks(start, trials):
            out.append(np.asarray(self._values(self.key, np.uint32(which), self.inputs[which],
                                               np.uint32(pos)))[:m])
            if progress is not None:
                progress(m)
        return np.concatenate(out, axis=0)

    def _host_chunks(self, which, start, trials, progress):
        for pos, m in self._chunks(start, trials):
            v = np.asarray(self._values(self.key, np.uint32(which), self.inputs[which], np.uint32(pos)))[:m]
            if progress is not None:
                progress(m)
            yield v

    def extremes(self, which, start, trials, progress):
        lo = hi = nans = None
        for pos, m in self._chunks(start, trials):
            if trials <= HOST_TRIALS:
                v = np.asarray(self._values(self.key, np.uint32(which), self.inputs[which], np.uint32(pos)))[:m]
                ok = ~np.isnan(v)
                a, b, c = (np.where(ok, v, np.inf).min(axis=0), np.where(ok, v, -np.inf).max(axis=0),
                           (~ok).sum(axis=0))
            else:
                a, b, c = (np.asarray(v) for v in self._kernel(0)(
                    self.key, np.uint32(which), self.inputs[which], np.uint32(pos), np.int32(m)))
            lo = a if lo is None else np.minimum(lo, a)
            hi = b if hi is None else np.maximum(hi, b)
            nans = c.astype(np.int64) if nans is None else nans + c
            if progress is not None:
                progress(m)
        return lo, hi, nans

    def count(self, which, start, trials, regions: list["Region"], progress):
        """Hits of each region over the trials (host counts up to :data:`HOST_TRIALS`, else the kernel)."""
        if trials <= HOST_TRIALS:
            acc = np.zeros(len(regions), np.int64)
            for v in self._host_chunks(which, start, trials, progress):
                acc += [region_hits(v[:, g.column], g) for g in regions]
            return acc
        packed = _pack(regions)
        acc = None
        for pos, m in self._chunks(start, trials):
            c = np.asarray(self._kernel(1)(self.key, np.uint32(which), self.inputs[which], np.uint32(pos),
                                       np.int32(m), *packed), np.int64)
            acc = c if acc is None else acc + c
            if progress is not None:
                progress(m)
        return acc[:len(regions)]


# ---------------------------------------------------------------------------------- regions


class Region(NamedTuple):
    """A region of one statistic, chosen for the input ``hit`` (0 or 1).

    ``kind``: ``"lt"`` (statistic < ``threshold``), ``"gt"`` (> ``threshold``), ``"in"`` (one of
    ``values``, or NaN when ``nan``).
    """

    column: int
    kind: str
    hit: int
    threshold: float = 0.0
    values: tuple[float, ...] = ()
    nan: bool = False

    def describe(self, name: str) -> str:
        other = f"x{1 - self.hit}"
        if self.kind == "lt":
            return f"{name} < {self.threshold:.8g} (below every {other} value on the selection trials)"
        if self.kind == "gt":
            return f"{name} > {self.threshold:.8g} (above every {other} value on the selection trials)"
        shown = [f"{v:.8g}" for v in self.values[:6]] + (["NaN"] if self.nan else [])
        more = f", ... ({len(self.values) + self.nan} values)" if len(self.values) > 6 else ""
        return f"{name} in {{{', '.join(shown)}{more}}} (never seen under {other} on the selection trials)"


def region_hits(values: np.ndarray, region: Region) -> int:
    """How many of ``values`` (float32, one statistic) lie in ``region`` (the kernel's rule)."""
    v = np.asarray(values, np.float32)
    if region.kind == "lt":
        return int(np.sum(v < np.float32(region.threshold)))
    if region.kind == "gt":
        return int(np.sum(v > np.float32(region.threshold)))
    member = np.isin(v, np.asarray(region.values, np.float32))
    if region.nan:
        member |= np.isnan(v)
    return int(np.sum(member))


def _pack(regions: list[Region]) -> tuple:
    """Kernel arrays of ``regions``, padded to a multiple of 8 regions and a power-of-two table
    width (padding regions never hit), so few shapes are compiled."""
    r = max(8, -(-len(regions) // 8) * 8)
    width = max(1, max((len(g.values) for g in regions), default=1))
    width = 1 << (width - 1).bit_length()
    column = np.zeros(r, np.int32)
    kind = np.zeros(r, np.int32)
    threshold = np.full(r, -np.inf, np.float32)   # padding: "< -inf" never hits
    table = np.zeros((r, width), np.float32)
    nan_in = np.zeros(r, bool)
    for i, g in enumerate(regions):
        column[i], kind[i] = g.column, KINDS.index(g.kind)
        threshold[i] = g.threshold
        if g.kind == "in":
            vals = np.sort(np.asarray(g.values, np.float32))
            if vals.size:
                table[i, :vals.size] = vals
                table[i, vals.size:] = vals[-1]   # repeats of a member: membership unchanged
            else:
                table[i, :] = np.nan               # NaN only: no value equals NaN
            nan_in[i] = g.nan
    return (jnp.asarray(column), jnp.asarray(kind), jnp.asarray(threshold), jnp.asarray(table),
            jnp.asarray(nan_in))


def candidate_regions(extremes: tuple, value_sets: tuple, ordered: tuple[bool, ...]) -> list[Region]:
    """The regions one input's S1 values reach and the other's do not.

    Args:
        extremes: per input ``(lo, hi, nans)``: float arrays of each statistic's smallest and
            largest non-NaN value over S1 (±inf when all were NaN) and its NaN count.
        value_sets: per input, per statistic, the set of values seen on the S1 pilot (None
            for a statistic with more than :data:`MAX_VALUES` distinct values).
        ordered: per statistic, whether threshold regions apply.
    """
    out = []
    for j, is_ordered in enumerate(ordered):
        for a in (0, 1):
            b = 1 - a
            lo_b, hi_b, nan_b = extremes[b][0][j], extremes[b][1][j], extremes[b][2][j]
            if is_ordered:
                if lo_b > -np.inf:
                    out.append(Region(j, "lt", a, float(lo_b)))
                if hi_b < np.inf:
                    out.append(Region(j, "gt", a, float(hi_b)))
            va, vb = value_sets[a][j], value_sets[b][j]
            if va is not None and vb is not None:
                only = sorted(v for v in va if not math.isnan(v) and v not in vb)
                nan = extremes[a][2][j] > 0 and nan_b == 0
                if only or nan:
                    out.append(Region(j, "in", a, 0.0, tuple(float(v) for v in only), bool(nan)))
            elif extremes[a][2][j] > 0 and nan_b == 0:   # NaN under one input only
                out.append(Region(j, "in", a, 0.0, (), True))
    return out


def _value_sets(values: np.ndarray) -> list:
    out = []
    for col in values.T:
        u = np.unique(col[~np.isnan(col)])
        out.append(None if u.size > MAX_VALUES else frozenset(float(v) for v in u))
    return out


def event_epsilon(hits: Any, other_hits: Any, n: Any, *, delta: float, alpha: float) -> Any:
    """``max(0, log((L − δ)/U))``: ``L`` the Clopper–Pearson lower bound of ``hits/n`` and ``U`` the
    upper bound of ``other_hits/n``, each at ``1 − α/2`` (vectorised; counts may be non-integer
    when rating with expected counts)."""
    lower = _bounds.clopper_pearson_lower(hits, n, alpha / 2)
    upper = _bounds.clopper_pearson_upper(other_hits, n, alpha / 2)
    num = np.asarray(lower, np.float64) - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(num > 0, np.log(np.maximum(num, 1e-300)) - np.log(upper), 0.0)
    out = np.maximum(out, 0.0)
    return out if np.ndim(out) else float(out)


# ----------------------------------------------------------------------------------- result


@dataclasses.dataclass(frozen=True)
class SupportMismatch:
    """The outcome of a support-mismatch test (:func:`support_mismatch_test`).

    Attributes:
        statistic: the statistic of the chosen region (None: no candidate region).
        region: the region, in words.
        hit_input: ``"x0"`` or ``"x1"``: the input the region was chosen for.
        hits: evaluation trials of ``hit_input`` in the region.
        other_hits: evaluation trials of the other input in the region (0: a mismatch seen).
        select_trials: trials per input used to choose the region (S1 + S2).
        eval_trials: trials per input, disjoint from them, that the bound uses.
        hits_lower: Clopper–Pearson lower bound of ``hits/eval_trials`` at ``1 − α/2``.
        other_upper: upper bound of ``other_hits/eval_trials`` at ``1 − α/2``
            (``1 − (α/2)^{1/N}`` when ``other_hits = 0``).
        epsilon_lb: ``max(0, log((hits_lower − δ)/other_upper))``, valid with probability
            ``≥ confidence``.
        epsilon_cap: the largest ``epsilon_lb`` ``eval_trials`` can give.
        delta, confidence: of the bound.
        statistics, candidates: how many statistics and regions were examined.
        kind, threshold, values, nan: the region exactly (:class:`Region`: ``"lt"``/``"gt"``
            a threshold, ``"in"`` a set of values and/or NaN); None/() without one.
    """

    statistic: str | None
    region: str | None
    hit_input: str | None
    hits: int
    other_hits: int
    select_trials: int
    eval_trials: int
    hits_lower: float
    other_upper: float
    epsilon_lb: float
    epsilon_cap: float
    delta: float
    confidence: float
    statistics: int
    candidates: int
    kind: str | None = None
    threshold: float | None = None
    values: tuple[float, ...] = ()
    nan: bool = False

    @property
    def observed(self) -> bool:
        """A mismatch seen on the held-out trials: hits under one input, none under the other.
        Evidence, not a refutation: every correct mechanism at a large ε, and a correct one's
        far tails, show it too; only :meth:`refutes` weighs it against a claim."""
        return self.hits > 0 and self.other_hits == 0

    def refutes(self, epsilon: float) -> bool:
        """Whether the claim ``(epsilon, delta)`` is refuted: ``hits_lower > e^ε·other_upper + δ``."""
        return self.epsilon_lb > epsilon

    def trials_to_refute(self, epsilon: float) -> float:
        """Evaluation trials per input at which this region, at its observed rate and with no
        hit under the other input, would refute ``epsilon`` (inf: never; the rate is at most δ)."""
        if self.eval_trials <= 0:
            return math.inf
        return trials_to_refute(self.hits / self.eval_trials, epsilon, delta=self.delta,
                                confidence=self.confidence)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["values"] = list(self.values)
        out["observed"] = self.observed
        return out


def trials_to_refute(rate: float, epsilon: float, *, delta: float = 0.0, confidence: float = 0.95) -> float:
    """The smallest ``N`` with ``log((L − δ)/U₀) > ε`` when ``rate·N`` of ``N`` trials hit a region
    and none of the other input's ``N`` do (``L`` Clopper–Pearson; ``U₀ = 1 − (α/2)^{1/N}``).

    About ``e^ε·log(2/α)/(rate − δ)``; exact Clopper–Pearson up to 10¹² trials, the normal
    approximation of ``L`` beyond. ``inf`` when ``rate ≤ δ``.
    """
    alpha = 1.0 - confidence
    if not rate > delta:
        return math.inf
    z = float(sstats.norm.isf(alpha / 2))

    def margin(log_n: float) -> float:
        n = math.exp(log_n)
        if n <= 1e12:
            n = math.floor(n)
            lower = float(_bounds.clopper_pearson_lower(math.floor(rate * n), n, alpha / 2))
        else:
            lower = rate - z * math.sqrt(rate * (1 - rate) / n)
        upper0 = -math.expm1(math.log(alpha / 2) / n)
        if lower <= delta:
            return -math.inf
        return math.log(lower - delta) - math.log(upper0) - epsilon

    lo, hi = 0.0, 700.0
    if margin(hi) <= 0:
        return math.inf
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if margin(mid) > 0 else (mid, hi)
    return float(math.ceil(math.exp(hi)))


def _rate(regions, k0, k1, n2, n_eval, delta, alpha) -> np.ndarray:
    hit = np.asarray([g.hit for g in regions])
    ka, kb = np.where(hit == 0, k0, k1), np.where(hit == 0, k1, k0)
    scale = n_eval / n2
    return ka, kb, np.atleast_1d(event_epsilon(ka * scale, kb * scale, n_eval, delta=delta, alpha=alpha))


def support_mismatch_test(
    mechanism: Callable,
    x0: PyTree,
    x1: PyTree,
    *,
    key: jax.Array,
    trials: int,
    statistics: Statistics | None = None,
    score: Callable | None = None,
    delta: float = 0.0,
    confidence: float = 0.95,
    select_fraction: float = 0.5,
    chunk_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
    game: Any = None,
) -> SupportMismatch:
    """Look for a region one input's releases hit and the other's never do; bound ε from it.

    Same game and keys as :func:`ldpsim.audit.audit` (trial ``i`` of input ``w`` uses
    ``fold_in(fold_in(key, w), i)``), so with the same arguments it examines the very releases
    the threshold test saw. The first ``⌊select_fraction·trials⌋`` trials choose the region
    (half of them S1, half S2; module docstring); the rest evaluate it.

    Args:
        mechanism: ``(key, x) -> release``, pure and vmappable over the key.
        x0, x1: the two inputs.
        key: the root key.
        trials: trials per input (at least 3, and at least 2 selection trials).
        statistics: the statistics to examine (default :func:`default_statistics` with ``score``).
        score: the audit's score, examined first among the default statistics.
        delta: the δ of the claim.
        confidence: ``1 − α`` of the bound (both Clopper–Pearson bounds at ``1 − α/2``).
        select_fraction: share of the trials that choose the region, in (0, 1).
        chunk_size: trials per kernel call (default: 2**22 output elements or statistic
            values per chunk).
        progress: called with the number of trials finished after each chunk.
        game: a :class:`ldpsim.audit.Game` of the same mechanism, inputs and key whose score is
            the only statistic (how :func:`ldpsim.audit.audit` shares its compiled kernel).

    Returns:
        A :class:`SupportMismatch`.

    Raises:
        LdpsimError: bad arguments.
    """
    trials = check_positive_int("trials", trials)
    n_sel = _check_split(trials, select_fraction)
    if statistics is None:
        statistics = default_statistics(mechanism, x0, x1, key, score=score)
    m = statistics.size
    if chunk_size is None:
        chunk = _game.default_chunk(mechanism, x0, key)
        chunk = int(max(1, min(chunk, _game.CHUNK_ELEMENTS // (8 * max(m, 8)))))
    else:
        chunk = check_positive_int("chunk_size", chunk_size)
    if game is not None and statistics.size != 1:
        raise LdpsimError("a game's score kernel gives one statistic; pass statistics of size 1")
    run = _Runner(mechanism, x0, x1, statistics, key, chunk, game)
    return _test(run, statistics.names, statistics.ordered, trials, n_sel, delta, confidence, progress)


def support_mismatch_from_values(
    values0: Any,
    values1: Any,
    *,
    names: tuple[str, ...] | None = None,
    ordered: tuple[bool, ...] | None = None,
    delta: float = 0.0,
    confidence: float = 0.95,
    select_fraction: float = 0.5,
) -> SupportMismatch:
    """:func:`support_mismatch_test` on statistics already computed: ``values_w[i, j]`` is
    statistic ``j`` of trial ``i`` of input ``w`` (float32; a 1-D array is one statistic).
    The trials must be independent draws, in an order fixed before they were drawn (the first
    ``⌊select_fraction·n⌋`` choose the region, the rest evaluate it).

    Raises:
        LdpsimError: arrays of different shapes, too few trials, bad arguments.
    """
    v = [np.asarray(a, np.float32) for a in (values0, values1)]
    v = [a[:, None] if a.ndim == 1 else a for a in v]
    if v[0].shape != v[1].shape or v[0].ndim != 2 or v[0].shape[1] < 1:
        raise LdpsimError(f"values0 and values1 must be (trials, statistics) arrays of one shape; got "
                          f"{v[0].shape} and {v[1].shape}")
    trials, m = v[0].shape
    n_sel = _check_split(check_positive_int("trials", trials), select_fraction)
    names = tuple(names) if names is not None else tuple(f"statistic {j}" for j in range(m))
    ordered = tuple(ordered) if ordered is not None else (True,) * m
    if len(names) != m or len(ordered) != m:
        raise LdpsimError(f"names and ordered must have {m} entries, one per statistic")
    return _test(_Arrays(*v), names, ordered, trials, n_sel, delta, confidence, None)


def _check_split(trials: int, select_fraction: float) -> int:
    select_fraction = check_open_unit("select_fraction", select_fraction)
    n_sel = int(math.floor(trials * select_fraction))
    if n_sel < 2 or trials - n_sel < 1:
        raise LdpsimError(f"the support-mismatch test needs at least 2 selection and 1 evaluation "
                          f"trial per input (trials={trials}, select_fraction={select_fraction})")
    return n_sel


class _Arrays:
    """The source of :func:`support_mismatch_from_values`: statistics on the host."""

    def __init__(self, v0: np.ndarray, v1: np.ndarray):
        self._v = (v0, v1)

    def values(self, which, start, trials, progress):
        return self._v[which][start:start + trials]

    def extremes(self, which, start, trials, progress):
        v = self.values(which, start, trials, progress)
        ok = ~np.isnan(v)
        return np.where(ok, v, np.inf).min(axis=0), np.where(ok, v, -np.inf).max(axis=0), (~ok).sum(axis=0)

    def count(self, which, start, trials, regions, progress):
        v = self.values(which, start, trials, progress)
        return np.asarray([region_hits(v[:, g.column], g) for g in regions], np.int64)


def _test(run, names, ordered, trials, n_sel, delta, confidence, progress) -> SupportMismatch:
    """The three phases (module docstring) on a source of statistic values."""
    confidence = check_open_unit("confidence", confidence)
    alpha = 1.0 - confidence
    n_eval = trials - n_sel
    m = len(names)
    n1 = n_sel // 2
    n2 = n_sel - n1

    # S1: extremes (all n1 trials) and value sets (a pilot of at most PILOT_TRIALS)
    pilot = min(n1, PILOT_TRIALS)
    extremes, sets = [], []
    for which in (0, 1):
        v = run.values(which, 0, pilot, progress)
        ok = ~np.isnan(v)
        lo = np.where(ok, v, np.inf).min(axis=0)
        hi = np.where(ok, v, -np.inf).max(axis=0)
        nans = (~ok).sum(axis=0)
        if n1 > pilot:
            lo2, hi2, nans2 = run.extremes(which, pilot, n1 - pilot, progress)
            lo, hi, nans = np.minimum(lo, lo2), np.maximum(hi, hi2), nans + nans2
        extremes.append((lo, hi, nans))
        sets.append(_value_sets(v))
    regions = candidate_regions(tuple(extremes), tuple(sets), ordered)
    if not regions:
        return SupportMismatch(None, None, None, 0, 0, n_sel, n_eval, 0.0, 1.0, 0.0,
                               _bounds.epsilon_cap(n_eval, confidence, delta), float(delta),
                               float(confidence), m, 0)

    # S2: rate every candidate on trials it was not chosen from
    k0 = run.count(0, n1, n2, regions, progress)
    k1 = run.count(1, n1, n2, regions, progress)
    ka, kb, rating = _rate(regions, k0, k1, n2, n_eval, delta, alpha)
    order = np.lexsort((ka - kb, rating))
    best = regions[int(order[-1])]

    # evaluation: the one region on the held-out trials
    e = [int(run.count(w, n_sel, n_eval, [best], progress)[0]) for w in (0, 1)]
    hits, other = e[best.hit], e[1 - best.hit]
    lower = float(_bounds.clopper_pearson_lower(hits, n_eval, alpha / 2))
    upper = float(_bounds.clopper_pearson_upper(other, n_eval, alpha / 2))
    name = names[best.column]
    return SupportMismatch(
        statistic=name, region=best.describe(name), hit_input=f"x{best.hit}", hits=hits, other_hits=other,
        select_trials=n_sel, eval_trials=n_eval, hits_lower=lower, other_upper=upper,
        epsilon_lb=float(event_epsilon(hits, other, n_eval, delta=delta, alpha=alpha)),
        epsilon_cap=_bounds.epsilon_cap(n_eval, confidence, delta), delta=float(delta),
        confidence=float(confidence), statistics=m, candidates=len(regions), kind=best.kind,
        threshold=float(best.threshold) if best.kind != "in" else None, values=best.values, nan=best.nan)
