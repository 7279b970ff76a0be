"""Checks every command runs before any long work starts.

* :func:`given_dests`: which options the command line actually gave (not defaults), so an
  option that does not apply to the chosen mode is an error only when the user typed it.
* :func:`check_input_file`, :func:`check_text_file`, :func:`check_data_dir`: one rule for
  every file or folder a command reads (exists, right kind, readable, text).
* :func:`not_applicable`: the run options that apply to one privacy mode / partition /
  optimizer only (``ldpsim run`` and ``ldpsim sweep``).
* Resource guards: :func:`host_memory_limit` and :func:`check_memory`, with estimates for
  ``run``/``sweep`` (:func:`run_memory`), ``noise`` and ``audit``; ``--no-memory-check``
  overrides.

Everything here is cheap: no JAX, no data.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import registry

#: Dest names argparse or the CLI itself sets (never a user option); the dests of
#: subcommand choices (``command``, ``account``'s ``kind``) are left out too (so is
#: ``plot --kind``, which shares the name; no rule needs it).
_INTERNAL = {"handler", "help", "version"}


# ----------------------------------------------------------------------------- given options


def _walk(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _walk(sub)


def given_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> frozenset[str]:
    """The dests of the options ``argv`` gives explicitly (parsed again with every default
    suppressed; ``argv`` has already parsed once, so this cannot fail)."""
    saved, internal = [], set(_INTERNAL)
    for p in _walk(parser):
        saved.append((p, None, p._defaults))
        p._defaults = {}
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                internal.add(action.dest)
            elif action.dest not in _INTERNAL:
                saved.append((p, action, action.default))
                action.default = argparse.SUPPRESS
    try:
        namespace = parser.parse_args(list(argv))
    finally:
        for p, action, default in saved:
            if action is None:
                p._defaults = default
            else:
                action.default = default
    return frozenset(k for k in vars(namespace) if k not in internal)


def was_given(args: argparse.Namespace, dest: str, default: Any = None) -> bool:
    """Whether the command line gave ``dest`` (without the record of :func:`given_dests`,
    e.g. a handler called from Python: whether its value differs from ``default``)."""
    given = getattr(args, "_given", None)
    if given is not None:
        return dest in given
    value = getattr(args, dest, default)
    if isinstance(value, float) and isinstance(default, float) and math.isnan(value):
        return not math.isnan(default)
    return value != default


def option(dest: str) -> str:
    """``client_dp_clip`` -> ``--client-dp-clip``."""
    return "--" + dest.replace("_", "-")


# ----------------------------------------------------------------------------- input paths


def check_input_file(path: os.PathLike | str, what: str) -> Path:
    """A file a command reads: it exists, is a file (not a folder) and can be opened.

    ``what`` names it in the message (an option such as ``--config``, or ``results file``).
    """
    path = Path(path)
    if not path.exists():
        raise LdpsimError(f"{what} {str(path)!r} not found")
    if path.is_dir():
        raise LdpsimError(f"{what} {str(path)!r} is a folder; give a file")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as err:
        raise LdpsimError(f"{what} {str(path)!r} cannot be read ({err.strerror or err}, "
                          "permission?)") from None
    return path


def check_text_file(path: os.PathLike | str, what: str, kind: str = "text") -> str:
    """:func:`check_input_file`, then the whole file as UTF-8 text (a binary or
    undecodable file is an error naming the file and the byte)."""
    path = check_input_file(path, what)
    data = path.read_bytes()
    if b"\x00" in data[:65536]:
        raise LdpsimError(f"{what} {str(path)!r} is a binary file, not a {kind} file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LdpsimError(f"{what} {str(path)!r} is not UTF-8 {kind} (byte 0x{data[err.start]:02x} "
                          f"at offset {err.start}); is it binary or compressed?") from None


def check_data_dir(value: os.PathLike | str | None, what: str = "--data-dir") -> None:
    """A data folder given by the user must exist (a mistyped one is never created empty)."""
    if value is None:
        return
    path = Path(value).expanduser()
    if not path.exists():
        raise LdpsimError(f"{what} {str(value)!r} does not exist; create it (or fix the name) "
                          "and put the dataset there")
    if not path.is_dir():
        raise LdpsimError(f"{what} {str(value)!r} is not a folder")


def check_seed(value: Any, what: str = "--seed") -> None:
    if value is not None and (not isinstance(value, int) or value < 0):
        raise LdpsimError(f"{what} must be an integer >= 0, got {value!r}")


# ----------------------------------------------------------------------------- run options

#: Options that apply to some local randomizers only: with a ``mechanism`` grid axis, such an
#: option is kept for the cells whose mechanism uses it (an error only if none does). The
#: registry's list at import (:func:`per_mechanism` reads it again).
PER_MECHANISM = registry.randomizer_option_fields()
IDX_DATASETS = ("mnist", "fashion_mnist")


def per_mechanism() -> tuple[str, ...]:
    """The run options of some local randomizers only (read from the registry now)."""
    return registry.randomizer_option_fields()


def _mode(p: Mapping[str, Any]) -> str:
    return str(p.get("privacy_mode", registry.MODES[0].name))


def _mechanism(p: Mapping[str, Any]) -> str:
    return str(p.get("mechanism", registry.RANDOMIZERS[0].name))


def _flags(names: Iterable[str], flag: str, sep: str) -> str:
    return sep.join(f"{flag} {n}" for n in names)


def _schema_rule(field: str):
    """``(applies, why-not)`` of an option the nested schema governs
    (:mod:`ldpsim._src.fl.experiment`): it applies where the nested form of the settings
    has a place for it, and, typed on the command line, a local-DP setting only some
    randomizers read (``delta``, ``calibration``: their registry ``settings``) applies to
    those."""
    from ldpsim._src.fl import experiment as schema

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
            return (f"--mechanism {_mechanism(p)}: it is a setting of "
                    + _flags(names, "--mechanism", " and "))
        if kind == "switch":
            where = ("" if names[0] == "client_dp" else f"--privacy-mode {_mode(p)} ")
            holders = [m.name for m in registry.MODES if names[0] in schema.flat_paths(
                {"privacy_mode": m.name})]
            return (f"{where or 'a run '}without {option(names[0])} true: it is a setting of "
                    f"{option(names[0])} true"
                    + (f" ({_flags(holders, '--privacy-mode', ' or ')})"
                       if names[0] != "client_dp" else ""))
        if field in registry.shared_setting_fields() and mode.randomizers and field in \
                schema.flat_paths(p):
            users = [s.name for s in registry.RANDOMIZERS if s.engine and s.uses(field)]
            return (f"--mechanism {_mechanism(p)}: it is used by "
                    + _flags(users, "--mechanism", " and ") + " only")
        return (f"--privacy-mode {_mode(p)}: it is used by "
                + _flags(names, "--privacy-mode", " or ") + " only")

    return applies, why


def _rules() -> dict[str, tuple[Callable[[Mapping[str, Any]], bool], Callable[[Mapping[str, Any]], str]]]:
    """field -> (applies(params), why-not(params)) for the run options of one mode only:
    those the nested schema governs (read from it now: privacy modes, randomizers,
    adaptive clipping, DP-SGD clients), and the data and optimizer options below."""
    from ldpsim._src.fl import experiment as schema

    rules = {f: _schema_rule(f) for f in schema.governed()
             if f not in ("privacy_mode", "mechanism")
             and schema.placement(f)[0] != "requires"}
    rules.update({
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
    return rules


#: The rules at import (:func:`not_applicable` reads the registry again).
RULES = _rules()


def not_applicable(params: Mapping[str, Any], given: Iterable[str],
                   name_of: Callable[[str], str] = option) -> None:
    """Raise naming the first option in ``given`` that the settings ``params`` do not use.

    Args:
        params: the run settings (SimulationConfig fields -> values, defaults filled in).
        given: the fields the user set explicitly.
        name_of: how to name a field in the message (default: its ``--option``).
    """
    given = set(given)
    for field, (applies, why) in _rules().items():
        if field in given and not applies(params):
            raise LdpsimError(f"{name_of(field)} does not apply to {why(params)}; remove it")
    if {"local_steps", "local_epochs"} <= given:
        raise LdpsimError(f"{name_of('local_steps')} and {name_of('local_epochs')} both given; "
                          "give one (epochs override steps)")


# ----------------------------------------------------------------------------- memory

NO_MEMORY_CHECK = "--no-memory-check"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def host_memory_limit() -> tuple[int, str]:
    """``(bytes, what)``: the memory this process may use: physical memory (os.sysconf),
    or a smaller cgroup or RLIMIT_AS limit."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        what = "physical memory"
    except (ValueError, OSError, AttributeError):  # pragma: no cover (not POSIX)
        limit, what = 2**63, "unknown"
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < limit:
            limit, what = int(text), "cgroup memory limit"
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if 0 < soft < limit:
            limit, what = soft, "RLIMIT_AS"
    except (ImportError, ValueError, OSError):  # pragma: no cover
        pass
    return int(limit), what


