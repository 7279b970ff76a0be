"""Per-dataset training defaults: local work, batch size, optimizers and learning rates.

The engine's hyper-parameters that decide whether a bare run trains at all (how much local
work each client does, with which optimizer and step size, and how far the server moves)
depend on the dataset and its model.  :class:`~ldpsim._src.fl.config.SimulationConfig`
leaves them *unset* (``None``) unless the user gives them, and resolves the unset ones here,
from :data:`DATASET_DEFAULTS` for the dataset (or :data:`GENERIC` for any other dataset).
An explicit value always wins; nothing given is ever overridden.

Rules, in order:

* ``local_steps`` / ``local_epochs``: when neither is given, the dataset's entry decides
  (one of the two).  When one is given, the other is not taken from the table
  (``local_epochs`` stays unset; ``local_steps``, unused then, takes the entry's value or 2).
* ``client_lr``: the entry's rate was measured for the entry's ``client_optimizer``; when the
  user picks another optimizer and no rate, the rate is :data:`OPTIMIZER_LR` for it.
* ``model``: ``"auto"`` stays ``"auto"`` (the engine picks from the data:
  :func:`ldpsim.models.resolve_model_name`) except where an entry names its model (FEMNIST:
  the LEAF CNN, which the data rule also picks when it is told the number of classes).

Every value in :data:`DATASET_DEFAULTS` was chosen by measurement: a few rounds without
privacy at the default population and tens of clients per round, on this project's 2-core
CPU; the table of what each reaches, with the commands, is in ``docs/defaults.md`` and the
README.  They are starting points for FedAvg without noise (and with moderate noise), not
tuned optima for every privacy level: under strong local DP fewer, larger steps or a smaller
server learning rate may do better.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["DATASET_DEFAULTS", "GENERIC", "OPTIMIZER_LR", "TRAINING_FIELDS",
           "apply_training_defaults", "dataset_defaults", "defaulted_fields", "describe",
           "given_fields", "resolve_training_defaults"]

#: The fields resolved here (``None`` in a config means "unset").
TRAINING_FIELDS = ("local_steps", "local_epochs", "batch_size", "client_optimizer",
                   "client_lr", "server_lr")

#: Any dataset without an entry: the engine's historical defaults (2 SGD steps of 16
#: examples at rate 0.05, FedAvg).  Suits the synthetic feature vectors; too little work
#: for real images (MNIST/LeNet-5 ends near 30 % after 5 rounds).
GENERIC: Mapping[str, Any] = {"local_steps": 2, "local_epochs": None, "batch_size": 16,
                              "client_optimizer": "sgd", "client_lr": 0.05, "server_lr": 1.0}

#: Client learning rate when the user chooses an optimizer other than the entry's and no
#: rate: the usual safe rates (SGD and momentum as the generic default, Adam 1e-3).
OPTIMIZER_LR: Mapping[str, float] = {"sgd": 0.05, "momentum": 0.05, "adam": 1e-3}

#: Measured per-dataset defaults (see the module docstring).  Keys are dataset names as
#: :func:`ldpsim.data.load_dataset` normalises them.
DATASET_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    # LeNet-5: 5 epochs of batch 16 at SGD 0.1, and server lr 2, which makes up for the
    # default clip C = 1 binding for (nearly) every client in the first rounds.
    "mnist": {"local_steps": 2, "local_epochs": 5, "batch_size": 16,
              "client_optimizer": "sgd", "client_lr": 0.1, "server_lr": 2.0},
    "fashion_mnist": {"local_steps": 2, "local_epochs": 5, "batch_size": 16,
                      "client_optimizer": "sgd", "client_lr": 0.1, "server_lr": 2.0},
    # FedProx synthetic (also synthetic(ALPHA,BETA) and synthetic_iid), MLP 60-200-200-10:
    # the historical values, kept on purpose. 10 steps at 0.1 train faster (0.62 against
    # 0.32 after 20 rounds, docs/defaults.md), but the test suite and the engine's golden
    # histories are built on the cheap 2-step default; the quick sweep sets its own.
    "synthetic": dict(GENERIC),
    # The LEAF CNN (model auto), one epoch over the writer's characters.
    "femnist": {"local_steps": 2, "local_epochs": 1, "batch_size": 16,
                "client_optimizer": "sgd", "client_lr": 0.05, "server_lr": 1.0,
                "model": "femnist_cnn"},
    # char_lstm: 50 Adam steps of batch 16 at 0.01, server lr 10.  Measured, 10 rounds of
    # 20 of the 715 roles (natural partition), no privacy: 0.216 next-character accuracy
    # at round 10, rising every round from round 3 (unigram baseline 0.127).  Every client's
    # update is longer than the default clip C = 1 (clip fraction 1.0), so the server lr
    # sets the step (about 6.5 per round); 30 steps reach 0.195, 10 steps 0.161 at best
    # whatever the rates, and the old 10 steps at 1e-3 with server lr 1 stalled at 0.142.
    "shakespeare": {"local_steps": 50, "local_epochs": None, "batch_size": 16,
                    "client_optimizer": "adam", "client_lr": 0.01, "server_lr": 10.0},
}


def _key(dataset: str) -> str:
    key = str(dataset).strip().lower().replace("-", "_")
    return "synthetic" if key.startswith("synthetic") else key


def dataset_defaults(dataset: str) -> dict[str, Any]:
    """The training defaults for ``dataset`` (a copy; :data:`GENERIC` when it has no entry)."""
    return dict(DATASET_DEFAULTS.get(_key(dataset), GENERIC))


def resolve_training_defaults(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The values to fill in for the unset (``None``) training fields of ``fields``.

    Args:
      fields: a config's fields (``dataset``, ``model`` and :data:`TRAINING_FIELDS`, the
        unset ones ``None``).

    Returns:
      ``{field: value}`` for exactly the fields to fill (``model`` only when it is
      ``"auto"`` and the entry names a model; ``local_epochs`` only when both it and
      ``local_steps`` are unset and the entry uses epochs).
    """
    entry = dataset_defaults(fields.get("dataset", "synthetic"))
    out: dict[str, Any] = {}
    steps, epochs = fields.get("local_steps"), fields.get("local_epochs")
    if steps is None:
        out["local_steps"] = entry.get("local_steps") or GENERIC["local_steps"]
    if steps is None and epochs is None and entry.get("local_epochs") is not None:
        out["local_epochs"] = entry["local_epochs"]
    for name in ("batch_size", "server_lr"):
        if fields.get(name) is None:
            out[name] = entry[name]
    optimizer = fields.get("client_optimizer")
    if optimizer is None:
        optimizer = out["client_optimizer"] = entry["client_optimizer"]
    if fields.get("client_lr") is None:
        out["client_lr"] = (entry["client_lr"] if optimizer == entry["client_optimizer"]
                            else OPTIMIZER_LR.get(optimizer, GENERIC["client_lr"]))
    if fields.get("model", "auto") == "auto" and entry.get("model"):
        out["model"] = entry["model"]
    return out


