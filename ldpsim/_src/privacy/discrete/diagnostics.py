"""Diagnostics a deployment of the distributed discrete mechanisms watches (jittable, simulation
side: they read values no real server sees, such as the exact integer sum or the unrounded
vector).

* :func:`wrapped_fraction` (re-exported from :mod:`.modular`): the fraction of coordinates whose
  exact integer sum left ``[−2^(b−1), 2^(b−1))`` and so decoded wrongly; compare with the bound
  :func:`.accounting.wrap_probability`.
* :func:`rounding_stats`: the conditional randomized rounding's bias (mean of ``x̃ − x`` over the
  coordinates; zero in expectation up to 2⁻³² per coordinate, :mod:`.rounding`) and its norm
  inflation ``‖x̃‖₂ / ‖x‖₂`` (at most ``Δ₂ / ‖x‖₂``; Kairouz, Liu & Steinke 2021, §4.1).
* :func:`decoded_error_std`: the root-mean-square error per coordinate of the decoded sum
  against the exact sum of the clipped updates (noise + rounding + any wrap).
* :func:`noise_std_ratio` (host): the decoded sum's noise std per coordinate that the
  mechanism adds (``γ·√(n·σ̂² + n/4)``, the rounding at its worst case ``1/4`` per client and
  coordinate) over the continuous mode's central std — the price of discretisation.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ldpsim._src._checks import check_positive
from ldpsim._src.privacy.discrete.accounting import DiscreteMechanism
from ldpsim._src.privacy.discrete.modular import wrapped_fraction

__all__ = ["wrapped_fraction", "rounding_stats", "decoded_error_std", "noise_std_ratio"]


def rounding_stats(x: jax.Array, rounded: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(bias, inflation)`` of the rounding along the last axis: ``mean(x̃ − x)`` and
    ``‖x̃‖₂ / ‖x‖₂`` (1 where ``x = 0``). ``x``: the scaled, rotated update before rounding
    (float); ``rounded``: the integer vector. Vmap or batch over clients."""
    x = jnp.asarray(x, jnp.float32)
    v = jnp.asarray(rounded).astype(jnp.float32)
    bias = jnp.mean(v - x, axis=-1)
    nx = jnp.sqrt(jnp.sum(x * x, axis=-1))
    nv = jnp.sqrt(jnp.sum(v * v, axis=-1))
    return bias, jnp.where(nx > 0, nv / jnp.where(nx > 0, nx, 1.0), 1.0)


def decoded_error_std(decoded: jax.Array, exact: jax.Array) -> jax.Array:
    """Root-mean-square over coordinates of ``decoded − exact`` (float32 scalar)."""
    e = jnp.asarray(decoded, jnp.float32) - jnp.asarray(exact, jnp.float32)
    return jnp.sqrt(jnp.mean(e * e))


def noise_std_ratio(mech: DiscreteMechanism, continuous_std: float,
                    survivors: int | None = None) -> float:
    """``γ·√(s·σ̂² + s/4) / continuous_std`` for ``s`` survivors (default ``mech.clients``): the
    discrete mechanism's decoded-sum noise std per coordinate (noise realised by the sampler, the
    rounding at its worst-case variance) over the continuous mode's central std."""
    s = mech.clients if survivors is None else int(survivors)
    std = mech.granularity * math.sqrt(s * mech.client_variance + s / 4)
    return std / check_positive("continuous_std", continuous_std)