def check_memory(estimate: float, parts: str, fix: str, *, skip: bool = False,
                 subject: str = "this command") -> None:
    """Refuse before allocating when ``estimate`` bytes exceed the host's limit."""
    if skip:
        return
    limit, what = host_memory_limit()
    if estimate > limit:
        raise LdpsimError(f"{subject} needs about {_fmt_bytes(estimate)} of memory ({parts}) but this host "
                          f"has {_fmt_bytes(limit)} ({what}); {fix}, or pass {NO_MEMORY_CHECK} "
                          "to try anyway")


#: Synthetic (FedProx) data: 60 float32 features + an int32 label per sample.
_SYNTH_SAMPLE = 61 * 4
#: Mean samples per synthetic device (LogNormal(4, 2) + 50, capped at 1000; measured 215).
_SYNTH_MEAN_SAMPLES = 200
#: Pad width of a synthetic client in the disjoint partitions (0.9 x the 1000 cap).
_SYNTH_PAD = 900


def run_memory(p: Mapping[str, Any]) -> tuple[float, str]:
    """``(bytes, parts)``: a lower estimate of the host memory of one run with settings ``p``:
    cohort sampling and per-round cohort arrays (O(m), O(N) for Poisson sampling or when m
    is large), synthetic data (O(N): generated per device, padded unless sampled) and
    MindSpore's per-client clip state (O(N)). The model and real datasets are not counted."""
    n = int(p.get("population", 1000))
    m = int(p.get("clients_per_round", 100))
    parts = []
    cohort = 24 * m + 32 * m  # sampling (ids + hash set), per-round ids/mask/metrics
    if p.get("sampling") == "poisson":
        cohort += 9 * n
    elif m > 10000 and m > n // 50:
        cohort += 8 * n
    parts.append(f"cohort of {m} clients {_fmt_bytes(cohort)}")
    total = cohort
    dataset = str(p.get("dataset", "synthetic")).lower().replace("-", "_")
    if dataset.startswith("synthetic"):
        data = n * _SYNTH_MEAN_SAMPLES * _SYNTH_SAMPLE
        if p.get("partition", "iid") != "sampled":
            data += n * _SYNTH_PAD * _SYNTH_SAMPLE
        parts.append(f"synthetic data for {n} clients {_fmt_bytes(data)}")
        total += data
    if registry.mode(_mode(p)).per_client_state:
        state = 9 * n
        parts.append(f"per-client clip state {_fmt_bytes(state)}")
        total += state
    return float(total), ", ".join(parts)


