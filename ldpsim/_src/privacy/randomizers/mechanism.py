"""Local randomizers as objects of pure functions (the optax pattern), and their registry.

A :class:`LocalMechanism` (defined in :mod:`ldpsim._src.privacy.randomizers.randomizer`, re-exported here)
is built by a factory that calibrates it on the host and carries everything the rest of
ldpsim needs about it, so that callers never branch on a mechanism's name:

* ``params`` -- the calibrated numbers (a pytree of float32 scalars: :class:`MechanismParams`
  for additive noise, a per-randomizer dataclass otherwise). Every function below takes them
  as an argument, so they may be traced: a jitted round called with the params of another ε
  reuses its compiled program, and a sweep may vmap over them.
* ``privatize(key, update, params)`` -- what ONE client releases (vmap it over a cohort):
  a :class:`Privatized` (``clipped + noise``) for additive randomizers, a :class:`Report`
  (a message: unit vector and norm, index set, category) for the others. Both carry the
  clipped input and the clipping diagnostics (``was_clipped`` counts clipped inputs).
* ``decode(report, params, like=None)`` -- the server's estimate of the clipped input from one
  message (identity for additive noise; unbiased for all but SignDS).
* ``mean(params, update)``, ``variance(params, update)`` -- the exact expectation and
  per-coordinate variance of the decoded estimate for that input
  (:func:`total_variance` sums the variance).
* ``noise_std(params)`` -- additive: per-coordinate std of one client's noise (σ for Gaussian,
  √2·b for Laplace), all the aggregate's noise theory needs; report randomizers: the root mean per-coordinate variance
  at the worst-case input ‖x‖ = C.
* ``dp_event(params)`` -- the host-side accounting of one release for the stated relation
  (:attr:`LocalMechanism.neighbours`): ``GaussianDpEvent``/``LaplaceDpEvent`` with noise
  multipliers relative to the sensitivity; binary randomized response at ε for the pure
  ε-LDP report randomizers (it dominates every ε-DP pair); ``RandomizedResponseDpEvent`` for
  k-RR.

Guarantees (each factory's docstring has its reference): :func:`gaussian` (ε, δ)-LDP,
:func:`laplace` ε-LDP, for the stated relation with ideal noise (ldpsim's float32 samplers
have bounded tails that put a floor under δ:
:func:`ldpsim.privacy.sampler_delta_floor`); PrivUnit2, PrivUnitG, Duchi et
al., SignDS and k-RR pure ε-LDP for any two inputs (relation ``"replace"``).

:data:`REGISTRY` holds ONE :class:`RegistryEntry` per randomizer (name, factory, privatize,
decode, mean, variance, the additive noise factor or None, the kind of guarantee), built
from the specs of :mod:`ldpsim._src.privacy.registry`, the one list: adding a randomizer is
its module and one spec there. The engine's round (:func:`ldpsim.fl.make_round_fn`) applies
each mechanism's own functions (:attr:`LocalMechanism.decoded_release`: the server's decoded
estimate of each client's clipped input, ``noisy = clipped + noise``, with ``noise`` the
decoding error; :attr:`LocalMechanism.mean_variance`: each client's exact per-coordinate
variance, for the theory of the aggregate's error), so a user's own mechanism runs without
registration; :func:`decoded_release_fn` and :func:`mean_variance_fn` give them by name. :func:`privatize_fn` and :func:`noise_std_factor` serve the
additive ones (:data:`ADDITIVE`) only and refuse report randomizers with a clear error.
"""

from __future__ import annotations

import math
import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src._checks import LdpsimError, check_choice
from ldpsim._src.privacy.noise import calibration, mechanisms
from ldpsim._src.privacy.randomizers import clipping
from ldpsim._src.privacy import registry
from ldpsim._src.privacy.randomizers.randomizer import (
    LocalMechanism,
    MechanismParams,
    Privatized,
    Report,
    decoded_release,
    mean_variance,
    total_variance,
)

PyTree = Any

__all__ = ["ADDITIVE", "REGISTRY", "LocalMechanism", "MechanismParams", "Privatized",
           "RegistryEntry", "Report", "clip_only", "decoded_release_fn", "entry", "total_variance",
           "gaussian", "gaussian_randomizer", "laplace", "laplace_randomizer", "make",
           "VECTOR", "mean_noise_variance", "mean_variance_fn", "noise_std_factor", "privatize_fn"]


