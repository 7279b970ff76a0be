"""``ldpsim sweep``: a grid of simulations (ε × clients per round × seeds × …) into one tidy CSV."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

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

#: Named presets: ``--preset NAME`` starts from this grid and these fixed settings (flags
#: override them). ``ldpsim sweep`` with no config, grid flag or setting runs "quick".
PRESETS = {"quick": (DEFAULT_GRID, DEFAULT_RUN)}

_EPILOG = """\
examples:
  ldpsim sweep                                   # quick default sweep on synthetic data (+ plots)
  ldpsim sweep --epsilon 1,10,100,inf --clients 10,100,1000 --seeds 0,1,2 \\
      --dataset mnist --model lenet5 --population 3000 --rounds 30 --out results/mnist.csv
  ldpsim sweep --config experiments/mindspore_lenet5.toml
  ldpsim sweep --config experiments/mindspore_lenet5.toml --seeds 0    # flags override the file

resuming: results are written cell by cell. Interrupt (Ctrl-C) and re-run the same command:
finished cells are skipped. A results file written by a different sweep is refused; choose
another --out or pass --overwrite. OUT.manifest.json beside the CSV records the resolved grid,
the command line, versions, devices, data checksums, times, status and each finished cell's
privacy guarantee (earlier invocations of a resumed sweep under earlier_sessions).

grid axes take comma-separated lists (epsilon accepts inf = no privacy); --mechanism
gaussian,laplace,privunit2 compares local randomizers at each epsilon (options of one
randomizer, such as --delta for gaussian, apply to its cells); --axis FIELD=V1,V2 adds any
other run setting as an axis (e.g. --axis neighbours=replace,add-remove). Fixed settings: the run options below, or
--set FIELD=VALUE; --delta also accepts 1/population or 1/clients_per_round.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._guards import HelpFormatter, run_defaults
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
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="start from a named preset (quick: synthetic data, logistic regression, "
                        "population 2000, 20 rounds, epsilon 1,10,100,inf x clients 10,100,1000 x seed 0, "
                        "plots); flags override it; "
                        "the default when no config, grid flag or setting is given")
    grid = p.add_argument_group("grid axes (comma-separated lists)")
    grid.add_argument("--epsilon", "--epsilons", dest="grid_epsilon", default=None,
                      help=f"per-round local epsilons, inf = no privacy (default {DEFAULT_GRID['epsilon']})")
    grid.add_argument("--clients", "--clients-per-round", dest="grid_clients_per_round", default=None,
                      help=f"clients per round (default {DEFAULT_GRID['clients_per_round']})")
    grid.add_argument("--seeds", "--seed", dest="grid_seed", default=None,
                      help=f"root seeds (default {DEFAULT_GRID['seed']})")
    grid.add_argument("--mechanism", "--mechanisms", dest="grid_mechanism", default=None,
                      metavar="M1,M2",
                      help="local randomizers to compare, a grid axis: "
                           + ", ".join(registry.engine_randomizers())
                           + " (default: gaussian, as a fixed setting)")
    grid.add_argument("--axis", action="append", default=[], metavar="FIELD=V1,V2",
                      help="another run setting as an axis (repeatable)")
    fixed = p.add_argument_group("fixed run settings (default: the config file, else the quick sweep / "
                                 "SimulationConfig defaults)")
    skip = {"epsilon", "clients_per_round", "seed", "delta", "mechanism"}
    run_default = run_defaults()
    for flag, field, typ, choices, help_ in options():
        if field not in skip:
            quick = f"; quick sweep: {DEFAULT_RUN[field]}" if field in DEFAULT_RUN else ""
            help_ = help_.replace("see 'training defaults' below", "listed by ldpsim run --help")
            help_ = f"{help_} (default: {run_default[field]}{quick})".replace("%", "%%")
            fixed.add_argument(flag, dest=f"set_{field}", type=typ, choices=choices, default=None, help=help_)
    fixed.add_argument("--delta", dest="set_delta", default=None,
                       help="delta: a number in (0, 1), 1/population or 1/clients_per_round "
                            f"(default: {run_default['delta']}; quick sweep: {DEFAULT_RUN['delta']})")
    fixed.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="any other fixed run setting (repeatable)")
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, default=None, help=f"results CSV (default: the config's out, else {DEFAULT_OUT})")
    out.add_argument("--overwrite", action="store_true", help="replace an existing results file instead of resuming")
    out.add_argument("--plots", action="store_true",
                     help="after the sweep, write the four figures next to the CSV (<stem>_<kind>.png); "
                          "on by default for the quick default sweep")
    out.add_argument("--vmap-epsilon", action="store_true",
                     help="run the finite epsilon values of a group as one vmapped program (same results; "
                          "measured slower than one by one on CPU, may pay off on a GPU)")
    out.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    out.add_argument("--no-memory-check", action="store_true",
                     help="run even when a cell's memory estimate exceeds this host's memory")
    p.set_defaults(handler=run)


