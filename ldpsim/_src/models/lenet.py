"""LeNet-5 as in the MindArmour DP tutorial (seed 002), written for many clients at once.

Architecture (seed): conv 6@5x5 -> ReLU -> max-pool 2x2 -> conv 16@5x5 -> ReLU ->
max-pool 2x2 -> dense 120 -> ReLU -> dense 84 -> ReLU -> dense 10.

28x28 inputs: the seed resizes MNIST to 32x32 and uses 'VALID' convolutions without
bias.  ldpsim keeps the images at 28x28 and makes the *first* convolution 'SAME'
(zero-padding by 2 on every side), which is exactly a 'VALID' convolution of the
image zero-padded to 32x32: 28 -> conv 28 -> pool 14 -> conv 10 -> pool 5, so the
flattened features are 16*5*5 = 400 as in the seed.  Convolutions carry a bias (as
in the common PyTorch LeNet-5), giving **61,706** parameters for 1 input channel and 10 classes
(``conv_bias=False`` gives the seed's 61,684).  For 32x32 inputs pass
``first_conv_padding="VALID"`` to get the seed's shapes.  Initialisation is flax's
default (LeCun-normal kernels, zero biases); the seed uses TruncatedNormal(0.05).

The convolutions and poolings are formulated by ``conv_impl`` / ``pool_impl``, chosen
per backend by default (see :mod:`ldpsim._src.models._layers`); every formulation computes
the same function.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ldpsim._src._checks import LdpsimError, check_choice
from ldpsim._src.models._base import Model, from_flax
from ldpsim._src.models._layers import (_LENET_CONVS, conv2d, conv2d_chwn, relu_max_pool2x2,
                                        resolve_conv_impl, resolve_pool_impl)


class Conv2D(nn.Module):
    """Stride-1 convolution with HWIO ``kernel`` and ``bias`` params (flax ``nn.Conv`` layout)."""

    features: int
    kernel_size: int
    padding: str = "VALID"
    use_bias: bool = True
    impl: str = "xla"  # see ldpsim._src.models._layers.conv2d
    batch_last: bool = False  # x is [C, H, W, B] (conv2d_chwn) instead of NHWC

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel_size
        c = x.shape[0] if self.batch_last else x.shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (k, k, c, self.features), jnp.float32)
        if self.batch_last:
            y = conv2d_chwn(x, kernel, padding=self.padding)
        else:
            y = conv2d(x, kernel, padding=self.padding, impl=self.impl)
        if self.use_bias:
            b = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
            y = y + (b[:, None, None, None] if self.batch_last else b)
        return y


class LeNet5(nn.Module):
    """LeNet-5 on NHWC images; see the module docstring for shapes and parameter count."""

    num_classes: int = 10
    first_conv_padding: str = "SAME"
    conv_bias: bool = True
    conv_impl: str = "xla"  # "chwn", "mixed" or "xla" (not "auto": lenet5() resolves it)
    pool_impl: str = "window"  # "phases", "reshape" or "window"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        chwn = self.conv_impl == "chwn"  # batch innermost from the input to the dense head
        first, second = _LENET_CONVS.get(self.conv_impl, (self.conv_impl,) * 2)
        if chwn:
            x = jnp.transpose(x, (3, 1, 2, 0))  # [B, H, W, C] -> [C, H, W, B]
        x = Conv2D(6, 5, self.first_conv_padding, self.conv_bias, first, chwn, name="conv1")(x)
        x = relu_max_pool2x2(x, impl=self.pool_impl)  # pools axes 1, 2 in both layouts
        x = Conv2D(16, 5, "VALID", self.conv_bias, second, chwn, name="conv2")(x)
        x = relu_max_pool2x2(x, impl=self.pool_impl)
        if chwn:  # flatten in NHWC (h, w, c) order: the dense params do not depend on impl
            x = jnp.transpose(x, (3, 1, 2, 0))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(120, name="fc1")(x))
        x = nn.relu(nn.Dense(84, name="fc2")(x))
        return nn.Dense(self.num_classes, name="fc3")(x)


def lenet5(*, input_shape: tuple[int, ...] = (28, 28, 1), num_classes: int = 10,
           first_conv_padding: str = "SAME", conv_bias: bool = True, conv_impl: str = "auto",
           pool_impl: str = "auto") -> Model:
    """Build LeNet-5 as a :class:`~ldpsim.models.Model`.

    Args:
      input_shape: ``(H, W)`` or ``(H, W, C)``; ``(28, 28)`` is treated as one channel.
      num_classes: number of classes.
      first_conv_padding: ``"SAME"`` (default; 28x28 behaves like 32x32 'VALID') or ``"VALID"``.
      conv_bias: whether convolutions have a bias (the seed has none).
      conv_impl: ``"auto"`` (the default backend's fastest: ``"chwn"`` on CPU, ``"xla"``
        elsewhere), ``"chwn"`` (batch-innermost ``[C, H, W, B]`` activations, hand
        VJPs), ``"mixed"`` (matmuls over patches, conv1 channels-first) or ``"xla"``
        (:func:`jax.lax.conv_general_dilated`); see :mod:`ldpsim._src.models._layers`.
      pool_impl: ``"auto"`` (on CPU ``"phases"`` with ``"chwn"``, else ``"reshape"``;
        ``"window"`` elsewhere), ``"phases"`` (ReLU + pooling of the four strided 2x2
        phases with a hand VJP, :func:`~ldpsim._src.models._layers.relu_max_pool2x2`),
        ``"reshape"`` or ``"window"`` (:func:`jax.lax.reduce_window`).

    Returns:
      The model; 61,706 parameters for 28x28x1 inputs and 10 classes with the defaults.

    Raises:
      LdpsimError: if the input is too small for two 5x5 convolutions and two poolings,
        or for a ``conv_impl`` / ``pool_impl`` not listed above.
    """
    shape = tuple(int(s) for s in input_shape)
    if len(shape) == 2:
        shape = shape + (1,)
    if len(shape) != 3:
        raise LdpsimError(f"lenet5 needs images of shape (H, W) or (H, W, C), but the inputs have "
                          f"shape {input_shape!r}: use model 'mlp' or 'logreg' (or 'auto')")
    check_choice("first_conv_padding", first_conv_padding, ("SAME", "VALID"))
    shrink = 0 if first_conv_padding == "SAME" else 4
    side = min(shape[:2])
    if ((side - shrink) // 2 - 4) // 2 < 1:
        raise LdpsimError(f"input_shape {input_shape!r} is too small for lenet5 (need H, W >= "
                          f"{16 if first_conv_padding == 'SAME' else 20})")
    conv_impl = resolve_conv_impl(conv_impl)
    pool_impl = resolve_pool_impl(pool_impl, conv_impl=conv_impl)
    module = LeNet5(num_classes, first_conv_padding, conv_bias, conv_impl, pool_impl)
    config = dict(first_conv_padding=first_conv_padding, conv_bias=conv_bias,
                  conv_impl=conv_impl, pool_impl=pool_impl)
    return from_flax(module, name="lenet5", input_shape=shape, num_classes=num_classes,
                     config=config)
