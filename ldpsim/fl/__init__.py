"""The simulation engine: one client written once, vmapped over chunks of a cohort.

Modules, in the direction of dependency (each importable on its own for research code):

* ``ldpsim.fl.client`` -- :func:`local_update`, local training of ONE client;
  ``ldpsim.fl.dp_client`` -- DP-SGD inside a client.
* ``ldpsim.fl.privatize`` -- :func:`privatize`, clip + noise of one client's update.
* ``ldpsim.fl.server`` -- :func:`aggregation_weights`, :func:`weighted_mean`,
  :func:`server_optimizer`, :func:`server_update`.
* ``ldpsim.fl.metrics`` -- :class:`RoundMetrics`, :func:`finalize_metrics`.
* ``ldpsim.fl.modes`` -- each privacy mode (local DP, MindSpore, central DP-FedAvg,
  distributed DP, the aggregate-noise shortcut) as one :class:`RoundMechanism` object,
  and :func:`plan`, a configuration's mode with its columns and accountant.
* ``ldpsim.fl.round`` -- :func:`make_round_fn`, the ONE round kernel (pure, jittable),
  :func:`make_eval_fn`, :class:`RoundHyper`, :class:`ServerState`.
* ``ldpsim.fl.loop`` -- :func:`run_loop`, the one host loop of every driver.
* ``ldpsim.fl.experiment`` -- :class:`Experiment`: the settings as nested frozen configs
  (data, training, one privacy mode, execution); ``ldpsim.fl.config`` -- the same settings
  flat (:class:`SimulationConfig`, the CLI and TOML schema).
* ``ldpsim.fl.simulate`` -- :func:`simulate`, the one obvious entry point (settings in,
  history rows out), also ``ldpsim.simulate``.
* ``ldpsim.fl._policy`` -- per-backend speed choices (chunk sizes, devices), private.

Names are loaded lazily so that importing :mod:`ldpsim.fl.config` (e.g. for the CLI's
``--help``) does not import JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SimulationConfig": "config",
    "Experiment": "experiment",
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
    "PrivacyPlan": "modes",
    "plan": "modes",
    "RoundHyper": "round",
    "ServerState": "round",
    "client_key": "round",
    "init_state": "round",
    "make_eval_fn": "round",
    "make_round_fn": "round",
    "run_loop": "loop",
    "build_data": "simulate",
    "initial_state": "simulate",
    "sample_cohort": "simulate",
    "simulate_lanes": "simulate",
    "ClientMetrics": "client",
    "client_optimizer": "client",
    "local_update": "client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))
