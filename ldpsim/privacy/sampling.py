"""Fast, exactly reproducible N(0, 1) sampling for per-client LDP noise.

Per-client Gaussian noise (one key per client, ``fold_in(fold_in(root, round),
client_id)``, tens of thousands of coordinates each) is the bottleneck of a
privatized round on CPU. :func:`normal` draws it several times faster than
``jax.random.normal`` while keeping JAX's own generator and sharper tails.

Algorithm (``impl="fast"``)
---------------------------
1. **Bits.** Coordinate ``j`` of a draw is the Threefry-2x32 block cipher with 20
   rounds (Salmon et al. 2011) -- the very function behind JAX's default
   ``threefry2x32`` keys -- applied to the counter ``(TAG, j)`` under the key's two
   32-bit words. It yields 64 bits per coordinate. The function is bit-for-bit
   JAX's (``tests/test_sampling.py`` checks it against ``jax.random.fold_in``);
   only the lowering differs: JAX emits a rolled 5-iteration loop on CPU that
   materialises every intermediate array, while here the 20 rounds are
   unrolled ``jnp.uint32`` add/rotate/xor operations that XLA fuses into one
   vectorised loop with the transform below.
2. **Transform.** The top bit gives the sign; the other 63 bits give a tail
   probability ``p = (k + 1/2) / 2**64`` with ``k`` uniform on
   ``{0, ..., 2**63 - 1}`` (31 + 31 bits are used: ``p`` is exact to 2**-63, finer
   than float32 can resolve), and the sample is ``± Φ⁻¹(1 - p)``: the inverse-CDF
   method, one normal per 64 bits, no rejection, no branches. ``Φ⁻¹`` is
   evaluated in float32 as ``w = -log(4p(1-p))`` then
   * ``w < 5`` (|z| < 2.93, 99.66 % of draws): Giles' single-precision erfinv
     polynomial (Giles 2010, "Approximating the erfinv function", GPU Computing
     Gems Jade, eq. for ``w < 5``), ``z = √2·x·P₈(w - 2.5)`` with ``x = 1 - 2p``;
   * ``w ≥ 5``: ``z = s·Q₈(6.6/s - 2)`` with ``s = √w``, a degree-8 polynomial
     fitted here (Chebyshev least squares of ``z/s`` in ``1/s`` on
     ``s ∈ [2.2, 6.6]``, float64, 8·10⁵ points, then converted to powers). Giles'
     own tail polynomial is only accurate for ``w ≤ 16`` (|z| ≤ 5.4).
   The maximum relative error of ``Φ⁻¹`` evaluated in float32 is below 4e-7
   over the whole range ``p ∈ [2**-64, 1/2]`` (checked against
   ``scipy.special.ndtri`` in the tests), i.e. within about 3 float32 ulps.

Tails (why this matters for privacy)
------------------------------------
The Gaussian mechanism's (ε, δ) guarantee (Balle & Wang 2018) assumes exactly
Gaussian noise; a sampler is exact only as far into the tails as its uniforms
resolve. Here the smallest tail probability is ``p = 2**-64``, so draws reach
``|z| = Φ⁻¹(1 - 2**-64) ≈ 9.08`` and the law of |z| is exact (up to the 4e-7
relative error of ``Φ⁻¹``) at every level ``t ≤ 9``: ``P(|z| > t)`` differs from
``2(1 - Φ(t))`` by less than ``2**-63`` absolutely. The total-variation distance
from N(0, 1) per coordinate is therefore below ``≈ 2**-62`` plus the effect of
the 4e-7 transform error, so for d = 61,706 coordinates the probability that any
coordinate lands where the sampler and the ideal Gaussian differ is below
``d·2**-62 ≈ 1.3e-14`` -- negligible next to any δ in use. For comparison the
reference ``jax.random.normal`` (float32) maps a 23-bit uniform through
``erfinv``: its smallest tail probability is about ``2**-24`` and its samples
never exceed ``|z| ≈ 5.4`` (``P(|Z| > 5.4) ≈ 7e-8`` per coordinate, i.e. about
4e-3 per 61,706-coordinate update). A 32-bit uniform would stop at
``|z| ≈ 6.2`` (``p = 2**-33``).

Caveat, common to every floating-point sampler (Mironov 2012, "On significance
of the least significant bits for differential privacy"): outputs live on the
float32 grid, so the released ``u + σz`` is not exactly a continuous Gaussian;
this module does not claim protection against such floating-point attacks.

Independence and period
-----------------------
Threefry-2x32-20 is a keyed bijection on 64-bit blocks with a 64-bit key; with
20 rounds (JAX's and Random123's default, kept here: reduced-round variants have
a thinner safety margin) it passes TestU01's BigCrush (Salmon et al. 2011). Every
(key, coordinate) pair uses a distinct counter, so within one key the stream
never repeats (period 2**32 coordinates per key, enforced). Different clients
and rounds use different keys derived by JAX's ``fold_in`` (itself Threefry), so
their noise is independent as far as Threefry is indistinguishable from a random
function -- the same assumption every use of ``jax.random`` makes. The counter's
high word is a fixed tag, ``TAG = 0x6C647073``, which JAX never uses for keys
(``fold_in``/``split`` use high word 0) nor for ``jax.random.bits`` of arrays
with fewer than ``TAG·2**32`` elements, so the noise is not a copy of any key or
bits JAX derives from the same key.

Determinism: the noise of client ``c`` depends only on its key and the shape,
never on the cohort, chunk, batch or device it is drawn in (the draw is
elementwise in the counter).

References:
    J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw (2011). Parallel random
    numbers: as easy as 1, 2, 3. SC'11. https://doi.org/10.1145/2063384.2063405
    M. Giles (2010). Approximating the erfinv function. GPU Computing Gems Jade.
    B. Balle, Y.-X. Wang (2018). Improving the Gaussian mechanism for differential
    privacy. ICML. https://arxiv.org/abs/1805.06530
    I. Mironov (2012). On significance of the least significant bits for
    differential privacy. CCS.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._checks import LdpsimError, check_choice

PyTree = Any

IMPLS = ("fast", "threefry")
"""``"fast"``: this module's sampler (default). ``"threefry"``: ``jax.random.normal``,
kept as the reference implementation."""

TAG = 0x6C647073
"""High word of every counter (domain separation from JAX's own uses of a key)."""

_MAX_SIZE = 2**32

# Threefry-2x32 rotation constants (Salmon et al. 2011, Table 4; as in jax.random).
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA

# Giles (2010) single-precision erfinv, branch w < 5, multiplied by √2 so that the
# polynomial gives Φ⁻¹ directly: z = x · P(w - 2.5), highest degree first.
_CENTRAL = tuple(
    c * math.sqrt(2.0)
    for c in (
        2.81022636e-08,
        3.43273939e-07,
        -3.5233877e-06,
        -4.39150654e-06,
        0.00021858087,
        -0.00125372503,
        -0.00417768164,
        0.246640727,
        1.50140941,
    )
)
# Tail, w >= 5: z = s · Q(6.6/s - 2), s = √w; fitted as described in the module
# docstring. Highest degree first.
_TAIL = (
    7.803368700426077e-06,
    2.1803495181287496e-05,
    -4.1185582323035156e-05,
    -2.5884676785176395e-05,
    -0.0005930963976141114,
    0.0018807150947916557,
    0.005015223963693177,
    -0.039750280489559274,
    1.3431310346044643,
)


def _rotl(x: jax.Array, r: int) -> jax.Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(
    k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds, unrolled (the hash behind ``jax.random``).

    Args:
        k0, k1: the two uint32 key words (broadcast against the counters).
        x0, x1: uint32 counter words.

    Returns:
        The two uint32 output words; equal to JAX's ``threefry_2x32`` on the same
        inputs (so ``threefry2x32(*key_data(k), 0, j) == key_data(fold_in(k, j))``).
    """
    k2 = k0 ^ k1 ^ np.uint32(_PARITY)
    ks = (k0, k1, k2)
    x0 = x0 + k0
    x1 = x1 + k1
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _horner(coeffs: tuple[float, ...], t: jax.Array) -> jax.Array:
    acc = jnp.full_like(t, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * t + np.float32(c)
    return acc


def upper_probit(p: jax.Array) -> jax.Array:
    """``Φ⁻¹(1 - p)`` in float32 for ``p ∈ [2**-64, 1/2]``; relative error < 4e-7.

    Args:
        p: float32 tail probabilities.

    Returns:
        The standard-normal quantile of ``1 - p`` (non-negative).
    """
    p = p.astype(jnp.float32)
    w = -jnp.log(4.0 * (p - p * p))
    x = 1.0 - 2.0 * p
    central = x * _horner(_CENTRAL, w - 2.5)
    r = jax.lax.rsqrt(jnp.maximum(w, 5.0))
    tail = (w * r) * _horner(_TAIL, 6.6 * r - 2.0)
    return jnp.where(w < 5.0, central, tail)


def normal_from_bits(b0: jax.Array, b1: jax.Array) -> jax.Array:
    """Map two uint32 words per coordinate to one float32 N(0, 1) sample.

    The top bit of ``b0`` is the sign; the low 31 bits of ``b0`` (high part) and
    the top 31 bits of ``b1`` (low part) give ``p = (k + 1/2)/2**64`` with
    ``k < 2**63``, mapped by :func:`upper_probit`.
    """
    hi = (b0 & np.uint32(0x7FFFFFFF)).astype(jnp.int32).astype(jnp.float32)
    lo = (b1 >> np.uint32(1)).astype(jnp.int32).astype(jnp.float32)
    p = hi * np.float32(2.0**-32) + (lo + 0.5) * np.float32(2.0**-63)
    z = upper_probit(p)
    signed = jax.lax.bitcast_convert_type(z, jnp.uint32) ^ (b0 & np.uint32(0x80000000))
    return jax.lax.bitcast_convert_type(signed, jnp.float32)


def _key_words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        if "threefry" not in impl:
            raise LdpsimError(
                f"key must be a threefry2x32 key for impl='fast', got a {impl} key; "
                "use impl='threefry' (jax.random.normal) for other key types"
            )
        if key.shape != ():
            raise LdpsimError(
                f"key must be a single key (shape ()), got shape {key.shape}; vmap over keys"
            )
        data = jax.random.key_data(key)
    else:
        if key.shape != (2,) or key.dtype != jnp.uint32:
            raise LdpsimError(
                "key must be a typed threefry key or a raw uint32[2] key, "
                f"got dtype {key.dtype} shape {key.shape}"
            )
        data = key
    return data[0], data[1]


def _as_jax_key(key: jax.Array) -> jax.Array:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def _check_dtype(dtype: Any) -> jnp.dtype:
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise LdpsimError(f"dtype must be a floating dtype, got {dtype}")
    return dtype


def _fast(k0, k1, shape: tuple[int, ...], offset: int, dtype: jnp.dtype) -> jax.Array:
    size = math.prod(shape)
    if offset + size > _MAX_SIZE:
        raise LdpsimError(
            f"a single draw is limited to 2**32 coordinates per key, got {offset + size}; "
            "fold distinct ids into the key for larger draws"
        )
    return _fast_kernel(k0, k1, shape, offset, dtype)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _fast_kernel(k0, k1, shape: tuple[int, ...], offset: int, dtype: jnp.dtype) -> jax.Array:
    # jitted so that eager calls compile once instead of dispatching ~100 ops; inlined
    # into an enclosing jit/vmap as usual.
    size = math.prod(shape)
    counter = jax.lax.iota(jnp.uint32, size) + np.uint32(offset)
    b0, b1 = threefry2x32(k0, k1, jnp.full_like(counter, TAG), counter)
    z = normal_from_bits(b0, b1).reshape(shape)
    return z.astype(dtype)


def normal(
    key: jax.Array,
    shape: tuple[int, ...] = (),
    dtype: Any = jnp.float32,
    *,
    impl: str = "fast",
) -> jax.Array:
    """iid N(0, 1) samples of ``shape``; pure, jittable, vmappable over ``key``.

    Args:
        key: one threefry PRNG key (typed ``jax.random.key`` or raw
            ``jax.random.PRNGKey``); vmap over keys for one draw per client.
        shape: output shape (at most 2**32 elements).
        dtype: a floating dtype. ``impl="fast"`` computes in float32 and casts
            (bfloat16/float16 noise is float32 noise rounded; float64 noise has
            float32 resolution, relative error < 4e-7).
        impl: ``"fast"`` (Threefry-2x32-20 bits + float32 inverse CDF, see the
            module docstring) or ``"threefry"`` (``jax.random.normal``, the
            reference).

    Returns:
        An array of ``shape`` and ``dtype``. The same key and shape always give
        the same values; a draw of shape ``s`` is the first ``prod(s)`` values of
        any larger draw from the same key, in row-major order.

    Raises:
        LdpsimError: unknown ``impl``, non-floating ``dtype``, a non-threefry or
            batched key with ``impl="fast"``, or more than 2**32 elements.
    """
    check_choice("impl", impl, IMPLS)
    dtype = _check_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if impl == "threefry":
        return jax.random.normal(_as_jax_key(key), shape, dtype)
    k0, k1 = _key_words(key)
    return _fast(k0, k1, shape, 0, dtype)


def normal_like(
    key: jax.Array, tree: PyTree, *, dtype: Any = None, impl: str = "fast"
) -> PyTree:
    """iid N(0, 1) noise with the structure and shapes of ``tree``.

    With ``impl="fast"`` the leaves (in ``jax.tree_util`` order) take consecutive
    blocks of one counter range, so the result equals
    ``unravel(normal(key, (total_size,)))``: no per-leaf key split is needed and
    the noise of a leaf does not depend on the dtypes of the others. With
    ``impl="threefry"`` each leaf draws ``jax.random.normal`` from
    ``jax.random.split(key, num_leaves)``.

    Args:
        key: one threefry PRNG key.
        tree: pytree whose leaves give the shapes (and dtypes, when ``dtype`` is
            None; non-floating leaves get float32 noise).
        dtype: force one floating dtype for every leaf.
        impl: ``"fast"`` or ``"threefry"``.

    Returns:
        A pytree like ``tree`` of N(0, 1) samples.
    """
    check_choice("impl", impl, IMPLS)
    leaves, treedef = jax.tree_util.tree_flatten(tree)

    def leaf_dtype(x):
        if dtype is not None:
            return _check_dtype(dtype)
        d = jnp.result_type(x)
        return d if jnp.issubdtype(d, jnp.floating) else jnp.dtype(jnp.float32)

    if impl == "threefry":
        keys = jax.random.split(_as_jax_key(key), max(len(leaves), 1))
        out = [
            jax.random.normal(k, jnp.shape(x), leaf_dtype(x)) for k, x in zip(keys, leaves)
        ]
        return jax.tree_util.tree_unflatten(treedef, out)
    k0, k1 = _key_words(key)
    out, offset = [], 0
    for x in leaves:
        shape = tuple(jnp.shape(x))
        out.append(_fast(k0, k1, shape, offset, leaf_dtype(x)))
        offset += math.prod(shape)
    return jax.tree_util.tree_unflatten(treedef, out)


__all__ = [
    "IMPLS",
    "TAG",
    "normal",
    "normal_from_bits",
    "normal_like",
    "threefry2x32",
    "upper_probit",
]
