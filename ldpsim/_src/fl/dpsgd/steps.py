"""The jitted epoch kernels of centralised DP-SGD (one ``lax.scan`` of optimizer steps per
epoch, for shuffled and for Poisson-sampled batches) and the DP optimizer in front of
SGD / Momentum / Adam (:mod:`ldpsim._src.fl.dpsgd.aggregate`)."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax import lax

from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.fl.dpsgd.batches import poisson_sample
from ldpsim._src.fl.dpsgd.config import DpsgdConfig
from ldpsim._src.fl.dpsgd import aggregate
from ldpsim._src.privacy.randomizers.clipping import clip_by_global_norm

__all__ = ["make_epoch_fn", "make_optimizer", "make_poisson_epoch_fn", "presummed_dp_aggregate"]


def make_optimizer(config: DpsgdConfig, key: jax.Array, *, presummed_divisor: int | None = None
                   ) -> optax.GradientTransformation:
    """The optimizer of ``config``: SGD / Momentum / Adam, behind the DP aggregation with DP
    (:func:`ldpsim.privacy.dp_optimizer`, or :func:`presummed_dp_aggregate` with
    ``presummed_divisor`` for units the epoch kernel clips and sums itself); the noise is
    keyed by ``key``."""
    base = {"sgd": lambda: optax.sgd(config.learning_rate),
            "momentum": lambda: optax.sgd(config.learning_rate, momentum=config.momentum),
            "adam": lambda: optax.adam(config.learning_rate)}[config.optimizer]()
    if not config.dp:
        return base
    kwargs = dict(
        norm_bound=config.norm_bound, noise_multiplier=config.noise_multiplier, key=key,
        noise_decay=config.noise_decay if config.noise_mechanism == "AdaGaussian" else None,
        noise_decay_rate=config.noise_decay_rate, noise_norm_bound=config.noise_norm_bound,
        noise_follows_clip=config.noise_follows_clip, clip_decay=config.clip_mechanism,
        clip_learning_rate=config.clip_learning_rate,
        target_unclipped_quantile=config.target_unclipped_quantile,
        fraction_stddev=config.fraction_stddev)
    if presummed_divisor is not None:
        return optax.chain(presummed_dp_aggregate(presummed_divisor, **kwargs), base)
    return aggregate.dp_optimizer(base, **kwargs)


def presummed_dp_aggregate(divisor: int, **dp_kwargs: Any) -> optax.GradientTransformation:
    """:func:`ldpsim.privacy.dp_aggregate` for units clipped and summed by the caller.

    ``update((total, unclipped_count), state)``: ``total`` is ``Σ_j clip(g_j, C_t)`` over a
    variable number of units (``C_t = state.clip_norm``) and ``unclipped_count`` the number
    of them with ``‖g_j‖ < C_t``; returns ``(total + N(0, (b·m_t)²)) / divisor`` and the
    next state, with ``unclipped_fraction = unclipped_count / divisor``. Same state, key
    schedule, noise, clip and decay rules as ``dp_aggregate`` (which is this with
    ``divisor`` = the number of units, all valid); used for Poisson batches with
    per-example clipping, where ``divisor`` is the expected batch size.
    """
    divisor = check_positive_int("divisor", divisor)
    inner = aggregate.dp_aggregate(**dp_kwargs)
    rules = dict(noise_follows_clip=bool(dp_kwargs.get("noise_follows_clip", False)),
                 clip_decay=dp_kwargs.get("clip_decay"), noise_decay=dp_kwargs.get("noise_decay"))

    def update_fn(updates, state, params=None):
        del params
        total, unclipped_count = updates
        unclipped = jnp.asarray(unclipped_count, jnp.float32) / divisor
        return aggregate.noisy_sum_step(total, unclipped, divisor, state, **rules)

    return optax.GradientTransformation(inner.init, update_fn)


def _cross_entropy(apply_fn: Callable) -> Callable:
    def loss_fn(p, batch):
        xb, yb = batch
        return optax.losses.softmax_cross_entropy_with_integer_labels(apply_fn(p, xb), yb).mean()

    return loss_fn


def _dp_record(opt_state: Any) -> dict[str, jax.Array]:
    """The clip bound and noise multiplier the next update uses (empty without DP state)."""
    if isinstance(opt_state, tuple) and opt_state and isinstance(opt_state[0],
                                                                 aggregate.DPAggregateState):
        return {"clip_norm": opt_state[0].clip_norm,
                "noise_multiplier": opt_state[0].noise_multiplier}
    return {}


def make_epoch_fn(apply_fn: Callable, optimizer: optax.GradientTransformation, *,
                  batch_size: int, micro_batches: int | None) -> Callable:
    """Shuffle sampling: ``epoch(params, opt_state, x, y, perm) -> (params, opt_state, losses,
    dp_trace)``.

    Pure, jittable. ``perm`` is ``int32[steps, batch_size]`` row indices; one optimizer
    step per row of ``perm`` inside a ``lax.scan``. With ``micro_batches`` (DP), the
    gradients are those of the M contiguous chunks' mean losses
    (:func:`ldpsim.privacy.microbatch_grads`) and ``optimizer`` must start with
    :func:`~ldpsim.privacy.dp_aggregate`; the loss is the mean of the chunk losses.
    Without, the gradient is that of the batch mean loss. ``dp_trace``: with a DP state
    (``opt_state[0]``), ``{"clip_norm": f32[steps], "noise_multiplier": f32[steps]}``, the
    ``C_t`` and ``m_t`` each step used (what the accountant needs); else ``{}``.
    """
    loss_fn = _cross_entropy(apply_fn)

    def epoch(params, opt_state, x, y, perm):
        if perm.ndim != 2 or perm.shape[1] != batch_size:
            raise LdpsimError(f"perm must be [steps, batch_size={batch_size}], got {perm.shape}")

        def step(carry, idx):
            p, s = carry
            batch = (x[idx], y[idx])
            if micro_batches is None:
                loss, grads = jax.value_and_grad(loss_fn)(p, batch)
            else:
                grads, loss = aggregate.microbatch_grads(loss_fn, p, batch, micro_batches)
            record = _dp_record(s)
            updates, s = optimizer.update(grads, s, p)
            return (optax.apply_updates(p, updates), s), (loss, record)

        (params, opt_state), (losses, trace) = lax.scan(step, (params, opt_state), perm)
        return params, opt_state, losses, trace

    return epoch


def make_poisson_epoch_fn(apply_fn: Callable, optimizer: optax.GradientTransformation, *,
                          num_train: int, batch_size: int, micro_batches: int | None,
                          capacity: int) -> Callable:
    """Poisson sampling: ``epoch(params, opt_state, x, y, keys) -> (params, opt_state, losses,
    dp_trace)``.

    Pure, jittable; one optimizer step per key of ``keys`` (``[steps]``) inside a
    ``lax.scan``. Step with key ``k``: the batch is :func:`poisson_sample` ``(k, n, B)``
    (``n = num_train = x.shape[0]``); its ``count`` row indices (ascending) are processed
    in ``ceil(count / capacity)`` blocks of ``capacity`` rows with a validity mask, so no
    sampled row is ever dropped. Gradients (module docstring):

    * ``micro_batches`` None (no DP): ``∇ Σ_{i sampled} ℓ_i / B``; ``optimizer`` is plain.
    * ``micro_batches == batch_size``: per-example gradients clipped to ``C_t``, summed
      (and the unclipped ones counted) over the blocks; ``optimizer`` must start with
      :func:`presummed_dp_aggregate` with ``divisor = B``.
    * otherwise: ``M`` chunk units ``u_j = Σ_{sampled i, i mod M = j} ∇ℓ_i / (B/M)``
      (accumulated over the blocks before any clipping); ``optimizer`` must start with
      :func:`~ldpsim.privacy.dp_aggregate` (clip, sum, noise, divide by M).

    An empty chunk is a zero unit (counted as unclipped by adaptive clipping, as in
    :func:`ldpsim._src.fl.dpsgd.client.dp_local_update`). ``losses[t]`` is the mean loss over step
    t's sampled rows (0 for an empty batch); ``dp_trace`` as in :func:`make_epoch_fn`.
    """
    n = check_positive_int("num_train", num_train)
    B = check_positive_int("batch_size", batch_size)
    K = check_positive_int("capacity", capacity)
    if micro_batches is not None:
        M = check_positive_int("micro_batches", micro_batches)
        if B % M:
            raise LdpsimError(f"batch_size ({B}) must be a multiple of micro_batches, got {M}")
    per_example = micro_batches == B
    padded = -(-n // K) * K  # every block [t·K, t·K + K) of the index list is in range

    def row_loss(p, xi, yi):
        logits = apply_fn(p, xi[None])
        return optax.losses.softmax_cross_entropy_with_integer_labels(logits, yi[None])[0]

    row_grads = jax.vmap(jax.value_and_grad(row_loss), in_axes=(None, 0, 0))
    zeros_like = lambda tree: jax.tree_util.tree_map(jnp.zeros_like, tree)  # noqa: E731

    def masked(tree, valid):
        return jax.tree_util.tree_map(
            lambda g: jnp.where(valid.reshape((-1,) + (1,) * (g.ndim - 1)), g, 0.0), tree)

    def block(order, count, t):
        """Block t of the sampled rows: K row indices and which of them are sampled rows."""
        start = t * K
        idx = lax.dynamic_slice(order, (start,), (K,))
        valid = start + jnp.arange(K, dtype=jnp.int32) < count
        return idx, valid

    def plain_grads(p, s, x, y, order, count):
        """No DP: ``(∇ Σ_{i sampled} ℓ_i / B, Σ ℓ_i)``."""
        def body(t, acc):
            idx, valid = block(order, count, t)

            def total_loss(q):
                ce = optax.losses.softmax_cross_entropy_with_integer_labels(
                    apply_fn(q, x[idx]), y[idx])
                return jnp.sum(jnp.where(valid, ce, 0.0))

            loss, g = jax.value_and_grad(total_loss)(p)
            return (jax.tree_util.tree_map(jnp.add, acc[0], g), acc[1] + loss)

        grads, loss_sum = lax.fori_loop(0, (count + K - 1) // K, body,
                                        (zeros_like(p), jnp.zeros((), jnp.float32)))
        return jax.tree_util.tree_map(lambda g: g / B, grads), loss_sum

    def per_example_grads(p, s, x, y, order, count):
        """Per-example clipping: ``((Σ clip(∇ℓ_i, C_t), #unclipped), Σ ℓ_i)``."""
        clip = s[0].clip_norm

        def body(t, acc):
            idx, valid = block(order, count, t)
            losses, g = row_grads(p, x[idx], y[idx])
            clipped, norms = jax.vmap(clip_by_global_norm, in_axes=(0, None))(g, clip)
            clipped = masked(clipped, valid)
            total = jax.tree_util.tree_map(lambda a, c: a + jnp.sum(c, axis=0),
                                           acc[0], clipped)
            return (total, acc[1] + jnp.sum(valid & (norms < clip), dtype=jnp.int32),
                    acc[2] + jnp.sum(jnp.where(valid, losses, 0.0)))

        total, unclipped, loss_sum = lax.fori_loop(
            0, (count + K - 1) // K, body,
            (zeros_like(p), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)))
        return (total, unclipped), loss_sum

    def chunk_grads(p, s, x, y, order, count):
        """M chunk units ``u_j = Σ_{sampled i, i mod M = j} ∇ℓ_i / (B/M)``, and Σ ℓ_i."""
        chunk_rows = B // M

        def body(t, acc):
            idx, valid = block(order, count, t)
            losses, g = row_grads(p, x[idx], y[idx])
            seg = idx % M
            units = jax.tree_util.tree_map(
                lambda a, gg: a + jax.ops.segment_sum(gg, seg, num_segments=M),
                acc[0], masked(g, valid))
            return units, acc[1] + jnp.sum(jnp.where(valid, losses, 0.0))

        unit0 = jax.tree_util.tree_map(lambda a: jnp.zeros((M,) + a.shape, a.dtype), p)
        units, loss_sum = lax.fori_loop(0, (count + K - 1) // K, body,
                                        (unit0, jnp.zeros((), jnp.float32)))
        return jax.tree_util.tree_map(lambda u: u / chunk_rows, units), loss_sum

    unit_grads = (plain_grads if micro_batches is None else
                  per_example_grads if per_example else chunk_grads)

    def epoch(params, opt_state, x, y, keys):
        if x.shape[0] != n:
            raise LdpsimError(f"x must have num_train={n} rows, got {x.shape[0]}")

        def step(carry, key):
            p, s = carry
            include = poisson_sample(key, n, B)
            count = jnp.sum(include, dtype=jnp.int32)
            order = jnp.nonzero(include, size=padded, fill_value=0)[0].astype(jnp.int32)
            grads, loss_sum = unit_grads(p, s, x, y, order, count)
            record = _dp_record(s)
            updates, s = optimizer.update(grads, s, p)
            loss = loss_sum / jnp.maximum(count, 1).astype(jnp.float32)
            return (optax.apply_updates(p, updates), s), (loss, record)

        (params, opt_state), (losses, trace) = lax.scan(step, (params, opt_state), keys)
        return params, opt_state, losses, trace

    return epoch
