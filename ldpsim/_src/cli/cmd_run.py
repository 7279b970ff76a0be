"""``ldpsim run``: one federated simulation under local DP, metrics per round to CSV."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
from pathlib import Path

from ldpsim._src import _interrupt, _manifest
from ldpsim._src.privacy import registry

ORDER = 20

_EPILOG = """\
examples:
  ldpsim run --dataset mnist --data-dir DIR --model lenet5 --population 10000 \\
      --clients-per-round 1000 --rounds 50 --epsilon 50 --delta 0.01 --clip 1 --out run.csv
  ldpsim run --dataset mnist --epsilon inf --rounds 20     # FedAvg without privacy

privacy: every client clips its update to C and adds noise calibrated for (epsilon, delta)
per round (local DP). --neighbours replace (default) uses sensitivity 2C; add-remove uses C
(MindSpore Federated's convention). --epsilon inf adds no noise (updates are still clipped
unless --clip inf). --mechanism with a report randomizer (all but gaussian and laplace, see
--mechanism above): each client sends a pure epsilon-LDP report of its clipped update instead (replace-one, delta unused); the
server decodes the reports (unbiased, SignDS aside) and averages them; epsilon_spent is the
pure composition k*epsilon over the worst client's k rounds.
  ldpsim run --mechanism privunit2 --epsilon 8 --rounds 20

privacy modes: --privacy-mode mindspore (MindSpore Federated DP_ENCRYPT), central (DP-FedAvg,
user-level epsilon_spent by RDP with q = m/N, optional --adaptive-clip true), distributed
(per-client share of the central noise, --dropout-rate reports the shortfall). --noise-mode
aggregate draws the noise sum once (exact in distribution, Gaussian only; a simulation
shortcut: no client holds its own noise, so it models the server's view, not the clients').
--stop-at-epsilon E keeps a per-client ledger and stops clients (--stop-policy client) or
the run (run) before any client's epsilon exceeds E (columns ledger_epsilon_max/_mean,
retired_clients). --client-dp true
trains each client with DP-SGD (client_dp_epsilon column), combinable with every mode.
  ldpsim run --privacy-mode central --noise-multiplier 1.0 --clip 0.5 --out central.csv

devices: each round's cohort is split over --devices devices (default: all JAX sees) with
jax.sharding; results equal one device's up to float rounding (client keys come from client
ids). On CPU the command exposes one host device per core (at most 8) unless XLA_FLAGS sets
--xla_force_host_platform_device_count or LDPSIM_HOST_DEVICES=K is given (1: one device).
Multi-host: run the same command on every host with --distributed, which calls
jax.distributed.initialize() before anything else (coordinator, process count and id are
auto-detected on Slurm/Open MPI/Kubernetes/Cloud TPU, or given by --coordinator-address,
--num-processes, --process-id); every device of every host then shares the cohort and
process 0 alone writes --out and prints.
  LDPSIM_HOST_DEVICES=1 ldpsim run --out run.csv     # one CPU device
"""

def _bool(text: str) -> bool:
    """``true/false`` (also ``1/0``, ``yes/no``) as a bool, for boolean config fields."""
    low = str(text).strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


_bool.__name__ = "bool"   # argparse names the type in its error message


def _delta_arg(text: str) -> float | str:
    """``--delta``: a number, or the rule ``1/population`` / ``1/clients_per_round``
    (resolved once the run's settings are known)."""
    if text.strip() in ("1/population", "1/clients_per_round"):
        return text.strip()
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number in (0, 1), 1/population or 1/clients_per_round, got {text!r}"
        ) from None


def _randomizer_options() -> tuple:
    """``--mechanism`` and every randomizer's own options, from the registry."""
    names = registry.engine_randomizers()
    out = [("--mechanism", "mechanism", str, names,
            "local randomizer: " + "; ".join(
                f"{s.name} ({s.help})" for s in registry.RANDOMIZERS if s.engine))]
    for field in registry.own_option_fields():
        users, spec = registry.option_help(field)
        out.append((spec.flag, field, spec.type, spec.choices,
                    f"{'/'.join(users)}: {spec.help}"))
    return tuple(out)


