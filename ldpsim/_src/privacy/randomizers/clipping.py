"""Norm clipping of pytrees: the step that bounds a client's sensitivity.

Both functions are pure, jittable and vmappable (vmap them over a leading client
axis to clip a whole cohort). The clip bound is a traced argument, so adaptive
clip rules that change it every round never trigger a recompilation.

Formal guarantee:
    After :func:`clip_by_global_norm` with bound ``C`` the output ``u'`` satisfies
    ``‖u'‖₂ ≤ C`` for every input, so two clipped updates differ by at most ``2C``
    in L2 (replace-one neighbours) and an update differs from the empty update by
    at most ``C`` (add/remove neighbours); see :mod:`ldpsim._src.privacy.noise.calibration`.
    "≤" holds up to float rounding: for float32 leaves ``‖u'‖ ≤ C·(1 + (d + 8)·2⁻²⁴)``
    for ``d`` coordinates (the float32 sum of the norm plus three roundings per entry;
    in practice far tighter, ~√d·2⁻²⁴), for **every finite input**, float32 max
    included, and every ``C > 0``; :func:`clip_by_l1_norm` gives the same for ``‖u'‖₁``.
    Half-precision leaves are clipped in float32 and rounded back to their dtype,
    which adds that dtype's rounding.

How huge values are handled: the norm is computed on ``u·2^-k`` where ``2^k`` is the
power of two of ``max|u|`` (clamped to ``[2^-126, 2^126]`` in float32, so ``2^±k`` are
normal floats), and the clipped output as ``((u·2^-k) · (1/‖u·2^-k‖)) · C``. No factor is
ever subnormal: XLA on CPU flushes subnormals to zero and rewrites ``x / s`` as
``x · (1/s)``, so dividing by a norm ≥ 2^126 (≈ 8.5e37), or a factor ``C/‖u‖`` below
2^-126, would zero the factor and leave the update unclipped or zeroed. Only output
entries whose true value is below 2^-126 are flushed (which only shrinks the norm), and
input entries below 2^-126 may count as zero in the norm.

Edge cases (``‖u‖`` is the global L2 norm over all leaves, or L1 for
:func:`clip_by_l1_norm`; ``d`` the number of coordinates):

=========================  ==========================  =========================
input                      clipped output              returned norm
=========================  ==========================  =========================
``‖u‖ ≤ C``                ``u`` unchanged, bit for    ``‖u‖``
                           bit (subnormals included)
``‖u‖ > C`` (finite)       ``u · C/‖u‖``               ``‖u‖``
``‖u‖ = 0``                zeros (factor 1, no 0/0)    ``0``
huge finite values (up to  ``u · C/‖u‖``, norm ``C``,  ``‖u‖``, or ``inf`` when
float32 max, any mix with  direction kept (no          ``‖u‖`` exceeds the
tiny ones)                 overflow, no flush to 0)    dtype's range (float32:
                                                       ``‖u‖ > 3.4e38``)
``C = inf``                ``u`` unchanged             ``‖u‖`` (may be ``inf``)
any NaN or ±inf entry      zeros                       ``nan`` (any NaN entry) or
                                                       ``inf`` (only ±inf)
=========================  ==========================  =========================

A non-finite input is mapped to the zero update (which satisfies any bound) and
flagged by its non-finite norm, so callers can count it; this holds at every size,
eagerly and under ``jit``/``vmap`` (the finiteness test never relies on a float max
propagating NaN, which XLA's CPU reductions of ≥ 4,096 elements do not: see
``_safe_norm``). A finite input never produces a NaN. A finite input whose norm
overflows is clipped like any other but reports ``inf`` as its norm. ``clip`` is not
validated here (it is usually traced): a NaN ``C`` leaves the update unchanged and
``C ≤ 0`` flips or zeroes it — the public randomizers in
:mod:`ldpsim._src.privacy.noise.mechanisms` reject such concrete values.

Cost: one max-reduction (of ``|u|``, NaN read as ``inf``), one norm reduction and one
elementwise output pass per leaf (three multiplies and two selects per entry, all
fused), plus a few scalar ops.

References:
    Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Alg. 1
    (per-example clipping ``g / max(1, ‖g‖/C)``); McMahan et al., "Learning
    Differentially Private Recurrent Language Models", ICLR 2018 (flat and
    per-layer clipping of client updates, arXiv:1710.06963).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any


def _compute_dtype(leaves: list[jax.Array]) -> jnp.dtype:
    """float32, or float64 when a leaf is float64 (half-precision leaves are summed in float32)."""
    dtype = jnp.result_type(*(x.dtype for x in leaves))
    if not jnp.issubdtype(dtype, jnp.floating):
        return jnp.dtype(jnp.float32)
    return jnp.promote_types(dtype, jnp.float32)


class _Norm(NamedTuple):
    """The pieces of an overflow- and underflow-safe norm (see :func:`_safe_norm`)."""

    norm: jax.Array  # ‖u‖ (inf if it exceeds the dtype's range; NaN/inf if u is not finite)
    norm_n: jax.Array  # ‖u·2^-k‖, in [1, 4√d] (L2) or [1, 4d] (L1) when u is finite and ≥ 2^-126
    inv_scale: jax.Array  # 2^-k, a normal float
    finite: jax.Array  # every entry of u is finite


def _safe_norm(leaves: list[jax.Array], ord: int = 2) -> _Norm:
    """Global L2 (or L1) norm of ``leaves`` without overflow, and whether all entries are finite.

    The values are multiplied by ``2^-k`` (exact), where ``k`` is the binary exponent of
    ``max|u|`` (``max|u| = 1.f·2^k``) clamped to ``[minexp, -minexp]`` of the dtype
    (``[-126, 126]`` for float32), so ``2^-k`` and ``2^k`` are normal floats and the
    largest normalised magnitude lies in ``[1, 4)`` (below 1 only if ``max|u| < 2^-126``):
    no square or sum overflows for any finite input (float32 max included), and no
    reciprocal of a huge number (which XLA's ``x / s → x * (1/s)`` rewrite would flush to
    zero for ``s ≥ 2^126``) is ever formed.

    Finiteness is read from ``m = max over entries of (|u| if u is not NaN else +inf)``:
    ``m = inf`` exactly when some entry is NaN or ±inf. No NaN ever enters the max, because
    a float max reduction need not propagate NaN: XLA on CPU hands a float reduction whose
    input has ≥ 4,096 elements to YNNPACK (jaxlib 0.10; under ``vmap`` the count is over the
    whole batch, so 8 clients of 600 coordinates qualify), whose max drops NaN (``jnp.max``
    of 4,096 NaNs is ``-inf``, its initial value; of zeros with one NaN, ``0``), while below
    that size XLA's own loop returns NaN. Reading finiteness off ``max|u|`` therefore passed
    an all-NaN update of LeNet-5's size (d = 61,706) as finite, and its NaN went through the
    clip into the release; every max implementation (IEEE ``maximum``, x86 ``maxps``, a
    select) agrees on values that are not NaN. (``isnan`` is exact unless XLA's fast-math is switched on
    without honouring NaNs; its default honours them.)
    """
    dtype = _compute_dtype(leaves)

    def max_abs(x):  # max |x| with NaN read as +inf (0 for an empty leaf)
        a = jnp.abs(x.astype(dtype))
        return jnp.max(jnp.where(jnp.isnan(a), jnp.asarray(jnp.inf, dtype), a), initial=0)

    maxabs = jnp.max(jnp.stack([max_abs(x) for x in leaves]))
    finite = jnp.isfinite(maxabs)
    # k = exponent of max|u| (max|u| = 1.f·2^k), read from the bits and clamped so that
    # 2^±k are normal; the powers of two are assembled from bits too (exact, and cheaper
    # than jnp.frexp/jnp.ldexp, whose per-client scalars XLA recomputes inside the loops).
    info = jnp.finfo(dtype)
    itype = jnp.int64 if dtype == jnp.float64 else jnp.int32
    bias, nmant = -info.minexp + 1, info.nmant  # 127, 23 for float32
    biased = jax.lax.shift_right_logical(jax.lax.bitcast_convert_type(maxabs, itype), itype(nmant))
    k = jnp.clip(biased - bias, info.minexp, -info.minexp)  # [-126, 126]; non-finite: 126

    def pow2(j):  # 2^j for j in [-126, 126]: biased exponent j + 127, zero mantissa
        bits = jax.lax.shift_left((j + bias).astype(itype), itype(nmant))
        return jax.lax.bitcast_convert_type(bits, dtype)

    inv_scale = pow2(-k)
    if ord == 2:
        norm_n = jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(dtype) * inv_scale)) for x in leaves))
    else:
        norm_n = sum(jnp.sum(jnp.abs(x.astype(dtype) * inv_scale)) for x in leaves)
    # 2^k is exact, so this is ‖u‖ rounded once more; it overflows to inf only when ‖u‖ does.
    # Non-finite input (a diagnostic only; the clip reads `finite`): the sum is NaN when an
    # entry is NaN (a sum propagates NaN, inf − inf cannot occur in a sum of |·| or squares),
    # else inf; reported as NaN or inf, never as a finite number.
    bad = jnp.where(jnp.isnan(norm_n), jnp.asarray(jnp.nan, dtype), jnp.asarray(jnp.inf, dtype))
    norm = jnp.where(finite, norm_n * pow2(k), bad)
    return _Norm(norm, norm_n, inv_scale, finite)


def _clip(tree: PyTree, clip: jax.typing.ArrayLike, ord: int) -> tuple[PyTree, jax.Array]:
    return clip_checked(tree, clip, ord)[:2]


def clip_checked(tree: PyTree, clip: jax.typing.ArrayLike, ord: int = 2
                 ) -> tuple[PyTree, jax.Array, jax.Array]:
    """:func:`clip_by_global_norm` (``ord=2``) or :func:`clip_by_l1_norm` (``ord=1``), and
    whether every entry of ``tree`` is finite.

    The flag is read off the clip's own ``max|u|`` reduction (NaN counted as ``inf``, see
    ``_safe_norm``), so it costs no extra pass over the update; it equals
    ``all(isfinite(u))`` for every input.

    Returns:
        ``(clipped_tree, norm, finite)``: the first two exactly as the clip functions return
        them, ``finite`` a bool scalar (True for an empty tree).
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    leaves = [jnp.asarray(x) for x in leaves]
    if not leaves:
        return tree, jnp.zeros((), jnp.float32), jnp.bool_(True)
    n = _safe_norm(leaves, ord)
    clip = jnp.asarray(clip, dtype=n.norm.dtype)
    active = n.finite & (n.norm > clip)
    # Clipped output u·C/‖u‖ computed as ((u·2^-k) · (1/‖u·2^-k‖)) · C: each factor is a
    # normal float (2^-k ≥ 2^-126, 1/norm_n ≥ 1/(4√d), C), unlike C/‖u‖, which is subnormal
    # (flushed to 0) for huge ‖u‖. Only the output entries themselves can underflow.
    inv_norm = 1 / jnp.where(n.norm_n > 0, n.norm_n, 1)  # norm_n ≥ 1 whenever it matters

    def one(x):
        y = (((x.astype(clip.dtype) * n.inv_scale) * inv_norm) * clip).astype(x.dtype)
        y = jnp.where(active, y, x)  # inside the bound: x bit for bit (subnormals included)
        return jnp.where(n.finite, y, jnp.zeros_like(x))

    return jax.tree_util.tree_unflatten(treedef, [one(x) for x in leaves]), n.norm, n.finite