def apply_training_defaults(config: Any) -> None:
    """Fill the unset training fields of a (frozen) config in place, from
    :func:`resolve_training_defaults`; called by ``SimulationConfig.__post_init__``.

    What was filled, with the value given (``None``, or ``"auto"`` for ``model``), is kept
    on the instance (not a dataclass field: equality and ``asdict`` see the resolved
    values) for :func:`defaulted_fields` and :func:`given_fields`.  ``dataclasses.replace``
    passes the resolved values on as given ones: to re-resolve for another dataset, pass
    the training fields as ``None`` (or go through :func:`given_fields`).
    """
    fields = {name: getattr(config, name) for name in ("dataset", "model", *TRAINING_FIELDS)}
    filled = resolve_training_defaults(fields)
    for name, value in filled.items():
        object.__setattr__(config, name, value)
    object.__setattr__(config, "_defaulted", {name: fields[name] for name in filled})


def defaulted_fields(config: Any) -> dict[str, Any]:
    """``{field: value}`` of the settings a config took from the per-dataset defaults
    (empty for a config built with every training field given)."""
    return {name: getattr(config, name) for name in getattr(config, "_defaulted", {})}


def given_fields(config: Any) -> dict[str, Any]:
    """Every dataclass field of ``config`` as the user gave it: the per-dataset defaults it
    took are unset again (``None``; ``model`` ``"auto"``), so that rebuilding the config
    from them resolves the same way, or anew for another dataset."""
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    out.update(getattr(config, "_defaulted", {}))
    return out


def describe(dataset: str) -> str:
    """One line: the defaults ``dataset`` gets (for help texts and status lines)."""
    entry = dataset_defaults(dataset)
    work = (f"{entry['local_epochs']} local epoch{'s' if entry['local_epochs'] != 1 else ''}"
            if entry.get("local_epochs") else f"{entry['local_steps']} local steps")
    lr = entry["client_lr"]
    text = (f"{work} of batch {entry['batch_size']}, {entry['client_optimizer']} lr "
            f"{lr:g}, server lr {entry['server_lr']:g}")
    if entry.get("model"):
        text += f", model {entry['model']} (with model auto)"
    return text


def _check_table() -> None:
    """Every entry names every training field with a valid value (run at import)."""
    for name, entry in {"generic": GENERIC, **DATASET_DEFAULTS}.items():
        missing = set(TRAINING_FIELDS) - set(entry)
        assert not missing, (name, missing)
        assert entry["client_optimizer"] in OPTIMIZER_LR, name
        assert math.isfinite(entry["client_lr"]) and entry["client_lr"] > 0, name


_check_table()
