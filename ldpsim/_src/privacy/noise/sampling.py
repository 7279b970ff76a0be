"""Fast, exactly reproducible N(0, 1) and Laplace sampling for per-client LDP noise.

Per-client Gaussian noise (one key per client, ``fold_in(fold_in(root, round),
client_id)``, tens of thousands of coordinates each) is the bottleneck of a
privatized round on CPU. :func:`normal` draws it several times faster than
``jax.random.normal`` from JAX's own generator, with longer exact tails.
:func:`ldpsim.privacy.gaussian_noise` uses it by default.

Bits (every ``impl`` except ``"jax"``)
--------------------------------------
Coordinate ``j`` of a draw is the Threefry-2x32 block cipher with 20 rounds
(Salmon et al. 2011) -- the very function behind JAX's default ``threefry2x32``
keys -- applied to the counter ``(TAG, j)`` under the key's two 32-bit words: 64
bits per coordinate. The function is bit-for-bit JAX's (``tests/privacy/test_sampling.py``
checks it against ``jax.random.fold_in``); only the lowering differs: JAX emits a
rolled 5-iteration loop on CPU that materialises every intermediate array, while
here the 20 rounds are unrolled ``jnp.uint32`` add/rotate/xor operations that XLA
fuses with the transform into one vectorised loop (8 lanes, AVX ``vprold``).

Transform, ``impl="fast"`` (default): Box–Muller, one sample per 64-bit block
-------------------------------------------------------------------------------
``z = √(-2 ln U) · cos(2πV)``, ``U = (b0 + ½)/2**32``, ``V = (b1 + ½)/2**32``
(Box & Muller 1958; each of the pair ``R cos θ``, ``R sin θ`` is exactly N(0, 1) on
its own). Only the cosine is used: XLA's CPU loop fusion computes every output
element independently, so a second output per block would recompute the cipher
(measured: handing out both halves of a block -- by stack, concatenate or
optimisation barrier -- was no faster than one block per sample). ``ln U`` is a
Cephes polynomial on the exact float ``U`` plus a Fast2Sum correction for its
rounding, accurate near ``U → 1`` as well as in the tail; the angle is reduced
exactly in integer arithmetic (quadrant from the top two bits) and one degree-5
polynomial in ``g²`` gives ``cos(πg/2)``. No rejection, no table, no branch.

Measured (``benchmarks/noise_throughput.py``; profile in the docstring there):
the cipher and the transform each took about half the time of the old
inverse-CDF kernel, whose transform (log, two degree-8 polynomials for the
central and tail branches, both evaluated because a vector cannot branch)
cost more than the cipher; Box–Muller's transform is about a third of that.

Accuracy: against a float64 evaluation of the same formula on the same bits the
float32 result is within ``2e-7·(1 + R)`` (``R = √(-2 ln U) ≤ 6.764``), so within
1.6e-6 absolutely (checked over millions of random blocks, tail-heavy blocks and
the extreme bit patterns in the tests).

Tails and the distance from N(0, 1), honestly. ``U`` has 2**32 equiprobable
values, so the radius ``R`` satisfies ``P(R > r) = e^{-r²/2}`` up to 2**-32 for
every ``r`` and never exceeds ``R_max = √(-2 ln 2**-33) = √(66 ln 2) ≈ 6.764``;
``V`` has 2**32 values, so the angle is uniform on a grid of step
``2π·2**-32``. Hence, per coordinate:

* Kolmogorov distance: ``sup_t |P(z ≤ t) - Φ(t)| ≤ 2**-29`` from the 64-bit
  discretisation (only (U, V) grid cells cut by the level curve
  ``R cos θ = t`` can be miscounted, 2**-64 each; the curve is a graph over V
  with at most four monotone pieces, so it cuts at most 8·2**32 cells), plus the
  float32 error above, which moves thresholds by at most 1.6e-6, i.e. changes
  probabilities by at most ``φ(0)·1.6e-6 < 7e-7``.
* Truncation: ``|z| ≤ 6.764`` always, while ``P(|Z| > 6.764) = 1.3e-11`` for an
  exact Gaussian; in a d = 61,706-coordinate update the chance that an exact
  Gaussian would put any coordinate beyond 6.764 is 8.3e-7.
* Total variation is not a useful measure for any float sampler: the output is
  discrete (float32) and the ideal law is continuous, so the literal TV distance
  is 1 (Mironov 2012). The two statements above are what the Gaussian mechanism's
  analysis actually relies on: correct tail probabilities up to the level where
  the sampler stops.

For comparison ``jax.random.normal`` (float32) maps a uniform on a 2**-23 grid
through ``erfinv``: its samples lie in ``[Φ⁻¹(2**-25), Φ⁻¹(1 − 3·2**-25)] =
[−5.420, 5.220]`` (``P(Z > 5.22) ≈ 8.9e-8`` per coordinate, about 5.5e-3 per
61,706-coordinate update). Where longer tails matter, ``impl="icdf"`` reaches
``|z| = 9.08`` and ``impl="tail"`` 11.60.

Transform, ``impl="tail"``: Box–Muller with a 96-bit radius uniform
-------------------------------------------------------------------
``"fast"``'s radius stops at 6.764 because ``U`` has 32 bits. ``"tail"`` draws a second
Threefry-2x32-20 block per coordinate, at counter ``(TAIL_TAG, j)``, and uses its two words
``b2, b3`` as the low 64 bits of ``U``:
``U = (b0 + b2·2**-32 + (b3 + ½)·2**-64)·2**-32`` (96 bits, smallest value 2**-97), with
``V`` from ``b1`` as in ``"fast"``. The extra bits only matter when ``b0 < 2**8``
(``U < 2**-24``): there ``ln U`` is computed from all 96 bits (``U`` is a normal float32,
≥ 2**-97, so the same Cephes logarithm applies; relative error of ``ln U`` < 1.5e-8);
otherwise the float32 result is **bit for bit** ``"fast"``'s (the same operations, ``ln U``
selected afterwards; tested on random blocks and through the jitted, vmapped kernel). So
switching from ``"fast"`` to ``"tail"`` changes a history only in coordinates whose
``b0 < 2**8``, probability 2**-24 each (0.004 coordinates per 61,706-coordinate update).
The radius reaches ``√(-2 ln 2**-97) = √(194 ln 2) ≈ 11.596``; accuracy, as for ``"fast"``,
within ``2e-7·(1 + R)`` of float64 on the same bits. Everything is one fused elementwise
kernel; the price is the second cipher block for every coordinate (a vector loop cannot
skip it for the 2**-24 that need it): see ``benchmarks/README.md`` for the measured cost.

Transform, ``impl="icdf"``: 64-bit inverse CDF (the previous default)
---------------------------------------------------------------------
The top bit gives the sign; 31 + 31 further bits (the low 31 of ``b0``, the top 31 of
``b1``) give a tail probability ``p = (k + 1/2)·2**-63`` with ``k`` uniform on
``{0, ..., 2**62 - 1}`` (so ``p ∈ [2**-64, 1/2)``, on a grid finer than float32 can
resolve), and the sample is ``± Φ⁻¹(1 - p)``. ``Φ⁻¹`` is evaluated in float32 as
``w = -log(4p(1-p))`` then

* ``w < 5`` (|z| < 2.93, 99.66 % of draws): Giles' single-precision erfinv
  polynomial (Giles 2010, "Approximating the erfinv function", GPU Computing
  Gems Jade, eq. for ``w < 5``), ``z = √2·x·P₈(w - 2.5)`` with ``x = 1 - 2p``;
* ``w ≥ 5``: ``z = s·Q₈(6.6/s - 2)`` with ``s = √w``, a degree-8 polynomial
  fitted here (Chebyshev least squares of ``z/s`` in ``1/s`` on
  ``s ∈ [2.2, 6.6]``, float64, 8·10⁵ points, then converted to powers). Giles'
  own tail polynomial is only accurate for ``w ≤ 16`` (|z| ≤ 5.4).

The maximum relative error of ``Φ⁻¹`` in float32 is below 4e-7 over
``p ∈ [2**-64, 1/2]`` (checked against ``scipy.special.ndtri``). Draws reach
``|z| = Φ⁻¹(1 - 2**-64) ≈ 9.08`` and ``P(|z| > t)`` differs from ``2(1 - Φ(t))`` by
less than 2**-63 for every ``t ≤ 9`` (up to the 4e-7 relative transform error).

Laplace, ``impl="bits"`` (:func:`laplace`, :func:`laplace_like`)
----------------------------------------------------------------
One Threefry-2x32-20 block per coordinate at counter ``(LAPLACE_TAG, j)``: the top bit of
``b0`` is the sign, the other 63 bits give ``k`` and ``U = (k + ½)·2**-63``, and the
magnitude is ``-ln U`` (an exponential, Devroye 1986, §II.2), computed as in ``"fast"``
(``U`` split into an exact 24-bit head and a float32 tail, Fast2Sum residual, Cephes
logarithm): within ``2e-7·|x| + 2**-46`` of float64 on the same bits. ``P(|x| > t)``
is ``e^{-t}`` up to 2**-63 for every ``t``, and ``|x| ≤ 64 ln 2 ≈ 44.36``.
``jax.random.laplace`` (float32, ``impl="jax"``) maps a uniform on a 2**-23 grid by
``sign(u)·log1p(−|u|)``: ``x ∈ [−(24 ln 2 − ln 3), 24 ln 2] = [−15.537, 16.636]``.

Reach: the model of each sampler, for privacy accounting
--------------------------------------------------------
The accounting (``ldpsim._src.privacy.noise.realised``) analyses each sampler's *continuous
idealisation*: the ideal law restricted to what the sampler reaches, renormalised
(:class:`SamplerModel`, :func:`sampler_model`, :func:`laplace_model`). A Box–Muller draw with
``U ≥ U_min`` is the 2-D standard normal conditioned on the disk of radius
``R = √(−2 ln U_min)`` (``kind="disk"``, ideal mass outside ``U_min``); an inverse-CDF draw
reaching ``T`` is N(0, 1) (or Laplace) conditioned on ``|z| ≤ T`` (``kind="cube"``, mass
outside ``P(|Z| > T)``). Each reach below is derived from the bits (smallest uniform: the
first grid point):

================  ====  =========================  =========  =================
impl              kind  reach                      bound      tail mass
================  ====  =========================  =========  =================
``fast``          disk  √(−2 ln 2**-33)            6.763706   2**-33 = 1.2e-10
``tail``          disk  √(−2 ln 2**-97)            11.596144  2**-97 = 6.3e-30
``icdf``          cube  Φ⁻¹(1 − 2**-64)            9.080155   2**-63 = 1.1e-19
``jax``           cube  Φ⁻¹(1 − 3·2**-25), + side  5.220113   3·2**-24 = 1.8e-7
Laplace ``bits``  cube  64 ln 2 (U ≥ 2**-64)       44.361420  2**-64 = 5.4e-20
Laplace ``jax``   cube  24 ln 2 − ln 3, − side     15.536920  3·2**-24 = 1.8e-7
================  ====  =========================  =========  =================

``jax.random``'s ranges come from running JAX's own compiled ``normal``/``laplace`` on all
2**23 values of the uniform's mantissa bits (``tests/privacy/test_sampling.py``): its uniform
is ``max(lo, 2f + lo)`` with ``f`` on the 2**-23 grid of ``[0, 1)`` and ``lo = −1 + 2**-24``
(``1 − lo`` rounds to 2 in float32), so ``u ∈ [−1 + 2**-24, 1 − 3·2**-24]``: the two sides
reach differently. The model uses the smaller one-sided reach: a symmetric cut there
over-states both the mass a neighbouring input cannot reach and the renormalisation, so it
is conservative. :data:`TAIL_BOUND` and
:data:`LAPLACE_TAIL_BOUNDS` are instead the largest ``|z|`` a sampler returns, float32
rounding included (for ``"jax"``: the other side, 5.41998 and 16.63553).

Caveat, common to every floating-point sampler (Mironov 2012): outputs live on
the float32 grid, so the released ``u + σz`` is not exactly a continuous
Gaussian; this module does not claim protection against such floating-point
attacks.

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
high word is a fixed tag, ``TAG = 0x6C647073`` ("ldps"; ``"tail"``'s second block
``TAIL_TAG = 0x6C647074``, the Laplace sampler ``LAPLACE_TAG = 0x6C64706C``), which JAX never
uses for keys (``fold_in``/``split`` use high word 0) nor for ``jax.random.bits`` of arrays
with fewer than ``2·TAG`` (≈ 3.6·10⁹) elements, so the noise is not a copy of any key or
bits JAX derives from the same key, and the three streams of one key are distinct.

Determinism: the noise of client ``c`` depends only on its key and the shape,
never on the cohort, chunk, batch or device it is drawn in (the draw is
elementwise in the counter). ``"fast"``, ``"tail"`` and ``"icdf"`` read the same first
block, so they are different (not independent) functions of the key: use one per key.

References:
    J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw (2011). Parallel random
    numbers: as easy as 1, 2, 3. SC'11. https://doi.org/10.1145/2063384.2063405
    G. E. P. Box, M. E. Muller (1958). A note on the generation of random normal
    deviates. Ann. Math. Statist. 29(2), 610-611.
    L. Devroye (1986). Non-Uniform Random Variate Generation. Springer.
    S. L. Moshier (1992). Cephes Math Library, ``logf.c``.
    M. Giles (2010). Approximating the erfinv function. GPU Computing Gems Jade.
    B. Balle, Y.-X. Wang (2018). Improving the Gaussian mechanism for differential
    privacy. ICML. https://arxiv.org/abs/1805.06530
    I. Mironov (2012). On significance of the least significant bits for
    differential privacy. CCS.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src import _xla
from ldpsim._src._checks import LdpsimError, check_choice
from ldpsim._src.privacy.noise import realised

PyTree = Any

IMPLS = ("fast", "tail", "icdf", "jax")
"""``"fast"``: Threefry-2x32-20 + Box–Muller (default). ``"tail"``: ``"fast"`` with a 96-bit
radius uniform (tails to 11.60σ; bit for bit ``"fast"`` except with probability 2**-24 per
coordinate). ``"icdf"``: Threefry-2x32-20 + 64-bit inverse CDF (tails to 9.08σ, slower).
``"jax"``: ``jax.random.normal`` (the reference; any key type)."""

LAPLACE_IMPLS = ("bits", "jax")
"""``"bits"``: Threefry-2x32-20 + sign bit and ``-ln U`` of a 63-bit uniform (default for
threefry keys; ``|x| ≤ 64 ln 2``). ``"jax"``: ``jax.random.laplace`` (any key type)."""

#: The largest |z| each N(0, 1) sampler can return, float32 rounding included (the module
#: docstring; :func:`sampler_model` gives the reach of each one's continuous idealisation,
#: which is what privacy accounting must use): ``"fast"`` √(66 ln 2) (Box–Muller radius at
#: U = 2**-33), ``"tail"`` √(194 ln 2) (U = 2**-97), ``"icdf"`` Φ⁻¹(1 − 2**-64), ``"jax"``
#: (``jax.random.normal`` in float32) |Φ⁻¹(2**-25)|, reached on the negative side only (its
#: positive side stops at Φ⁻¹(1 − 3·2**-25) = 5.2201; found by running JAX's own compiled
#: code on all 2**23 values of its uniform, ``tests/privacy/test_sampling.py``).
TAIL_BOUND = {"fast": math.sqrt(66.0 * math.log(2.0)) + 1.6e-6,   # + its float32 error
              "tail": math.sqrt(194.0 * math.log(2.0)) + 3e-6,    # + its float32 error
              "icdf": 9.080155124873613 + 1e-5,                    # + float32 rounding
              "jax": 5.41998291015625}                             # a float32 value
#: ``jax.random.laplace`` in float32 returns ``sign(u)·log1p(−|u|)`` of a uniform on a 2**-23
#: grid: ``x ∈ [−(24 ln 2 − ln 3), 24 ln 2]`` = [−15.53692, 16.635532] in units of the scale b
#: (all 2**23 uniform values enumerated); this is its largest |x|.
LAPLACE_TAIL_BOUND = 16.63553237915039
#: The largest |x| of each standard Laplace sampler, float32 rounding included.
LAPLACE_TAIL_BOUNDS = {"bits": 64.0 * math.log(2.0) + 1e-5,      # + its float32 error
                       "jax": LAPLACE_TAIL_BOUND}

TAG = 0x6C647073
"""High word of every counter of the first block (domain separation from JAX's own uses of a
key): ASCII "ldps"."""
TAIL_TAG = 0x6C647074
"""High word of the counters of ``"tail"``'s second block (the low 64 bits of its radius
uniform), ASCII "ldpt": differs from :data:`TAG`, so the two blocks of coordinate ``j`` are
distinct Threefry inputs."""
LAPLACE_TAG = 0x6C64706C
"""High word of the counters of the ``"bits"`` Laplace sampler, ASCII "ldpl" (differs from the
Gaussian tags: Laplace and Gaussian noise from one key are distinct blocks)."""


#: The continuous idealisation of a sampler (the law privacy accounting is about):
#: :class:`ldpsim._src.privacy.noise.realised.SamplerModel` (``law``, ``kind``, ``bound``,
#: ``coordinate_tail_mass``). ``"disk"``: the coordinate is ``X`` of a 2-D standard normal
#: conditioned on ``X² + Y² ≤ bound²`` (Box–Muller with its radius uniform at least ``U_min``);
#: ``"cube"``: N(0, 1) (or the standard Laplace) conditioned on ``|z| ≤ bound``. The bounds are
#: exact maths; the float32 outputs exceed them by at most the rounding in :data:`TAIL_BOUND`.
SamplerModel = realised.SamplerModel


def sampler_model(impl: str) -> SamplerModel:
    """The continuous idealisation of the N(0, 1) sampler ``impl`` (one of :data:`IMPLS`).

    Use :func:`resolve_impl` first to name the sampler that runs for a key and ``impl=None``.
    """
    return realised.sampler_model(check_choice("impl", impl, IMPLS), "gaussian")


def laplace_model(impl: str) -> SamplerModel:
    """The continuous idealisation of the standard Laplace sampler ``impl`` (one of
    :data:`LAPLACE_IMPLS`; :func:`resolve_laplace_impl` names the one that runs)."""
    return realised.sampler_model(check_choice("impl", impl, LAPLACE_IMPLS), "laplace")


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


# cos(πg/2) for g ∈ [0, 1] as a polynomial in g² (Chebyshev least squares, degree 5,
# coefficients rounded to float32; max error 1.8e-8). Highest degree first.
_COS = (
    -2.38830762100406e-05,
    0.0009178587351925671,
    -0.020862795412540436,
    0.2536693513393402,
    -1.2337005138397217,
    1.0,
)


# Cephes logf (S. Moshier, Cephes Math Library 2.2, logf.c): ln(1+t) = t - t²/2 + t³·P(t)
# for 1 + t ∈ [√½, √2); relative error ~1e-7. Highest degree first.
_LOG1P = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)


def _log_unit(x: jax.Array) -> jax.Array:
    """Natural log of normal float32 ``x ∈ (0, 1]`` (no special values: cheaper than ``jnp.log``)."""
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    # x = m·2**e with m ∈ [√½, √2): shift the mantissa boundary by 2**23 - 0x3504F3 (√½).
    shifted = bits + np.uint32(0x3F800000 - 0x3F3504F3)
    e = (shifted >> np.uint32(23)).astype(jnp.int32) - 127
    m = jax.lax.bitcast_convert_type(
        (shifted & np.uint32(0x007FFFFF)) + np.uint32(0x3F3504F3), jnp.float32
    )
    t = m - 1.0
    t2 = t * t
    poly = _horner(_LOG1P, t) * (t2 * t) - 0.5 * t2
    ef = e.astype(jnp.float32)
    # ln 2 split in two so that e·ln 2 adds no rounding error (Cephes).
    return ef * np.float32(-2.12194440e-4) + poly + t + ef * np.float32(0.693359375)


def _log_u32(b0: jax.Array) -> jax.Array:
    """``ln U``, ``U = (b0 + 1/2)/2**32`` (``"fast"``'s radius uniform), full relative precision."""
    # Radius: U = A + B exactly, A = (b0 >> 8)·2**-24, B = (b0 & 255 + 1/2)·2**-32.
    a = (b0 >> np.uint32(8)).astype(jnp.int32).astype(jnp.float32) * np.float32(2.0**-24)
    b = ((b0 & np.uint32(0xFF)).astype(jnp.int32).astype(jnp.float32) + 0.5) * np.float32(
        2.0**-32
    )
    x = a + b  # fl(U)
    err = (a - x) + b  # U - x exactly (Fast2Sum: a ≥ b whenever a ≠ 0)
    # ln U = ln x + err/x; 1/x ≈ 2 - x is accurate where it matters (x ≈ 1; |err| ≤ 2**-25).
    return _log_unit(x) + err * (2.0 - x)


def _box_muller(log_u: jax.Array, b1: jax.Array) -> jax.Array:
    """``√(-2 ln U) · cos(2πV)``, ``V = (b1 + 1/2)/2**32``, angle reduced exactly in integers."""
    radius = jnp.sqrt(-2.0 * log_u)
    # Angle 2πV = (π/2)(q + g): cos = ±cos(πg/2) (q even) or ±sin(πg/2) = ±cos(π(1-g)/2).
    quadrant = b1 >> np.uint32(30)
    low = b1 & np.uint32(0x3FFFFFFF)
    odd = (quadrant & np.uint32(1)) == np.uint32(1)
    folded = jnp.where(odd, low ^ np.uint32(0x3FFFFFFF), low)  # 2**30 - 1 - low: exact 1 - g
    g = (folded.astype(jnp.int32).astype(jnp.float32) + 0.5) * np.float32(2.0**-30)
    cos = _horner(_COS, g * g)
    negative = ((quadrant + np.uint32(1)) & np.uint32(2)) << np.uint32(30)  # q ∈ {1, 2}
    z = radius * cos
    signed = jax.lax.bitcast_convert_type(z, jnp.uint32) ^ negative
    return jax.lax.bitcast_convert_type(signed, jnp.float32)


def box_muller_from_bits(b0: jax.Array, b1: jax.Array) -> jax.Array:
    """Map two uint32 words per coordinate to one float32 N(0, 1) sample (Box–Muller).

    ``z = √(-2 ln U) · cos(2πV)`` with ``U = (b0 + 1/2)/2**32`` and
    ``V = (b1 + 1/2)/2**32`` (Box & Muller 1958). The radius uses an exactly
    rounded ``U`` plus its rounding error (Fast2Sum), so ``ln U`` keeps full
    relative precision both in the tail (``U → 0``) and near ``U → 1`` (``z → 0``).
    The angle is reduced exactly in integers: the top two bits of ``b1`` give the
    quadrant, the other 30 bits the position ``g`` inside it, folded so that one
    polynomial in ``g²`` (``cos(πg/2)``, error 1.8e-8) serves all four quadrants.

    Args:
        b0, b1: uint32 arrays of equal shape (64 uniform bits per coordinate).

    Returns:
        float32 samples, ``|z| ≤ √(66 ln 2) ≈ 6.764``.
    """
    return _box_muller(_log_u32(b0), b1)


#: ``"tail"`` refines ``U`` exactly when ``b0 < TAIL_SPLIT`` (``U < 2**-24``).
TAIL_SPLIT = 1 << 8


def _log_u96(b0: jax.Array, b2: jax.Array, b3: jax.Array) -> jax.Array:
    """``ln U`` for ``U = (b0 + b2·2**-32 + (b3 + 1/2)·2**-64)·2**-32``, valid for ``b0 < 2**8``.

    There ``U ∈ [2**-97, 2**-24)`` is a normal float32 (the smallest normal is 2**-126), so
    :func:`_log_unit` applies to it directly (its exponent split is the offset ``e·ln 2``).
    The three terms are formed with four roundings of relative size ≤ 2**-24 each, so
    ``fl(U) = U·(1 + η)``, ``|η| < 2.4e-7``, and ``ln U`` is off by less than 2.4e-7 in
    absolute terms, i.e. less than 1.5e-8 relative (``|ln U| > 24 ln 2 = 16.6``).
    """
    t0 = (b0 & np.uint32(0xFF)).astype(jnp.int32).astype(jnp.float32) * np.float32(2.0**-32)
    t2 = b2.astype(jnp.float32) * np.float32(2.0**-64)
    t3 = (b3.astype(jnp.float32) + 0.5) * np.float32(2.0**-96)
    return _log_unit((t0 + t2) + t3)


def tail_box_muller_from_bits(
    b0: jax.Array, b1: jax.Array, b2: jax.Array, b3: jax.Array
) -> jax.Array:
    """Box–Muller with a 96-bit radius uniform (``impl="tail"``): four uint32 words -> N(0, 1).

    ``U = (b0 + b2·2**-32 + (b3 + 1/2)·2**-64)·2**-32`` (96 uniform bits, smallest value
    2**-97) and ``V = (b1 + 1/2)/2**32``. When ``b0 ≥ 2**8`` (``U ≥ 2**-24``) the extra words
    are ignored and the result is bit for bit :func:`box_muller_from_bits` ``(b0, b1)``: the
    same float32 operations, with ``ln U`` selected afterwards. When ``b0 < 2**8`` (probability
    2**-24 per coordinate) ``ln U`` is computed from all 96 bits (:func:`_log_u96`, relative
    error < 1.5e-8), so the radius reaches ``√(-2 ln 2**-97) = √(194 ln 2) ≈ 11.596``.

    Args:
        b0, b1: the words of the first Threefry block (as in :func:`box_muller_from_bits`).
        b2, b3: the words of the second block (the low 64 bits of ``U``).

    Returns:
        float32 samples, ``|z| ≤ √(194 ln 2) ≈ 11.596`` (+ float32 error, :data:`TAIL_BOUND`).
    """
    log_u = jnp.where(b0 < np.uint32(TAIL_SPLIT), _log_u96(b0, b2, b3), _log_u32(b0))
    return _box_muller(log_u, b1)


def laplace_from_bits(b0: jax.Array, b1: jax.Array) -> jax.Array:
    """Map two uint32 words per coordinate to one float32 standard Laplace sample.

    The top bit of ``b0`` is the sign; the other 63 bits give ``k`` and
    ``U = (k + 1/2)·2**-63 ∈ [2**-64, 1 - 2**-64]``; the magnitude is ``-ln U``
    (exponential with rate 1, Devroye 1986, §II.2), so ``|x| ≤ 64 ln 2 ≈ 44.36``.
    ``U`` is split as ``A + B`` with ``A`` its top 24 bits (exact) and ``B < 2**-24`` rounded
    to float32; ``ln U = ln fl(U) + (U - fl(U))/fl(U)`` with the Fast2Sum residual, as in
    :func:`box_muller_from_bits`. Measured error against float64 on the same bits
    (``tests/privacy/test_laplace_sampler.py``): below ``2e-7·|x| + 2**-46`` (the absolute
    term is the rounding of ``B``; it matters only for ``|x| < 1e-7``).

    Args:
        b0, b1: uint32 arrays of equal shape (64 uniform bits per coordinate).

    Returns:
        float32 samples of density ``exp(-|x|)/2`` restricted to ``|x| ≤ 64 ln 2``.
    """
    hi = b0 & np.uint32(0x7FFFFFFF)
    a = (hi >> np.uint32(7)).astype(jnp.int32).astype(jnp.float32) * np.float32(2.0**-24)
    b = (hi & np.uint32(0x7F)).astype(jnp.int32).astype(jnp.float32) * np.float32(2.0**-31) + (
        b1.astype(jnp.float32) + 0.5
    ) * np.float32(2.0**-63)
    x = a + b  # fl(U), a normal float32 ≥ 2**-64
    err = (a - x) + b  # U - x up to the rounding of B (Fast2Sum: a ≥ b whenever a ≠ 0)
    magnitude = -(_log_unit(x) + err * (2.0 - x))  # ≥ 0 mathematically; sign bit cleared below
    bits = jax.lax.bitcast_convert_type(magnitude, jnp.uint32) & np.uint32(0x7FFFFFFF)
    signed = bits | (b0 & np.uint32(0x80000000))
    return jax.lax.bitcast_convert_type(signed, jnp.float32)


def _key_words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        if "threefry" not in impl:
            raise LdpsimError(
                f"key must be a threefry2x32 key for ldpsim's Threefry samplers (impl "
                f"'fast'/'tail'/'icdf'/'bits'), got a {impl} key; use impl='jax' "
                "(jax.random.normal / jax.random.laplace) for other key types"
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


def _fast(
    k0, k1, shape: tuple[int, ...], offset: int, dtype: jnp.dtype, impl: str = "fast"
) -> jax.Array:
    size = math.prod(shape)
    if offset + size > _MAX_SIZE:
        raise LdpsimError(
            f"a single draw is limited to 2**32 coordinates per key, got {offset + size}; "
            "fold distinct ids into the key for larger draws"
        )
    return _fast_kernel(k0, k1, shape, offset, dtype, impl)


@_xla.jit(static_argnums=(2, 3, 4, 5))
def _fast_kernel(
    k0, k1, shape: tuple[int, ...], offset: int, dtype: jnp.dtype, impl: str
) -> jax.Array:
    # jitted so that eager calls compile once instead of dispatching ~100 ops; inlined
    # into an enclosing jit/vmap as usual. ``impl`` is a Gaussian impl or "laplace" (bits).
    size = math.prod(shape)
    counter = jax.lax.iota(jnp.uint32, size) + np.uint32(offset)
    if impl == "laplace":
        b0, b1 = threefry2x32(k0, k1, jnp.full_like(counter, LAPLACE_TAG), counter)
        z = laplace_from_bits(b0, b1)
    else:
        b0, b1 = threefry2x32(k0, k1, jnp.full_like(counter, TAG), counter)
        if impl == "tail":
            b2, b3 = threefry2x32(k0, k1, jnp.full_like(counter, TAIL_TAG), counter)
            z = tail_box_muller_from_bits(b0, b1, b2, b3)
        elif impl == "fast":
            z = box_muller_from_bits(b0, b1)
        else:
            z = normal_from_bits(b0, b1)
    return z.reshape(shape).astype(dtype)


def _is_threefry(key: jax.Array) -> bool:
    if jax.dtypes.issubdtype(jnp.result_type(key), jax.dtypes.prng_key):
        return "threefry" in str(jax.random.key_impl(key))
    return jnp.shape(key) == (2,) and jnp.result_type(key) == jnp.uint32


def random_bits(key: jax.Array, shape) -> jax.Array:
    """``jax.random.bits(key, shape, jnp.uint32)``: the same bits, computed faster on CPU.

    For a threefry key (JAX's default) under ``jax_threefry_partitionable`` (JAX's default
    since 0.5), ``jax.random.bits`` hashes the row-major index ``i`` of each element as the
    counter ``(0, i)`` and returns the two output words XOR-ed. This computes exactly that with
    :func:`threefry2x32`, unrolled, which XLA fuses with its consumers; JAX lowers its Threefry
    on CPU as a five-iteration loop that it cannot fuse, 3-7x slower per word at LeNet-5 size
    (``benchmarks/README.md``). Any other key type, the non-partitionable stream, or 2^32
    elements and more fall back to ``jax.random.bits`` itself, so the result never differs from
    it (tests compare them over shapes, keys and ``vmap``).
    """
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    # (a JAX without the flag has only the partitionable stream)
    partitionable = getattr(jax.config, "jax_threefry_partitionable", True)
    if not _is_threefry(key) or not partitionable or size >= _MAX_SIZE:
        return jax.random.bits(key, shape, jnp.uint32)
    k0, k1 = _key_words(key)
    counter = jax.lax.iota(jnp.uint32, size)
    b0, b1 = threefry2x32(k0, k1, jnp.zeros_like(counter), counter)
    return (b0 ^ b1).reshape(shape)


def resolve_impl(key: jax.Array, impl: str | None) -> str:
    """``impl``, or for None the default for ``key``: ``"tail"`` for a threefry key
    (JAX's default; ``LDPSIM_NOISE_SAMPLER`` in the environment overrides it:
    :func:`ldpsim._src.privacy.noise.realised.default_sampler`), ``"jax"`` for any other key type
    (e.g. with ``jax_default_prng_impl="rbg"``), whose bits this module cannot reproduce."""
    if impl is not None:
        check_choice("impl", impl, IMPLS)
        return impl
    return realised.default_sampler("gaussian") if _is_threefry(key) else "jax"


def resolve_laplace_impl(key: jax.Array, impl: str | None) -> str:
    """The Laplace sampler that runs: ``impl``, or for None ``"bits"`` for a threefry key and
    ``"jax"`` (``jax.random.laplace``) for any other key type."""
    if impl is not None:
        check_choice("impl", impl, LAPLACE_IMPLS)
        return impl
    return "bits" if _is_threefry(key) else "jax"


def normal(
    key: jax.Array,
    shape: tuple[int, ...] = (),
    dtype: Any = jnp.float32,
    *,
    impl: str | None = None,
) -> jax.Array:
    """iid N(0, 1) samples of ``shape``; pure, jittable, vmappable over ``key``.

    Args:
        key: one threefry PRNG key (typed ``jax.random.key`` or raw
            ``jax.random.PRNGKey``); vmap over keys for one draw per client.
        shape: output shape (at most 2**32 elements).
        dtype: a floating dtype. ``"fast"``/``"tail"``/``"icdf"`` compute in float32
            and cast (bfloat16/float16 noise is float32 noise rounded; float64 noise
            has float32 resolution).
        impl: ``"fast"`` (Threefry-2x32-20 bits + Box–Muller, ``|z| ≤ 6.76``),
            ``"tail"`` (``"fast"`` with a 96-bit radius uniform, ``|z| ≤ 11.60``; equal to
            ``"fast"`` except with probability 2**-24 per coordinate), ``"icdf"`` (same
            bits + 64-bit inverse CDF, ``|z| ≤ 9.08``) or ``"jax"``
            (``jax.random.normal``, the reference); None (default): ``"fast"`` for
            threefry keys, ``"jax"`` for other key types (:func:`resolve_impl`).
            See the module docstring; :func:`sampler_model` gives each one's reach.

    Returns:
        An array of ``shape`` and ``dtype``. The same key and shape always give
        the same values; a draw of shape ``s`` is the first ``prod(s)`` values of
        any larger draw from the same key, in row-major order.

    Raises:
        LdpsimError: unknown ``impl``, non-floating ``dtype``, a non-threefry or
            batched key with ``impl="fast"``/``"tail"``/``"icdf"``, or more than 2**32
            elements.
    """
    impl = resolve_impl(key, impl)
    dtype = _check_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if impl == "jax":
        return jax.random.normal(_as_jax_key(key), shape, dtype)
    k0, k1 = _key_words(key)
    return _fast(k0, k1, shape, 0, dtype, impl)


def normal_like(
    key: jax.Array, tree: PyTree, *, dtype: Any = None, impl: str | None = None
) -> PyTree:
    """iid N(0, 1) noise with the structure and shapes of ``tree``.

    With ``impl="fast"`` (also ``"tail"``, ``"icdf"``) the leaves (in ``jax.tree_util``
    order) take consecutive blocks of one counter range, so the result equals
    ``unravel(normal(key, (total_size,)))``: no per-leaf key split is needed and
    the noise of a leaf does not depend on the dtypes of the others. With
    ``impl="jax"`` each leaf draws ``jax.random.normal`` from
    ``jax.random.split(key, num_leaves)``.

    Args:
        key: one threefry PRNG key.
        tree: pytree whose leaves give the shapes (and dtypes, when ``dtype`` is
            None; non-floating leaves get float32 noise).
        dtype: force one floating dtype for every leaf.
        impl: ``"fast"``, ``"tail"``, ``"icdf"``, ``"jax"`` or None (see :func:`normal`).

    Returns:
        A pytree like ``tree`` of N(0, 1) samples.
    """
    impl = resolve_impl(key, impl)
    return _draw_like(key, tree, dtype, None if impl == "jax" else impl, jax.random.normal)


def _draw_like(key, tree: PyTree, dtype: Any, kernel: str | None, jax_draw) -> PyTree:
    """Leaves of ``tree`` from consecutive counter blocks of ``kernel`` (an impl of
    :func:`_fast_kernel`), or for ``kernel=None`` from ``jax_draw`` on per-leaf split keys."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)

    def leaf_dtype(x):
        if dtype is not None:
            return _check_dtype(dtype)
        d = jnp.result_type(x)
        return d if jnp.issubdtype(d, jnp.floating) else jnp.dtype(jnp.float32)

    if kernel is None:
        keys = jax.random.split(_as_jax_key(key), max(len(leaves), 1))
        out = [jax_draw(k, jnp.shape(x), leaf_dtype(x)) for k, x in zip(keys, leaves)]
        return jax.tree_util.tree_unflatten(treedef, out)
    k0, k1 = _key_words(key)
    out, offset = [], 0
    for x in leaves:
        shape = tuple(jnp.shape(x))
        out.append(_fast(k0, k1, shape, offset, leaf_dtype(x), kernel))
        offset += math.prod(shape)
    return jax.tree_util.tree_unflatten(treedef, out)


def laplace(
    key: jax.Array,
    shape: tuple[int, ...] = (),
    dtype: Any = jnp.float32,
    *,
    impl: str | None = None,
) -> jax.Array:
    """iid standard Laplace samples (density ``exp(-|x|)/2``); pure, jittable, vmappable.

    Args:
        key: one PRNG key (vmap over keys for one draw per client).
        shape: output shape (at most 2**32 elements).
        dtype: a floating dtype (``"bits"`` computes in float32 and casts).
        impl: ``"bits"`` (Threefry-2x32-20 bits at counters ``(LAPLACE_TAG, j)``,
            :func:`laplace_from_bits`: sign bit + ``-ln U`` of a 63-bit uniform,
            ``|x| ≤ 64 ln 2 ≈ 44.36``) or ``"jax"`` (``jax.random.laplace``: ``x`` in
            ``[-15.537, 16.636]``); None: ``"bits"`` for threefry keys, ``"jax"`` otherwise
            (:func:`resolve_laplace_impl`). :func:`laplace_model` gives each one's reach.

    Returns:
        An array of ``shape`` and ``dtype``; a draw of shape ``s`` is the first ``prod(s)``
        values of any larger ``"bits"`` draw from the same key.

    Raises:
        LdpsimError: unknown ``impl``, non-floating ``dtype``, a non-threefry or batched key
            with ``impl="bits"``, or more than 2**32 elements.
    """
    impl = resolve_laplace_impl(key, impl)
    dtype = _check_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if impl == "jax":
        return jax.random.laplace(_as_jax_key(key), shape, dtype)
    k0, k1 = _key_words(key)
    return _fast(k0, k1, shape, 0, dtype, "laplace")


def laplace_like(
    key: jax.Array, tree: PyTree, *, dtype: Any = None, impl: str | None = None
) -> PyTree:
    """iid standard Laplace noise with the structure and shapes of ``tree``.

    With ``impl="bits"`` the leaves (``jax.tree_util`` order) take consecutive blocks of one
    counter range, so the result equals ``unravel(laplace(key, (total_size,)))``; with
    ``impl="jax"`` each leaf draws ``jax.random.laplace`` from
    ``jax.random.split(key, num_leaves)`` (the behaviour of ldpsim before ``"bits"``).
    Arguments as in :func:`normal_like` and :func:`laplace`.
    """
    impl = resolve_laplace_impl(key, impl)
    return _draw_like(key, tree, dtype, None if impl == "jax" else "laplace",
                      jax.random.laplace)


__all__ = [
    "IMPLS",
    "LAPLACE_IMPLS",
    "LAPLACE_TAG",
    "LAPLACE_TAIL_BOUND",
    "LAPLACE_TAIL_BOUNDS",
    "SamplerModel",
    "TAG",
    "TAIL_BOUND",
    "TAIL_TAG",
    "box_muller_from_bits",
    "laplace",
    "laplace_from_bits",
    "laplace_like",
    "laplace_model",
    "normal",
    "normal_from_bits",
    "normal_like",
    "random_bits",
    "resolve_impl",
    "resolve_laplace_impl",
    "sampler_model",
    "tail_box_muller_from_bits",
    "threefry2x32",
    "upper_probit",
]
