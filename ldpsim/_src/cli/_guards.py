"""The checks each command runs before any long work starts (``run``, ``sweep``, ``noise``,
``audit``): data folders, options that do not apply (:mod:`._rules`), every value, and the
memory estimate (:mod:`._memory`), in that order, so a mistake is named before anything is
loaded or written.

Everything here is cheap: no JAX, no data.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ldpsim._src._checks import LdpsimError
from ldpsim._src.cli._files import check_data_dir
from ldpsim._src.cli._memory import check_memory, check_run_memory, noise_memory
from ldpsim._src.cli._parsing import check_seed, option, pairs, was_given
from ldpsim._src.cli._rules import flags, not_applicable, per_mechanism, rules
from ldpsim._src.privacy import registry


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


def _file_mechanisms(args: argparse.Namespace) -> list[str]:
    """The mechanisms the sweep file names (its grid axis or its run's one), or none."""
    if getattr(args, "config", None) is None:
        return []
    import tomllib

    try:
        data = tomllib.loads(Path(args.config).read_text())
    except (OSError, ValueError):
        return []
    for table in ("grid", "run"):
        value = (data.get(table) or {}).get("mechanism")
        if value is not None:
            return [str(v) for v in (value if isinstance(value, list) else [value])]
    return []


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
    table = rules()
    used_somewhere = {k for k in per_mechanism() for c in cells
                      if table[k][0]({**defaults, **c.params})}
    # A setting of the sweep file that one of the file's own mechanisms uses is not an error
    # when the command line narrows the grid to others (--mechanism fastprojunit on a file
    # with delta for its gaussian cells): it applies to no cell of this run, as in a full run.
    from_file = {k for k, how in given.items() if how.endswith(f"(in {args.config})")} \
        if getattr(args, "config", None) is not None else set()
    used_by_file = {k for k in set(per_mechanism()) & from_file
                    for m in _file_mechanisms(args)
                    for c in cells if table[k][0]({**defaults, **c.params, "mechanism": m})}
    runner = EngineRunner()
    skip = getattr(args, "no_memory_check", False)
    workers = getattr(args, "workers", 1)
    if workers != 1:
        from ldpsim._src.sweep.parallel import cpu_shares

        try:
            cpu_shares(workers)
        except LdpsimError as err:
            raise LdpsimError(f"--workers {workers}: {err}") from None
        if getattr(args, "vmap_epsilon", False):
            raise LdpsimError("--vmap-epsilon runs a group of cells as one program in one process; "
                              "use it without --workers")
        from ldpsim._src._devices import MAX_HOST_DEVICES

        per_worker = min(min(map(len, cpu_shares(workers))), MAX_HOST_DEVICES)
        asked = [int(c.params["devices"]) for c in cells if c.params.get("devices")]
        if asked and max(asked) > per_worker:
            raise LdpsimError(f"--devices {max(asked)}: a worker of --workers {workers} has "
                              f"{per_worker} host device(s) (one per core of its share); lower "
                              "--devices or --workers")
    for cell in cells:
        params = {**defaults, **cell.params}
        check_data_dir(params.get("data_dir"), given.get("data_dir", "--data-dir"))
        typed = {k for k in given if k in defaults
                 and not (k in _SWEEP_AXIS_FLAGS and params.get(k) == defaults[k])}
        if "mechanism" in config.grid:   # used by another cell's mechanism: not an error
            typed -= {k for k in per_mechanism() if k in used_somewhere}
        typed -= used_by_file
        try:
            not_applicable(params, typed, name_of=lambda f: given.get(f, option(f)))
        except LdpsimError as err:
            raise LdpsimError(f"cell {cell.key}: {err}" if per_cell else str(err)) from None
        runner.check(cell)
        check_names(params)
        check_run_memory(params, skip=skip, where=f"cell {cell.key}: ", workers=workers)
    ResultsStore(out, fingerprint=config.fingerprint(), config=config.normalized(),
                 overwrite=getattr(args, "overwrite", False),
                 describe_difference=config.describe_difference).preflight()


#: Largest client count ``ldpsim noise`` can index (int32 counts in the kernels).
MAX_NOISE_CLIENTS = 2**31 - 1


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
            used = (flags(cats, "--mechanism", " and ") if dest in categorical
                    else "the vector randomizers that clip (not " + ", ".join(
                        n for n in names if not registry.randomizer(n).uses_clip) + ")"
                    if dest == "clip"
                    else flags([n for n in names if registry.randomizer(n).additive],
                                "--mechanism", " and ") if dest in additive_only
                    else "the vector randomizers (not " + ", ".join(cats) + ")"
                    if dest in vector_only
                    else flags([n for n in names if registry.randomizer(n).uses("delta")],
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
