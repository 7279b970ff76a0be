"""``ldpsim noise``: how much local DP noise survives averaging over n clients (no training)."""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from ldpsim._src import _interrupt

ORDER = 40

#: The CSV columns, in order (extra columns follow them).
COLUMNS = ("clients", "epsilon", "delta", "clip", "sensitivity", "sigma", "dim", "trials",
           "noise_norm_mean", "noise_norm_std", "noise_norm_theory", "snr_aligned", "snr_random", "cosine")
EXTRA = ("mechanism", "neighbours", "calibration", "noise_scale", "n_eff", "method", "noise_norm_sd_theory",
         "coord_std", "coord_std_theory", "snr_aligned_theory", "snr_random_theory", "cosine_theory",
         "cosine_random", "seed")
#: Input shape and classes used to count a named model's parameters.
MODEL_INPUTS = {"lenet5": ((28, 28, 1), 10), "mlp": ((28, 28, 1), 10), "logreg": ((28, 28, 1), 10)}

_EPILOG = """\
examples:
  ldpsim noise --model lenet5 --epsilon 50 --delta 0.01 --clip 1 --neighbours add-remove \\
      --clients 1,10,100,1000,10000,100000,1000000 --trials 10 --out noise.csv --plot noise.png
  ldpsim noise --dim 20000 --epsilon 1 --delta 1e-5 --clip 1 --clients 10,100,1000 --draw per-client

what it does: every client's noise is drawn for real (d coordinates each, in chunks of clients so
memory stays O(chunk x d)), averaged, and compared with theory: E||mean noise|| = c_d sigma/sqrt(n)
~ sigma sqrt(d/n). snr_aligned: every client sends the same update of norm C; snr_random: clients
send independent random directions of norm C; cosine: between the noisy and the clean mean
(aligned case). --draw auto draws per client while n*d <= 2^27 per trial and samples the mean
from its exact distribution above that (column `method`).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter

    p = subparsers.add_parser(
        "noise",
        help="measure how local DP noise cancels when averaging n clients (no training)",
        description="Draw real per-client local-DP noise for a model of dimension d, average it over "
                    "n clients, and compare the aggregated noise and SNR with theory.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--dim", type=int, help="update dimension d")
    size.add_argument("--model", choices=sorted(MODEL_INPUTS),
                      help="take d from a model's parameter count (MNIST-shaped input, 10 classes)")
    p.add_argument("--clip", type=float, default=1.0, help="clip bound C (L2 for gaussian, L1 for laplace)")
    p.add_argument("--epsilon", type=float, required=True, help="per-round local epsilon (finite)")
    p.add_argument("--delta", type=float, default=None, help="delta (gaussian only; default 1e-5)")
    p.add_argument("--mechanism", choices=("gaussian", "laplace"), default="gaussian", help="local randomizer")
    p.add_argument("--neighbours", choices=("replace", "add-remove"), default="replace",
                   help="replace: sensitivity 2C (default); add-remove: C (MindSpore)")
    p.add_argument("--calibration", choices=("analytic", "classic", "mindspore"), default=None,
                   help="gaussian sigma calibration (default analytic)")
    p.add_argument("--clients", default="1,10,100,1000,10000",
                   help="comma-separated client counts n (up to 10^6 and beyond)")
    p.add_argument("--trials", type=int, default=10,
                   help="independent trials per n (noise_norm_std needs >= 2; one trial leaves it NaN, "
                        "e.g. for n = 10^6 with --draw per-client)")
    p.add_argument("--draw", choices=("auto", "per-client", "aggregate"), default="auto",
                   help="per-client: draw every client's noise; aggregate: draw the mean from its exact "
                        "distribution; auto: per-client while n*d <= 2^27")
    p.add_argument("--chunk-size", type=int, default=None, help="clients per chunk (default 2^22/d)")
    p.add_argument("--seed", type=int, default=0, help="root seed")
    p.add_argument("--out", type=Path, default=None, help="CSV file (default: print the table)")
    p.add_argument("--plot", type=Path, default=None, help="also draw noise-vs-clients (.png/.svg/.pdf)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--no-memory-check", action="store_true",
                   help="run even when the memory estimate exceeds this host's memory")
    p.set_defaults(handler=run)


def model_dim(name: str) -> int:
    """Parameter count of a named model (shapes only; nothing is computed)."""
    import jax
    import jax.numpy as jnp

    from ldpsim._src.models import get_model

    input_shape, classes = MODEL_INPUTS[name]
    model = get_model(name, input_shape=input_shape, num_classes=classes)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, *input_shape), jnp.float32))
    return int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(shapes)))


def run(args: argparse.Namespace) -> int:
    from ldpsim._src._checks import LdpsimError, check_positive, check_positive_int
    from ldpsim._src.cli._guards import check_noise_args
    from ldpsim._src.cli._parsing import check_seed
    from ldpsim._src.plots.figures import FORMATS
    from ldpsim._src.sweep.config import parse_list

    epsilon = check_positive("epsilon", args.epsilon)  # inf is refused: no noise to study
    try:
        clients = [check_positive_int("clients", c) for c in parse_list(args.clients)]
    except LdpsimError as err:
        raise LdpsimError(f"--clients {args.clients!r}: {err}") from None
    trials = check_positive_int("trials", args.trials)
    check_seed(args.seed)
    if args.mechanism == "laplace":  # pure epsilon-DP, one calibration (b = sensitivity/epsilon)
        for dest in ("delta", "calibration"):
            if getattr(args, dest) is not None:
                raise LdpsimError(f"--{dest} does not apply to --mechanism laplace (pure "
                                  "epsilon-DP, b = sensitivity/epsilon); remove it")
    if args.draw == "aggregate" and args.chunk_size is not None:
        raise LdpsimError("--chunk-size does not apply to --draw aggregate (the mean is drawn "
                          "at once, no chunks of clients); remove it")
    if args.plot is not None and args.plot.suffix.lower() not in FORMATS:
        raise LdpsimError(f"--plot must end in {', '.join(FORMATS)} (the format is taken from "
                          f"the suffix); got {str(args.plot)!r}")
    if args.dim is not None:
        check_noise_args(args, clients, check_positive_int("dim", args.dim))

    import jax

    from ldpsim._src.privacy.analysis.averaging import noise_study
    from ldpsim._src.privacy.noise.calibration import calibrate

    delta = args.delta if args.delta is not None else (1e-5 if args.mechanism == "gaussian" else None)
    cal = calibrate(args.mechanism, epsilon=epsilon, delta=delta, clip=args.clip,
                    method=args.calibration, neighbours=args.neighbours)
    if args.dim is not None:
        dim = args.dim
    else:
        dim = model_dim(args.model)
        check_noise_args(args, clients, dim)
    scale = cal.sigma if cal.mechanism == "gaussian" else cal.scale
    _interrupt.note("nothing was saved: noise writes its table once every trial has run; run "
                    "the command again (fewer --trials or --clients for a shorter one)")
    bar = None
    if not args.no_progress:
        from ldpsim._src._progress import progress_bar

        bar = progress_bar(total=len(clients) * trials, desc="trials", unit="trial")
    try:
        rows = noise_study(jax.random.key(args.seed), clients=clients, dim=dim, noise_scale=scale,
                           clip=cal.clip, mechanism=cal.mechanism, trials=trials, method=args.draw,
                           chunk_size=args.chunk_size, progress=bar.update if bar else None)
    finally:
        if bar is not None:
            bar.close()
    fixed = {"epsilon": cal.epsilon, "delta": cal.delta, "clip": cal.clip, "sensitivity": cal.sensitivity,
             "mechanism": cal.mechanism, "neighbours": cal.neighbours, "calibration": cal.method, "seed": args.seed}
    table = [{**fixed, **row} for row in rows]
    with _interrupt.critical():  # SIGINT/SIGTERM wait: the table is written whole
        _write(table, args.out)
    if args.plot is not None:
        import pandas as pd

        from ldpsim._src.plots.figures import plot

        plot(pd.DataFrame(table), "noise-vs-clients", args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _write(table: list[dict], out: Path | None) -> None:
    columns = list(COLUMNS) + list(EXTRA)
    if out is None:
        writer = csv.DictWriter(sys.stdout, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    print(f"wrote {len(table)} rows to {out}", file=sys.stderr)
