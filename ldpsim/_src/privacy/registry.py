"""The one list of local randomizers and privacy modes: one JAX-free spec per entry.

Everything in ldpsim that names a local randomizer or a privacy mode reads this module: the
command line's choices and help (``ldpsim run``/``sweep``/``audit``/``frontier``), the
validation of :class:`~ldpsim.fl.SimulationConfig` (which options apply to which mode and
randomizer), the host-side planning of a run (which factory, with which options), the
registry of calibrated mechanisms (:data:`ldpsim.mechanism.REGISTRY`), the audits, the
frontier's labels and colours, and the manifest's guarantee sentence. Nothing here imports
JAX, so ``ldpsim --help`` stays fast; the implementations are imported lazily from the
dotted paths the specs hold.

Adding a local randomizer is its module plus ONE :class:`RandomizerSpec` in
:data:`RANDOMIZERS`. The module exposes the interface of :mod:`ldpsim._src.privacy.randomizers.randomizer`
at module level::

    make(*, epsilon, dim, clip=1.0, **options) -> LocalMechanism   # host-side calibration
    privatize(key, update, params) -> Report                        # one client
    decode(report, params, like=None) -> estimate
    mean(params, update), variance(params, update)                  # exact, per coordinate

and, optionally, ``audit_game(*, epsilon, dim, clip)`` (its worst-case pair and exact
likelihood-ratio score, for ``ldpsim audit``). A new option of the randomizer is an
:class:`OptionSpec` (with its ``default``): it becomes a :class:`~ldpsim.fl.SimulationConfig`
field and an ``ldpsim run`` flag of the same name, a field of the randomizer's nested
configuration class (:func:`ldpsim._src.fl.schema.randomizer_class`), and applies to the
randomizers that list it, with no other edit (the option's setting is passed to ``make`` by
that name). The entry format::

    RandomizerSpec(
        name="myunit", implementation="ldpsim._src.privacy.randomizers.myunit",
        family="report", guarantee="pure",
        label="MyUnit", colour="tab:cyan",
        help="my unit-vector randomizer (Author et al. 2023)",
        options=(OptionSpec("myunit_k", int, "projection dimension"),),
        audit_dim=16)

Adding a privacy mode is its planning function plus ONE :class:`ModeSpec` in :data:`MODES`;
its own options are :class:`OptionSpec` entries in ``options`` (and in ``settings``, with
the shared options it reads), from which its nested configuration class is generated when
``nested`` names none.

Public: :func:`randomizer`, :func:`mode`, :func:`randomizer_names`, :func:`mode_names`,
:func:`option_applies` (the single rule of which run option a mode and randomizer use),
:func:`resolve` (import a ``"module:attr"`` path).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
from typing import Any, Mapping

__all__ = ["MODES", "ModeSpec", "OptionSpec", "RANDOMIZERS", "RandomizerSpec",
           "engine_randomizers", "mode", "mode_names", "option_applies", "randomizer",
           "randomizer_names", "randomizer_option_fields", "report_randomizers", "resolve"]


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One option of a randomizer (a :class:`~ldpsim.fl.SimulationConfig` field).

    Attributes:
        field: the configuration field (also the keyword of the randomizer's ``make``,
            and ``--field-with-dashes`` on the command line).
        type: ``float`` or ``int`` (how the command line parses it).
        help: one line for ``--help`` (the randomizers that use it are prefixed).
        default: its value when not given (an option not yet a declared
            :class:`~ldpsim.fl.SimulationConfig` field becomes one with this default).
        choices: the values it may take, when they are a closed list (the command line
            offers them; the randomizer's ``make`` checks them).
    """

    field: str
    type: type
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class RandomizerSpec:
    """Everything ldpsim needs to know about one local randomizer, without importing it.

    Attributes:
        name: the registry name (``--mechanism NAME``, the results' ``mechanism`` column).
        implementation: ``"package.module"`` (module-level ``make``, ``privatize``,
            ``decode``, ``mean``, ``variance``) or ``"package.module:attr"`` (an object
            with those attributes).
        family: ``"additive"`` (the release is ``clipped + independent noise``) or
            ``"report"`` (a message the server decodes).
        guarantee: ``"pure"`` (ε-LDP for ideal real-valued randomness; the float32
            realisation may add a tiny δ, reported as ``delta_spent``) or ``"approximate"``
            ((ε, δ)-LDP).
        label: the name in tables and figures.
        colour: its matplotlib colour in figures (None: not drawn by the frontier).
        help: one line for ``--help``.
        input: ``"vector"`` (a model update) or ``"category"`` (an integer in [0, k)).
        engine: a choice of ``SimulationConfig.mechanism`` (a local-DP run's randomizer).
        frontier: compared by ``ldpsim frontier``.
        settings: the shared local-DP settings it reads beyond ε and the clip bound
            (``"delta"``, ``"calibration"``); an option set for another randomizer is an
            error on the command line.
        options: its own options (:class:`OptionSpec`).
        neighbours: the neighbouring relations its guarantee holds for.
        unbiased: its decoder is unbiased (the mean is the clipped input).
        uses_clip: it clips its input (SignDS releases an order: no clip bound).
        clip_norm: ``"l2"`` or ``"l1"`` (the norm of its clip bound).
        sampler: the noise law whose float32 sampler its guarantee is computed for
            (``"normal"``, ``"laplace"``; None: not additive noise).
        epsilon_max: the largest ε it accepts (SignDS: MindSpore's range (0, 100]).
        epsilon_is: what its ε is, for that range's error (``"is MindSpore's sign_eps, "``).
        noise_std_factor: additive: per-coordinate noise std per unit of its scale.
        audit_dim: the default dimension of its audit (None: not played by
            ``ldpsim audit``'s report game).
    """

    name: str
    implementation: str
    family: str
    guarantee: str
    label: str
    colour: str | None
    help: str
    input: str = "vector"
    engine: bool = True
    frontier: bool = True
    settings: tuple[str, ...] = ()
    options: tuple[OptionSpec, ...] = ()
    neighbours: tuple[str, ...] = ("replace",)
    unbiased: bool = True
    uses_clip: bool = True
    clip_norm: str = "l2"
    sampler: str | None = None
    epsilon_max: float = math.inf
    epsilon_is: str = ""
    noise_std_factor: float | None = None
    audit_dim: int | None = None

    @property
    def additive(self) -> bool:
        return self.family == "additive"

    def uses(self, field: str) -> bool:
        """Whether a randomizer-specific run option (``delta``, ``calibration``, an option of
        some randomizer) is read by this one."""
        return field in self.settings or any(o.field == field for o in self.options)

    def load(self) -> Any:
        """The implementation (imported now)."""
        return resolve(self.implementation)


