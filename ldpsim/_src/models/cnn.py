"""The LEAF CNN for FEMNIST (62 classes of 28x28 handwritten characters).

Architecture (Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018,
arXiv:1812.01097; ``models/femnist/cnn.py`` of the LEAF repository)::

    conv 32@5x5 'SAME' -> ReLU -> max-pool 2x2 -> conv 64@5x5 'SAME' -> ReLU ->
    max-pool 2x2 -> dense 2048 -> ReLU -> dense 62

28x28x1 inputs: 28 -> conv 28 -> pool 14 -> conv 14 -> pool 7, so the flattened features
are 7*7*64 = 3,136 and the model has **6,603,710** parameters with LEAF's sizes
(832 + 51,264 + 6,424,576 + 127,038).  ``dense`` narrows the hidden layer for CPU runs
(``dense=512``: 1,669,406 parameters); everything else is LEAF's.

Differences from LEAF, stated: initialisation is flax's default (LeCun-normal kernels, zero
biases) where LEAF's TF1 layers use Glorot-uniform; LEAF trains with plain SGD, which the
engine's ``client_optimizer="sgd"`` is.  The convolutions and poolings share LeNet-5's
per-backend formulations (:mod:`ldpsim._src.models._layers`): on CPU the one-channel first
convolution is a channels-first patch matmul and the second an im2col matmul, with
reshape pooling; elsewhere :func:`jax.lax.conv_general_dilated` and
:func:`jax.lax.reduce_window`.  Every formulation computes the same function.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.models._base import Model, from_flax
from ldpsim._src.models._layers import (_LENET_CONVS, max_pool2x2, resolve_conv_impl,
                                        resolve_pool_impl)
from ldpsim._src.models.lenet import Conv2D

__all__ = ["FEMNIST_SHAPE", "LeafCNN", "femnist_cnn"]

#: One FEMNIST example as LEAF stores it (one channel).
FEMNIST_SHAPE = (28, 28, 1)


class LeafCNN(nn.Module):
    """LEAF's FEMNIST CNN on NHWC images; see the module docstring for shapes."""

    num_classes: int = 62
    dense: int = 2048
    conv_impl: str = "xla"    # "mixed" or "xla" (femnist_cnn() resolves "auto")
    pool_impl: str = "window"  # "reshape" or "window"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        first, second = _LENET_CONVS[self.conv_impl]
        x = Conv2D(32, 5, "SAME", True, first, name="conv1")(x)
        x = max_pool2x2(nn.relu(x), impl=self.pool_impl)
        x = Conv2D(64, 5, "SAME", True, second, name="conv2")(x)
        x = max_pool2x2(nn.relu(x), impl=self.pool_impl)
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(self.dense, name="fc1")(x))
        return nn.Dense(self.num_classes, name="fc2")(x)


def femnist_cnn(*, input_shape: tuple[int, ...] = FEMNIST_SHAPE, num_classes: int = 62,
                dense: int = 2048, conv_impl: str = "auto", pool_impl: str = "auto") -> Model:
    """Build the LEAF FEMNIST CNN as a :class:`~ldpsim.models.Model`.

    Args:
      input_shape: ``(H, W)`` or ``(H, W, C)`` with H, W >= 4; ``(28, 28)`` is one channel.
        LEAF's model is defined for 28x28x1.
      num_classes: number of classes (62 for FEMNIST).
      dense: width of the hidden dense layer (LEAF: 2048).
      conv_impl: ``"auto"`` (``"mixed"`` on CPU, ``"xla"`` elsewhere), ``"mixed"`` or
        ``"xla"``; see :mod:`ldpsim._src.models._layers`.
      pool_impl: ``"auto"`` (``"reshape"`` on CPU, ``"window"`` elsewhere), ``"reshape"``
        or ``"window"``.

    Returns:
      The model: ``init(key, x) -> params`` and ``apply(params, x) -> logits [batch,
      num_classes]``; 6,603,710 parameters for 28x28x1 inputs, 62 classes, ``dense=2048``.

    Raises:
      LdpsimError: for inputs that are not images, too small for two poolings, or a bad
        option.
    """
    shape = tuple(int(s) for s in input_shape)
    if len(shape) == 2:
        shape = shape + (1,)
    if len(shape) != 3:
        raise LdpsimError(f"femnist_cnn needs images of shape (H, W) or (H, W, C), but the "
                          f"inputs have shape {input_shape!r}: use model 'mlp' (or 'auto')")
    if min(shape[:2]) < 4:
        raise LdpsimError(f"input_shape {input_shape!r} is too small for femnist_cnn (two 2x2 "
                          "poolings need H, W >= 4)")
    dense = check_positive_int("dense", dense)
    num_classes = check_positive_int("num_classes", num_classes)
    conv_impl = resolve_conv_impl(conv_impl, model="femnist_cnn")
    pool_impl = resolve_pool_impl(pool_impl, model="femnist_cnn")
    module = LeafCNN(num_classes, dense, conv_impl, pool_impl)
    return from_flax(module, name="femnist_cnn", input_shape=shape, num_classes=num_classes,
                     config=dict(dense=dense, conv_impl=conv_impl, pool_impl=pool_impl))
