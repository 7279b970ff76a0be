"""Tests for the centralised DP-SGD trainer (ldpsim.fl.central) and `ldpsim dpsgd`."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim.cli import main
from ldpsim.fl.central import CSV_COLUMNS, DpsgdConfig, load_config, train_dpsgd
from ldpsim.privacy.accounting import dpsgd_epsilon
from ldpsim.privacy.monitors import RDPMonitor

# A small, fast variant of experiments/mindarmour_lenet_dpsgd.toml: an MLP on 2,048 MNIST
# rows, 32 steps of batch 64 with 32 micro-batches, Gaussian noise, Linear adaptive clipping.
SMALL = """
name = "small"
[data]
dataset = "mnist"
num_train = 2048
num_test = 1000
[model]
model = "mlp"
[train]
epochs = 1
batch_size = 64
optimizer = "momentum"
learning_rate = 0.05
momentum = 0.9
[dp]
micro_batches = 32
norm_bound = 1.0
noise_multiplier = 0.5
clip_mechanism = "Linear"
[accounting]
delta = 1e-5
pld = "final"
"""


def test_cli_learns_and_reports_epsilon(tmp_path, data_root):
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL)
    out = tmp_path / "res.csv"
    assert main(["dpsgd", "--config", str(cfg), "--data-dir", str(data_root), "--out", str(out),
                 "--no-progress"]) == 0
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and set(CSV_COLUMNS) <= set(rows[0])
    row = {k: float(v) for k, v in rows[0].items() if k != "dp"}
    assert row["step"] == 32
    # Chance is 0.1 (binomial sd of an accuracy on 1000 test rows <= 0.016).
    assert row["accuracy"] > 0.5
    # ε wiring: q = 64/2048, 32 steps, δ = 1e-5, z = 0.5 (add/remove one example).
    kw = dict(noise_multiplier=0.5, batch_size=64, num_examples=2048, steps=32, delta=1e-5)
    assert row["epsilon_rdp"] == pytest.approx(dpsgd_epsilon(**kw, method="rdp").epsilon,
                                               rel=1e-9)
    assert row["epsilon_pld"] == pytest.approx(dpsgd_epsilon(**kw, method="pld").epsilon,
                                               rel=1e-9)
    monitor = RDPMonitor(2048, 64, 0.5, target_delta=1e-5, noise_decay_mode=None,
                         per_print_times=32)
    assert row["epsilon_monitor"] == pytest.approx(monitor.run_epochs(1)[0][0], rel=1e-9)
    # Classic conversion over 11 orders is looser than dp_accounting's; PLD is the tightest.
    assert row["epsilon_monitor"] > row["epsilon_rdp"] > row["epsilon_pld"] > 0
    # Linear adaptive clipping moved C by at most η = 0.001 per step.
    assert abs(row["clip_norm"] - 1.0) <= 0.001 * 32 * 1.5
    assert row["effective_noise_multiplier"] == pytest.approx(0.5 / row["clip_norm"], rel=1e-5)


def test_no_dp_learns_without_epsilon(data_root):
    cfg = load_config(None, data_dir=str(data_root), dp=False, model="mlp", num_train=2048,
                      num_test=1000, epochs=1, batch_size=64, learning_rate=0.05)
    (row,) = train_dpsgd(cfg)
    assert row["accuracy"] > 0.7
    assert all(math.isnan(row[k]) for k in ("epsilon_monitor", "epsilon_rdp", "epsilon_pld"))


def test_config_errors(tmp_path):
    with pytest.raises(LdpsimError, match="micro_batches"):
        DpsgdConfig(batch_size=100, micro_batches=32)
    with pytest.raises(LdpsimError, match="AdaGaussian"):
        DpsgdConfig(noise_mechanism="AdaGaussian", noise_decay="Time")  # with clip_mechanism
    with pytest.raises(LdpsimError, match="noise_decay"):
        DpsgdConfig(noise_decay="Time")
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nepochz = 3\n")
    with pytest.raises(LdpsimError, match="unknown key 'train.epochz'"):
        load_config(bad)
    bad.write_text("[a]\nepochs = 3\n[b]\nepochs = 4\n")
    with pytest.raises(LdpsimError, match="twice"):
        load_config(bad)
    # The experiment file parses to the tutorial's settings; CLI overrides win.
    cfg = load_config("experiments/mindarmour_lenet_dpsgd.toml", epochs=2, dp=False)
    assert (cfg.batch_size, cfg.micro_batches, cfg.learning_rate, cfg.momentum) == (
        256, 32, 0.01, 0.9)
    assert (cfg.noise_multiplier, cfg.clip_mechanism, cfg.epochs, cfg.dp) == (
        0.05, "Linear", 2, False)
    assert main(["dpsgd", "--config", str(bad)]) == 2


def test_epoch_permutation_is_a_fresh_permutation_per_epoch():
    from ldpsim.fl.central import epoch_permutation
    import jax

    key = jax.random.key(0)
    a = np.asarray(epoch_permutation(key, 0, 100, 3, 32))
    b = np.asarray(epoch_permutation(key, 1, 100, 3, 32))
    assert a.shape == (3, 32) and len(set(a.ravel())) == 96 and a.max() < 100
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, np.asarray(epoch_permutation(key, 0, 100, 3, 32)))


def test_kernel_init_options():
    import jax
    from ldpsim.fl.central import _redraw_kernels

    with pytest.raises(LdpsimError, match="kernel_init"):
        DpsgdConfig(kernel_init="he_uniformish")
    with pytest.raises(LdpsimError, match="not both"):
        DpsgdConfig(kernel_init="he_normal", kernel_init_stddev=0.05)
    # He-normal: truncated normal with std sqrt(2 / fan_in) (fan_in = 5*5*6 = 150 for an
    # HWIO kernel 5x5x6x16, 400 for a dense [400, 120]); biases untouched.  The sample std of
    # n draws has relative SE ~ 1/sqrt(2n) (< 0.03 here); 5 SE gives a false-failure rate < 1e-6.
    params = {"conv": {"kernel": np.zeros((5, 5, 6, 16), np.float32), "bias": np.ones(16)},
              "fc": {"kernel": np.zeros((400, 120), np.float32)}}
    out = _redraw_kernels(params, jax.random.key(0), jax.nn.initializers.he_normal())
    for name, fan_in in (("conv", 150), ("fc", 400)):
        k = np.asarray(out[name]["kernel"])
        rel_se = 1 / math.sqrt(2 * k.size)
        assert abs(k.std() / math.sqrt(2 / fan_in) - 1) < 5 * rel_se
    np.testing.assert_array_equal(out["conv"]["bias"], 1.0)
