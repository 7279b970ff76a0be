"""Randomized rounding to integers, and its conditional version with an exact norm bound.

Kairouz, Liu & Steinke, ICML 2021 (arXiv:2102.06387), §4.1 ("conditional randomized rounding"):
each coordinate of the scaled, rotated update ``x`` (``‖x‖₂ ≤ c``) is rounded to ``⌊x⌋ + 1`` with
probability ``x − ⌊x⌋`` and to ``⌊x⌋`` otherwise (unbiased), and the whole rounding is redrawn
until ``‖x̃‖₂ ≤ Δ₂``, the bound of their Theorem 2 / Lemma 25 (see
:func:`.accounting.rounding_norm_bound`): a single rounding exceeds
``√(c² + D/4 + √(2 ln(1/β))·(c + √D/2))`` with probability at most ``β``, and never exceeds
``c + √D``.

**The check is exact (conservative).** The accepted integer vector's squared norm is computed in
float32; the float32 sum of ``D`` nonnegative terms, each squared with one rounding (and
converted with one more when ``|x̃ᵢ| ≥ 2²⁴``), is within a relative ``η = γ_{D+3}`` (``γₖ = k·2⁻²⁴/(1 −
k·2⁻²⁴)``) of the true value for any summation order. A vector is accepted only when the computed
value is at most ``Δ₂²(1 − η)`` (rounded down to float32), so every accepted vector satisfies
``‖x̃‖₂ ≤ Δ₂`` exactly — the sensitivity the accountant uses. :func:`.accounting.rounding_norm_bound`
inflates the paper's bound by ``√((1+η)/(1−η))`` so that the paper's acceptance guarantee
(probability ``≥ 1 − β`` per try for ``‖x‖ ≤ c``) still holds. The price is a sensitivity larger
by ``≈ 1 + η``: ``η = 0.0039`` at ``D = 2¹⁶`` (LeNet-5; +0.8 % noise variance for the same ε),
``0.0625`` at ``D = 2²⁰`` (d = 10⁶; +13 %). An exact integer squared norm (multi-limb uint32
sums) would remove it; it is not implemented.

**Bounded tries.** The retry loop is a ``lax.while_loop`` of at most ``max_tries`` tries. If all
fail (probability ``≤ β^max_tries`` for inputs of norm ``≤ c``; e.g. ``β = 2⁻²⁰``, 4 tries:
``2⁻⁸⁰``) the client releases the **zero vector** (norm 0, so privacy is unaffected; its update
is lost) and ``ok`` is False, which a simulation can count.

The coin ``Bernoulli(x − ⌊x⌋)`` compares 32 random bits with ``⌊(x − ⌊x⌋)·2³²⌋``: the rounding is
unbiased up to ``2⁻³²`` per coordinate (``x − ⌊x⌋`` itself is exact in float32). Inputs must
satisfy ``|xᵢ| < 2³⁰`` (the encoder's granularity check guarantees it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._src.privacy.discrete.accounting import norm_check_threshold
from ldpsim._src.privacy.noise.sampling import random_bits

__all__ = ["randomized_round", "conditional_round"]


def randomized_round(key: jax.Array, x: jax.Array) -> jax.Array:
    """Unbiased randomized rounding of float32 ``x`` to int32 (module docstring)."""
    x = jnp.asarray(x, jnp.float32)
    fl = jnp.floor(x)
    frac = x - fl                                            # exact, in [0, 1)
    thresh = (frac * jnp.float32(2.0**32)).astype(jnp.uint32)  # < 2^32, exact scaling by 2^32
    up = random_bits(key, x.shape) < thresh
    return fl.astype(jnp.int32) + up.astype(jnp.int32)


def conditional_round(key: jax.Array, x: jax.Array, norm_bound: float, *,
                      max_tries: int = 4) -> tuple[jax.Array, jax.Array]:
    """Round ``x`` (last axis: the client's vector) until ``‖x̃‖₂ ≤ norm_bound`` holds exactly.

    ``norm_bound`` is a host float (e.g. :func:`.accounting.rounding_norm_bound`). Returns
    ``(x̃ int32, ok)``; ``ok`` False (every try failed) gives ``x̃ = 0``. Try ``i`` uses
    ``fold_in(key, i)``. Vmap over clients (keys and rows).
    """
    x = jnp.asarray(x, jnp.float32)
    thr = jnp.float32(norm_check_threshold(float(norm_bound), int(x.shape[-1])))

    def body(state):
        i, done, out = state
        v = randomized_round(jax.random.fold_in(key, i), x)
        vf = v.astype(jnp.float32)
        ok = jnp.sum(vf * vf, axis=-1) <= thr
        take = ~done & ok
        out = jnp.where(take[..., None], v, out)
        return i + 1, done | ok, out

    init = (jnp.int32(0), jnp.zeros(x.shape[:-1], bool), jnp.zeros(x.shape, jnp.int32))
    _, done, out = lax.while_loop(
        lambda s: (s[0] < max_tries) & ~jnp.all(s[1]), body, init)
    return out, done
