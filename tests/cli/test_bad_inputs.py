"""No traceback from the CLI, ever: a table of bad command lines.

Every case is one ``ldpsim`` invocation with bad input (paths, numbers, options that do
not apply to the chosen mode, unknown choices, corrupt files). Each must end with a
non-zero exit status (2 for a bad command line, argparse's and ldpsim's convention for
usage errors; 1 for other failures), ONE line on stderr that names the problem (the
option or the path), no traceback, and no long work started: the checks run before data
loading and compilation, so the cases run in-process through ``ldpsim.cli.main`` (a
per-case alarm fails a case that starts real work). A few run through the installed
``ldpsim`` command as subprocesses, in parallel, to check the real entry point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from ldpsim.cli import main

#: Seconds a case may take; a case that starts real work (data, compile) fails instead.
CASE_LIMIT_S = 20

RUN = "run --dataset synthetic --population 40 --clients-per-round 4 --rounds 1 --no-progress"
CENTRAL = RUN + " --privacy-mode central"
SWEEP = "sweep --no-progress --out {tmp}/sweep.csv"
NOISE = "noise --dim 10 --epsilon 1 --clients 1,10 --trials 2 --no-progress"
DPSGD = "dpsgd --no-progress"
AUDIT = "audit --epsilon 1 --trials 1000"
CAL = "calibrate --epsilon 1 --delta 1e-5 --clip 1"
ACC_LDP = "account ldp --sigma 4 --sensitivity 2 --delta 1e-5"
ACC_FED = ("account dpfedavg --noise-multiplier 1 --clients-per-round 10 --population 1000 "
           "--rounds 10 --delta 1e-5")
ACC_SGD = ("account dpsgd --noise-multiplier 1.1 --batch-size 256 --num-examples 60000 "
           "--delta 1e-5")
PLOT = "plot {results} --kind convergence --out {tmp}/fig.png"
HUGE = "1000000000000"


@dataclasses.dataclass(frozen=True)
class Case:
    """``argv`` (``{name}`` = a fixture path), the words the one-line message must hold,
    the exit status (None: 1 or 2) and paths that must not exist afterwards."""

    id: str
    argv: str
    expect: tuple[str, ...]
    rc: int | None = None
    absent: tuple[str, ...] = ()
    subprocess: bool = False


def C(id, argv, *expect, rc=None, absent=(), subprocess=False):  # noqa: N802 (table row)
    return Case(id, argv, tuple(expect), rc, tuple(absent), subprocess)


CASES = [
    # ------------------------------------------------------------------ run: paths
    C("run-out-proc", RUN + " --out /proc/x.csv", "--out", "/proc/x.csv", "not writable"),
    C("run-out-under-file", RUN + " --out /etc/hostname/x.csv", "--out", "is a file",
      subprocess=True),
    C("run-out-folder", RUN + " --out {dir}", "--out", "is a folder"),
    C("run-data-dir-missing", RUN.replace("synthetic", "mnist") + " --data-dir {missing}",
      "--data-dir", "{missing}", "does not exist", absent=("{missing}",)),
    C("run-data-dir-file", RUN.replace("synthetic", "mnist") + " --data-dir {text}",
      "--data-dir", "not a folder"),
    # ------------------------------------------------------------------ run: numbers
    C("run-population-0", RUN + " --population 0", "population", ">= 1"),
    C("run-delta-rule-unknown", RUN + " --delta 1/n", "--delta", "1/population"),
    C("run-population-neg", RUN + " --population -5", "population"),
    C("run-population-text", RUN + " --population many", "--population", rc=2),
    C("run-population-float", RUN + " --population 1e3", "--population", rc=2),
    C("run-cohort-0", RUN + " --clients-per-round 0", "clients_per_round"),
    C("run-cohort-over-population", RUN + " --clients-per-round 50", "clients_per_round"),
    C("run-rounds-neg", RUN + " --rounds -1", "rounds"),
    C("run-rounds-float", RUN + " --rounds 1.5", "--rounds", rc=2),
    C("run-epsilon-nan", RUN + " --epsilon nan", "epsilon"),
    C("run-epsilon-neg-inf", RUN + " --epsilon -inf", "epsilon"),
    C("run-epsilon-0", RUN + " --epsilon 0", "epsilon"),
    C("run-delta-0", RUN + " --epsilon 1 --delta 0", "delta"),
    C("run-delta-1", RUN + " --epsilon 1 --delta 1", "delta"),
    C("run-delta-nan", RUN + " --epsilon 1 --delta nan", "delta"),
    C("run-clip-neg", RUN + " --clip -1", "clip"),
    C("run-clip-nan", RUN + " --clip nan", "clip"),
    C("run-alpha-0", RUN + " --partition dirichlet --alpha 0", "alpha"),
    C("run-client-lr-0", RUN + " --client-lr 0", "client_lr"),
    C("run-client-lr-inf", RUN + " --client-lr inf", "client_lr"),
    C("run-server-lr-neg", RUN + " --server-lr -1", "server_lr"),
    C("run-server-momentum-1", RUN + " --server-optimizer fedavgm --server-momentum 1",
      "server_momentum"),
    C("run-batch-size-0", RUN + " --batch-size 0", "batch_size"),
    C("run-local-steps-0", RUN + " --local-steps 0", "local_steps"),
    C("run-local-epochs-0", RUN + " --local-epochs 0", "local_epochs"),
    C("run-eval-every-0", RUN + " --eval-every 0", "eval_every"),
    C("run-chunk-size-0", RUN + " --chunk-size 0", "chunk_size"),
    C("run-devices-0", RUN + " --devices 0", "devices"),
    C("run-seed-neg", RUN + " --seed -1", "seed"),
    C("run-examples-per-client-0", RUN + " --partition sampled --examples-per-client 0",
      "examples_per_client"),
    C("run-huge-population", RUN + f" --population {HUGE} --clients-per-round {HUGE}",
      "memory", "--no-memory-check", subprocess=True),
    C("run-huge-population-sampled", RUN + f" --partition sampled --population {HUGE}",
      "memory", "--no-memory-check"),
    C("run-quantile-above-1", CENTRAL + " --adaptive-clip true --target-quantile 1.5",
      "target_quantile"),
    C("run-dropout-1", RUN + " --privacy-mode distributed --dropout-rate 1", "dropout_rate"),
    C("run-dp-delta-0", RUN + " --privacy-mode mindspore --dp-delta 0", "dp_delta"),
    C("run-dp-eps-neg", RUN + " --privacy-mode mindspore --dp-eps -1", "dp_eps"),
    C("run-micro-batches-divide", RUN + " --client-dp true --batch-size 10 "
      "--client-dp-micro-batches 3", "client_dp_micro_batches"),
    C("run-noise-multiplier-neg", CENTRAL + " --noise-multiplier -1", "noise_multiplier"),
    # ------------------------------------------------------------------ run: choices
    C("run-mechanism-unknown", RUN + " --mechanism foo", "--mechanism", rc=2),
    C("run-privacy-mode-unknown", RUN + " --privacy-mode foo", "--privacy-mode", rc=2),
    C("run-partition-unknown", RUN + " --partition foo", "--partition", rc=2),
    C("run-adaptive-clip-maybe", CENTRAL + " --adaptive-clip maybe", "--adaptive-clip", rc=2),
    C("run-dataset-unknown", RUN + " --dataset no-such-data", "no-such-data"),
    C("run-model-unknown", RUN + " --model no-such-model", "no-such-model"),
    C("run-unknown-option", RUN + " --epsilom 1", "--epsilom", rc=2),
    C("run-aggregate-laplace", RUN + " --epsilon 1 --mechanism laplace --noise-mode aggregate",
      "aggregate"),
    C("run-central-laplace", CENTRAL + " --mechanism laplace", "mechanism"),
    C("run-data-source-synthetic", RUN + " --data-source tfds", "--data-source"),
    # ------------------------------------------------------------------ run: not applicable
    C("run-central-epsilon", CENTRAL + " --epsilon 1", "--epsilon", "central"),
    C("run-distributed-epsilon", RUN + " --privacy-mode distributed --epsilon 1", "--epsilon"),
    C("run-mindspore-epsilon", RUN + " --privacy-mode mindspore --epsilon 1", "--epsilon"),
    C("run-mindspore-delta", RUN + " --privacy-mode mindspore --delta 1e-3", "--delta"),
    C("run-mindspore-clip", RUN + " --privacy-mode mindspore --clip 2", "--clip"),
    C("run-central-calibration", CENTRAL + " --calibration classic", "--calibration"),
    C("run-central-neighbours", CENTRAL + " --neighbours add-remove", "--neighbours"),
    C("run-laplace-delta", RUN + " --epsilon 1 --mechanism laplace --delta 1e-3", "--delta"),
    C("run-ldp-noise-multiplier", RUN + " --noise-multiplier 1", "--noise-multiplier", "ldp",
      subprocess=True),
    C("run-mindspore-noise-multiplier", RUN + " --privacy-mode mindspore --noise-multiplier 1",
      "--noise-multiplier"),
    C("run-ldp-dropout", RUN + " --dropout-rate 0.1", "--dropout-rate"),
    C("run-central-dropout", CENTRAL + " --dropout-rate 0.1", "--dropout-rate"),
    C("run-ldp-adaptive-clip", RUN + " --adaptive-clip true", "--adaptive-clip"),
    C("run-distributed-adaptive-clip", RUN + " --privacy-mode distributed --adaptive-clip true",
      "--adaptive-clip"),
    C("run-ldp-target-quantile", RUN + " --target-quantile 0.6", "--target-quantile"),
    C("run-central-fixed-clip-lr", CENTRAL + " --clip-learning-rate 0.1",
      "--clip-learning-rate", "--adaptive-clip"),
    C("run-central-fixed-count-std", CENTRAL + " --clipped-count-stddev 1",
      "--clipped-count-stddev"),
    C("run-ldp-dp-eps", RUN + " --dp-eps 10", "--dp-eps"),
    C("run-central-dp-delta", CENTRAL + " --dp-delta 0.01", "--dp-delta"),
    C("run-ldp-dp-norm-clip", RUN + " --dp-norm-clip 1", "--dp-norm-clip"),
    C("run-ldp-mindspore-clip-rule", RUN + " --mindspore-clip-rule overwrite",
      "--mindspore-clip-rule"),
    C("run-ldp-mindspore-neighbours", RUN + " --mindspore-neighbours replace",
      "--mindspore-neighbours"),
    C("run-no-client-dp-clip", RUN + " --client-dp-clip 1", "--client-dp-clip", "--client-dp"),
    C("run-no-client-dp-noise", RUN + " --client-dp-noise-multiplier 1",
      "--client-dp-noise-multiplier"),
    C("run-no-client-dp-micro", RUN + " --client-dp-micro-batches 2",
      "--client-dp-micro-batches"),
    C("run-iid-alpha", RUN + " --alpha 0.5", "--alpha", "--partition"),
    C("run-iid-examples-per-client", RUN + " --examples-per-client 8",
      "--examples-per-client"),
    C("run-fedavg-momentum", RUN + " --server-momentum 0.5", "--server-momentum"),
    C("run-steps-and-epochs", RUN + " --local-steps 3 --local-epochs 1", "--local-steps",
      "--local-epochs"),
    C("run-coordinator-without-distributed", RUN + " --coordinator-address h:1",
      "--distributed"),
    C("run-num-processes-without-distributed", RUN + " --num-processes 2", "--distributed"),
    # ------------------------------------------------------------------ sweep
    C("sweep-config-bad-toml", SWEEP + " --config {bad_toml}", "{bad_toml}", "TOML"),
    C("sweep-config-missing", SWEEP + " --config {missing}", "{missing}", "not found"),
    C("sweep-config-binary", SWEEP + " --config {binary}", "{binary}", subprocess=True),
    C("sweep-config-folder", SWEEP + " --config {dir}", "{dir}", "folder"),
    C("sweep-config-empty", SWEEP + " --config {empty}", "{empty}", "[grid]"),
    C("sweep-config-unknown-table", SWEEP + " --config {toml_unknown_table}", "runs"),
    C("sweep-config-bad-epsilon", SWEEP + " --config {toml_bad_eps}", "epsilon"),
    C("sweep-config-unknown-field", SWEEP + " --config {toml_unknown_field}", "popluation",
      "did you mean 'population'?"),
    C("sweep-config-sweep-key-typo", SWEEP + " --config {toml_sweep_key}", "[sweep] key",
      "plot (did you mean 'plots'?)"),
    C("sweep-config-axis-typo", SWEEP + " --config {toml_axis_typo}", "missing: epsilon",
      "did you mean 'epsilon'?"),
    C("sweep-set-unknown", SWEEP + " --set neighbors=replace", "neighbors",
      "did you mean 'neighbours'?"),
    C("sweep-axis-and-flag", SWEEP + " --axis rounds=1,2 --rounds 1", "--axis rounds",
      "--rounds", "keep one"),
    C("sweep-axis-and-grid-flag", SWEEP + " --axis epsilon=1,2 --epsilon 1", "--axis epsilon",
      "--epsilon", "keep one"),
    C("sweep-flag-and-set", SWEEP + " --rounds 1 --set rounds=2", "--rounds", "--set rounds",
      "keep one"),
    C("sweep-axis-twice", SWEEP + " --axis clip=1,2 --axis clip=3", "--axis clip",
      "another --axis"),
    C("sweep-config-bad-type", SWEEP + " --config {toml_bad_type}", "population"),
    C("sweep-epsilon-neg", SWEEP + " --epsilon -1,10", "epsilon"),
    C("sweep-epsilon-text", SWEEP + " --epsilon abc", "epsilon"),
    C("sweep-epsilon-empty-item", SWEEP + " --epsilon 1,,10", "1,,10"),
    C("sweep-clients-0", SWEEP + " --clients 0,10", "clients_per_round"),
    C("sweep-clients-float", SWEEP + " --clients 1.5", "clients_per_round"),
    C("sweep-seeds-neg", SWEEP + " --seeds -1", "seed"),
    C("sweep-seeds-text", SWEEP + " --seeds x", "seed"),
    C("sweep-axis-no-equals", SWEEP + " --axis mechanism", "--axis"),
    C("sweep-axis-unknown-field", SWEEP + " --axis mechanizm=gaussian,laplace", "mechanizm"),
    C("sweep-set-no-equals", SWEEP + " --set population", "--set"),
    C("sweep-set-unknown-field", SWEEP + " --set populaton=30", "populaton"),
    C("sweep-delta-2", SWEEP + " --delta 2", "delta"),
    C("sweep-delta-rule", SWEEP + " --delta 1/foo", "delta"),
    C("sweep-rounds-0", SWEEP + " --rounds 0", "rounds"),
    C("sweep-out-proc", "sweep --no-progress --out /proc/x.csv", "--out", "not writable"),
    C("sweep-out-under-file", "sweep --no-progress --out /etc/hostname/x.csv", "--out",
      "is a file"),
    C("sweep-out-folder", "sweep --no-progress --out {dir}", "--out", "is a folder"),
    C("sweep-out-not-csv", "sweep --no-progress --out {tmp}/s.txt", "--out", ".csv"),
    C("sweep-out-foreign-csv", "sweep --no-progress --out {results}", "{results}",
      "sweep record"),
    C("sweep-ldp-noise-multiplier", SWEEP + " --noise-multiplier 1", "--noise-multiplier"),
    C("sweep-ldp-dropout", SWEEP + " --dropout-rate 0.1", "--dropout-rate"),
    C("sweep-set-dp-eps", SWEEP + " --set dp_eps=5", "dp_eps"),
    C("sweep-central-epsilon", SWEEP + " --privacy-mode central --epsilon 1,10", "--epsilon"),
    C("sweep-huge-population", SWEEP + f" --population {HUGE} --clients {HUGE}", "memory",
      "--no-memory-check"),
    C("sweep-data-dir-missing", SWEEP + " --dataset mnist --data-dir {missing}", "--data-dir",
      "does not exist", absent=("{missing}",)),
    # ------------------------------------------------------------------ dpsgd
    C("dpsgd-config-missing", DPSGD + " --config {missing}", "{missing}"),
    C("dpsgd-config-bad-toml", DPSGD + " --config {bad_toml}", "{bad_toml}"),
    C("dpsgd-config-binary", DPSGD + " --config {binary}", "{binary}"),
    C("dpsgd-config-folder", DPSGD + " --config {dir}", "{dir}"),
    C("dpsgd-config-unknown-key", DPSGD + " --config {toml_unknown_field}", "unknown key"),
    C("dpsgd-epochs-0", DPSGD + " --epochs 0", "epochs"),
    C("dpsgd-epochs-neg", DPSGD + " --epochs -1", "epochs"),
    C("dpsgd-epochs-float", DPSGD + " --epochs 1.5", "--epochs", rc=2),
    C("dpsgd-noise-neg", DPSGD + " --noise-multiplier -1", "noise_multiplier"),
    C("dpsgd-noise-nan", DPSGD + " --noise-multiplier nan", "noise_multiplier"),
    C("dpsgd-num-train-0", DPSGD + " --num-train 0", "num_train"),
    C("dpsgd-seed-neg", DPSGD + " --seed -1", "seed"),
    C("dpsgd-data-dir-missing", DPSGD + " --data-dir {missing}", "--data-dir",
      "does not exist", absent=("{missing}",)),
    C("dpsgd-out-proc", DPSGD + " --out /proc/x.csv", "--out", "not writable"),
    C("dpsgd-trace-folder", DPSGD + " --trace {dir}", "--trace", "is a folder"),
    C("dpsgd-from-trace-alone", DPSGD + " --from-trace {trace}", "--from-trace",
      "--epsilon-only"),
    C("dpsgd-no-dp-noise", DPSGD + " --no-dp --noise-multiplier 1", "--noise-multiplier",
      "--no-dp"),
    C("dpsgd-no-dp-trace", DPSGD + " --no-dp --trace {tmp}/t.csv", "--trace", "--no-dp"),
    C("dpsgd-from-trace-missing", DPSGD + " --epsilon-only --from-trace {missing}",
      "--from-trace", "{missing}"),
    C("dpsgd-from-trace-binary", DPSGD + " --epsilon-only --from-trace {binary}",
      "--from-trace", "{binary}"),
    C("dpsgd-from-trace-empty", DPSGD + " --epsilon-only --from-trace {empty}",
      "--from-trace", "{empty}"),
    C("dpsgd-sampling-unknown", DPSGD + " --sampling foo", "--sampling", rc=2),
    C("dpsgd-dp-and-no-dp", DPSGD + " --dp --no-dp", "--no-dp", rc=2),
    # ------------------------------------------------------------------ noise
    C("noise-dim-0", NOISE.replace("--dim 10", "--dim 0"), "dim"),
    C("noise-dim-neg", NOISE.replace("--dim 10", "--dim -5"), "dim"),
    C("noise-dim-float", NOISE.replace("--dim 10", "--dim 2.5"), "--dim", rc=2),
    C("noise-huge-dim-clients", NOISE.replace("--dim 10", f"--dim {HUGE}")
      .replace("--clients 1,10", f"--clients {HUGE}"), "memory", "--no-memory-check",
      subprocess=True),
    C("noise-huge-dim", NOISE.replace("--dim 10", f"--dim {HUGE}"), "memory", "--dim"),
    C("noise-huge-clients-per-client", NOISE + f" --clients {HUGE} --draw per-client "
      "--chunk-size 100000000000", "memory", "--chunk-size"),
    C("noise-clients-0", NOISE.replace("--clients 1,10", "--clients 0,10"), "clients"),
    C("noise-clients-neg", NOISE.replace("--clients 1,10", "--clients -1"), "clients"),
    C("noise-clients-float", NOISE.replace("--clients 1,10", "--clients 1.5"), "clients"),
    C("noise-clients-text", NOISE.replace("--clients 1,10", "--clients ten"), "clients"),
    C("noise-clients-empty", NOISE.replace("--clients 1,10", "--clients 1,"), "clients"),
    C("noise-trials-0", NOISE.replace("--trials 2", "--trials 0"), "trials"),
    C("noise-epsilon-0", NOISE.replace("--epsilon 1", "--epsilon 0"), "epsilon"),
    C("noise-epsilon-inf", NOISE.replace("--epsilon 1", "--epsilon inf"), "epsilon"),
    C("noise-epsilon-nan", NOISE.replace("--epsilon 1", "--epsilon nan"), "epsilon"),
    C("noise-delta-0", NOISE + " --delta 0", "delta"),
    C("noise-delta-2", NOISE + " --delta 2", "delta"),
    C("noise-laplace-delta", NOISE + " --mechanism laplace --delta 1e-5", "--delta", "laplace"),
    C("noise-laplace-calibration", NOISE + " --mechanism laplace --calibration classic",
      "--calibration"),
    C("noise-clip-0", NOISE + " --clip 0", "clip"),
    C("noise-clip-inf", NOISE + " --clip inf", "clip"),
    C("noise-clip-nan", NOISE + " --clip nan", "clip"),
    C("noise-chunk-0", NOISE + " --chunk-size 0", "chunk"),
    C("noise-seed-neg", NOISE + " --seed -1", "seed"),
    C("noise-aggregate-chunk", NOISE + " --draw aggregate --chunk-size 4", "--chunk-size",
      "--draw"),
    C("noise-dim-and-model", NOISE + " --model lenet5", "--model", rc=2),
    C("noise-no-dim", "noise --epsilon 1", "--dim", rc=2),
    C("noise-out-proc", NOISE + " --out /proc/x.csv", "--out", "not writable"),
    C("noise-out-folder", NOISE + " --out {dir}", "--out", "is a folder"),
    C("noise-plot-under-file", NOISE + " --plot /etc/hostname/x.png", "--plot", "is a file"),
    C("noise-plot-suffix", NOISE + " --plot {tmp}/noise.txt", "--plot", ".png"),
    # ------------------------------------------------------------------ account
    C("account-no-kind", "account", "<kind>", rc=2),
    C("account-ldp-no-sensitivity", "account ldp --sigma 1 --delta 1e-5", "--sensitivity",
      rc=2),
    C("account-ldp-no-sigma", "account ldp --sensitivity 1 --delta 1e-5", "sigma"),
    C("account-ldp-sigma-neg", ACC_LDP.replace("--sigma 4", "--sigma -1"), "sigma"),
    C("account-ldp-sigma-nan", ACC_LDP.replace("--sigma 4", "--sigma nan"), "sigma"),
    C("account-ldp-sensitivity-0", ACC_LDP.replace("--sensitivity 2", "--sensitivity 0"),
      "sensitivity"),
    C("account-ldp-rounds-neg", ACC_LDP + " --rounds -1", "rounds"),
    C("account-ldp-delta-2", ACC_LDP.replace("1e-5", "2"), "delta"),
    C("account-ldp-laplace-sigma", "account ldp --mechanism laplace --sigma 1 --scale 1 "
      "--sensitivity 1", "--sigma"),
    C("account-ldp-gaussian-scale", ACC_LDP + " --scale 1", "--scale"),
    C("account-ldp-laplace-analytic", "account ldp --mechanism laplace --scale 1 "
      "--sensitivity 1 --method analytic", "analytic"),
    C("account-fed-cohort-over-population", ACC_FED.replace("--population 1000",
      "--population 5"), "clients_per_round"),
    C("account-fed-population-0", ACC_FED.replace("--population 1000", "--population 0"),
      "population"),
    C("account-fed-rounds-neg", ACC_FED.replace("--rounds 10", "--rounds -1"), "rounds"),
    C("account-fed-delta-0", ACC_FED.replace("1e-5", "0"), "delta"),
    C("account-fed-z-neg", ACC_FED.replace("--noise-multiplier 1", "--noise-multiplier -1"),
      "noise_multiplier"),
    C("account-fed-target-0", ACC_FED.replace("--noise-multiplier 1", "--target-epsilon 0"),
      "epsilon"),
    C("account-fed-z-and-target", ACC_FED + " --target-epsilon 1", "--target-epsilon", rc=2),
    C("account-fed-fixed-pld", ACC_FED + " --sampling fixed --method pld", "fixed"),
    C("account-sgd-batch-0", ACC_SGD.replace("--batch-size 256", "--batch-size 0") +
      " --steps 10", "batch_size"),
    C("account-sgd-batch-over-n", ACC_SGD.replace("--batch-size 256", "--batch-size 70000")
      + " --steps 10", "batch_size"),
    C("account-sgd-epochs-neg", ACC_SGD + " --epochs -1", "epochs"),
    C("account-sgd-steps-neg", ACC_SGD + " --steps -1", "steps"),
    C("account-sgd-mindarmour-target", ACC_SGD.replace("--noise-multiplier 1.1",
      "--target-epsilon 1") + " --epochs 1 --method mindarmour", "mindarmour"),
    C("account-sgd-z-nan", ACC_SGD.replace("1.1", "nan") + " --steps 10", "noise_multiplier"),
    C("account-fed-huge-rounds", ACC_FED.replace("--rounds 10", f"--rounds {HUGE}") +
      " --sampling poisson --method pld", "--rounds", "memory"),
    C("account-fed-default-fixed-pld", ACC_FED + " --method pld", "--sampling poisson",
      "--method rdp"),
    # ------------------------------------------------------------------ calibrate
    C("calibrate-epsilon-0", CAL.replace("--epsilon 1", "--epsilon 0"), "epsilon"),
    C("calibrate-epsilon-nan", CAL.replace("--epsilon 1", "--epsilon nan"), "epsilon"),
    C("calibrate-epsilon-inf", CAL.replace("--epsilon 1", "--epsilon inf"), "epsilon"),
    C("calibrate-no-delta", "calibrate --epsilon 1 --clip 1", "delta"),
    C("calibrate-laplace-delta", "calibrate --mechanism laplace --epsilon 1 --delta 1e-5 "
      "--clip 1", "delta"),
    C("calibrate-laplace-method", "calibrate --mechanism laplace --epsilon 1 --clip 1 "
      "--method classic", "--method"),
    C("calibrate-clip-neg", CAL.replace("--clip 1", "--clip -1"), "clip"),
    C("calibrate-delta-1", CAL.replace("1e-5", "1"), "delta"),
    C("calibrate-mindspore-huge-eps", "calibrate --epsilon 1000 --delta 1e-5 --clip 1 "
      "--method mindspore", "709"),
    C("calibrate-epsilon-text", CAL.replace("--epsilon 1", "--epsilon lots"), "--epsilon",
      rc=2),
    # ------------------------------------------------------------------ audit
    C("audit-epsilon-0", AUDIT.replace("--epsilon 1", "--epsilon 0"), "epsilon"),
    C("audit-trials-0", AUDIT.replace("--trials 1000", "--trials 0"), "trials"),
    C("audit-trials-huge", AUDIT.replace("--trials 1000", f"--trials {HUGE}"), "--trials",
      "2**32"),
    C("audit-confidence-1", AUDIT + " --confidence 1", "confidence"),
    C("audit-dim-0", AUDIT + " --dim 0", "dim"),
    C("audit-dim-huge", AUDIT + f" --dim {HUGE}", "memory", "--dim"),
    C("audit-rr-k-1", AUDIT + " --mechanism rr --k 1", "k"),
    C("audit-laplace-sampler", AUDIT + " --mechanism laplace --sampler icdf", "--sampler"),
    C("audit-rr-delta", AUDIT + " --mechanism rr --delta 1e-5", "--delta"),
    C("audit-rr-clip", AUDIT + " --mechanism rr --clip 2", "--clip"),
    C("audit-gaussian-k", AUDIT + " --k 4", "--k"),
    C("audit-laplace-method", AUDIT + " --mechanism laplace --method classic", "--method"),
    C("audit-rr-neighbours", AUDIT + " --mechanism rr --neighbours add-remove", "--neighbours"),
    C("audit-clip-neg", AUDIT + " --clip -1", "clip"),
    C("audit-delta-0", AUDIT + " --delta 0", "delta"),
    C("audit-seed-neg", AUDIT + " --seed -1", "seed"),
    # ------------------------------------------------------------------ plot
    C("plot-binary", PLOT.replace("{results}", "{binary}"), "{binary}", subprocess=True),
    C("plot-gzip", PLOT.replace("{results}", "{gz}"), "{gz}"),
    C("plot-latin1", PLOT.replace("{results}", "{latin1}"), "{latin1}"),
    C("plot-empty", PLOT.replace("{results}", "{empty}"), "{empty}"),
    C("plot-header-only", PLOT.replace("{results}", "{header}"), "{header}", "no rows"),
    C("plot-truncated-header", PLOT.replace("{results}", "{cut}"), "{cut}"),
    C("plot-ragged", PLOT.replace("{results}", "{ragged}"), "{ragged}"),
    C("plot-missing", PLOT.replace("{results}", "{missing}"), "{missing}", "not found"),
    C("plot-folder", PLOT.replace("{results}", "{dir}"), "{dir}", "folder"),
    C("plot-kind-unknown", PLOT.replace("convergence", "histogram"), "--kind", rc=2),
    C("plot-out-suffix", PLOT.replace("fig.png", "fig.txt"), "--out", ".png"),
    C("plot-out-proc", PLOT.replace("{tmp}/fig.png", "/proc/x.png"), "--out", "not writable"),
    C("plot-out-folder", PLOT.replace("{tmp}/fig.png", "{dir}"), "--out", "is a folder"),
    C("plot-out-under-file", PLOT.replace("{tmp}/fig.png", "/etc/hostname/x.png"), "--out",
      "is a file"),
    C("plot-where-no-equals", PLOT + " --where epsilon", "--where"),
    C("plot-where-unknown-column", PLOT + " --where nosuch=1", "nosuch"),
    C("plot-where-no-rows", PLOT + " --where epsilon=12345", "no rows"),
    C("plot-metric-unknown", PLOT + " --metric nosuch", "--metric", "nosuch"),
    C("plot-metric-text", PLOT + " --metric cell", "--metric cell", "no numbers"),
    C("plot-metric-noise-kind", PLOT.replace("{results}", "{noise_csv}")
      .replace("convergence", "noise-vs-clients") + " --metric loss", "--metric", "noise norm"),
    C("plot-noise-table-as-accuracy", PLOT.replace("{results}", "{noise_csv}")
      .replace("convergence", "accuracy-vs-epsilon"), "accuracy-vs-epsilon"),
    C("plot-wrong-columns", PLOT.replace("{results}", "{text}"), "convergence"),
    # ------------------------------------------------------------------ the command itself
    C("no-command", "", "command", rc=2),
    C("unknown-command", "frobnicate", "frobnicate", rc=2),
    C("host-devices-env", "calibrate --epsilon 1 --delta 1e-5 --clip 1", "LDPSIM_HOST_DEVICES",
      subprocess=True),
]

#: Extra environment of subprocess cases.
CASE_ENV = {"host-devices-env": {"LDPSIM_HOST_DEVICES": "many"}}

if os.geteuid() != 0:  # root reads any file, so "unreadable" needs a normal user
    CASES.append(C("plot-unreadable", PLOT.replace("{results}", "{unreadable}"),
                   "{unreadable}", "permission"))


RESULTS_CSV = """\
epsilon,clients_per_round,seed,round,accuracy,loss,noise_norm,cell
1,10,0,1,0.1,2.3,5.0,clients_per_round=10;epsilon=1;seed=0
1,10,0,2,0.2,2.2,5.0,clients_per_round=10;epsilon=1;seed=0
inf,10,0,1,0.5,1.3,0.0,clients_per_round=10;epsilon=inf;seed=0
inf,10,0,2,0.6,1.2,0.0,clients_per_round=10;epsilon=inf;seed=0
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad_inputs")
    f = {"tmp": root, "dir": root / "a_folder", "missing": root / "no" / "such_dir",
         "unreadable": root / "secret.csv"}
    f["dir"].mkdir()
    contents = {
        "text": "just,some\ntext,here\n",
        "empty": "",
        "results": RESULTS_CSV,
        "header": RESULTS_CSV.splitlines()[0] + "\n",
        "cut": "epsilon,clients_per_ro",
        "ragged": "epsilon,accuracy\n1,0.5\n1,0.5,7,8\n\"unclosed,1\n",
        "noise_csv": "clients,noise_norm_mean,noise_norm_std,noise_norm_theory\n1,2,0.1,2\n",
        "trace": "step,clip_norm,noise_multiplier\n",
        "bad_toml": "[grid\nepsilon = [1,\n",
        "toml_unknown_table": "[grid]\nepsilon=[1]\nclients_per_round=[2]\nseed=[0]\n[runs]\n",
        "toml_bad_eps": "[grid]\nepsilon=[-1]\nclients_per_round=[2]\nseed=[0]\n",
        "toml_unknown_field": "[grid]\nepsilon=[1]\nclients_per_round=[2]\nseed=[0]\n"
                              "[run]\npopluation=10\n",
        "toml_bad_type": "[grid]\nepsilon=[1]\nclients_per_round=[2]\nseed=[0]\n"
                         "[run]\npopulation=\"many\"\n",
        "toml_sweep_key": "[sweep]\nplot=true\n[grid]\nepsilon=[1]\nclients_per_round=[2]\n"
                          "seed=[0]\n",
        "toml_axis_typo": "[grid]\nepsilons=[1]\nclients_per_round=[2]\nseed=[0]\n",
    }
    suffix = {"bad_toml": ".toml", "toml_unknown_table": ".toml", "toml_bad_eps": ".toml",
              "toml_unknown_field": ".toml", "toml_bad_type": ".toml",
              "toml_sweep_key": ".toml", "toml_axis_typo": ".toml"}
    for name, text in contents.items():
        f[name] = root / f"{name}{suffix.get(name, '.csv')}"
        f[name].write_text(text)
    f["binary"] = root / "binary.csv"
    f["binary"].write_bytes(bytes(range(256)) * 8)
    f["gz"] = root / "packed.csv"
    f["gz"].write_bytes(gzip.compress(RESULTS_CSV.encode()))
    f["latin1"] = root / "latin1.csv"
    f["latin1"].write_bytes("epsilon,accuracy,caf\xe9\n1,0.5,x\n".encode("latin-1"))
    f["unreadable"].write_text(RESULTS_CSV)
    f["unreadable"].chmod(0)
    return {k: str(v) for k, v in f.items()}