def _mode_option() -> tuple:
    return ("--privacy-mode", "privacy_mode", str, registry.mode_names(),
            "where the noise goes: " + "; ".join(f"{m.name} ({m.help})" for m in registry.MODES)
            + "; --epsilon is used by " + " and ".join(m.name for m in registry.MODES
                                                       if "epsilon" in m.settings) + " only")


# (flag, config field, type, choices, help); defaults come from SimulationConfig. The
# randomizers' and modes' entries are read from the registry again by options().
_OPTIONS = (
    ("--dataset", "dataset", str, None, "dataset name (mnist, fashion_mnist, ...)"),
    ("--data-dir", "data_dir", str, None, "folder with the dataset files (None: the "
                                          "loader's default folder)"),
    ("--data-source", "data_source", str, ("auto", "idx", "tfds"),
     "MNIST/Fashion-MNIST reader: auto/idx = verified IDX files via NumPy; tfds = "
     "tensorflow-datasets prepared offline from --data-dir (needs the tfds extra)"),
    ("--partition", "partition", str, ("iid", "dirichlet", "shards", "natural", "sampled"),
     "how examples go to clients (sampled: virtual population of any size)"),
    ("--alpha", "alpha", float, None, "Dirichlet label-skew concentration for dirichlet and "
                                      "sampled partitions (inf = IID)"),
    ("--model", "model", str, None, "model: lenet5, mlp, mlp128, logreg, femnist_cnn, char_lstm, "
     "lstm_fedavg, or auto (LeNet-5 for images, the LEAF CNN femnist_cnn for 62-class ones, "
     "char_lstm for token sequences such as shakespeare, MLP for feature vectors)"),
    ("--population", "population", int, None, "number of clients N"),
    ("--examples-per-client", "examples_per_client", int, None, "examples per client (sampled partition)"),
    ("--clients-per-round", "clients_per_round", int, None, "cohort size m per round"),
    ("--rounds", "rounds", int, None, "federated rounds"),
    ("--epsilon", "epsilon", float, None, "per-round local epsilon (the discrete modes: of the "
     "sum, per round or per run by --epsilon-scope); inf = no privacy"),
    ("--delta", "delta", _delta_arg, None, "delta of the Gaussian mechanism, a number in "
     "(0, 1) or 1/population or 1/clients_per_round (the pure epsilon-LDP "
     "mechanisms " + ", ".join(s.name for s in registry.RANDOMIZERS
                               if s.engine and not s.uses("delta")) + " do not use it)"),
    ("--clip", "clip", float, None, "clip bound C (L2; L1 for " + ", ".join(
        s.name for s in registry.RANDOMIZERS if s.engine and s.clip_norm == "l1")
     + "; unused by " + ", ".join(s.name for s in registry.RANDOMIZERS
                                  if s.engine and not s.uses_clip) + ")"),
    *_randomizer_options(),
    ("--secagg-mechanism", "secagg_mechanism", str, ("ddg", "skellam"),
     "discrete: the clients' integer noise (distributed discrete Gaussian or Skellam)"),
    ("--bits", "bits", int, None, "discrete: bit-width b of the secure sum mod 2^b (2..32)"),
    ("--granularity", "granularity", float, None, "discrete: integer grid step gamma (None: "
     "the finest whose sum fits --bits)"),
    ("--epsilon-scope", "epsilon_scope", str, ("round", "run"),
     "discrete: --epsilon per round (round) or for the whole run, amplified by Poisson cohort "
     "sampling (run; needs --sampling poisson)"),
    ("--neighbours", "neighbours", str, ("replace", "add-remove"),
     "neighbouring relation: replace = sensitivity 2C, add-remove = C"),
    ("--calibration", "calibration", str, ("analytic", "classic", "mindspore"),
     "Gaussian sigma calibration"),
    ("--local-steps", "local_steps", int, None, "local optimizer steps per round (None: the "
     "dataset's default, see 'training defaults' below)"),
    ("--local-epochs", "local_epochs", int, None, "local epochs (overrides --local-steps; None: "
     "the dataset's default)"),
    ("--batch-size", "batch_size", int, None, "local batch size (None: the dataset's default)"),
    ("--client-optimizer", "client_optimizer", str, ("sgd", "momentum", "adam"),
     "client optimizer (None: the dataset's default)"),
    ("--client-lr", "client_lr", float, None, "client learning rate (None: the dataset's "
     "default for its optimizer)"),
    ("--server-optimizer", "server_optimizer", str, ("fedavg", "fedavgm", "fedadam", "fedyogi"),
     "server optimizer (fedavg: the server applies the mean update times --server-lr)"),
    ("--server-lr", "server_lr", float, None, "server learning rate (None: the dataset's "
     "default)"),
    ("--server-momentum", "server_momentum", float, None, "FedAvgM momentum"),
    ("--weighting", "weighting", str, ("examples", "uniform"),
     "aggregation weights: |D_k| (FedAvg) or uniform"),
    ("--sampling", "sampling", str, ("uniform", "poisson"),
     "cohort sampling: m of N without replacement, or Poisson with rate m/N"),
    ("--eval-every", "eval_every", int, None, "evaluate on the test set every k rounds"),
    ("--chunk-size", "chunk_size", int, None,
     "clients per vmapped chunk, memory ~ chunk (None: 1 on CPU, measured fastest there; 1024 on accelerators)"),
    ("--devices", "devices", int, None,
     "split each round's cohort over this many devices (None: every device JAX sees, all "
     "hosts' with --distributed)"),
    ("--seed", "seed", int, None, "root seed"),
    # Privacy modes (ldpsim._src.fl.modes).
    _mode_option(),
    ("--noise-mode", "noise_mode", str, ("per-client", "aggregate"),
     "per-client draws, or one exact draw of the noise sum (Gaussian only; a simulation "
     "shortcut: no client holds its noise)"),
    ("--noise-multiplier", "noise_multiplier", float, None,
     "central/distributed z: noise std on the sum / C"),
    ("--adaptive-clip", "adaptive_clip", _bool, None,
     "central: quantile-adaptive C starting from --clip (Andrew et al. 2021), true/false"),
    ("--target-quantile", "target_quantile", float, None, "adaptive clipping target quantile"),
    ("--clip-learning-rate", "clip_learning_rate", float, None,
     "adaptive clipping geometric learning rate"),
    ("--clipped-count-stddev", "clipped_count_stddev", float, None,
     "adaptive clipping count noise std (None: clients_per_round/20)"),
    ("--dropout-rate", "dropout_rate", float, None,
     "distributed, discrete: probability a sampled client never reports (the noise is "
     "planned for the cohort; discrete: epsilon_spent counts the survivors, so may exceed "
     "--epsilon)"),
    ("--dp-eps", "dp_eps", float, None, "mindspore: per-round epsilon (> 0)"),
    ("--dp-delta", "dp_delta", float, None, "mindspore: delta in (0, 1)"),
    ("--dp-norm-clip", "dp_norm_clip", float, None,
     "mindspore: C_{t+1} = dp_norm_clip * ||W_{t+1} - W_t|| (> 0)"),
    ("--mindspore-clip-rule", "mindspore_clip_rule", str, ("running-min", "overwrite"),
     "mindspore: running minimum after round 1 (current client) or overwrite every round"),
    ("--mindspore-neighbours", "mindspore_neighbours", str, ("add-remove", "replace"),
     "mindspore: sensitivity C_t (MindSpore) or 2C_t (replace-one)"),
    ("--client-dp", "client_dp", _bool, None,
     "train every client with DP-SGD (sample-level DP), true/false"),
    ("--client-dp-micro-batches", "client_dp_micro_batches", int, None,
     "DP-SGD micro-batches per local batch (must divide --batch-size)"),
    ("--client-dp-clip", "client_dp_clip", float, None, "DP-SGD micro-batch clip bound"),
    ("--client-dp-noise-multiplier", "client_dp_noise_multiplier", float, None,
     "DP-SGD noise multiplier (std z*C on the clipped sum)"),
    ("--client-dp-delta", "client_dp_delta", float, None,
     "delta of the DP-SGD clients' sample-level accountant (columns client_dp_epsilon, "
     "client_dp_delta); default: the run's delta setting (--delta's value, 1e-5 unless set; "
     "in modes without --delta, 1e-5)"),
    # Per-client budget (ldpsim._src.privacy.accountants.ledger through the driver).
    ("--stop-at-epsilon", "stop_at_epsilon", float, None,
     "per-client budget E (ldp, mindspore): a ledger keeps each client's spent epsilon "
     "from its own participations and no client's exceeds E (see --stop-policy); None: "
     "no budget"),
    ("--stop-policy", "stop_policy", str, ("client", "run"),
     "with --stop-at-epsilon: client = leave out of each cohort the clients whose next "
     "participation would exceed E (decided from participation counts only, never the "
     "data); run = end the run before the first round that would exceed E for a sampled "
     "client"),
)


