"""Draw every figure of the docs from the committed result tables (no training, seconds).

    python experiments/figures.py            # all figures -> experiments/figures/
    python experiments/figures.py --list     # what each figure is drawn from, and what is present
    python experiments/figures.py --only seed000   # the figures whose name contains "seed000"

Each figure is drawn from CSVs under ``--results`` (default ``experiments/results/``); a figure
whose CSVs are absent, or lack the runs it shows (a grid committed in part), is skipped with a
message naming them (exit status 0), so the command works on a partial checkout. A figure that fails to draw is reported and the exit status is 1.
The figures are written under ``--out`` (default ``experiments/figures/``, the folder the READMEs
link to; its PNGs are the only committed images, see .gitignore).

Seed 000 at convergence: the grid runs in pieces (experiments/README.md), each
committed as ``seed000_converged_<piece>.csv``; they are joined by
:func:`ldpsim.sweep.concat_results` (row concatenation in name order, refusing a run present in
two pieces). The statistics (means, t-intervals over seeds, gaps paired by seed) are
:func:`ldpsim.sweep.accuracy_verdict`'s; ``python experiments/seed000_table.py`` prints them.

FEMNIST under local DP: the pieces ``femnist_ldp*.csv`` of ``femnist_ldp.toml``'s grid
(experiments/README.md), joined the same way.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ldpsim.plots import load_results, plot, plot_accuracy_ci, plot_curves_ci, plot_gap_table
from ldpsim.sweep import accuracy_by_round, accuracy_verdict, concat_results

HERE = Path(__file__).resolve().parent
SEED000 = "seed000_converged_*.csv"
FEMNIST = "femnist_ldp*.csv"


@dataclass(frozen=True)
class Spec:
    """One figure: its file name, the CSV names or glob patterns it needs, how to draw it."""

    name: str
    sources: tuple[str, ...]
    draw: Callable[[list[Path], Path], object]
    about: str


def _read(paths: list[Path]) -> pd.DataFrame:
    """The pieces of one sweep grid, joined (a run in two pieces is refused)."""
    return concat_results(paths)


def _kind(kind: str, **kwargs) -> Callable[[list[Path], Path], object]:
    """One of ``ldpsim plot``'s kinds, from any tidy tables (sweep or ``ldpsim noise``)."""
    return lambda paths, out: plot(pd.concat([load_results(p) for p in paths], ignore_index=True),
                                   kind, out, **kwargs)


def _seed000_accuracy(paths, out):
    return plot_accuracy_ci(accuracy_verdict(_read(paths), method=None), out)


class SkipFigure(Exception):
    """The CSVs are there but lack what this figure shows (e.g. a grid still running)."""


def _seed000_curves(paths, out, clients=(1000, 10000)):
    curves = accuracy_by_round(_read(paths))
    if not set(clients) & set(curves["clients_per_round"]):
        raise SkipFigure(f"no runs at clients_per_round {' or '.join(f'{m:,}' for m in clients)} yet "
                         f"(the CSVs have {', '.join(f'{m:,}' for m in sorted(set(curves['clients_per_round'])))})")
    return plot_curves_ci(curves, out, clients=clients)


def _seed000_gap(paths, out):
    return plot_gap_table(accuracy_verdict(_read(paths), method=None), out)


def _femnist_accuracy(paths, out):
    return plot_accuracy_ci(accuracy_verdict(_read(paths), method=None), out,
                            title="FEMNIST by writer, LeNet-5 (62 classes): final accuracy after 40 rounds vs m\n"
                                  "(mean, 95 % t-interval over seeds where there are two or more)")


def _femnist_curves(paths, out):
    return plot_curves_ci(accuracy_by_round(_read(paths)), out, clients=(10, 50, 105),
                          title="FEMNIST by writer, LeNet-5 (62 classes): accuracy vs round\n"
                                "(mean, 95 % t-interval over seeds where there are two or more)")


