"""Fully connected models: a multilayer perceptron and multinomial logistic regression."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax

from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.models._base import Model, from_flax


class MLP(nn.Module):
    """Flatten -> (Dense -> ReLU) per hidden layer -> Dense(num_classes)."""

    hidden: Sequence[int]
    num_classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        for i, h in enumerate(self.hidden):
            x = nn.relu(nn.Dense(h, name=f"dense{i}")(x))
        return nn.Dense(self.num_classes, name="out")(x)


def mlp(*, input_shape: tuple[int, ...], num_classes: int,
        hidden: Sequence[int] = (200, 200)) -> Model:
    """Multilayer perceptron; the default ``(200, 200)`` is McMahan et al.'s "2NN".

    Reference: McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data", AISTATS 2017 (arXiv:1602.05629), Section 3.
    """
    hidden = tuple(check_positive_int("hidden", h) for h in hidden)
    return from_flax(MLP(hidden, num_classes), name="mlp", input_shape=input_shape,
                     num_classes=num_classes, config=dict(hidden=hidden))


def mlp128(*, input_shape: tuple[int, ...], num_classes: int) -> Model:
    """One hidden layer of 128 ReLU units: the ``784-128-10`` network of the FL + DP article
    (seed 004, its PyTorch ``Net``: ``Linear(784, 128) -> ReLU -> Linear(128, 10)``);
    101,770 parameters for MNIST."""
    return from_flax(MLP((128,), num_classes), name="mlp128", input_shape=input_shape,
                     num_classes=num_classes, config=dict(hidden=(128,)))


def logreg(*, input_shape: tuple[int, ...], num_classes: int) -> Model:
    """Multinomial logistic regression: flatten -> Dense(num_classes) (softmax in the loss)."""
    if num_classes < 2:
        raise LdpsimError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    return from_flax(MLP((), num_classes), name="logreg", input_shape=input_shape,
                     num_classes=num_classes, config={})
