"""``ldpsim frontier``: error of the decoded mean of n unit vectors, every mechanism, vs ε; with
``--secagg``, of the distributed discrete mechanisms vs bits and ε."""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from ldpsim._src.privacy import registry

ORDER = 45

#: The CSV columns, in order.
COLUMNS = ("mechanism", "epsilon", "delta", "dim", "clients", "mse", "mse_se", "mse_theory",
           "lower_bound", "trials", "mse_theory_bias2", "ratio_to_bound", "inputs", "seed",
           "chunk", "seconds", "floats_sent", "projection_dim")
#: The columns of tables written by earlier versions: before ``floats_sent``, and before
#: ``projection_dim`` (ProjUnit's k). Such a file gains the missing columns (each row's from
#: the mechanism it ran: every earlier row ran the default k) when a run resumes it.
_EARLIER_COLUMNS = (COLUMNS[:-2], COLUMNS[:-1])
#: The columns that identify a cell (a finished cell with the same values is skipped).
KEY = ("mechanism", "epsilon", "delta", "dim", "clients", "trials", "inputs", "seed",
       "projection_dim")

_EPILOG = """\
examples:
  ldpsim frontier --out frontier.csv --plot frontier.png
  ldpsim frontier --mechanisms gaussian,duchi,privunitg --epsilon 0.5,1,2,4,8,16 \\
      --dims 100,61706 --clients 1,100,10000 --trials 3 --out frontier.csv --plot frontier.png

what it measures: every client holds a unit vector (--inputs common: one direction, drawn once
on the sphere; sphere: i.i.d. uniform per client), privatizes it with the mechanism at epsilon
(gaussian at --delta, replace neighbours, clip 1; laplace L1 clip sqrt(d); signds MindSpore's
defaults with sign_eps = epsilon, biased), the server averages the decoded reports;
mse = ||decoded mean - true mean||^2 averaged over --trials (mse_se its standard error);
mse_theory from the mechanism's exact variance (+ squared bias); floats_sent the scalars in
one client's message (the communication cost: d for additive noise, k + 1 and a seed for
ProjUnit, k = --projection-dim, one cell per value, default min(1000, d)); lower_bound = d/(n
min(eps, eps^2)), the ORDER of the minimax bound of Duchi, Jordan & Wainwright (2013/2018) with
constant 1 (the papers give no constant). Rerunning with the same --out skips finished cells.

--secagg: the distributed discrete Gaussian (ddg) and Skellam mechanisms under secure
aggregation, one round of n clients holding one common vector of norm --clip; for each bit-width
b the engine's plan (the finest granularity whose wrap bound is <= 1e-6, the least noise making
the round (epsilon, delta)-DP, replace neighbours); mse_theory the exact MSE of the decoded mean
(noise + conditional rounding; mse_wrap_bound bounds what the wrap adds), mse_continuous the
continuous distributed Gaussian at the same epsilon, bits_sent = b x padded dimension per
client; --trials T > 0 adds the Monte-Carlo of the real encode -> sum mod 2^b -> decode
pipeline (mse, mse_se, wrapped_fraction). A bit-width that cannot fit is refused (the message
names the least that fits) unless --skip-unfit. See docs/distributed_discrete.md.
  ldpsim frontier --secagg --dims 61706 --clients 1000 --bits 14,16,18,20 --epsilon 1,4,16 \\
      --out secagg.csv --plot secagg.png
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter

    p = subparsers.add_parser(
        "frontier",
        help="the mechanism frontier: MSE of the decoded mean vs epsilon for every randomizer",
        description="Measure the mean squared error of the decoded mean of n locally privatized "
                    "unit vectors for every vector randomizer, beside its exact theory and the "
                    "order of the minimax lower bound.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--mechanisms", "--mechanism", dest="mechanisms", default=None,
                   help="comma-separated randomizers (default: every vector randomizer; with "
                        "--secagg: ddg,skellam)")
    p.add_argument("--epsilon", default=None,
                   help="comma-separated epsilons (> 0; duchi <= 700); local epsilon (default "
                        "0.25,0.5,1,2,4,8,16), or with --secagg the round's central epsilon "
                        "(default 1,4,16)")
    p.add_argument("--dims", default=None,
                   help="comma-separated dimensions d (default 100,1000; --secagg: 1000)")
    p.add_argument("--clients", default=None,
                   help="comma-separated client counts n (default 1,100; --secagg: 100)")
    p.add_argument("--trials", type=int, default=None,
                   help="independent trials per cell (default 5; >= 2 for a standard error); "
                        "with --secagg the Monte-Carlo of the real pipeline (default 0: the "
                        "exact theory only)")
    p.add_argument("--delta", type=float, default=None, help="delta of the gaussian mechanism (default 1e-5)")
    p.add_argument("--inputs", choices=("common", "sphere"), default="common",
                   help="common: every client holds one direction; sphere: i.i.d. uniform directions")
    p.add_argument("--chunk-size", type=int, default=None, help="clients per chunk (default 2^20/d)")
    p.add_argument("--seed", type=int, default=0, help="root seed")
    p.add_argument("--out", type=Path, default=None,
                   help="CSV file, written row by row; finished cells are skipped on rerun "
                        "(default: print the table)")
    p.add_argument("--plot", type=Path, default=None, help="figure: MSE vs epsilon, one panel per (d, n)")
    p.add_argument("--projection-dim", default=None, metavar="K[,K...]",
                   help="comma-separated projection dimensions k of projunit and fastprojunit "
                        "(2 <= k <= d; one cell per k; default: each one's, min(1000, d))")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    g = p.add_argument_group("secure aggregation (--secagg)")
    g.add_argument("--secagg", action="store_true",
                   help="the distributed discrete mechanisms under secure aggregation (ddg, "
                        "skellam): MSE of the decoded mean vs bits and the round's epsilon, "
                        "beside the continuous distributed Gaussian")
    g.add_argument("--bits", default=None,
                   help="comma-separated bit-widths b of the modular sum, 2 to 32 (default "
                        "12,14,16,18,20)")
    g.add_argument("--clip", type=float, default=None,
                   help="L2 clip C; every client holds one common vector of norm C (default 1)")
    g.add_argument("--skip-unfit", action="store_true",
                   help="leave out the cells whose bits cannot fit (default: refuse them)")
    p.set_defaults(handler=run)


def _parse(text: str, what: str, convert, kind: str = "number"):
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.sweep.config import parse_list

    try:
        items = parse_list(text)
    except LdpsimError as err:
        raise LdpsimError(f"--{what} {text!r}: {err}") from None
    out = []
    for t in items:
        try:
            out.append(convert(t))
        except ValueError:
            raise LdpsimError(f"--{what}: {t!r} is not a {kind}") from None
    return list(dict.fromkeys(out))


def _int(text: str) -> int:
    v = float(text)
    if not math.isfinite(v) or v != int(v):
        raise ValueError(text)
    return int(v)


def _cell_key(row) -> tuple:
    """A row's cell. Its δ is the configured one for the randomizers that read ``--delta`` and
    0 for the pure ones, whose ``delta`` column is the float sampler's realised δ instead."""
    k, name = row.get("projection_dim"), str(row["mechanism"])
    reads_delta = name in registry.randomizer_names() and registry.randomizer(name).uses("delta")
    return (name, float(row["epsilon"]), float(row["delta"]) if reads_delta else 0.0, int(row["dim"]),
            int(row["clients"]), int(row["trials"]), str(row["inputs"]), int(row["seed"]),
            None if k in (None, "") else int(float(k)))