# The interface's types live in :mod:`ldpsim._src.privacy.randomizers.randomizer` (so that randomizer
# modules need not import this registry); they are re-exported here under their old names.


def _finite(tree: PyTree) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves] or [jnp.bool_(True)]))


def _additive(clip_fn: Callable, noise_fn: Callable | None) -> Callable:
    """``privatize`` of an additive-noise randomizer: clip, zero substitute, add noise."""

    # The library's clips also report finiteness off their own max reduction (no extra pass).
    norm_ord = {clipping.clip_by_global_norm: 2, clipping.clip_by_l1_norm: 1}.get(clip_fn)

    def privatize(key: jax.Array, update: PyTree, params: MechanismParams) -> Privatized:
        if norm_ord is None:
            clipped, norm = clip_fn(update, params.clip)
            finite = _finite(update)
        else:
            clipped, norm, finite = clipping.clip_checked(update, params.clip, norm_ord)
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


def _decode_release(report: PyTree, params: MechanismParams, like: PyTree | None = None) -> PyTree:
    """An additive release is its own unbiased estimate of the clipped update."""
    return report


def _clipped_mean(clip_fn: Callable) -> Callable:
    def mean(params: MechanismParams, update: PyTree) -> PyTree:
        return clip_fn(update, params.clip)[0]   # a non-finite update: the zero substitute

    return mean


def _iid_variance(factor: float) -> Callable:
    """Per-coordinate variance ``(factor·scale)²`` of iid noise, like ``update``."""

    def variance(params: MechanismParams, update: PyTree) -> PyTree:
        v = jnp.square(jnp.float32(factor) * jnp.asarray(params.scale, jnp.float32))
        return jax.tree_util.tree_map(lambda x: jnp.full(jnp.shape(x), v, jnp.float32), update)

    return variance


def _sensitivity(params: MechanismParams, neighbours: str) -> float:
    return calibration.sensitivity(float(params.clip), neighbours)


def _realisation_fields(cal, law: str) -> dict:
    """The LocalMechanism fields of the float32 realisation of a calibrated additive noise."""
    from ldpsim._src.privacy.noise import realised

    shift = cal.sensitivity / (cal.sigma if law == "gaussian" else cal.scale)
    r = realised.additive_realisation(law, cal.sampler, shift, cal.dim)
    model = r.model
    reach = (f"disk of radius {model.bound:.4g}" if model.kind == "disk"
             else f"|z| <= {model.bound:.4g}")
    return dict(tail_mass=r.tail_mass, tail_scale=r.tail_scale,
                ideal_epsilon=cal.ideal_epsilon, ideal_delta=cal.ideal_delta,
                realisation=(f"{law} noise from sampler {cal.sampler!r} (ideal law restricted to "
                             f"{reach}), up to d = {cal.dim:,} coordinates; float32 output "
                             f"grid not modelled"))


def gaussian(*, epsilon: float, delta: float, clip: float, neighbours: str = "replace",
             method: str = "analytic", dim: int | None = None,
             sampler: str | None = None) -> LocalMechanism:
    """Gaussian local randomizer: L2-clip to C, add N(0, σ² I), σ calibrated for (ε, δ).

    Args:
        epsilon: per-release ε > 0 (``inf``: :func:`clip_only`).
        delta: δ in (0, 1).
        clip: the L2 clip bound C > 0.
        neighbours: ``"replace"`` (Δ = 2C, default) or ``"add-remove"`` (Δ = C).
        method: ``"analytic"`` (exact, Balle & Wang 2018), ``"classic"`` or ``"mindspore"``
            (:func:`ldpsim.privacy.calibrate`).
        dim: the update's number of coordinates (default: the guarantee holds up to
            :data:`ldpsim._src.privacy.noise.realised.DEFAULT_DIM`).
        sampler: the N(0, 1) sampler the guarantee is computed for (default: ldpsim's,
            which ``privatize`` uses for threefry keys).

    Returns:
        A :class:`LocalMechanism` whose ``epsilon``/``delta`` are what the float32 noise
        delivers (``tail_mass``/``tail_scale`` carry its bounded tails into composition).
        Its ``dp_event`` is the ideal part, ``GaussianDpEvent(σ/Δ)``.

    References:
        Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy",
        ICML 2018 (arXiv:1805.06530).
    """
    if math.isinf(float(epsilon)):
        return clip_only(clip=clip, neighbours=neighbours)
    cal = calibration.calibrate("gaussian", epsilon=epsilon, delta=delta, clip=clip,
                                neighbours=neighbours, method=method, dim=dim, sampler=sampler)

    def dp_event(params: MechanismParams):
        import dp_accounting

        return dp_accounting.GaussianDpEvent(float(params.scale)
                                             / _sensitivity(params, neighbours))

    return LocalMechanism(
        name="gaussian", params=MechanismParams.create(clip=cal.clip, scale=cal.sigma),
        neighbours=neighbours,
        epsilon=cal.epsilon if cal.achieved_delta <= cal.delta else cal.achieved_epsilon,
        delta=cal.delta,
        **_entry_functions("gaussian"), dp_event=dp_event, **_realisation_fields(cal, "gaussian"))


