"""``ldpsim attack``: gradient inversion (DLG / iDLG) against privatized client updates."""

from __future__ import annotations

import argparse
import math
import sys

ORDER = 16

_EPILOG = """\
examples:
  ldpsim attack --model mlp --trials 2 --out attack.csv --plot attack.png
  ldpsim attack --mechanism gaussian,laplace --examples 1,4 --clients 1,10,100 --trials 3
  ldpsim attack --epsilons inf,1000,10 --method dlg --optimizer adam --steps 500

what it does: for each trial (seed), n clients each take B MNIST training examples, compute
the gradient of their mean cross-entropy at a freshly initialised model, and privatize it
with ldpsim's local randomizer calibrated for epsilon (clip C, delta, replace-one
neighbours); the server sees the sum of the n releases and reconstructs client 0's
examples by gradient matching (iDLG: labels from the output layer's gradient first; DLG:
labels optimised jointly), minimised by L-BFGS or Adam. Reconstructions are matched to the
true examples (Hungarian, by PSNR) and scored by PSNR, SSIM and the label recovery rate.
One CSV row per attacked client; the figure shows each epsilon's reconstructions of the
first trial. Keys depend on the seed only, so every epsilon sees the same data and noise
draws (scaled by its noise scale): results at different epsilons of one seed are
correlated (at large noise iDLG's labels are the same chance guess at every epsilon), so
compare means over several --trials.

CSV columns (one row per trial and cell):
  model, method, optimizer, steps   the attacked model and the inversion settings
  mechanism, epsilon, delta, neighbours, clip, noise_scale
                                    the local randomizer (noise_scale: its sigma or b; 0 at
                                    epsilon = inf)
  examples, clients, seed           B examples per client, n clients summed, the trial's seed
  psnr, ssim                        of client 0's reconstructions against its true examples
                                    (matched one to one by PSNR; dB and [-1, 1])
  label_acc                         fraction of client 0's labels recovered (chance: 1/classes
                                    for B = 1)
  match_loss                        the gradient-matching loss the inversion reached
  release_norm                      L2 norm of what the server saw (the sum of n releases)
  seconds                           wall time per trial of the cell (the cell's average)
  psnr_any, ssim_any                best score of each reconstruction against ANY of the n*B
                                    summed examples (with n > 1 the attack may recover
                                    another client's example)
"""