def global_norm(tree: PyTree) -> jax.Array:
    """Global L2 norm over all leaves of ``tree``.

    Overflow- and flush-safe like the clip functions: exact (to float rounding) for every
    finite input, ``inf`` only when the norm exceeds the dtype's range; NaN if any entry
    is NaN, ``inf`` if the only non-finite entries are infinities.
    """
    leaves = [jnp.asarray(x) for x in jax.tree_util.tree_leaves(tree)]
    if not leaves:
        return jnp.zeros((), jnp.float32)
    return _safe_norm(leaves).norm


def clip_by_global_norm(tree: PyTree, clip: jax.typing.ArrayLike) -> tuple[PyTree, jax.Array]:
    """Scale a pytree so that its global L2 norm is at most ``clip`` (flat clipping).

    ``u' = u · min(1, C / ‖u‖)`` with one factor for the whole tree, as in
    MindSpore Federated's LDP client and TFF's
    ``tf.clip_by_global_norm``. The direction is preserved (up to float rounding) and
    the bound holds for every finite input, float32 max included; an input already
    within the bound is returned bit for bit.

    Args:
        tree: a pytree of float arrays (one client's update).
        clip: the bound ``C > 0`` (a traced scalar is fine; not validated here).

    Returns:
        ``(clipped_tree, norm)``: the clipped tree (same structure and dtypes) and
        the pre-clip global norm ``‖u‖`` (float32, or float64 for float64 leaves;
        ``inf`` when a finite ``‖u‖`` exceeds the dtype's range; NaN/inf when the
        input is not finite, in which case ``clipped_tree`` is all zeros). See the
        module docstring table.
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
    leaves = [jnp.asarray(c, jnp.float32) for c in jax.tree_util.tree_leaves(clips)]
    return global_norm(leaves)  # overflow-safe: bounds of 1e20 and more do not square to inf
