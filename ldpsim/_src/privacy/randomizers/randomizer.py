"""The types of the local-randomizer interface and the pieces every randomizer shares.

:class:`LocalMechanism` (re-exported by :mod:`ldpsim._src.privacy.randomizers.mechanism`, which holds the
registry) is one object of pure functions per calibrated randomizer:

* ``privatize(key, update, params)`` -- what ONE client releases. Additive-noise randomizers
  (Gaussian, Laplace, clip-only) return a :class:`Privatized` whose ``noisy`` is the release;
  report randomizers (PrivUnit, Duchi et al., SignDS, randomized response) return a
  :class:`Report` whose ``report`` is the message (a unit vector and a sign, an index set, a
  category). Both carry the clipped input and the clipping diagnostics, and both expose
  the message as ``.report`` and ``.noisy``.
* ``decode(report, params, like=None)`` -- the server's estimate of the client's (clipped)
  input from one message: unbiased for every randomizer except SignDS, whose decoder is
  MindSpore's fixed-step reconstruction (``mean`` gives its exact expectation).
* ``mean(params, update)`` / ``variance(params, update)`` -- the exact expectation and the
  exact per-coordinate variance of ``decode(privatize(key, update))`` over the key, for a
  given input (the variance of PrivUnit and Duchi depends on the input's direction and
  norm). :func:`total_variance` sums it.
* ``dp_event(params)`` and ``neighbours``, ``epsilon``, ``delta`` -- the guarantee of one
  release. Pure ε-LDP randomizers without a ``dp_accounting`` event of their own
  (PrivUnit, Duchi et al., SignDS) use :func:`pure_dp_event`: binary randomized response
  at the same ε, which dominates every ε-DP pair (Kairouz, Oh & Viswanath 2015, Thm. 2.1 /
  Murtagh & Vadhan 2016), so accountants compose them tightly for worst-case pairs.

Shared pieces: :func:`clip_flat` (clip one pytree to an L2 ball and flatten it; a
non-finite update becomes the zero substitute), :func:`signed_scalar` (the private scalar
randomizer that PrivUnit uses for the norm), :func:`bernoulli` (a 32-bit exact-threshold
coin), and key derivation by :func:`subkey` (``fold_in`` with a distinct constant per use,
so no two draws of one client share a key).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.noise.sampling import random_bits
from ldpsim._src.privacy.randomizers import clipping

PyTree = Any

__all__ = ["LocalMechanism", "MechanismParams", "Privatized", "Report", "bernoulli",
           "bernoulli_probability", "signed_scalar_epsilon",
           "check_dim", "check_epsilon", "clip_flat", "pure_dp_event", "signed_scalar",
           "signed_scalar_bound", "signed_scalar_excess",
           "signed_scalar_second_moment", "subkey", "total_variance"]


class MechanismParams(NamedTuple):
    """The calibrated numbers of an additive-noise randomizer (float32 scalars; may be traced).

    Attributes:
        clip: the clip bound C (L2, or L1 for Laplace).
        scale: the noise scale per coordinate (Gaussian σ, Laplace b; 0 = no noise).
    """

    clip: jax.Array
    scale: jax.Array

    @classmethod
    def create(cls, *, clip: float, scale: float) -> "MechanismParams":
        return cls(jnp.asarray(clip, jnp.float32), jnp.asarray(scale, jnp.float32))


class Privatized(NamedTuple):
    """What one client's additive-noise randomizer produced (the engine's release type).

    Attributes:
        noisy: what the client sends (its release): ``clipped + noise``.
        clipped: the clean clipped update (the zero substitute for a non-finite update).
            Simulation only: never released.
        noise: the noise that was added (drawn for every client). Simulation only.
        norm: pre-clip norm of the update (L2; L1 for Laplace); NaN/inf if not finite,
            +inf for a finite update whose norm exceeds float32's range. Diagnostic.
        release_norm: the norm of what was clipped: ``norm``, or 0 for the zero substitute
            (what a mechanism releasing a function of the norm must use).
        was_clipped: the clip bound was active (``release_norm > clip``).
        finite: every entry of the update was finite. Diagnostic only.
    """

    noisy: PyTree
    clipped: PyTree
    noise: PyTree
    norm: jax.Array
    release_norm: jax.Array
    was_clipped: jax.Array
    finite: jax.Array

    @property
    def report(self) -> PyTree:
        """The release (same as ``noisy``): the message of the interface."""
        return self.noisy


class Report(NamedTuple):
    """What one client's report randomizer produced (a message that is not input + noise).

    Attributes:
        report: the message the client sends (a pytree of arrays; see each randomizer).
        clipped: the clipped input (zero substitute for a non-finite update). Simulation only.
        norm, release_norm, was_clipped, finite: as in :class:`Privatized` (diagnostics;
            ``was_clipped`` counts the inputs that the clip bound changed).
    """

    report: PyTree
    clipped: PyTree
    norm: jax.Array
    release_norm: jax.Array
    was_clipped: jax.Array
    finite: jax.Array

    @property
    def noisy(self) -> PyTree:
        """The message (same as ``report``), so audits and callers written for
        :class:`Privatized` read every randomizer the same way."""
        return self.report


class LocalMechanism(NamedTuple):
    """A local randomizer: pure functions plus its calibrated parameters.

    Attributes:
        name: registry name (``"gaussian"``, ``"laplace"``, ``"none"``, ``"privunit2"``,
            ``"privunitg"``, ``"duchi"``, ``"signds"``, ``"rr"``).
        params: the calibrated parameters (a pytree of float32 scalars; may be traced).
        neighbours: ``"replace"`` (any two clipped inputs) or ``"add-remove"``.
        epsilon, delta: the per-release guarantee **of the float32 realisation that runs**
            (δ = 0 only for a proven pure DP realisation, ε = inf without noise); never
            stronger than what the samplers deliver.
        privatize: ``(key, update, params) -> Privatized | Report`` for one client.
        noise_std: ``params -> per-coordinate std`` of one client's noise (additive
            randomizers); for a report randomizer, the root mean per-coordinate variance
            of its decoded estimate at the worst-case input of the clip ball, for the theory of
            an aggregate's error.
        dp_event: ``params -> dp_accounting.DpEvent`` of one release (host side).
        decode: ``(report, params, like=None) -> estimate`` of the input (a pytree like
            ``like``; a flat vector without it). Identity for additive randomizers.
        mean: ``(params, update) -> E[decode(privatize(·, update))]`` exactly (the clipped
            update for an unbiased randomizer).
        variance: ``(params, update) -> per-coordinate Var[decode(privatize(·, update))]``
            exactly (a pytree like ``update``).
        additive: the release is ``clipped + independent noise`` (the engine's metrics
            assume this).
        unbiased: ``mean`` is the clipped update.
        tail_mass: η, an upper bound on the probability, per release and over the worst pair
            of inputs, that the float32 realisation produces an output the other input cannot
            produce (bounded sampler tails, direction-dependent supports). 0 only when proven.
        tail_scale: ``s ≥ 1``: on outputs both inputs can produce, the realised densities are
            at most ``s`` times the ideal law's (the realised law is the ideal one restricted
            to the sampler's range and renormalised). With ``dp_event`` (the ideal part), ``k``
            releases satisfy ``δ_k(ε) ≤ 1 − (1 − η)^k + s^k·δ_event,k(ε)``
            (:func:`ldpsim._src.privacy.noise.realised.compose_delta`).
        ideal_epsilon, ideal_delta: the guarantee of the ideal (real-number) law, for
            comparison; None when it equals ``epsilon``/``delta``.
        realisation: one line naming the samplers and the model behind ``epsilon``/``delta``
            (what the float32 code delivers; see docs/privacy_sharp_edges.md).
    """

    name: str
    params: PyTree
    neighbours: str
    epsilon: float
    delta: float
    privatize: Callable[[jax.Array, PyTree, PyTree], Any]
    noise_std: Callable[[PyTree], jax.Array]
    dp_event: Callable[[PyTree], Any]
    decode: Callable[..., PyTree] | None = None
    mean: Callable[[PyTree, PyTree], PyTree] | None = None
    variance: Callable[[PyTree, PyTree], PyTree] | None = None
    additive: bool = True
    unbiased: bool = True
    tail_mass: float = 0.0
    tail_scale: float = 1.0
    ideal_epsilon: float | None = None
    ideal_delta: float | None = None
    realisation: str = ""

    @property
    def decoded_release(self) -> Callable[[jax.Array, PyTree, PyTree], "Privatized"]:
        """``(key, update, params) -> Privatized``: the server's decoded estimate of one
        client's clipped input in the engine's release type (:func:`decoded_release`); what
        the round aggregates. The same function object for the same randomizer functions."""
        return decoded_release(self.privatize, self.decode, self.additive)

    @property
    def mean_variance(self) -> Callable[[PyTree, PyTree], jax.Array]:
        """``(params, update) -> float32``: the mean over coordinates of ``variance``
        (:func:`mean_variance`)."""
        return mean_variance(self.variance)


@functools.cache
def decoded_release(privatize: Callable, decode: Callable | None,
                    additive: bool) -> Callable[[jax.Array, PyTree, PyTree], Privatized]:
    """``(key, update, params) -> Privatized`` of a vector randomizer given by its functions:
    ``noisy = decode(privatize(key, update).report, like=update)`` (the server's per-client
    estimate), ``clipped`` the clipped input, ``noise = noisy − clipped`` (zero-mean for an
    unbiased randomizer; for SignDS it includes the decoder's bias). An additive
    randomizer's ``privatize`` is its own release. Cached: the same functions give the same
    function object (it keys compiled kernels)."""
    if additive:
        return privatize

    def release(key: jax.Array, update: PyTree, params: Any) -> Privatized:
        rep = privatize(key, update, params)
        noisy = decode(rep.report, params, update)
        noisy = jax.tree_util.tree_map(lambda a, b: a.astype(jnp.result_type(b)), noisy, update)
        # The round sums w·clipped and w·noise over the cohort, and 0·NaN is NaN: a randomizer
        # whose `clipped` is its raw input (SignDS releases an order, it clips nothing) would
        # turn one diverged client, even an excluded one (w = 0), into a NaN model. Its
        # input enters the aggregate as the zero substitute, as for every other randomizer.
        clipped = jax.tree_util.tree_map(
            lambda c: jnp.where(rep.finite, c, jnp.zeros_like(c)), rep.clipped)
        noise = jax.tree_util.tree_map(jnp.subtract, noisy, clipped)
        return Privatized(noisy, clipped, noise, rep.norm, rep.release_norm, rep.was_clipped,
                          rep.finite)

    return release


@functools.cache
def mean_variance(variance: Callable) -> Callable[[PyTree, PyTree], jax.Array]:
    """``(params, update) -> float32 scalar``: the mean over coordinates of the exact
    per-coordinate variance ``variance(params, update)`` of a decoded estimate, i.e.
    ``E‖decode(privatize(·, update)) − E[·]‖² / d``. Cached like :func:`decoded_release`."""

    def fn(params: Any, update: PyTree) -> jax.Array:
        var = variance(params, update)
        leaves = jax.tree_util.tree_leaves(var)
        d = sum(int(jnp.size(v)) for v in leaves)
        return sum(jnp.sum(v, dtype=jnp.float32) for v in leaves) / jnp.float32(max(d, 1))

    return fn


def total_variance(mech: LocalMechanism, update: PyTree) -> jax.Array:
    """``E‖decode(privatize(key, update)) − E[·]‖²`` exactly: the sum of ``mech.variance``."""
    var = mech.variance(mech.params, update)
    return sum(jnp.sum(v) for v in jax.tree_util.tree_leaves(var))


# ----------------------------------------------------------------------------------- checks


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """ε as a float if it is > 0 and finite (a clear error naming the value otherwise)."""
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise LdpsimError(f"{name} must be a number > 0, got {epsilon!r}") from None
    if not (eps > 0 and math.isfinite(eps)):
        raise LdpsimError(f"{name} must be > 0 and finite, valid range (0, inf); got {epsilon!r}")
    return eps


def check_dim(dim: Any, minimum: int, mechanism: str, *, name: str = "dim") -> int:
    """The dimension as an int if it is at least ``minimum`` for ``mechanism`` (``name``:
    what the error calls it, e.g. ``"k"`` for a projection dimension)."""
    try:
        d = int(dim)
    except (TypeError, ValueError):
        raise LdpsimError(f"{name} must be an integer, got {dim!r}") from None
    if d != dim or d < minimum:
        raise LdpsimError(f"{name} must be an integer >= {minimum} for {mechanism}; got {dim!r}")
    return d


def check_clip(clip: Any) -> float:
    """The clip bound as a float if it is > 0 and finite."""
    try:
        c = float(clip)
    except (TypeError, ValueError):
        raise LdpsimError(f"clip must be a number > 0, got {clip!r}") from None
    if not (c > 0 and math.isfinite(c)):
        raise LdpsimError(f"clip must be > 0 and finite, valid range (0, inf); got {clip!r}")
    return c


# ------------------------------------------------------------------------------------- keys

#: ``fold_in`` constants of a client's draws (one per use inside a randomizer).
TAG_DIRECTION, TAG_NORM, TAG_CAP, TAG_ACCEPT, TAG_SIGN, TAG_SELECT = 11, 12, 13, 14, 15, 16


def subkey(key: jax.Array, tag: int) -> jax.Array:
    """The key of one use inside a randomizer: ``fold_in(key, tag)`` (distinct tags, so no
    two draws of one client share a key)."""
    return jax.random.fold_in(key, tag)


# -------------------------------------------------------------------------------- pieces


def clip_flat(update: PyTree, clip: jax.typing.ArrayLike):
    """Clip ``update`` to L2 norm ``clip`` and flatten it (float32).

    Returns:
        ``(flat, clipped, norm, release_norm, was_clipped, finite, unravel)``: the clipped
        update as one float32 vector and as a pytree, the pre-clip norm, the norm of what was
        clipped (0 for the zero substitute of a non-finite update), whether the bound was
        active, whether every entry was finite, and the inverse of the flattening.
    """
    clipped, norm, finite = clipping.clip_checked(update, clip)
    release_norm = jnp.where(finite, norm, jnp.zeros_like(norm))
    flat, unravel = ravel_pytree(clipped)
    flat = flat.astype(jnp.float32)
    was_clipped = release_norm > jnp.asarray(clip, norm.dtype)
    return flat, clipped, norm, release_norm, was_clipped, finite, unravel


def axis(dim: int, value: float) -> jax.Array:
    """``value·e₁`` in ``d`` float32 coordinates (the audits' worst-case pairs)."""
    return jnp.zeros((dim,), jnp.float32).at[0].set(np.float32(value))


#: The audits' "zero" norm for PrivUnit: ``x0 = −TINY·C·e₁`` (r ≈ 0 with the direction −e₁;
#: x0 = 0 would take the implementation's fixed direction e₁, the same as x1's, and hide the
#: direction's ε).
AUDIT_TINY = 1e-6


def unravel_like(flat: jax.Array, like: PyTree | None) -> PyTree:
    """``flat`` in the structure of ``like`` (leaf shapes and dtypes), or ``flat`` itself."""
    if like is None:
        return flat
    _, unravel = ravel_pytree(like)
    return unravel(flat)


#: Largest float32 below 2**32 (keeps a 32-bit cut-off in range).
_U32_MAX_F32 = 4294967040.0


def bernoulli(key: jax.Array, prob: jax.typing.ArrayLike) -> jax.Array:
    """True with probability ``prob`` on a 32-bit grid: ``bits < ⌈prob·2³²⌉``.

    The realised probability is ``⌈prob·2³²⌉/2³²`` with ``prob·2³²`` rounded to float32:
    within a relative ``2⁻²³`` of ``prob`` for ``prob ≥ 2⁻³²``.
    """
    p = jnp.clip(jnp.asarray(prob, jnp.float32), 0.0, 1.0)
    cut = jnp.minimum(jnp.ceil(p * np.float32(2.0**32)), _U32_MAX_F32).astype(jnp.uint32)
    bits = random_bits(key, jnp.shape(p))
    return (bits < cut) | (p >= 1.0)


def bernoulli_probability(prob: float) -> float:
    """The probability :func:`bernoulli` realises for ``prob`` (host side, exact):
    ``⌈p·2³²⌉/2³²`` with ``p = float32(clip(prob, 0, 1))`` (``p·2³²`` is exact in float32),
    or 1 for ``p ≥ 1``."""
    p = float(np.float32(min(max(float(prob), 0.0), 1.0)))
    if p >= 1.0:
        return 1.0
    return min(math.ceil(p * 2.0**32), _U32_MAX_F32) / 2.0**32


def signed_scalar_epsilon(clip: float, bound: float, excess: float) -> float:
    """The ε that :func:`signed_scalar` realises in float32 with these (float32) parameters.

    The release has two values; ``P(+B | r)`` is monotone in ``r`` and extreme at ``r = 0``
    and ``r = C``, where the coin drawn is ``excess/(2B)`` computed in float32 (replicated here
    with NumPy float32) and realised by :func:`bernoulli_probability`. The realised ratio is
    ``(1 − s')/s'`` with ``s'`` that realised probability, so ``ε' = log((1 − s')/s')``
    (both values: the release is symmetric in ``r ↦ C − r``).
    """
    f = np.float32
    b, e = f(bound), f(excess)   # the extreme coin does not depend on C
    small = (e + f(2.0) * f(0.0)) / (f(2.0) * b)
    s = bernoulli_probability(float(small))
    if s <= 0.0:
        return math.inf
    return math.log1p(-s) - math.log(s) if s < 0.5 else 0.0


def signed_scalar_bound(clip: float, epsilon: float) -> float:
    """``B = C·(e^ε + 1)/(e^ε − 1)``: the magnitude of :func:`signed_scalar`'s output."""
    return float(clip) / math.tanh(float(epsilon) / 2.0)


def signed_scalar_excess(clip: float, epsilon: float) -> float:
    """``B − C = 2C/(e^ε − 1)``, computed without cancellation (``expm1``)."""
    return 2.0 * float(clip) / math.expm1(float(epsilon))


def signed_scalar(key: jax.Array, r: jax.Array, clip: jax.Array, bound: jax.Array,
                  excess: jax.Array) -> jax.Array:
    """Private unbiased estimate of a scalar ``r ∈ [0, C]`` (Duchi, Jordan & Wainwright 2018,
    §4.2.1, applied to ``2r − C ∈ [−C, C]``).

    Draws ``s = +B`` with probability ``½ + (2r − C)/(2B) = ((B − C) + 2r)/(2B)`` and ``s = −B``
    with ``((B − C) + 2(C − r))/(2B)``, ``B = C(e^ε+1)/(e^ε−1)`` (:func:`signed_scalar_bound`;
    ``excess = B − C`` from :func:`signed_scalar_excess`; the coin is drawn on the smaller
    side, so both probabilities keep their float32 precision at large ε), and releases ``r̂ = (s + C)/2``: ``E r̂ = r``,
    ``Var r̂ = (B² − (2r − C)²)/4`` (:func:`signed_scalar_second_moment`). The probability of
    each output lies in ``[1/(e^ε+1), e^ε/(e^ε+1)]`` for every ``r ∈ [0, C]``, so the ratio
    for any two values is at most ``e^ε``: ε-LDP (replace-one), and exactly ``e^ε`` between
    ``r = 0`` and ``r = C``. ``r`` is clamped to ``[0, C]``.
    """
    r = jnp.clip(r, 0.0, clip)
    # P(+B) = (excess + 2r)/(2B), P(−B) = (excess + 2(C − r))/(2B): the coin is drawn on the
    # smaller side, computed without cancellation, so both stay float32-accurate at large ε
    plus_small = 2.0 * r < clip
    small = jnp.where(plus_small, excess + 2.0 * r, excess + 2.0 * (clip - r)) / (2.0 * bound)
    hit = bernoulli(key, small)
    plus = jnp.where(plus_small, hit, ~hit)
    return (0.5 * (jnp.where(plus, bound, -bound) + clip)).astype(jnp.float32)


def signed_scalar_second_moment(r: jax.Array, clip: jax.Array, bound: jax.Array) -> jax.Array:
    """``E r̂² = (B² − (2r − C)²)/4 + r²`` of :func:`signed_scalar` (r clamped to [0, C])."""
    r = jnp.clip(r, 0.0, clip)
    return 0.25 * (jnp.square(bound) - jnp.square(2.0 * r - clip)) + jnp.square(r)


def pure_dp_event(epsilon: float):
    """A ``dp_accounting`` event for one pure ε-DP release: binary randomized response at ε
    (``RandomizedResponseDpEvent(2/(e^ε+1), 2)``), whose privacy profile dominates that of
    every ε-DP mechanism on every pair (Kairouz, Oh & Viswanath, "The composition theorem for
    differential privacy", ICML 2015, arXiv:1311.0776), so accountants compose it tightly."""
    import dp_accounting

    return dp_accounting.RandomizedResponseDpEvent(
        noise_parameter=2.0 / (math.exp(float(epsilon)) + 1.0), num_buckets=2)
