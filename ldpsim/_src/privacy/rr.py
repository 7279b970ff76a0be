"""k-ary randomized response (k-RR) for labels and categorical values: ε-LDP, any two values.

Privatize: keep the value ``x ∈ {0, …, k−1}`` with probability ``p = e^ε/(e^ε + k − 1)``,
else release one of the ``k − 1`` other values uniformly (each with ``q = 1/(e^ε + k − 1)``).
Every likelihood ratio is ``p/q = e^ε`` at most: **pure ε-LDP for any two values**
(neighbouring relation ``"replace"``).

Decode (unbiased): ``x̂ = (onehot(y) − q)/(p − q)``, a length-k vector with ``E[x̂] = onehot(x)``
and per-coordinate variance ``P_j(1 − P_j)/(p − q)²`` with ``P_j = p`` at ``j = x`` and ``q``
elsewhere (:func:`variance`). Averaging decoded reports estimates the histogram.

Accounting: ``dp_accounting.RandomizedResponseDpEvent(k/(e^ε + k − 1), k)`` (uniform
replacement with probability ``k·q``, which is the same law).

Implementation: two 32-bit words per value from ldpsim's unrolled Threefry (counters
``(RR_TAG, j)``) for threefry keys, ``jax.random.bits`` otherwise. The value is replaced iff
``word₀ < ⌈r·2³²⌉`` with ``r = (k − 1)e^{−ε}/(1 + (k − 1)e^{−ε})`` in float32 (no overflow
for large ε), and the replacement is alternative ``word₁ mod (k − 1)``. So the realised law
is ε-LDP up to the float32 rounding of ``r`` (about 1e-7 relative) and the modulo bias (at
most ``(k − 1)/2³²`` relative) while ``r ≫ 2⁻³²`` (ε ≲ 20 for small k; beyond it the output
is ``x`` with probability 1 on this grid). :func:`realised_probabilities` gives the exact
output law of this grid (tested to be ε-LDP up to that rounding).

References:
    Warner, "Randomized response", JASA 1965; Kairouz, Oh & Viswanath, "Discrete distribution
    estimation under local privacy", ICML 2016 (arXiv:1602.07387), "k-RR".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import sampling
from ldpsim._src.privacy.randomizer import LocalMechanism, Report, check_epsilon

NAME = "rr"

#: High counter word of randomized response's bits (domain separation from the Gaussian sampler).
RR_TAG = 0x6C647272

#: Largest uint32 that float32 represents below 2**32.
_U32_MAX_F32 = 4294967040.0


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RRParams:
    """k-RR's parameters: ``epsilon`` (float32, may be traced) and ``k`` (static)."""

    epsilon: jax.Array
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