@dataclasses.dataclass(frozen=True)
class ModeSpec:
    """Everything ldpsim needs to know about one privacy mode, without importing it.

    Attributes:
        name: ``SimulationConfig.privacy_mode``.
        help: one line for ``--help``.
        settings: the run options it uses (an option of another mode set here is an error);
            with a ``nested`` class, exactly the flat names of that class's options (tested).
        randomizers: a local randomizer (``mechanism``) and its options apply.
        per_client: its releases are per client (``stop_at_epsilon`` applies).
        user_level: its guarantee is user-level DP of the noisy sum (DP-FedAvg), not local.
        per_client_state: it keeps state per client (O(population) host memory).
        plan: ``"module:function"``, ``(config, population, dim) -> PrivacyPlan``.
        label: how the manifest names it.
        nested: ``"module:Class"`` of its nested configuration (:class:`ldpsim.Experiment`'s
            ``privacy``); empty: a class generated from ``settings`` and ``options``
            (:mod:`ldpsim._src.fl.schema`), whose field names are the flat names.
        options: its own options (:class:`OptionSpec`, with their defaults): flat
            :class:`~ldpsim.fl.SimulationConfig` fields by the same names, fields of its
            nested class, flags of ``ldpsim run``; list them in ``settings`` too.
    """

    name: str
    help: str
    settings: tuple[str, ...]
    plan: str
    randomizers: bool = False
    per_client: bool = False
    user_level: bool = False
    per_client_state: bool = False
    label: str = ""
    nested: str = ""
    options: tuple[OptionSpec, ...] = ()


def resolve(path: str) -> Any:
    """``"package.module"`` or ``"package.module:attr"`` imported now."""
    module, _, attr = path.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


_P = "ldpsim._src.privacy.randomizers."

