"""The functional model interface shared by every ldpsim model."""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

Params = Any  # a pytree of arrays


def num_params(params: Params) -> int:
    """Number of scalar parameters in a params pytree."""
    return int(sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params)))


class Model(NamedTuple):
    """A model as two pure functions, so the engine can ``vmap`` over per-client params.

    Attributes:
      init: ``(key, sample_x) -> params``; ``sample_x`` is ``[batch, *input_shape]``
        (only its shape is used).
      apply: ``(params, x) -> logits``; ``x`` is ``[batch, *input_shape]`` (or any shape
        with ``prod(input_shape)`` trailing elements per row), logits ``[batch, classes]``.
      name: registry name.
      input_shape: shape of one example.
      num_classes: number of output classes.
      config: the keyword options the model was built with (for reports).
    """

    init: Callable[[jax.Array, jax.Array], Params]
    apply: Callable[[Params, jax.Array], jax.Array]
    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    config: dict

    def num_params(self, params: Params) -> int:
        """Number of scalar parameters in ``params``."""
        return num_params(params)


def from_flax(module: nn.Module, *, name: str, input_shape: tuple[int, ...], num_classes: int,
              config: dict) -> Model:
    """Wrap a flax linen module whose only collection is ``params`` as a :class:`Model`."""
    input_shape = tuple(int(s) for s in input_shape)

    def _rows(x):
        x = jnp.asarray(x, jnp.float32)
        return x.reshape((x.shape[0],) + input_shape)

    def init(key, sample_x):
        return module.init(key, _rows(sample_x))["params"]

    def apply(params, x):
        return module.apply({"params": params}, _rows(x))

    return Model(init, apply, name, input_shape, int(num_classes), dict(config))
