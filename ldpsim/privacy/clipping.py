"""Norm clipping of pytrees: the step that bounds a client's sensitivity.

Both functions are pure, jittable and vmappable (vmap them over a leading client
axis to clip a whole cohort). The clip bound is a traced argument, so adaptive
clip rules that change it every round never trigger a recompilation.

Formal guarantee:
    After :func:`clip_by_global_norm` with bound ``C`` the output ``u'`` satisfies
    ``‖u'‖₂ ≤ C`` for every input, so two clipped updates differ by at most ``2C``
    in L2 (replace-one neighbours) and an update differs from the empty update by
    at most ``C`` (add/remove neighbours); see :mod:`ldpsim.privacy.calibration`.

Edge cases (``‖u‖`` is the global L2 norm over all leaves):

=========================  ==========================  =========================
input                      clipped output              returned norm
=========================  ==========================  =========================
``‖u‖ ≤ C``                ``u`` unchanged             ``‖u‖``
``‖u‖ > C`` (finite)       ``u · C/‖u‖``               ``‖u‖``
``‖u‖ = 0``                zeros (factor 1, no 0/0)    ``0``
huge finite values         scaled exactly, no overflow ``‖u‖`` (may be ``inf``
                                                       in float32 if it exceeds
                                                       the dtype's range)
any NaN or ±inf entry      zeros                       ``nan`` (or ``inf``)
=========================  ==========================  =========================

A non-finite input is mapped to the zero update (which satisfies any bound) and
flagged by its non-finite norm, so callers can count and exclude it; a finite
input never produces a NaN.

References:
    Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Alg. 1
    (per-example clipping ``g / max(1, ‖g‖/C)``); McMahan et al., "Learning
    Differentially Private Recurrent Language Models", ICLR 2018 (flat and
    per-layer clipping of client updates, arXiv:1710.06963).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def _safe_norm(leaves: list[jax.Array], ord: int = 2) -> tuple[jax.Array, jax.Array]:
    """Global L2 (or L1) norm of ``leaves`` without overflow, and whether all entries are finite.

    Values are divided by the largest magnitude before summing, so finite inputs
    whose squares (or sums) would overflow (e.g. 1e30 in float32) still get their
    exact norm.
    """
    maxabs = jnp.max(jnp.stack([jnp.max(jnp.abs(x), initial=0.0) for x in leaves]))
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
    scale = jnp.where(finite & (maxabs > 0), maxabs, 1.0)
    if ord == 2:
        norm = scale * jnp.sqrt(sum(jnp.sum(jnp.square(x / scale)) for x in leaves))
    else:
        norm = scale * sum(jnp.sum(jnp.abs(x / scale)) for x in leaves)
    # Non-finite input: report NaN (or inf when the only culprits are infinities).
    norm = jnp.where(finite, norm, jnp.where(jnp.isinf(maxabs), jnp.inf, jnp.nan))
    return norm, finite


def _clip(tree: PyTree, clip: jax.typing.ArrayLike, ord: int) -> tuple[PyTree, jax.Array]:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    leaves = [jnp.asarray(x) for x in leaves]
    if not leaves:
        return tree, jnp.zeros((), jnp.float32)
    norm, finite = _safe_norm(leaves, ord)
    clip = jnp.asarray(clip, dtype=norm.dtype)
    # factor = min(1, C/‖u‖); ‖u‖ = 0 gives factor 1 (no 0/0), non-finite gives 0.
    factor = jnp.where(norm > clip, clip / jnp.where(norm > 0, norm, 1.0), 1.0)
    factor = jnp.where(finite, factor, 0.0)
    out = [jnp.where(finite, x * factor.astype(x.dtype), jnp.zeros_like(x)) for x in leaves]
    return jax.tree_util.tree_unflatten(treedef, out), norm


def global_norm(tree: PyTree) -> jax.Array:
    """Global L2 norm over all leaves of ``tree`` (overflow-safe; NaN if any entry is NaN)."""
    leaves = [jnp.asarray(x) for x in jax.tree_util.tree_leaves(tree)]
    if not leaves:
        return jnp.zeros((), jnp.float32)
    return _safe_norm(leaves)[0]


def clip_by_global_norm(tree: PyTree, clip: jax.typing.ArrayLike) -> tuple[PyTree, jax.Array]:
    """Scale a pytree so that its global L2 norm is at most ``clip`` (flat clipping).

    ``u' = u · min(1, C / ‖u‖)`` with one factor for the whole tree, as in
    MindSpore Federated's LDP client (ALGORITHMS §1.2 step 3) and TFF's
    ``tf.clip_by_global_norm``. Direction is preserved exactly.

    Args:
        tree: a pytree of float arrays (one client's update).
        clip: the bound ``C > 0`` (a traced scalar is fine).

    Returns:
        ``(clipped_tree, norm)``: the clipped tree (same structure and dtypes) and
        the pre-clip global norm ``‖u‖`` (NaN/inf when the input is not finite, in
        which case ``clipped_tree`` is all zeros). See the module docstring table.
    """
    return _clip(tree, clip, 2)


def clip_by_l1_norm(tree: PyTree, clip: jax.typing.ArrayLike) -> tuple[PyTree, jax.Array]:
    """Scale a pytree so that its global L1 norm ``Σ|u_i|`` is at most ``clip``.

    The L1 analogue of :func:`clip_by_global_norm`, used before the Laplace
    mechanism, whose sensitivity is measured in L1 (Dwork & Roth 2014, Def. 3.1).
    Same edge-case behaviour; returns ``(clipped_tree, l1_norm)``.
    """
    return _clip(tree, clip, 1)


def clip_per_layer(tree: PyTree, clips: PyTree | jax.typing.ArrayLike) -> tuple[PyTree, PyTree]:
    """Clip every leaf of ``tree`` to its own L2 bound (per-layer clipping).

    Leaf ``j`` is scaled by ``min(1, C_j / ‖u_j‖)``. The whole update then has
    L2 norm at most ``√(Σ_j C_j²)`` — the bound to use for calibration
    (McMahan et al. 2018, §"per-layer clipping"; see :func:`per_layer_bound`).

    Args:
        tree: a pytree of float arrays.
        clips: a pytree with the same structure holding one bound per leaf, or a
            scalar applied to every leaf.

    Returns:
        ``(clipped_tree, norms)`` where ``norms`` has the structure of ``tree``
        with each leaf's pre-clip norm. Non-finite leaves become zeros and report
        a non-finite norm.
    """
    if isinstance(clips, (int, float)) or getattr(clips, "ndim", None) == 0:
        scalar = clips
        clips = jax.tree_util.tree_map(lambda _: scalar, tree)
    pairs = jax.tree_util.tree_map(lambda x, c: clip_by_global_norm(x, c), tree, clips)
    treedef = jax.tree_util.tree_structure(tree)
    flat = treedef.flatten_up_to(pairs)
    clipped = treedef.unflatten([p[0] for p in flat])
    norms = treedef.unflatten([p[1] for p in flat])
    return clipped, norms


def per_layer_bound(clips: PyTree) -> jax.Array:
    """Global L2 bound ``√(Σ_j C_j²)`` implied by per-layer bounds ``clips``."""
    leaves = jax.tree_util.tree_leaves(clips)
    return jnp.sqrt(sum(jnp.square(jnp.asarray(c, jnp.float32)) for c in leaves))
