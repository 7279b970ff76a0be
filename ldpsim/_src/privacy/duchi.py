"""The L2-ball mechanism of Duchi, Jordan & Wainwright (2018): pure ε-LDP, minimax optimal.

Privatize one client's update ``x`` (clipped to ``‖x‖ ≤ C``, flattened to dimension d ≥ 2):

1. ``X̃ = +C·u`` with probability ``½ + ‖x‖/(2C)``, else ``−C·u`` (``u = x/‖x‖``; ``e₁`` for
   ``x = 0``): ``E X̃ = x``.
2. With probability ``π = e^ε/(e^ε + 1)`` release ``Z`` uniform on the hemisphere
   ``{z: ‖z‖ = B, ⟨z, X̃⟩ > 0}``, otherwise uniform on the opposite hemisphere.

Report: the unit vector ``Z/B``; decode ``Z`` (multiply by B). With
``B = C·(e^ε + 1)/(e^ε − 1)·(d − 1)·B(½, (d−1)/2)/2`` (from ``E[t | t > 0] =
2/((d − 1)B(½, (d−1)/2))`` for ``t = ⟨W, e⟩``, W uniform on the sphere; computed in log space
with ``betaln``, stable at d = 61,706) the decoder is unbiased: ``E Z = x``. Since
``E[ZZᵀ] = B²I/d`` for any hemisphere mixture, the per-coordinate variance is
``B²/d − x_i²`` and the total ``B² − ‖x‖²`` (:func:`variance`).

Guarantee: the output density is ``(2/area)·(a π + (1 − a)(1 − π))`` on one side of the
hyperplane ``⊥u`` and ``(2/area)·(a(1 − π) + (1 − a)π)`` on the other, ``a = ½ + ‖x‖/(2C)``;
every such value lies in ``[(1 − π), π]·2/area``, so for any two inputs in the C ball the
ratio is at most ``π/(1 − π) = e^ε``: **pure ε-LDP, relation "replace"** (inputs above C are
clipped and counted). Float32: both coins on a 32-bit grid (ε ≤ 16).

Reference:
    Duchi, Jordan & Wainwright, "Minimax optimal procedures for locally private
    estimation", JASA 2018 (arXiv:1604.02390), §4.2.3 (privatizing an L2-ball vector).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from scipy import special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import randomizer as rz
from ldpsim._src.privacy import sampling
from ldpsim._src.privacy.privunit2 import _direction
from ldpsim._src.privacy.randomizer import LocalMechanism, Report

NAME = "duchi"
MIN_DIM = 2
MAX_EPSILON = 16.0


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DuchiParams:
    """The mechanism's numbers (float32 scalars; may be traced) and its dimension."""

    clip: jax.Array
    pi: jax.Array      # e^ε/(e^ε + 1)
    pi_out: jax.Array  # 1 − π = 1/(e^ε + 1) (the coin's small side, exact in float32)
    bound: jax.Array   # B, the radius of the output sphere
    dim: int = dataclasses.field(metadata=dict(static=True))


def radius(*, epsilon: float, dim: int, clip: float = 1.0) -> float:
    """``B = C·coth(ε/2)·(d − 1)·B(½, (d−1)/2)/2`` (float64, log space)."""
    d = int(dim)
    log_b = (math.log(clip) - math.log(math.tanh(epsilon / 2.0)) + math.log(d - 1)
             + special.betaln(0.5, (d - 1) / 2.0) - math.log(2.0))
    return math.exp(log_b)


def privatize(key: jax.Array, update, params: DuchiParams) -> Report:
    """One client's report: the unit vector ``Z/B`` (float32[d])."""
    flat, clipped, norm, release_norm, was_clipped, finite, _ = rz.clip_flat(update, params.clip)
    if flat.shape[0] != params.dim:
        raise LdpsimError(f"update has {flat.shape[0]} coordinates; these duchi params are for "
                          f"dim {params.dim}")
    u, r = _direction(flat)
    plus = rz.bernoulli(rz.subkey(key, rz.TAG_NORM), 0.5 + jnp.minimum(r, params.clip) / (2 * params.clip))
    toward = ~rz.bernoulli(rz.subkey(key, rz.TAG_CAP), params.pi_out)
    g = sampling.normal_like(rz.subkey(key, rz.TAG_DIRECTION), flat)
    w = g / jnp.sqrt(jnp.sum(jnp.square(g)))
    side = jnp.where(jnp.vdot(w, u) >= 0, 1.0, -1.0)           # w's side of ⊥u
    want = jnp.where(plus == toward, 1.0, -1.0)                  # the side Z must take
    return Report(report=w * (side * want), clipped=clipped, norm=norm,
                  release_norm=release_norm, was_clipped=was_clipped, finite=finite)


def decode(report, params, like=None):
    """Unbiased estimate ``B·report`` of the clipped update (a pytree like ``like``)."""
    return rz.unravel_like(params.bound * report, like)


def mean(params, update):
    """``E[decode] =`` the clipped update (unbiased)."""
    return rz.clip_flat(update, params.clip)[1]


def variance(params, update):
    """Exact per-coordinate variance ``B²/d − x_i²`` (pytree like ``update``)."""
    flat, *_, unravel = rz.clip_flat(update, params.clip)
    return unravel(jnp.square(params.bound) / params.dim - flat * flat)


def make(*, epsilon: float, dim: int, clip: float = 1.0) -> LocalMechanism:
    """The L2-ball mechanism at pure ε-LDP (module docstring).

    Raises:
        LdpsimError: ε ≤ 0, non-finite or above 16 (float32 coins), ``dim`` < 2, clip ≤ 0.
    """
    eps = rz.check_epsilon(epsilon)
    if eps > MAX_EPSILON:
        raise LdpsimError(f"epsilon must be <= {MAX_EPSILON:g} for duchi (its coin is on a 32-bit "
                          f"grid); got {epsilon!r}")
    d = rz.check_dim(dim, MIN_DIM, NAME)
    c = rz.check_clip(clip)
    b = radius(epsilon=eps, dim=d, clip=c)
    pi = 1.0 / (1.0 + math.exp(-eps))
    params = DuchiParams(clip=jnp.float32(c), pi=jnp.float32(pi),
                         pi_out=jnp.float32(1.0 / (1.0 + math.exp(eps))), bound=jnp.float32(b), dim=d)
    std = math.sqrt((b * b - c * c) / d)

    def dp_event(params):
        return rz.pure_dp_event(eps)

    return LocalMechanism(name=NAME, params=params, neighbours="replace", epsilon=eps, delta=0.0,
                          privatize=privatize, noise_std=lambda params: jnp.float32(std),
                          dp_event=dp_event, decode=decode, mean=mean, variance=variance,
                          additive=False, unbiased=True)
