"""Small functional models for federated simulation.

Every model is a :class:`Model` of pure functions ``init(key, sample_x) -> params`` and
``apply(params, x) -> logits``, so the engine can ``vmap`` local training over clients
that each hold their own params.  Build one by name with :func:`get_model`.
"""

from ldpsim._src.models import (
    FEMNIST_CLASSES,
    MODEL_NAMES,
    Model,
    Params,
    char_lstm,
    femnist_cnn,
    get_model,
    lenet5,
    logreg,
    lstm_fedavg,
    mlp,
    mlp128,
    num_params,
    resolve_model_name,
)

__all__ = [
    "FEMNIST_CLASSES", "MODEL_NAMES", "Model", "Params", "char_lstm", "femnist_cnn",
    "get_model", "lenet5", "logreg", "lstm_fedavg", "mlp", "mlp128", "num_params",
    "resolve_model_name",
]
