"""The simulation engine: one client written once, vmapped over chunks of a cohort.

Public names, in the direction of dependency (the implementation lives in
``ldpsim._src.fl``, which is private):

* :func:`local_update` -- local training of ONE client; :func:`client_optimizer`.
* :func:`privatize` -- clip + noise of one client's update (returns :class:`Privatized`).
* :func:`aggregation_weights`, :func:`weighted_mean`, :func:`weighted_sum`,
  :func:`server_optimizer`, :func:`server_update` -- the server.
* :class:`RoundMetrics`, :func:`finalize_metrics`, :func:`theory_noise_norm` -- what a
  round measures.
* :class:`RoundMechanism`, :func:`plan` -- each privacy mode (local DP, MindSpore, central
  DP-FedAvg, distributed DP, the aggregate-noise shortcut) as one object of pure functions,
  and a configuration's mode with its columns and accountant.
* :func:`make_round_fn` -- the ONE round kernel (pure, jittable); :func:`make_eval_fn`,
  :class:`RoundHyper`, :class:`ServerState`, :func:`init_state`, :func:`client_key`.
* :func:`run_loop` -- the one host loop of every driver.
* :class:`Experiment` (nested frozen configs, the schema; a local randomizer with its own
  options: :func:`randomizer_config`) and :class:`SimulationConfig` (the same settings
  flat: the CLI and TOML view).
* :func:`simulate_lanes`, :func:`build_data`, :func:`sample_cohort` (``simulate`` itself
  is :func:`ldpsim.simulate`).
* :func:`tensorboard_callback` -- a ``simulate(callback=)`` that writes TensorBoard logs.
* :class:`DpsgdConfig`, :func:`train_dpsgd`, :func:`epsilon_by_epoch` -- centralised
  DP-SGD training (one model, the whole training set; MindArmour's ``DPModel``), on the
  same driver loop.

One name for the initial server state: :func:`init_state` (parameters and key in, a
:class:`ServerState` out). ``initial_state``, a second spelling that built the state
``simulate`` starts from out of a configuration, still works with a
:class:`DeprecationWarning`.

Names are loaded lazily so that importing this module (e.g. for the CLI's ``--help``) does
not import JAX.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_EXPORTS = {
    "SimulationConfig": "config",
    "Experiment": "experiment",
    "randomizer_config": "schema",
    "Privatized": "privatize",
    "privatize": "privatize",
    "aggregation_weights": "server",
    "server_optimizer": "server",
    "server_update": "server",
    "weighted_mean": "server",
    "weighted_sum": "server",
    "CohortSums": "metrics",
    "RoundMetrics": "metrics",
    "finalize_metrics": "metrics",
    "theory_noise_norm": "metrics",
    "RoundMechanism": "modes",
    "PrivacyPlan": "planning",
    "plan": "planning",
    "RoundHyper": "round",
    "ServerState": "round",
    "client_key": "round",
    "init_state": "round",
    "make_eval_fn": "round",
    "make_round_fn": "round",
    "run_loop": "loop",
    "build_data": "simulate",
    "sample_cohort": "simulate",
    "simulate_lanes": "simulate",
    "ClientMetrics": "client",
    "client_optimizer": "client",
    "local_update": "client",
    "tensorboard_callback": "writers",
    "COLUMNS": "columns",
    "HistoryRow": "columns",
    "DpsgdConfig": "dpsgd.config",
    "epsilon_by_epoch": "dpsgd.ledger",
    "train_dpsgd": "dpsgd.train",
}

__all__ = sorted(_EXPORTS)

#: Names kept importable with a DeprecationWarning: name -> (module, what to use instead).
_DEPRECATED = {
    "initial_state": ("simulate", "ldpsim.fl.init_state(model.init(key, x), key) (what "
                      "ldpsim.simulate starts from is fixed by the configuration's seed)"),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f"ldpsim._src.fl.{_EXPORTS[name]}")
        return getattr(module, name)
    if name in _DEPRECATED:
        module, instead = _DEPRECATED[name]
        warnings.warn(f"ldpsim.fl.{name} is deprecated: use {instead}", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(f"ldpsim._src.fl.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))