def _finished(path: Path) -> set:
    """The cell keys already in ``path`` (empty if it is missing or empty). A table of an
    earlier version's columns is rewritten with the missing ones first (:func:`_add_columns`)."""
    from ldpsim._src._checks import LdpsimError

    if not path.exists() or path.stat().st_size == 0:
        return set()
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    if fields in [list(c) for c in _EARLIER_COLUMNS]:
        rows = _add_columns(path, rows)
    elif fields != list(COLUMNS):
        raise LdpsimError(f"--out {str(path)!r} exists with other columns than a frontier "
                          "table; give a new file")
    return {_cell_key(r) for r in rows if r.get("mse") not in (None, "")}


def _add_columns(path: Path, rows: list[dict]) -> list[dict]:
    """Rewrite a frontier table of an earlier version's columns with the missing ones:
    ``floats_sent`` and ``projection_dim`` from the mechanism each row ran (rebuilt from its
    name, ε, d and, for the randomizers that read it, δ; ProjUnit at its default k), so that
    appended rows line up. The file is replaced atomically."""
    from ldpsim._src._atomic import atomic_open
    from ldpsim._src.privacy.analysis import frontier as fr

    for r in rows:
        m = r["mechanism"]
        if "floats_sent" in r and "projection_dim" not in r and m not in fr.projection_dim_users():
            r["projection_dim"] = ""
            continue
        kw = {"delta": float(r["delta"])} if registry.randomizer(m).uses("delta") else {}
        mech = fr.build_mechanism(m, epsilon=float(r["epsilon"]), dim=int(r["dim"]), **kw)
        r.setdefault("floats_sent", fr.message_size(mech, int(r["dim"])))
        k = fr.projection_dim_of(mech, m)
        r["projection_dim"] = "" if k is None else k
    with atomic_open(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return rows


_LDP_DEFAULTS = dict(epsilon="0.25,0.5,1,2,4,8,16", dims="100,1000", clients="1,100", trials=5)
_SECAGG_DEFAULTS = dict(mechanisms="ddg,skellam", epsilon="1,4,16", dims="1000", clients="100",
                        trials=0, bits="12,14,16,18,20", clip=1.0)


def run(args: argparse.Namespace) -> int:
    defaults = _SECAGG_DEFAULTS if args.secagg else dict(
        _LDP_DEFAULTS, mechanisms=",".join(registry.randomizer_names(frontier=True)))
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    from ldpsim._src._checks import LdpsimError

    if args.secagg:
        if args.projection_dim is not None:
            raise LdpsimError("--projection-dim is ProjUnit's k, a local randomizer's setting; "
                              "--secagg compares ddg and skellam")
        return _run_secagg(args)
    for flag, value in (("--bits", args.bits), ("--clip", args.clip)):
        if value is not None:
            raise LdpsimError(f"{flag} applies to --secagg only (the local randomizers' "
                              "frontier uses unit vectors and clip 1)")
    if args.skip_unfit:
        raise LdpsimError("--skip-unfit applies to --secagg only")
    return _run_ldp(args)


def _run_ldp(args: argparse.Namespace) -> int:
    from ldpsim._src._checks import LdpsimError, check_open_unit, check_positive_int
    from ldpsim._src.cli._parsing import check_seed
    from ldpsim._src.plots.figures import FORMATS
    from ldpsim._src.privacy.analysis import frontier as fr

    mechanisms = _parse(args.mechanisms, "mechanisms", str)
    for m in mechanisms:
        if m not in registry.randomizer_names(frontier=True):
            raise LdpsimError(f"--mechanisms: unknown mechanism {m!r}; choose from "
                              f"{', '.join(registry.randomizer_names(frontier=True))}")
    epsilons = _parse(args.epsilon, "epsilon", float)
    for e in epsilons:
        if not (e > 0 and math.isfinite(e)):
            raise LdpsimError(f"--epsilon must be > 0 and finite; got {e!r}")
    dims = [check_positive_int("--dims", d) for d in _parse(args.dims, "dims", _int, "whole number")]
    clients = [check_positive_int("--clients", n) for n in _parse(args.clients, "clients", _int, "whole number")]
    trials = check_positive_int("--trials", args.trials)
    delta = fr.DEFAULT_DELTA if args.delta is None else check_open_unit("--delta", args.delta)
    if args.chunk_size is not None:
        check_positive_int("--chunk-size", args.chunk_size)
    check_seed(args.seed)
    if args.plot is not None and args.plot.suffix.lower() not in FORMATS:
        raise LdpsimError(f"--plot must end in {', '.join(FORMATS)}; got {str(args.plot)!r}")
    users = fr.projection_dim_users()
    ks = None
    if args.projection_dim is not None:
        ks = [check_positive_int("--projection-dim", k)
              for k in _parse(args.projection_dim, "projection-dim", _int, "whole number")]
        if not set(mechanisms) & set(users):
            raise LdpsimError(f"--projection-dim is the k of {' and '.join(users)}; "
                              f"--mechanisms {','.join(mechanisms)} has neither")

    # Calibrate every (mechanism, k, epsilon, d) first: a value out of a mechanism's range or
    # a dimension too small for it fails here, in one line, before any work.
    cells = []
    for d in dims:
        for m in mechanisms:
            for k in (ks if ks is not None and m in users else [None]):
                for e in epsilons:
                    try:
                        mech = fr.build_mechanism(m, epsilon=e, dim=d, delta=delta, projection_dim=k)
                    except LdpsimError as err:
                        at = f", k {k}" if k is not None else ""
                        raise LdpsimError(f"{m} at epsilon {e:g}, dim {d}{at}: {err}") from None
                    cells += [dict(mechanism=m, epsilon=e, dim=d, clients=n,
                                   projection_dim=fr.projection_dim_of(mech, m)) for n in clients]
    done = _finished(args.out) if args.out is not None else set()

    def key_of(cell) -> tuple:
        dl = delta if registry.randomizer(cell["mechanism"]).uses("delta") else 0.0
        return (cell["mechanism"], float(cell["epsilon"]), float(dl), int(cell["dim"]),
                int(cell["clients"]), trials, args.inputs, args.seed, cell["projection_dim"])

    total = len(cells)
    todo = total - sum(1 for c in cells if key_of(c) in done)
    if done:
        print(f"ldpsim frontier: {total - todo} of {total} cells already in {args.out}; "
              f"running {todo}", file=sys.stderr)
    bar = None
    if not args.no_progress and todo:
        from ldpsim._src._progress import progress_bar

        bar = progress_bar(total=todo, desc="cells", unit="cell")
    out_file = writer = None
    if args.out is not None:
        fresh = not args.out.exists() or args.out.stat().st_size == 0
        out_file = open(args.out, "a", newline="")
        writer = csv.DictWriter(out_file, fieldnames=COLUMNS)
        if fresh:
            writer.writeheader()
            out_file.flush()
    rows = []

    def on_row(row) -> None:
        rows.append(row.as_dict())
        if writer is not None:
            writer.writerow(row.as_dict())
            out_file.flush()
        if bar is not None:
            k = "" if row.projection_dim is None else f" k={row.projection_dim}"
            bar.set_postfix_str(f"{row.mechanism}{k} eps={row.epsilon:g} d={row.dim} n={row.clients}")
            bar.update()

    try:
        fr.frontier(mechanisms, epsilons, dims, clients, trials=trials, delta=delta,
                    seed=args.seed, inputs=args.inputs, chunk=args.chunk_size,
                    skip=lambda cell: key_of(cell) in done, on_row=on_row, projection_dims=ks)
    finally:
        if bar is not None:
            bar.close()
        if out_file is not None:
            out_file.close()
    if args.out is None:
        _print_table(rows)
    else:
        print(f"wrote {args.out} ({len(rows)} new rows)")
    if args.plot is not None:
        import pandas as pd

        from ldpsim._src.plots.frontier import plot_frontier

        table = pd.read_csv(args.out) if args.out is not None else pd.DataFrame(rows)
        ran_k = {c["projection_dim"] for c in cells if c["projection_dim"] is not None}
        keep = table["mechanism"].isin(mechanisms) & table["dim"].isin(dims) \
            & table["clients"].isin(clients) \
            & (table["projection_dim"].isna() | table["projection_dim"].isin(ran_k))
        plot_frontier(table[keep], args.plot)
        print(f"wrote {args.plot}")
    return 0


def _print_table(rows) -> None:
    cols = ("mechanism", "epsilon", "dim", "clients", "mse", "mse_se", "mse_theory", "lower_bound")
    if any(r.get("projection_dim") is not None for r in rows):
        cols = cols[:1] + ("projection_dim",) + cols[1:]
    print("  ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>12.4g}" if isinstance(r[c], float) else f"{r[c]!s:>12}"
                        for c in cols))