#: Options shared by several randomizers (one spec each, so their help is written once).
_NORM_EPSILON = OptionSpec("norm_epsilon", float,
                           "the part of --epsilon spent on the norm (None: the split "
                           "minimising the worst-case variance)")
_PROJECTION_DIM = OptionSpec("projection_dim", int,
                             "the projection's dimension k, 2 <= k <= d (None: min(1000, d))")

#: Every local randomizer, in the order of the command line's choices.
RANDOMIZERS: tuple[RandomizerSpec, ...] = (
    RandomizerSpec(
        name="gaussian", implementation=_P + "mechanism:GAUSSIAN", family="additive",
        guarantee="approximate", label="Gaussian", colour="tab:blue",
        help="additive Gaussian noise, (epsilon, delta)-LDP (Balle & Wang 2018)",
        settings=("delta", "calibration"), neighbours=("replace", "add-remove"),
        sampler="normal", noise_std_factor=1.0),
    RandomizerSpec(
        name="laplace", implementation=_P + "mechanism:LAPLACE", family="additive",
        guarantee="pure", label="Laplace", colour="tab:brown",
        help="additive Laplace noise on an L1 clip, epsilon-LDP",
        neighbours=("replace", "add-remove"), clip_norm="l1", sampler="laplace",
        noise_std_factor=math.sqrt(2.0)),
    RandomizerSpec(
        name="none", implementation=_P + "mechanism:CLIP_ONLY", family="additive",
        guarantee="pure", label="clip only", colour=None,
        help="clipping without noise (epsilon = inf)", engine=False, frontier=False,
        neighbours=("replace", "add-remove"), noise_std_factor=0.0),
    RandomizerSpec(
        name="privunit2", implementation=_P + "privunit2", family="report", guarantee="pure",
        label="PrivUnit2", colour="tab:green",
        help="direction on the sphere + private norm (Bhowmick et al. 2018)",
        options=(_NORM_EPSILON,),
        audit_dim=16),
    RandomizerSpec(
        name="privunitg", implementation=_P + "privunitg", family="report", guarantee="pure",
        label="PrivUnitG", colour="tab:olive",
        help="Gaussian-approximation PrivUnit + private norm (Asi, Feldman & Talwar 2022)",
        options=(_NORM_EPSILON,),
        audit_dim=16),
    RandomizerSpec(
        name="projunit", implementation=_P + "projunit:PROJUNIT", family="report",
        guarantee="pure", label="ProjUnit", colour="tab:orange",
        help="PrivUnitG in a k-dim Gaussian random projection, k+1 floats and a seed per "
             "client (Asi, Feldman, Nelson, Nguyen & Talwar 2023)",
        options=(_NORM_EPSILON, _PROJECTION_DIM,
                 OptionSpec("projunit_simulation", str,
                            "'report' (the deployed client and server: two k x d Gaussian "
                            "matrices per client) or 'law' (each client's decoded value drawn "
                            "from its exact law in O(k + d), for training at scale; the "
                            "message itself is not materialised)", default="report",
                            choices=("report", "law"))),
        audit_dim=64),
    RandomizerSpec(
        name="fastprojunit", implementation=_P + "projunit:FASTPROJUNIT", family="report",
        guarantee="pure", label="FastProjUnit", colour="tab:cyan",
        help="ProjUnit with a randomized Hadamard projection, O(d log d) per client; decoder "
             "biased by about 1/(4k) at most (Asi et al. 2023)",
        options=(_NORM_EPSILON, _PROJECTION_DIM),
        unbiased=False, audit_dim=64),
    RandomizerSpec(
        name="duchi", implementation=_P + "duchi", family="report", guarantee="pure",
        label="Duchi et al.", colour="tab:red",
        help="L2-ball vector mechanism (Duchi, Jordan & Wainwright 2018)", audit_dim=16),
    RandomizerSpec(
        name="signds", implementation=_P + "signds", family="report", guarantee="pure",
        label="SignDS", colour="tab:purple",
        help="MindSpore's SignDS, --epsilon is its sign_eps in (0, 100]; biased decoder",
        options=(OptionSpec("sign_k", float, "top-k fraction of coordinates, in (0, 0.25]"),
                 OptionSpec("sign_thr_ratio", float,
                            "threshold ratio of the output size search, in [0.5, 1]"),
                 OptionSpec("sign_global_lr", float,
                            "the server's reconstruction step per reported index (> 0)"),
                 OptionSpec("sign_dim_out", int,
                            "indices reported per client, in [0, 50] (0: computed as "
                            "MindSpore does)")),
        unbiased=False, uses_clip=False, epsilon_max=100.0,
        epsilon_is="is MindSpore's sign_eps, ", audit_dim=200),
    RandomizerSpec(
        name="rr", implementation=_P + "rr", family="report", guarantee="pure",
        label="k-RR", colour=None, help="k-ary randomized response of a category",
        input="category", engine=False, frontier=False, uses_clip=False),
)

