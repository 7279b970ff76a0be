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
clipped and counted).

What runs (exact): ``W`` is drawn from ``normal_like`` and normalised in float32, and the
release is ``z = W·side(W)·want`` with ``side(W) = ±1`` the float32 sign of ``⟨W, u⟩`` and
``want = ±1`` from the two coins. So, whatever the law ``f`` of the float32 vector ``W`` and
however ``side`` rounds, ``P(z) = f(z)·P(want = side(z)) + f(−z)·P(want = −side(−z))``, and
``P(want = ±1) = a(1 − ρ) + (1 − a)ρ`` or its complement lies in ``[ρ, 1 − ρ]`` for every
realised ``a`` of the first coin, where ``ρ`` is the realised probability of the "away" coin:
``P(z | x) ∈ [ρ, 1 − ρ]·(f(z) + f(−z))`` with ``f(z) + f(−z)`` independent of ``x``. The away
coin is ``U < c`` for a uniform ``32W``-bit integer (``W ≥ 2`` words) and an integer cut
computed on the host in exact arithmetic (:func:`away_cut`): ``c = ⌈2^{32W}/(e^{ε_t} + 1)⌉``,
``ε_t = ε(1 − 2⁻⁴⁴)``, raised until ``(2^{32W} − c)/c ≤ e^{ε_t}`` is proven. So the discrete
float32 law itself is **pure ε'-LDP with ε' = ln((2^{32W} − c)/c) ≤ ε**, exactly (no sampler
model beyond uniform Threefry bits, no output-grid caveat): ε is printed, ε' is in
``realisation`` (:func:`realised_epsilon`). Any ε ≤ :data:`MAX_EPSILON` is realised.

``noise_std`` is the root mean per-coordinate variance at the worst input over the ball:
the total ``B² − ‖x‖²`` is largest at ``x = 0``, so ``B/√d``.

Reference:
    Duchi, Jordan & Wainwright, "Minimax optimal procedures for locally private
    estimation", JASA 2018 (arXiv:1604.02390), §4.2.3 (privatizing an L2-ball vector).
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
from scipy import special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.randomizers import randomizer as rz
from ldpsim._src.privacy.randomizers import rr
from ldpsim._src.privacy.noise import sampling
from ldpsim._src.privacy.randomizers.privunit2 import _direction
from ldpsim._src.privacy.randomizers.randomizer import LocalMechanism, Report

NAME = "duchi"
MIN_DIM = 2
#: Largest ε (the coin's cut 2^{32W}/(e^ε + 1) then needs 34 words).
MAX_EPSILON = 700.0


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DuchiParams:
    """The mechanism's numbers (float32 scalars; may be traced) and its dimension."""

    clip: jax.Array
    pi: jax.Array      # the realised π' = 1 − ρ (float32, for reference)
    pi_out: jax.Array  # the realised ρ = c/2^{32W}, the "away" coin (float32, for reference)
    cut: jax.Array     # uint32[W]: the away coin is U < c (most significant word first)
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
    bits = sampling.random_bits(rz.subkey(key, rz.TAG_CAP), params.cut.shape)
    toward = ~rr.below(bits, params.cut)
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


@functools.lru_cache(maxsize=256)
def away_cut(epsilon: float) -> tuple[int, int]:
    """``(c, W)``: the "away" coin is ``U < c`` for a uniform ``32W``-bit ``U``; ``c`` is the
    smallest integer with ``(2^{32W} − c)/c ≤ e^{ε(1 − 2⁻⁴⁴)}`` proven, ``W ≥ 2`` words with
    ``c ≥ 2⁶⁴``."""
    eps = float(epsilon) * (1.0 - rr.TARGET_MARGIN)
    bits = (eps + math.log1p(math.exp(-eps))) / math.log(2.0)          # log2(e^ε + 1)
    n = max(2, math.ceil((bits + 64 + max(0.0, -math.log2(eps))) / 32))
    m = 1 << (32 * n)
    ctx = decimal.Context(prec=10 * n + 40, Emin=-999_999, Emax=999_999)
    c = int(ctx.divide(decimal.Decimal(m), ctx.add(ctx.exp(decimal.Decimal(eps)), 1))
            .to_integral_value(rounding=decimal.ROUND_CEILING))
    c = max(c, 1)
    while not rr.ratio_within(m - c, c, eps):
        c += 1
    return c, n


def realised_epsilon(epsilon: float) -> float:
    """The ε' of the float32 law (module docstring): a float at least ``ln((2^{32W} − c)/c)``,
    within a few ulps of it."""
    c, n = away_cut(float(epsilon))
    return rr.log_ratio_upper((1 << (32 * n)) - c, c)


def make(*, epsilon: float, dim: int, clip: float = 1.0) -> LocalMechanism:
    """The L2-ball mechanism at pure ε-LDP (module docstring).

    Raises:
        LdpsimError: ε ≤ 0, non-finite or above :data:`MAX_EPSILON`, ``dim`` < 2, clip ≤ 0.
    """
    eps = rz.check_epsilon(epsilon)
    if eps > MAX_EPSILON:
        raise LdpsimError(f"epsilon must be <= {MAX_EPSILON:g} for duchi (its coin's cut "
                          f"2^(32W)/(e^eps + 1) would need more than 34 words); got {epsilon!r}")
    d = rz.check_dim(dim, MIN_DIM, NAME)
    c = rz.check_clip(clip)
    b = radius(epsilon=eps, dim=d, clip=c)
    cut, n = away_cut(eps)
    m = 1 << (32 * n)
    rho = Fraction(cut, m)
    params = DuchiParams(clip=jnp.float32(c), pi=jnp.float32(float(1 - rho)),
                         pi_out=jnp.float32(float(rho)), cut=jnp.asarray(rr.words_of(cut, n)),
                         bound=jnp.float32(b), dim=d)
    exact = rr.log_ratio_upper(m - cut, cut)
    eps_r = rr.log_ratio_epsilon(m - cut, cut, eps)
    std = b / math.sqrt(d)       # worst input over the ball: x = 0 (total variance B²)

    def dp_event(params):
        return rz.pure_dp_event(eps_r)

    line = (f"away coin: a {32 * n}-bit Threefry integer < c (exact host cut), direction "
            f"folded by a float32 side test: the float32 law is exactly eps'-LDP, eps' = "
            f"ln((2^{32 * n} - c)/c) = {exact:.17g} <= eps (Threefry bits modelled as uniform)")
    return LocalMechanism(name=NAME, params=params, neighbours="replace", epsilon=eps_r, delta=0.0,
                          privatize=privatize, noise_std=lambda params: jnp.float32(std),
                          dp_event=dp_event, decode=decode, mean=mean, variance=variance,
                          additive=False, unbiased=True, tail_mass=0.0, tail_scale=1.0,
                          ideal_epsilon=eps, ideal_delta=0.0, realisation=line)


def audit_game(*, epsilon: float, dim: int, clip: float = 1.0) -> tuple:
    """The distinguishing game of Duchi et al.'s randomizer at ``±C·e₁``, scored by the sign of
    the decoded report's projection on e₁ (the likelihood ratio's only input); as
    :func:`ldpsim.audit.report_game`."""
    local = make(epsilon=epsilon, dim=dim, clip=clip)
    params = local.params

    def mech(key, x):
        return local.privatize(key, x, params).report

    x1, x0 = rz.axis(dim, clip), rz.axis(dim, -clip)

    def score(report):
        return jnp.sign(report[0]).astype(jnp.float32)

    what = "the sign of the decoded report's projection on e1 (the likelihood ratio)"
    return mech, x0, x1, score, local, what
