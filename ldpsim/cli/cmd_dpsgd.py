"""``ldpsim dpsgd``: centralised DP-SGD training (MindArmour LeNet-5 reproduction)."""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

ORDER = 40
# ldpsim.fl.central.SAMPLINGS and DpsgdConfig's default, spelled out so that building the
# parser does not import JAX (tests/test_dpsgd_train.py checks they agree).
SAMPLINGS = ("poisson", "shuffle")
DEFAULT_SAMPLING = "poisson"

_EPILOG = """\
examples:
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --out dp.csv --trace dp_steps.csv
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --no-dp --out nodp.csv
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --noise-multiplier 0.4 \\
      --epochs 2 --data-dir ../shared/data
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --sampling poisson
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --epsilon-only \\
      --from-trace dp_steps.csv          # the epsilon ledger again, without training

epsilon (at the config's delta) is the guarantee of the sampling the run uses:
  --sampling poisson: each example joins each step's batch independently with
      probability q = batch_size/num_train; add-or-remove one example; Poisson-sampled
      Gaussian per step (dp_accounting RDP; PLD after the last epoch when every step
      has the same multiplier).
  --sampling shuffle: MindArmour's batching (a fresh permutation per epoch, disjoint
      batches); replace one example; one Gaussian per epoch at the epoch's smallest
      step multiplier, composed exactly (no amplification claimed).
The value's sensitivity is C_t only with Poisson sampling and per-example clipping
(micro_batches = batch_size), 2C_t otherwise. With adaptive clipping (clip_mechanism) the
clip bound C_t of every step is recorded and each step is accounted with its own
multiplier b*m_t/(s*C_t), combined with the noisy unclipped fraction it releases
(multiplier fraction_stddev*micro_batches): 1/z^2 = 1/z_value^2 + 1/z_fraction^2;
fraction_stddev = 0 releases it without noise, and epsilon is inf. Columns: epsilon (the
guarantee: the smaller of epsilon_rdp and epsilon_pld), accounting (how, in one line),
sampling, neighbouring, sensitivity, accounted_noise_multiplier,
fraction_noise_multiplier; epsilon_monitor is MindArmour's RDPMonitor figure (nominal
multiplier, Poisson sampling, sensitivity C, fixed clip bound): not a guarantee.
train_loss and unclipped_fraction are diagnostics computed without noise.
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
    p.add_argument("--sampling", choices=SAMPLINGS,
                   help="how batches are drawn, and so what epsilon means: 'poisson' "
                        "(independent inclusion with q = batch_size/num_train, add-or-remove "
                        "one example) or 'shuffle' (MindArmour: permutation per epoch, "
                        f"replace one example, no amplification) (default: "
                        f"{DEFAULT_SAMPLING}, or the config's 'sampling' key)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--noise-multiplier", type=float)
    p.add_argument("--num-train", type=int, help="use only the first N training rows")
    p.add_argument("--data-dir", help="dataset folder (default: $LDPSIM_DATA_DIR)")
    p.add_argument("--seed", type=int)
    p.add_argument("--pld", choices=("final", "every_epoch", "off"))
    p.add_argument("--out", type=Path, help="results CSV, one row per epoch (written as it goes)")
    p.add_argument("--trace", type=Path,
                   help="per-step CSV of the clip bound C_t and noise multiplier m_t each "
                        "step used and the multipliers accounted (written as it goes)")
    p.add_argument("--epsilon-only", action="store_true",
                   help="print the epsilon of every epoch without training (adaptive "
                        "clipping needs --from-trace)")
    p.add_argument("--from-trace", type=Path,
                   help="with --epsilon-only: the --trace CSV of a run of this config")
    p.add_argument("--json", action="store_true", help="print the last row as one JSON object")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar")
    p.set_defaults(handler=run)


def _epsilon_line(row: dict) -> str:
    return " ".join(f"{k}={row[k]:.4g}" for k in ("epsilon", "epsilon_rdp", "epsilon_pld",
                                                 "epsilon_monitor")
                    if not math.isnan(row[k]))


def _epsilon_only(args: argparse.Namespace, config, columns: list[str]) -> int:
    from ldpsim._checks import LdpsimError
    from ldpsim.fl.central import epsilon_by_epoch, num_train_rows, read_trace

    clips = mults = None
    if args.from_trace is not None:
        trace = read_trace(args.from_trace)
        clips, mults = trace["clip_norm"], trace["noise_multiplier"]
    elif config.clip_mechanism is not None and config.private:
        raise LdpsimError("--epsilon-only with adaptive clipping needs --from-trace: the "
                          "epsilon depends on the clip bound C_t of every step (write it "
                          "with --trace when training)")
    rows = epsilon_by_epoch(config, num_train_rows(config), clip_norms=clips,
                            noise_multipliers=mults if config.noise_decay else None)
    for row in rows:
        row["delta"] = config.delta if config.dp else math.nan
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=[c for c in columns if c in rows[0]])
            writer.writeheader()
            writer.writerows({k: r[k] for k in writer.fieldnames} for r in rows)
    if args.json:
        print(json.dumps(rows[-1]))
    else:
        for row in rows:
            print(f"epoch {row['epoch']:3d}  step {row['step']:6d}  {_epsilon_line(row)}")
        print(f"accounting: {rows[-1]['accounting']}")
    return 0


def run(args: argparse.Namespace) -> int:
    from ldpsim.fl.central import (
        CSV_COLUMNS,
        MONITOR_LABEL,
        TRACE_COLUMNS,
        load_config,
        privacy_setting,
        train_dpsgd,
    )

    config = load_config(args.config, dp=args.dp, epochs=args.epochs,
                         noise_multiplier=args.noise_multiplier, num_train=args.num_train,
                         data_dir=args.data_dir, seed=args.seed, pld=args.pld,
                         sampling=args.sampling)
    setting = privacy_setting(config)
    if not args.json:
        print(setting.describe(config), flush=True)
        if config.private:
            print(f"epsilon_monitor: {MONITOR_LABEL}", flush=True)
    columns = list(CSV_COLUMNS) + ["compile_time"]
    if args.epsilon_only:
        return _epsilon_only(args, config, columns)
    if args.from_trace is not None:
        from ldpsim._checks import LdpsimError

        raise LdpsimError("--from-trace goes with --epsilon-only")
    handle = writer = trace_handle = trace_writer = None
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        handle = open(args.out, "w", newline="")
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
    if args.trace is not None and config.dp:
        args.trace.parent.mkdir(parents=True, exist_ok=True)
        trace_handle = open(args.trace, "w", newline="")
        trace_writer = csv.DictWriter(trace_handle, fieldnames=list(TRACE_COLUMNS))
        trace_writer.writeheader()

    def on_row(row: dict) -> None:
        if writer is not None:
            writer.writerow(row)
            handle.flush()
        if not args.json:
            print(f"epoch {row['epoch']:3d}  accuracy {row['accuracy']:.4f}  "
                  f"loss {row['loss']:.4f}  {_epsilon_line(row)}  ({row['epoch_time']:.1f} s)",
                  flush=True)

    def on_steps(rows: list[dict]) -> None:
        trace_writer.writerows(rows)
        trace_handle.flush()

    try:
        history = train_dpsgd(config, progress=args.progress, callback=on_row,
                              trace=on_steps if trace_writer is not None else None)
    finally:
        for h in (handle, trace_handle):
            if h is not None:
                h.close()
    last = dict(history[-1])
    last["total_time"] = last["wall_time"]
    if args.json:
        print(json.dumps(last))
    else:
        print(f"final accuracy {last['accuracy']:.4f} after {last['epoch']} epochs, "
              f"{last['wall_time']:.1f} s (compile {last['compile_time']:.1f} s)")
        if config.dp:
            print(f"privacy: ({last['epsilon']:.4g}, {last['delta']:g})-DP for "
                  f"{last['neighbouring']} neighbours, sampling={last['sampling']}, "
                  f"sensitivity {last['sensitivity']}")
            print(f"accounting: {last['accounting']}")
    return 0
