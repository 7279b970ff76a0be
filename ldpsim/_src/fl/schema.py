"""The schema of a simulation's settings: the flat fields, and the nested frozen configs
that group them by what they are about.

The flat fields (:class:`FlatFields`: every option's name, type and default, written once;
:class:`~ldpsim.fl.SimulationConfig` is this table validated) are grouped by the nested
classes: the :class:`Data`, the :class:`Training`, the privacy mode (exactly one of
:class:`LocalDP`, :class:`MindSpore`, :class:`CentralDP`, :class:`DistributedDP`, or the class
of a mode added to the registry, each holding only the options its mode uses, with one name,
``epsilon``, wherever a per-round budget is meant), the local randomizer of :class:`LocalDP`
(one class per randomizer of :mod:`ldpsim._src.privacy.registry`, holding that randomizer's
own options only), optional :class:`DpSgdClients`, and the :class:`Execution` (speed only).
:class:`~ldpsim.Experiment` holds one of each::

    import ldpsim
    from ldpsim._src.fl.schema import PrivUnit2

    exp = ldpsim.Experiment(
        data=ldpsim.Data(dataset="mnist", population=6000),
        training=ldpsim.Training(rounds=30, clients_per_round=1000),
        privacy=ldpsim.LocalDP(epsilon=8.0, clip=1.0,
                               randomizer=PrivUnit2(norm_epsilon=2.0)))
    rows = ldpsim.simulate(exp)

An option exists only where it is used: ``LocalDP(noise_multiplier=…)`` and
``PrivUnit2(sign_k=…)`` are ``TypeError``.

This nesting is THE schema. The flat view (the CLI flags, TOML experiment files, manifests,
and what the engine reads) names every option by the leaf of its nested path
(:func:`flat_paths`; a field's ``metadata["flat"]`` when the names differ, ``dp_eps`` is
``privacy.epsilon`` of :class:`MindSpore`), so which flat option applies to which mode,
randomizer, or switch (``adaptive_clip``, ``client_dp``) is read off the nesting
(:func:`applies`, :func:`placement`), never written as a separate rule. A privacy mode's
class is named by its registry entry (:attr:`~ldpsim._src.privacy.registry.ModeSpec.nested`;
a mode without one gets a class generated from its ``settings`` and ``options``); a
randomizer's class is generated from its :class:`~ldpsim._src.privacy.registry.RandomizerSpec`
options.

This module imports neither the flat configuration nor :class:`~ldpsim.Experiment`: both
import it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import warnings
from typing import Any, ClassVar, Mapping, Union

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import registry

__all__ = ["AdaptiveClip", "CentralDP", "Data", "DistributedDP", "DpSgdClients", "Execution",
           "FlatFields", "LocalDP", "MindSpore", "RandomizerConfig", "SecAggDP", "Training",
           "applies", "flat_paths", "governed", "mode_class", "placement", "randomizer_class",
           "randomizer_config"]

_frozen = dataclasses.dataclass(frozen=True, kw_only=True)


# ----------------------------------------------------------------------------- the flat fields


@_frozen
class FlatFields:
    """Every flat option's name, type and default, written once (each is documented on
    :class:`~ldpsim.fl.SimulationConfig`, which is this table validated). The registry's
    randomizer and mode options not declared here are appended as fields."""

    dataset: str = "synthetic"
    data_dir: str | None = None
    data_source: str = "auto"
    partition: str = "iid"
    alpha: float = math.inf
    model: str = "auto"
    population: int = 1000
    examples_per_client: int = 32
    clients_per_round: int = 100
    rounds: int = 10
    epsilon: float = math.inf
    delta: float = 1e-5
    clip: float = 1.0
    mechanism: str = "gaussian"
    norm_epsilon: float | None = None
    sign_k: float = 0.01
    sign_thr_ratio: float = 0.6
    sign_global_lr: float = 0.1
    sign_dim_out: int = 0
    projection_dim: int | None = None
    neighbours: str = "replace"
    calibration: str = "analytic"
    local_steps: int | None = None         # None: per-dataset default (fl/defaults.py)
    local_epochs: int | None = None
    batch_size: int | None = None
    client_optimizer: str | None = None
    client_lr: float | None = None
    server_optimizer: str = "fedavg"
    server_lr: float | None = None
    server_momentum: float = 0.9
    weighting: str = "examples"
    sampling: str = "uniform"
    eval_every: int = 1
    chunk_size: int | None = None
    devices: int | None = None
    seed: int = 0
    privacy_mode: str = "ldp"
    noise_mode: str = "per-client"
    noise_multiplier: float = 1.0
    adaptive_clip: bool = False
    target_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    clipped_count_stddev: float | None = None
    dropout_rate: float = 0.0
    secagg_mechanism: str = "ddg"
    bits: int = 16
    granularity: float | None = None
    epsilon_scope: str = "round"
    dp_eps: float = 50.0
    dp_delta: float = 0.01
    dp_norm_clip: float = 1.0
    mindspore_clip_rule: str = "running-min"
    mindspore_neighbours: str = "add-remove"
    client_dp: bool = False
    client_dp_micro_batches: int = 1
    client_dp_clip: float = 1.0
    client_dp_noise_multiplier: float = 0.0
    client_dp_delta: float | None = None
    stop_at_epsilon: float | None = None
    stop_policy: str = "client"


def _registry_fields(declared: set[str]) -> list[tuple[str, Any, Any]]:
    """The options of the registry's randomizers and modes (their :class:`OptionSpec`)
    that are not declared fields above: appended to :class:`FlatFields` with their
    defaults, so that adding a randomizer or a mode with a new option is its registry
    entry (the nested schema holds it on the randomizer's or the mode's class)."""
    out = {}
    for spec in (*registry.RANDOMIZERS, *registry.MODES):
        for option in spec.options:
            if option.field not in declared and option.field not in out:
                out[option.field] = (option.field, f"{option.type.__name__} | None",
                                     dataclasses.field(default=option.default))
    return list(out.values())


_EXTRA = _registry_fields({f.name for f in dataclasses.fields(FlatFields)})
if _EXTRA:
    FlatFields = dataclasses.make_dataclass(  # noqa: F811 (the same class, extended)
        "FlatFields", _EXTRA, bases=(FlatFields,), frozen=True, kw_only=True,
        namespace={"__module__": __name__, "__doc__": FlatFields.__doc__})

#: The flat defaults (the nested classes' fields take theirs from here: one source).
_FLAT = {f.name: f.default for f in dataclasses.fields(FlatFields)}


def _opt(flat: str, **meta: Any) -> Any:
    """A field whose flat name is ``flat`` (default: the flat field's)."""
    return dataclasses.field(default=_FLAT[flat], metadata={"flat": flat, **meta})


def _switch(flat: str, config: type) -> Any:
    """An optional sub-configuration: present iff the flat boolean ``flat`` is true."""
    return dataclasses.field(default=None, metadata={"switch": flat, "config": config})


@_frozen
class Data:
    """Which data, dealt to how many clients (see :class:`~ldpsim.fl.SimulationConfig` for each)."""

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


# ----------------------------------------------------------------------------- randomizers


@_frozen
class RandomizerConfig:
    """The base of the local randomizers' configurations (one generated class per
    registry entry, :func:`randomizer_class`; its fields are that randomizer's own
    options, by their flat names)."""

    name: ClassVar[str] = ""


def _class_name(label: str) -> str:
    """``"Duchi et al."`` -> ``"Duchi"``; ``"PrivUnit2"`` unchanged."""
    words = re.sub(r"\bet al\.?", "", label).split()
    return "".join(w[:1].upper() + w[1:] for w in words if w.isalnum()) or "Randomizer"


def _option_default(option: registry.OptionSpec) -> Any:
    return _FLAT.get(option.field, option.default)


@functools.lru_cache(maxsize=None)
def _randomizer_class(spec: registry.RandomizerSpec) -> type:
    return dataclasses.make_dataclass(
        _class_name(spec.label),
        [(o.field, Any, dataclasses.field(default=_option_default(o))) for o in spec.options],
        bases=(RandomizerConfig,), frozen=True, kw_only=True,
        namespace={"__module__": __name__, "name": spec.name,
                   "__doc__": f"{spec.label}: {spec.help} (``mechanism={spec.name!r}``)."})


def randomizer_class(name: str) -> type:
    """The configuration class of the local randomizer ``name`` (from its registry entry)."""
    spec = registry.randomizer(name)
    if not spec.engine:
        raise LdpsimError(f"mechanism must be one of {', '.join(registry.engine_randomizers())}"
                          f"; got {name!r}")
    return _randomizer_class(spec)


def randomizer_config(name: str, **options: Any) -> RandomizerConfig:
    """``randomizer_config("privunit2", norm_epsilon=1.0)``: the randomizer ``name`` with
    its own options (an option it does not have is a ``TypeError``)."""
    return randomizer_class(name)(**options)


for _spec in registry.RANDOMIZERS:   # PrivUnit2, SignDS, ... as module attributes
    if _spec.engine:
        globals()[_randomizer_class(_spec).__name__] = _randomizer_class(_spec)


# ----------------------------------------------------------------------------- privacy modes


@_frozen
class LocalDP:
    """Local DP (``privacy_mode="ldp"``): each client clips to ``clip`` and applies the local
    randomizer ``randomizer`` (default Gaussian) for (``epsilon``, ``delta``) per round;
    ``epsilon=inf``: no noise (clipping only). The randomizer's own options live on it:
    ``LocalDP(randomizer=PrivUnit2(norm_epsilon=2.0))``.

    ``LocalDP(mechanism="privunit2", norm_epsilon=2.0)`` (the older spelling) still works,
    with a ``DeprecationWarning``; ``.mechanism`` and ``.norm_epsilon`` (…) still read."""

    epsilon: float = _opt("epsilon")
    delta: float = _opt("delta")
    clip: float = _opt("clip")
    neighbours: str = _opt("neighbours")
    calibration: str = _opt("calibration")
    noise_mode: str = _opt("noise_mode")
    stop_at_epsilon: float | None = _opt("stop_at_epsilon")
    stop_policy: str = _opt("stop_policy", requires="stop_at_epsilon")
    randomizer: RandomizerConfig = dataclasses.field(
        default_factory=lambda: randomizer_config(_FLAT["mechanism"]),
        metadata={"flat": "mechanism", "randomizer": True})

    @property
    def mechanism(self) -> str:
        """The randomizer's registry name."""
        return type(self.randomizer).name

    def __getattr__(self, name: str) -> Any:   # the older flat spelling of an option
        if name in registry.own_option_fields():
            randomizer = self.__dict__.get("randomizer")
            return getattr(randomizer, name, _FLAT.get(name))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_localdp_init = LocalDP.__init__


def _localdp_legacy_init(self, *, mechanism: str | None = None, **kwargs: Any) -> None:
    legacy = {k: kwargs.pop(k) for k in [k for k in kwargs if k in registry.own_option_fields()]}
    if mechanism is not None or legacy:
        if "randomizer" in kwargs:
            raise TypeError("LocalDP: give randomizer=..., not mechanism= or a randomizer's "
                            "option besides it")
        warnings.warn("LocalDP(mechanism=..., <option>=...) is deprecated: give "
                      "LocalDP(randomizer=...) (ldpsim._src.fl.experiment.randomizer_config"
                      "(name, **options), or the class, e.g. PrivUnit2(norm_epsilon=...))",
                      DeprecationWarning, stacklevel=2)
        kind = randomizer_class(mechanism if mechanism is not None else _FLAT["mechanism"])
        own = {f.name for f in dataclasses.fields(kind)}
        for name, value in legacy.items():
            if name not in own and value != _FLAT.get(name):
                users = registry.users_of(name)[1]
                raise LdpsimError(
                    f"privacy.{name}={value!r} does not apply: it is used by mechanism="
                    + " and ".join(repr(r) for r in users) + f", and this run has mechanism="
                    f"{kind.name!r}; remove it or choose the mechanism that uses it")
        kwargs["randomizer"] = kind(**{k: v for k, v in legacy.items() if k in own})
    _localdp_init(self, **kwargs)


_localdp_legacy_init.__doc__ = _localdp_init.__doc__
LocalDP.__init__ = _localdp_legacy_init


@_frozen
class MindSpore:
    """MindSpore Federated ``DP_ENCRYPT``: per-round (``epsilon``, ``delta``) (MindSpore's
    ``dp_eps``/``dp_delta``), adaptive per-client bounds ``norm_clip·‖W_{t+1} − W_t‖``."""

    epsilon: float = _opt("dp_eps")
    delta: float = _opt("dp_delta")
    norm_clip: float = _opt("dp_norm_clip")
    clip_rule: str = _opt("mindspore_clip_rule")
    neighbours: str = _opt("mindspore_neighbours")
    noise_mode: str = _opt("noise_mode")
    stop_at_epsilon: float | None = _opt("stop_at_epsilon")
    stop_policy: str = _opt("stop_policy", requires="stop_at_epsilon")


@_frozen
class AdaptiveClip:
    """Quantile-adaptive clipping of central DP-FedAvg (Andrew et al. 2021)."""

    target_quantile: float = _opt("target_quantile")
    learning_rate: float = _opt("clip_learning_rate")
    count_stddev: float | None = _opt("clipped_count_stddev")


@_frozen
class CentralDP:
    """Central DP-FedAvg: one server draw N(0, (z·clip)²) on the clipped sum; the budget is
    the noise multiplier z (user-level ε is accounted over the rounds)."""

    noise_multiplier: float = _opt("noise_multiplier")
    clip: float = _opt("clip")
    delta: float = _opt("delta")
    adaptive: AdaptiveClip | None = _switch("adaptive_clip", AdaptiveClip)


@_frozen
class DistributedDP:
    """Distributed DP: each client adds N(0, (z·clip)²/m); clients drop out with
    ``dropout_rate``."""

    noise_multiplier: float = _opt("noise_multiplier")
    clip: float = _opt("clip")
    delta: float = _opt("delta")
    dropout_rate: float = _opt("dropout_rate")
    noise_mode: str = _opt("noise_mode")


@_frozen
class DpSgdClients:
    """Every client trains with DP-SGD (sample-level DP inside the client)."""

    micro_batches: int = _opt("client_dp_micro_batches")
    clip: float = _opt("client_dp_clip")
    noise_multiplier: float = _opt("client_dp_noise_multiplier")
    delta: float | None = _opt("client_dp_delta")


@_frozen
class SecAggDP:
    """Distributed discrete DP over secure aggregation (sums of integers mod 2^bits): the
    distributed discrete Gaussian or Skellam mechanism, (epsilon, delta) per round, or over the
    whole run with ``epsilon_scope="run"`` (Poisson cohort sampling's amplification)."""

    mechanism: str = _opt("secagg_mechanism")
    epsilon: float = _opt("epsilon")
    delta: float = _opt("delta")
    clip: float = _opt("clip")
    bits: int = _opt("bits")
    granularity: float | None = _opt("granularity")
    epsilon_scope: str = _opt("epsilon_scope")
    dropout_rate: float = _opt("dropout_rate")


Privacy = Union[LocalDP, MindSpore, CentralDP, DistributedDP, SecAggDP]


@functools.lru_cache(maxsize=None)
def _mode_class(spec: registry.ModeSpec) -> type:
    if spec.nested:
        return registry.resolve(spec.nested)
    names = list(dict.fromkeys([*spec.settings, *(o.field for o in spec.options)]))
    defaults = {o.field: _option_default(o) for o in spec.options}
    return dataclasses.make_dataclass(
        "".join(w.capitalize() for w in re.split(r"[^0-9A-Za-z]+", spec.name)) + "DP",
        [(n, Any, dataclasses.field(default=_FLAT.get(n, defaults.get(n)))) for n in names],
        frozen=True, kw_only=True,
        namespace={"__module__": __name__, "__doc__": f"{spec.label or spec.name}: {spec.help}"})


def mode_class(name: str) -> type:
    """The nested configuration class of the privacy mode ``name`` (its registry entry's)."""
    return _mode_class(registry.mode(name))


def _mode_of(kind: type) -> str | None:
    return next((m.name for m in registry.MODES if _mode_class(m) is kind), None)


# ----------------------------------------------------------------------------- the flat view

#: What decides the nesting of a flat configuration: which mode class, which randomizer
#: class, which optional sub-configurations are present, which gated options are read.
_DECIDING = ("privacy_mode", "mechanism", "adaptive_clip", "client_dp", "stop_at_epsilon")


def _leaves(kind: type, prefix: str, shape: Mapping[str, Any], out: dict[str, str],
            *, every: bool = False) -> None:
    """flat name -> nested path of the fields of ``kind`` under ``prefix`` for ``shape``
    (``every``: every randomizer's and every switched sub-configuration's too)."""
    for f in dataclasses.fields(kind):
        path = f"{prefix}.{f.name}"
        flat = f.metadata.get("flat", f.name)
        if f.metadata.get("randomizer"):
            out[flat] = path
            names = (registry.engine_randomizers() if every
                     else [shape.get("mechanism", _FLAT["mechanism"])])
            for name in names:
                if name in registry.engine_randomizers():
                    _leaves(randomizer_class(name), path, shape, out)
        elif "switch" in f.metadata:
            out[f.metadata["switch"]] = path
            if every or shape.get(f.metadata["switch"]):
                _leaves(f.metadata["config"], path, shape, out)
        elif "requires" in f.metadata and not every and shape.get(f.metadata["requires"]) is None:
            continue
        else:
            out[flat] = path


def _sections() -> tuple[tuple[str, type], ...]:
    return (("data", Data), ("training", Training), ("execution", Execution))


def flat_paths(shape: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The one table: flat name -> nested path.

    With ``shape`` (flat settings: ``privacy_mode``, ``mechanism``, ``adaptive_clip``,
    ``client_dp``, ``stop_at_epsilon``; the flat defaults for those missing), the paths of
    the configuration of that shape: exactly the flat options it uses. Without, every flat
    name, each with the path of the first mode that has it.
    """
    if shape is None:
        out: dict[str, str] = {}
        for m in registry.MODES:
            for k, v in _paths(m.name, every=True).items():
                out.setdefault(k, v)
        return out
    shape = {k: shape.get(k, _FLAT.get(k)) for k in _DECIDING}
    return dict(_paths(shape["privacy_mode"], shape["mechanism"], bool(shape["adaptive_clip"]),
                       bool(shape["client_dp"]), shape["stop_at_epsilon"] is not None))


def _paths(mode: str, mechanism: str = "", adaptive: bool = False, client_dp: bool = False,
           budget: bool = False, *, every: bool = False) -> dict[str, str]:
    # cached per registry (a spec added or replaced later gives new tables)
    return _cached_paths(mode, mechanism, adaptive, client_dp, budget, every,
                         (id(registry.MODES), id(registry.RANDOMIZERS)))


@functools.lru_cache(maxsize=1024)
def _cached_paths(mode: str, mechanism: str, adaptive: bool, client_dp: bool, budget: bool,
                  every: bool, registry_key: tuple) -> dict[str, str]:
    shape = {"mechanism": mechanism, "adaptive_clip": adaptive, "client_dp": client_dp,
             "stop_at_epsilon": 1.0 if budget else None}
    out: dict[str, str] = {}
    for section, kind in _sections():
        _leaves(kind, section, shape, out, every=every)
    out["privacy_mode"] = "privacy"
    _leaves(mode_class(mode), "privacy", shape, out, every=every)
    out["client_dp"] = "client_dp"
    if every or client_dp:
        _leaves(DpSgdClients, "client_dp", shape, out)
    return out


@functools.lru_cache(maxsize=8)
def _governed(modes: tuple, randomizers: tuple) -> tuple[str, ...]:
    """The flat options some configurations use and others do not."""
    everywhere = set(_paths(modes[0].name))
    for m in modes:
        everywhere &= set(_paths(m.name))
    return tuple(f for f in flat_paths() if f not in everywhere)


def governed() -> tuple[str, ...]:
    """The flat options the nesting governs: used by some modes, randomizers or switched
    sub-configurations only (the others every configuration holds)."""
    return _governed(registry.MODES, registry.RANDOMIZERS)


def applies(field: str, params: Mapping[str, Any]) -> bool:
    """Whether the flat option ``field`` has a place in the configuration of the flat
    settings ``params`` (its nested form holds it)."""
    return field in flat_paths(params)


def placement(field: str) -> tuple[str, tuple[str, ...]]:
    """Where a governed flat option lives, for messages: ``("randomizer", names)``,
    ``("switch", (flag,))``, ``("requires", (flag,))`` or ``("mode", names)``."""
    for m in registry.MODES:
        kind = mode_class(m.name)
        for f in dataclasses.fields(kind):
            if "switch" in f.metadata and field in {
                    g.metadata.get("flat", g.name) for g in dataclasses.fields(f.metadata["config"])}:
                return "switch", (f.metadata["switch"],)
            if f.metadata.get("flat", f.name) == field and "requires" in f.metadata:
                return "requires", (f.metadata["requires"],)
    if field in {g.metadata.get("flat", g.name) for g in dataclasses.fields(DpSgdClients)}:
        return "switch", ("client_dp",)
    users = tuple(n for n in registry.engine_randomizers()
                  if field in {g.name for g in dataclasses.fields(randomizer_class(n))})
    if users:
        return "randomizer", users
    return "mode", tuple(m.name for m in registry.MODES if field in _paths(m.name))