def check_run_memory(p: Mapping[str, Any], *, skip: bool = False, where: str = "") -> None:
    """Refuse a run whose :func:`run_memory` estimate exceeds the host's memory."""
    estimate, parts = run_memory(p)
    check_memory(estimate, parts, "lower --population or --clients-per-round", skip=skip,
                 subject=f"{where}this run")


def run_defaults() -> dict[str, Any]:
    import dataclasses

    from ldpsim._src.fl.config import SimulationConfig

    return {f.name: f.default for f in dataclasses.fields(SimulationConfig)}


def check_names(params: Mapping[str, Any]) -> None:
    """The dataset and model names, before loading anything (a TFDS name is checked by the
    loader when ``tensorflow_datasets`` is installed)."""
    import importlib.util

    from ldpsim._src.data.registry import _SYNTH, KNOWN_DATASETS, _known_message
    from ldpsim._src.models import MODEL_NAMES

    name = str(params.get("dataset", "synthetic"))
    key = name.strip().lower().replace("-", "_")
    if (key not in KNOWN_DATASETS and not _SYNTH.match(key)
            and importlib.util.find_spec("tensorflow_datasets") is None):
        raise LdpsimError(f"--dataset: {_known_message(name)}")
    model = params.get("model", "auto")
    if model != "auto" and model not in MODEL_NAMES:
        raise LdpsimError(f"--model {model!r} is not a model; choose auto or one of "
                          f"{', '.join(MODEL_NAMES)}")


