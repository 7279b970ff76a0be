"""The simulation engine: one client written once, vmapped over chunks of a cohort.

Building blocks (each importable on its own for research code):

* :func:`local_update` (``ldpsim.fl.client``) -- local training of ONE client.
* :func:`privatize` -- clip + noise of one client's update.
* :func:`aggregation_weights`, :func:`weighted_mean`, :func:`server_optimizer`,
  :func:`server_update` (``ldpsim.fl.server``).
* :func:`make_round_fn` -- a whole round as one pure, jittable function;
  :func:`make_eval_fn`, :func:`sample_cohort`, :class:`RoundHyper`, :class:`ServerState`.
* :class:`RoundMetrics`, :func:`finalize_metrics`, :func:`theory_noise_norm`.

And the one obvious entry point, ``ldpsim.fl.simulate.simulate(config)``
(:class:`SimulationConfig` in, history rows out); ``ldpsim.fl.simulate`` itself is the
module (a package attribute cannot be both), so import the function from it::

    from ldpsim.fl import SimulationConfig
    from ldpsim.fl.simulate import simulate

Names are loaded lazily so that importing :mod:`ldpsim.fl.config` (e.g. for the CLI's
``--help``) does not import JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SimulationConfig": "config",
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
    "RoundHyper": "simulate",
    "ServerState": "simulate",
    "build_data": "simulate",
    "client_key": "simulate",
    "init_state": "simulate",
    "initial_state": "simulate",
    "make_eval_fn": "simulate",
    "make_round_fn": "simulate",
    "noise_scale": "simulate",
    "sample_cohort": "simulate",
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