def _mode_own_options(listed: set[str]) -> tuple:
    """The privacy modes' own options (``ModeSpec.options``) not listed in :data:`_OPTIONS`."""
    out = {}
    for m in registry.MODES:
        for o in m.options:
            if o.field not in listed:
                users = [n.name for n in registry.MODES if any(x.field == o.field
                                                               for x in n.options)]
                out.setdefault(o.field, (o.flag, o.field, o.type, o.choices,
                                         f"{'/'.join(users)}: {o.help}"))
    return tuple(out.values())


def options() -> tuple:
    """:data:`_OPTIONS` with the randomizers' and modes' entries read from the registry now
    (a spec added after import is a choice too)."""
    own = set(registry.own_option_fields())
    out = []
    for o in _OPTIONS:
        if o[1] == "mechanism":
            out.extend(_randomizer_options())
        elif o[1] == "privacy_mode":
            out.append(_mode_option())
            out.extend(_mode_own_options({x[1] for x in _OPTIONS} | own))
        elif o[1] not in own:
            out.append(o)
    return tuple(out)


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.fl.config import SimulationConfig

    defaults = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}
    p = subparsers.add_parser(
        "run",
        help="run one federated simulation under local DP (metrics per round to CSV)",
        description="Simulate federated learning where every client clips and noises its "
                    "own update (local DP), and report accuracy and noise metrics per round.",
        epilog=_EPILOG + "\n" + _training_defaults_epilog(),
        formatter_class=_Formatter,
    )
    for flag, field, typ, choices, help_ in options():
        p.add_argument(flag, dest=field, type=typ, choices=choices, default=defaults[field],
                       help=help_)
    p.add_argument("--config", type=Path, default=None,
                   help="TOML file of run settings (SimulationConfig fields, at the top level "
                        "or in a [run] table as in sweep files), or a run's manifest "
                        "(*.manifest.json: that run again); options given on the command "
                        "line override it")
    p.add_argument("--out", type=Path, default=None,
                   help="CSV file for the per-round metrics (written as rounds finish), with "
                        "its manifest <stem>.manifest.json beside it (configuration, versions, "
                        "devices, data checksums, privacy guarantee)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file (otherwise refused, unless "
                        "--checkpoint-dir holds a checkpoint to continue from)")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the status lines and the progress bar (stderr)")
    p.add_argument("--checkpoint-dir", type=Path, default=None, metavar="DIR",
                   help="save what the run needs to continue in DIR every --checkpoint-every "
                        "rounds and when it stops; the same command continues from there "
                        "after an interrupt (a checkpoint of other settings is refused)")
    p.add_argument("--checkpoint-every", type=int, default=10, metavar="K",
                   help="rounds between checkpoints (with --checkpoint-dir)")
    p.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                   help="also write each evaluated round's numeric columns as TensorBoard "
                        "scalars to DIR (needs the tensorboard extra: tensorboardX)")
    p.add_argument("--no-memory-check", action="store_true",
                   help="run even when the memory estimate exceeds this host's memory")
    p.add_argument("--distributed", action="store_true",
                   help="multi-host: call jax.distributed.initialize() before anything else "
                        "(run the same command on every host)")
    p.add_argument("--coordinator-address", default=None,
                   help="with --distributed: host:port of process 0 (None: auto-detected "
                        "or $JAX_COORDINATOR_ADDRESS)")
    p.add_argument("--num-processes", type=int, default=None,
                   help="with --distributed: number of processes (None: auto-detected)")
    p.add_argument("--process-id", type=int, default=None,
                   help="with --distributed: this process's index (None: auto-detected)")
    p.set_defaults(handler=run)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show every default and keep the epilog's line breaks."""