def laplace(*, epsilon: float, clip: float, neighbours: str = "replace",
            dim: int | None = None, sampler: str | None = None) -> LocalMechanism:
    """Laplace local randomizer: L1-clip to C, add Lap(b) per coordinate, b = Δ₁/ε.

    ε-LDP for the stated relation with ideal noise (Dwork & Roth 2014, Thm. 3.6). Float32
    Laplace noise is bounded, so the realisation is (ε, δ)-LDP with the small δ its sampler's
    reach allows (``delta``; 5e-20 at ε = 1, 3e-7 at ε = 30 with the default 64-bit sampler:
    docs/privacy_sharp_edges.md). Its ``dp_event`` is the ideal part, ``LaplaceDpEvent(b/Δ₁)``.
    """
    if math.isinf(float(epsilon)):
        return clip_only(clip=clip, neighbours=neighbours, norm="l1")
    cal = calibration.calibrate("laplace", epsilon=epsilon, clip=clip, neighbours=neighbours,
                                dim=dim, sampler=sampler)

    def dp_event(params: MechanismParams):
        import dp_accounting

        return dp_accounting.LaplaceDpEvent(float(params.scale)
                                            / _sensitivity(params, neighbours))

    return LocalMechanism(
        name="laplace", params=MechanismParams.create(clip=cal.clip, scale=cal.scale),
        neighbours=neighbours, epsilon=cal.achieved_epsilon, delta=cal.achieved_delta,
        **_entry_functions("laplace"), dp_event=dp_event, **_realisation_fields(cal, "laplace"))


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
        noise_std=lambda params: jnp.zeros_like(jnp.asarray(params.scale)), dp_event=dp_event,
        decode=_decode_release, mean=_clipped_mean(clip_fn), variance=_iid_variance(0.0))


@dataclasses.dataclass(frozen=True)
class RegistryEntry:
    """One registered local randomizer: its factory and its calibration-independent functions.

    Calling the entry calls the factory (``REGISTRY[name](**kwargs)`` is :func:`make`).

    Attributes:
        name: the registry name.
        factory: ``(**kwargs) -> LocalMechanism`` (calibrates on the host).
        privatize: ``(key, update, params) -> Privatized | Report`` for one client.
        decode: ``(report, params, like=None) -> estimate`` of the clipped input.
        mean: ``(params, update) -> exact E[decoded]``.
        variance: ``(params, update) -> exact per-coordinate Var[decoded]``.
        noise_std_factor: additive randomizers: per-coordinate noise std per unit of
            ``params.scale`` (1 Gaussian, √2 Laplace, 0 none); None for a report randomizer.
        guarantee: ``"pure"`` (ε-LDP) or ``"approximate"`` ((ε, δ)-LDP).
        unbiased: ``mean`` is the clipped input.
        input: ``"vector"`` (a pytree update) or ``"category"`` (an integer in [0, k)).
    """

    name: str
    factory: Callable[..., LocalMechanism]
    privatize: Callable[..., Any]
    decode: Callable[..., PyTree]
    mean: Callable[..., PyTree]
    variance: Callable[..., PyTree]
    noise_std_factor: float | None
    guarantee: str
    unbiased: bool = True
    input: str = "vector"

    @property
    def additive(self) -> bool:
        """The release is ``clipped + independent noise`` (what the engine's round runs)."""
        return self.noise_std_factor is not None

    def __call__(self, **kwargs: Any) -> LocalMechanism:
        return self.factory(**kwargs)