def _crossover(paths, out):
    """The trust-model crossover, drawn by its own script's ``plot`` (one figure, one CSV)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("crossover_lenet5", HERE / "crossover_lenet5.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plot(pd.read_csv(paths[0]), str(out))


def _distributed_discrete(paths, out):
    """Distributed discrete DP: accuracy against bits per m, drawn by the driver's ``plot``
    (one CSV per m, read together)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("distributed_discrete_lenet5",
                                                  HERE / "distributed_discrete_lenet5.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plot(",".join(str(p) for p in paths), str(out))


FIGURES = (
    Spec("seed000_converged_accuracy-vs-clients.png", (SEED000,), _seed000_accuracy,
         "seed 000 at convergence: final accuracy vs m per ε, both settings, 95 % t-intervals"),
    Spec("seed000_converged_accuracy-vs-round.png", (SEED000,), _seed000_curves,
         "seed 000 at convergence: accuracy vs round at m = 1,000 and 10,000"),
    Spec("seed000_converged_gap.png", (SEED000,), _seed000_gap,
         "seed 000 at convergence: gap to non-private (points), paired by seed"),
    Spec("seed000_converged_noise-vs-clients.png", (SEED000,), _kind("noise-vs-clients"),
         "seed 000 at convergence: aggregated noise norm vs m, with σ√(d/m)"),
    Spec("femnist_ldp_accuracy-vs-clients.png", (FEMNIST,), _femnist_accuracy,
         "FEMNIST by writer, LeNet-5: final accuracy vs m (10, 50, 105 writers) per ε, 95 % t-intervals"),
    Spec("femnist_ldp_accuracy-vs-round.png", (FEMNIST,), _femnist_curves,
         "FEMNIST by writer, LeNet-5: accuracy vs round at m = 10, 50, 105"),
    Spec("femnist_ldp_noise-vs-clients.png", (FEMNIST,), _kind("noise-vs-clients"),
         "FEMNIST by writer, LeNet-5: aggregated noise norm vs m, with σ√(d/m)"),
    Spec("crossover_lenet5.png", ("crossover_lenet5.csv",), _crossover,
         "trust-model crossover: accuracy vs m at equal central ε, four trust models"),
    Spec("distributed_discrete_lenet5.png", ("distributed_discrete_lenet5_m*.csv",),
         _distributed_discrete,
         "distributed discrete DP over secure aggregation: accuracy vs bits per m, whole-run "
         "and per-round ε, with the continuous, central and no-noise references"),
    Spec("mindspore_lenet5_quick_accuracy-vs-clients.png", ("mindspore_lenet5_quick*.csv",),
         _kind("accuracy-vs-clients"), "MindSpore quick grid (5 rounds)"),
    Spec("mindspore_lenet5_quick_accuracy-vs-epsilon.png", ("mindspore_lenet5_quick*.csv",),
         _kind("accuracy-vs-epsilon"), "MindSpore quick grid (5 rounds)"),
    Spec("mindspore_lenet5_quick_noise-vs-clients.png", ("mindspore_lenet5_quick*.csv",),
         _kind("noise-vs-clients"), "MindSpore quick grid (5 rounds)"),
    Spec("noise_lenet5_eps50.png", ("noise_lenet5_eps50.csv",), _kind("noise-vs-clients"),
         "ldpsim noise, LeNet-5, ε = 50"),
)


def _sources(spec: Spec, results: Path) -> tuple[list[Path], list[str]]:
    """The files a figure is drawn from, and the patterns that matched nothing."""
    found, missing = [], []
    for pattern in spec.sources:
        hits = sorted(p for p in results.glob(pattern) if p.is_file())
        found += hits
        if not hits:
            missing.append(pattern)
    return found, missing


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python experiments/figures.py",
        description="Draw every figure of the docs from the committed result CSVs (no training). "
                    "A figure whose CSVs are absent is skipped with a message.",
        epilog="Figures: " + "; ".join(f"{s.name} <- {', '.join(s.sources)}" for s in FIGURES))
    p.add_argument("--results", type=Path, default=HERE / "results",
                   help="folder of the result CSVs (default: experiments/results/)")
    p.add_argument("--out", type=Path, default=HERE / "figures",
                   help="folder to write the PNGs into (default: experiments/figures/)")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="draw only the figures whose file name contains TEXT (repeatable)")
    p.add_argument("--list", action="store_true", help="list the figures and their sources, draw nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.results.is_dir():
        print(f"figures: results folder {str(args.results)!r} not found", file=sys.stderr)
        return 2
    specs = [s for s in FIGURES if not args.only or any(t in s.name for t in args.only)]
    if not specs:
        print(f"figures: no figure name contains {' or '.join(map(repr, args.only))}", file=sys.stderr)
        return 2
    drawn = skipped = failed = 0
    for spec in specs:
        paths, missing = _sources(spec, args.results)
        if args.list:
            state = f"missing {', '.join(missing)}" if missing else f"{len(paths)} CSV(s) present"
            print(f"{spec.name}: {spec.about}\n    from {', '.join(spec.sources)} ({state})")
            continue
        if missing:
            print(f"skip  {spec.name}: no {', '.join(missing)} in {args.results}")
            skipped += 1
            continue
        out = args.out / spec.name
        try:
            spec.draw(paths, out)
        except SkipFigure as why:
            print(f"skip  {spec.name}: {why}")
            skipped += 1
            continue
        except Exception as err:  # report and go on with the other figures
            print(f"FAIL  {spec.name}: {type(err).__name__}: {err}", file=sys.stderr)
            traceback.print_exc(limit=3)
            failed += 1
            continue
        print(f"wrote {out} (from {', '.join(p.name for p in paths)})")
        drawn += 1
    if not args.list:
        print(f"{drawn} drawn, {skipped} skipped (CSV absent or lacking the runs), {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