def check_run_args(args: argparse.Namespace) -> None:
    """``ldpsim run`` before any work: data folder, options that do not apply to the chosen
    mode (only those typed), the values (``SimulationConfig``) and the memory estimate."""
    from ldpsim._src.fl.config import SimulationConfig

    defaults = run_defaults()
    params = {k: getattr(args, k, v) for k, v in defaults.items()}
    check_data_dir(params.get("data_dir"))
    not_applicable(params, {k for k, v in defaults.items() if was_given(args, k, v)})
    SimulationConfig(**params)  # every value and combination, named
    check_names(params)
    check_run_memory(params, skip=getattr(args, "no_memory_check", False))


#: Grid axes of ``ldpsim sweep`` with their flags; an axis is required, so its default
#: value (epsilon = inf where the mode has no local epsilon) is never refused.
_SWEEP_AXIS_FLAGS = {"epsilon": "--epsilon", "clients_per_round": "--clients", "seed": "--seeds",
                     "mechanism": "--mechanism"}
#: Settings that decide which options apply; when one is a grid axis, errors name the cell.
_DECIDING = ("privacy_mode", "partition", "server_optimizer", "mechanism", "adaptive_clip",
             "client_dp", "dataset")


def sweep_given(args: argparse.Namespace) -> dict[str, str]:
    """field -> how the user set it (``--noise-multiplier``, ``--set dp_eps``, ``--axis
    mechanism``, ``population (in FILE)``), for ``ldpsim sweep``."""
    from ldpsim._src.sweep.config import ALIASES

    given: dict[str, str] = {}
    if getattr(args, "config", None) is not None:
        import tomllib

        try:
            data = tomllib.loads(Path(args.config).read_text())
        except (OSError, ValueError):  # load_sweep_config has already named the problem
            data = {}
        for table in ("run", "grid"):
            for key in data.get(table, {}) or {}:
                key = ALIASES.get(key, key)
                given[key] = f"{key} (in {args.config})"
    for field, flag in _SWEEP_AXIS_FLAGS.items():
        if getattr(args, f"grid_{field}", None) is not None:
            given[field] = flag
    for key, value in vars(args).items():
        if key.startswith("set_") and value is not None:
            given[key[4:]] = option(key[4:])
    for flag, items in (("--axis", getattr(args, "axis", [])), ("--set", getattr(args, "set", []))):
        for field, _ in pairs(items, flag):
            given[ALIASES.get(field, field)] = f"{flag} {field}"
    return given


