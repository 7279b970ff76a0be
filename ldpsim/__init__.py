"""ldpsim: federated learning under local differential privacy, simulated at scale in JAX.

The names a researcher composes are here, at the top level (loaded lazily, so that
``import ldpsim`` does not import JAX)::

    import ldpsim

    rows = ldpsim.simulate(ldpsim.Experiment(
        training=ldpsim.Training(clients_per_round=100),
        privacy=ldpsim.LocalDP(epsilon=8.0, delta=1e-5, clip=1.0)))
    cal = ldpsim.calibrate("gaussian", epsilon=8.0, delta=1e-5, clip=1.0)
    mech = ldpsim.mechanism.gaussian(epsilon=8.0, delta=1e-5, clip=1.0)

Building blocks: :func:`clip_by_global_norm` (clip), :func:`gaussian_randomizer` /
:func:`laplace_randomizer` and the :mod:`ldpsim.mechanism` objects (privatize one client,
returning :class:`Privatized` for additive noise and :class:`Report` for the report
randomizers), :func:`weighted_mean` (aggregate),
:func:`calibrate`, :func:`ldp_epsilon` / :func:`dpfedavg_epsilon` / :func:`dpsgd_epsilon`
(account), :func:`make_round_fn` (a whole round as one pure function) and :mod:`ldpsim.modes`
(where the noise goes).

Devices: call ``ldpsim.use_host_devices()`` before anything imports JAX to run on one CPU
device per core, as the ``ldpsim`` command does; ``ldpsim.enable_compilation_cache()`` keeps
compiled programs on disk for later processes, as the command does too.

Layers (dependencies point downwards only):

* :mod:`ldpsim.privacy` -- clipping, mechanisms, calibration, accounting (no FL).
* :mod:`ldpsim.data`, :mod:`ldpsim.models` -- datasets, partitions, flax models.
* :mod:`ldpsim.fl` -- the simulation engine (one client written once, vmapped).
* :mod:`ldpsim.sweep`, :mod:`ldpsim.plots`, :mod:`ldpsim.cli` -- what users run.
* :mod:`ldpsim.audit`, :mod:`ldpsim.attacks` -- empirical privacy lower bounds and gradient
  inversion: what local DP protects, measured.

Each public module re-exports its names explicitly (``__all__``); the implementation lives in
the private package ``ldpsim._src`` (as optax does), whose layout may change without notice.
"""

from __future__ import annotations

import importlib
from typing import Any

from ldpsim._src._checks import LdpsimError

__version__ = "0.1.0"

# name -> (module, attribute); a None attribute exports the module itself.
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "SimulationConfig": ("ldpsim._src.fl.config", "SimulationConfig"),
    "Experiment": ("ldpsim._src.fl.experiment", "Experiment"),
    **{name: ("ldpsim._src.fl.schema", name) for name in (
        "Data", "Training", "Execution", "LocalDP", "MindSpore", "CentralDP",
        "AdaptiveClip", "DistributedDP", "SecAggDP", "DpSgdClients")},
    "simulate": ("ldpsim._src.fl.simulate", "simulate"),
    "simulate_lanes": ("ldpsim._src.fl.simulate", "simulate_lanes"),
    "make_round_fn": ("ldpsim._src.fl.round", "make_round_fn"),
    "RoundHyper": ("ldpsim._src.fl.round", "RoundHyper"),
    "ServerState": ("ldpsim._src.fl.round", "ServerState"),

    "Privatized": ("ldpsim._src.privacy.randomizers.mechanism", "Privatized"),
    "Report": ("ldpsim._src.privacy.randomizers.mechanism", "Report"),
    "gaussian_randomizer": ("ldpsim._src.privacy.randomizers.mechanism", "gaussian_randomizer"),
    "laplace_randomizer": ("ldpsim._src.privacy.randomizers.mechanism", "laplace_randomizer"),
    "clip_by_global_norm": ("ldpsim._src.privacy.randomizers.clipping", "clip_by_global_norm"),
    "clip_by_l1_norm": ("ldpsim._src.privacy.randomizers.clipping", "clip_by_l1_norm"),
    "weighted_mean": ("ldpsim._src.fl.server", "weighted_mean"),
    "calibrate": ("ldpsim._src.privacy.noise.calibration", "calibrate"),
    "ldp_epsilon": ("ldpsim._src.privacy.accountants.accounting", "ldp_epsilon"),
    "dpfedavg_epsilon": ("ldpsim._src.privacy.accountants.accounting", "dpfedavg_epsilon"),
    "dpsgd_epsilon": ("ldpsim._src.privacy.accountants.accounting", "dpsgd_epsilon"),
}

_EXPORTS["use_host_devices"] = ("ldpsim._src._devices", "use_host_devices")
_EXPORTS["enable_compilation_cache"] = ("ldpsim._src._compile_cache", "enable_compilation_cache")

__all__ = ["LdpsimError", "__version__", *sorted(_EXPORTS)]


#: The public modules, importable as attributes too (``ldpsim.privacy`` after ``import ldpsim``).
_SUBMODULES = ("attacks", "audit", "cli", "data", "fl", "mechanism", "models", "modes", "plots",
               "privacy", "sweep")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # The public names and the dunders; not this file's own imports (Any, importlib, ...).
    return sorted({n for n in globals() if n.startswith("__")} | set(__all__)
                  | set(_EXPORTS) | set(_SUBMODULES))