class _Implementation(NamedTuple):
    """The module-level interface of a randomizer, for an additive one defined here."""

    make: Callable[..., LocalMechanism]
    privatize: Callable[..., Any]
    decode: Callable[..., PyTree]
    mean: Callable[..., PyTree]
    variance: Callable[..., PyTree]


def _additive_implementation(factory, clip_fn, noise_fn, factor) -> _Implementation:
    return _Implementation(make=factory, privatize=_additive(clip_fn, noise_fn),
                           decode=_decode_release, mean=_clipped_mean(clip_fn),
                           variance=_iid_variance(factor))


#: The additive randomizers' implementations (their specs in
#: :mod:`ldpsim._src.privacy.registry` point here).
GAUSSIAN = _additive_implementation(gaussian, clipping.clip_by_global_norm, _gaussian_noise,
                                    1.0)
LAPLACE = _additive_implementation(laplace, clipping.clip_by_l1_norm, _laplace_noise,
                                   math.sqrt(2.0))
CLIP_ONLY = _additive_implementation(clip_only, clipping.clip_by_global_norm, None, 0.0)


def entry_of(spec: registry.RandomizerSpec) -> RegistryEntry:
    """The :class:`RegistryEntry` of a randomizer's spec (its implementation imported)."""
    impl = spec.load()
    return RegistryEntry(name=spec.name, factory=impl.make, privatize=impl.privatize,
                         decode=impl.decode, mean=impl.mean, variance=impl.variance,
                         noise_std_factor=spec.noise_std_factor if spec.additive else None,
                         guarantee=spec.guarantee, unbiased=spec.unbiased, input=spec.input)


def _entry_functions(name: str) -> dict[str, Any]:
    """The registry entry's functions as :class:`LocalMechanism` fields (additive ones)."""
    e = entry(name)
    factor = e.noise_std_factor
    return dict(privatize=e.privatize, decode=e.decode, mean=e.mean, variance=e.variance,
                noise_std=lambda params: jnp.float32(factor) * params.scale)


#: name -> :class:`RegistryEntry`, ONE entry per randomizer, built from the specs of
#: :data:`ldpsim._src.privacy.registry.RANDOMIZERS` (the only list).
REGISTRY: dict[str, RegistryEntry] = {s.name: entry_of(s) for s in registry.RANDOMIZERS}

#: The registered additive-noise randomizers (``clipped + independent noise``).
ADDITIVE = tuple(n for n, e in REGISTRY.items() if e.additive)

#: The registered randomizers of model updates that the engine's round runs
#: (:func:`decoded_release_fn`); randomizers of categories are left out.
VECTOR = tuple(n for n, e in REGISTRY.items() if e.input == "vector")


def entry(name: str) -> RegistryEntry:
    """The registry entry ``name`` (a spec added to the registry after import is built now).

    Raises:
        LdpsimError: unknown name (the message lists the registered ones).
    """
    if name not in REGISTRY:
        return entry_of(registry.randomizer(name))
    return REGISTRY[name]


def make(name: str, **kwargs: Any) -> LocalMechanism:
    """The registered mechanism ``name`` calibrated with ``kwargs`` (see each factory).

    Raises:
        LdpsimError: unknown name (the message lists the registered ones).
    """
    local = entry(name)(**kwargs)
    # the registry's name is the mechanism's name (one implementation may serve two entries)
    return local if local.name == name else local._replace(name=name)


def _additive_only(name: str, what: str) -> RegistryEntry:
    if name in REGISTRY and not REGISTRY[name].additive:
        raise LdpsimError(
            f"{what} serves the engine's additive-noise mechanisms ({', '.join(ADDITIVE)}); got "
            f"{name!r}, a report randomizer (use make({name!r}, ...).privatize and .decode)")
    if name not in REGISTRY:
        raise LdpsimError(f"mechanism must be one of {', '.join(ADDITIVE)}; got {name!r}")
    return REGISTRY[name]


