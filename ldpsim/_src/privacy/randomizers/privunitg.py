"""PrivUnitG: PrivUnit with a Gaussian in place of the uniform sphere (ε-LDP).

Privatize one client's update ``x`` (clipped to ``‖x‖ ≤ C``, flattened to dimension d):

1. Direction ``u = x/‖x‖`` (``e₁`` for ``x = 0``). Draw ``V = α·u + (I − uuᵀ)g`` with
   ``g ~ N(0, I_d)`` and ``α ~ N(0, 1)`` conditioned on ``α ≥ γ`` with probability ``p``, on
   ``α < γ`` otherwise (Asi, Feldman & Talwar 2022, "PrivUnitG"; σ = 1 here: the scale
   cancels in the decoder). ``α`` is drawn by the inverse normal CDF of its truncated law,
   in log space on a 96-bit uniform (:func:`alpha_from_bits`).
2. Norm ``r = ‖x‖``: the private scalar randomizer (``r̂ = (C ± B)/2``, ``B = C·coth(ε_r/2)``),
   as in :mod:`ldpsim._src.privacy.randomizers.privunit2`.

Report ``{"direction": V, "norm": r̂}``; decode ``x̂ = r̂·V/m`` with
``m = E[α] = φ(γ)·(p/q − (1 − p)/(1 − q))``, ``q = Φ̄(γ)``: unbiased. Per-coordinate variance
``E[r̂²]·(E[α²]u_i² + 1 − u_i²)/m² − x_i²`` with ``E[α² | α ≥ γ] = 1 + γφ(γ)/q``; total
``E[r̂²](E[α²] + d − 1)/m² − ‖x‖²``. ``p``, ``q``, γ, ``m`` and ``E[α²]`` in the params are
the realised values (below), so the decoder is unbiased for the law that runs.

Ideal guarantee: the density of ``V`` is the ``N(0, I)`` density times ``p/q`` on the
half-space ``⟨v, u⟩ ≥ γ`` and ``(1 − p)/(1 − q)`` off it, so for any two inputs the ratio is
at most ``e^{ε_d}``, ``ε_d = logit(p) + logit(1 − q)``; with the norm's ε_r: **pure
(ε_d + ε_r)-LDP for any two inputs in the C ball** (``"replace"``; inputs above C clipped and
counted).

Parameters (host, float64): ``q = 1/(1 + e^{ε₁})``, ``γ = −ndtri(q)``, ``p = e^{ε₀}/(1+e^{ε₀})``;
ε₀ (with ε₀ + ε₁ = ε_d) minimises ``(E[α²] + d − 1)/m²`` and ε_r the worst-case total variance
(at ‖x‖ = C), both by 1-D searches on the host; ``norm_epsilon`` fixes ε_r. Any d ≥ 2.

What the float32 realisation delivers (model of :mod:`ldpsim._src.privacy.noise.realised`: each
sampler's transform is exact real maths on its uniforms, whose finite range is kept; the
float32 output grid is the caveat of Mironov 2012):

* Coins exact on the 32-bit grid: the realised ``p`` and the norm's ε come from the float32
  numbers used (:func:`~ldpsim._src.privacy.randomizers.privunit2.realised_coins`).
* ``α``: the cap mass used is ``Q``, the float32 ``q`` (rounded up), and both regions are
  drawn from it, so they meet at ``Φ̄⁻¹(Q)``: the realised law is the truncated normal with
  mass ``Q`` restricted to the image of ``U ∈ [2⁻⁹⁷, 1 − 2⁻⁹⁷]`` (the 96-bit uniform's reach;
  within total variation 2⁻⁹⁶), for any ε₁ ≤ 68 (e.g. α ∈ [−11.34, 11.39] at ε = 2, d = 2).
  (A 24-bit float32 uniform stopped α at ``Φ⁻¹(2⁻²³(1 − q))``, e.g. −5.25 at ε = 2, while the
  direction coordinates of another input went further: an event of probability 0 under one
  input and > 0 under another.)
* ``g`` comes from ``sampling.normal_like(..., impl=DIRECTION_IMPL)``: within total variation
  :data:`~ldpsim._src.privacy.randomizers.privunit2.DIRECTION_TAIL_MASS` per coordinate of N(0, 1).

Against the ideal mechanism at the realised ``p``, ``Q`` and norm coin (exactly ε'-LDP,
``ε' = logit(p) + logit(1 − Q) + ε_r'``) the realisation is **(ε', δ')-LDP**, δ' the smaller
of (:func:`~ldpsim._src.privacy.randomizers.privunit2.realised_guarantee`) the coupling bound
``(1 + e^{ε'})·TV``, ``TV = 2⁻⁹⁶ + 1 − (1 − DIRECTION_TAIL_MASS)^d`` (each input's realised law
is within TV of the ideal one), and the density-ratio bound ``(p/Q)·κ``,
``1 + κ = (1 − 2⁻⁹⁶)⁻¹(1 − DIRECTION_TAIL_MASS)^{−d}`` (α and g are ideal laws restricted to
their reach, so the realised density of V is at most ``1 + κ`` times the ideal one; smaller
by about ``(1 + e^{ε₀})e^{ε_r}``). At d = 2 it is within a factor 4 of the exact δ of the
pairs e₁/e₂ and e₁/−e₁ (tests/privacy/test_realised_privunit.py). :func:`make` prints it.
No bounded sampler gives exact pure ε: with every coordinate of g below some T,
``V = αu + (I − uuᵀ)g`` reaches different sets for different ``u`` (for
``u = (e₁ + e₂)/√2`` the second coordinate exceeds T, for ``u = e₁`` it never does).
Not modelled: the float32 rounding of the transforms (relative ~1e-6).

References:
    Asi, Feldman & Talwar, "Optimal algorithms for mean estimation under local differential
    privacy", ICML 2022 (arXiv:2205.02466), §3 (PrivUnitG); Bhowmick et al. 2018
    (arXiv:1812.00984) for PrivUnit2 and the separate norm release; Mironov, "On
    significance of the least significant bits for differential privacy", CCS 2012.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from scipy import special

from ldpsim._src.privacy.randomizers import privunit2 as p2
from ldpsim._src.privacy.randomizers import randomizer as rz
from ldpsim._src.privacy.noise import sampling
from ldpsim._src.privacy.randomizers.privunit2 import (
    _direction,
    _mechanism,
    _sigmoid,
    best_split,
    split_epsilon,
)
from ldpsim._src.privacy.randomizers.randomizer import LocalMechanism, Report

NAME = "privunitg"
MIN_DIM = 2


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PrivUnitGParams:
    """PrivUnitG's calibrated numbers (float32 scalars; may be traced) and its dimension.

    ``p``, ``q``, ``gamma``, ``m``, ``ea2`` are the realised values (module docstring)."""

    clip: jax.Array
    p: jax.Array          # realised probability of the half-space α ≥ γ
    p_out: jax.Array      # 1 − p ≈ 1/(1 + e^{ε₀}) (the coin's small side, rounded up)
    gamma: jax.Array      # Φ̄⁻¹(q): where the two regions of α meet
    q: jax.Array          # the cap mass the sampler uses
    log_q: jax.Array      # log q
    log_1mq: jax.Array    # log(1 − q)
    m: jax.Array          # E[α]
    ea2: jax.Array        # E[α²]
    norm_bound: jax.Array
    norm_excess: jax.Array
    dim: int = dataclasses.field(metadata=dict(static=True))


def _moments(p: float, q: float) -> dict:
    """γ = Φ̄⁻¹(q), m = E[α] and E[α²] for cap probability p and cap mass q."""
    gamma = -float(special.ndtri(q))
    log_phi = -0.5 * gamma * gamma - 0.5 * math.log(2 * math.pi)
    m = math.exp(log_phi) * (p / q - (1 - p) / (1 - q))
    e_hi = 1.0 + gamma * math.exp(log_phi - math.log(q))
    e_lo = (1.0 - q * e_hi) / (1 - q)
    return dict(p=p, q=q, gamma=gamma, m=m, ea2=p * e_hi + (1 - p) * e_lo)


def direction_constants(eps_p: float, eps_cap: float) -> dict:
    """p, q, γ, m = E[α], E[α²] for the split (ε₀, ε₁) (ideal values; independent of d)."""
    return _moments(_sigmoid(eps_p), _sigmoid(-eps_cap))


def constants(*, epsilon: float, dim: int, clip: float = 1.0, norm_epsilon=None) -> dict:
    """Host calibration of PrivUnitG (float64): the ε split and every constant, then the
    float32 values the sampler uses and the guarantee they realise (:func:`realise`)."""
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
    return realise(dict(k, clip=c, dim=d, epsilon=eps, eps_p=e0, eps_cap=e1, eps_norm=er))


def realise(k: dict, impl: str | None = None) -> dict:
    """The float32 numbers of the sampler for the ideal constants ``k`` and what they
    realise: p, q (the float32 q rounded up), γ = Φ̄⁻¹(q), m, E[α²], ε' and δ' (module
    docstring); ``impl`` is the direction sampler (default ``DIRECTION_IMPL``)."""
    d, c = k["dim"], k["clip"]
    coins = p2.realised_coins(k["eps_p"], c, k["eps_norm"])
    q = p2.f32_up(k["q"])
    mom = _moments(coins["p"], q)
    eps_dir = coins["eps_p_real"] + math.log1p(-q) - math.log(q)
    eps_real = p2.round_up_epsilon(eps_dir + coins["eps_norm_real"])
    tv = p2.UNIFORM_TV + p2.direction_tail_mass(d, impl)
    # realised density / ideal density ≤ 1/((1 − 2⁻⁹⁶)·Z): α restricted to its reach (the
    # lower region loses 2⁻⁹⁶ of its mass, the cap 2⁻⁹⁷), g to the sampler's (mass Z)
    excess = math.expm1(-math.log1p(-p2.UNIFORM_TV) - math.log1p(-p2.direction_tail_mass(d, impl)))
    b = coins["norm_bound"]
    return dict(k, **mom, **{n: coins[n] for n in ("p_out", "norm_bound", "norm_excess")},
                log_q=math.log(q), log_1mq=math.log1p(-q), eps_dir_real=eps_dir,
                eps_norm_real=coins["eps_norm_real"], epsilon_real=eps_real, tv=tv,
                excess=excess,
                delta_real=p2.realised_guarantee(eps_real, tv, cap_weight=coins["p"] / q,
                                                 excess=excess),
                worst_total_variance=(b * b + 3 * c * c) / 4 * (mom["ea2"] + d - 1) / mom["m"] ** 2
                - c * c)


def alpha_from_bits(words: jax.Array, upper: jax.Array, params: PrivUnitGParams) -> jax.Array:
    """``α ~ N(0, 1)`` truncated to ``[γ, ∞)`` (``upper``) or ``(−∞, γ)``, ``γ = Φ̄⁻¹(q)``, by
    the inverse CDF of the 96-bit uniform in three uint32 ``words``, in log space
    (:func:`~ldpsim._src.privacy.randomizers.privunit2.truncated_normal`)."""
    log_u, log_w = p2.uniform_logs(words)
    return p2.truncated_normal(log_u, log_w, upper, params.log_q, params.log_1mq)


def sample_alpha(key: jax.Array, upper: jax.Array, params: PrivUnitGParams) -> jax.Array:
    """:func:`alpha_from_bits` on ``jax.random.bits(key)``."""
    words = sampling.random_bits(key, (p2.UNIFORM_WORDS,))
    return alpha_from_bits(words, upper, params)


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
    g = sampling.normal_like(rz.subkey(key, rz.TAG_DIRECTION), flat, impl=p2.DIRECTION_IMPL)
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
    """PrivUnitG + a private scalar norm, calibrated to ideal pure ε-LDP; prints the
    (ε', δ') its float32 realisation delivers (module docstring).

    Raises:
        LdpsimError: ε ≤ 0 or non-finite or beyond the float32 range, ``dim`` < 2, clip ≤ 0.
    """
    k = constants(epsilon=epsilon, dim=dim, clip=clip, norm_epsilon=norm_epsilon)
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    params = PrivUnitGParams(clip=f(k["clip"]), p=f(k["p"]), p_out=f(k["p_out"]),
                             gamma=f(k["gamma"]), q=f(k["q"]), log_q=f(k["log_q"]),
                             log_1mq=f(k["log_1mq"]), m=f(k["m"]), ea2=f(k["ea2"]),
                             norm_bound=f(k["norm_bound"]), norm_excess=f(k["norm_excess"]),
                             dim=k["dim"])
    line = (f"float32 PrivUnitG: alpha by a log-space inverse CDF on a 96-bit uniform (TV 2^-96), "
            f"g from sampling '{p2.DIRECTION_IMPL}' "
            f"(TV {p2.DIRECTION_TAIL_MASS[p2.DIRECTION_IMPL]:.2g}/coordinate), 32-bit coins; "
            f"(eps', delta') against the ideal law at the realised p, q: delta' = "
            f"min((1 + e^eps')*TV, (p/q)*kappa), TV = {k['tv']:.3g}, kappa = {k['excess']:.3g}; "
            f"float32 arithmetic and output grid idealised (Mironov 2012)")
    return _mechanism(NAME, params, k, privatize, decode, mean, variance, line)


def audit_game(*, epsilon: float, dim: int, clip: float = 1.0) -> tuple:
    """PrivUnitG's distinguishing game at its worst-case pair
    (:func:`ldpsim._src.privacy.randomizers.privunit2.privunit_audit_game`; the cap probability of a
    Gaussian direction's coordinate, ``P(Z ≥ γ)``)."""
    from scipy import stats

    local = make(epsilon=epsilon, dim=dim, clip=clip)
    q = float(stats.norm.sf(float(local.params.gamma)))
    return p2.privunit_audit_game(local, q, dim, clip)