def run(args: argparse.Namespace) -> int:
    from ldpsim._src.cli._guards import check_run_args
    from ldpsim._src.fl.config import SimulationConfig

    _apply_config_file(args)  # --config FILE: the settings the command line does not give
    _check_overwrite(args)
    check_run_args(args)  # before any work: paths, options that do not apply, values, memory
    if args.checkpoint_every < 1:
        from ldpsim._src._checks import LdpsimError

        raise LdpsimError(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}")
    if not args.no_progress:
        from ldpsim._src.fl.loop import status

        status("starting (importing JAX)")
    lead = True
    if getattr(args, "distributed", False):
        lead = _initialize_distributed(args)
    elif any(getattr(args, k, None) is not None
             for k in ("coordinator_address", "num_processes", "process_id")):
        from ldpsim._src._checks import LdpsimError

        raise LdpsimError("--coordinator-address, --num-processes and --process-id need "
                          "--distributed")
    from ldpsim._src.fl.simulate import simulate

    fields = {f.name for f in dataclasses.fields(SimulationConfig)}
    config = SimulationConfig(**{k: v for k, v in vars(args).items() if k in fields})
    _note_defaults(config, quiet=args.no_progress or not lead)
    writer = (_CsvWriter(args.out, config, resume_from=getattr(args, "checkpoint_dir", None))
              if args.out is not None and lead else None)
    board = None
    if args.tensorboard is not None and lead:
        from ldpsim._src.fl.writers import tensorboard_callback

        board = tensorboard_callback(args.tensorboard)
    writers = [w for w in (writer.write if writer else None, board) if w is not None]
    try:
        history = simulate(config, progress=lead and not args.no_progress,
                           callback=(lambda row: [w(row) for w in writers] and None)
                           if writers else None,
                           checkpoint_dir=args.checkpoint_dir,
                           checkpoint_every=args.checkpoint_every)
    finally:
        for w in (writer, board):
            if w is not None:
                w.close()
    if not lead:
        return 0
    last = history[-1]
    print(f"round {last['round']}: accuracy {last['accuracy']:.4f}, loss {last['loss']:.4f}")
    if registry.mode(last["privacy_mode"]).user_level:
        budget = f"user-level, noise multiplier {last['noise_multiplier']:g}"
    else:
        budget = f"epsilon {last['epsilon']:g} per round"
    spent = last.get("delta_spent", math.nan)
    spent = 0.0 if spent is None or math.isnan(spent) else spent
    at_delta = (f"at delta {last['delta']:g}" if not math.isnan(last["delta"])
                else "(pure, delta 0)" if not spent else
                f"at delta {spent:.3g} (pure composition; the float32 realisation's delta)")
    if not registry.mode(last["privacy_mode"]).user_level and math.isinf(last["epsilon"]):
        clipped = (f"updates clipped to {last['clip']:g}" if math.isfinite(last["clip"])
                   else "updates not clipped")
        print(f"privacy: none (epsilon inf: {clipped}, no noise, nothing accounted)")
    else:
        scale = (f"sigma {last['sigma']:.4g}" if not math.isnan(last["sigma"]) else
                 "a pure-epsilon report randomizer")
        sens = ("" if math.isnan(last["sensitivity"]) else
                f", sensitivity {last['sensitivity']:.4g}")
        print(f"privacy: {last['privacy_mode']} {last['mechanism']}, {budget}, {scale}, "
              f"{last['neighbours']} neighbours{sens}; epsilon_spent "
              f"{last['epsilon_spent']:.4g} {at_delta}")
    wrap = last.get("wrap_bound", math.nan)
    if wrap is not None and not math.isnan(wrap):   # the integer sum of secure aggregation
        print(f"secure aggregation: {config.bits}-bit sum, wrap probability <= "
              f"{wrap:.3g} per round (planned); wrapped_fraction "
              f"{last.get('wrapped_fraction', math.nan):.3g} in the last round")
    print(f"diagnostics (simulation only, not released): noise_norm {last['noise_norm']:.4g}, "
          f"snr {last['snr']:.4g}, clip_fraction {last['clip_fraction']:.3g}, "
          f"nonfinite_clients {last['nonfinite_clients']}")
    if last["noise_mode"] == "aggregate":
        print("noise-mode aggregate is a simulation shortcut: the summed noise is drawn once, "
              "exactly in distribution; no client ever holds its own noise")
    if args.out is not None:
        print(f"wrote {len(history)} rows to {args.out}", file=sys.stderr)
    return 0