def _argv(case: Case, files: dict[str, str]) -> list[str]:
    return [token.format(**files) for token in shlex.split(case.argv)]


@contextlib.contextmanager
def _time_limit(seconds: int):
    def expire(signum, frame):  # noqa: ARG001
        raise TimeoutError(f"case ran over {seconds} s: the check did not stop it before work")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _invoke(argv: list[str]) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with _time_limit(CASE_LIMIT_S):
                rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - the point: any escape is a failure
            err.write(traceback.format_exc())
            rc = "raised"
    return rc, out.getvalue(), err.getvalue()


def _check(case: Case, files: dict[str, str], rc, out: str, err: str) -> None:
    where = f"{case.id}: ldpsim {case.argv}\nstdout: {out[-2000:]}\nstderr: {err[-4000:]}"
    assert "Traceback" not in out + err, where
    assert isinstance(rc, int) and rc != 0, where
    assert rc == case.rc if case.rc is not None else rc in (1, 2), where
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, where
    assert "error" in lines[0], where
    for word in case.expect:
        assert word.format(**files) in lines[0], f"{word!r} missing; {where}"
    for path in case.absent:
        assert not Path(path.format(**files)).exists(), f"{path} was created; {where}"


def test_table_is_large_enough():
    assert len(CASES) >= 110
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [c for c in CASES if c.id not in CASE_ENV],
                         ids=lambda c: c.id)
