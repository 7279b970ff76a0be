"""Privatize ONE client's update: clip to C, add noise (the local randomizer).

Written for a single client and vmapped over a cohort by :mod:`ldpsim._src.fl.round`.
``clip`` and ``scale`` are traced scalars, so changing ε (hence σ) or C never
recompiles.

Formal guarantee:
    The released value ``noisy = clip(Δ, C) + ξ`` is the Gaussian mechanism applied to a
    vector of L2 norm at most C (``ξ ~ N(0, σ² I)``), or the Laplace mechanism applied to
    a vector of L1 norm at most C (``ξ_j ~ Lap(b)`` i.i.d.; for Laplace, C is an L1
    bound, as in :func:`ldpsim.privacy.laplace_randomizer`).  With σ (or b)
    calibrated by :func:`ldpsim.privacy.calibrate` for sensitivity 2C
    (replace-one neighbours) it is (ε, δ)-LDP (or ε-LDP) for one round.  A non-finite
    update (local training diverged) is replaced by the zero update *before* noise, and
    the noise is added as for any other update, so the release is ``0 + ξ``: noise around
    a data-independent substitute, indistinguishable in law from a finite client's
    release, and the engine aggregates it like every other one.  This holds at every size,
    eagerly and under ``jit``/``vmap``: the clip's finiteness test never reads a float max,
    which XLA's CPU reductions of ≥ 4,096 elements compute without propagating NaN
    (:mod:`ldpsim._src.privacy.randomizers.clipping`).  Whether the update was finite is returned
    (``finite``) for the simulation's diagnostics only; it is never part of the release.

References:
    McMahan et al., "Learning Differentially Private Recurrent Language Models", ICLR
    2018 (arXiv:1710.06963), Alg. 1 (flat clipping of client updates);
    MindSpore Federated's clip-then-noise local randomizer.
"""

from __future__ import annotations

from typing import Any

import jax

from ldpsim._src.privacy import registry
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib

PyTree = Any

__all__ = ["MECHANISMS", "Privatized", "privatize"]

#: The additive randomizers (the registry's ``additive`` entries: Gaussian, Laplace, clip only).
MECHANISMS = tuple(s.name for s in registry.RANDOMIZERS if s.additive)


#: One client's privatized update and what the metrics need (see
#: :class:`ldpsim.mechanism.Privatized`): ``noisy`` (released), ``clipped``, ``noise``,
#: ``norm``, ``release_norm``, ``was_clipped``, ``finite``.
Privatized = mechanism_lib.Privatized


def privatize(key: jax.Array, delta: PyTree, *, clip: jax.typing.ArrayLike,
              scale: jax.typing.ArrayLike, mechanism: str = "gaussian") -> Privatized:
    """Clip one client's update to global L2 norm ``clip`` and add i.i.d. noise.

    The registered mechanism's ``privatize``
    (:func:`ldpsim._src.privacy.randomizers.mechanism.privatize_fn`) with ``MechanismParams(clip, scale)``.

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
    params = mechanism_lib.MechanismParams(clip, scale)
    return mechanism_lib.privatize_fn(mechanism)(key, delta, params)
