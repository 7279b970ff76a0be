"""Secure aggregation's integer arithmetic: wrap to ``b`` bits, sum modulo ``2^b``, decode.

Secure aggregation (Bonawitz et al., CCS 2017) sums integer vectors in ``Z_{2^b}``. A client's
integer report is reduced modulo ``M = 2^b`` into ``[−2^(b−1), 2^(b−1))`` (:func:`wrap`); the server
learns ``Σ_i x̃_i mod M`` (:func:`modular_sum`), reads it as the signed representative (the true
sum when that lies in ``[−2^(b−1), 2^(b−1))``, otherwise wrapped, an error the bit-width must make
improbable: :func:`.accounting.wrap_probability`), multiplies by the granularity ``γ`` and undoes
the rotation (:func:`decode`). Wrapping is a post-processing of the exact integer sum, so it
costs no privacy (Kairouz, Liu & Steinke 2021, §4).

All arithmetic is in uint32, whose overflow XLA defines as wrap-around modulo ``2³²``; so the sum
of any number of reports is exact modulo ``2^b`` for every ``1 ≤ b ≤ 32``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.hadamard import unrotate

__all__ = ["wrap", "modular_sum", "decode", "wrapped_fraction"]


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or int(bits) != bits or not 1 <= int(bits) <= 32:
        raise LdpsimError(f"bits must be an integer in [1, 32], got {bits!r}")
    return int(bits)


def _to_signed(u: jax.Array, bits: int) -> jax.Array:
    """uint32 residues in ``[0, 2^b)`` to their representatives in ``[−2^(b−1), 2^(b−1))``."""
    if bits == 32:
        return lax.bitcast_convert_type(u, jnp.int32)
    half = jnp.uint32(1 << (bits - 1))
    s = u.astype(jnp.int32)                                  # exact: u < 2^31
    return jnp.where(u >= half, s - jnp.int32(1 << (bits - 1)) - jnp.int32(1 << (bits - 1)), s)


def wrap(v: jax.Array, bits: int) -> jax.Array:
    """``v mod 2^b`` as int32 in ``[−2^(b−1), 2^(b−1))`` (identity on that range)."""
    bits = _check_bits(bits)
    u = lax.bitcast_convert_type(jnp.asarray(v, jnp.int32), jnp.uint32)
    if bits < 32:
        u = u & jnp.uint32((1 << bits) - 1)
    return _to_signed(u, bits)


def modular_sum(v: jax.Array, bits: int, axis: int = 0) -> jax.Array:
    """``Σ v mod 2^b`` along ``axis`` (int32, signed representative): what the server learns."""
    bits = _check_bits(bits)
    u = lax.bitcast_convert_type(jnp.asarray(v, jnp.int32), jnp.uint32)
    s = jnp.sum(u, axis=axis, dtype=jnp.uint32)
    if bits < 32:
        s = s & jnp.uint32((1 << bits) - 1)
    return _to_signed(s, bits)


def wrapped_fraction(true_sum: jax.Array, bits: int) -> jax.Array:
    """Diagnostic: the fraction of coordinates whose exact integer sum (int32, simulation only)
    lies outside ``[−2^(b−1), 2^(b−1))``, i.e. decodes wrongly."""
    bits = _check_bits(bits)
    half = 2 ** (bits - 1)
    t = jnp.asarray(true_sum)
    if bits == 32:
        return jnp.zeros((), jnp.float32)
    return jnp.mean(((t < -half) | (t >= half)).astype(jnp.float32))


def decode(key: jax.Array, total: jax.Array, granularity: float, d: int | None = None) -> jax.Array:
    """Server decoding: signed sum × ``γ``, inverse rotation with the round's key, first ``d``
    coordinates (the padding dropped). Returns float32."""
    if not granularity > 0:
        raise LdpsimError(f"granularity must be > 0, got {granularity!r}")
    y = jnp.asarray(total).astype(jnp.float32) * jnp.float32(granularity)
    x = unrotate(key, y)
    return x if d is None else x[..., :d]