def check_sweep_args(args: argparse.Namespace, config: Any, out: os.PathLike | str) -> None:
    """``ldpsim sweep`` before any work (and before it prints anything): the results file
    (suffix, a file of another sweep), data folders, options that do not apply to a cell's
    mode (only those the user set), every cell's values, and the memory of the largest cell."""
    from ldpsim._src.sweep.engine import EngineRunner
    from ldpsim._src.sweep.store import ResultsStore

    if Path(out).suffix.lower() != ".csv":
        raise LdpsimError(f"--out {str(out)!r} must end in .csv")
    cells = config.cells()
    defaults = run_defaults()
    given = sweep_given(args)
    per_cell = any(k in config.grid for k in _DECIDING)
    rules = _rules()
    used_somewhere = {k for k in per_mechanism() for c in cells
                      if rules[k][0]({**defaults, **c.params})}
    runner = EngineRunner()
    skip = getattr(args, "no_memory_check", False)
    for cell in cells:
        params = {**defaults, **cell.params}
        check_data_dir(params.get("data_dir"), given.get("data_dir", "--data-dir"))
        typed = {k for k in given if k in defaults
                 and not (k in _SWEEP_AXIS_FLAGS and params.get(k) == defaults[k])}
        if "mechanism" in config.grid:   # used by another cell's mechanism: not an error
            typed -= {k for k in per_mechanism() if k in used_somewhere}
        try:
            not_applicable(params, typed, name_of=lambda f: given.get(f, option(f)))
        except LdpsimError as err:
            raise LdpsimError(f"cell {cell.key}: {err}" if per_cell else str(err)) from None
        runner.check(cell)
        check_names(params)
        check_run_memory(params, skip=skip, where=f"cell {cell.key}: ")
    ResultsStore(out, fingerprint=config.fingerprint(), config=config.normalized(),
                 overwrite=getattr(args, "overwrite", False),
                 describe_difference=config.describe_difference).preflight()


#: Largest client count ``ldpsim noise`` can index (int32 counts in the kernels).
MAX_NOISE_CLIENTS = 2**31 - 1


