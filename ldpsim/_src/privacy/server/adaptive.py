"""Adaptive clip bounds as stateful rules: ``(init, update)`` pairs of pure functions.

Each rule is a :class:`NamedTuple` of two pure, jittable functions in the style of
optax: ``state = rule.init()`` and ``state = rule.update(state, ...)``. States are
NamedTuples of arrays, so they live inside ``jit``/``lax.scan`` and the clip bound
is a traced value (changing it never recompiles).

Two rules:

* :func:`mindspore_clip` — MindSpore Federated's ``dpNormClipAdapt``: ``C_1 = 0.05`` (hard-coded in the Java client);
  after server iteration ``t`` the client computes ``g_t = ‖W_{t+1} − W_t‖₂`` (the change
  of the *noisy* global model, which is public, so adapting costs no privacy) and
  ``candidate = dp_norm_clip · g_t``. In iteration 1 it overwrites ``C ← candidate``;
  afterwards ``C ← min(C, candidate)`` (running minimum). ``running_min=False`` gives the
  older ``mindspore-ai/mindspore`` lite client, which overwrites every round. The state
  may hold one bound per client (shape ``[N]``): a client updates its bound only in the
  rounds it takes part in, and one that misses iteration 1 never does the overwrite.
* :func:`quantile_clip` — Andrew, Thakkar, McMahan & Ramaswamy, "Differentially Private
  Learning with Adaptive Clipping", NeurIPS 2021 (arXiv:1905.03871), Alg. 1 with the
  geometric update, as TFF ``DifferentiallyPrivateFactory.gaussian_adaptive``
 : each client reports ``b_i = 1[ν_i ≤ C] − ½`` (sensitivity ½), the
  server releases ``b̄ = (Σ b_i + N(0, σ_b²))/m + ½`` clamped to ``[0, 1]`` and sets
  ``C ← C·exp(−η(b̄ − γ))``. Defaults: ``C_0 = 0.1``, ``γ = 0.5``, ``η = 0.2``,
  ``σ_b = m/20``. :func:`adaptive_noise_split` gives the value-noise multiplier ``z_Δ``
  such that the two Gaussian releases together cost what one release with ``z`` costs.
"""

from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src._checks import (
    LdpsimError,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_unit_interval,
)
from ldpsim._src.privacy.randomizers.clipping import global_norm

__all__ = [
    "MINDSPORE_INITIAL_CLIP", "AdaptiveClip", "MindSporeClipState", "QuantileClipState",
    "QuantileClipInfo", "adaptive_noise_split", "global_change_norm", "mindspore_clip",
    "quantile_bits", "quantile_clip",
]

#: ``dpNormClipAdapt`` of MindSpore Federated's Java client (``FLLiteClient.java``); not
#: sent by the server, so every client starts from it.
MINDSPORE_INITIAL_CLIP = 0.05


class AdaptiveClip(NamedTuple):
    """A clip-bound rule: ``init() -> state`` and ``update(state, ...) -> state``."""

    init: Callable
    update: Callable


def _f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _checked(name: str, value, check):
    """Validate ``value`` when it is concrete; pass traced values through unchanged."""
    return value if isinstance(value, jax.core.Tracer) else check(name, value)


# ----------------------------------------------------------------------------- MindSpore


class MindSporeClipState(NamedTuple):
    """State of :func:`mindspore_clip`.

    Attributes:
        clip: ``C_t``, the bound the next round uses (float32; scalar, or one per client).
        iteration: the 1-based server iteration number of the next round (int32 scalar).
    """

    clip: jax.Array
    iteration: jax.Array


def global_change_norm(old_params, new_params) -> jax.Array:
    """``g_t = ‖W_t − W_{t+1}‖₂`` over all leaves (``Client.getDpWeightNorm``)."""
    return global_norm(jax.tree_util.tree_map(lambda a, b: jnp.asarray(a) - jnp.asarray(b),
                                              old_params, new_params))


