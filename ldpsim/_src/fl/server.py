"""Server side of a round: aggregation weights, weighted mean, server optimizer step.

The server treats the negated aggregate update as a pseudo-gradient and applies an optax
optimizer to it (Reddi et al., "Adaptive Federated Optimization", ICLR 2021,
arXiv:2003.00295, Alg. 2):

* FedAvg  = SGD with learning rate 1 (McMahan et al. 2017, arXiv:1602.05629): W ← W + Δ̄;
* FedAvgM = SGD with (heavy-ball) momentum (Hsu et al. 2019, arXiv:1909.06335);
* FedAdam, FedYogi = Adam / Yogi with β₁ = 0.9, β₂ = 0.99 and adaptivity τ = 10⁻³
  (Reddi et al. 2021, Alg. 2 and §5).

Aggregation: ``Δ̄ = Σ_k w_k Δ_k / Σ_k w_k`` with ``w_k = |D_k|``
(FedAvg) or ``w_k = 1`` (uniform).  Clients whose update is not finite, and padding
slots, get weight 0 and are excluded from the denominator as well.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

PyTree = Any

__all__ = ["aggregation_weights", "server_optimizer", "server_update", "weighted_mean", "weighted_sum"]


def aggregation_weights(counts: jax.Array, include: jax.Array, weighting: str = "examples"
                        ) -> jax.Array:
    """Unnormalised aggregation weights of a cohort.

    Args:
        counts: int[m] examples held by each client.
        include: bool[m], False for padding slots and non-finite updates.
        weighting: ``"examples"`` (w = |D_k|, FedAvg) or ``"uniform"`` (w = 1).

    Returns:
        float32[m] weights, 0 where ``include`` is False.
    """
    if weighting == "examples":
        w = jnp.asarray(counts, jnp.float32)
    elif weighting == "uniform":
        w = jnp.ones(jnp.shape(counts), jnp.float32)
    else:
        raise ValueError(f"weighting must be examples or uniform, got {weighting!r}")
    return jnp.where(include, w, 0.0)


def weighted_sum(weights: jax.Array, trees: PyTree) -> PyTree:
    """``Σ_k w_k t_k`` over the leading (client) axis of every leaf."""
    return jax.tree_util.tree_map(
        lambda t: jnp.tensordot(weights.astype(t.dtype), t, axes=(0, 0)), trees)


def weighted_mean(weights: jax.Array, trees: PyTree) -> PyTree:
    """``Σ_k w_k t_k / Σ_k w_k`` over the leading axis; zeros when ``Σ w = 0``."""
    total = jnp.sum(weights)
    inv = jnp.where(total > 0, 1.0 / jnp.where(total > 0, total, 1.0), 0.0)
    return jax.tree_util.tree_map(lambda s: s * inv.astype(s.dtype), weighted_sum(weights, trees))


def server_optimizer(name: str = "fedavg", learning_rate: jax.typing.ArrayLike = 1.0, *,
                     momentum: float = 0.9) -> optax.GradientTransformation:
    """The server optimizer ``name`` as an optax transformation.

    ``learning_rate`` may be a traced scalar: build the optimizer inside ``jit`` with the
    traced value and its state structure does not depend on it, so one ``init`` serves
    every learning rate.

    Args:
        name: ``"fedavg"``, ``"fedavgm"``, ``"fedadam"`` or ``"fedyogi"``.
        learning_rate: server learning rate η (FedAvg: 1).
        momentum: FedAvgM's momentum β.
    """
    if name == "fedavg":
        return optax.sgd(learning_rate)
    if name == "fedavgm":
        return optax.sgd(learning_rate, momentum=momentum)
    if name == "fedadam":
        return optax.adam(learning_rate, b1=0.9, b2=0.99, eps=1e-3)
    if name == "fedyogi":
        return optax.yogi(learning_rate, b1=0.9, b2=0.99, eps=1e-3)
    raise ValueError(f"server optimizer must be fedavg, fedavgm, fedadam or fedyogi, got {name!r}")


def server_update(params: PyTree, opt_state: Any, aggregate: PyTree,
                  optimizer: optax.GradientTransformation) -> tuple[PyTree, Any]:
    """One server step with pseudo-gradient ``−Δ̄``; returns ``(params, opt_state)``."""
    pseudo_grad = jax.tree_util.tree_map(jnp.negative, aggregate)
    updates, opt_state = optimizer.update(pseudo_grad, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