def privatize_fn(name: str) -> Callable[[jax.Array, PyTree, MechanismParams], Privatized]:
    """The ``privatize`` of the registered additive mechanism ``name``, independent of
    calibration (its ``params`` are an argument), for kernels compiled once per mechanism.

    Raises:
        LdpsimError: an unknown name, or a report randomizer (the engine's round needs
            ``clipped + noise``; see the registry's ``decode`` for those).
    """
    return _additive_only(name, "privatize_fn").privatize


def decoded_release_fn(name: str) -> Callable[[jax.Array, PyTree, Any], Privatized]:
    """``(key, update, params) -> Privatized`` of ANY registered vector randomizer, in the
    engine's release type: ``noisy = decode(privatize(key, update).report, like=update)`` (the
    server's per-client estimate), ``clipped`` the clipped input, ``noise = noisy − clipped``
    (zero-mean for the unbiased randomizers; for SignDS it includes the decoder's bias). For an
    additive randomizer it is its own ``privatize``. What a round needs to aggregate report
    randomizers unchanged (their ``params`` are the mechanism's own pytree, not
    ``MechanismParams(clip, scale)``).

    Raises:
        LdpsimError: unknown name, or a categorical randomizer (``"rr"``).
    """
    e = entry(name)
    if e.input != "vector":
        raise LdpsimError(f"{name!r} privatizes categories, not model updates")
    return decoded_release(e.privatize, e.decode, e.additive)


def mean_variance_fn(name: str) -> Callable[[Any, PyTree], jax.Array]:
    """``(params, update) -> float32 scalar``: the mean over coordinates of the exact
    per-coordinate variance of the decoded estimate of ``update`` (the registry entry's
    ``variance``), i.e. ``E‖decode(privatize(·, update)) − E[·]‖² / d``. Input dependent for
    PrivUnit, Duchi et al. and SignDS; ``(factor·scale)²`` for additive noise.

    Raises:
        LdpsimError: unknown name, or a categorical randomizer (``"rr"``).
    """
    e = entry(name)
    if e.input != "vector":
        raise LdpsimError(f"{name!r} privatizes categories, not model updates")
    return mean_variance(e.variance)


def noise_std_factor(name: str) -> float:
    """Per-coordinate noise std per unit of ``params.scale``: 1 (Gaussian), √2 (Laplace),
    0 (none). Additive mechanisms only (same errors as :func:`privatize_fn`)."""
    return float(_additive_only(name, "noise_std_factor").noise_std_factor)


def mean_noise_variance(noise_std: jax.typing.ArrayLike, weight_sum: jax.typing.ArrayLike,
                        weight_sq_sum: jax.typing.ArrayLike) -> jax.Array:
    """Per-coordinate variance of the noise of a weighted mean of independent releases:
    ``noise_std² · Σw² / (Σw)²`` = ``noise_std² / n_eff``."""
    w = jnp.asarray(weight_sum, jnp.float32)
    return jnp.square(jnp.asarray(noise_std, jnp.float32)) * jnp.asarray(
        weight_sq_sum, jnp.float32) / jnp.where(w > 0, w * w, 1.0)


def gaussian_randomizer(key: jax.Array, tree: PyTree, *, clip: jax.typing.ArrayLike,
                        stddev: jax.typing.ArrayLike) -> Privatized:
    """Gaussian local randomizer on one pytree: L2-clip to ``clip``, add N(0, stddev² I).

    The engine's own client step (the ``"gaussian"`` entry of :data:`REGISTRY`), with the
    arguments checked. (ε, δ)-LDP when ``stddev`` is calibrated for
    ``sensitivity(clip, neighbours)`` (:func:`ldpsim.privacy.calibrate`, or
    the :func:`gaussian` factory, which does both).

    Raises:
        LdpsimError: a concrete ``clip`` ≤ 0 or NaN, or a concrete ``stddev`` < 0, NaN
            or inf. Traced arguments (under ``jit``/``vmap``) are not checked.
    """
    mechanisms._check_clip(clip)
    mechanisms._check_scale("stddev", stddev)
    return GAUSSIAN.privatize(key, tree, MechanismParams(clip, stddev))


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
    return LAPLACE.privatize(key, tree, MechanismParams(clip, scale))
