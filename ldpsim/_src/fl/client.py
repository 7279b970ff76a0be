"""Local training of ONE client, written once and ``vmap``-ed over a cohort by the engine.

Batching semantics (identical for a padded and an unpadded client):

* The client holds ``n = count`` valid rows ``x[:n]``; rows ``>= n`` are padding and
  never influence anything.
* Epoch ``e`` visits the valid rows in a random order ``perm_e``: row ``i`` gets the
  sort key ``bits(fold_in(fold_in(key, e), i))`` and the valid rows are sorted by it
  (stable).  A row's key depends only on ``(key, e, i)``, not on the padded size, so a
  padded client sees exactly the rows an unpadded one sees.
* An epoch has ``ceil(n / B)`` batches: batch ``j`` is ``perm_e[j*B : (j+1)*B]``; the
  last one may be partial (like a shuffling data loader with ``drop_last=False``).
  Batch rows past ``n`` are masked out (and zeroed) and the loss is the mean
  cross-entropy over the valid rows of the batch.
* ``local_steps=K``: the client takes ``K`` optimizer steps; step ``s`` uses batch
  ``s mod ceil(n/B)`` of epoch ``s div ceil(n/B)`` (epochs cycle).
  ``local_epochs=E``: the client takes ``E * ceil(n/B)`` steps; the program is built for
  ``E * ceil(max_examples/B)`` steps and the steps beyond the client's own count are
  skipped (params and optimizer state unchanged), so it equals the unpadded run.
* A client with ``count == 0`` takes no step: its update is exactly zero.
* When one batch holds the whole client (``batch_size >= max_examples``, e.g. 3
  examples in batches of 3), every epoch is that one batch of all valid rows, whatever
  the order: :func:`local_update` then feeds the rows in storage order and skips the
  permutation (the same steps; only the float summation order of the batch mean differs).

The optimizer state starts fresh from ``optimizer.init(params)`` every round (as in
FedAvg, McMahan et al. 2017, arXiv:1602.05629, Algorithm 1 ``ClientUpdate``).
Short step loops are unrolled: XLA's CPU backend runs a rolled ``lax.scan`` over a
couple of steps far slower than the unrolled loop.
Step 1 is taken before the step loop (``peel_first_step``): every client of a vmapped
chunk starts from the same global weights, so there ``vmap`` sees unbatched weights and
the chunk's forward pass and input gradients are one product over clients x batch rows
(only the weight gradients are per client); inside a loop the carried weights would be
batched from step 1 on.  The same computation either way (benchmarks/README.md: a few
per cent faster at the CPU's chunk of 1, more at wider chunks).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from ldpsim._src._checks import LdpsimError, check_choice, check_positive_int

Params = Any

OPTIMIZERS = ("sgd", "momentum", "adam")
_MAX_UNROLL = 16


class ClientMetrics(NamedTuple):
    """Per-client training metrics.

    Attributes:
      loss: mean over the steps taken of the batch training loss (before each step's
        update); 0 for a client that took no step.
      num_examples: the client's number of valid rows (int32).
      num_steps: optimizer steps actually taken (int32).
    """

    loss: jax.Array
    num_examples: jax.Array
    num_steps: jax.Array


def client_optimizer(name: str, learning_rate: Any, *, momentum: Any = 0.9, b1: float = 0.9,
                     b2: float = 0.999, eps: float = 1e-8) -> optax.GradientTransformation:
    """Build a client optimizer by name; ``learning_rate``/``momentum`` may be traced arrays.

    Args:
      name: ``"sgd"``, ``"momentum"`` (heavy-ball SGD) or ``"adam"``.
      learning_rate: step size (float or traced scalar: changing it never recompiles).
      momentum: momentum coefficient for ``"momentum"``.
      b1, b2, eps: Adam parameters (Kingma & Ba 2015, arXiv:1412.6980).
    """
    check_choice("client_optimizer", name, OPTIMIZERS)
    if name == "sgd":
        return optax.sgd(learning_rate)
    if name == "momentum":
        return optax.sgd(learning_rate, momentum=momentum)
    return optax.adam(learning_rate, b1=b1, b2=b2, eps=eps)


def num_local_steps(*, max_examples: int, batch_size: int, local_steps: int | None = None,
                    local_epochs: int | None = None) -> int:
    """Static number of step slots in the compiled program (see module docstring)."""
    check_positive_int("batch_size", batch_size)
    check_positive_int("max_examples", max_examples)
    if (local_steps is None) == (local_epochs is None):
        raise LdpsimError("give exactly one of local_steps and local_epochs, got "
                          f"local_steps={local_steps!r}, local_epochs={local_epochs!r}")
    if local_steps is not None:
        return check_positive_int("local_steps", local_steps)
    return check_positive_int("local_epochs", local_epochs) * (-(-max_examples // batch_size))


def _epoch_permutation(key: jax.Array, epoch: jax.Array, count: jax.Array, size: int) -> jax.Array:
    """Valid rows ``< count`` in a random order (padding-independent), then padding rows."""
    ekey = jax.random.fold_in(key, epoch)
    rows = jnp.arange(size, dtype=jnp.int32)
    bits = jax.vmap(lambda i: jax.random.bits(jax.random.fold_in(ekey, i), dtype=jnp.uint32))(rows)
    bits = jnp.where(rows < count, bits, jnp.uint32(0xFFFFFFFF))
    return jnp.argsort(bits, stable=True).astype(jnp.int32)


def local_update(params: Params, x: jax.Array, y: jax.Array, count: jax.Array, *,
                 apply_fn: Callable[[Params, jax.Array], jax.Array],
                 optimizer: optax.GradientTransformation, batch_size: int, key: jax.Array,
                 local_steps: int | None = None, local_epochs: int | None = None,
                 unroll: int | bool | None = None) -> tuple[Params, ClientMetrics]:
    """Train one client from the global ``params`` and return its update ``W_local - W_global``.

    Jittable and vmappable (map ``x, y, count, key``; broadcast ``params``).  Batching,
    masking and step semantics are described in the module docstring; a client padded to
    ``max_examples`` rows trains exactly as the same client unpadded.

    Args:
      params: global model params (pytree of float32 arrays).
      x: ``[max_examples, *input_shape]`` the client's rows, padded.
      y: ``[max_examples]`` int labels.
      count: int scalar, number of valid rows (rows ``>= count`` are padding).
      apply_fn: ``(params, x[batch, ...]) -> logits[batch, classes]``.
      optimizer: an optax transformation (see :func:`client_optimizer`).
      batch_size: static batch size ``B``.
      key: the client's training key.
      local_steps: static number of local optimizer steps ``K`` ...
      local_epochs: ... or static number of local epochs ``E`` (exactly one of the two).
      unroll: how far to unroll the step loop (default: fully up to 16 steps, else 1).

    Returns:
      ``(delta, metrics)``: ``delta`` has the structure of ``params``.
    """
    def loss_and_grad(p, xb, yb, mask):
        def loss_fn(p):
            logits = apply_fn(p, xb)
            ce = optax.losses.softmax_cross_entropy_with_integer_labels(logits, yb)
            return jnp.sum(jnp.where(mask, ce, 0.0)) / jnp.maximum(jnp.sum(mask), 1).astype(ce.dtype)
        return jax.value_and_grad(loss_fn)(p)

    # The loss is a mean over the batch's rows: when one batch holds the whole client, the
    # epoch's order only changes the float summation order, so the rows go in as they are.
    return train_local_steps(params, x, y, count, loss_and_grad=loss_and_grad, optimizer=optimizer,
                             batch_size=batch_size, key=key, local_steps=local_steps,
                             local_epochs=local_epochs, unroll=unroll, order_free=True)


def train_local_steps(params: Params, x: jax.Array, y: jax.Array, count: jax.Array, *,
                      loss_and_grad: Callable[..., tuple[jax.Array, Params]],
                      optimizer: optax.GradientTransformation, batch_size: int, key: jax.Array,
                      local_steps: int | None = None, local_epochs: int | None = None,
                      unroll: int | bool | None = None,
                      peel_first_step: bool = True,
                      order_free: bool = False) -> tuple[Params, ClientMetrics]:
    """The local-step loop shared by :func:`local_update` and DP-SGD clients.

    Batching, masking, epoch permutations and the skipping of steps beyond the client's
    own count are exactly those of :func:`local_update`; only the gradient differs:
    ``loss_and_grad(p, xb, yb, mask) -> (loss, grads)`` where ``grads`` is whatever
    ``optimizer.update`` expects (e.g. per-micro-batch gradients for
    :func:`ldpsim.privacy.dp_aggregate`).  ``peel_first_step`` (default True)
    takes step 1 outside the step scan (see the module docstring); False scans every
    step (the same result up to float rounding).  ``order_free``: ``loss_and_grad`` does
    not depend on the order of a batch's rows (a mean over them, as :func:`local_update`'s);
    then, when one batch holds the whole client (``batch_size >= max_examples``), every
    epoch's single batch is the client's valid rows in storage order, with no permutation
    and no gather: the same set of rows, so the same result up to the float summation
    order (the permutation, a per-row hash and a sort per step, is most of a step's fixed
    cost for clients of a few examples).
    """
    max_examples = x.shape[0]
    slots = num_local_steps(max_examples=max_examples, batch_size=batch_size,
                            local_steps=local_steps, local_epochs=local_epochs)
    B = batch_size
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.int32)
    n = jnp.clip(jnp.asarray(count, jnp.int32), 0, max_examples)
    batches_per_epoch = jnp.maximum((n + B - 1) // B, 1)
    total = jnp.int32(local_steps) if local_steps is not None else local_epochs * batches_per_epoch
    total = jnp.where(n > 0, total, 0)

    whole = order_free and B >= max_examples   # one batch per epoch: all valid rows
    if whole:   # rows in storage order, padded up to B (the permutation is irrelevant)
        pad = [(0, B - max_examples)]
        mask = jnp.arange(B, dtype=jnp.int32) < n
        xw = jnp.pad(x, pad + [(0, 0)] * (x.ndim - 1))
        xw = jnp.where(mask.reshape((B,) + (1,) * (x.ndim - 1)), xw, 0.0)
        yw = jnp.where(mask, jnp.pad(y, pad), 0)

    def batch(s):
        if whole:
            return xw, yw, mask
        epoch, j = s // batches_per_epoch, s % batches_per_epoch
        perm = _epoch_permutation(key, epoch, n, max_examples)
        pos = j * B + jnp.arange(B, dtype=jnp.int32)
        mask_s = pos < n
        idx = perm[jnp.minimum(pos, max_examples - 1)]
        xb = jnp.where(mask_s.reshape((B,) + (1,) * (x.ndim - 1)), x[idx], 0.0)
        yb = jnp.where(mask_s, y[idx], 0)
        return xb, yb, mask_s

    def step(carry, s):
        p, opt_state, loss_sum = carry
        xb, yb, mask = batch(s)
        loss, grads = loss_and_grad(p, xb, yb, mask)
        updates, new_state = optimizer.update(grads, opt_state, p)
        new_p = optax.apply_updates(p, updates)
        active = s < total
        keep = lambda new, old: jnp.where(active, new, old)
        p = jax.tree_util.tree_map(keep, new_p, p)
        opt_state = jax.tree_util.tree_map(keep, new_state, opt_state)
        return (p, opt_state, loss_sum + jnp.where(active, loss, 0.0)), None

    if unroll is None:
        unroll = True if slots <= _MAX_UNROLL else 1
    carry = (params, optimizer.init(params), jnp.zeros((), jnp.float32))
    first = 0
    if peel_first_step:
        carry, _ = step(carry, jnp.int32(0))
        first = 1
    if slots > first:
        carry, _ = lax.scan(step, carry, jnp.arange(first, slots, dtype=jnp.int32),
                            unroll=unroll)
    local, _, loss_sum = carry
    delta = jax.tree_util.tree_map(lambda a, b: a - b, local, params)
    metrics = ClientMetrics(loss=loss_sum / jnp.maximum(total, 1).astype(jnp.float32),
                            num_examples=n, num_steps=total)
    return delta, metrics
