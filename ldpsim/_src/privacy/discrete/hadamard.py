"""Fast Walsh–Hadamard transform and the randomized Hadamard rotation.

The distributed discrete Gaussian and Skellam mechanisms (Kairouz, Liu & Steinke, ICML 2021,
arXiv:2102.06387, §4; Agarwal, Kairouz & Liu, NeurIPS 2021, arXiv:2110.04995) rotate every
client's clipped update by the same random orthogonal map ``x ↦ H·diag(s)·x`` before they
scale and round it: afterwards each coordinate is about ``‖x‖/√D`` ("flattened"), so the
integer grid and the ``b``-bit modular range are used evenly. ``H`` is the orthonormal
``D × D`` Hadamard matrix in Sylvester (natural) order (``scipy.linalg.hadamard(D)/√D``),
``D`` the dimension padded with zeros to a power of two, and ``s ∈ {±1}^D`` uniform signs
drawn from a key that all clients and the server share for the round (it is public: the
rotation is a data-independent bijection and costs no privacy).

Everything here is pure and jittable; the transform is ``log₂ D`` butterfly stages of
``D`` additions, ``O(D log D)``. The rotation is orthogonal in exact arithmetic; in float32
the round trip ``unrotate(rotate(x))`` is exact up to ``~log₂ D`` roundings per coordinate
(tested). Privacy never rests on these floats: the integer vector a client releases is
bounded by an exact integer check after rounding (:mod:`.rounding`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ldpsim._src._checks import LdpsimError

__all__ = ["fwht", "next_power_of_two", "flatten_pad", "random_signs", "rotate", "unrotate"]


def next_power_of_two(d: int) -> int:
    """The smallest power of two ``D ≥ d`` (``d ≥ 1``)."""
    d = int(d)
    if d < 1:
        raise LdpsimError(f"dimension must be >= 1, got {d}")
    return 1 << (d - 1).bit_length()


def _log2_exact(n: int) -> int:
    if n < 1 or n & (n - 1):
        raise LdpsimError(f"the Walsh-Hadamard transform needs a power-of-two length, got {n}; "
                          "pad with flatten_pad (or next_power_of_two)")
    return n.bit_length() - 1


def fwht(x: jax.Array) -> jax.Array:
    """Orthonormal fast Walsh–Hadamard transform along the last axis: ``x @ H / √D``.

    ``H`` is Sylvester's Hadamard matrix (``scipy.linalg.hadamard``), so the transform is
    symmetric and its own inverse. The last axis must have a power-of-two length ``D``
    (:class:`LdpsimError` otherwise). The scale ``D^(-1/2)`` is applied once at the end: a
    power of two (exact) for even ``log₂ D``, times one rounded ``1/√2`` for odd.
    """
    x = jnp.asarray(x)
    n = x.shape[-1]
    k = _log2_exact(n)
    batch = x.shape[:-1]
    y = x
    h = 1
    for _ in range(k):
        y = y.reshape(batch + (n // (2 * h), 2, h))
        a, b = y[..., 0, :], y[..., 1, :]
        y = jnp.stack([a + b, a - b], axis=-2)
        h *= 2
    y = y.reshape(batch + (n,))
    if k % 2:
        y = y * jnp.asarray(2.0 ** (-(k - 1) // 2), y.dtype) * jnp.asarray(1 / math.sqrt(2.0), y.dtype)
    else:
        y = y * jnp.asarray(2.0 ** (-k // 2), y.dtype)
    return y


def flatten_pad(tree: Any) -> tuple[jax.Array, Callable[[jax.Array], Any], int]:
    """Flatten a pytree to one vector, zero-padded to a power-of-two length.

    Returns ``(vector of length D, unflatten, d)``: ``unflatten`` maps a length-``D`` (or
    length-``d``) vector back to the pytree, dropping the padding.
    """
    flat, unravel = ravel_pytree(tree)
    d = int(flat.shape[0])
    dim = next_power_of_two(d)
    padded = jnp.pad(flat, (0, dim - d))

    def unflatten(v: jax.Array) -> Any:
        return unravel(v[..., :d])

    return padded, unflatten, d


def random_signs(key: jax.Array, dim: int, dtype=jnp.float32) -> jax.Array:
    """Uniform signs ``s ∈ {±1}^dim`` from ``key`` (the round's shared rotation key)."""
    bits = jax.random.bits(key, (int(dim),), jnp.uint32)
    return jnp.where((bits & 1) == 1, jnp.asarray(1, dtype), jnp.asarray(-1, dtype))


def rotate(key: jax.Array, x: jax.Array) -> jax.Array:
    """Randomized Hadamard rotation ``H·diag(s)·x`` of the last axis (power-of-two length).

    ``s = random_signs(key, D)``: every client of a round uses the same ``key``.
    """
    x = jnp.asarray(x)
    return fwht(x * random_signs(key, x.shape[-1], x.dtype))


def unrotate(key: jax.Array, y: jax.Array) -> jax.Array:
    """Inverse of :func:`rotate` with the same key: ``diag(s)·H·y``."""
    y = jnp.asarray(y)
    return fwht(y) * random_signs(key, y.shape[-1], y.dtype)
