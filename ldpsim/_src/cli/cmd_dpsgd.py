"""``ldpsim dpsgd``: centralised DP-SGD training (MindArmour LeNet-5 reproduction)."""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

from ldpsim._src import _interrupt

ORDER = 40
# ldpsim._src.fl.dpsgd.config.SAMPLINGS and DpsgdConfig's default, spelled out so that building the
# parser does not import JAX (tests/fl/test_dpsgd_train.py checks they agree).
SAMPLINGS = ("poisson", "shuffle")
DEFAULT_SAMPLING = "poisson"

_EPILOG = """\
examples:
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --out dp.csv --trace dp_steps.csv
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --no-dp --out nodp.csv
  ldpsim dpsgd --config experiments/mindarmour_lenet_dpsgd.toml --noise-multiplier 0.4 \\
      --epochs 2 --data-dir path/to/data
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
    from ldpsim._src.cli._help import HelpFormatter

    p = subparsers.add_parser(
        "dpsgd", help="centralised DP-SGD training with per-epoch accuracy and epsilon",
        description="Train a model centrally with DP-SGD (MindArmour DPModel semantics: "
                    "micro-batch clipping, Gaussian noise, adaptive clipping) and report "
                    "test accuracy and epsilon after every epoch.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--config", type=Path,
                   help="TOML config (keys of ldpsim.fl.DpsgdConfig)")
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
    p.add_argument("--epochs", type=int,
                   help="training epochs (default: the config's, else 10)")
    p.add_argument("--noise-multiplier", type=float,
                   help="noise multiplier z: noise std / clip bound (default: the config's, "
                        "else 0.05)")
    p.add_argument("--num-train", type=int, help="use only the first N training rows "
                   "(default: the config's, else all)")
    p.add_argument("--data-dir", help="dataset folder (default: $LDPSIM_DATA_DIR)")
    p.add_argument("--seed", type=int, help="root seed (default: the config's, else 0)")
    p.add_argument("--pld", choices=("final", "every_epoch", "off"),
                   help="when to compute the PLD epsilon besides RDP (default: the config's, "
                        "else final)")
    p.add_argument("--out", type=Path, help="results CSV, one row per epoch (written as it goes)")
    p.add_argument("--trace", type=Path,
                   help="per-step CSV of the clip bound C_t and noise multiplier m_t each "
                        "step used and the multipliers accounted (written as it goes)")
    p.add_argument("--epsilon-only", action="store_true",
                   help="print the epsilon of every epoch without training (adaptive "
                        "clipping, which the defaults use, needs --from-trace)")
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
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.fl.dpsgd.ledger import epsilon_by_epoch, read_trace
    from ldpsim._src.fl.dpsgd.train import num_train_rows

    clips = mults = None
    if args.from_trace is not None:
        try:
            trace = read_trace(args.from_trace)
        except LdpsimError as err:
            raise LdpsimError(f"--from-trace: {err}") from None
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
    from ldpsim._src.fl.dpsgd.config import CSV_COLUMNS, TRACE_COLUMNS, load_config
    from ldpsim._src.fl.dpsgd.guarantee import privacy_setting
    from ldpsim._src.fl.dpsgd.ledger import MONITOR_LABEL
    from ldpsim._src.fl.dpsgd.train import train_dpsgd
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.cli._files import check_data_dir, check_text_file
    from ldpsim._src.cli._parsing import was_given

    # Before any work: the files it reads, the data folder, options that need another mode.
    if args.config is not None:
        check_text_file(args.config, "--config", "TOML")
    check_data_dir(args.data_dir)
    if args.from_trace is not None:
        if not args.epsilon_only:
            raise LdpsimError("--from-trace goes with --epsilon-only")
        check_text_file(args.from_trace, "--from-trace", "CSV")
    config = load_config(args.config, dp=args.dp, epochs=args.epochs,
                         noise_multiplier=args.noise_multiplier, num_train=args.num_train,
                         data_dir=args.data_dir, seed=args.seed, pld=args.pld,
                         sampling=args.sampling)
    if args.data_dir is None and getattr(config, "data_dir", None):
        check_data_dir(config.data_dir, f"data_dir (in {args.config})")
    if not config.dp:
        for dest in ("noise_multiplier", "trace", "pld"):
            if was_given(args, dest):
                raise LdpsimError(f"--{dest.replace('_', '-')} does not apply to a run without DP "
                                  "(--no-dp, or dp = false in the config); remove it")
    setting = privacy_setting(config)
    if not args.json:
        print(setting.describe(config), flush=True)
        if config.private:
            print(f"epsilon_monitor: {MONITOR_LABEL}", flush=True)
    columns = list(CSV_COLUMNS) + ["compile_time"]
    if args.epsilon_only:
        return _epsilon_only(args, config, columns)
    handle = writer = trace_handle = trace_writer = None
    record = _Record(args, config)  # interrupt note; the manifest beside --out
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
            with _interrupt.critical():  # a row is written whole (SIGINT/SIGTERM wait)
                writer.writerow(row)
                handle.flush()
        record.row(row)
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
        record.close()
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


class _Record:
    """What an interrupt leaves (ldpsim._src._interrupt.note) and, with ``--out``, the run's
    manifest ``<stem>.manifest.json`` (ldpsim._src._manifest): written at the start, finished by
    :meth:`close` as ``finished``, ``interrupted`` or ``failed`` with the last epoch's
    privacy guarantee."""

    def __init__(self, args: argparse.Namespace, config) -> None:
        from ldpsim._src import _manifest

        self._m, self.out, self.rows, self._last = _manifest, args.out, 0, None
        self._recorder = None
        if args.out is not None:
            data = [_manifest.dataset_record(config.dataset, config.data_dir)]
            manifest = _manifest.collect("dpsgd", config, out=args.out, seeds=[config.seed],
                                         data=data)
            self._recorder = _manifest.Recorder(_manifest.manifest_path(args.out), manifest)
            self._recorder.__enter__()
        self._note()

    def _note(self) -> None:
        if self.out is None:
            saved = "nothing was saved (no --out)"
        else:
            saved = (f"{self.rows} epoch rows saved in {self.out}" if self.rows
                     else f"no epoch finished ({self.out} holds the header only)")
        _interrupt.note(f"{saved}; dpsgd does not resume: run the command again to start over")

    def row(self, row: dict) -> None:
        self.rows += 1
        self._last = row
        self._note()

    def close(self) -> None:
        import sys

        if self._recorder is None:
            return
        manifest = self._recorder.manifest
        manifest["results"]["rows"] = self.rows
        if self._last is not None:
            keys = ("dp", "epsilon", "delta", "neighbouring", "sensitivity", "sampling",
                    "accounting", "noise_multiplier", "clip_norm", "sampler_delta_floor", "epoch")
            privacy = {k: self._last[k] for k in keys if k in self._last}
            privacy["statement"] = (
                f"sample-level ({privacy.get('epsilon')}, {privacy.get('delta')})-DP after "
                f"{privacy.get('epoch')} epochs, {privacy.get('neighbouring')} neighbours "
                f"(sensitivity {privacy.get('sensitivity')}, {privacy.get('sampling')} sampling)"
                if privacy.get("dp", True) else "no privacy (--no-dp)")
            manifest["privacy"] = privacy
        self._recorder.__exit__(*sys.exc_info())
