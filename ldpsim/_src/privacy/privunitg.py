"""PrivUnitG: PrivUnit with a Gaussian in place of the uniform sphere (pure ε-LDP).

Privatize one client's update ``x`` (clipped to ``‖x‖ ≤ C``, flattened to dimension d):

1. Direction ``u = x/‖x‖`` (``e₁`` for ``x = 0``). Draw ``V = α·u + (I − uuᵀ)g`` with
   ``g ~ N(0, I_d)`` and ``α ~ N(0, 1)`` conditioned on ``α ≥ γ`` with probability ``p``, on
   ``α < γ`` otherwise (Asi, Feldman & Talwar 2022, "PrivUnitG"; σ = 1 here: the scale
   cancels in the decoder). ``α`` is drawn exactly by the inverse normal CDF of its
   truncated law.
2. Norm ``r = ‖x‖``: the private scalar randomizer (``r̂ = (C ± B)/2``, ``B = C·coth(ε_r/2)``),
   as in :mod:`ldpsim._src.privacy.privunit2`.

Report ``{"direction": V, "norm": r̂}``; decode ``x̂ = r̂·V/m`` with
``m = E[α] = φ(γ)·(p/q − (1 − p)/(1 − q))``, ``q = Φ̄(γ)``: unbiased. Per-coordinate variance
``E[r̂²]·(E[α²]u_i² + 1 − u_i²)/m² − x_i²`` with ``E[α² | α ≥ γ] = 1 + γφ(γ)/q``; total
``E[r̂²](E[α²] + d − 1)/m² − ‖x‖²``.

Guarantee: the density of ``V`` is the ``N(0, I)`` density times ``p/q`` on the half-space
``⟨v, u⟩ ≥ γ`` and ``(1 − p)/(1 − q)`` off it, so for any two inputs the ratio is at most
``e^{ε_d}``, ``ε_d = logit(p) + logit(1 − q)``; with the norm's ε_r: **pure (ε_d + ε_r)-LDP
for any two inputs in the C ball** (``"replace"``; inputs above C clipped and counted).

Parameters (host, float64): ``q = 1/(1 + e^{ε₁})``, ``γ = −ndtri(q)``, ``p = e^{ε₀}/(1+e^{ε₀})``;
ε₀ (with ε₀ + ε₁ = ε_d) minimises ``(E[α²] + d − 1)/m²`` and ε_r the worst-case total variance
(at ‖x‖ = C), both by 1-D searches on the host; ``norm_epsilon`` fixes ε_r. Any d ≥ 2.
Float32: coins on a 32-bit grid, ``ndtri`` in float32 on ``u·q ≥ 2⁻²³·q``, a normal float32
for ε₁ ≤ 68 (ε₀ ≤ 15, ε_r ≤ 16: ε up to about 99).

References:
    Asi, Feldman & Talwar, "Optimal algorithms for mean estimation under local differential
    privacy", ICML 2022 (arXiv:2205.02466), §3 (PrivUnitG); Bhowmick et al. 2018
    (arXiv:1812.00984) for PrivUnit2 and the separate norm release.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from scipy import special

from ldpsim._src.privacy import randomizer as rz
from ldpsim._src.privacy import sampling
from ldpsim._src.privacy.privunit2 import (
    _direction,
    _mechanism,
    _sigmoid,
    _uniform01,
    best_split,
    split_epsilon,
)
from ldpsim._src.privacy.randomizer import LocalMechanism, Report

NAME = "privunitg"
MIN_DIM = 2


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PrivUnitGParams:
    """PrivUnitG's calibrated numbers (float32 scalars; may be traced) and its dimension."""

    clip: jax.Array
    p: jax.Array          # probability of the half-space α ≥ γ
    p_out: jax.Array      # 1 − p = 1/(1 + e^{ε₀})
    gamma: jax.Array      # threshold on α (in units of σ = 1)
    q: jax.Array          # Φ̄(γ)
    m: jax.Array          # E[α]
    ea2: jax.Array        # E[α²]
    norm_bound: jax.Array
    norm_excess: jax.Array
    dim: int = dataclasses.field(metadata=dict(static=True))


def direction_constants(eps_p: float, eps_cap: float) -> dict:
    """p, q, γ, m = E[α], E[α²] for the split (ε₀, ε₁) (independent of d)."""
    p = _sigmoid(eps_p)
    q = _sigmoid(-eps_cap)
    gamma = -float(special.ndtri(q))
    log_phi = -0.5 * gamma * gamma - 0.5 * math.log(2 * math.pi)
    m = math.exp(log_phi) * (p / q - (1 - p) / (1 - q))
    e_hi = 1.0 + gamma * math.exp(log_phi - math.log(q))
    e_lo = (1.0 - q * e_hi) / (1 - q)
    return dict(p=p, q=q, gamma=gamma, m=m, ea2=p * e_hi + (1 - p) * e_lo)