def test_bad_input_in_process(case, files):
    argv = _argv(case, files)
    start = time.perf_counter()
    rc, out, err = _invoke(argv)
    _check(case, files, rc, out, err)
    assert time.perf_counter() - start < CASE_LIMIT_S


@pytest.fixture(scope="module")
def subprocess_results(files):
    """Every subprocess case, started at once and collected (the real ``ldpsim`` command)."""
    exe = [sys.executable, "-m", "ldpsim"]
    # A fresh shell's environment: in-process cases have set XLA_FLAGS (host devices).
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONWARNINGS"] = "default"
    procs = {}
    for case in CASES:
        if case.subprocess:
            procs[case.id] = subprocess.Popen(
                exe + _argv(case, files), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env={**env, **CASE_ENV.get(case.id, {})})
    results = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\n(killed: ran over 60 s)"
        results[name] = (proc.returncode, out, err)
    return results


@pytest.mark.parametrize("case", [c for c in CASES if c.subprocess], ids=lambda c: c.id)
def test_bad_input_subprocess(case, files, subprocess_results):
    rc, out, err = subprocess_results[case.id]
    _check(case, files, rc, out, err)


# ---------------------------------------------------------------------------- what must work


def _parse(argv: list[str]):
    from ldpsim._src.cli import build_parser
    from ldpsim._src.cli._parsing import given_dests

    parser = build_parser()
    args = parser.parse_args(argv)
    args._given = given_dests(parser, argv)
    return args


