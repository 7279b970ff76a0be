"""``ldpsim dpsgd``: centralised DP-SGD training (MindArmour LeNet-5 reproduction)."""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

ORDER = 40

_EPILOG = """\
examples:
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --out dp.csv
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --no-dp --out nodp.csv
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --noise-multiplier 0.4 \\
      --epochs 2 --data-dir ../shared/data

epsilon is reported per epoch by MindArmour's RDPMonitor arithmetic (epsilon_monitor)
and by dp_accounting (epsilon_rdp; epsilon_pld after the last epoch), for add-or-remove
one training example at the config's delta.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dpsgd", help="centralised DP-SGD training with per-epoch accuracy and epsilon",
        description="Train a model centrally with DP-SGD (MindArmour DPModel semantics: "
                    "micro-batch clipping, Gaussian noise, adaptive clipping) and report "
                    "test accuracy and epsilon after every epoch.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path,
                   help="TOML config (keys of ldpsim.fl.central.DpsgdConfig)")
    dp = p.add_mutually_exclusive_group()
    dp.add_argument("--no-dp", dest="dp", action="store_false", default=None,
                    help="train without clipping or noise (the non-private baseline)")
    dp.add_argument("--dp", dest="dp", action="store_true", help="train with DP-SGD")
    p.add_argument("--epochs", type=int)
    p.add_argument("--noise-multiplier", type=float)
    p.add_argument("--num-train", type=int, help="use only the first N training rows")
    p.add_argument("--data-dir", help="dataset folder (default: $LDPSIM_DATA_DIR)")
    p.add_argument("--seed", type=int)
    p.add_argument("--pld", choices=("final", "every_epoch", "off"))
    p.add_argument("--out", type=Path, help="results CSV, one row per epoch (written as it goes)")
    p.add_argument("--json", action="store_true", help="print the last row as one JSON object")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ldpsim.fl.central import CSV_COLUMNS, load_config, train_dpsgd

    config = load_config(args.config, dp=args.dp, epochs=args.epochs,
                         noise_multiplier=args.noise_multiplier, num_train=args.num_train,
                         data_dir=args.data_dir, seed=args.seed, pld=args.pld)
    columns = list(CSV_COLUMNS) + ["compile_time"]
    handle = writer = None
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        handle = open(args.out, "w", newline="")
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()

    def on_row(row: dict) -> None:
        if writer is not None:
            writer.writerow(row)
            handle.flush()
        if not args.json:
            eps = " ".join(f"{k}={row[k]:.4g}" for k in ("epsilon_monitor", "epsilon_rdp",
                                                         "epsilon_pld")
                           if not math.isnan(row[k]))
            print(f"epoch {row['epoch']:3d}  accuracy {row['accuracy']:.4f}  "
                  f"loss {row['loss']:.4f}  {eps}  ({row['epoch_time']:.1f} s)", flush=True)

    try:
        history = train_dpsgd(config, progress=args.progress, callback=on_row)
    finally:
        if handle is not None:
            handle.close()
    last = dict(history[-1])
    last["total_time"] = last["wall_time"]
    if args.json:
        print(json.dumps(last))
    else:
        print(f"final accuracy {last['accuracy']:.4f} after {last['epoch']} epochs, "
              f"{last['wall_time']:.1f} s (compile {last['compile_time']:.1f} s)")
    return 0