def constants(*, epsilon: float, dim: int, clip: float = 1.0, norm_epsilon=None) -> dict:
    """Host calibration of PrivUnitG (float64): the ε split and every constant."""
    eps = rz.check_epsilon(epsilon)
    d = rz.check_dim(dim, MIN_DIM, NAME)
    c = rz.check_clip(clip)

    def dir_for(eps_dir):
        def obj(a, b):
            k = direction_constants(a, b)
            return math.log(k["ea2"] + d - 1) - 2 * math.log(k["m"])

        e0, e1 = best_split(eps_dir, obj)
        return e0, e1, direction_constants(e0, e1)

    def worst(er):   # log of E[r̂²](r = C)·E‖V‖²/m²
        k = dir_for(eps - er)[2]
        b = rz.signed_scalar_bound(c, er)
        return math.log((b * b + 3 * c * c) / 4) + math.log(k["ea2"] + d - 1) - 2 * math.log(k["m"])

    er = split_epsilon(eps, norm_epsilon, worst)
    e0, e1, k = dir_for(eps - er)
    bound = rz.signed_scalar_bound(c, er)
    return dict(k, clip=c, dim=d, epsilon=eps, eps_p=e0, eps_cap=e1, eps_norm=er, norm_bound=bound,
                worst_total_variance=(bound ** 2 + 3 * c * c) / 4 * (k["ea2"] + d - 1) / k["m"] ** 2
                - c * c)


def sample_alpha(key: jax.Array, upper: jax.Array, params: PrivUnitGParams) -> jax.Array:
    """``α ~ N(0, 1)`` truncated to ``[γ, ∞)`` (``upper``) or ``(−∞, γ)``, by inverse CDF."""
    u = _uniform01(key)
    q = jnp.asarray(params.q, jnp.float32)
    hi = jnp.maximum(-jax.scipy.special.ndtri(u * q), params.gamma)
    lo = jnp.minimum(jax.scipy.special.ndtri(u * (1.0 - q)), params.gamma)
    return jnp.where(upper, hi, lo)


def privatize(key: jax.Array, update, params: PrivUnitGParams) -> Report:
    """One client's PrivUnitG report ``{"direction": V (float32[d]), "norm": r̂}``."""
    flat, clipped, norm, release_norm, was_clipped, finite, _ = rz.clip_flat(update, params.clip)
    if flat.shape[0] != params.dim:
        raise rz.LdpsimError(f"update has {flat.shape[0]} coordinates; these privunitg params "
                             f"are for dim {params.dim}")
    u, r = _direction(flat)
    r_hat = rz.signed_scalar(rz.subkey(key, rz.TAG_NORM), r, params.clip, params.norm_bound,
                              params.norm_excess)
    upper = ~rz.bernoulli(rz.subkey(key, rz.TAG_CAP), params.p_out)
    alpha = sample_alpha(rz.subkey(key, rz.TAG_ACCEPT), upper, params)
    g = sampling.normal_like(rz.subkey(key, rz.TAG_DIRECTION), flat)
    v = g + (alpha - jnp.vdot(g, u)) * u
    return Report(report={"direction": v, "norm": r_hat}, clipped=clipped, norm=norm,
                  release_norm=release_norm, was_clipped=was_clipped, finite=finite)


def decode(report, params, like=None):
    """Unbiased estimate ``r̂·V/m`` of the clipped update (a pytree like ``like``)."""
    return rz.unravel_like(report["norm"] * report["direction"] / params.m, like)


def mean(params, update):
    """``E[decode] =`` the clipped update (unbiased)."""
    return rz.clip_flat(update, params.clip)[1]


def variance(params, update):
    """Exact per-coordinate variance of :func:`decode` for this update (pytree like it):
    ``E[r̂²]·(E[α²]u_i² + 1 − u_i²)/m² − x_i²``."""
    flat, *_, unravel = rz.clip_flat(update, params.clip)
    u, r = _direction(flat)
    er2 = rz.signed_scalar_second_moment(r, params.clip, params.norm_bound)
    second = params.ea2 * u * u + (1.0 - u * u)
    return unravel(er2 / jnp.square(params.m) * second - flat * flat)


def make(*, epsilon: float, dim: int, clip: float = 1.0, norm_epsilon=None) -> LocalMechanism:
    """PrivUnitG + a private scalar norm, calibrated for pure ε-LDP (module docstring).

    Raises:
        LdpsimError: ε ≤ 0 or non-finite or beyond the float32 range, ``dim`` < 2, clip ≤ 0.
    """
    k = constants(epsilon=epsilon, dim=dim, clip=clip, norm_epsilon=norm_epsilon)
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    params = PrivUnitGParams(clip=f(k["clip"]), p=f(k["p"]), p_out=f(_sigmoid(-k["eps_p"])),
                             gamma=f(k["gamma"]), q=f(k["q"]),
                             m=f(k["m"]), ea2=f(k["ea2"]), norm_bound=f(k["norm_bound"]),
                             norm_excess=f(rz.signed_scalar_excess(k["clip"], k["eps_norm"])),
                             dim=k["dim"])
    return _mechanism(NAME, params, k, privatize, decode, mean, variance)
