"""A simulation's settings as nested frozen configs that say what they mean.

:class:`Experiment` groups the settings by what they are about: the :class:`Data`, the
:class:`Training`, the privacy mode (exactly one of :class:`LocalDP`, :class:`MindSpore`,
:class:`CentralDP`, :class:`DistributedDP`, each holding only the options its mode uses,
with one name, ``epsilon``, wherever a per-round budget is meant), optional
:class:`DpSgdClients`, and the :class:`Execution` (speed only, never results)::

    import ldpsim

    exp = ldpsim.Experiment(
        data=ldpsim.Data(dataset="mnist", population=6000),
        training=ldpsim.Training(rounds=30, clients_per_round=1000),
        privacy=ldpsim.LocalDP(epsilon=8.0, delta=1e-5, clip=1.0))
    rows = ldpsim.simulate(exp)

An option of another mode cannot be given at all (``LocalDP(noise_multiplier=…)`` is a
``TypeError``). The flat :class:`~ldpsim.fl.SimulationConfig` — the schema of the
CLI flags and of TOML experiment files — is the same settings spelled flat:
:meth:`Experiment.flat` and :meth:`Experiment.from_flat` convert both ways, losslessly, and
every validation error names the nested option (``privacy.epsilon``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Union

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.privacy import registry

__all__ = ["AdaptiveClip", "CentralDP", "Data", "DistributedDP", "DpSgdClients", "Execution",
           "Experiment", "LocalDP", "MindSpore", "Training"]

_frozen = dataclasses.dataclass(frozen=True, kw_only=True)

#: The flat config's defaults: the nested classes below take theirs from it (one source).
_FLAT = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}


@_frozen
class Data:
    """Which data, dealt to how many clients (see :class:`SimulationConfig` for each)."""

    dataset: str = _FLAT["dataset"]
    data_dir: str | None = _FLAT["data_dir"]
    data_source: str = _FLAT["data_source"]
    partition: str = _FLAT["partition"]
    alpha: float = _FLAT["alpha"]
    population: int = _FLAT["population"]
    examples_per_client: int = _FLAT["examples_per_client"]


@_frozen
class Training:
    """The federated optimisation: model, rounds, cohort, local and server optimizers."""

    model: str = _FLAT["model"]
    rounds: int = _FLAT["rounds"]
    clients_per_round: int = _FLAT["clients_per_round"]
    sampling: str = _FLAT["sampling"]
    local_steps: int = _FLAT["local_steps"]
    local_epochs: int | None = _FLAT["local_epochs"]
    batch_size: int = _FLAT["batch_size"]
    client_optimizer: str = _FLAT["client_optimizer"]
    client_lr: float = _FLAT["client_lr"]
    server_optimizer: str = _FLAT["server_optimizer"]
    server_lr: float = _FLAT["server_lr"]
    server_momentum: float = _FLAT["server_momentum"]
    weighting: str = _FLAT["weighting"]
    eval_every: int = _FLAT["eval_every"]
    seed: int = _FLAT["seed"]


@_frozen
class Execution:
    """How the rounds run (clients per vmapped chunk, devices): speed only."""

    chunk_size: int | None = _FLAT["chunk_size"]
    devices: int | None = _FLAT["devices"]


@_frozen
class _LocalDPSettings:
    epsilon: float = _FLAT["epsilon"]
    delta: float = _FLAT["delta"]
    clip: float = _FLAT["clip"]
    mechanism: str = _FLAT["mechanism"]
    neighbours: str = _FLAT["neighbours"]
    calibration: str = _FLAT["calibration"]
    noise_mode: str = _FLAT["noise_mode"]
    stop_at_epsilon: float | None = _FLAT["stop_at_epsilon"]
    stop_policy: str = _FLAT["stop_policy"]


#: The local randomizers' own options (:mod:`ldpsim._src.privacy.registry`), fields of
#: :class:`LocalDP` by the same names (an option of another randomizer than ``mechanism``,
#: set away from its default, is an error naming it).
_RANDOMIZER_OPTIONS = registry.own_option_fields()

LocalDP = dataclasses.make_dataclass(
    "LocalDP", [(name, Any, dataclasses.field(default=_FLAT[name]))
                for name in _RANDOMIZER_OPTIONS],
    bases=(_LocalDPSettings,), frozen=True, kw_only=True,
    namespace={"__module__": __name__, "__doc__": """Local DP (``privacy_mode="ldp"``): each
    client clips to ``clip`` and applies the local randomizer ``mechanism`` for (``epsilon``,
    ``delta``) per round; ``epsilon=inf``: no noise (clipping only). The randomizers' own
    options (``norm_epsilon`` of PrivUnit, ``sign_*`` of SignDS, …) are fields too, read
    from the registry."""})


@_frozen
class MindSpore:
    """MindSpore Federated ``DP_ENCRYPT``: per-round (``epsilon``, ``delta``) (MindSpore's
    ``dp_eps``/``dp_delta``), adaptive per-client bounds ``norm_clip·‖W_{t+1} − W_t‖``."""

    epsilon: float = _FLAT["dp_eps"]
    delta: float = _FLAT["dp_delta"]
    norm_clip: float = _FLAT["dp_norm_clip"]
    clip_rule: str = _FLAT["mindspore_clip_rule"]
    neighbours: str = _FLAT["mindspore_neighbours"]
    noise_mode: str = _FLAT["noise_mode"]
    stop_at_epsilon: float | None = _FLAT["stop_at_epsilon"]
    stop_policy: str = _FLAT["stop_policy"]


@_frozen
class AdaptiveClip:
    """Quantile-adaptive clipping of central DP-FedAvg (Andrew et al. 2021)."""

    target_quantile: float = _FLAT["target_quantile"]
    learning_rate: float = _FLAT["clip_learning_rate"]
    count_stddev: float | None = _FLAT["clipped_count_stddev"]


@_frozen
class CentralDP:
    """Central DP-FedAvg: one server draw N(0, (z·clip)²) on the clipped sum; the budget is
    the noise multiplier z (user-level ε is accounted over the rounds)."""

    noise_multiplier: float = _FLAT["noise_multiplier"]
    clip: float = _FLAT["clip"]
    delta: float = _FLAT["delta"]
    adaptive: AdaptiveClip | None = None


@_frozen
class DistributedDP:
    """Distributed DP: each client adds N(0, (z·clip)²/m); clients drop out with
    ``dropout_rate``."""

    noise_multiplier: float = _FLAT["noise_multiplier"]
    clip: float = _FLAT["clip"]
    delta: float = _FLAT["delta"]
    dropout_rate: float = _FLAT["dropout_rate"]
    noise_mode: str = _FLAT["noise_mode"]


@_frozen
class DpSgdClients:
    """Every client trains with DP-SGD (sample-level DP inside the client)."""

    micro_batches: int = _FLAT["client_dp_micro_batches"]
    clip: float = _FLAT["client_dp_clip"]
    noise_multiplier: float = _FLAT["client_dp_noise_multiplier"]


@_frozen
class SecAggDP:
    """Distributed discrete DP over secure aggregation (sums of integers mod 2^bits): the
    distributed discrete Gaussian or Skellam mechanism, (epsilon, delta) per round."""

    mechanism: str = _FLAT["secagg_mechanism"]
    epsilon: float = _FLAT["epsilon"]
    delta: float = _FLAT["delta"]
    clip: float = _FLAT["clip"]
    bits: int = _FLAT["bits"]
    granularity: float | None = _FLAT["granularity"]
    dropout_rate: float = _FLAT["dropout_rate"]


Privacy = Union[LocalDP, MindSpore, CentralDP, DistributedDP, SecAggDP]

#: privacy class -> {nested field: flat field}
_FIELDS = {
    LocalDP: {"epsilon": "epsilon", "delta": "delta", "clip": "clip",
              "mechanism": "mechanism", "neighbours": "neighbours",
              "calibration": "calibration", "noise_mode": "noise_mode",
              "stop_at_epsilon": "stop_at_epsilon", "stop_policy": "stop_policy",
              **{name: name for name in _RANDOMIZER_OPTIONS}},
    MindSpore: {"epsilon": "dp_eps", "delta": "dp_delta",
                "norm_clip": "dp_norm_clip", "clip_rule": "mindspore_clip_rule",
                "neighbours": "mindspore_neighbours",
                "noise_mode": "noise_mode", "stop_at_epsilon": "stop_at_epsilon",
                "stop_policy": "stop_policy"},
    CentralDP: {"noise_multiplier": "noise_multiplier", "clip": "clip", "delta": "delta"},
    DistributedDP: {"noise_multiplier": "noise_multiplier", "clip": "clip",
                    "delta": "delta", "dropout_rate": "dropout_rate",
                    "noise_mode": "noise_mode"},
    SecAggDP: {"mechanism": "secagg_mechanism", "epsilon": "epsilon", "delta": "delta",
               "clip": "clip", "bits": "bits", "granularity": "granularity",
               "dropout_rate": "dropout_rate"},
}

#: privacy class -> (privacy_mode, {nested field: flat field}); the mode's name is its
#: registry spec's (:attr:`ldpsim._src.privacy.registry.ModeSpec.nested` names the class).
_PRIVACY = {kind: (next(m.name for m in registry.MODES
                        if m.nested.rpartition(":")[2] == kind.__name__), names)
            for kind, names in _FIELDS.items()}
_ADAPTIVE = {"target_quantile": "target_quantile", "learning_rate": "clip_learning_rate",
             "count_stddev": "clipped_count_stddev"}
_CLIENT_DP = {"micro_batches": "client_dp_micro_batches", "clip": "client_dp_clip",
              "noise_multiplier": "client_dp_noise_multiplier"}


@_frozen
class Experiment:
    """One simulation: data, training, one privacy mode, optional DP-SGD clients, execution.

    Validated on construction (through :class:`SimulationConfig`); errors name the nested
    option. ``ldpsim.simulate`` accepts it wherever it accepts a ``SimulationConfig``.
    """

    data: Data = Data()
    training: Training = Training()
    privacy: Privacy = LocalDP()
    client_dp: DpSgdClients | None = None
    execution: Execution = Execution()

    def __post_init__(self) -> None:
        for name, kind in (("data", Data), ("training", Training), ("execution", Execution)):
            if not isinstance(getattr(self, name), kind):
                raise LdpsimError(f"{name} must be an ldpsim.{kind.__name__}, got "
                                  f"{type(getattr(self, name)).__name__}")
        if type(self.privacy) not in _PRIVACY:
            raise LdpsimError("privacy must be one of ldpsim.LocalDP, MindSpore, CentralDP, "
                              f"DistributedDP, SecAggDP; got {type(self.privacy).__name__}")
        if self.client_dp is not None and not isinstance(self.client_dp, DpSgdClients):
            raise LdpsimError("client_dp must be an ldpsim.DpSgdClients or None")
        self.flat()   # validates every value

    def _flat_fields(self) -> dict[str, Any]:
        mode, names = _PRIVACY[type(self.privacy)]
        fields = {**dataclasses.asdict(self.data), **dataclasses.asdict(self.training),
                  **dataclasses.asdict(self.execution), "privacy_mode": mode}
        fields.update({flat: getattr(self.privacy, nested) for nested, flat in names.items()})
        adaptive = getattr(self.privacy, "adaptive", None)
        if adaptive is not None:
            fields["adaptive_clip"] = True
            fields.update({flat: getattr(adaptive, n) for n, flat in _ADAPTIVE.items()})
        if self.client_dp is not None:
            fields["client_dp"] = True
            fields.update({flat: getattr(self.client_dp, n) for n, flat in _CLIENT_DP.items()})
        return fields

    def flat(self) -> SimulationConfig:
        """The same settings as a flat :class:`SimulationConfig` (the CLI/TOML schema).

        Raises:
            LdpsimError: an invalid value, named by its nested path (``privacy.epsilon``).
        """
        try:
            return SimulationConfig(**self._flat_fields())
        except LdpsimError as err:
            raise LdpsimError(_nested_message(str(err), type(self.privacy))) from None

    @classmethod
    def from_flat(cls, config: SimulationConfig) -> "Experiment":
        """The nested form of a flat :class:`SimulationConfig` (its mode's options only):
        ``Experiment.from_flat(c).flat() == c``.

        Raises:
            LdpsimError: ``config`` sets an option its mode does not use (e.g. ``delta`` with
                ``privacy_mode="mindspore"``, whose δ is ``dp_delta``): it would be dropped.
        """
        kind = next(k for k, (mode, _) in _PRIVACY.items() if mode == config.privacy_mode)
        names = _PRIVACY[kind][1]
        privacy_kw = {nested: getattr(config, flat) for nested, flat in names.items()}
        if kind is CentralDP and config.adaptive_clip:
            privacy_kw["adaptive"] = AdaptiveClip(
                **{n: getattr(config, flat) for n, flat in _ADAPTIVE.items()})
        client_dp = (DpSgdClients(**{n: getattr(config, flat) for n, flat in _CLIENT_DP.items()})
                     if config.client_dp else None)

        from ldpsim._src.fl.defaults import given_fields

        given = given_fields(config)  # per-dataset defaults unset again: lossless both ways

        def pick(kind_):
            return kind_(**{f.name: given[f.name] for f in dataclasses.fields(kind_)})

        out = cls(data=pick(Data), training=pick(Training), privacy=kind(**privacy_kw),
                  client_dp=client_dp, execution=pick(Execution))
        kept = set(out._flat_fields())
        for f in dataclasses.fields(config):
            if f.name not in kept and getattr(config, f.name) != f.default:
                raise LdpsimError(
                    f"{f.name}={getattr(config, f.name)!r} has no place in the nested form: "
                    f"privacy_mode={config.privacy_mode!r} does not use it; remove it (the "
                    f"conversion never drops a setting)")
        return out


def _nested_names(privacy_kind: type) -> dict[str, str]:
    """flat field -> nested path for an experiment whose privacy is ``privacy_kind``."""
    out = {f.name: f"data.{f.name}" for f in dataclasses.fields(Data)}
    out.update({f.name: f"training.{f.name}" for f in dataclasses.fields(Training)})
    out.update({f.name: f"execution.{f.name}" for f in dataclasses.fields(Execution)})
    out.update({flat: f"privacy.{n}" for n, flat in _PRIVACY[privacy_kind][1].items()})
    out.update({flat: f"privacy.adaptive.{n}" for n, flat in _ADAPTIVE.items()})
    out.update({flat: f"client_dp.{n}" for n, flat in _CLIENT_DP.items()})
    return out


def _nested_message(message: str, privacy_kind: type) -> str:
    """``message`` with flat field names (``dp_eps``) replaced by nested paths."""
    names = _nested_names(privacy_kind)
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names), key=len,
                                                 reverse=True)) + r")\b(?=\s*(?:=|must|\())")
    return pattern.sub(lambda m: names[m.group(1)], message)
