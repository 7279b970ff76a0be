"""Evaluation of a model on a whole test set, shared by the federated engine and the DP-SGD
trainer (a module of its own, so the trainer does not import the round kernel)."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import optax
from jax import lax

__all__ = ["make_eval_fn"]


def make_eval_fn(apply_fn: Callable, batch_size: int = 500) -> Callable:
    """``evaluate(params, x, y) -> (accuracy, mean cross-entropy)`` over a whole test set.

    Batched with ``lax.map`` (memory O(batch)); the last batch is padded and masked, so
    the result is exact for any test-set size.
    """

    def evaluate(params, x, y):
        n = x.shape[0]
        b = min(batch_size, n)
        nb = -(-n // b)
        pad = nb * b - n
        valid = jnp.arange(nb * b) < n
        xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
        yp = jnp.concatenate([y, jnp.zeros((pad,), y.dtype)]) if pad else y

        def one(batch):
            xb, yb, vb = batch
            logits = apply_fn(params, xb)
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
            correct = (jnp.argmax(logits, -1) == yb)
            return (jnp.sum(jnp.where(vb, correct, False), dtype=jnp.float32),
                    jnp.sum(jnp.where(vb, ce, 0.0)))

        correct, ce = lax.map(one, (xp.reshape((nb, b) + x.shape[1:]), yp.reshape(nb, b),
                                    valid.reshape(nb, b)))
        return jnp.sum(correct) / n, jnp.sum(ce) / n

    return evaluate
