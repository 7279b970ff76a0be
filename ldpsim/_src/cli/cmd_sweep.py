"""``ldpsim sweep``: a grid of simulations (ε × clients per round × seeds × …) into one tidy CSV."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from ldpsim._src.privacy import registry

ORDER = 30

#: ``--mechanism`` choices at import (the registry's, read again by ``--help``; the registry
#: imports no JAX).
MECHANISMS = registry.engine_randomizers()

#: The quick default sweep (no --config, no grid flags): synthetic data, multinomial logistic
#: regression (FedProx's model for this data; d = 610, so at m = 1,000 the averaged local noise
#: of eps = 10 is already below the clean update, and the figures show it cancelling), one
#: seed (12 runs), 10 local SGD steps at 0.1 (measured: 0.41 after 20 rounds without noise,
#: against 0.16 with the engine's cheap 2-step default). 115-133 s of CPU time measured fresh
#: (3 min 8 s wall at load average 8-9 on the shared 2-core machine); see the README.
DEFAULT_GRID = {"epsilon": "1,10,100,inf", "clients_per_round": "10,100,1000", "seed": "0"}
DEFAULT_RUN = {"dataset": "synthetic", "model": "logreg", "population": 2000, "rounds": 20,
               "delta": "1/population", "clip": 1.0, "local_steps": 10, "client_lr": 0.1}
DEFAULT_OUT = Path("results/sweep.csv")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")

#: Named presets: ``--preset NAME`` starts from this grid and these fixed settings; every
#: grid flag or setting changes the preset (the rest of it stays). Without ``--config`` the
#: base is "quick"; ``--preset none`` starts from the bare run defaults (SimulationConfig,
#: with the grid axes above) instead.
PRESETS = {"quick": (DEFAULT_GRID, DEFAULT_RUN), "none": (DEFAULT_GRID, {})}
#: The preset a sweep without ``--config`` starts from.
DEFAULT_PRESET = "quick"
#: Settings of a preset chosen for its dataset (the quick sweep's model and local training
#: were measured on synthetic data): when the sweep runs another dataset they are dropped,
#: so that dataset's own measured defaults apply (ldpsim._src.fl.defaults), unless typed.
DATASET_BOUND = ("model", "local_steps", "client_lr")

_EPILOG = """\
examples:
  ldpsim sweep                                   # quick default sweep on synthetic data (+ plots)
  ldpsim sweep --clients 10,100,1000,2000        # the quick sweep with one more m (the rest stays)
  ldpsim sweep --preset none --epsilon 1,10 --clients 10,100   # from the run defaults instead
  ldpsim sweep --epsilon 1,10,100,inf --clients 10,100,1000 --seeds 0,1,2 \\
      --dataset mnist --model lenet5 --population 3000 --rounds 30 --out results/mnist.csv
  ldpsim sweep --config experiments/mindspore_lenet5.toml
  ldpsim sweep --config experiments/mindspore_lenet5.toml --seeds 0    # flags override the file

base: flags change the quick preset (or the --config file, or --preset none: the run
defaults) field by field; the command prints the base and every change before it runs. On a
dataset other than synthetic the quick preset's model and local training are dropped, so the
dataset's own measured defaults apply (unless typed).

resuming: results are written cell by cell. Interrupt (Ctrl-C) and re-run the same command:
finished cells are skipped. A results file written by a different sweep is refused; choose
another --out or pass --overwrite. OUT.manifest.json beside the CSV records the resolved grid,
the command line, versions, devices, data checksums, times, status and each finished cell's
privacy guarantee (earlier invocations of a resumed sweep under earlier_sessions).