_F = "ldpsim._src.fl.planning:"
_E = "ldpsim._src.fl.schema:"

#: Every privacy mode of the engine.
MODES: tuple[ModeSpec, ...] = (
    ModeSpec(name="ldp", nested=_E + "LocalDP", plan=_F + "_plan_ldp", randomizers=True,
             per_client=True,
             settings=("epsilon", "delta", "clip", "neighbours", "calibration", "noise_mode"),
             label="local DP",
             help="each client clips and applies the local randomizer --mechanism "
                  "(--epsilon/--delta/--clip)"),
    ModeSpec(name="mindspore", nested=_E + "MindSpore", plan=_F + "_plan_mindspore",
             per_client=True,
             per_client_state=True,
             settings=("dp_eps", "dp_delta", "dp_norm_clip", "mindspore_clip_rule",
                       "mindspore_neighbours", "noise_mode"),
             label="MindSpore DP_ENCRYPT",
             help="MindSpore DP_ENCRYPT: adaptive C_t, --dp-eps/--dp-delta/--dp-norm-clip"),
    ModeSpec(name="central", nested=_E + "CentralDP", plan=_F + "_plan_central",
             user_level=True,
             settings=("noise_multiplier", "delta", "clip", "adaptive_clip"),
             label="central DP-FedAvg",
             help="DP-FedAvg: one server draw N(0,(zC)^2) on the clipped sum"),
    ModeSpec(name="distributed", nested=_E + "DistributedDP", plan=_F + "_plan_distributed",
             user_level=True,
             settings=("noise_multiplier", "delta", "clip", "dropout_rate", "noise_mode"),
             label="distributed DP-FedAvg",
             help="each client N(0,(zC)^2/m)"),
    ModeSpec(name="discrete", nested=_E + "SecAggDP", plan=_F + "_plan_discrete",
             user_level=True,
             settings=("epsilon", "delta", "clip", "dropout_rate", "secagg_mechanism", "bits",
                       "granularity", "epsilon_scope"),
             label="distributed discrete DP over secure aggregation",
             help="secure aggregation of integers mod 2^bits: each client clips, rotates, "
                  "rounds and adds discrete Gaussian or Skellam noise (--secagg-mechanism, "
                  "--bits, --granularity; --epsilon per round of the sum, or of the whole run with "
                  "--epsilon-scope run)"),
)


def _by_name(specs, name: str, what: str):
    for spec in specs:
        if spec.name == name:
            return spec
    from ldpsim._src._checks import LdpsimError

    raise LdpsimError(f"{what} must be one of {', '.join(s.name for s in specs)}; got {name!r}")


def randomizer(name: str) -> RandomizerSpec:
    """The spec of the randomizer ``name`` (an :class:`~ldpsim.LdpsimError` listing the
    names otherwise)."""
    return _by_name(RANDOMIZERS, name, "mechanism")


def mode(name: str) -> ModeSpec:
    """The spec of the privacy mode ``name``."""
    return _by_name(MODES, name, "privacy_mode")


def randomizer_names(*, engine: bool | None = None, family: str | None = None,
                     frontier: bool | None = None, audit: bool | None = None) -> tuple[str, ...]:
    """The randomizers' names, filtered: ``engine`` (choices of a local-DP run),
    ``family`` (``"additive"``/``"report"``), ``frontier``, ``audit`` (a report game)."""
    return tuple(s.name for s in RANDOMIZERS
                 if (engine is None or s.engine == engine)
                 and (family is None or s.family == family)
                 and (frontier is None or s.frontier == frontier)
                 and (audit is None or (s.audit_dim is not None) == audit))