def _finished_secagg(path: Path, columns) -> set:
    from ldpsim._src._checks import LdpsimError

    if not path.exists() or path.stat().st_size == 0:
        return set()
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or list(reader.fieldnames) != list(columns):
            raise LdpsimError(f"--out {str(path)!r} exists with other columns than a --secagg "
                              "frontier table; give a new file")
        return {_secagg_key(r) for r in reader if r.get("mse_theory") not in (None, "")}


def _secagg_key(row) -> tuple:
    return (str(row["mechanism"]), int(row["bits"]), float(row["epsilon"]), float(row["delta"]),
            int(row["dim"]), int(row["clients"]), float(row["clip"]), int(row["trials"]),
            int(row["seed"]))


def _run_secagg(args: argparse.Namespace) -> int:
    """``--secagg``: the distributed discrete mechanisms' frontier
    (:mod:`ldpsim._src.privacy.analysis.discrete_frontier`)."""
    from ldpsim._src._checks import LdpsimError, check_open_unit, check_positive, \
        check_positive_int
    from ldpsim._src.cli._parsing import check_seed
    from ldpsim._src.plots.figures import FORMATS
    from ldpsim._src.privacy.analysis import discrete_frontier as dfr

    mechanisms = _parse(args.mechanisms, "mechanisms", str)
    for m in mechanisms:
        if m not in dfr.MECHANISMS:
            raise LdpsimError(f"--mechanisms: {m!r} is not a secure-aggregation mechanism; "
                              f"with --secagg choose from {', '.join(dfr.MECHANISMS)}")
    bits = _parse(args.bits, "bits", _int, "whole number")
    for b in bits:
        if not 2 <= b <= 32:
            raise LdpsimError(f"--bits must be whole numbers in [2, 32]; got {b}")
    epsilons = _parse(args.epsilon, "epsilon", float)
    for e in epsilons:
        if not (e > 0 and math.isfinite(e)):
            raise LdpsimError(f"--epsilon must be > 0 and finite; got {e!r}")
    dims = [check_positive_int("--dims", d) for d in _parse(args.dims, "dims", _int, "whole number")]
    clients = [check_positive_int("--clients", n)
               for n in _parse(args.clients, "clients", _int, "whole number")]
    if args.trials < 0:
        raise LdpsimError(f"--trials must be >= 0 with --secagg; got {args.trials}")
    clip = check_positive("--clip", args.clip)
    delta = 1e-5 if args.delta is None else check_open_unit("--delta", args.delta)
    if args.chunk_size is not None:
        check_positive_int("--chunk-size", args.chunk_size)
    if args.inputs != "common":
        raise LdpsimError("--secagg measures the common input only (every client holds C·u)")
    check_seed(args.seed)
    if args.plot is not None and args.plot.suffix.lower() not in FORMATS:
        raise LdpsimError(f"--plot must end in {', '.join(FORMATS)}; got {str(args.plot)!r}")
    done = _finished_secagg(args.out, dfr.COLUMNS) if args.out is not None else set()

    def key_of(cell) -> tuple:
        return (cell["mechanism"], int(cell["bits"]), float(cell["epsilon"]), float(delta),
                int(cell["dim"]), int(cell["clients"]), float(clip), int(args.trials),
                int(args.seed))

    sink: dict = {}

    def on_row(row) -> None:   # the file is opened at the first row: a refused grid writes none
        rows.append(row.as_dict())
        if args.out is not None:
            if not sink:
                fresh = not args.out.exists() or args.out.stat().st_size == 0
                sink["file"] = open(args.out, "a", newline="")
                sink["writer"] = csv.DictWriter(sink["file"], fieldnames=dfr.COLUMNS)
                if fresh:
                    sink["writer"].writeheader()
            sink["writer"].writerow(row.as_dict())
            sink["file"].flush()
        if not args.no_progress:
            print(f"  {row.mechanism} b={row.bits} eps={row.epsilon:g} d={row.dim} "
                  f"n={row.clients}: mse_theory {row.mse_theory:.4g} ({row.seconds:.1f} s)",
                  file=sys.stderr, flush=True)

    rows: list = []

    def on_unfit(msg: str) -> None:
        print(f"ldpsim frontier: skipped: {msg}", file=sys.stderr)

    try:
        dfr.discrete_frontier(mechanisms, bits, epsilons, dims, clients, clip=clip, delta=delta,
                              trials=args.trials, seed=args.seed, chunk=args.chunk_size,
                              skip_unfit=args.skip_unfit, on_unfit=on_unfit,
                              skip=lambda cell: key_of(cell) in done, on_row=on_row)
    except LdpsimError as err:
        if "cannot fit" in str(err):
            raise LdpsimError(f"{err.args[0].replace('or skip_unfit', 'or --skip-unfit')}") \
                from None
        raise
    finally:
        if sink:
            sink["file"].close()
    if args.out is None:
        _print_secagg_table(rows)
    else:
        print(f"wrote {args.out} ({len(rows)} new rows)")
    if args.plot is not None:
        import pandas as pd

        from ldpsim._src.plots.discrete_frontier import plot_discrete_frontier

        table = pd.read_csv(args.out) if args.out is not None else pd.DataFrame(rows)
        keep = table["mechanism"].isin(mechanisms) & table["dim"].isin(dims) \
            & table["clients"].isin(clients) & table["bits"].isin(bits) \
            & table["epsilon"].isin(epsilons)
        plot_discrete_frontier(table[keep], args.plot)
        print(f"wrote {args.plot}")
    return 0


def _print_secagg_table(rows) -> None:
    cols = ("mechanism", "bits", "epsilon", "dim", "clients", "mse_theory", "mse_rounding",
            "mse_continuous", "ratio_to_continuous", "wrap_probability", "bits_sent", "mse",
            "mse_se")
    print("  ".join(f"{c:>13}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>13.4g}" if isinstance(r[c], float) else f"{r[c]!s:>13}"
                        for c in cols))
