"""DP-SGD as optax transformations, with MindArmour's micro-batch semantics.

The core is :func:`dp_aggregate`, an ``optax.GradientTransformation`` whose input
updates carry a leading axis of ``M`` per-micro-batch (or per-example) gradients,
e.g. from :func:`microbatch_grads`. One update does what MindArmour's
``DPModel`` + ``DPOptimizerClassFactory`` do per step (§2.3):

1. ``ν_j = ‖g_j‖₂`` (global norm over the whole pytree); ``β = #{j: ν_j < C_t}``.
2. ``g̃_j = g_j · min(1, C_t/ν_j)`` (:func:`ldpsim.privacy.clip_by_global_norm`,
   vmapped; a non-finite ``g_j`` becomes zero).
3. ``G = (Σ_j g̃_j + ξ) / M`` with ``ξ ~ N(0, (b·m_t)² I)``, where ``b`` is the noise
   mechanism's fixed ``norm_bound`` (MindArmour) or ``C_t`` (``noise_follows_clip``).
   The noise std on the averaged gradient is therefore ``b·m_t/M``.
4. Noise decay (AdaGaussian, §2.1): ``m_{t+1}`` = Time ``m₀/(m₀/m_t + r)``, Step
   ``(1−r)m_t``, Exp ``m_t e^{−r}``, i.e. ``m_t = m₀/(1+rt)``, ``m₀(1−r)^t``, ``m₀e^{−rt}``.
5. Adaptive clipping (§2.2): ``β̃ = β/M + N(0, σ_f²)``; Linear ``C' = C − η(β̃ − γ)``,
   Geometric ``C' = C·exp(−η(β̃ − γ))`` (no clamp, as in MindArmour).

Guarantee. The noised sum ``Σ_j g̃_j`` has L2 sensitivity ``C_t`` only when every
micro-batch is a single example (``M = B``, per-example clipping) under add/remove-one
neighbours: adding or removing the example adds or removes one clipped gradient. Whenever a
micro-batch holds more than one example (``M < B``), adding, removing or replacing one
example changes that micro-batch's clipped gradient from ``g̃`` to ``g̃'`` with
``‖g̃ − g̃'‖ ≤ 2C_t`` (both have norm ≤ C_t, and they can point in opposite directions), so
the sensitivity is ``2C_t``; under replace-one neighbours it is ``2C_t`` for every ``M``.
With ``b = C`` a step with a fixed clip bound is then the (sampled) Gaussian mechanism of
multiplier ``m_t/s``, ``s ∈ {1, 2}`` (Abadi et al. 2016, arXiv:1607.00133, Alg. 1, is the
per-example case ``s = 1``): pass ``m/s`` to :func:`ldpsim.privacy.dpsgd_epsilon`;
:class:`ldpsim.privacy.RDPMonitor` (MindArmour's arithmetic) assumes ``s = 1``.

Adaptive clipping releases more, and MindArmour accounts none of it: with
``noise_follows_clip=False`` the noise std stays ``b·m_t`` while ``C_t`` moves, so the
value's multiplier is ``b·m_t/(s·C_t)`` (§2.3 quirk); and every step releases the noisy
fraction ``β̃ = β/M + N(0, σ_f²)`` (through ``C_{t+1}``). One example changes one unit, so
``β`` by at most 1 and ``β/M`` by ``1/M`` (add/remove and replace-one alike): a Gaussian of
multiplier ``σ_f·M``, released on the same batch as the value, so the step is one Gaussian
with ``1/z² = (s·C_t/(b·m_t))² + 1/(σ_f·M)²``; ``σ_f = 0`` releases β exactly and no finite
ε holds. :mod:`ldpsim._src.fl.dpsgd.ledger` records ``C_t`` per step and accounts exactly this; the
state exposes ``clip_norm`` (``C_t``) and ``noise_multiplier`` (``m_t``) for that purpose.

All numeric hyperparameters live in the state as arrays, so a jitted train step
never recompiles when they change: build the transformation once and vary them
with ``state._replace(...)`` or vmap over states. Keys live in the state and are
split every step (as in ``optax.contrib.differentially_private_aggregate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_unit_interval,
)
from ldpsim._src.privacy.randomizers.clipping import clip_by_global_norm
from ldpsim._src.privacy.noise.mechanisms import gaussian_noise

__all__ = ["CLIP_DECAYS", "NOISE_DECAYS", "DPAggregateState", "decay_noise_multiplier",
           "dp_adam", "dp_aggregate", "dp_momentum", "dp_optimizer", "dp_sgd",
           "microbatch_grads", "noisy_sum_step", "update_clip_norm"]

PyTree = Any
NOISE_DECAYS = ("Time", "Step", "Exp")
CLIP_DECAYS = ("Linear", "Geometric")


class DPAggregateState(NamedTuple):
    """State of :func:`dp_aggregate`; every field is an array (scalars unless noted).

    Attributes:
        key: PRNG key, split at every update.
        count: number of updates done (int32).
        noise_multiplier: ``m_t`` used by the next update.
        initial_noise_multiplier: ``m₀`` (used by the Time rule).
        noise_decay_rate: ``r`` of the AdaGaussian rule.
        noise_norm_bound: ``b``, the noise mechanism's norm bound.
        clip_norm: ``C_t`` used by the next update.
        clip_learning_rate: ``η`` of the adaptive clip rule.
        target_unclipped_quantile: ``γ`` of the adaptive clip rule.
        fraction_stddev: ``σ_f``, std of the noise on the unclipped fraction.
        unclipped_fraction: ``β/M`` of the last update (before its noise), 0 initially.
    """

    key: jax.Array
    count: jax.Array
    noise_multiplier: jax.Array
    initial_noise_multiplier: jax.Array
    noise_decay_rate: jax.Array
    noise_norm_bound: jax.Array
    clip_norm: jax.Array
    clip_learning_rate: jax.Array
    target_unclipped_quantile: jax.Array
    fraction_stddev: jax.Array
    unclipped_fraction: jax.Array


def decay_noise_multiplier(policy: str | None, multiplier: jax.typing.ArrayLike,
                           initial: jax.typing.ArrayLike, rate: jax.typing.ArrayLike) -> jax.Array:
    """One step of MindArmour's ``_MechanismsParamsUpdater``.

    ``None``: unchanged. ``"Time"``: ``m₀/(m₀/m + r)``. ``"Step"``: ``(1 − r)·m``.
    ``"Exp"``: ``m·e^{−r}``. Iterating from ``m₀`` gives ``m₀/(1 + r t)``,
    ``m₀(1 − r)^t`` and ``m₀ e^{−r t}``.
    """
    m = jnp.asarray(multiplier)
    if policy is None:
        return m
    check_choice("noise_decay", policy, NOISE_DECAYS)
    if policy == "Time":
        safe = jnp.where(m > 0, m, 1.0)  # m₀ = 0 (no noise) stays 0 instead of 0/0
        return jnp.where(m > 0, initial / (initial / safe + rate), m)
    if policy == "Step":
        return (1.0 - rate) * m
    return m * jnp.exp(-rate)


def update_clip_norm(policy: str, clip_norm: jax.typing.ArrayLike,
                     unclipped_fraction: jax.typing.ArrayLike, learning_rate: jax.typing.ArrayLike,
                     target_unclipped_quantile: jax.typing.ArrayLike) -> jax.Array:
    """MindArmour's adaptive clip rule (``AdaClippingWithGaussianRandom``).

    ``"Linear"``: ``C − η(β − γ)``; ``"Geometric"``: ``C·exp(−η(β − γ))``, where
    ``β`` is the (already noised) unclipped fraction. No clamp to positive values.
    Example: β = 0.5, C = 1, η = 0.001, γ = 0.9 gives 1.0004 (Linear) and
    e^{0.0004} = 1.00040008 (Geometric).
    """
    check_choice("clip_decay", policy, CLIP_DECAYS)
    step = learning_rate * (unclipped_fraction - target_unclipped_quantile)
    if policy == "Linear":
        return clip_norm - step
    return clip_norm * jnp.exp(-step)


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _checked(name: str, value: Any, check: Callable[[str, Any], float]) -> Any:
    """Validate host values; traced values (e.g. under inject_hyperparams) pass through."""
    return check(name, value) if _is_concrete(value) and jnp.ndim(value) == 0 else value


def dp_aggregate(
    norm_bound: jax.typing.ArrayLike = 1.0,
    noise_multiplier: jax.typing.ArrayLike = 1.0,
    *,
    key: jax.Array | int,
    noise_decay: str | None = None,
    noise_decay_rate: jax.typing.ArrayLike = 6e-6,
    noise_norm_bound: jax.typing.ArrayLike | None = None,
    noise_follows_clip: bool = False,
    clip_decay: str | None = None,
    clip_learning_rate: jax.typing.ArrayLike = 0.001,
    target_unclipped_quantile: jax.typing.ArrayLike = 0.9,
    fraction_stddev: jax.typing.ArrayLike = 0.01,
) -> optax.GradientTransformation:
    """Clip per micro-batch, sum, add Gaussian noise, average (MindArmour DPModel, §2.3).

    The input ``updates`` must have a leading axis of size ``M`` (micro-batches
    or examples) on every leaf; the output has the parameter shapes. Must be the
    first transformation of a chain (see :func:`dp_optimizer`).

    Args:
        norm_bound: the initial clip bound ``C₀ > 0`` (DPModel ``norm_bound``).
        noise_multiplier: ``m₀ ≥ 0``, noise std / ``b`` on the sum (0 disables noise).
        key: PRNG key (or int seed) for the noise; stored in the state.
        noise_decay: None (MindArmour ``'Gaussian'``) or ``'Time'``, ``'Step'``,
            ``'Exp'`` (``'AdaGaussian'``).
        noise_decay_rate: ``r`` in [0, 1] (MindArmour's mechanism default 6e-6).
        noise_norm_bound: ``b``, the noise mechanism's ``norm_bound`` (default: ``norm_bound``).
        noise_follows_clip: if True, ``b = C_t`` every step (keeps the effective
            multiplier at ``m_t`` under adaptive clipping; not MindArmour's behaviour).
        clip_decay: None (fixed ``C``), ``'Linear'`` or ``'Geometric'``.
        clip_learning_rate: ``η`` (default 0.001).
        target_unclipped_quantile: ``γ`` in [0, 1] (default 0.9).
        fraction_stddev: ``σ_f ≥ 0`` (default 0.01).

    Returns:
        An ``optax.GradientTransformation`` with state :class:`DPAggregateState`.

    Raises:
        LdpsimError: for out-of-range hyperparameters or unknown policies, and at
            trace time if the leaves do not share one leading axis.
    """
    if noise_decay is not None:
        check_choice("noise_decay", noise_decay, NOISE_DECAYS)
    if clip_decay is not None:
        check_choice("clip_decay", clip_decay, CLIP_DECAYS)
    norm_bound = _checked("norm_bound", norm_bound, check_positive)
    noise_multiplier = _checked("noise_multiplier", noise_multiplier, check_nonnegative)
    noise_decay_rate = _checked("noise_decay_rate", noise_decay_rate, check_unit_interval)
    noise_norm_bound = norm_bound if noise_norm_bound is None else _checked(
        "noise_norm_bound", noise_norm_bound, check_positive)
    clip_learning_rate = _checked("clip_learning_rate", clip_learning_rate, check_nonnegative)
    target_unclipped_quantile = _checked("target_unclipped_quantile", target_unclipped_quantile,
                                         check_unit_interval)
    fraction_stddev = _checked("fraction_stddev", fraction_stddev, check_nonnegative)
    if isinstance(key, int):
        key = jax.random.key(key)

    def init_fn(params: PyTree) -> DPAggregateState:
        del params
        f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
        return DPAggregateState(
            key=jnp.array(key, copy=True), count=jnp.zeros((), jnp.int32),
            noise_multiplier=f32(noise_multiplier), initial_noise_multiplier=f32(noise_multiplier),
            noise_decay_rate=f32(noise_decay_rate), noise_norm_bound=f32(noise_norm_bound),
            clip_norm=f32(norm_bound), clip_learning_rate=f32(clip_learning_rate),
            target_unclipped_quantile=f32(target_unclipped_quantile),
            fraction_stddev=f32(fraction_stddev), unclipped_fraction=f32(0.0))

    def update_fn(updates: PyTree, state: DPAggregateState, params: PyTree = None):
        del params
        leaves = jax.tree_util.tree_leaves(updates)
        sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in leaves}
        if len(sizes) != 1 or None in sizes:
            raise LdpsimError("dp_aggregate expects every leaf of the updates to have the same "
                              f"leading micro-batch axis; got leading sizes {sorted(map(str, sizes))}")
        num = sizes.pop()
        clip = state.clip_norm
        clipped, norms = jax.vmap(clip_by_global_norm, in_axes=(0, None))(updates, clip)
        unclipped = jnp.mean((norms < clip).astype(jnp.float32))
        total = jax.tree_util.tree_map(lambda x: jnp.sum(x, axis=0), clipped)
        return noisy_sum_step(total, unclipped, num, state, noise_follows_clip=noise_follows_clip,
                              clip_decay=clip_decay, noise_decay=noise_decay)

    return optax.GradientTransformation(init_fn, update_fn)


def noisy_sum_step(total: PyTree, unclipped: jax.typing.ArrayLike, divisor: Any,
                   state: DPAggregateState, *, noise_follows_clip: bool = False,
                   clip_decay: str | None = None, noise_decay: str | None = None
                   ) -> tuple[PyTree, DPAggregateState]:
    """The release of one DP step from the clipped sum: ``(total + N(0, (b·m_t)²))/divisor``
    and the next :class:`DPAggregateState` (key split, count, adaptive clip from the noisy
    ``unclipped`` fraction, noise decay). Shared by :func:`dp_aggregate` and the Poisson
    trainer (:func:`ldpsim._src.fl.dpsgd.steps.presummed_dp_aggregate`), so both follow one rule."""
    clip = state.clip_norm
    key, noise_key, frac_key = jax.random.split(state.key, 3)
    bound = clip if noise_follows_clip else state.noise_norm_bound
    noise = gaussian_noise(noise_key, total, bound * state.noise_multiplier)
    out = jax.tree_util.tree_map(lambda g, n: (g + n) / divisor, total, noise)
    new_clip = clip
    if clip_decay is not None:
        noisy_fraction = unclipped + state.fraction_stddev * jax.random.normal(frac_key)
        new_clip = update_clip_norm(clip_decay, clip, noisy_fraction,
                                    state.clip_learning_rate, state.target_unclipped_quantile)
    new_state = state._replace(
        key=key, count=state.count + 1, clip_norm=new_clip, unclipped_fraction=unclipped,
        noise_multiplier=decay_noise_multiplier(noise_decay, state.noise_multiplier,
                                                state.initial_noise_multiplier,
                                                state.noise_decay_rate))
    return out, new_state


def microbatch_grads(loss_fn: Callable[..., jax.Array], params: PyTree, batch: PyTree,
                     micro_batches: int, *args: Any) -> tuple[PyTree, jax.Array]:
    """Per-micro-batch gradients of a mean loss, as MindArmour's DPModel computes them.

    The batch (every leaf with leading axis ``B``) is split into ``M`` contiguous
    chunks of ``B/M`` (``mindspore.ops.Split(0, M)``); ``g_j = ∇ loss_fn(params,
    chunk_j, *args)`` where ``loss_fn`` returns the *mean* loss of its chunk.
    ``M = B`` gives per-example gradients.

    Returns:
        ``(grads, loss)``: gradients with a leading axis ``M`` on every leaf, and the
        mean of the chunk losses (MindArmour's reported loss).

    Raises:
        LdpsimError: if ``B`` is not divisible by ``M`` or leaves disagree on ``B``.
    """
    m = check_positive_int("micro_batches", micro_batches)
    sizes = {jnp.shape(x)[0] for x in jax.tree_util.tree_leaves(batch)}
    if len(sizes) != 1:
        raise LdpsimError(f"every leaf of batch must share the batch axis; got sizes {sorted(sizes)}")
    b = sizes.pop()
    if b % m:
        raise LdpsimError(f"batch size {b} must be divisible by micro_batches={m}")
    chunks = jax.tree_util.tree_map(lambda x: x.reshape((m, b // m) + x.shape[1:]), batch)
    grad_fn = jax.value_and_grad(loss_fn)
    losses, grads = jax.vmap(lambda c: grad_fn(params, c, *args))(chunks)
    return grads, jnp.mean(losses)


def dp_optimizer(optimizer: optax.GradientTransformation, **dp_kwargs: Any
                 ) -> optax.GradientTransformation:
    """``optax.chain(dp_aggregate(**dp_kwargs), optimizer)``: any optax optimizer made DP.

    This is MindArmour's ``DPOptimizerClassFactory`` (noise, division by M and the
    decay updater before the wrapped optimizer) together with DPModel's clipping.
    The DP state is ``opt_state[0]``.
    """
    return optax.chain(dp_aggregate(**dp_kwargs), optimizer)


def dp_sgd(learning_rate: optax.ScalarOrSchedule, **dp_kwargs: Any) -> optax.GradientTransformation:
    """DP-SGD: :func:`dp_aggregate` then ``optax.sgd(learning_rate)``."""
    return dp_optimizer(optax.sgd(learning_rate), **dp_kwargs)


def dp_momentum(learning_rate: optax.ScalarOrSchedule, momentum: float = 0.9, *,
                nesterov: bool = False, **dp_kwargs: Any) -> optax.GradientTransformation:
    """DP Momentum (MindSpore ``nn.Momentum``: ``v = μv + g``, ``p −= lr·v``; ``optax.sgd`` with momentum)."""
    return dp_optimizer(optax.sgd(learning_rate, momentum=momentum, nesterov=nesterov),
                        **dp_kwargs)


def dp_adam(learning_rate: optax.ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
            eps: float = 1e-8, **dp_kwargs: Any) -> optax.GradientTransformation:
    """DP Adam: :func:`dp_aggregate` then ``optax.adam``."""
    return dp_optimizer(optax.adam(learning_rate, b1=b1, b2=b2, eps=eps), **dp_kwargs)