def _describe(config) -> str:
    """The resolved grid and the fixed settings that differ from the run defaults."""
    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.sweep.config import format_value

    defaults = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}
    axes = "  ".join(f"{k}={','.join(format_value(v) for v in vals)}"
                     for k, vals in config.grid.items())
    fixed = "  ".join(f"{k}={format_value(v)}" for k, v in sorted(config.base.items())
                      if k in defaults and v != defaults[k])
    return f"  grid:  {axes}\n  fixed: {fixed or '(all run defaults)'}"


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
    """(SweepConfig, out path, plots?) from the command line and an optional TOML file."""
    from ldpsim._src.cli._guards import pairs
    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.sweep.config import SweepConfig, load_sweep_config, parse_list

    if args.config is not None:
        file_config, meta = load_sweep_config(args.config)
        grid = dict(file_config.grid)
        run = dict(file_config.base)
        out = Path(meta["out"]) if meta.get("out") and args.out is None else args.out
        plots = args.plots or bool(meta.get("plots", False))
        name = meta.get("name")
    else:
        given = (any(getattr(args, f"grid_{a}") is not None for a in DEFAULT_GRID) or args.axis
                 or args.grid_mechanism is not None)
        bare = not given and not any(v is not None for k, v in vars(args).items() if k.startswith("set_")) \
            and not args.set
        preset = args.preset or ("quick" if bare else None)
        preset_grid, preset_run = PRESETS[preset] if preset else (DEFAULT_GRID, {})
        grid = {k: parse_list(v) for k, v in preset_grid.items()}
        run = dict(preset_run)
        out, plots, name = args.out, args.plots or preset is not None, preset
    for axis in DEFAULT_GRID:
        value = getattr(args, f"grid_{axis}")
        if value is not None:
            grid[axis] = parse_list(value)
    if args.grid_mechanism is not None:   # a grid axis, even with one value
        run.pop("mechanism", None)
        grid["mechanism"] = parse_list(args.grid_mechanism)
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
    if (args.config is None and args.grid_epsilon is None
            and run.get("privacy_mode", "ldp") != "ldp"):
        # epsilon is the local-DP budget; the other modes have their own (noise_multiplier,
        # dp_eps), so the default epsilon axis is the single "not used" value.
        grid["epsilon"] = [float("inf")]
    # Record every setting (SimulationConfig defaults included) so that the fingerprint
    # pins the whole run, not only what was typed.
    defaults = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}
    base = {k: v for k, v in {**defaults, **run}.items() if k not in grid and k not in ("seeds", "clients")}
    config = SweepConfig(base=base, grid=grid, name=name)
    return config, (out if out is not None else DEFAULT_OUT), plots


def run(args: argparse.Namespace) -> int:
    from ldpsim._src.cli._guards import check_sweep_args, check_text_file
    from ldpsim._src.sweep.run import run_sweep

    if args.config is not None:
        check_text_file(args.config, "--config", "TOML")
    config, out, plots = build_config(args)
    check_sweep_args(args, config, out)  # before any work or output
    cells = config.cells()
    print(f"ldpsim sweep: {len(cells)} cells -> {out} (fingerprint {config.fingerprint()})", file=sys.stderr)
    if args.config is None and args.preset is None and config.name in PRESETS:
        print(f"  (no --config, grid flag or setting given: the '{config.name}' preset, "
              f"--preset {config.name})", file=sys.stderr)
    print(_describe(config), file=sys.stderr)
    from ldpsim._src import _interrupt

    manifest = _SweepManifest(args, config, out, cells)
    _interrupt.note(f"finished cells are saved in {out} (manifest {manifest.path}); run the same "
                    "command again to resume: finished cells are skipped")
    with manifest:  # SIGINT/SIGTERM: main prints the note above, exit 130/143
        summary = run_sweep(config, out, overwrite=args.overwrite, progress=not args.no_progress,
                            vmap_epsilon=args.vmap_epsilon, on_start=manifest.start,
                            on_cell=manifest.cell)
    print(f"ran {summary.ran} cells ({summary.rows} rows), skipped {summary.skipped} finished, "
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
                               **normalized, "cells": [c.key for c in cells]}
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
        self._recorder = m.Recorder(self.path, manifest, resume=self._resume)
        if not isinstance(manifest.get("privacy"), dict):
            manifest["privacy"] = {"cells": {}}
        manifest["results"]["cells_finished_before"] = skipped
        self._recorder.__enter__()

    def cell(self, cell, rows: list[dict]) -> None:
        if self._recorder is None:
            return
        manifest = self._recorder.manifest
        manifest["privacy"]["cells"][cell.key] = self._m.guarantee(rows[-1])
        self._recorder.add_rows(len(rows))
        self._recorder.update()

    def __enter__(self) -> "_SweepManifest":
        return self

    def __exit__(self, *exc) -> None:
        if self._recorder is not None:
            self._recorder.__exit__(*exc)
