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
    update is replaced by the zero update *before* noise and flagged, so the engine can
    exclude and count it; privacy is unaffected (the released value is a function of
    the clipped update only).

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
        clipped: the clean clipped update (zeros if the update was not finite).
        noise: the noise ``ξ`` that was added (zeros if not finite).
        norm: pre-clip norm of the update, L2 (L1 for Laplace); NaN/inf if not finite
            (including a finite update whose norm overflows float32: it is excluded too).
        was_clipped: ``norm > clip`` (the clip bound was active).
        finite: whether every entry of the update was finite.
    """

    noisy: PyTree
    clipped: PyTree
    noise: PyTree
    norm: jax.Array
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
    finite = jnp.isfinite(norm)
    if mechanism == "gaussian":
        noise = mechanisms.gaussian_noise(key, clipped, scale)
    elif mechanism == "laplace":
        noise = mechanisms.laplace_noise(key, clipped, scale)
    else:  # "none": no noise is drawn at all (ε = inf); clipping still applies.
        noise = jax.tree_util.tree_map(jnp.zeros_like, clipped)
    noise = jax.tree_util.tree_map(lambda z: jnp.where(finite, z, jnp.zeros_like(z)), noise)
    noisy = jax.tree_util.tree_map(jnp.add, clipped, noise)
    was_clipped = finite & (norm > jnp.asarray(clip, norm.dtype))
    return Privatized(noisy, clipped, noise, norm, was_clipped, finite)
