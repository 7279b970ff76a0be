"""k-ary randomized response (k-RR) for labels and categorical values: ε-LDP, any two values.

Privatize: keep the value ``x ∈ {0, …, k−1}`` with probability ``p = e^ε/(e^ε + k − 1)``,
else release one of the ``k − 1`` other values uniformly (each with ``q = 1/(e^ε + k − 1)``).
Every likelihood ratio is ``p/q = e^ε`` at most: **pure ε-LDP for any two values**
(neighbouring relation ``"replace"``).

Decode (unbiased): ``x̂ = (onehot(y) − q)/(p − q)``, a length-k vector with ``E[x̂] = onehot(x)``
and per-coordinate variance ``P_j(1 − P_j)/(p − q)²`` with ``P_j = p`` at ``j = x`` and ``q``
elsewhere (:func:`variance`). Averaging decoded reports estimates the histogram.

What runs (exact): the value is replaced iff a uniform ``32W``-bit integer ``U`` (``W``
Threefry words, most significant first) is below an integer cut ``c`` computed on the host
in exact integer arithmetic (:func:`replace_cut`):
``c = ⌈2^{32W}(k − 1)/(e^{ε_t} + k − 1)⌉`` with ``ε_t = ε(1 − 2⁻⁴⁴)``, raised until
``(2^{32W} − c)(k − 1)/c ≤ e^{ε_t}`` is proven (logarithms of the big integers to 80 digits),
with ``W ≥ 2`` words, more for large ε so that ``c ≥ 2⁶⁴`` (ε up to :data:`MAX_EPSILON`).
The replacement is ``w mod (k − 1)`` of one more word ``w``, redrawn while ``w`` falls in the
incomplete last block (rejection), so it is exactly uniform. The realised law is therefore
exactly k-RR with ``p' = 1 − c/2^{32W}`` and ``q' = c/((k − 1)2^{32W})``: **pure ε'-LDP with
ε' = ln(p'/q') ≤ ε** (ε' equals ε to a relative 6e-14; :func:`realised_epsilon`), so
:func:`make` prints ε (proven), accounted as ``RandomizedResponseDpEvent(k q', k)`` (``k q'``
rounded down: a weakly less private event). The only model is that Threefry's words are
uniform bits. :func:`realised_probabilities` gives the exact output law.

A traced ε (inside ``jit`` with ε an argument) cannot reach the host: the cut is then
computed on the device in float32 on a 64-bit grid, ``c = max(1, ⌈float32(q)·2⁶⁴⌉)`` with
``q = (k − 1)e^{−ε}/(1 + (k − 1)e^{−ε})``: ε' is within float32 rounding of ε (about 1e-7,
either side) up to ε ≈ 27 + ln(k − 1), below ε beyond it (c rounds up), and never above
``ln((2⁶⁴ − 1)(k − 1)) ≈ 44.4 + ln(k − 1)``. Pass a concrete ε (or use :func:`make`) for
the exact guarantee.

Implementation: the words are ldpsim's unrolled Threefry (counters ``(RR_TAG + s, j)`` for
stream ``s``) for threefry keys, ``jax.random.bits`` of ``fold_in(key, s)`` otherwise.

References:
    Warner, "Randomized response", JASA 1965; Kairouz, Oh & Viswanath, "Discrete distribution
    estimation under local privacy", ICML 2016 (arXiv:1602.07387), "k-RR".
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.randomizers import randomizer as rz
from ldpsim._src.privacy.noise import sampling
from ldpsim._src.privacy.randomizers.randomizer import LocalMechanism, Report, check_epsilon

NAME = "rr"

#: High counter word of randomized response's bits (domain separation from the Gaussian
#: sampler; stream ``s`` uses ``RR_TAG + s``).
RR_TAG = 0x6C647272

#: Largest ε whose law :func:`replace_cut` represents (q ≈ e^{-700} needs 34 words).
MAX_EPSILON = 700.0

_WORD = 32
_MASK = (1 << _WORD) - 1
_DIGITS = 80                 # decimal digits of the host's logarithms and exponentials
_MARGIN = decimal.Decimal(10) ** -50

#: Relative margin below the requested ε that the exact thresholds target (ε' ≤ ε(1 − 2⁻⁴⁴)).
TARGET_MARGIN = 2.0**-44


# --------------------------------------------------------------- exact integer thresholds
# Shared by the discrete samplers (k-RR here, Duchi et al.'s coin, SignDS's count): a
# probability is an integer cut c on a 32W-bit grid, drawn as ``U < c`` for W uniform words.


def words_of(value: int, n_words: int) -> np.ndarray:
    """The integer ``0 ≤ value < 2^{32 n_words}`` as ``n_words`` uint32 words, most
    significant first."""
    value = int(value)
    if not 0 <= value < 1 << (_WORD * n_words):
        raise ValueError(f"{value} does not fit in {n_words} words")
    return np.array([(value >> (_WORD * (n_words - 1 - i))) & _MASK for i in range(n_words)],
                    np.uint32)


def int_of(words: Any) -> int:
    """The inverse of :func:`words_of` (host side): words along the last axis, most
    significant first (a 1-D array or sequence)."""
    out = 0
    for w in np.asarray(words, np.uint64).reshape(-1).tolist():
        out = (out << _WORD) | int(w)
    return out


def below(words: jax.Array, cut: jax.Array) -> jax.Array:
    """``U < c`` for multi-word integers (uint32 words along the last axis, most significant
    first; ``words`` and ``cut`` broadcast): exact lexicographic comparison."""
    words = jnp.asarray(words, jnp.uint32)
    cut = jnp.asarray(cut, jnp.uint32)
    n = cut.shape[-1]
    out = jnp.zeros(jnp.broadcast_shapes(words.shape, cut.shape)[:-1], bool)
    for i in reversed(range(n)):                       # from the least significant word up
        w, c = words[..., i], cut[..., i]
        out = (w < c) | ((w == c) & out)
    return out


def _ctx(digits: int = _DIGITS) -> decimal.Context:
    return decimal.Context(prec=digits, rounding=decimal.ROUND_HALF_EVEN,
                           Emin=-999_999, Emax=999_999)


def _ln_ratio(num: int, den: int) -> decimal.Decimal:
    ctx = _ctx()
    return ctx.subtract(ctx.ln(decimal.Decimal(int(num))), ctx.ln(decimal.Decimal(int(den))))


def _float_up(x: decimal.Decimal) -> float:
    f = float(x)
    return math.nextafter(f, math.inf) if decimal.Decimal(f) < x else f


def float_down(x: Fraction) -> float:
    """The largest float ≤ the rational ``x``."""
    f = float(x)
    return math.nextafter(f, -math.inf) if Fraction(f) > x else f


def ratio_within(num: int, den: int, epsilon: float) -> bool:
    """Proven ``num/den ≤ e^ε`` for positive integers (both logarithms correctly rounded to
    80 digits, with a 1e-50 margin: False only when it does not hold or is within 1e-50)."""
    return _ctx().add(_ln_ratio(num, den), _MARGIN) <= decimal.Decimal(float(epsilon))


def log_ratio_upper(num: int, den: int) -> float:
    """A float ``≥ |ln(num/den)|`` (positive integers), within a few ulps of it."""
    if num == den:
        return 0.0
    if num < den:
        num, den = den, num
    return _float_up(_ctx().add(_ln_ratio(num, den), _MARGIN))


def log_ratio_epsilon(num: int, den: int, epsilon: float) -> float:
    """The ε to print for a realised worst-case ratio ``num/den ≥ 1``: the requested ``ε``
    when ``num/den ≤ e^ε`` is proven (:func:`ratio_within`; ε is then an upper bound of the
    realised loss), else :func:`log_ratio_upper` (the realised loss, rounded up)."""
    if num >= den and ratio_within(num, den, epsilon):
        return float(epsilon)
    return log_ratio_upper(num, den)


# ------------------------------------------------------------------------------- k-RR


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RRParams:
    """k-RR's parameters: the realised ε' (float32), the replacement cut (uint32[W], most
    significant word first), the realised keep and per-other probabilities ``p'``, ``q'``
    (float32; the decoder's), and ``k`` (static)."""

    epsilon: jax.Array
    cut: jax.Array
    keep: jax.Array
    other: jax.Array
    k: int = dataclasses.field(metadata=dict(static=True))


def _check_k(k: Any) -> int:
    if isinstance(k, bool):
        raise LdpsimError(f"k must be an integer >= 2 (categories), got {k!r}")
    try:
        out = int(k)
    except (TypeError, ValueError):
        raise LdpsimError(f"k must be an integer >= 2 (categories), got {k!r}") from None
    if out != k or out < 2:
        raise LdpsimError(f"k must be an integer >= 2 (categories), got {k!r}")
    return out


def _check_max(eps: float) -> float:
    if eps > MAX_EPSILON:
        raise LdpsimError(f"epsilon must be <= {MAX_EPSILON:g} for rr (the replacement "
                          f"probability (k-1)e^-eps would need more than 34 words); got {eps!r}")
    return eps


@functools.lru_cache(maxsize=512)
def replace_cut(epsilon: float, k: int) -> tuple[int, int]:
    """``(c, W)``: replace iff ``U < c`` for a uniform ``32W``-bit ``U`` (module docstring).

    ``c`` is the smallest integer with ``(2^{32W} − c)(k − 1)/c ≤ e^{ε(1 − 2⁻⁴⁴)}`` proven,
    so the realised ε' is at most ε with a relative margin of 2⁻⁴⁴ (6e-14: so that the
    float evaluations of the accounting event stay at or below ε); ``W ≥ 2`` is chosen so
    that ``c ≥ 2⁶⁴`` (relative rounding below 1e-19, negligible against the margin).
    """
    eps, k = float(epsilon) * (1.0 - TARGET_MARGIN), int(k)
    a = eps - math.log(k - 1)                              # ln(e^ε/(k − 1))
    bits = (max(a, 0.0) + math.log1p(math.exp(-abs(a)))) / math.log(2.0)   # log2(1/q_total)
    n_words = max(2, math.ceil((bits + 64 + max(0.0, -math.log2(eps))) / _WORD))
    m = 1 << (_WORD * n_words)
    ctx = _ctx(10 * n_words + 40)
    e = ctx.exp(decimal.Decimal(eps))
    c = int(ctx.divide(decimal.Decimal(m * (k - 1)), ctx.add(e, k - 1))
            .to_integral_value(rounding=decimal.ROUND_CEILING))
    c = max(c, 1)
    while not ratio_within((m - c) * (k - 1), c, eps):
        c += 1
    return c, n_words


def realised_epsilon(epsilon: float, k: int) -> float:
    """The ε' that :func:`k_randomized_response` realises for a concrete ε: a float at least
    the exact ``ln(p'/q')`` and within a few ulps of it (below ε by about ε·2⁻⁴⁴)."""
    eps, k = float(epsilon), _check_k(k)
    c, n = replace_cut(eps, k)
    return log_ratio_upper(((1 << (_WORD * n)) - c) * (k - 1), c)


def realised_law(epsilon: float, k: int) -> tuple[Fraction, Fraction]:
    """The exact ``(p', q')`` (fractions): keep probability and each other value's."""
    c, n = replace_cut(float(epsilon), _check_k(k))
    m = 1 << (_WORD * n)
    return Fraction(m - c, m), Fraction(c, m * (k - 1))


def realised_probabilities(epsilon: float, k: int, value: int = 0) -> np.ndarray:
    """The exact output law of :func:`k_randomized_response` for a concrete ε, as float64:
    ``P(y = j | value)`` for ``j = 0..k−1``."""
    p, q = realised_law(epsilon, k)
    out = np.full(k, float(q), np.float64)
    out[value] = float(p)
    return out


def _stream_words(key: jax.Array, shape: tuple[int, ...], n: int, stream) -> jax.Array:
    """``n`` uint32 words per entry of ``shape`` (shape ``(*shape, n)``) from stream
    ``stream`` (may be traced): ldpsim's unrolled Threefry with counters
    ``(RR_TAG + stream, j)`` for threefry keys, ``jax.random.bits(fold_in(key, stream))``
    otherwise."""
    size = math.prod(shape)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        threefry = "threefry" in str(jax.random.key_impl(key)) and key.shape == ()
        kw = jax.random.key_data(key) if threefry else None
    else:
        threefry = key.shape == (2,) and key.dtype == jnp.uint32
        kw = key if threefry else None
    if not threefry:
        k = key if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(key)
        return jax.random.bits(jax.random.fold_in(k, stream), (*shape, n), jnp.uint32)
    pairs = (n + 1) // 2
    counter = jnp.arange(pairs * size, dtype=jnp.uint32)
    hi = jnp.full_like(counter, RR_TAG) + jnp.asarray(stream, jnp.uint32)
    b0, b1 = sampling.threefry2x32(kw[0], kw[1], hi, counter)
    words = jnp.concatenate([b0.reshape(pairs, size), b1.reshape(pairs, size)])[:n]
    return jnp.moveaxis(words, 0, -1).reshape(*shape, n)


def _traced_cut(epsilon: jax.Array, k: int) -> jax.Array:
    """The cut for a traced ε, in float32 on a 64-bit grid: ``max(1, ⌈float32(q)·2⁶⁴⌉)`` as
    two words (exact splitting: the float32 product has 24 significant bits)."""
    r = np.float32(k - 1) * jnp.exp(-jnp.asarray(epsilon, jnp.float32))
    q = r / (1.0 + r)
    big = jnp.clip(jnp.ceil(q * np.float32(2.0**64)), 1.0, np.float32(2.0**64 - 2.0**40))
    hi = jnp.floor(big * np.float32(2.0**-32))
    lo = big - hi * np.float32(2.0**32)
    return jnp.stack([hi.astype(jnp.uint32), lo.astype(jnp.uint32)], axis=-1)


def _respond(key: jax.Array, value: jax.Array, k: int, cut: jax.Array) -> jax.Array:
    """k-RR of ``value`` with the replacement cut ``cut`` (uint32[..., W])."""
    shape = jnp.shape(value)
    u = _stream_words(key, shape, cut.shape[-1], 0)
    replace = below(u, cut)
    n = k - 1
    if n == 1:
        other = jnp.zeros(shape, jnp.int32)
    else:
        limit = np.uint32(_MASK - (1 << _WORD) % n)     # accept w ≤ limit: complete blocks
        w = _stream_words(key, shape, 1, 1)[..., 0]
        if limit != _MASK:
            def body(carry):
                w, s = carry
                fresh = _stream_words(key, shape, 1, s)[..., 0]
                return jnp.where(w > limit, fresh, w), s + 1

            w, _ = jax.lax.while_loop(lambda c: jnp.any(c[0] > limit), body, (w, jnp.uint32(2)))
        other = (w % np.uint32(n)).astype(jnp.int32)
    other = other + (other >= value).astype(jnp.int32)
    return jnp.where(replace, other, value)


def k_randomized_response(
    key: jax.Array, value: jax.typing.ArrayLike, *, k: int, epsilon: jax.typing.ArrayLike
) -> jax.Array:
    """k-ary randomized response of ``value`` (see the module docstring): pure, jittable,
    vmappable (``k`` is static; a concrete scalar ε gets the exact host cut, a traced or
    array ε the float32 one).

    Args:
        key: a PRNG key (typed or raw).
        value: an integer in ``[0, k)`` (not checked when traced).
        k: the number of categories, an int ≥ 2.
        epsilon: ε > 0, finite (at most :data:`MAX_EPSILON` when concrete).

    Returns:
        An int32 scalar (or array like ``value``) in ``[0, k)``.

    Raises:
        LdpsimError: ``k`` < 2 or not an integer; a concrete ε ≤ 0, non-finite or above
            :data:`MAX_EPSILON`.
    """
    k = _check_k(k)
    value = jnp.asarray(value, jnp.int32)
    if isinstance(epsilon, jax.core.Tracer):
        cut = _traced_cut(epsilon, k)
    else:
        eps = np.asarray(epsilon, np.float64)
        if not np.all((eps > 0) & np.isfinite(eps)):
            raise LdpsimError(f"epsilon must be > 0 and finite, got {epsilon!r}")
        if eps.ndim == 0:
            c, n = replace_cut(_check_max(float(eps)), k)
            cut = jnp.asarray(words_of(c, n))
        else:
            cut = _traced_cut(eps, k)
    return _respond(key, value, k, cut)


def privatize(key: jax.Array, value: jax.typing.ArrayLike, params: RRParams) -> Report:
    """One client's k-RR report of an integer ``value``; a value outside ``[0, k)`` is clamped
    into it and counted (``was_clipped``)."""
    v = jnp.asarray(value, jnp.int32)
    clamped = jnp.clip(v, 0, params.k - 1)
    y = _respond(key, clamped, params.k, params.cut)
    was = clamped != v
    return Report(report=y, clipped=clamped, norm=v.astype(jnp.float32),
                  release_norm=clamped.astype(jnp.float32), was_clipped=was,
                  finite=jnp.bool_(True))


def _probs(params: RRParams) -> tuple[jax.Array, jax.Array]:
    return params.keep, params.other


def decode(report: jax.Array, params: RRParams, like: Any = None) -> jax.Array:
    """Unbiased estimate of ``onehot(value)`` (length k, float32): ``(onehot(y) − q')/(p' − q')``
    with the realised ``p'``, ``q'``."""
    p, q = _probs(params)
    onehot = jax.nn.one_hot(report, params.k, dtype=jnp.float32)
    return (onehot - q) / (p - q)


def mean(params: RRParams, value: jax.typing.ArrayLike) -> jax.Array:
    """``E[decode] = onehot(value)`` (value clamped into ``[0, k)``)."""
    return jax.nn.one_hot(jnp.clip(jnp.asarray(value, jnp.int32), 0, params.k - 1), params.k,
                          dtype=jnp.float32)


def variance(params: RRParams, value: jax.typing.ArrayLike) -> jax.Array:
    """Exact per-coordinate variance ``P_j(1 − P_j)/(p' − q')²`` of :func:`decode`."""
    p, q = _probs(params)
    pj = jnp.where(mean(params, value) > 0, p, q)
    return pj * (1.0 - pj) / jnp.square(p - q)


def make(*, epsilon: float, k: int) -> LocalMechanism:
    """k-ary randomized response at ε: its exact integer law is ε'-LDP with ε' ≤ ε proven, so
    ε is printed (pure, δ = 0; ε' is in ``realisation``; module docstring).

    Raises:
        LdpsimError: ε ≤ 0, non-finite or above :data:`MAX_EPSILON`; ``k`` < 2.
    """
    eps = _check_max(check_epsilon(epsilon))
    k = _check_k(k)
    c, n = replace_cut(eps, k)
    m = 1 << (_WORD * n)
    p, q = Fraction(m - c, m), Fraction(c, m * (k - 1))
    exact = log_ratio_upper((m - c) * (k - 1), c)           # ε', rounded up
    eps_r = log_ratio_epsilon((m - c) * (k - 1), c, eps)    # ε (proven ≥ ε')
    noise = float_down(k * q)            # k q' rounded down: a (weakly) less private event
    params = RRParams(jnp.float32(eps_r), jnp.asarray(words_of(c, n)), jnp.float32(float(p)),
                      jnp.float32(float(q)), k)

    def dp_event(params: RRParams):
        import dp_accounting

        return dp_accounting.RandomizedResponseDpEvent(noise_parameter=noise, num_buckets=k)

    def noise_std(params: RRParams) -> jax.Array:
        return jnp.sqrt(jnp.mean(variance(params, 0)))

    line = (f"keep iff a {_WORD * n}-bit Threefry integer >= c (exact host cut), replacement "
            f"uniform by rejection: exact k-RR law, eps' = ln((2^{_WORD * n} - c)(k-1)/c) = "
            f"{exact:.17g} <= eps (Threefry bits modelled as uniform)")
    return LocalMechanism(name=NAME, params=params, neighbours="replace", epsilon=eps_r,
                          delta=0.0, privatize=privatize, noise_std=noise_std, dp_event=dp_event,
                          decode=decode, mean=mean, variance=variance, additive=False,
                          unbiased=True, tail_mass=0.0, tail_scale=1.0, ideal_epsilon=eps,
                          ideal_delta=0.0, realisation=line)