grid axes take comma-separated lists (epsilon accepts inf = no privacy); --mechanism
gaussian,laplace,privunit2 compares local randomizers at each epsilon (options of one
randomizer, such as --delta for gaussian, apply to its cells); --axis FIELD=V1,V2 adds any
other run setting as an axis (e.g. --axis neighbours=replace,add-remove). Fixed settings: the run options above, or
--set FIELD=VALUE; --delta also accepts 1/population or 1/clients_per_round.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter
    from ldpsim._src.cli._guards import run_defaults
    from ldpsim._src.cli.cmd_run import options

    p = subparsers.add_parser(
        "sweep",
        help="grid of runs over epsilon x clients per round x seeds -> one resumable CSV (+ plots)",
        description="Run a grid of federated simulations under local DP and write one tidy CSV, "
                    "one row per run and evaluated round, incrementally and resumably.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--config", type=Path, default=None, help="TOML sweep file ([sweep], [grid], [run] tables)")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, metavar="{quick,none}",
                   help="the base that flags change (default: quick, what a bare `ldpsim sweep` runs: "
                        "synthetic data, logistic regression, population 2000, delta 1/population, "
                        "20 rounds, 10 local steps at 0.1, epsilon 1,10,100,inf x clients "
                        "10,100,1000 x seed 0, plots; none: the run defaults of `ldpsim run`, "
                        "no plots). Every flag changes one field of it; the rest stays, and the "
                        "command prints the base and each change before it runs")
    grid = p.add_argument_group("grid axes (comma-separated lists)")
    grid.add_argument("--epsilon", "--epsilons", dest="grid_epsilon", default=None,
                      metavar="EPS[,EPS...]",
                      help=f"per-round local epsilons, inf = no privacy (default {DEFAULT_GRID['epsilon']})")
    grid.add_argument("--clients", "--clients-per-round", dest="grid_clients_per_round", default=None,
                      metavar="M[,M...]",
                      help=f"clients per round (default {DEFAULT_GRID['clients_per_round']})")
    grid.add_argument("--seeds", "--seed", dest="grid_seed", default=None, metavar="SEED[,SEED...]",
                      help=f"root seeds (default {DEFAULT_GRID['seed']})")
    grid.add_argument("--mechanism", "--mechanisms", dest="grid_mechanism", default=None,
                      metavar="M1,M2",
                      help="local randomizers to compare, a grid axis: "
                           + ", ".join(registry.engine_randomizers())
                           + " (default: gaussian, as a fixed setting)")
    grid.add_argument("--axis", action="append", default=[], metavar="FIELD=V1,V2",
                      help="another run setting as an axis (repeatable)")
    fixed = p.add_argument_group("fixed run settings (each changes the base: the config file, else the "
                                 "preset; quick: the quick sweep's value, else the run default)")
    skip = {"epsilon", "clients_per_round", "seed", "delta", "mechanism"}
    run_default = run_defaults()
    for flag, field, typ, choices, help_ in options():
        if field not in skip:
            default = (f"quick: {DEFAULT_RUN[field]}; run default: {run_default[field]}"
                       if field in DEFAULT_RUN else f"default: {run_default[field]}")
            help_ = help_.replace("see 'training defaults' below", "listed by ldpsim run --help")
            help_ = f"{help_} ({default})".replace("%", "%%")
            fixed.add_argument(flag, dest=f"set_{field}", type=typ, choices=choices, default=None, help=help_)
    fixed.add_argument("--delta", dest="set_delta", default=None,
                       help="delta: a number in (0, 1), 1/population or 1/clients_per_round "
                            f"(quick: {DEFAULT_RUN['delta']}; run default: {run_default['delta']})")
    fixed.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="any other fixed run setting (repeatable)")
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, default=None, help=f"results CSV (default: the config's out, else {DEFAULT_OUT})")
    out.add_argument("--overwrite", action="store_true", help="replace an existing results file instead of resuming")
    out.add_argument("--dry-run", action="store_true",
                     help="print the plan (base, changes, every cell and whether --out already "
                          "holds it) and stop: nothing is computed or written")
    out.add_argument("--plots", action=argparse.BooleanOptionalAction, default=None,
                     help="after the sweep, write the four figures next to the CSV (<stem>_<kind>.png) "
                          "(default: on for the quick preset, else the config's plots, else off)")
    out.add_argument("--vmap-epsilon", action="store_true",
                     help="run the finite epsilon values of a group as one vmapped program (same results; "
                          "measured slower than one by one on CPU, may pay off on a GPU)")
    out.add_argument("--workers", type=_workers, default=1, metavar="N",
                     help="run N cells at once, each in its own process on its own share of the "
                          "CPU cores (CPU only; default 1): for hosts with more cores than one "
                          "process keeps busy. Rows equal one process's up to float summation "
                          "order, written as cells finish. On 2 cores it gained only 1.04x (one "
                          "process already runs a device per core; benchmarks/README.md)")
    out.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    out.add_argument("--no-memory-check", action="store_true",
                     help="run even when a cell's memory estimate exceeds this host's memory")
    p.set_defaults(handler=run)


