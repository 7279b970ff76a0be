"""Randomizers, neighbouring pairs, scores and score supports for the distinguishing game.

A *mechanism* here is any callable ``(key, x) -> output`` (pure, jittable, vmappable over
``key``); a *score* maps one output to a scalar. The factories below wrap ldpsim's own
randomizers in that shape (the full-mechanism path), give their one-dimensional
sufficient-statistic counterparts, and wrap k-ary randomized response
(:func:`ldpsim.privacy.k_randomized_response`, the one implementation). The factories are
memoised on their arguments, so repeated audits of the same mechanism share compiled kernels
(:mod:`ldpsim._src.audit._game` caches kernels per mechanism object).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import LdpsimError, check_choice, check_positive, check_positive_int
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib
from ldpsim._src.privacy.randomizers import rr as rr_lib
from ldpsim._src.privacy import registry
from ldpsim._src.privacy.noise import sampling
from ldpsim._src.privacy.noise.calibration import NEIGHBOURS

PyTree = Any
Mechanism = Callable[[jax.Array, PyTree], PyTree]
Score = Callable[[PyTree], jax.Array]

# k-ary randomized response is the privacy package's canonical one (one implementation).
k_randomized_response = rr_lib.k_randomized_response
RR_TAG = rr_lib.RR_TAG


@functools.lru_cache(maxsize=64)

class Statistic(NamedTuple):
    """One 1-D statistic of a release, or a block of them computed together.

    Attributes:
        name: what it is, for the report (``"direction[0]"``, ``"max of output"``); a tuple of
            names for a block, whose ``fn`` returns one value per name.
        fn: ``release -> scalar`` (a block: ``-> float32[len(name)]``); jittable and hashable,
            so kernels are shared.
        ordered: thresholds make sense (False: only its set of values is tested, e.g. a hash).
    """

    name: str | tuple[str, ...]
    fn: Callable[[PyTree], jax.Array]
    ordered: bool = True


def rr_mechanism(*, k: int, epsilon: float) -> Mechanism:
    """``(key, value) -> k_randomized_response(key, value, k=k, epsilon=epsilon)``."""
    check_positive("epsilon", epsilon)

    def mechanism(key, value):
        return k_randomized_response(key, value, k=k, epsilon=epsilon)

    return mechanism


@functools.lru_cache(maxsize=64)
def rr_score(v0: int, v1: int) -> Score:
    """Score of a randomized-response output for the pair ``(v0, v1)``: +1 at ``v1``, −1 at ``v0``, else 0.

    The likelihood ratio ``P(y | v1)/P(y | v0)`` is ``e^ε``, ``e^{−ε}`` or 1 on these three
    classes, so threshold tests on this score are the Neyman–Pearson tests of the pair.
    Memoised, so audits of the same pair share compiled kernels.
    """

    def score(y):
        return jnp.where(y == v1, 1.0, jnp.where(y == v0, -1.0, 0.0)).astype(jnp.float32)

    return score


@functools.lru_cache(maxsize=64)
def gaussian_mechanism(*, clip: float, stddev: float) -> Mechanism:
    """The real :func:`ldpsim.privacy.gaussian_randomizer` as ``(key, tree) -> noised tree``.

    L2 clip to ``clip``, then ``N(0, stddev² I)`` from the engine's default sampler for the
    key (``"fast"`` for threefry keys).
    """

    def mechanism(key, tree):
        return mechanism_lib.gaussian_randomizer(key, tree, clip=clip, stddev=stddev).noisy

    return mechanism


@functools.lru_cache(maxsize=64)
def laplace_mechanism(*, clip: float, scale: float) -> Mechanism:
    """The real :func:`ldpsim.privacy.laplace_randomizer` as ``(key, tree) -> noised tree``."""

    def mechanism(key, tree):
        return mechanism_lib.laplace_randomizer(key, tree, clip=clip, scale=scale).noisy

    return mechanism


def from_local_mechanism(local: Any) -> Mechanism:
    """Audit a :class:`ldpsim.mechanism.LocalMechanism` (the engine's interface).

    Returns ``(key, tree) -> local.privatize(key, tree, local.params).noisy``: the release
    the engine sends, with the mechanism's own calibrated parameters. Any object with
    ``privatize(key, update, params)`` returning a ``.noisy`` release, and ``params``, works.
    """
    privatize, params = local.privatize, local.params

    def mechanism(key, tree):
        return privatize(key, tree, params).noisy

    return mechanism


@functools.lru_cache(maxsize=64)
def scalar_gaussian(*, clip: float, stddev: float, impl: str | None = None) -> Mechanism:
    """The Gaussian randomizer's sufficient statistic: ``clip(x, −C, C) + stddev·normal(key)``.

    One scalar draw of :func:`ldpsim._src.privacy.noise.sampling.normal` (``impl`` None: the engine's
    default for the key, ``"fast"`` for threefry keys), the very value the full randomizer
    puts on the first coordinate of its first leaf with the same key, so its bounded tails
    are audited too.
    """
    if impl is not None:
        check_choice("impl", impl, sampling.IMPLS)

    def mechanism(key, x):
        z = sampling.normal(key, (), jnp.float32, impl=impl)
        return jnp.clip(jnp.asarray(x, jnp.float32), -clip, clip) + z * np.float32(stddev)

    return mechanism


@functools.lru_cache(maxsize=64)
def scalar_laplace(*, clip: float, scale: float) -> Mechanism:
    """The Laplace randomizer's sufficient statistic: ``clip(x, −C, C) + scale·laplace(key)``.

    One float32 draw of the sampler of :func:`ldpsim.privacy.laplace_noise` for this key
    (Threefry ``"bits"`` for threefry keys, ``jax.random.laplace`` otherwise): the same law as
    any coordinate of the full randomizer's noise, not the same value for the same key.
    """

    def mechanism(key, x):
        z = sampling.laplace(key, (), jnp.float32)
        return jnp.clip(jnp.asarray(x, jnp.float32), -clip, clip) + z * np.float32(scale)

    return mechanism


def identity_score(output: jax.Array) -> jax.Array:
    """The output itself (for scalar mechanisms, whose output is the sufficient statistic)."""
    return jnp.asarray(output, jnp.float32)


def _leaves(template: int | PyTree) -> tuple[list[tuple[int, ...]], Any]:
    if isinstance(template, (int, np.integer)) and not isinstance(template, bool):
        dim = check_positive_int("dim", template)
        return [(dim,)], jax.tree_util.tree_structure(0)
    leaves, treedef = jax.tree_util.tree_flatten(template)
    shapes = [tuple(int(s) for s in jnp.shape(x)) for x in leaves]
    if not shapes or sum(math.prod(s) for s in shapes) < 1:
        raise LdpsimError("template must be a dimension d >= 1 or a pytree with at least one coordinate")
    return shapes, treedef


def worst_case_pair(
    template: int | PyTree, *, clip: float, neighbours: str = "replace", direction: str = "axis"
) -> tuple[PyTree, PyTree]:
    """A worst-case pair of neighbouring clipped updates ``(x0, x1)``.

    Args:
        template: a dimension ``d`` (one float32 leaf of shape ``(d,)``) or a pytree whose
            leaf shapes the pair takes (float32).
        clip: the clip bound C > 0 (L2 for Gaussian, L1 for Laplace: both are met).
        neighbours: ``"replace"``: ``x1 = u``, ``x0 = −u`` with ``‖u‖ = C`` (distance 2C);
            ``"add-remove"``: ``x1 = u``, ``x0 = 0`` (distance C).
        direction: ``"axis"``: ``u = C·e₁`` (first coordinate of the first leaf; the worst
            case for L1 and for a sampler's bounded tails, and the pair whose projection is
            exactly the 1-D game); ``"dense"``: ``u = C·(1, …, 1)/√d`` (L2 only).

    Returns:
        ``(x0, x1)``, pytrees of float32 arrays like ``template``.
    """
    clip = check_positive("clip", clip)
    check_choice("neighbours", neighbours, NEIGHBOURS)
    check_choice("direction", direction, ("axis", "dense"))
    shapes, treedef = _leaves(template)
    total = sum(math.prod(s) for s in shapes)
    flat = np.zeros(total, np.float64)
    if direction == "axis":
        flat[0] = clip
    else:
        flat[:] = clip / math.sqrt(total)
    x1 = _unflatten(flat, shapes, treedef)
    x0 = _unflatten(-flat if neighbours == "replace" else np.zeros_like(flat), shapes, treedef)
    return x0, x1


def _unflatten(flat: np.ndarray, shapes: list[tuple[int, ...]], treedef) -> PyTree:
    out, offset = [], 0
    for s in shapes:
        n = math.prod(s)
        out.append(jnp.asarray(flat[offset:offset + n].reshape(s), jnp.float32))
        offset += n
    return jax.tree_util.tree_unflatten(treedef, out)


def projection_score(x0: PyTree, x1: PyTree) -> Score:
    """Score ``⟨output, v⟩`` with ``v = (x1 − x0)/‖x1 − x0‖₂`` (summed over leaves, float32).

    For additive noise with iid coordinates the part of the output orthogonal to ``v`` has
    the same law under both inputs, so for Gaussian noise the projection is a sufficient
    statistic for the pair (for Laplace noise when ``x1 − x0`` lies along one axis). The
    same ``v`` (same structure and float32 values) returns the same score object, so audits
    of one pair share compiled kernels.
    """
    a = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(x0)]
    b = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(x1)]
    diff = [y - x for x, y in zip(a, b)]
    norm = math.sqrt(sum(float(np.sum(d * d)) for d in diff))
    if not norm > 0:
        raise LdpsimError("x0 and x1 must differ: the projection direction x1 - x0 is zero")
    v = tuple(np.asarray(d / norm, np.float32) for d in diff)
    return _projection(tuple((w.shape, w.tobytes()) for w in v))


@functools.lru_cache(maxsize=64)
def _projection(direction: tuple[tuple[tuple[int, ...], bytes], ...]) -> Score:
    v = [jnp.asarray(np.frombuffer(data, np.float32).reshape(shape)) for shape, data in direction]

    def score(output):
        leaves = jax.tree_util.tree_leaves(output)
        return sum(jnp.vdot(o.astype(jnp.float32).ravel(), w.ravel()) for o, w in zip(leaves, v))

    return score


def scalar_support(x: float, scale: float, bound: float) -> tuple[float, float]:
    """Closed interval holding every value of ``x + scale·z`` for a sampler with ``|z| ≤ bound``.

    Padded by ``1e-6·(|x| + bound·scale)`` for the float32 rounding of the product and sum
    (a few units of 2⁻²⁴ relative).
    """
    reach = bound * scale
    pad = 1e-6 * (abs(x) + reach)
    return (x - reach - pad, x + reach + pad)


# ------------------------------------------------------- report randomizers

#: ldpsim's randomizers beyond additive noise that :func:`ldpsim.audit.audit_report_randomizer`
#: plays (those of :mod:`ldpsim._src.privacy.registry` with an audit game; the list at import).
REPORT_RANDOMIZERS = registry.randomizer_names(audit=True)

#: Default dimension of their full-mechanism game (SignDS: k = ⌊0.01·d⌋ = 2 at d = 200).
REPORT_DIM = {n: registry.randomizer(n).audit_dim for n in REPORT_RANDOMIZERS}


@functools.lru_cache(maxsize=64)
def report_game(name: str, *, epsilon: float, dim: int, clip: float = 1.0) -> tuple:
    """The distinguishing game of a report randomizer at its worst-case pair (replace-one):
    its module's ``audit_game`` (reached through its registry spec).

    Returns ``(mechanism, x0, x1, score, local, what)``: ``mechanism(key, x)`` is the real
    ``privatize(...).report``; ``score`` is the **exact log-likelihood ratio**
    ``log f(report | x1) − log f(report | x0)`` computed from the report (for Duchi et al. the
    projection of the decoded report on e₁, whose sign is that ratio's only information), a
    sufficient statistic of the pair, so threshold tests on it include the Neyman–Pearson
    test; ``local`` the :class:`~ldpsim.mechanism.LocalMechanism`. (The
    projection of the decoded report on ``x1 − x0`` is a weaker score for PrivUnit: it mixes
    the two sides of the cap and the norm's value into one continuous number.)

    Pairs: PrivUnit2/PrivUnitG ``x1 = C·e₁``, ``x0 = −10⁻⁶C·e₁`` (norm C against ≈ 0 and
    opposite directions: both parts of the ε split are exercised; LLR from the cap side of
    ``±V₁`` against γ and the norm's two values); Duchi ``±C·e₁``; SignDS ``x1 = (0, 1, …, d−1)``
    and ``x0`` its reverse (top-k sets disjoint for both signs; LLR
    ``ε·(1[|S∩T_b(x1)| ≥ ν_th] − 1[|S∩T_b(x0)| ≥ ν_th])``).
    """
    check_choice("mechanism", name, registry.randomizer_names(audit=True))
    return registry.randomizer(name).load().audit_game(epsilon=epsilon, dim=dim, clip=clip)


def signds_statistics(params: Any, inputs: dict[str, Any]) -> tuple:
    """Support-mismatch statistics of SignDS reports: for each named input ``x``, the count
    ``|S ∩ T_b(x)|`` of reported indices inside its top-k set for the reported sign ``b``
    (the count ν the sampler draws when the report comes from ``x``; discrete, so every
    count seen under one input and never under the other is a candidate region)."""
    from ldpsim._src.privacy.randomizers import signds

    return tuple(Statistic(n, fn) for n, fn in signds.audit_statistics(params, inputs))


def report_statistics(name: str, *, epsilon: float, dim: int, clip: float = 1.0) -> tuple:
    """Extra support-mismatch statistics of :func:`report_game`'s pair: its module's
    ``audit_statistics`` if it has one (SignDS: the top-k counts of
    :func:`signds_statistics`; the others: none beyond the release's coordinates)."""
    extra = getattr(registry.randomizer(name).load(), "audit_statistics", None)
    if extra is None:
        return ()
    _, x0, x1, _, local, _ = report_game(name, epsilon=epsilon, dim=dim, clip=clip)
    return tuple(Statistic(n, fn) for n, fn in extra(local.params, {"x1": x1, "x0": x0}))