def mindspore_clip(dp_norm_clip: float = 1.0, *, initial_clip: float = MINDSPORE_INITIAL_CLIP,
                   running_min: bool = True, num_clients: int | None = None) -> AdaptiveClip:
    """MindSpore Federated's adaptive clip bound.

    Args:
        dp_norm_clip: the server's ``dp_norm_clip`` (MindSpore: > 0, default 1.0,
            "suggested 0.5~2"); a *multiplier* of ``g_t``, not a clip norm. May be traced.
        initial_clip: ``C_1`` (MindSpore hard-codes 0.05).
        running_min: True (current client, default): overwrite after iteration 1, then
            running minimum. False: overwrite after every round (older lite client).
        num_clients: None for one shared bound (a scalar state); N for one bound per
            client (state shape ``[N]``), as in MindSpore where each device keeps its own.

    Returns:
        An :class:`AdaptiveClip` with ``init() -> MindSporeClipState`` and
        ``update(state, change_norm, participated=True) -> MindSporeClipState``, where
        ``change_norm`` is ``g_t`` of the round just run (:func:`global_change_norm`) and
        ``participated`` (bool, scalar or ``[N]``) marks the clients that ran
        ``updateDpNormClip`` after it (only they change their bound).
    """
    _checked("dp_norm_clip", dp_norm_clip, check_positive)
    _checked("initial_clip", initial_clip, check_positive)
    shape = () if num_clients is None else (check_positive_int("num_clients", num_clients),)

    def init() -> MindSporeClipState:
        return MindSporeClipState(jnp.full(shape, initial_clip, jnp.float32),
                                  jnp.ones((), jnp.int32))

    def update(state: MindSporeClipState, change_norm, participated=True
               ) -> MindSporeClipState:
        candidate = _f32(dp_norm_clip) * _f32(change_norm)
        overwrite = jnp.logical_or(state.iteration == 1, not running_min)
        new = jnp.where(overwrite, candidate, jnp.minimum(state.clip, candidate))
        clip = jnp.where(jnp.asarray(participated, bool), new, state.clip)
        return MindSporeClipState(clip.astype(jnp.float32), state.iteration + 1)

    return AdaptiveClip(init, update)


# ----------------------------------------------------------------------------- quantile


class QuantileClipState(NamedTuple):
    """State of :func:`quantile_clip`: the current clip bound ``C`` (float32 scalar)."""

    clip: jax.Array


class QuantileClipInfo(NamedTuple):
    """What a quantile update released: the noisy unclipped fraction ``b̄`` (clamped)."""

    unclipped_fraction: jax.Array


def adaptive_noise_split(noise_multiplier: float, clients_per_round: float,
                         clipped_count_stddev: float | None = None) -> tuple[float, float]:
    """Split a noise multiplier between the value sum and the clipped-count query.

    TFF ``adaptive_clip_noise_params``: with ``σ_b = m/20`` by default,
    ``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)``, so ``1/z² = 1/z_Δ² + 1/(2σ_b)²``: the composition
    of the value release (noise multiplier ``z_Δ``) and the count release (std ``σ_b`` on
    a sensitivity-½ sum, multiplier ``2σ_b``) is a Gaussian mechanism with multiplier
    ``z`` (RDP/zCDP add in ``1/z²``). ``z = 0`` gives ``(0, 0)``.

    The split holds for both neighbouring relations: under add/remove one user the value
    sum moves by C and the shifted-bit sum by ½; under replace one user (fixed-size
    cohorts) by 2C and 1 — both sensitivities double, so the pair composes to a Gaussian
    of multiplier ``z/2``, which is what
    :func:`ldpsim.privacy.dpfedavg_epsilon` accounts for ``sampling="fixed"``.

    Args:
        noise_multiplier: the overall z ≥ 0.
        clients_per_round: m > 0 (the expected cohort).
        clipped_count_stddev: σ_b; None for TFF's default ``0.05·m`` (0 when z = 0).

    Returns:
        ``(value_noise_multiplier z_Δ, clipped_count_stddev σ_b)``.

    Raises:
        LdpsimError: when ``z ≥ 2σ_b`` (no value budget is left), as TFF's ValueError.
    """
    z = check_nonnegative("noise_multiplier", noise_multiplier)
    m = check_positive("clients_per_round", clients_per_round)
    if z == 0.0:
        return 0.0, 0.0 if clipped_count_stddev is None else float(clipped_count_stddev)
    sb = 0.05 * m if clipped_count_stddev is None else check_positive(
        "clipped_count_stddev", clipped_count_stddev)
    if z >= 2.0 * sb:
        raise LdpsimError(
            f"noise_multiplier must be < 2·clipped_count_stddev = {2 * sb!r} for adaptive "
            f"clipping, got {z!r}; raise clients_per_round or clipped_count_stddev")
    z_value = (z ** -2 - (2.0 * sb) ** -2) ** -0.5
    if z_value / z >= 2.0:
        warnings.warn(f"adaptive clipping raises the value noise multiplier from {z} to "
                      f"{z_value} (factor >= 2); consider a larger clipped_count_stddev",
                      stacklevel=2)
    return float(z_value), float(sb)


