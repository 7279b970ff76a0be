"""Small functional models for federated simulation.

Every model is a :class:`Model` of pure functions ``init(key, sample_x) -> params`` and
``apply(params, x) -> logits``, so the engine can ``vmap`` local training over clients
that each hold their own params.  Build one by name with :func:`get_model`.
"""

from __future__ import annotations

import numpy as np

from ldpsim._src._checks import check_choice, check_positive_int
from ldpsim._src.models._base import Model, Params, num_params
from ldpsim._src.models.cnn import femnist_cnn
from ldpsim._src.models.dense import logreg, mlp, mlp128
from ldpsim._src.models.lenet import lenet5
from ldpsim._src.models.rnn import char_lstm, lstm_fedavg

_REGISTRY = {"lenet5": lenet5, "mlp": mlp, "logreg": logreg, "char_lstm": char_lstm,
             "lstm_fedavg": lstm_fedavg, "femnist_cnn": femnist_cnn, "mlp128": mlp128}

#: ``model="auto"`` picks the LEAF CNN for 28x28 one-channel images of this many classes
#: (FEMNIST: 10 digits, 26 upper- and 26 lower-case letters).
FEMNIST_CLASSES = 62
MODEL_NAMES = tuple(_REGISTRY)


def _is_token_dtype(dtype) -> bool:
    """Whether stored inputs of this dtype are token ids: integers other than uint8 (images)."""
    if dtype is None:
        return False
    dt = np.dtype(dtype)
    return np.issubdtype(dt, np.integer) and dt != np.uint8


def resolve_model_name(name: str, input_shape: tuple[int, ...], input_dtype=None,
                       num_classes: int | None = None) -> str:
    """``name``, or for ``"auto"`` the default for these inputs.

    ``"char_lstm"`` for token sequences (``input_shape == (T,)`` and an integer
    ``input_dtype`` other than uint8, e.g. Shakespeare's int windows), ``"femnist_cnn"``
    (the LEAF CNN) for 28x28 one-channel images of 62 classes (FEMNIST; only when
    ``num_classes`` is given), ``"lenet5"`` for other images (``(H, W)`` or ``(H, W, C)``),
    ``"mlp"`` for feature vectors and anything else.  ``input_dtype`` is the dtype of the
    *stored* inputs (a population's ``x`` or a dataset's ``x_train``); without it a 1-D
    input is taken as features.
    """
    check_choice("model", name, ("auto",) + MODEL_NAMES)
    if name != "auto":
        return name
    shape = tuple(input_shape)
    if len(shape) == 1 and _is_token_dtype(input_dtype):
        return "char_lstm"
    if num_classes == FEMNIST_CLASSES and shape in ((28, 28), (28, 28, 1)):
        return "femnist_cnn"
    return "lenet5" if len(shape) in (2, 3) else "mlp"


def get_model(name: str, *, input_shape: tuple[int, ...], num_classes: int, input_dtype=None,
              **kw) -> Model:
    """Build the model called ``name`` (one of :data:`MODEL_NAMES`).

    Args:
      name: ``"lenet5"``, ``"mlp"``, ``"mlp128"``, ``"logreg"``, ``"char_lstm"``,
        ``"lstm_fedavg"``, ``"femnist_cnn"``, or ``"auto"`` (see :func:`resolve_model_name`).
      input_shape: shape of one example, e.g. ``(28, 28, 1)`` or ``(80,)`` tokens.
      num_classes: number of classes (>= 2).
      input_dtype: dtype of the stored inputs, used by ``"auto"`` only (integer token
        ids of shape ``(T,)`` select ``"char_lstm"``).
      **kw: model options (e.g. ``conv_impl`` for LeNet-5, ``hidden`` for the MLP and
        the LSTMs).

    Raises:
      LdpsimError: for an unknown name, bad shapes or options.
    """
    check_positive_int("num_classes", num_classes)
    name = resolve_model_name(name, input_shape, input_dtype, num_classes=num_classes)
    return _REGISTRY[name](input_shape=tuple(input_shape), num_classes=num_classes, **kw)


__all__ = [
    "FEMNIST_CLASSES", "MODEL_NAMES", "Model", "Params", "char_lstm", "femnist_cnn",
    "get_model", "lenet5", "logreg", "lstm_fedavg", "mlp", "mlp128", "num_params",
    "resolve_model_name",
]