def noise_memory(clients: Sequence[int], dim: int, draw: str, chunk_size: int | None) -> tuple[float, str]:
    """``(bytes, parts)``: memory of the largest trial of ``ldpsim noise`` (float32 buffers:
    a chunk of clients x d per-client, or a few d-vectors for the aggregate draw; the same
    rule as :func:`ldpsim._src.privacy.analysis.averaging.choose_method`)."""
    worst, parts = 0.0, ""
    for n in clients:
        method = draw if draw != "auto" else ("per-client" if n * dim <= 2**27 else "aggregate")
        if method == "aggregate":
            need, what = 6.0 * 4 * dim, f"aggregate draw of {dim} coordinates"
        else:
            chunk = chunk_size if chunk_size is not None else max(1, 2**22 // dim)
            chunk = min(chunk, 1 << max(n - 1, 0).bit_length())
            need, what = 4.0 * dim * (2 * chunk + 6), f"{chunk} clients x {dim} coordinates per chunk"
        if need > worst:
            worst, parts = need, what
    return worst, parts


def check_noise_args(args: argparse.Namespace, clients: Sequence[int], dim: int) -> None:
    """``ldpsim noise`` before drawing: memory of the largest trial, then the client range."""
    from ldpsim._src._checks import check_positive_int

    chunk = None if args.chunk_size is None else check_positive_int("chunk_size", args.chunk_size)
    need, parts = noise_memory(clients, dim, args.draw, chunk)
    check_memory(need, parts, "lower --dim or --chunk-size", subject="this noise study",
                 skip=getattr(args, "no_memory_check", False))
    for n in clients:
        if n > MAX_NOISE_CLIENTS:
            raise LdpsimError(f"--clients {n}: at most {MAX_NOISE_CLIENTS} clients per average "
                              "(client counts are int32 in the kernels)")


#: ``ldpsim audit`` defaults of the options that apply to some mechanisms only.
AUDIT_DEFAULTS = {"k": 2, "clip": 1.0, "neighbours": "replace", "dim": None, "delta": None,
                  "method": None, "sampler": None}


def check_audit_args(args: argparse.Namespace) -> None:
    """``ldpsim audit`` before playing: options that do not apply to the mechanism (only
    those typed), the seed, the trial range and the memory of a ``--dim`` game."""
    from ldpsim._src.audit._game import MAX_TRIALS

    mech = args.mechanism
    spec = registry.randomizer(mech)
    categorical, vector_only, additive_only = ("k",), ("clip", "dim"), ("neighbours",)
    delta_only = ("delta", "method", "sampler")
    names = [s.name for s in registry.RANDOMIZERS if s.audit_dim is not None or s.frontier
             or s.input != "vector"]
    cats = [n for n in names if registry.randomizer(n).input != "vector"]
    for dest in categorical + vector_only + additive_only + delta_only:
        applies = ((spec.input != "vector") if dest in categorical
                   else spec.input == "vector" if dest in vector_only
                   else spec.additive if dest in additive_only
                   else spec.uses("delta"))
        if dest == "clip" and not spec.uses_clip:
            applies = False   # e.g. SignDS releases indices: no clip bound
        if not applies and was_given(args, dest, AUDIT_DEFAULTS.get(dest)):
            used = (_flags(cats, "--mechanism", " and ") if dest in categorical
                    else "the vector randomizers that clip (not " + ", ".join(
                        n for n in names if not registry.randomizer(n).uses_clip) + ")"
                    if dest == "clip"
                    else _flags([n for n in names if registry.randomizer(n).additive],
                                "--mechanism", " and ") if dest in additive_only
                    else "the vector randomizers (not " + ", ".join(cats) + ")"
                    if dest in vector_only
                    else _flags([n for n in names if registry.randomizer(n).uses("delta")],
                                "--mechanism", " and "))
            raise LdpsimError(f"{option(dest)} does not apply to --mechanism {mech}: it is used by "
                              f"{used} only; remove it")
    check_seed(args.seed)
    if args.trials > MAX_TRIALS:
        raise LdpsimError(f"--trials {args.trials}: at most {MAX_TRIALS} (2**32) trials per input "
                          "(the game's key positions)")
    if args.dim is not None and args.dim > 0:
        need = 16.0 * args.dim + 12.0 * max(2**22, args.dim)
        check_memory(need, f"two {args.dim}-coordinate inputs and a chunk of outputs",
                     "lower --dim", subject="this audit", skip=getattr(args, "no_memory_check", False))


# ----------------------------------------------------------------------------- help


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's line breaks and shows every option's default: ``(default: X)`` is
    added unless the help already says what the default is (or the default is None, False
    or empty: an option that is off unless given, whose help says what None means)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text.lower() or default is argparse.SUPPRESS or default is None
                or default is False or default == [] or not action.option_strings
                or action.nargs == 0):  # a flag: off unless given
            return text
        return text + " (default: %(default)s)"

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        # The flag's own name (``--rounds ROUNDS``), not its internal dest (``SET_ROUNDS``);
        # a comma-separated list reads ``EPS[,EPS...]``.
        longs = [o for o in action.option_strings if o.startswith("--")]
        name = longs[0][2:].replace("-", "_").upper() if longs else action.dest.upper()
        if "comma-separated" in (action.help or "").lower():
            one = {"EPSILON": "EPS", "EPSILONS": "EPS", "CLIENTS": "N"}.get(name, name.removesuffix("S"))
            return f"{one}[,{one}...]"
        return name


def pairs(items, flag: str) -> list[tuple[str, str]]:
    """``FIELD=VALUE`` items of ``flag`` (``--axis``, ``--set``) as (field, value) pairs."""
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise LdpsimError(f"{flag} expects FIELD=VALUE, got {item!r}")
        out.append((name.strip().replace("-", "_"), value.strip()))
    return out
