"""Print seed 000's verdict at convergence (Markdown) from the committed result CSVs.

    python experiments/seed000_table.py              # experiments/results/seed000_converged_*.csv
    python experiments/seed000_table.py --method pld # dp_accounting's PLD instead (minutes)

The pieces ``seed000_converged_<piece>.csv`` (one per ``ldpsim sweep`` invocation of the
grid, experiments/README.md) are joined by :func:`ldpsim.sweep.concat_results`; the tables
are :func:`ldpsim.sweep.accuracy_verdict`'s, printed by :func:`ldpsim.sweep.verdict_markdown`:
final accuracy with t-intervals over seeds, the gap to non-private paired by seed, the
smallest m within a point of non-private (by the gap's mean and by its interval's lower
end) and each setting's total ε over the rounds beside the runs' own ``epsilon_spent``.
No training. The total ε composes Gaussians, which is exact in closed form (``analytic``: k
releases of multiplier z are one of z/√k, Balle & Wang 2018, Thm. 8): a few seconds in all.
``--method pld`` asks dp_accounting's privacy-loss distribution instead, an upper bound
that agrees to the printed digits but takes minutes (measured 3 min 10 s on 2 shared cores:
10 million privacy-loss evaluations to discretise a Gaussian of multiplier ~0.5).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ldpsim._src._checks import LdpsimError
from ldpsim.sweep import accuracy_verdict, concat_results, verdict_markdown

HERE = Path(__file__).resolve().parent


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python experiments/seed000_table.py",
                                description="Print seed 000's converged verdict (Markdown tables) "
                                            "from the committed result CSVs.")
    p.add_argument("--results", type=Path, default=HERE / "results",
                   help="folder of the result CSVs (default: experiments/results/)")
    p.add_argument("--pattern", default="seed000_converged_*.csv",
                   help="glob of the grid's pieces in --results (default: %(default)s)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default: 0.95)")
    p.add_argument("--tolerance", type=float, default=0.01,
                   help="'within' means at most this far below non-private (default: 0.01 = 1 point)")
    p.add_argument("--method", choices=("analytic", "pld"), default="analytic",
                   help="composition of the total ε over rounds: analytic (exact for Gaussians, "
                        "seconds; default) or pld (dp_accounting, minutes)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    paths = sorted(p for p in args.results.glob(args.pattern) if p.is_file())
    if not paths:
        print(f"seed000_table: no {args.pattern} in {args.results}: nothing to tabulate", file=sys.stderr)
        return 2
    try:
        verdict = accuracy_verdict(concat_results(paths), confidence=args.confidence,
                                   tolerance=args.tolerance, method=args.method)
    except LdpsimError as err:
        print(f"seed000_table: {err}", file=sys.stderr)
        return 2
    print(f"From {', '.join(p.name for p in paths)}.\n")
    print(verdict_markdown(verdict), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