def _training_defaults_epilog() -> str:
    """The per-dataset training defaults (ldpsim._src.fl.defaults) for the help text."""
    from ldpsim._src.fl.defaults import DATASET_DEFAULTS, describe

    lines = ["training defaults: --local-steps/--local-epochs, --batch-size, --client-optimizer,",
             "--client-lr and --server-lr not given take the dataset's measured defaults (a value",
             "given always wins; the manifest records the values used):"]
    lines += [f"  {name}: {describe(name)}" for name in DATASET_DEFAULTS]
    lines.append(f"  any other dataset: {describe('other')}")
    return "\n".join(lines) + "\n"


def _note_defaults(config, *, quiet: bool) -> None:
    """One stderr line naming the per-dataset defaults this run took (if any)."""
    from ldpsim._src.fl.defaults import defaulted_fields

    taken = defaulted_fields(config)
    if config.local_epochs is not None:
        taken.pop("local_steps", None)  # filled for validation only; epochs decide
    if taken and not quiet:
        text = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in taken.items())
        print(f"defaults for {config.dataset}: {text}", file=sys.stderr)


def _initialize_distributed(args: argparse.Namespace) -> bool:
    """``jax.distributed.initialize()`` (before any other JAX call); True on process 0."""
    import jax

    jax.distributed.initialize(coordinator_address=args.coordinator_address,
                               num_processes=args.num_processes, process_id=args.process_id)
    return jax.process_index() == 0