def _workers(text: str) -> int:
    """``--workers``: a positive integer (the core count is checked with the other settings)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``ldpsim sweep`` runs and where it came from.

    Attributes:
        config: the resolved :class:`~ldpsim._src.sweep.config.SweepConfig`.
        out: the results CSV.
        plots: whether the four figures are drawn after the sweep.
        base: the starting point in words (a preset, the run defaults or a config file).
        changes: ``(field, before, after)`` for every grid axis or setting the command line
            changed from that base (text as printed; ``before`` is the run default where the
            base does not set the field).
    """

    config: Any
    out: Path
    plots: bool
    base: str
    changes: tuple[tuple[str, str, str], ...]


def _text(grid: dict, run: dict, defaults: dict, field: str) -> str:
    from ldpsim._src.sweep.config import display_value as format_value

    if field in grid:
        values = grid[field]
        return ",".join(format_value(v) for v in values) + ("" if field in DEFAULT_GRID else " (axis)")
    value = run[field] if field in run else defaults.get(field, "(unset)")
    return "(the dataset's default)" if value is None else format_value(value)


def _describe(resolved: Resolved) -> str:
    """Which base the sweep started from, what the command line changed, the resolved grid
    and the fixed settings that differ from the run defaults."""
    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.sweep.config import display_value as format_value

    config = resolved.config
    defaults = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}
    axes = "  ".join(f"{k}={','.join(format_value(v) for v in vals)}"
                     for k, vals in config.grid.items())
    fixed = "  ".join(f"{k}={format_value(v)}" for k, v in sorted(config.base.items())
                      if k in defaults and v != defaults[k])
    changed = "  ".join(f"{f}: {a} -> {b}" for f, a, b in resolved.changes)
    return (f"  base:    {resolved.base}\n"
            f"  changed: {changed or '(nothing; the base as it is)'}\n"
            f"  grid:  {axes}\n  fixed: {fixed or '(all run defaults)'}")


