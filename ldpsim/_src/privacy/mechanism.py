"""A local randomizer as one object of pure functions (the optax pattern).

A :class:`LocalMechanism` is built by a factory that calibrates it on the host
(:func:`gaussian`, :func:`laplace`, :func:`clip_only`) and carries everything the rest of
ldpsim needs about it, so that callers never branch on a mechanism's name:

* ``params`` -- the calibrated numbers (:class:`MechanismParams`: clip bound and noise
  scale). Every function below takes them as an argument, so they may be traced: a
  jitted round called with the params of another ε reuses its compiled program, and a
  sweep may vmap over them.
* ``privatize(key, update, params) -> Privatized`` -- what ONE client releases (vmap it over
  a cohort). Clip, substitute the zero update for a non-finite one, add noise.
* ``noise_std(params)`` -- per-coordinate standard deviation of one client's noise (σ for
  Gaussian, √2·b for Laplace). The aggregate's noise theory (ALGORITHMS §5) needs nothing
  else: a weighted mean of n releases has per-coordinate noise variance
  ``noise_std² · Σw²/(Σw)²`` (:func:`mean_noise_variance`).
* ``dp_event(params)`` -- the host-side accounting of one release: a ``dp_accounting``
  event whose noise multiplier is relative to the sensitivity of the stated relation
  (:attr:`LocalMechanism.neighbours`), ready for ``dp_accounting`` accountants under
  add/remove composition of independent releases.

Guarantees: with the factory's calibration, one release of :func:`gaussian` is
(ε, δ)-LDP and one of :func:`laplace` is ε-LDP for the stated relation, for ideal noise;
ldpsim's float32 samplers have bounded tails that put a floor under δ
(:func:`ldpsim._src.privacy.calibration.sampler_delta_floor`; docs/privacy_sharp_edges.md).

Adding a local randomizer is one factory in this module (or in its own module) and one
:data:`REGISTRY` entry; the engine's client step (:func:`ldpsim._src.fl.privatize.privatize`)
reaches it through the registry.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src._checks import LdpsimError, check_choice
from ldpsim._src.privacy import calibration, clipping, mechanisms

PyTree = Any

__all__ = ["REGISTRY", "LocalMechanism", "MechanismParams", "Privatized", "clip_only",
           "gaussian", "gaussian_randomizer", "laplace", "laplace_randomizer", "make",
           "mean_noise_variance", "noise_std_factor", "privatize_fn"]


class MechanismParams(NamedTuple):
    """The calibrated numbers of a local randomizer (float32 scalars; may be traced).

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
    """What one client's randomizer produced (the one release type of ldpsim).

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


class LocalMechanism(NamedTuple):
    """A local randomizer: pure functions plus its calibrated parameters.

    Attributes:
        name: registry name (``"gaussian"``, ``"laplace"``, ``"none"``).
        params: the calibrated :class:`MechanismParams`.
        neighbours: ``"replace"`` (sensitivity 2C) or ``"add-remove"`` (C).
        epsilon, delta: the per-release guarantee it was calibrated for (δ = 0 for pure
            DP, ε = inf without noise).
        privatize: ``(key, update, params) -> Privatized`` for one client.
        noise_std: ``params -> per-coordinate std`` of one client's noise.
        dp_event: ``params -> dp_accounting.DpEvent`` of one release (host side).
    """

    name: str
    params: MechanismParams
    neighbours: str
    epsilon: float
    delta: float
    privatize: Callable[[jax.Array, PyTree, MechanismParams], Privatized]
    noise_std: Callable[[MechanismParams], jax.Array]
    dp_event: Callable[[MechanismParams], Any]


def _finite(tree: PyTree) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves] or [jnp.bool_(True)]))


def _additive(clip_fn: Callable, noise_fn: Callable | None) -> Callable:
    """``privatize`` of an additive-noise randomizer: clip, zero substitute, add noise."""

    def privatize(key: jax.Array, update: PyTree, params: MechanismParams) -> Privatized:
        clipped, norm = clip_fn(update, params.clip)
        finite = _finite(update)
        release_norm = jnp.where(finite, norm, jnp.zeros_like(norm))
        if noise_fn is None:   # no noise is drawn at all (ε = inf); clipping still applies
            noise = jax.tree_util.tree_map(jnp.zeros_like, clipped)
        else:
            noise = noise_fn(key, clipped, params.scale)
        noisy = jax.tree_util.tree_map(jnp.add, clipped, noise)
        was_clipped = release_norm > jnp.asarray(params.clip, norm.dtype)
        return Privatized(noisy, clipped, noise, norm, release_norm, was_clipped, finite)

    return privatize


def _gaussian_noise(key, tree, scale):
    return mechanisms.gaussian_noise(key, tree, scale)


def _laplace_noise(key, tree, scale):
    return mechanisms.laplace_noise(key, tree, scale)


def _sensitivity(params: MechanismParams, neighbours: str) -> float:
    return calibration.sensitivity(float(params.clip), neighbours)


def gaussian(*, epsilon: float, delta: float, clip: float, neighbours: str = "replace",
             method: str = "analytic") -> LocalMechanism:
    """Gaussian local randomizer: L2-clip to C, add N(0, σ² I), σ calibrated for (ε, δ).

    Args:
        epsilon: per-release ε > 0 (``inf``: :func:`clip_only`).
        delta: δ in (0, 1).
        clip: the L2 clip bound C > 0.
        neighbours: ``"replace"`` (Δ = 2C, default) or ``"add-remove"`` (Δ = C).
        method: ``"analytic"`` (exact, Balle & Wang 2018), ``"classic"`` or ``"mindspore"``
            (:func:`ldpsim._src.privacy.calibration.calibrate`).

    Returns:
        A :class:`LocalMechanism`. Its ``dp_event`` is ``GaussianDpEvent(σ/Δ)``.

    References:
        Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy",
        ICML 2018 (arXiv:1805.06530).
    """
    if math.isinf(float(epsilon)):
        return clip_only(clip=clip, neighbours=neighbours)
    cal = calibration.calibrate("gaussian", epsilon=epsilon, delta=delta, clip=clip,
                                neighbours=neighbours, method=method)

    def dp_event(params: MechanismParams):
        import dp_accounting

        return dp_accounting.GaussianDpEvent(float(params.scale)
                                             / _sensitivity(params, neighbours))

    return LocalMechanism(
        name="gaussian", params=MechanismParams.create(clip=cal.clip, scale=cal.sigma),
        neighbours=neighbours, epsilon=cal.epsilon, delta=cal.delta,
        privatize=_additive(clipping.clip_by_global_norm, _gaussian_noise),
        noise_std=lambda params: params.scale, dp_event=dp_event)


def laplace(*, epsilon: float, clip: float, neighbours: str = "replace") -> LocalMechanism:
    """Laplace local randomizer: L1-clip to C, add Lap(b) per coordinate, b = Δ₁/ε.

    ε-LDP for the stated relation with ideal noise (Dwork & Roth 2014, Thm. 3.6); float32
    Laplace noise is bounded, so pure DP does not hold exactly (docs/privacy_sharp_edges.md).
    Its ``dp_event`` is ``LaplaceDpEvent(b/Δ₁)``.
    """
    if math.isinf(float(epsilon)):
        return clip_only(clip=clip, neighbours=neighbours, norm="l1")
    cal = calibration.calibrate("laplace", epsilon=epsilon, clip=clip, neighbours=neighbours)

    def dp_event(params: MechanismParams):
        import dp_accounting

        return dp_accounting.LaplaceDpEvent(float(params.scale)
                                            / _sensitivity(params, neighbours))

    return LocalMechanism(
        name="laplace", params=MechanismParams.create(clip=cal.clip, scale=cal.scale),
        neighbours=neighbours, epsilon=cal.epsilon, delta=0.0,
        privatize=_additive(clipping.clip_by_l1_norm, _laplace_noise),
        noise_std=lambda params: math.sqrt(2.0) * params.scale, dp_event=dp_event)


def clip_only(*, clip: float, neighbours: str = "replace", norm: str = "l2") -> LocalMechanism:
    """Clipping without noise (ε = inf): the non-private baseline of a sweep."""
    check_choice("norm", norm, ("l2", "l1"))
    clip_fn = clipping.clip_by_global_norm if norm == "l2" else clipping.clip_by_l1_norm

    def dp_event(params: MechanismParams):
        import dp_accounting

        return dp_accounting.NonPrivateDpEvent()

    return LocalMechanism(
        name="none", params=MechanismParams.create(clip=clip, scale=0.0),
        neighbours=neighbours, epsilon=math.inf, delta=0.0,
        privatize=_additive(clip_fn, None),
        noise_std=lambda params: jnp.zeros_like(jnp.asarray(params.scale)), dp_event=dp_event)


#: name -> factory. The engine reaches a mechanism's functions through this table only.
REGISTRY: dict[str, Callable[..., LocalMechanism]] = {
    "gaussian": gaussian,
    "laplace": laplace,
    "none": clip_only,
}


def make(name: str, **kwargs: Any) -> LocalMechanism:
    """The registered mechanism ``name`` calibrated with ``kwargs`` (see each factory).

    Raises:
        LdpsimError: unknown name (the message lists the registered ones).
    """
    if name not in REGISTRY:
        raise LdpsimError(f"mechanism must be one of {', '.join(REGISTRY)}; got {name!r}")
    return REGISTRY[name](**kwargs)


def privatize_fn(name: str) -> Callable[[jax.Array, PyTree, MechanismParams], Privatized]:
    """The ``privatize`` of the registered mechanism ``name``, independent of calibration
    (its ``params`` are an argument), for kernels compiled once per mechanism."""
    if name not in _PRIVATIZE:
        raise LdpsimError(f"mechanism must be one of {', '.join(_PRIVATIZE)}; got {name!r}")
    return _PRIVATIZE[name]


def noise_std_factor(name: str) -> float:
    """Per-coordinate noise std per unit of ``params.scale``: 1 (Gaussian), √2 (Laplace),
    0 (none)."""
    if name not in _STD_FACTOR:
        raise LdpsimError(f"mechanism must be one of {', '.join(_STD_FACTOR)}; got {name!r}")
    return _STD_FACTOR[name]


_PRIVATIZE = {
    "gaussian": _additive(clipping.clip_by_global_norm, _gaussian_noise),
    "laplace": _additive(clipping.clip_by_l1_norm, _laplace_noise),
    "none": _additive(clipping.clip_by_global_norm, None),
}
_STD_FACTOR = {"gaussian": 1.0, "laplace": math.sqrt(2.0), "none": 0.0}


def mean_noise_variance(noise_std: jax.typing.ArrayLike, weight_sum: jax.typing.ArrayLike,
                        weight_sq_sum: jax.typing.ArrayLike) -> jax.Array:
    """Per-coordinate variance of the noise of a weighted mean of independent releases:
    ``noise_std² · Σw² / (Σw)²`` = ``noise_std² / n_eff`` (ALGORITHMS §5.2)."""
    w = jnp.asarray(weight_sum, jnp.float32)
    return jnp.square(jnp.asarray(noise_std, jnp.float32)) * jnp.asarray(
        weight_sq_sum, jnp.float32) / jnp.where(w > 0, w * w, 1.0)


def gaussian_randomizer(key: jax.Array, tree: PyTree, *, clip: jax.typing.ArrayLike,
                        stddev: jax.typing.ArrayLike) -> Privatized:
    """Gaussian local randomizer on one pytree: L2-clip to ``clip``, add N(0, stddev² I).

    The engine's own client step (the ``"gaussian"`` entry of :data:`REGISTRY`), with the
    arguments checked. (ε, δ)-LDP when ``stddev`` is calibrated for
    ``sensitivity(clip, neighbours)`` (:func:`ldpsim._src.privacy.calibration.calibrate`, or
    the :func:`gaussian` factory, which does both).

    Raises:
        LdpsimError: a concrete ``clip`` ≤ 0 or NaN, or a concrete ``stddev`` < 0, NaN
            or inf. Traced arguments (under ``jit``/``vmap``) are not checked.
    """
    mechanisms._check_clip(clip)
    mechanisms._check_scale("stddev", stddev)
    return _PRIVATIZE["gaussian"](key, tree, MechanismParams(clip, stddev))


def laplace_randomizer(key: jax.Array, tree: PyTree, *, clip: jax.typing.ArrayLike,
                       scale: jax.typing.ArrayLike) -> Privatized:
    """Laplace local randomizer on one pytree: L1-clip to ``clip``, add Lap(scale) per
    coordinate (the ``"laplace"`` entry of :data:`REGISTRY`, arguments checked).

    ε-LDP when ``scale = sensitivity(clip, neighbours)/ε`` (pure DP, δ = 0).

    Raises:
        LdpsimError: a concrete ``clip`` ≤ 0 or NaN, or a concrete ``scale`` < 0, NaN
            or inf. Traced arguments (under ``jit``/``vmap``) are not checked.
    """
    mechanisms._check_clip(clip)
    mechanisms._check_scale("scale", scale)
    return _PRIVATIZE["laplace"](key, tree, MechanismParams(clip, scale))