class _CsvWriter:
    """Append one row per evaluated round, flushed at once (nothing lost on interrupt).

    A row is written whole: SIGINT/SIGTERM wait for it (ldpsim._src._interrupt.critical). With a
    ``config`` the run's manifest (ldpsim._src._manifest) is kept beside the CSV: written at the
    start, finished by :meth:`close` (``finished``, ``interrupted`` or ``failed``, from the
    exception being raised, if any) with the privacy guarantee of the last row.
    """

    def __init__(self, path: Path, config=None, *, resume_from: Path | None = None) -> None:
        from ldpsim._src._checks import LdpsimError

        path = Path(path)
        if path.parent and not path.parent.exists():
            raise LdpsimError(f"--out folder {str(path.parent)!r} does not exist; create it "
                              "or choose another path")
        self.path, self.rows, self._last = path, 0, None
        self._rounds = getattr(config, "rounds", None)
        self._resume_from = resume_from
        self._recorder = None
        if config is not None:
            self._data = (config.dataset, config.data_dir, config.data_source)
            data = [_manifest.dataset_record(*self._data)]
            manifest = _manifest.collect("run", config, out=path, seeds=[config.seed], data=data)
            self._recorder = _manifest.Recorder(_manifest.manifest_path(path), manifest,
                                                resume=resume_from is not None)
            self._recorder.__enter__()
        self._file = open(path, "w", newline="")
        self._writer: csv.DictWriter | None = None
        self._note()

    def _note(self) -> None:
        """What an interrupt now leaves saved, and how to go on (ldpsim._src._interrupt)."""
        last = self._last.get("round") if self._last else None
        done = (f"{self.rows} rows (to round {last}" + (f" of {self._rounds}" if self._rounds
                                                          else "") + ")") if self.rows else "no rows"
        where = f"{done} saved in {self.path}"
        if self._recorder is not None:
            where += f", manifest {self._recorder.path}"
        saved = self._resume_from is not None and Path(self._resume_from).is_dir() and \
            any(Path(self._resume_from).iterdir())
        how = (f"run the same command to continue from the last checkpoint in {self._resume_from}"
               if saved else
               f"no checkpoint in {self._resume_from} yet: add --overwrite to the same command "
               "to start again" if self._resume_from is not None and self.rows else
               "run the same command to start again" if not self.rows else
               "a run without --checkpoint-dir starts again: add --overwrite to the same command")
        _interrupt.note(f"{where}; {how}")

    def write(self, row: dict) -> None:
        with _interrupt.critical():
            if self._writer is None:
                self._writer = csv.DictWriter(self._file, fieldnames=list(row))
                self._writer.writeheader()
                if self._recorder is not None and "model" in row:   # model "auto", as it ran
                    self._recorder.manifest["resolved"] = {"model": row["model"]}
            elif not set(row) <= set(self._writer.fieldnames):
                self._widen(row)
            self._writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v)
                                   for k, v in row.items()})
            self._file.flush()
            self.rows += 1
            self._last = row
        self._note()

    def _widen(self, row: dict) -> None:
        """Rewrite the file with the columns of ``row`` added (the earlier rows' empty): a run
        resumed from a checkpoint of an earlier version replays rows without the columns
        added since. Replaced atomically."""
        from ldpsim._src._atomic import atomic_open

        fields = list(self._writer.fieldnames) + [k for k in row if k not in self._writer.fieldnames]
        self._file.close()
        with open(self.path, newline="") as f:
            old = list(csv.DictReader(f))
        with atomic_open(self.path, newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(old)
        self._file = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=fields)

    def close(self) -> None:
        self._file.close()
        if self.rows == 0:   # failed or stopped before its first row: leave no empty CSV
            self.path.unlink(missing_ok=True)
        if self._recorder is not None:
            manifest = self._recorder.manifest
            manifest["results"]["rows"] = self.rows
            if self._last is not None:
                manifest["privacy"] = _manifest.guarantee(self._last)
            try:  # again: files downloaded by the run now exist
                manifest["data"] = [_manifest.dataset_record(*self._data)]
            except OSError:
                pass
            self._recorder.__exit__(*sys.exc_info())


