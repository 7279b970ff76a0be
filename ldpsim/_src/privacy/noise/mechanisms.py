"""Noise on pytrees: Gaussian and Laplace draws with an explicit key (the randomizers'
primitives; the randomizers themselves are in :mod:`ldpsim._src.privacy.randomizers.mechanism`).

All functions are pure and jittable, and vmap over a leading client axis (vmap
the key too: one key per client). The noise scale is an ordinary (traced)
argument, so calling a jitted function with a new ε — hence a new σ — reuses the
compiled program.

Gaussian noise comes by default from :func:`ldpsim._src.privacy.noise.sampling.normal_like`
(``impl="fast"``: Threefry-2x32-20 bits + Box–Muller, several times faster than
``jax.random.normal`` on CPU and validated in ``tests/privacy/test_sampling.py``) whenever the key
is a threefry key (JAX's default; other key types fall back to ``jax.random.normal``); the
leaves take consecutive blocks of one counter range of the key. ``impl="jax"`` restores
``jax.random.normal`` with one key per leaf from ``jax.random.split(key, num_leaves)``.
Laplace noise comes by default from :func:`ldpsim._src.privacy.noise.sampling.laplace_like`
(``impl="bits"``: Threefry-2x32-20 bits at their own counter tag, sign bit and ``-ln U`` of a
63-bit uniform, ``|x| ≤ 64 ln 2 ≈ 44.36`` scales, validated in
``tests/privacy/test_laplace_sampler.py``) for threefry keys, with the leaves on consecutive
counter blocks; other key types fall back to ``jax.random.laplace`` (``impl="jax"``, one key
per leaf from ``jax.random.split``; ``x ∈ [−15.537, 16.636]`` scales). The reach of each
sampler, as the privacy accounting needs it: :func:`ldpsim._src.privacy.noise.sampling.laplace_model`
(and ``sampler_model`` for the Gaussian ones). Either way leaves receive
independent noise, the same key always gives the same noise, and callers derive
keys from positions (``fold_in(fold_in(root, round), client_id)``) so that no key is
ever reused.

Guarantees (with :mod:`ldpsim._src.privacy.noise.calibration` and :mod:`.clipping`):

* :func:`ldpsim.privacy.gaussian_randomizer` releases ``clip_C(u) + N(0, σ² I)``. With
  ``σ = analytic_gaussian_sigma(ε, δ, Δ)`` and ``Δ = sensitivity(C, neighbours)``
  this is (ε, δ)-LDP for the stated neighbouring relation (Balle & Wang 2018).
* :func:`ldpsim.privacy.laplace_randomizer` releases ``clip¹_C(u) + Lap(b)^d`` (L1 clipping).
  With ``b = Δ₁/ε`` it is ε-LDP (Dwork & Roth 2014, Thm. 3.6).

Argument checks: every public function raises :class:`ldpsim.LdpsimError` (a
``ValueError`` naming the argument) for a *concrete* bad value — ``clip`` ≤ 0 or NaN
(``clip = inf`` means no clipping and is allowed; a negative clip would flip the update's
sign), ``stddev``/``scale`` < 0, NaN or ±inf (0 is allowed: no noise). Python numbers,
NumPy values and concrete JAX arrays (every entry, if not a scalar) are checked. A traced
value (inside ``jit``/``vmap``/``grad``) cannot be inspected and is NOT checked: callers
that trace these arguments — the FL engine, which passes ``clip`` and σ as traced scalars
so that a new ε never recompiles — validate them before tracing
(:class:`ldpsim.fl.SimulationConfig`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.noise import sampling

PyTree = Any


def _concrete(value: Any) -> np.ndarray | None:
    """``value`` as a float64 NumPy array when it is concrete; None for a JAX tracer.

    Raises:
        LdpsimError: a value that is not numeric (message names no argument; see callers).
    """
    if isinstance(value, jax.core.Tracer):
        return None  # traced (jit/vmap/grad): unknowable until run time, left unchecked
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise LdpsimError(f"must be a number, got {value!r}") from None


def _check_clip(value: Any) -> None:
    """Reject a concrete clip bound that is ≤ 0 or NaN (inf is allowed: no clipping)."""
    try:
        arr = _concrete(value)
    except LdpsimError as err:
        raise LdpsimError(f"clip {err}") from None
    if arr is not None and not np.all(arr > 0):  # NaN > 0 is False
        raise LdpsimError(f"clip must be > 0 (inf allowed, meaning no clipping), got {value!r}")


def _check_scale(name: str, value: Any) -> None:
    """Reject a concrete noise scale that is < 0, NaN or ±inf (0 is allowed: no noise)."""
    try:
        arr = _concrete(value)
    except LdpsimError as err:
        raise LdpsimError(f"{name} {err}") from None
    if arr is not None and not np.all(np.isfinite(arr) & (arr >= 0)):
        raise LdpsimError(f"{name} must be finite and >= 0, valid range [0, inf); got {value!r}")


def gaussian_noise(
    key: jax.Array, tree: PyTree, stddev: jax.typing.ArrayLike, *, impl: str | None = None
) -> PyTree:
    """iid N(0, stddev²) noise with the structure, shapes and dtypes of ``tree``.

    Args:
        key: a PRNG key (``"fast"``/``"icdf"`` need a threefry key, JAX's default).
        tree: a pytree whose leaves give the shapes/dtypes of the noise
            (non-floating leaves get float32 noise).
        stddev: per-coordinate standard deviation σ ≥ 0, finite (a traced scalar is
            fine but is not checked).
        impl: the N(0, 1) sampler, one of :data:`ldpsim._src.privacy.noise.sampling.IMPLS`:
            ``"fast"`` (Box–Muller on Threefry-2x32-20 bits, |z| ≤ 6.76),
            ``"icdf"`` (64-bit inverse CDF, |z| ≤ 9.08) or ``"jax"``
            (``jax.random.normal`` on per-leaf split keys, the previous behaviour);
            None (default): ``"fast"`` for threefry keys, ``"jax"`` for other key
            types (:func:`ldpsim._src.privacy.noise.sampling.resolve_impl`).

    Raises:
        LdpsimError: a concrete ``stddev`` that is < 0, NaN or inf; unknown ``impl``, or
            a non-threefry key with ``"fast"``/``"icdf"``.
    """
    _check_scale("stddev", stddev)
    z = sampling.normal_like(key, tree, impl=impl)
    return jax.tree_util.tree_map(lambda n: n * jnp.asarray(stddev, n.dtype), z)


def laplace_noise(
    key: jax.Array, tree: PyTree, scale: jax.typing.ArrayLike, *, impl: str | None = None
) -> PyTree:
    """iid Laplace(0, scale) noise (density ``exp(-|x|/b)/(2b)``, variance ``2b²``) like ``tree``.

    Args:
        key: a PRNG key (``impl="bits"`` needs a threefry key, JAX's default).
        tree: a pytree whose leaves give the shapes/dtypes of the noise (non-floating leaves
            get float32 noise).
        scale: the Laplace scale b ≥ 0, finite (a traced scalar is fine but is not checked).
        impl: the standard Laplace sampler, one of
            :data:`ldpsim._src.privacy.noise.sampling.LAPLACE_IMPLS`: ``"bits"`` (Threefry-2x32-20,
            sign bit + ``-ln U`` of a 63-bit uniform, ``|x| ≤ 64 ln 2 ≈ 44.36``) or ``"jax"``
            (``jax.random.laplace`` on per-leaf split keys, the previous behaviour, reach
            15.537 on one side); None (default): ``"bits"`` for threefry keys, ``"jax"`` for
            other key types (:func:`ldpsim._src.privacy.noise.sampling.resolve_laplace_impl`).

    Raises:
        LdpsimError: a concrete ``scale`` that is < 0, NaN or inf; unknown ``impl``, or a
            non-threefry key with ``"bits"``.
    """
    _check_scale("scale", scale)
    x = sampling.laplace_like(key, tree, impl=impl)
    return jax.tree_util.tree_map(lambda n: n * jnp.asarray(scale, n.dtype), x)


def add_gaussian_noise(
    key: jax.Array, tree: PyTree, stddev: jax.typing.ArrayLike, *, impl: str | None = None
) -> PyTree:
    """``tree + N(0, stddev² I)`` leaf by leaf (see :func:`gaussian_noise`; same checks)."""
    return jax.tree_util.tree_map(jnp.add, tree, gaussian_noise(key, tree, stddev, impl=impl))


def add_laplace_noise(
    key: jax.Array, tree: PyTree, scale: jax.typing.ArrayLike, *, impl: str | None = None
) -> PyTree:
    """``tree + Lap(scale)^d`` leaf by leaf (see :func:`laplace_noise`; same checks)."""
    return jax.tree_util.tree_map(jnp.add, tree, laplace_noise(key, tree, scale, impl=impl))