@pytest.mark.parametrize("extra", [
    "", "--privacy-mode central", "--privacy-mode distributed", "--privacy-mode mindspore",
    "--epsilon 1 --delta 1e-3 --clip 0.5 --calibration classic --neighbours add-remove",
    "--epsilon 1 --mechanism laplace",
    "--privacy-mode central --noise-multiplier 0.5 --adaptive-clip true --target-quantile 0.6 "
    "--clip-learning-rate 0.1 --clipped-count-stddev 1 --delta 1e-3",
    "--privacy-mode distributed --noise-multiplier 0.5 --dropout-rate 0.1",
    "--privacy-mode mindspore --dp-eps 10 --dp-delta 0.001 --dp-norm-clip 0.5 "
    "--mindspore-clip-rule overwrite --mindspore-neighbours replace",
    "--client-dp true --client-dp-clip 2 --client-dp-noise-multiplier 1 --batch-size 4 "
    "--client-dp-micro-batches 2",
    "--partition sampled --alpha 0.5 --examples-per-client 8",
    "--partition dirichlet --alpha 0.5",
    "--server-optimizer fedavgm --server-momentum 0.5",
    "--local-epochs 1",
    "--dataset mnist --data-source idx --data-dir {tmp}",
    "--no-memory-check",
], ids=lambda s: s or "defaults")
def test_options_that_apply_and_defaults_pass_the_checks(extra, tmp_path):
    """The checks refuse only what the user typed and the mode does not use (no JAX work)."""
    from ldpsim._src.cli._guards import check_run_args

    args = _parse(shlex.split(RUN) + shlex.split(extra.format(tmp=tmp_path)))
    check_run_args(args)