def _two_words(key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """Two independent uint32 words per entry of ``shape``: ldpsim's unrolled Threefry for
    threefry keys (counters ``(RR_TAG, j)``), ``jax.random.bits`` for other key types."""
    size = math.prod(shape)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        threefry = "threefry" in str(jax.random.key_impl(key)) and key.shape == ()
        words = jax.random.key_data(key) if threefry else None
    else:
        threefry = key.shape == (2,) and key.dtype == jnp.uint32
        words = key if threefry else None
    if not threefry:
        bits = jax.random.bits(key, (2, *shape), jnp.uint32)
        return bits[0], bits[1]
    counter = jnp.arange(2 * size, dtype=jnp.uint32)
    b0, _ = sampling.threefry2x32(words[0], words[1], jnp.full_like(counter, RR_TAG), counter)
    return b0[:size].reshape(shape), b0[size:].reshape(shape)


def _replace_cut(epsilon: jax.typing.ArrayLike, k: int) -> jax.Array:
    r = np.float32(k - 1) * jnp.exp(-jnp.asarray(epsilon, jnp.float32))
    q = r / (1.0 + r)
    return jnp.minimum(jnp.ceil(q * np.float32(2.0**32)), _U32_MAX_F32).astype(jnp.uint32)


def k_randomized_response(
    key: jax.Array, value: jax.typing.ArrayLike, *, k: int, epsilon: jax.typing.ArrayLike
) -> jax.Array:
    """k-ary randomized response of ``value`` (see the module docstring): pure, jittable,
    vmappable (``epsilon`` may be traced; ``k`` is static).

    Args:
        key: a PRNG key (typed or raw).
        value: an integer in ``[0, k)`` (not checked when traced).
        k: the number of categories, an int ≥ 2.
        epsilon: ε > 0, finite.

    Returns:
        An int32 scalar (or array like ``value``) in ``[0, k)``.

    Raises:
        LdpsimError: ``k`` < 2 or not an integer; a concrete ε ≤ 0 or non-finite.
    """
    k = _check_k(k)
    if not isinstance(epsilon, jax.core.Tracer):
        eps = np.asarray(epsilon, np.float64)
        if not np.all((eps > 0) & np.isfinite(eps)):
            raise LdpsimError(f"epsilon must be > 0 and finite, got {epsilon!r}")
    value = jnp.asarray(value, jnp.int32)
    cut = _replace_cut(epsilon, k)
    w0, w1 = _two_words(key, jnp.shape(value))
    other = (w1 % np.uint32(k - 1)).astype(jnp.int32)
    other = other + (other >= value).astype(jnp.int32)
    return jnp.where(w0 < cut, other, value)


def realised_probabilities(epsilon: float, k: int, value: int = 0) -> np.ndarray:
    """The exact output law of :func:`k_randomized_response` on its 32-bit grid (float64):
    ``P(y = j | value)`` for ``j = 0..k−1``, from the integer cut-off and the modulo counts."""
    k = _check_k(k)
    cut = int(np.asarray(_replace_cut(np.float32(epsilon), k)))
    replace = cut / 2.0**32
    counts = np.full(k - 1, 2**32 // (k - 1), np.float64)
    counts[: 2**32 % (k - 1)] += 1
    out = np.zeros(k, np.float64)
    others = [j for j in range(k) if j != value]
    out[others] = replace * counts / 2.0**32
    out[value] = 1.0 - replace
    return out


def _probs(params: RRParams) -> tuple[jax.Array, jax.Array]:
    eps = jnp.asarray(params.epsilon, jnp.float32)
    denom = jnp.exp(-eps) * (params.k - 1) + 1.0          # (e^ε + k − 1)/e^ε, no overflow
    p = 1.0 / denom
    q = jnp.exp(-eps) / denom
    return p, q


def privatize(key: jax.Array, value: jax.typing.ArrayLike, params: RRParams) -> Report:
    """One client's k-RR report of an integer ``value``; a value outside ``[0, k)`` is clamped
    into it and counted (``was_clipped``)."""
    v = jnp.asarray(value, jnp.int32)
    clamped = jnp.clip(v, 0, params.k - 1)
    y = k_randomized_response(key, clamped, k=params.k, epsilon=params.epsilon)
    was = clamped != v
    return Report(report=y, clipped=clamped, norm=v.astype(jnp.float32),
                  release_norm=clamped.astype(jnp.float32), was_clipped=was,
                  finite=jnp.bool_(True))


def decode(report: jax.Array, params: RRParams, like: Any = None) -> jax.Array:
    """Unbiased estimate of ``onehot(value)`` (length k, float32): ``(onehot(y) − q)/(p − q)``."""
    p, q = _probs(params)
    onehot = jax.nn.one_hot(report, params.k, dtype=jnp.float32)
    return (onehot - q) / (p - q)


def mean(params: RRParams, value: jax.typing.ArrayLike) -> jax.Array:
    """``E[decode] = onehot(value)`` (value clamped into ``[0, k)``)."""
    return jax.nn.one_hot(jnp.clip(jnp.asarray(value, jnp.int32), 0, params.k - 1), params.k,
                          dtype=jnp.float32)


def variance(params: RRParams, value: jax.typing.ArrayLike) -> jax.Array:
    """Exact per-coordinate variance ``P_j(1 − P_j)/(p − q)²`` of :func:`decode`."""
    p, q = _probs(params)
    pj = jnp.where(mean(params, value) > 0, p, q)
    return pj * (1.0 - pj) / jnp.square(p - q)


def make(*, epsilon: float, k: int) -> LocalMechanism:
    """k-ary randomized response at ε (pure ε-LDP for any two of ``k`` values).

    Raises:
        LdpsimError: ε ≤ 0 or non-finite, ``k`` < 2.
    """
    eps = check_epsilon(epsilon)
    k = _check_k(k)
    params = RRParams(jnp.asarray(eps, jnp.float32), k)

    def dp_event(params: RRParams):
        import dp_accounting

        return dp_accounting.RandomizedResponseDpEvent(
            noise_parameter=k / (math.exp(eps) + k - 1), num_buckets=k)

    def noise_std(params: RRParams) -> jax.Array:
        return jnp.sqrt(jnp.mean(variance(params, 0)))

    return LocalMechanism(name=NAME, params=params, neighbours="replace", epsilon=eps, delta=0.0,
                          privatize=privatize, noise_std=noise_std, dp_event=dp_event,
                          decode=decode, mean=mean, variance=variance, additive=False,
                          unbiased=True)