def _apply_config_file(args: argparse.Namespace) -> None:
    """``--config FILE``: its settings go into ``args`` where the command line gave none
    (ldpsim._src.sweep.config.load_run_config); a ``delta`` rule is resolved afterwards. A run's
    manifest (``*.manifest.json``) works too: the run it records, again."""
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.cli._parsing import was_given
    from ldpsim._src.sweep.config import load_run_config

    if getattr(args, "config", None) is None:
        _resolve_delta(args)
        return
    if Path(args.config).suffix.lower() == ".json":
        settings, axes = dataclasses.asdict(_manifest.simulation_config(args.config)), {}
    else:
        settings, axes = load_run_config(args.config)
    several = sorted(k for k in axes if not was_given(args, k))
    if several:
        raise LdpsimError(
            f"--config {str(args.config)!r} gives several values for {', '.join(several)} (a "
            "grid: run it with ldpsim sweep, or pick one value with "
            + ", ".join(f"--{k.replace('_', '-')}" for k in several) + ")")
    for field, value in settings.items():
        if not was_given(args, field):
            setattr(args, field, value)
    _resolve_delta(args)


def _resolve_delta(args: argparse.Namespace) -> None:
    if isinstance(getattr(args, "delta", None), str):  # "1/population", "1/clients_per_round"
        args.delta = 1.0 / float(args.population if args.delta == "1/population"
                                 else args.clients_per_round)


def _check_overwrite(args: argparse.Namespace) -> None:
    """An existing ``--out`` file is refused unless ``--overwrite`` is given, it is empty
    (a run stopped before its first row), or ``--checkpoint-dir`` holds a checkpoint the run
    continues from."""
    from ldpsim._src._checks import LdpsimError

    out = getattr(args, "out", None)
    if out is None or not Path(out).is_file() or getattr(args, "overwrite", False):
        return
    if Path(out).stat().st_size == 0:
        return
    ckpt = getattr(args, "checkpoint_dir", None)
    if ckpt is not None and Path(ckpt).is_dir() and any(Path(ckpt).iterdir()):
        return
    if ckpt is not None:
        raise LdpsimError(f"--out {str(out)!r} exists and --checkpoint-dir {str(ckpt)!r} holds "
                          "no checkpoint to continue from (the run stopped before its first); "
                          "pass --overwrite to start again, or choose another file")
    raise LdpsimError(f"--out {str(out)!r} exists; pass --overwrite to replace it, or choose "
                      "another file")