@pytest.mark.parametrize("extra", [
    "", "--privacy-mode central --epsilon inf", "--axis mechanism=gaussian,laplace",
    "--set dp_eps=5 --privacy-mode mindspore --epsilon inf",
    "--axis privacy_mode=ldp,distributed --set dropout_rate=0.1 --epsilon inf",
])
def test_sweep_checks_pass_what_applies(extra, tmp_path):
    from ldpsim._src.cli._guards import check_sweep_args
    from ldpsim._src.cli.cmd_sweep import build_config

    args = _parse(shlex.split(f"sweep --out {tmp_path}/s.csv") + shlex.split(extra))
    config, out, _ = build_config(args)
    if "distributed" in extra:  # dropout applies to the distributed cells only
        with pytest.raises(Exception, match="privacy_mode=ldp"):
            check_sweep_args(args, config, out)
        return
    check_sweep_args(args, config, out)
    assert not out.exists()  # nothing written by the checks


def test_memory_estimates_and_override():
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.cli._memory import check_memory, check_run_memory, host_memory_limit, run_memory

    limit, what = host_memory_limit()
    assert limit > 2**28 and what
    small, _ = run_memory(dict(dataset="synthetic", population=1000, clients_per_round=100))
    assert 1e8 < small < 1e9  # ~270 KB per synthetic client: the padded population dominates
    virtual, _ = run_memory(dict(dataset="mnist", partition="sampled", population=10**12,
                                 clients_per_round=1000))
    assert virtual < 1e6  # a virtual population costs O(cohort)
    huge = dict(dataset="synthetic", population=10**12, clients_per_round=10**12)
    with pytest.raises(LdpsimError, match="--no-memory-check"):
        check_run_memory(huge)
    check_run_memory(huge, skip=True)
    with pytest.raises(LdpsimError, match=r"needs about .* but this host has"):
        check_memory(2.0 * limit, "x", "ask for less")
    for cmd in ("run", "sweep", "noise --dim 1 --epsilon 1", "audit --epsilon 1"):
        assert _parse(shlex.split(cmd) + ["--no-memory-check"]).no_memory_check


