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
  ldpsim plot results/sweep.csv --kind convergence --metric loss --where clients_per_round=100 --out conv.pdf
  ldpsim plot noise.csv --kind noise-vs-clients --out noise.svg
  ldpsim plot results/sweep.csv --kind accuracy-vs-epsilon --epsilon-axis total --out acc_total.png

kinds:
  accuracy-vs-epsilon  final accuracy vs per-round epsilon (log; --epsilon-axis total: the total
                       epsilon_spent), one line per clients per round, inf at the right
  accuracy-vs-clients  final accuracy vs clients per round (log), one line per epsilon
  noise-vs-clients     norm of the aggregated noise vs clients (log-log) with the theory line;
                       from `ldpsim noise` output also the SNR panel
  convergence          accuracy per round, one panel per clients per round, one line per epsilon
bands are mean +- std over seeds; the format follows the --out suffix (.png, .svg, .pdf).
epsilon is the per-round local epsilon; cells whose epsilon_spent is inf (no guarantee: the
float32 sampler's floor) are ringed in red; accuracy panels draw the chance level 1/classes.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter

    p = subparsers.add_parser(
        "plot",
        help="draw a figure (accuracy vs epsilon/clients, noise vs clients, convergence) from a CSV",
        description="Draw one figure from a results CSV of `ldpsim sweep` (or `ldpsim run`) or a "
                    "noise CSV of `ldpsim noise`.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument("results", type=Path, help="results CSV")
    p.add_argument("--kind", required=True, choices=KINDS, help="which figure")
    p.add_argument("--out", type=Path, required=True, help="output file: .png, .svg or .pdf")
    p.add_argument("--metric", default="accuracy", help="y column for accuracy/convergence kinds (e.g. loss)")
    p.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                   help="keep only rows where COLUMN equals VALUE (repeatable)")
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--epsilon-axis", choices=("per-round", "total"), default="per-round",
                   help="x axis of accuracy-vs-epsilon: the per-round epsilon, or the total "
                        "epsilon_spent over the run (it differs across m at one per-round epsilon)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.cli._files import check_text_file
    from ldpsim._src.plots.figures import plot
    from ldpsim._src.plots.figures import FORMATS, load_results

    where = {}
    for item in args.where:
        column, sep, value = item.partition("=")
        if not sep or not column:
            raise LdpsimError(f"--where expects COLUMN=VALUE, got {item!r}")
        where[column.strip()] = value.strip()
    if args.out.suffix.lower() not in FORMATS:
        raise LdpsimError(f"--out must end in {', '.join(FORMATS)} (the format is taken from the "
                          f"suffix); got {str(args.out)!r}")
    text = check_text_file(args.results, "results file", "CSV")
    df = load_results(args.results)
    df, warning = incomplete_cells(args.results, text, df)
    if warning:
        print(f"ldpsim plot: warning: {warning}", file=sys.stderr)
    if where and "epsilon" in df.columns:
        import pandas as pd

        from ldpsim._src.plots.figures import _filter

        eps = pd.to_numeric(df["epsilon"], errors="coerce")
        kept = pd.to_numeric(_filter(df, where)["epsilon"], errors="coerce")
        if (eps == float("inf")).any() and not (kept == float("inf")).any():
            print("ldpsim plot: warning: --where " + " ".join(f"{k}={v}" for k, v in where.items())
                  + " leaves out every run without noise (epsilon inf, whose mechanism column "
                  "reads none): the figure has no non-private reference", file=sys.stderr)
    plot(df, args.kind, args.out, metric=args.metric, where=where, title=args.title,
         epsilon_axis=args.epsilon_axis)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _axes_of(key: str) -> dict[str, str]:
    return dict(part.partition("=")[::2] for part in str(key).split(";") if "=" in part)


def incomplete_cells(path: Path, text: str, df):
    """``(df, warning)``: the table without a line cut off mid-write, and one line naming the
    incomplete cells of a sweep CSV (None when complete).

    A cell is incomplete when its last round is short of the sweep's ``rounds`` (from the
    sweep record ``<stem>.sweep.json`` when there is one, else the largest round in the
    table) or when the record does not list it as finished (rows of an interrupted cell); the
    record's grid cells with no rows are counted too.
    """
    import json

    import pandas as pd

    from ldpsim._src.sweep.store import sidecar_path

    notes = []
    if text and not text.endswith("\n") and len(df):
        df = df.iloc[:-1]
        if df.empty:
            from ldpsim._src._checks import LdpsimError

            raise LdpsimError(f"results file {str(path)!r} has no complete rows (its only row is "
                              "cut off)")
        notes.append(f"its last line (row {len(df) + 1}) is cut off and left out")
    meta = None
    record = sidecar_path(path)
    if record.is_file():
        try:
            meta = json.loads(record.read_text())
        except (OSError, ValueError):
            notes.append(f"its sweep record {str(record)!r} is unreadable")
    if "cell" in df.columns and "round" in df.columns and len(df):
        rounds = pd.to_numeric(df["round"], errors="coerce")
        last = rounds.groupby(df["cell"]).max()
        config = (meta or {}).get("config") or {}
        base_rounds = (config.get("base") or {}).get("rounds")
        fallback = float(rounds.max())
        done = set((meta or {}).get("done", [])) if meta else None
        bad = []
        for cell, got in last.items():
            want = _axes_of(cell).get("rounds", base_rounds)
            try:
                want = float(want) if want is not None else fallback
            except ValueError:
                want = fallback
            if got < want:
                bad.append(f"{cell} (last round {got:g} of {want:g})")
            elif done is not None and cell not in done:
                bad.append(f"{cell} (not marked finished)")
        if bad:
            shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
            notes.append(f"{len(bad)} incomplete cell(s), drawn as they are: {shown}")
        grid = config.get("grid") or {}
        if grid:
            import math

            total = math.prod(len(v) for v in grid.values() if isinstance(v, list))
            missing = total - last.size
            if missing > 0:
                notes.append(f"{missing} of {total} grid cells have no rows yet")
    if not notes:
        return df, None
    return df, f"{str(path)!r}: " + "; ".join(notes)
