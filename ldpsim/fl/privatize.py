"""Privatize ONE client's update: clip to C, add noise (the local randomizer).

Written for a single client and vmapped over a cohort by :mod:`ldpsim.fl.simulate`.
``clip`` and ``scale`` are traced scalars, so changing ε (hence σ) or C never
recompiles.

Formal guarantee:
    The released value ``noisy = clip(Δ, C) + ξ`` is the Gaussian mechanism applied to a
    vector of L2 norm at most C (``ξ ~ N(0, σ² I)``), or the Laplace mechanism applied to
    a vector of L1 norm at most C (``ξ_j ~ Lap(b)`` i.i.d.; for Laplace, C is an L1
    bound, as in :func:`ldpsim.privacy.mechanisms.laplace_randomizer`).  With σ (or b)
    calibrated by :func:`ldpsim.privacy.calibration.calibrate` for sensitivity 2C
    (replace-one neighbours) it is (ε, δ)-LDP (or ε-LDP) for one round.  A non-finite
    update (local training diverged) is replaced by the zero update *before* noise, and
    the noise is added as for any other update, so the release is ``0 + ξ``: noise around
    a data-independent substitute, indistinguishable in law from a finite client's
    release, and the engine aggregates it like every other one.  Whether the update was
    finite is returned (``finite``) for the simulation's diagnostics only; it is never
    part of the release.

References:
    McMahan et al., "Learning Differentially Private Recurrent Language Models", ICLR
    2018 (arXiv:1710.06963), Alg. 1 (flat clipping of client updates); ALGORITHMS.md
    §1.2 (MindSpore Federated's clip-then-noise local randomizer).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim.privacy import clipping, mechanisms

PyTree = Any

__all__ = ["MECHANISMS", "Privatized", "privatize"]

MECHANISMS = ("gaussian", "laplace", "none")


class Privatized(NamedTuple):
    """One client's privatized update and what the metrics need.

    Attributes:
        noisy: the released update ``clipped + noise`` (what the server receives).
        clipped: the clean clipped update (the zero substitute if the update was not
            finite).
        noise: the noise ``ξ`` that was added (drawn for every client).
        norm: pre-clip norm of the update, L2 (L1 for Laplace); NaN/inf if not finite,
            +inf for a finite update whose norm exceeds float32's range (it is still
            clipped exactly).  Diagnostic: not released.
        release_norm: the norm of what was clipped: ``norm``, or 0 for the zero
            substitute of a non-finite update (what a mechanism that releases a function
            of the norm, such as the adaptive clip's quantile bit, must use).
        was_clipped: the clip bound was active (``release_norm > clip``).
        finite: whether every entry of the update was finite (diagnostic only).
    """

    noisy: PyTree
    clipped: PyTree
    noise: PyTree
    norm: jax.Array
    release_norm: jax.Array
    was_clipped: jax.Array
    finite: jax.Array


def privatize(key: jax.Array, delta: PyTree, *, clip: jax.typing.ArrayLike,
              scale: jax.typing.ArrayLike, mechanism: str = "gaussian") -> Privatized:
    """Clip one client's update to global L2 norm ``clip`` and add i.i.d. noise.

    Args:
        key: the client's noise key (never reused for anything else).
        delta: the client's update Δ = W_local − W_global (a pytree).
        clip: clip bound C (traced scalar): L2 for Gaussian and "none", L1 for Laplace.
        scale: noise scale per coordinate, traced: the Gaussian std σ, or the Laplace
            scale b. 0 adds exact zeros (no privacy).
        mechanism: ``"gaussian"``, ``"laplace"`` or ``"none"`` (static; ``"none"`` draws no
            noise and ignores ``scale``).

    Returns:
        A :class:`Privatized` tuple.
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    if mechanism == "laplace":
        clipped, norm = clipping.clip_by_l1_norm(delta, clip)
    else:
        clipped, norm = clipping.clip_by_global_norm(delta, clip)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x))
                                for x in jax.tree_util.tree_leaves(delta)] or [jnp.bool_(True)]))
    release_norm = jnp.where(finite, norm, jnp.zeros_like(norm))
    if mechanism == "gaussian":
        noise = mechanisms.gaussian_noise(key, clipped, scale)
    elif mechanism == "laplace":
        noise = mechanisms.laplace_noise(key, clipped, scale)
    else:  # "none": no noise is drawn at all (ε = inf); clipping still applies.
        noise = jax.tree_util.tree_map(jnp.zeros_like, clipped)
    noisy = jax.tree_util.tree_map(jnp.add, clipped, noise)
    was_clipped = release_norm > jnp.asarray(clip, norm.dtype)
    return Privatized(noisy, clipped, noise, norm, release_norm, was_clipped, finite)