def test_plot_warns_about_incomplete_cells(tmp_path):
    rows = RESULTS_CSV.splitlines()
    done = [r for r in rows if "epsilon=inf" in r]       # cell epsilon=inf: rounds 1, 2
    partial = [r for r in rows if "epsilon=1;" in r][:1]   # cell epsilon=1: round 1 of 2
    torn = rows[2][:20]                                    # a line cut mid-write
    csv = tmp_path / "r.csv"
    csv.write_text("\n".join([rows[0], *done, *partial, torn]))
    rc, out, err = _invoke(["plot", str(csv), "--kind", "convergence", "--out",
                            str(tmp_path / "f.png")])
    assert rc == 0 and (tmp_path / "f.png").is_file(), err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("wrote"), err
    warning = lines[0]
    assert warning.startswith("ldpsim plot: warning:") and "r.csv" in warning
    assert "clients_per_round=10;epsilon=1;seed=0 (last round 1 of 2)" in warning
    assert "epsilon=inf" not in warning and "cut off" in warning
    # With the sweep record: its rounds, unfinished cells and grid cells with no rows.
    csv.write_text("\n".join([rows[0], *done, *partial]) + "\n")
    (tmp_path / "r.sweep.json").write_text(
        '{"fingerprint": "x", "done": ["clients_per_round=10;epsilon=inf;seed=0"], "config": '
        '{"base": {"rounds": 3}, "grid": {"epsilon": [1, "inf"], "clients_per_round": [10, 100], '
        '"seed": [0]}}}')
    rc, out, err = _invoke(["plot", str(csv), "--kind", "convergence", "--out",
                            str(tmp_path / "f.png")])
    warning = err.strip().splitlines()[0]
    assert rc == 0 and "2 incomplete cell(s)" in warning and "of 3" in warning
    assert "2 of 4 grid cells have no rows yet" in warning


