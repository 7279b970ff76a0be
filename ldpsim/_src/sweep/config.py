"""A sweep: fixed run settings × a grid of axes (ε × clients per round × seeds × …).

A :class:`SweepConfig` holds ``base`` (settings shared by every run, i.e. fields of
:class:`ldpsim.fl.SimulationConfig`) and ``grid`` (axis name -> values). The axes
``epsilon``, ``clients_per_round`` and ``seed`` are required; any other run field may be an
axis too (e.g. ``mechanism``, ``neighbours``, ``calibration``). Each point of the grid is a
:class:`Cell` keyed by its axis values, so a resumed sweep recognises finished cells.

The config is *normalised* (axis values parsed, sorted and de-duplicated, ``inf`` spelled
``"inf"``) and hashed into a :meth:`SweepConfig.fingerprint`; a results file remembers the
fingerprint of the sweep that wrote it, so that results of different sweeps are never mixed.

File format (TOML, read with :mod:`tomllib`)::

    [sweep]                     # optional: labels, not part of the fingerprint
    name = "quick"
    out = "results/quick.csv"   # default --out

    [grid]                      # axes; seeds/clients/mechanisms are accepted as aliases
    epsilon = [1, 10, 100, "inf"]
    mechanism = ["gaussian", "laplace", "privunit2"]   # optional: any run field may be an axis
    clients_per_round = [10, 100]
    seed = [0, 1, 2]

    [run]                       # fixed SimulationConfig fields
    dataset = "synthetic"
    model = "mlp"
    rounds = 20
    delta = "1/population"      # or "1/clients_per_round", resolved per cell
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_positive,
    check_positive_int,
    suggestion,
)
from ldpsim._src.fl.config import MECHANISMS

__all__ = ["EXECUTION_FIELDS", "Cell", "SweepConfig", "display_value", "fingerprint_of", "format_value", "load_run_config",
           "load_sweep_config", "parse_epsilon", "parse_list", "read_toml"]

REQUIRED_AXES = ("epsilon", "clients_per_round", "seed")
ALIASES = {"seeds": "seed", "clients": "clients_per_round", "mechanisms": "mechanism"}
#: The keys of a sweep file's ``[sweep]`` table.
SWEEP_KEYS = ("name", "out", "plots")
DELTA_RULES = ("1/population", "1/clients_per_round")
#: Fingerprint format; bump when the meaning of a normalised config changes.
FORMAT = 1
#: Fixed settings that change how a run executes, not its results, so they are left out of
#: the fingerprint (a sweep may be resumed after changing them): ``chunk_size`` (clients per
#: vmapped chunk; the noise and the update sums do not depend on it, only float summation
#: order does: SimulationConfig and ldpsim._src.fl.simulate), ``data_dir`` (where the verified
#: copy of the dataset lives; the loaders check its SHA-256) and ``devices`` (how many devices
#: the cohort is split over; keys come from client ids). They stay in the recorded config.
EXECUTION_FIELDS = ("chunk_size", "data_dir", "devices")


def unknown_names(names: Iterable[str], valid: Iterable[str]) -> str:
    """``names`` for an error message, each with its likeliest meant name from ``valid``
    (``"neighbors (did you mean 'neighbours'?)"``)."""
    valid = list(valid)
    return ", ".join(f"{name}{suggestion(name, valid)}" for name in names)


def _simulation_fields() -> set[str]:
    from ldpsim._src.fl.config import SimulationConfig

    return {f.name for f in dataclasses.fields(SimulationConfig)}


def fingerprint_of(normalized: Mapping[str, Any]) -> str:
    """sha256 (16 hex digits) of a :meth:`SweepConfig.normalized` form without execution-only
    fixed settings (:data:`EXECUTION_FIELDS`)."""
    identity = dict(normalized)
    identity["base"] = {k: v for k, v in dict(normalized.get("base") or {}).items()
                        if k not in EXECUTION_FIELDS}
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_epsilon(value: Any) -> float:
    """ε > 0 as a float; ``inf``/``"inf"``/``"∞"``/``"none"`` mean no privacy (``math.inf``)."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "∞", "none", "nodp"):
        return math.inf
    return check_positive("epsilon", value, allow_inf=True)


