"""Noise placed at the aggregate: central DP-FedAvg, distributed DP, exact aggregate noise.

All functions are pure and jittable; noise scales are traced scalars.

* :func:`central_gaussian_mean` — DP-FedAvg with the fixed-denominator estimator
  (McMahan, Ramage, Talwar & Zhang, ICLR 2018, arXiv:1710.06963, Alg. 1, f̃_f) as TFF
  ``DifferentiallyPrivateFactory.gaussian_fixed``: the server sums the
  per-client clipped updates (each ‖u_i‖₂ ≤ C), adds ONE draw ``N(0, (zC)² I)`` to the
  sum and divides by the fixed ``m`` (not the realised cohort size), so the sum has
  add/remove-one-user L2 sensitivity C and one round is the Gaussian mechanism with
  noise multiplier z (amplified by sampling; accounted by
  :func:`ldpsim.privacy.dpfedavg_epsilon`).
* :func:`distributed_client_stddev` / :func:`distributed_shortfall` — distributed DP
 : each of n expected clients adds ``N(0, σ²/n)`` so the (securely
  aggregated) sum carries ``N(0, σ²)``; if only m clients survive, the sum carries
  ``m σ²/n`` — the noise *shortfall* that weakens the guarantee to multiplier
  ``z·√(m/n)``.
* :func:`aggregate_gaussian_noise` — the sum of n independent ``w_i·N(0, σ² I)`` draws is
  exactly ``N(0, Σw_i² σ² I)`` in distribution, so one d-dimensional draw replaces n.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src.privacy.noise.mechanisms import gaussian_noise

PyTree = Any

__all__ = ["DistributedShortfall", "aggregate_gaussian_noise", "central_gaussian_mean",
           "central_noise_stddev", "distributed_client_stddev", "distributed_shortfall"]


def central_noise_stddev(noise_multiplier: jax.typing.ArrayLike,
                         clip: jax.typing.ArrayLike) -> jax.Array:
    """Per-coordinate std ``z·C`` of the noise on the SUM of clipped updates."""
    return jnp.asarray(noise_multiplier, jnp.float32) * jnp.asarray(clip, jnp.float32)


def central_gaussian_mean(key: jax.Array, clipped_sum: PyTree, *,
                          noise_multiplier: jax.typing.ArrayLike, clip: jax.typing.ArrayLike,
                          denominator: jax.typing.ArrayLike) -> tuple[PyTree, PyTree]:
    """DP-FedAvg fixed-denominator release ``(Σ_i clip(u_i) + N(0, (zC)² I)) / m``.

    Args:
        key: the server's noise key for this round.
        clipped_sum: ``Σ_i clip(u_i, C)`` (a pytree; each term of L2 norm ≤ C).
        noise_multiplier: z ≥ 0 (traced).
        clip: C (traced).
        denominator: the fixed m (expected clients per round), not the realised count.

    Returns:
        ``(noisy_mean, noise_mean)``: the released mean and its noise part ``ξ/m``.
    """
    noise = gaussian_noise(key, clipped_sum, central_noise_stddev(noise_multiplier, clip))
    inv = 1.0 / jnp.asarray(denominator, jnp.float32)
    noise_mean = jax.tree_util.tree_map(lambda z: z * inv.astype(z.dtype), noise)
    mean = jax.tree_util.tree_map(lambda s, z: s * inv.astype(s.dtype) + z, clipped_sum,
                                  noise_mean)
    return mean, noise_mean


def distributed_client_stddev(central_stddev: jax.typing.ArrayLike,
                              expected_clients: jax.typing.ArrayLike) -> jax.Array:
    """Per-client std ``σ/√n`` so that n clients' noise sums to ``N(0, σ²)``.

    (TFF ``DistributedDpSumFactory``: ``local_stddev = central_stddev / √n``.)
    """
    return (jnp.asarray(central_stddev, jnp.float32)
            / jnp.sqrt(jnp.asarray(expected_clients, jnp.float32)))


class DistributedShortfall(NamedTuple):
    """Noise actually on the sum when only ``survivors`` of ``expected`` clients report.

    Attributes:
        variance: ``m σ²/n``, the per-coordinate noise variance on the sum.
        target_variance: ``σ²``, what the privacy analysis assumed.
        fraction: ``m/n`` (1 = no shortfall).
        effective_noise_multiplier: ``z·√(m/n)``, the multiplier the sum really has.
    """

    variance: jax.Array
    target_variance: jax.Array
    fraction: jax.Array
    effective_noise_multiplier: jax.Array


def distributed_shortfall(central_stddev: jax.typing.ArrayLike,
                          expected_clients: jax.typing.ArrayLike,
                          survivors: jax.typing.ArrayLike,
                          clip: jax.typing.ArrayLike = 1.0) -> DistributedShortfall:
    """The dropout shortfall of distributed DP.

    Args:
        central_stddev: σ, the std the sum should carry (σ = zC).
        expected_clients: n, the denominator each client used (σ/√n each).
        survivors: m ≤ n, clients whose noisy update reached the aggregate.
        clip: C, to express the result as a noise multiplier.
    """
    s2 = jnp.square(jnp.asarray(central_stddev, jnp.float32))
    frac = jnp.asarray(survivors, jnp.float32) / jnp.asarray(expected_clients, jnp.float32)
    var = frac * s2
    z = jnp.sqrt(var) / jnp.asarray(clip, jnp.float32)
    return DistributedShortfall(var, s2, frac, z)


def aggregate_gaussian_noise(key: jax.Array, tree: PyTree, stddev: jax.typing.ArrayLike,
                             weight_sq_sum: jax.typing.ArrayLike) -> PyTree:
    """One draw distributed exactly as ``Σ_i w_i ξ_i`` with ``ξ_i`` iid ``N(0, σ² I)``.

    ``Σ_i w_i ξ_i ~ N(0, (Σ_i w_i²) σ² I)`` (sum of independent Gaussians), so a single
    d-dimensional draw with std ``σ·√(Σw²)`` replaces n draws: memory and time O(d),
    not O(n·d). Only the distribution is reproduced (not the individual ``ξ_i``).
    """
    std = (jnp.asarray(stddev, jnp.float32)
           * jnp.sqrt(jnp.asarray(weight_sq_sum, jnp.float32)))
    return gaussian_noise(key, tree, std)