def quantile_bits(norms: jax.Array, clip: jax.typing.ArrayLike,
                  mask: jax.Array | None = None) -> jax.Array:
    """Shifted bits ``b_i = 1[ν_i ≤ C] − ½`` (0 where ``mask`` is False or ν not finite)."""
    norms = _f32(norms)
    bits = jnp.where(norms <= _f32(clip), 0.5, -0.5)
    keep = jnp.isfinite(norms) if mask is None else (jnp.asarray(mask, bool) & jnp.isfinite(norms))
    return jnp.where(keep, bits, 0.0)


def quantile_clip(*, clients_per_round: float, initial_clip: float = 0.1,
                  target_quantile: float = 0.5, learning_rate: float = 0.2,
                  clipped_count_stddev: float = 0.0, geometric: bool = True) -> AdaptiveClip:
    """Andrew et al. (2021) quantile-tracking clip bound, TFF ``gaussian_adaptive`` defaults.

    One update (Alg. 1; TFF ``QuantileEstimatorQuery`` + ``NormalizedQuery``)::

        b̄ = clamp((Σ_i b_i + N(0, σ_b²)) / m + ½, 0, 1)
        C ← C · exp(−η (b̄ − γ))          (geometric)   or   max(C − η (b̄ − γ), 0)

    with the fixed denominator ``m = clients_per_round``. If every client is unclipped
    (``b̄ = 1``) C shrinks by ``e^{−η(1−γ)}``; if every client is clipped it grows by
    ``e^{ηγ}`` — so C tracks the γ-quantile of the update norms.

    Args:
        clients_per_round: m > 0, the denominator. Every argument may be a traced array
            inside ``jit``; concrete values are checked.
        initial_clip: C₀ > 0 (TFF: 0.1).
        target_quantile: γ in [0, 1] (TFF: 0.5).
        learning_rate: η ≥ 0 (TFF: 0.2).
        clipped_count_stddev: σ_b ≥ 0 (see :func:`adaptive_noise_split`; 0 = no noise).
        geometric: the geometric update (default, TFF) or the arithmetic one.

    Returns:
        An :class:`AdaptiveClip` with ``init() -> QuantileClipState`` and
        ``update(state, key, bit_sum) -> (QuantileClipState, QuantileClipInfo)`` where
        ``bit_sum = Σ_i b_i`` over the round's clients (:func:`quantile_bits`, summed).
    """
    m = _checked("clients_per_round", clients_per_round, check_positive)
    c0 = _checked("initial_clip", initial_clip, check_positive)
    gamma = _checked("target_quantile", target_quantile, check_unit_interval)
    eta = _checked("learning_rate", learning_rate, check_nonnegative)
    sb = _checked("clipped_count_stddev", clipped_count_stddev, check_nonnegative)

    def init() -> QuantileClipState:
        return QuantileClipState(_f32(c0))

    def update(state: QuantileClipState, key: jax.Array, bit_sum: jax.typing.ArrayLike
               ) -> tuple[QuantileClipState, QuantileClipInfo]:
        noisy = _f32(bit_sum) + _f32(sb) * jax.random.normal(key, (), jnp.float32)
        frac = jnp.clip(noisy / _f32(m) + 0.5, 0.0, 1.0)
        if geometric:
            clip = state.clip * jnp.exp(-_f32(eta) * (frac - _f32(gamma)))
        else:
            clip = jnp.maximum(state.clip - _f32(eta) * (frac - _f32(gamma)), 0.0)
        return QuantileClipState(clip), QuantileClipInfo(frac)

    return AdaptiveClip(init, update)
