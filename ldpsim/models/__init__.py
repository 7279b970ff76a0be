"""Small functional models for federated simulation.

Every model is a :class:`Model` of pure functions ``init(key, sample_x) -> params`` and
``apply(params, x) -> logits``, so the engine can ``vmap`` local training over clients
that each hold their own params.  Build one by name with :func:`get_model`.
"""

from __future__ import annotations

from ldpsim._checks import check_choice, check_positive_int
from ldpsim.models._base import Model, Params, num_params
from ldpsim.models._layers import CONV_IMPLS, POOL_IMPLS, conv2d, im2col, max_pool2x2
from ldpsim.models.dense import logreg, mlp
from ldpsim.models.lenet import lenet5

_REGISTRY = {"lenet5": lenet5, "mlp": mlp, "logreg": logreg}
MODEL_NAMES = tuple(_REGISTRY)


def resolve_model_name(name: str, input_shape: tuple[int, ...]) -> str:
    """``name``, or for ``"auto"`` the default for these inputs: ``"lenet5"`` for images
    (``(H, W)`` or ``(H, W, C)``), ``"mlp"`` for feature vectors and anything else."""
    check_choice("model", name, ("auto",) + MODEL_NAMES)
    if name != "auto":
        return name
    return "lenet5" if len(tuple(input_shape)) in (2, 3) else "mlp"


def get_model(name: str, *, input_shape: tuple[int, ...], num_classes: int, **kw) -> Model:
    """Build the model called ``name`` (one of :data:`MODEL_NAMES`).

    Args:
      name: ``"lenet5"``, ``"mlp"``, ``"logreg"``, or ``"auto"`` (see
        :func:`resolve_model_name`).
      input_shape: shape of one example, e.g. ``(28, 28, 1)``.
      num_classes: number of classes (>= 2).
      **kw: model options (e.g. ``conv_impl`` for LeNet-5, ``hidden`` for the MLP).

    Raises:
      LdpsimError: for an unknown name, bad shapes or options.
    """
    name = resolve_model_name(name, input_shape)
    check_positive_int("num_classes", num_classes)
    return _REGISTRY[name](input_shape=tuple(input_shape), num_classes=num_classes, **kw)


__all__ = [
    "CONV_IMPLS", "MODEL_NAMES", "POOL_IMPLS", "Model", "Params", "conv2d", "get_model",
    "im2col", "lenet5", "logreg", "max_pool2x2", "mlp", "num_params", "resolve_model_name",
]