def test_complete_results_draw_without_warning(files, tmp_path):
    rc, out, err = _invoke(["plot", files["results"], "--kind", "convergence", "--out",
                            str(tmp_path / "f.png")])
    assert rc == 0 and "warning" not in err, err


def test_every_help_shows_the_defaults():
    import argparse

    from ldpsim._src.cli import build_parser
    from ldpsim._src.cli._parsing import _walk

    missing = []
    for parser in _walk(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            default = action.default
            if (not action.option_strings or action.nargs == 0 or default in (None, [])
                    or default is argparse.SUPPRESS or isinstance(action, argparse._HelpAction)):
                continue
            text = formatter._expand_help(action) if action.help else ""
            if "default" not in text.lower():
                missing.append(f"{parser.prog} {action.option_strings[0]}")
    assert not missing, missing


def test_sweep_file_setting_for_its_own_mechanisms_survives_narrowing(tmp_path):
    """A sweep file whose grid lists gaussian (delta applies) and privunitg, narrowed on the
    command line to privunitg: the file's delta applies to none of this run's cells and is
    not an error; a --delta typed on the command line with that narrowing still is."""
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.cli._guards import check_sweep_args
    from ldpsim._src.cli.cmd_sweep import build_config

    cfg = tmp_path / "mechs.toml"
    cfg.write_text('[grid]\nmechanism = ["gaussian", "privunitg"]\nepsilon = [8]\n'
                   'clients_per_round = [10]\nseed = [0]\n'
                   '[run]\ndataset = "synthetic"\npopulation = 30\nrounds = 1\n'
                   'delta = "1/population"\n')
    out = tmp_path / "s.csv"
    args = _parse(["sweep", "--config", str(cfg), "--mechanism", "privunitg", "--out", str(out)])
    config, out, _ = build_config(args)
    check_sweep_args(args, config, out)
    typed = _parse(["sweep", "--config", str(cfg), "--mechanism", "privunitg", "--delta", "1e-5",
                    "--out", str(out)])
    config, out, _ = build_config(typed)
    with pytest.raises(LdpsimError, match="--delta does not apply to --mechanism privunitg"):
        check_sweep_args(typed, config, out)
    # and a file that never names a delta-using mechanism still refuses its delta
    cfg.write_text(cfg.read_text().replace('"gaussian", ', ""))
    args = _parse(["sweep", "--config", str(cfg), "--out", str(out)])
    config, out, _ = build_config(args)
    with pytest.raises(LdpsimError, match="delta"):
        check_sweep_args(args, config, out)


def test_sweep_file_option_of_one_mechanism_goes_to_its_cells_only(tmp_path):
    """A randomizer's own option in a sweep file's [run] (ProjUnit's projunit_simulation
    beside gaussian cells): the projunit cells take it, the others run without it, in the
    full grid and narrowed to either side; a file whose mechanisms never use it refuses it."""
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.cli._guards import check_sweep_args
    from ldpsim._src.cli.cmd_sweep import build_config
    from ldpsim._src.fl.config import SimulationConfig

    cfg = tmp_path / "mechs.toml"
    cfg.write_text('[grid]\nmechanism = ["gaussian", "projunit"]\nepsilon = [8]\n'
                   'clients_per_round = [10]\nseed = [0]\n'
                   '[run]\ndataset = "synthetic"\npopulation = 30\nrounds = 1\n'
                   'projunit_simulation = "law"\n')
    out = tmp_path / "s.csv"
    for narrow, want in ([], {"gaussian": "report", "projunit": "law"}), \
            (["--mechanism", "gaussian"], {"gaussian": "report"}), \
            (["--mechanism", "projunit"], {"projunit": "law"}):
        args = _parse(["sweep", "--config", str(cfg), *narrow, "--out", str(out)])
        config, out, _ = build_config(args)
        check_sweep_args(args, config, out)
        got = {c.axes["mechanism"]: SimulationConfig(**c.params).projunit_simulation
               for c in config.cells()}
        assert got == want, (narrow, got)
    cfg.write_text(cfg.read_text().replace(', "projunit"', ""))
    args = _parse(["sweep", "--config", str(cfg), "--out", str(out)])
    config, out, _ = build_config(args)
    with pytest.raises(LdpsimError, match="projunit_simulation"):
        check_sweep_args(args, config, out)