def _parse_scalar(text: str):
    """A CLI value as int, float or string (TOML-like)."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    return text


def build_config(args: argparse.Namespace):
    """(SweepConfig, out path, plots?) from the command line and an optional TOML file
    (:func:`resolve` with the base and the changes)."""
    resolved = resolve(args)
    return resolved.config, resolved.out, resolved.plots


def resolve(args: argparse.Namespace) -> Resolved:
    """The sweep the command line asks for.

    The base is the ``--config`` file, else the ``--preset`` (default ``quick``, the sweep a
    bare ``ldpsim sweep`` runs; ``none``: the run defaults). Grid flags, run options,
    ``--axis`` and ``--set`` then change that base, field by field; the rest of it stays.
    """
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.cli._parsing import pairs
    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.sweep.config import ALIASES, SweepConfig, load_sweep_config, parse_list

    defaults = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}
    if args.config is not None:
        if getattr(args, "preset", None) is not None:
            raise LdpsimError("--preset and --config both give the base of the sweep; keep one "
                              "(flags change either)")
        file_config, meta = load_sweep_config(args.config)
        grid = {k: list(v) for k, v in file_config.grid.items()}
        run = dict(file_config.base)
        out = Path(meta["out"]) if meta.get("out") and args.out is None else args.out
        plots = bool(meta.get("plots", False))
        name = meta.get("name")
        base = f"the config file {str(args.config)!r} (flags change it)"
    else:
        preset = args.preset or DEFAULT_PRESET
        preset_grid, preset_run = PRESETS[preset]
        grid = {k: parse_list(v) for k, v in preset_grid.items()}
        run = dict(preset_run)
        out, plots = args.out, preset != "none"
        name = preset if preset != "none" else None
        if preset == "none":
            base = "the run defaults (--preset none; the grid axes default to the quick sweep's)"
        else:
            how = "--preset " + preset if args.preset else "the default; --preset none for the run defaults"
            base = f"the '{preset}' preset ({how}); flags change it, the rest of it stays"
    if getattr(args, "plots", None) is not None:
        plots = bool(args.plots)
    start = SweepConfig(base=run, grid=grid) if args.config is None else file_config
    before_grid, before_run = dict(start.grid), dict(start.base)
    for axis in DEFAULT_GRID:
        value = getattr(args, f"grid_{axis}")
        if value is not None:
            grid[axis] = parse_list(value)
    if args.grid_mechanism is not None:   # a grid axis, even with one value
        file_mechanisms = grid.get("mechanism", [run.get("mechanism")])
        run.pop("mechanism", None)
        grid["mechanism"] = parse_list(args.grid_mechanism)
        if args.config is not None:
            # The file's options for the mechanisms the command line left out go with them
            # (as in the full sweep, they apply to no cell of this one); an option no
            # mechanism of the file uses stays, and is refused by name.
            specs = {s.name: s for s in registry.RANDOMIZERS}

            def users(names):
                return [specs[m] for m in map(str, names) if m in specs]

            for field in registry.own_option_fields():
                if (field in run and not any(s.uses(field) for s in users(grid["mechanism"]))
                        and any(s.uses(field) for s in users(file_mechanisms))):
                    run.pop(field)
    # A field given two ways is refused by name (the later way used to win silently).
    axis_fields = [ALIASES.get(f, f) for f, _ in pairs(args.axis, "--axis")]
    set_fields = [f for f, _ in pairs(args.set, "--set")]
    flag_fields = [k[4:] for k, v in vars(args).items() if k.startswith("set_") and v is not None]
    grid_flags = {a: "--" + {"clients_per_round": "clients", "seed": "seeds"}.get(a, a)
                  for a in DEFAULT_GRID if getattr(args, f"grid_{a}") is not None}
    if args.grid_mechanism is not None:
        grid_flags["mechanism"] = "--mechanism"
    for field in sorted(set(axis_fields)):
        other = (grid_flags.get(field) or
                 ("--" + field.replace("_", "-") if field in flag_fields else None) or
                 (f"--set {field}=..." if field in set_fields else None))
        if other is not None or axis_fields.count(field) > 1:
            raise LdpsimError(f"{field} is given both by --axis {field}=... and by "
                              f"{other or 'another --axis'}; keep one")
    for field in sorted(set(flag_fields) & set(set_fields)):
        raise LdpsimError(f"{field} is given both by --{field.replace('_', '-')} and by "
                          f"--set {field}=...; keep one")
    for field, values in pairs(args.axis, "--axis"):
        run.pop(field, None)
        grid[field] = [_parse_scalar(v) for v in parse_list(values)]
    for key, value in vars(args).items():
        if key.startswith("set_") and value is not None:
            field = key[4:]
            grid.pop(field, None)
            run[field] = _parse_scalar(value) if isinstance(value, str) and field == "delta" else value
    for field, value in pairs(args.set, "--set"):
        grid.pop(field, None)
        run[field] = _parse_scalar(value)
    if args.config is None and preset_run.get("dataset") is not None:
        datasets = grid.get("dataset", [run.get("dataset", defaults.get("dataset"))])
        if any(str(d) != preset_run["dataset"] for d in datasets):
            typed = {k[4:] for k, v in vars(args).items() if k.startswith("set_") and v is not None}
            typed |= {f for f, _ in pairs(args.set, "--set")} | {f for f, _ in pairs(args.axis, "--axis")}
            for field in DATASET_BOUND:
                if field not in typed and run.get(field) == preset_run.get(field):
                    run.pop(field, None)
    if (args.config is None and args.grid_epsilon is None
            and "epsilon" not in registry.mode(run.get("privacy_mode", registry.MODES[0].name)).settings):
        # A mode that does not read epsilon has a budget of its own (noise_multiplier,
        # dp_eps), so the default epsilon axis is the single "not used" value; the modes
        # that read it (local DP, the discrete modes) keep the preset's epsilon axis.
        grid["epsilon"] = [float("inf")]
    # Record every setting (SimulationConfig defaults included) so that the fingerprint
    # pins the whole run, not only what was typed.
    full = {k: v for k, v in {**defaults, **run}.items() if k not in grid and k not in ("seeds", "clients")}
    config = SweepConfig(base=full, grid=grid, name=name)
    changes = []
    for field in sorted(set(before_grid) | set(before_run) | set(config.grid) | set(run)):
        was = _text(before_grid, before_run, defaults, field)
        now = _text(config.grid, config.base, defaults, field)
        if was != now:
            changes.append((field, was, now))
    return Resolved(config=config, out=out if out is not None else DEFAULT_OUT, plots=plots,
                    base=base, changes=tuple(changes))


def run(args: argparse.Namespace) -> int:
    from ldpsim._src.cli._guards import check_sweep_args
    from ldpsim._src.cli._files import check_text_file
    from ldpsim._src.sweep.run import run_sweep

    if args.config is not None:
        check_text_file(args.config, "--config", "TOML")
    resolved = resolve(args)
    config, out, plots = resolved.config, resolved.out, resolved.plots
    check_sweep_args(args, config, out)  # before any work or output
    cells = config.cells()
    print(f"ldpsim sweep: {_count(len(cells), 'cell')} -> {out} (fingerprint {config.fingerprint()})", file=sys.stderr)
    print(_describe(resolved), file=sys.stderr)
    if args.dry_run:
        done = set() if args.overwrite else _finished_cells(out, config)
        for cell in cells:
            print(f"  {'done  ' if cell.key in done else 'to run'}  {cell.key}")
        todo = sum(cell.key not in done for cell in cells)
        print(f"dry run: {_count(todo, 'cell')} to run, {len(cells) - todo} already in {out}"
              + (" (--overwrite: all rerun)" if args.overwrite else "") + "; nothing written")
        return 0
    from ldpsim._src import _interrupt

    manifest = _SweepManifest(args, config, out, cells)
    _interrupt.note(f"finished cells (if any) are in {out} (manifest {manifest.path}); a "
                    "running cell of more than 10 rounds keeps its last finished round in "
                    f"{Path(out).with_suffix('.checkpoints')}; run the same command again to "
                    "resume: finished cells are skipped, a checkpointed one continues")
    def start(total: int, skipped: int) -> None:
        if not args.overwrite:
            _announce_resume(out, config, cells, total, skipped)
        manifest.start(total, skipped)

    with manifest:  # SIGINT/SIGTERM: main prints the note above, exit 130/143
        summary = run_sweep(config, out, overwrite=args.overwrite, progress=not args.no_progress,
                            vmap_epsilon=args.vmap_epsilon, on_start=start,
                            on_cell=manifest.cell, workers=args.workers)
    print(f"ran {_count(summary.ran, 'cell')} ({summary.rows} rows), skipped {summary.skipped} finished, "
          f"in {summary.seconds:.1f} s -> {summary.path}"
          + (f" (dropped {summary.dropped_rows} rows of an interrupted cell)" if summary.dropped_rows else ""))
    if plots:
        from ldpsim._src.plots.figures import KINDS, plot

        from ldpsim._src._checks import LdpsimError

        for kind in KINDS:
            path = Path(out).with_name(f"{Path(out).stem}_{kind}.png")
            try:
                plot(out, kind, path)
            except LdpsimError as err:   # a figure this grid cannot fill; the results stand
                print(f"skipped the {kind} figure: {err}", file=sys.stderr)
                continue
            print(f"wrote {path}")
    return 0


def _announce_resume(out: Path, config, cells, total: int, skipped: int) -> None:
    """On a resumed sweep, say so: the cells ``out`` already holds, and each cell that
    continues from a checkpoint (ldpsim._src.sweep.run keeps them in ``<stem>.checkpoints/``)."""
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.fl.checkpoint import config_hash, saved_round
    from ldpsim._src.sweep.engine import make_config

    if skipped:
        print(f"ldpsim sweep: resuming: {skipped} of {_count(total, 'cell')} already in {out}",
              file=sys.stderr)
    folder = Path(out).with_name(Path(out).stem + ".checkpoints")
    if not folder.is_dir():
        return
    done = _finished_cells(out, config)
    for cell in cells:
        if cell.key in done:
            continue
        try:
            where = folder / config_hash([make_config(dict(cell.params))])[:20]
        except (LdpsimError, TypeError, ValueError):
            continue
        last = saved_round(where)
        if last:
            print(f"ldpsim sweep: {cell.key} continues after round {last} (its checkpoint)",
                  file=sys.stderr)


def _finished_cells(out: Path, config) -> set[str]:
    """Keys of the cells of ``config`` that the results file ``out`` already holds (its
    sweep record, when it is this sweep's; nothing is locked or written)."""
    import json

    from ldpsim._src.sweep.store import _same_results, sidecar_path

    try:
        meta = json.loads(sidecar_path(out).read_text())
        fingerprint = config.fingerprint()
        if meta["fingerprint"] != fingerprint and not _same_results(meta, fingerprint):
            return set()
        return set(meta.get("done", ()))
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _resolved(cell, row: dict) -> dict:
    """A cell's settings left to its data, as it ran: the model (``auto`` resolved, from its
    rows) and the training settings with the dataset's defaults filled in."""
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.fl.defaults import TRAINING_FIELDS
    from ldpsim._src.sweep.engine import make_config

    out = {"model": row.get("model")}
    try:
        config = make_config(dict(cell.params))
    except (LdpsimError, TypeError, ValueError):   # a runner of other settings: the model only
        return out
    return {**out, **{f: getattr(config, f) for f in TRAINING_FIELDS}}


class _SweepManifest:
    """The sweep's manifest beside its CSV (ldpsim._src._manifest): written once the results file
    is open and locked (so a refused or concurrent sweep never touches another's), updated
    after every finished cell with its privacy guarantee, and finished on exit. A resumed
    sweep keeps the earlier invocations under ``earlier_sessions``."""

    def __init__(self, args: argparse.Namespace, config, out: Path, cells) -> None:
        from ldpsim._src import _manifest

        self._m = _manifest
        self.path = _manifest.manifest_path(out)
        self._recorder = None
        normalized = config.normalized()
        self._configuration = {"name": config.name, "fingerprint": config.fingerprint(),
                               **normalized, "cells": [c.key for c in cells],
                               # execution only (not in the fingerprint): cells run at once,
                               # each worker on one host device per core of its share
                               "workers": int(getattr(args, "workers", 1))}
        self._seeds = sorted({int(c.params.get("seed", 0)) for c in cells})
        self._data = sorted({(str(c.params.get("dataset", "synthetic")), c.params.get("data_dir"),
                              str(c.params.get("data_source", "auto"))) for c in cells},
                            key=lambda t: tuple(str(x) for x in t))
        self._out, self._resume = out, not args.overwrite

    def start(self, total: int, skipped: int) -> None:  # noqa: ARG002
        m = self._m
        data = [m.dataset_record(*d) for d in self._data]
        manifest = m.collect("sweep", self._configuration, out=self._out, seeds=self._seeds,
                             data=data)
        # Carry the earlier sessions over only from this sweep: the results file may have
        # held the record of a different sweep that finished no cell (it was replaced).
        self._recorder = m.Recorder(self.path, manifest,
                                    resume=self._resume and (skipped > 0 or self._same_sweep()))
        if not isinstance(manifest.get("privacy"), dict):
            manifest["privacy"] = {"cells": {}}
        manifest["results"]["cells_finished_before"] = skipped
        self._recorder.__enter__()

    def _same_sweep(self) -> bool:
        try:
            old = self._m.load(self.path)
        except (OSError, ValueError):
            return False
        configuration = old.get("configuration") if isinstance(old, dict) else None
        return (isinstance(configuration, dict)
                and configuration.get("fingerprint") == self._configuration["fingerprint"])

    def cell(self, cell, rows: list[dict]) -> None:
        if self._recorder is None:
            return
        manifest = self._recorder.manifest
        manifest["privacy"]["cells"][cell.key] = self._m.guarantee(rows[-1])
        if not isinstance(manifest.get("resolved"), dict):
            manifest["resolved"] = {}
        manifest["resolved"][cell.key] = _resolved(cell, rows[-1])
        self._recorder.add_rows(len(rows))
        self._recorder.update()

    def __enter__(self) -> "_SweepManifest":
        return self

    def __exit__(self, *exc) -> None:
        if self._recorder is not None:
            self._recorder.__exit__(*exc)
