"""``ldpsim plot``: a figure from a results CSV (``ldpsim sweep``) or a noise CSV (``ldpsim noise``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ORDER = 50

KINDS = ("accuracy-vs-epsilon", "accuracy-vs-clients", "noise-vs-clients", "convergence")

_EPILOG = """\
examples:
  ldpsim plot results/sweep.csv --kind accuracy-vs-epsilon --out fig/acc_eps.png
  ldpsim plot results/sweep.csv --kind convergence --metric loss --where mechanism=gaussian --out conv.pdf
  ldpsim plot noise.csv --kind noise-vs-clients --out noise.svg

kinds:
  accuracy-vs-epsilon  final accuracy vs epsilon (log), one line per clients per round, inf at the right
  accuracy-vs-clients  final accuracy vs clients per round (log), one line per epsilon
  noise-vs-clients     norm of the aggregated noise vs clients (log-log) with the theory line;
                       from `ldpsim noise` output also the SNR panel
  convergence          accuracy per round, one panel per clients per round, one line per epsilon
bands are mean +- std over seeds; the format follows the --out suffix (.png, .svg, .pdf).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plot",
        help="draw a figure (accuracy vs epsilon/clients, noise vs clients, convergence) from a CSV",
        description="Draw one figure from a results CSV of `ldpsim sweep` (or `ldpsim run`) or a "
                    "noise CSV of `ldpsim noise`.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", type=Path, help="results CSV")
    p.add_argument("--kind", required=True, choices=KINDS, help="which figure")
    p.add_argument("--out", type=Path, required=True, help="output file: .png, .svg or .pdf")
    p.add_argument("--metric", default="accuracy", help="y column for accuracy/convergence kinds (e.g. loss)")
    p.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                   help="keep only rows where COLUMN equals VALUE (repeatable)")
    p.add_argument("--title", default=None, help="figure title")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ldpsim._checks import LdpsimError
    from ldpsim.plots import plot

    where = {}
    for item in args.where:
        column, sep, value = item.partition("=")
        if not sep or not column:
            raise LdpsimError(f"--where expects COLUMN=VALUE, got {item!r}")
        where[column.strip()] = value.strip()
    plot(args.results, args.kind, args.out, metric=args.metric, where=where, title=args.title)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0