def _floats(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if part in ("inf", "infinity", "∞"):
            out.append(math.inf)
            continue
        try:
            out.append(float(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {part!r}") from None
    return out


def _ints(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None


def _names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter

    p = subparsers.add_parser(
        "attack",
        help="gradient inversion (DLG/iDLG) of privatized client updates against epsilon",
        description="Reconstruct clients' training images from their privatized updates "
                    "(DLG, iDLG) and measure PSNR, SSIM and label recovery against epsilon.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--dataset", choices=("mnist", "fashion_mnist"), default="mnist",
                   help="image dataset the clients' examples come from (default mnist)")
    p.add_argument("--data-dir", default=None, help="data folder (default $LDPSIM_DATA_DIR)")
    p.add_argument("--model", choices=("lenet5", "mlp", "logreg"), default="lenet5",
                   help="attacked model (default lenet5)")
    p.add_argument("--epsilons", "--epsilon", dest="epsilons", type=_floats, default=None,
                   help="comma-separated epsilon grid, inf allowed (default inf,1000,100,50,10,1)")
    p.add_argument("--mechanism", "--mechanisms", dest="mechanism", type=_names, default=["gaussian"],
                   help="comma-separated local randomizers of ldpsim's registry (default "
                        "gaussian; also laplace, and the report randomizers privunit2, "
                        "privunitg, duchi, whose reports the server decodes)")
    p.add_argument("--examples", type=_ints, default=[1],
                   help="comma-separated examples per client B, each 1..8 (default 1)")
    p.add_argument("--clients", type=_ints, default=[1],
                   help="comma-separated numbers n of clients whose releases are summed (default 1)")
    p.add_argument("--trials", type=int, default=3, help="trials (seeds) per cell (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (trials use seed..seed+trials-1)")
    p.add_argument("--method", choices=("idlg", "dlg"), default="idlg", help="default idlg")
    p.add_argument("--optimizer", choices=("lbfgs", "adam"), default="lbfgs", help="default lbfgs")
    p.add_argument("--steps", type=int, default=100, help="optimiser steps (default 100)")
    p.add_argument("--lr", type=float, default=None,
                   help="Adam's learning rate (default 0.1; --optimizer adam only: L-BFGS uses "
                        "its line search)")
    p.add_argument("--clip", type=float, default=1.0, help="clip bound C (default 1)")
    p.add_argument("--delta", type=float, default=None,
                   help="delta of the (eps, delta) mechanisms, gaussian (default 1e-5; the pure "
                        "ones' delta column is their float sampler's realised delta)")
    p.add_argument("--neighbours", choices=("replace", "add-remove"), default="replace",
                   help="neighbouring relation the noise is calibrated for (default replace)")
    p.add_argument("--out", default="attack.csv", help="tidy CSV, ends in .csv (default attack.csv)")
    p.add_argument("--plot", default=None,
                   help="figure of example reconstructions per epsilon (.png, .svg or .pdf)")
    p.add_argument("--no-progress", action="store_true", help="no per-cell progress lines")
    p.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    from ldpsim._src._checks import (LdpsimError, check_open_unit, check_positive,
                                     check_positive_int)

    from pathlib import Path

    from ldpsim._src.plots.figures import FORMATS

    check_positive_int("trials", args.trials)
    check_positive_int("steps", args.steps)
    if args.lr is not None:
        if args.optimizer != "adam":
            raise LdpsimError(f"--lr is Adam's learning rate; --optimizer {args.optimizer} uses "
                              "its line search: remove --lr or pass --optimizer adam")
        check_positive("lr", args.lr)
    check_positive("clip", args.clip)
    if args.delta is not None:
        check_open_unit("delta", args.delta)
    if Path(args.out).suffix.lower() != ".csv":
        raise LdpsimError(f"--out must end in .csv; got {args.out!r}")
    if args.plot is not None and Path(args.plot).suffix.lower() not in FORMATS:
        raise LdpsimError(f"--plot must end in {', '.join(FORMATS)} (the format is taken from "
                          f"the suffix); got {args.plot!r}")
    if args.seed < 0:
        raise LdpsimError(f"seed must be >= 0; got {args.seed}")
    for e in args.epsilons:
        check_positive("epsilon", e, allow_inf=True)
    for b in args.examples:
        if not 1 <= b <= 8:
            raise LdpsimError(f"examples per client must be in 1..8; got {b}")
    for n in args.clients:
        check_positive_int("clients", n)
    if not args.mechanism:
        raise LdpsimError("--mechanism is empty")
    from ldpsim._src.attacks._experiment import attack_mechanisms

    known = attack_mechanisms()
    for m in args.mechanism:
        if m not in known:
            raise LdpsimError(f"unknown mechanism {m!r}; one of {', '.join(known)}")
    from ldpsim._src.privacy import registry

    readers = [m for m in known if registry.randomizer(m).uses("delta")]
    if args.delta is not None and not set(args.mechanism) & set(readers):
        raise LdpsimError(f"--delta applies to {', '.join(readers)} only (the others are pure "
                          f"epsilon-LDP); --mechanism {','.join(args.mechanism)} does not read it")


def run(args: argparse.Namespace) -> int:
    import csv
    import time

    from ldpsim._src.attacks._experiment import COLUMNS, DEFAULT_EPSILONS, run_grid
    from ldpsim._src.attacks._inversion import InversionConfig

    if args.epsilons is None:
        args.epsilons = list(DEFAULT_EPSILONS)
    _check(args)
    lr = 0.1 if args.lr is None else args.lr
    delta = 1e-5 if args.delta is None else args.delta
    from ldpsim._src.data.registry import load_dataset
    from ldpsim._src.models import get_model

    ds = load_dataset(args.dataset, args.data_dir)
    model = get_model(args.model, input_shape=ds.input_shape, num_classes=ds.num_classes)
    config = InversionConfig(method=args.method, optimizer=args.optimizer, steps=args.steps,
                             learning_rate=lr)
    seeds = list(range(args.seed, args.seed + args.trials))
    t0 = time.perf_counter()
    from ldpsim._src import _interrupt

    out = open(args.out, "w", newline="")
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    saved = {"rows": 0}

    def note() -> None:
        _interrupt.note(f"{saved['rows']} rows of finished trials saved in {args.out} (no "
                        "figure); a rerun starts again")

    note()

    cell_rows: list[dict] = []

    def on_row(row: dict) -> None:
        with _interrupt.critical():
            writer.writerow(row)
            out.flush()
            saved["rows"] += 1
        note()
        cell_rows.append(row)
        if row["seed"] != seeds[-1]:
            return
        if not args.no_progress:   # means over the cell's trials, with the labels' chance
            k = len(cell_rows)
            mean = {c: sum(float(r[c]) for r in cell_rows) / k
                    for c in ("psnr", "ssim", "label_acc")}
            print(f"[{time.perf_counter() - t0:7.1f}s] {row['mechanism']} eps={row['epsilon']:g} "
                  f"B={row['examples']} n={row['clients']}: mean over {k} trial(s) psnr "
                  f"{mean['psnr']:.1f} dB, ssim {mean['ssim']:.3f}, labels "
                  f"{mean['label_acc']:.2f} (chance {1 / model.num_classes:.2f})",
                  file=sys.stderr, flush=True)
        cell_rows.clear()

    def on_skip(msg: str) -> None:
        print(f"ldpsim attack: skipped {msg}", file=sys.stderr, flush=True)

    with out:
        _, kept = run_grid(ds.x_train, ds.y_train, model=model, epsilons=args.epsilons,
                           mechanisms=args.mechanism, examples=args.examples,
                           clients=args.clients, seeds=seeds, delta=delta, clip=args.clip,
                           neighbours=args.neighbours, config=config, on_row=on_row,
                           on_skip=on_skip,
                           keep=(lambda r: r["seed"] == seeds[0]) if args.plot else None)
    print(f"wrote {args.out}", file=sys.stderr)
    if args.plot:
        from ldpsim._src.attacks._figure import reconstruction_figure

        reconstruction_figure(kept, args.plot, title=f"{args.method.upper()} on {args.model}, "
                                                     f"clip {args.clip:g}")
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0