def _parse_seed(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or str(value).strip().lstrip("-") == "":
        raise LdpsimError(f"seed must be an integer >= 0, got {value!r}")
    try:
        out = int(value)
    except ValueError:
        raise LdpsimError(f"seed must be an integer >= 0, got {value!r}") from None
    if out < 0:
        raise LdpsimError(f"seed must be an integer >= 0, got {value!r}")
    return out


_AXIS_PARSERS = {
    "epsilon": parse_epsilon,
    "clients_per_round": lambda v: check_positive_int("clients_per_round", v),
    "seed": _parse_seed,
    "mechanism": lambda v: check_choice("mechanism", v, MECHANISMS),
}


def format_value(value: Any) -> str:
    """Canonical text of a value in cell keys and fingerprints (``10.0`` -> ``10``, inf -> ``inf``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.17g}" if value != int(value) or abs(value) >= 1e16 else str(int(value))
    return str(value)


def display_value(value: Any) -> str:
    """A value as the screen shows it: :func:`format_value`, but a float in its shortest
    round-trip form (``0.1``, not ``0.10000000000000001``; cell keys keep
    :func:`format_value`, which finished results files already hold)."""
    if isinstance(value, float) and math.isfinite(value) and value != int(value):
        return repr(value)
    return format_value(value)


def _canonical(value: Any) -> Any:
    """JSON-ready canonical form: numbers that are equal normalise to the same text."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        if math.isinf(value):
            return format_value(value)
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    raise LdpsimError(f"unsupported value {value!r} ({type(value).__name__}) in a sweep config")


def _sort_key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def parse_list(text: str) -> list[str]:
    """Split a comma-separated CLI list (``"1,10,inf"`` -> ``["1", "10", "inf"]``)."""
    items = [t.strip() for t in str(text).split(",")]
    if not items or any(not t for t in items):
        raise LdpsimError(f"expected a comma-separated list such as 1,10,100; got {text!r}")
    return items


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of a sweep.

    Attributes:
        key: canonical text of the axis values, e.g. ``clients_per_round=10;epsilon=inf;seed=0``.
        axes: axis name -> value of this cell.
        params: the full run settings (``base`` with ``axes`` applied and rules such as
            ``delta = "1/population"`` resolved).
    """

    key: str
    axes: Mapping[str, Any]
    params: Mapping[str, Any]

    @property
    def group_key(self) -> str:
        """Key of the cell without its ε: cells that differ only in ε share one program."""
        return ";".join(f"{k}={format_value(v)}" for k, v in sorted(self.axes.items()) if k != "epsilon")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """Fixed settings × grid of axes. Validated and normalised on construction.

    Attributes:
        base: run settings shared by every cell (SimulationConfig field -> value).
        grid: axis -> values. ``epsilon`` (``inf`` = no privacy), ``clients_per_round`` and
            ``seed`` are required; other fields may be axes too.
        name: optional label (not part of the fingerprint).
    """

    base: Mapping[str, Any]
    grid: Mapping[str, tuple]
    name: str | None = None

    def __post_init__(self) -> None:
        grid: dict[str, tuple] = {}
        for raw_name, values in dict(self.grid).items():
            name = ALIASES.get(raw_name, raw_name)
            if name in grid:
                raise LdpsimError(f"grid axis {name!r} is given twice (as {raw_name!r} too)")
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                values = [values]
            parse = _AXIS_PARSERS.get(name, lambda v: v)
            parsed = [parse(v) for v in values]
            if not parsed:
                raise LdpsimError(f"grid axis {name!r} has no values; give at least one")
            for v in parsed:
                _canonical(v)  # rejects unsupported types early
            unique = {format_value(v): v for v in parsed}
            grid[name] = tuple(sorted(unique.values(), key=_sort_key))
        missing = [a for a in REQUIRED_AXES if a not in grid]
        if missing:
            stray = sorted(set(grid) - _simulation_fields())
            raise LdpsimError(
                f"the sweep grid needs the axes {', '.join(REQUIRED_AXES)}; missing: {', '.join(missing)} "
                + (f"(and {unknown_names(stray, _simulation_fields())} is no run setting) "
                   if stray else "")
                + "(e.g. --epsilon 1,10,inf --clients 10,100 --seeds 0,1)"
            )
        base = {ALIASES.get(k, k): v for k, v in dict(self.base).items()}
        stray = sorted(set(base) - _simulation_fields())
        if stray:
            raise LdpsimError(f"unknown run setting(s) {unknown_names(stray, _simulation_fields())}"
                              "; valid settings: the fields of ldpsim.fl.SimulationConfig "
                              "(`ldpsim run --help`)")
        both = sorted(set(base) & set(grid))
        if both:
            raise LdpsimError(f"{', '.join(both)} given both as a fixed setting and as a grid axis; keep one")
        delta = base.get("delta")
        if isinstance(delta, str) and delta not in DELTA_RULES:
            raise LdpsimError(f"delta must be a number in (0, 1) or one of {', '.join(DELTA_RULES)}; got {delta!r}")
        for value in base.values():
            _canonical(value)
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "base", base)

    # ------------------------------------------------------------------ identity

    def normalized(self) -> dict[str, Any]:
        """The JSON-ready canonical form that :meth:`fingerprint` hashes."""
        return {"format": FORMAT, "base": _canonical(self.base), "grid": _canonical(self.grid)}

    def fingerprint(self) -> str:
        """sha256 (16 hex digits) of the canonical JSON of :meth:`normalized`, leaving out the
        execution-only fixed settings :data:`EXECUTION_FIELDS` (they do not change results)."""
        return fingerprint_of(self.normalized())

    # ------------------------------------------------------------------ cells

    def cells(self) -> list[Cell]:
        """Every cell, ε innermost so cells sharing a program are adjacent."""
        names = [n for n in sorted(self.grid) if n not in ("epsilon", "clients_per_round", "seed")]
        names += ["clients_per_round", "seed", "epsilon"]
        out = []
        for values in itertools.product(*(self.grid[n] for n in names)):
            axes = dict(zip(names, values))
            key = ";".join(f"{k}={format_value(axes[k])}" for k in sorted(axes))
            out.append(Cell(key=key, axes=axes, params=self._params(axes)))
        return out

    def _params(self, axes: Mapping[str, Any]) -> dict[str, Any]:
        params = {**self.base, **axes}
        # A randomizer's own option set once for the whole sweep (e.g. ProjUnit's
        # projunit_simulation beside gaussian cells) belongs to the cells whose mechanism uses
        # it; the other cells run without it. Only when some mechanism of the grid uses it:
        # otherwise it stays, and the cell's configuration refuses it by name.
        for field in _options_for_other_cells(self.base, self.grid, axes):
            params.pop(field)
        delta = params.get("delta")
        if delta == "1/population":
            if "population" not in params:
                raise LdpsimError('delta = "1/population" needs population to be set in [run] or the grid')
            params["delta"] = 1.0 / float(params["population"])
        elif delta == "1/clients_per_round":
            params["delta"] = 1.0 / float(params["clients_per_round"])
        return params

    def describe_difference(self, other: Mapping[str, Any]) -> str:
        """Human-readable differences between this config and another's :meth:`normalized` form."""
        mine = self.normalized()
        diffs = []
        for section in ("base", "grid"):
            a, b = other.get(section, {}) or {}, mine[section]
            for k in sorted(set(a) | set(b)):
                if section == "base" and k in EXECUTION_FIELDS:
                    continue
                if a.get(k) != b.get(k):
                    there = json.dumps(a[k]) if k in a else "(unset)"
                    here = json.dumps(b[k]) if k in b else "(unset)"
                    diffs.append(f"{section}.{k}: {there} there vs {here} here")
        if other.get("format") != mine["format"]:
            diffs.append(f"format: {other.get('format')} there vs {mine['format']} here")
        return "; ".join(diffs) or "(no difference in settings)"


def _options_for_other_cells(base: Mapping[str, Any], grid: Mapping[str, tuple],
                             axes: Mapping[str, Any]) -> list[str]:
    """Randomizer options of ``base`` that the cell's mechanism does not use while another
    mechanism of the grid's ``mechanism`` axis does."""
    from ldpsim._src.privacy import registry

    mechanisms = grid.get("mechanism")
    if not mechanisms or "mechanism" not in axes:
        return []
    specs = {s.name: s for s in registry.RANDOMIZERS}
    own = specs.get(str(axes["mechanism"]))
    if own is None:
        return []
    return [f for f in registry.own_option_fields()
            if f in base and f not in axes and not own.uses(f)
            and any(specs[m].uses(f) for m in map(str, mechanisms) if m in specs)]


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """A TOML file as a dict; every failure an :class:`LdpsimError` naming ``what`` and the file."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LdpsimError(f"{what} {str(path)!r} not found") from None
    except IsADirectoryError:
        raise LdpsimError(f"{what} {str(path)!r} is a folder; give a TOML file") from None
    except OSError as err:
        raise LdpsimError(f"{what} {str(path)!r} cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise LdpsimError(f"{what} {str(path)!r} is not UTF-8 text (byte at offset {err.start}); "
                          "is it binary?") from None
    except tomllib.TOMLDecodeError as err:
        raise LdpsimError(f"{what} {str(path)!r} is not valid TOML: {err}") from None


def load_sweep_config(path: str | Path) -> tuple[SweepConfig, dict[str, Any]]:
    """Read a TOML sweep file.

    Returns:
        ``(config, meta)``: the :class:`SweepConfig` (tables ``[grid]`` and ``[run]``) and
        the ``[sweep]`` table (labels such as ``name``, ``out``, ``plots``).

    Raises:
        LdpsimError: missing file, TOML syntax error, unknown table or bad values.
    """
    path = Path(path)
    data = read_toml(path, "sweep config")
    for table in ("sweep", "grid", "run"):
        if table in data and not isinstance(data[table], dict):
            raise LdpsimError(f"sweep config {str(path)!r}: {table} must be a table [{table}], "
                              f"got {data[table]!r}")
    unknown = sorted(set(data) - {"sweep", "grid", "run"})
    if unknown:
        raise LdpsimError(f"sweep config {str(path)!r}: unknown table(s) {', '.join(unknown)}; use [sweep], [grid], [run]")
    if "grid" not in data:
        raise LdpsimError(f"sweep config {str(path)!r} has no [grid] table (epsilon, clients_per_round, seed)")
    meta = dict(data.get("sweep", {}))
    stray = sorted(set(meta) - set(SWEEP_KEYS))
    if stray:
        raise LdpsimError(f"sweep config {str(path)!r}: unknown [sweep] key(s) "
                          f"{unknown_names(stray, SWEEP_KEYS)}; valid keys: "
                          f"{', '.join(SWEEP_KEYS)} (run settings go in [run], axes in [grid])")
    config = SweepConfig(base=data.get("run", {}), grid=data["grid"], name=meta.get("name"))
    return config, meta


def load_run_config(path: str | Path) -> tuple[dict[str, Any], dict[str, list]]:
    """Read the settings of one run (``ldpsim run --config FILE``) from a TOML file.

    The keys are :class:`~ldpsim.fl.SimulationConfig` fields, either at the top
    level or in a ``[run]`` table; a sweep file works too: its ``[run]`` table, plus its
    ``[grid]`` axes that have one value (``[sweep]`` labels are ignored). ``epsilon``
    accepts ``"inf"``; ``delta`` also ``"1/population"`` or ``"1/clients_per_round"`` (left
    for the caller to resolve once command-line flags are applied).

    Returns:
        ``(settings, axes)``: field -> value, and the grid axes with several values
        (field -> values), which one run cannot take unless a flag picks one value.

    Raises:
        LdpsimError: unreadable file, bad TOML, unknown tables or settings (named).
    """
    from ldpsim._src.fl.config import SimulationConfig

    path = Path(path)
    data = read_toml(path, "run config")
    sweep_tables = {"sweep", "grid", "run"}
    if any(isinstance(v, dict) for v in data.values()):
        unknown = sorted(k for k, v in data.items() if isinstance(v, dict) and k not in sweep_tables)
        stray = sorted(k for k, v in data.items() if not isinstance(v, dict))
        if unknown or stray:
            raise LdpsimError(
                f"run config {str(path)!r}: " + (f"unknown table(s) {', '.join(unknown)}" if unknown
                                                 else f"settings {', '.join(stray)} outside [run]")
                + "; put the settings at the top level or in a [run] table")
        settings, grid = dict(data.get("run", {})), dict(data.get("grid", {}))
    else:
        settings, grid = dict(data), {}
    out: dict[str, Any] = {}
    axes: dict[str, list] = {}
    for source in (settings, grid):
        for raw, value in source.items():
            name = ALIASES.get(raw, raw)
            if name in out or name in axes:
                raise LdpsimError(f"run config {str(path)!r}: {name!r} is given twice")
            if source is grid:
                values = list(value) if isinstance(value, (list, tuple)) else [value]
                if not values:
                    raise LdpsimError(f"run config {str(path)!r}: grid axis {name!r} has no values")
                if len(values) > 1:
                    axes[name] = values
                    continue
                value = values[0]
            out[name] = value
    fields = {f.name for f in dataclasses.fields(SimulationConfig)}
    unknown = sorted((set(out) | set(axes)) - fields)
    if unknown:
        raise LdpsimError(f"run config {str(path)!r}: unknown setting(s) "
                          f"{unknown_names(unknown, fields)}; valid settings are: "
                          f"{', '.join(sorted(fields))}")
    if "epsilon" in out:
        out["epsilon"] = parse_epsilon(out["epsilon"])
    delta = out.get("delta")
    if isinstance(delta, str) and delta not in DELTA_RULES:
        raise LdpsimError(f"run config {str(path)!r}: delta must be a number in (0, 1) or one of "
                          f"{', '.join(DELTA_RULES)}; got {delta!r}")
    return out, axes
