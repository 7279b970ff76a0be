"""Which run options apply to which settings (``ldpsim run`` and ``ldpsim sweep``).

An option typed on the command line that the chosen privacy mode, randomizer, partition,
optimizer or dataset does not use is an error naming the option and what it belongs to
(:func:`not_applicable`). The privacy options' rules are read from the nested schema
(:mod:`ldpsim._src.fl.schema`) and the registry (:mod:`ldpsim._src.privacy.registry`),
never written here; the data and optimizer options' rules are the few lines below.

Everything here is cheap: no JAX, no data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ldpsim._src._checks import LdpsimError
from ldpsim._src.cli._parsing import option
from ldpsim._src.fl import schema
from ldpsim._src.privacy import registry

IDX_DATASETS = ("mnist", "fashion_mnist")


def per_mechanism() -> tuple[str, ...]:
    """The run options of some local randomizers only (read from the registry now): with a
    ``mechanism`` grid axis, such an option is kept for the cells whose mechanism uses it (an
    error only if none does)."""
    return registry.randomizer_option_fields()


def _mode(p: Mapping[str, Any]) -> str:
    return str(p.get("privacy_mode", registry.MODES[0].name))


def _mechanism(p: Mapping[str, Any]) -> str:
    return str(p.get("mechanism", registry.RANDOMIZERS[0].name))


def flags(names: Iterable[str], flag: str, sep: str) -> str:
    return sep.join(f"{flag} {n}" for n in names)


def _schema_rule(field: str):
    """``(applies, why-not)`` of an option the nested schema governs
    (:mod:`ldpsim._src.fl.schema`): it applies where the nested form of the settings
    has a place for it, and, typed on the command line, a local-DP setting only some
    randomizers read (``delta``, ``calibration``: their registry ``settings``) applies to
    those."""
    kind, names = schema.placement(field)

    def applies(p):
        if not schema.applies(field, p):
            return False
        spec = next((s for s in registry.RANDOMIZERS if s.name == _mechanism(p)), None)
        if (field in registry.shared_setting_fields() and registry.mode(_mode(p)).randomizers
                and spec is not None):
            return spec.uses(field)
        return True

    def why(p):
        mode = registry.mode(_mode(p))
        if kind == "randomizer":
            if not mode.randomizers:   # the mode has no local randomizer to set it on
                local = [m.name for m in registry.MODES if m.randomizers]
                return (f"--privacy-mode {_mode(p)} (no local randomizer): it is a setting of "
                        + flags(names, "--mechanism", " and ") + ", with "
                        + flags(local, "--privacy-mode", " or "))
            return (f"--mechanism {_mechanism(p)}: it is a setting of "
                    + flags(names, "--mechanism", " and "))
        if kind == "switch":
            where = ("" if names[0] == "client_dp" else f"--privacy-mode {_mode(p)} ")
            holders = [m.name for m in registry.MODES if names[0] in schema.flat_paths(
                {"privacy_mode": m.name})]
            return (f"{where or 'a run '}without {option(names[0])} true: it is a setting of "
                    f"{option(names[0])} true"
                    + (f" ({flags(holders, '--privacy-mode', ' or ')})"
                       if names[0] != "client_dp" else ""))
        if field in registry.shared_setting_fields() and mode.randomizers and field in \
                schema.flat_paths(p):
            users = [s.name for s in registry.RANDOMIZERS if s.engine and s.uses(field)]
            return (f"--mechanism {_mechanism(p)}: it is used by "
                    + flags(users, "--mechanism", " and ") + " only")
        return (f"--privacy-mode {_mode(p)}: it is used by "
                + flags(names, "--privacy-mode", " or ") + " only")

    return applies, why


def rules() -> dict[str, tuple[Callable[[Mapping[str, Any]], bool], Callable[[Mapping[str, Any]], str]]]:
    """field -> (applies(params), why-not(params)) for the run options of one mode only:
    those the nested schema governs (read from it now: privacy modes, randomizers,
    adaptive clipping, DP-SGD clients), and the data and optimizer options below."""
    table = {f: _schema_rule(f) for f in schema.governed()
             if f not in ("privacy_mode", "mechanism")
             and schema.placement(f)[0] != "requires"}
    table.update({
        "alpha": (lambda p: p.get("partition", "iid") in ("dirichlet", "sampled"),
                  lambda p: f"--partition {p.get('partition', 'iid')}: it is used by --partition "
                  "dirichlet and sampled only"),
        "examples_per_client": (lambda p: p.get("partition", "iid") == "sampled",
                                lambda p: f"--partition {p.get('partition', 'iid')}: it is used by "
                                "--partition sampled only"),
        "server_momentum": (lambda p: p.get("server_optimizer", "fedavg") == "fedavgm",
                            lambda p: f"--server-optimizer {p.get('server_optimizer', 'fedavg')}: "
                            "it is the momentum of --server-optimizer fedavgm"),
        "data_source": (lambda p: str(p.get("dataset", "")).lower().replace("-", "_") in IDX_DATASETS,
                        lambda p: f"--dataset {p.get('dataset')}: it chooses the reader of "
                        "mnist and fashion_mnist only"),
    })
    return table



def not_applicable(params: Mapping[str, Any], given: Iterable[str],
                   name_of: Callable[[str], str] = option) -> None:
    """Raise naming the first option in ``given`` that the settings ``params`` do not use.

    Args:
        params: the run settings (SimulationConfig fields -> values, defaults filled in).
        given: the fields the user set explicitly.
        name_of: how to name a field in the message (default: its ``--option``).
    """
    given = set(given)
    for field, (applies, why) in rules().items():
        if field in given and not applies(params):
            hint = ""
            if field == "delta" and params.get("client_dp"):
                hint = (f" (the DP-SGD clients' delta is {name_of('client_dp_delta')})")
            raise LdpsimError(f"{name_of(field)} does not apply to {why(params)}; remove it"
                              + hint)
    if {"local_steps", "local_epochs"} <= given:
        raise LdpsimError(f"{name_of('local_steps')} and {name_of('local_epochs')} both given; "
                          "give one (epochs override steps)")
