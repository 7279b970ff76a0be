"""One simulation's settings as nested frozen configs: :class:`Experiment`.

:class:`Experiment` holds one config of each part of the schema
(:mod:`ldpsim._src.fl.schema`): the :class:`Data`, the :class:`Training`, the privacy mode
(exactly one of :class:`LocalDP`, :class:`MindSpore`, :class:`CentralDP`,
:class:`DistributedDP`, or the class of a mode added to the registry), optional
:class:`DpSgdClients`, and the :class:`Execution`::

    import ldpsim
    from ldpsim._src.fl.experiment import PrivUnit2

    exp = ldpsim.Experiment(
        data=ldpsim.Data(dataset="mnist", population=6000),
        training=ldpsim.Training(rounds=30, clients_per_round=1000),
        privacy=ldpsim.LocalDP(epsilon=8.0, clip=1.0,
                               randomizer=PrivUnit2(norm_epsilon=2.0)))
    rows = ldpsim.simulate(exp)

:meth:`Experiment.flat` and :meth:`Experiment.from_flat` convert to and from the flat
:class:`~ldpsim.fl.SimulationConfig` (the CLI flags, TOML experiment files, manifests, and
what the engine reads), losslessly, and a validation error names the nested option
(``privacy.epsilon``). The schema's classes and tables are re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.schema import (
    _DECIDING, AdaptiveClip, CentralDP, Data, DistributedDP, DpSgdClients, Execution, LocalDP,
    MindSpore, Privacy, RandomizerConfig, SecAggDP, Training, _frozen, _mode_of, _sections,
    _switch, applies, flat_paths, governed, mode_class, placement, randomizer_class,
    randomizer_config)
from ldpsim._src.fl import schema as _schema
from ldpsim._src.privacy import registry

__all__ = ["AdaptiveClip", "CentralDP", "Data", "DistributedDP", "DpSgdClients", "Execution",
           "Experiment", "LocalDP", "MindSpore", "RandomizerConfig", "SecAggDP", "Training",
           "applies", "flat_paths", "governed", "mode_class", "placement", "randomizer_class",
           "randomizer_config"]

for _spec in registry.RANDOMIZERS:   # PrivUnit2, SignDS, ... as module attributes
    if _spec.engine:
        globals()[_schema._randomizer_class(_spec).__name__] = _schema._randomizer_class(_spec)


@_frozen
class Experiment:
    """One simulation: data, training, one privacy mode, optional DP-SGD clients, execution.

    Validated on construction (through :class:`SimulationConfig`); errors name the nested
    option. ``ldpsim.simulate`` accepts it wherever it accepts a ``SimulationConfig``.
    """

    data: Data = Data()
    training: Training = Training()
    privacy: Privacy = dataclasses.field(default_factory=LocalDP)
    client_dp: DpSgdClients | None = _switch("client_dp", DpSgdClients)
    execution: Execution = Execution()

    def __post_init__(self) -> None:
        for name, kind in (("data", Data), ("training", Training), ("execution", Execution)):
            if not isinstance(getattr(self, name), kind):
                raise LdpsimError(f"{name} must be an ldpsim.{kind.__name__}, got "
                                  f"{type(getattr(self, name)).__name__}")
        if _mode_of(type(self.privacy)) is None:
            raise LdpsimError(
                "privacy must be one of " + ", ".join(
                    "ldpsim." + mode_class(m.name).__name__ for m in registry.MODES)
                + f"; got {type(self.privacy).__name__}")
        if self.client_dp is not None and not isinstance(self.client_dp, DpSgdClients):
            raise LdpsimError("client_dp must be an ldpsim.DpSgdClients or None")
        self.flat()   # validates every value

    def _flat_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"privacy_mode": _mode_of(type(self.privacy))}
        for section, _ in _sections():
            _flatten(getattr(self, section), out)
        _flatten(self.privacy, out)
        if self.client_dp is not None:
            out["client_dp"] = True
            _flatten(self.client_dp, out)
        return out

    def flat(self) -> SimulationConfig:
        """The same settings as a flat :class:`SimulationConfig` (the CLI/TOML view).

        Raises:
            LdpsimError: an invalid value, named by its nested path (``privacy.epsilon``).
        """
        fields = self._flat_fields()
        try:
            return SimulationConfig(**fields)
        except LdpsimError as err:
            raise LdpsimError(_nested_message(str(err), flat_paths(fields))) from None

    @classmethod
    def from_flat(cls, config: SimulationConfig) -> "Experiment":
        """The nested form of a flat :class:`SimulationConfig` (the options its shape uses):
        ``Experiment.from_flat(c).flat() == c``.

        Every flat option is checked by :class:`SimulationConfig` against its mode except
        ``delta`` and ``clip``, which a flat configuration keeps in every mode (so that one
        sweep file may share them across modes and randomizers): set away from their
        defaults in a mode that does not read them, they have no nested place, and the
        conversion refuses them rather than drop them (the DP-SGD clients' δ has its own
        place, ``client_dp_delta``).

        Raises:
            LdpsimError: ``config`` sets an option its nested form has no place for (e.g.
                ``delta`` with ``privacy_mode="mindspore"``, whose δ is ``dp_delta``): it
                would be dropped.
        """
        from ldpsim._src.fl.defaults import given_fields

        given = given_fields(config)  # per-dataset defaults unset again: lossless both ways
        out = cls(**{section: _build(kind, given) for section, kind in _sections()},
                  privacy=_build(mode_class(config.privacy_mode), given),
                  client_dp=_build(DpSgdClients, given) if config.client_dp else None)
        kept = flat_paths({k: getattr(config, k) for k in _DECIDING})
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if f.name not in kept and value != f.default and not (
                    isinstance(value, float) and math.isnan(value)):
                raise LdpsimError(
                    f"{f.name}={value!r} has no place in the nested form: "
                    f"privacy_mode={config.privacy_mode!r} does not use it; remove it (the "
                    f"conversion never drops a setting)")
        return out


def _flatten(obj: Any, out: dict[str, Any]) -> None:
    """The flat fields of the nested config ``obj`` into ``out``."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("randomizer"):
            out[f.metadata["flat"]] = type(value).name
            _flatten(value, out)
        elif "switch" in f.metadata:
            out[f.metadata["switch"]] = value is not None
            if value is not None:
                _flatten(value, out)
        else:
            out[f.metadata.get("flat", f.name)] = value


def _build(kind: type, flat: Mapping[str, Any]) -> Any:
    """An instance of the nested config ``kind`` from the flat settings ``flat``."""
    kwargs = {}
    for f in dataclasses.fields(kind):
        if f.metadata.get("randomizer"):
            kwargs[f.name] = _build(randomizer_class(flat["mechanism"]), flat)
        elif "switch" in f.metadata:
            kwargs[f.name] = (_build(f.metadata["config"], flat) if flat[f.metadata["switch"]]
                              else None)
        else:
            kwargs[f.name] = flat[f.metadata.get("flat", f.name)]
    return kind(**kwargs)


def _nested_message(message: str, paths: Mapping[str, str]) -> str:
    """``message`` with flat field names (``dp_eps``) replaced by their nested paths."""
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, paths), key=len,
                                                 reverse=True)) + r")\b(?=\s*(?:=|must|\())")
    return pattern.sub(lambda m: paths[m.group(1)], message)