def audit_randomizers() -> tuple[str, ...]:
    """What ``ldpsim audit`` plays: the engine's additive randomizers (1-D sufficient
    statistic or full), randomizers of categories, and the report randomizers with a game."""
    return tuple(s.name for s in RANDOMIZERS if (s.additive and s.engine)
                 or s.input != "vector" or s.audit_dim is not None)


def engine_randomizers() -> tuple[str, ...]:
    """The choices of ``SimulationConfig.mechanism``."""
    return randomizer_names(engine=True)


def report_randomizers() -> tuple[str, ...]:
    """The engine's report randomizers (pure ε-LDP, decoded by the server)."""
    return randomizer_names(engine=True, family="report")


def mode_names() -> tuple[str, ...]:
    return tuple(m.name for m in MODES)


def randomizer_option_fields() -> tuple[str, ...]:
    """The run options that belong to some randomizers only: the shared settings some
    read (``delta``, ``calibration``) and every randomizer's own options, in order."""
    return tuple(dict.fromkeys(shared_setting_fields() + own_option_fields()))


def own_option_fields() -> tuple[str, ...]:
    """The randomizers' own options (not shared settings), in order."""
    return _own_option_fields(RANDOMIZERS)


@functools.lru_cache(maxsize=8)
def _own_option_fields(randomizers) -> tuple[str, ...]:
    return tuple(dict.fromkeys(o.field for s in randomizers if s.engine for o in s.options))


def mode_option_fields() -> tuple[str, ...]:
    """The run options some privacy modes use and others do not."""
    return _mode_option_fields(MODES)


@functools.lru_cache(maxsize=8)
def _mode_option_fields(modes) -> tuple[str, ...]:
    every = set.intersection(*(set(m.settings) for m in modes))
    return tuple(dict.fromkeys(f for m in modes for f in m.settings if f not in every))


def option_help(field: str) -> tuple[tuple[str, ...], OptionSpec]:
    """``(randomizers that use it, its OptionSpec)`` of a randomizer's own option."""
    users = tuple(s.name for s in RANDOMIZERS if s.engine and any(o.field == field
                                                                   for o in s.options))
    spec = next(o for s in RANDOMIZERS for o in s.options if o.field == field)
    return users, spec


def shared_setting_fields() -> tuple[str, ...]:
    """The shared local-DP settings that some randomizers read and others do not
    (``delta``, ``calibration``)."""
    return _shared_setting_fields(RANDOMIZERS)


@functools.lru_cache(maxsize=8)
def _shared_setting_fields(randomizers) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for s in randomizers if s.engine for f in s.settings))


def option_applies(field: str, params: Mapping[str, Any], *,
                   shared_by_mode: bool = False) -> bool | None:
    """Whether the run option ``field`` is used by the settings ``params`` (their
    ``privacy_mode`` and ``mechanism``); None when the registry does not govern it.

    Configuration validation and the command line read the nested schema instead
    (:func:`ldpsim._src.fl.schema.applies`, derived from the modes' nested classes and
    the randomizers' options); this rule over the ``settings`` lists is kept for callers
    and as the reference the schema's derived rules are tested against.

    The one rule: a randomizer's own option applies to a mode with randomizers whose
    randomizer has it; a shared setting (``delta``, ``calibration``) applies to a mode with
    randomizers whose randomizer reads it, and otherwise to the modes that list it; any other
    option some mode lists applies to the modes that list it. ``shared_by_mode``: judge the
    shared settings by the mode alone (a configuration keeps them, so that one sweep file
    may hold several randomizers; the command line refuses them where typed).
    """
    m = mode(str(params.get("privacy_mode", MODES[0].name)))
    name = params.get("mechanism", RANDOMIZERS[0].name)
    spec = next((s for s in RANDOMIZERS if s.name == name), None)
    if field in own_option_fields():
        return m.randomizers and spec is not None and spec.uses(field)
    if field in shared_setting_fields() and m.randomizers and not shared_by_mode:
        return spec is not None and spec.uses(field)
    if field in mode_option_fields():
        return field in m.settings
    return None


def users_of(field: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(modes, randomizers)`` that use the run option ``field`` (for error messages)."""
    return (tuple(m.name for m in MODES if field in m.settings),
            tuple(s.name for s in RANDOMIZERS if s.engine and s.uses(field)))
