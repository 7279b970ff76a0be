"""Tests for the centralised DP-SGD trainer (ldpsim._src.fl.dpsgd) and `ldpsim dpsgd`."""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from ldpsim import LdpsimError
from ldpsim.cli import main
from ldpsim._src.fl.dpsgd.batches import poisson_capacity, poisson_sample
from ldpsim._src.fl.dpsgd.config import CSV_COLUMNS, DpsgdConfig, load_config
from ldpsim._src.fl.dpsgd.guarantee import privacy_setting
from ldpsim._src.fl.dpsgd.ledger import epsilon_by_epoch
from ldpsim._src.fl.dpsgd.steps import make_poisson_epoch_fn, presummed_dp_aggregate
from ldpsim._src.fl.dpsgd.train import train_dpsgd
from ldpsim.models import get_model
from ldpsim._src.privacy.accountants.accounting import dpsgd_epsilon
from ldpsim._src.privacy.accountants.monitors import RDPMonitor

# A small, fast variant of experiments/mindarmour_lenet_dpsgd.toml: an MLP on 2,048 MNIST
# rows, 32 steps of (expected) batch 64 with 32 micro-batches, Gaussian noise, Linear
# adaptive clipping.
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
delta = 1e-3  # the sampler floor (q * Phi(4 - 6.76) = 9e-5) is below it
pld = "final"
"""
STRING_COLUMNS = ("dp", "sampling", "neighbouring", "sensitivity", "accounting")
# SMALL's fraction release: fraction_stddev 0.01 on β/M with M = 32 micro-batches, whose
# sensitivity is 1/M: multiplier 0.01 · 32.
Z_FRACTION = 0.32


def _read_csv(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [{k: (v if k in STRING_COLUMNS else float(v)) for k, v in r.items()} for r in rows]


def _poisson_epsilon(z, q, steps, delta, accountant):
    """Independent: dp_accounting's Poisson-sampled Gaussian, add/remove one example."""
    acc = accountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
    return acc.get_epsilon(delta)


def _heterogeneous_poisson_rdp(zs, q, delta, every=None):
    """Independent: one dp_accounting event per step, each with its own multiplier; with
    ``every``, the ε after every ``every`` steps."""
    acc, out = dp_accounting.rdp.RdpAccountant(), []
    for t, z in enumerate(zs, start=1):
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(float(z))))
        if every is not None and t % every == 0:
            out.append(acc.get_epsilon(delta))
    return out if every is not None else acc.get_epsilon(delta)


def _step_multipliers(clip, *, noise=0.5, bound=1.0, s=2, z_fraction=Z_FRACTION):
    """Independent: 1/z_t² = (s·C_t/(b·m))² + 1/z_f² (value and fraction, same batch)."""
    clip = np.asarray(clip, np.float64)
    return 1.0 / np.sqrt((s * clip / (bound * noise)) ** 2 + 1.0 / z_fraction**2)


@pytest.fixture(scope="module")
def adaptive_cli_runs(tmp_path_factory, data_root) -> dict:
    """The two adaptive-clipping trainings of ``ldpsim dpsgd`` below (Poisson-sampled and
    shuffled batches), run by the CLI's ``main`` in ONE child process with XLA's default
    options, as users compile.  Their cost is executing the per-micro-batch clipping and
    noise of 32 steps, not compiling: the two tests took 69 CPU-s with the suite's options
    (which skip LLVM's optimisation) in-process, 52 with this child (pytest -p no:xdist).  Returns, per run, its exit status, its standard output and the folder of
    its files (the config, the CSV, the per-step trace)."""
    import json

    from conftest import run_with_xla_defaults

    folder = tmp_path_factory.mktemp("dpsgd")
    (folder / "poisson.toml").write_text(SMALL)
    # Shuffled batches are not amplified: the sampler floor Φ(4 − 6.76) = 2.9e-3 of the
    # value release (multiplier 0.25) needs δ above it for a finite ε.
    (folder / "shuffle.toml").write_text(SMALL.replace("delta = 1e-3", "delta = 1e-2"))
    argv = {
        # --pld off: PLD is not computed for differing multipliers anyway.
        "poisson": ["dpsgd", "--config", str(folder / "poisson.toml"), "--data-dir",
                    str(data_root), "--out", str(folder / "res.csv"), "--trace",
                    str(folder / "steps.csv"), "--pld", "off", "--no-progress"],
        "shuffle": ["dpsgd", "--config", str(folder / "shuffle.toml"), "--data-dir",
                    str(data_root), "--sampling", "shuffle", "--json", "--no-progress",
                    "--trace", str(folder / "shuffle_steps.csv")],
    }
    out = run_with_xla_defaults(
        "import contextlib, io, json\nfrom ldpsim.cli import main\nout = {}\n"
        f"for name, args in {argv!r}.items():\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        out[name] = [main(args)]\n"
        "    out[name].append(buf.getvalue())\n"
        "print(json.dumps(out))\n")
    runs = json.loads(out.strip().splitlines()[-1])
    return {name: (rc, printed, folder) for name, (rc, printed) in runs.items()}


@pytest.mark.slow
def test_cli_poisson_adaptive_clipping_accounts_every_step(tmp_path, data_root, capsys,
                                                          adaptive_cli_runs):
    """The tiny real run (Linear adaptive clipping): ε is the composition of the recorded steps."""
    rc, printed, folder = adaptive_cli_runs["poisson"]   # trained in the XLA-defaults child
    cfg, out, trace = folder / "poisson.toml", folder / "res.csv", folder / "steps.csv"
    assert rc == 0
    assert "sampling=poisson" in printed and "add-or-remove one example" in printed
    assert "sensitivity 2C" in printed and "epsilon_monitor: MindArmour's RDPMonitor" in printed
    assert "not accounted" not in printed and "z_f = sigma_f*M = 0.32" in printed
    (row,) = _read_csv(out)
    assert set(CSV_COLUMNS) <= set(row)
    assert row["step"] == 32
    # Chance is 0.1 (binomial sd of an accuracy on 1000 test rows <= 0.016).
    assert row["accuracy"] > 0.5
    assert (row["sampling"], row["neighbouring"], row["sensitivity"]) == (
        "poisson", "add-or-remove one example", "2C")
    steps = _read_csv(trace)
    assert [r["step"] for r in steps] == list(range(1, 33))
    clip = np.array([r["clip_norm"] for r in steps])
    # The trace holds the C_t each step used: C_0 first, then Linear moves of ~η = 0.001.
    assert clip[0] == 1.0 and len(set(clip)) == 32
    assert np.all(np.abs(np.diff(clip)) < 0.001 * 1.5)
    # 32 micro-batches of a batch of 64 hold ~2 examples each: sensitivity 2C_t, so the
    # value's multiplier is 0.5/(2C_t), combined with the fraction's 0.32.
    z = _step_multipliers(clip)
    np.testing.assert_allclose([r["value_noise_multiplier"] for r in steps], 0.5 / (2 * clip),
                               rtol=1e-12)
    np.testing.assert_allclose([r["accounted_noise_multiplier"] for r in steps], z, rtol=1e-12)
    assert row["accounted_noise_multiplier"] == pytest.approx(z[-1], rel=1e-12)
    assert row["fraction_noise_multiplier"] == Z_FRACTION
    q = 64 / 2048
    exact = _heterogeneous_poisson_rdp(z, q, 1e-3)
    # 32 distinct multipliers: ldpsim rounds each down to a 1 % grid, which only raises ε
    # (at most to the ε of every step at the smallest z_t / 1.01).
    upper = _poisson_epsilon(float(z.min()) / 1.01, q, 32, 1e-3, dp_accounting.rdp.RdpAccountant)
    assert exact <= row["epsilon_rdp"] <= upper
    assert row["epsilon_rdp"] == pytest.approx(exact, rel=0.03)
    assert math.isnan(row["epsilon_pld"]) and row["epsilon"] == row["epsilon_rdp"]
    assert "PLD not computed" in row["accounting"] and "z_f = 0.32" in row["accounting"]
    # Before: the value's multiplier at C_0 alone (0.25), with the fraction ignored, gave a
    # smaller ε that was no guarantee; the nominal 0.5 (sensitivity C) far smaller still.
    before = _poisson_epsilon(0.25, q, 32, 1e-3, dp_accounting.rdp.RdpAccountant)
    assert row["epsilon"] > 1.5 * before
    wrong = dpsgd_epsilon(noise_multiplier=0.5, batch_size=64, num_examples=2048, steps=32,
                          delta=1e-3, method="rdp").epsilon
    assert row["epsilon"] > 4 * wrong
    # MindArmour's monitor keeps its own (optimistic) arithmetic: z = 0.5, sensitivity C.
    monitor = RDPMonitor(2048, 64, 0.5, target_delta=1e-3, noise_decay_mode=None,
                         per_print_times=32)
    assert row["epsilon_monitor"] == pytest.approx(monitor.run_epochs(1)[0][0], rel=1e-9)
    assert row["epsilon_monitor"] < row["epsilon"]
    # Linear adaptive clipping moved C by at most η = 0.001 per step.
    assert abs(row["clip_norm"] - 1.0) <= 0.001 * 32 * 1.5
    assert row["effective_noise_multiplier"] == pytest.approx(0.5 / row["clip_norm"], rel=1e-5)
    last_lines = printed.splitlines()[-2:]
    assert last_lines[0].startswith("privacy: (") and "sensitivity 2C" in last_lines[0]
    assert last_lines[1].startswith("accounting: RDP of 32 Poisson-sampled")
    # The ledger again from the trace, without training: the same figures.
    again = tmp_path / "again.csv"
    assert main(["dpsgd", "--config", str(cfg), "--data-dir", str(data_root), "--pld", "off",
                 "--epsilon-only", "--from-trace", str(trace), "--out", str(again)]) == 0
    (ledger,) = _read_csv(again)
    for k in ("epsilon", "epsilon_rdp", "epsilon_monitor", "accounted_noise_multiplier"):
        assert ledger[k] == pytest.approx(row[k], rel=1e-12)
    capsys.readouterr()
    # Without a trace an adaptive run's ε cannot be recomputed: a one-line error.
    assert main(["dpsgd", "--config", str(cfg), "--epsilon-only", "--num-train", "2048"]) == 2
    assert "--from-trace" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_shuffle_adaptive_clipping_charges_the_epochs_worst_step(adaptive_cli_runs):
    rc, printed, folder = adaptive_cli_runs["shuffle"]   # trained in the XLA-defaults child
    trace = folder / "shuffle_steps.csv"
    assert rc == 0
    row = json.loads(printed.strip().splitlines()[-1])
    assert row["accuracy"] > 0.5 and row["step"] == 32
    assert (row["sampling"], row["neighbouring"], row["sensitivity"]) == (
        "shuffle", "replace one example", "2C")
    # One epoch: one Gaussian (replace-one sensitivity 2C_t, no amplification) at the
    # smallest combined multiplier of the epoch's steps, i.e. at its largest C_t.
    clip = np.array([r["clip_norm"] for r in _read_csv(trace)])
    z_min = float(np.min(_step_multipliers(clip)))
    exact = dp_accounting.get_epsilon_gaussian(z_min, 1e-2)
    assert row["accounted_noise_multiplier"] == pytest.approx(z_min, rel=1e-12)
    assert row["epsilon"] == pytest.approx(exact, rel=1e-9)
    assert row["epsilon_pld"] == row["epsilon"] <= row["epsilon_rdp"]
    # Before: the value at C_0 alone, 0.5/2, with the fraction ignored.
    assert row["epsilon"] > 1.3 * dp_accounting.get_epsilon_gaussian(0.25, 1e-2)
    assert 0 < row["sampler_delta_floor"] < 1e-2


@pytest.mark.slow   # real data, a learning check
def test_no_dp_learns_without_epsilon(data_root):
    cfg = load_config(None, data_dir=str(data_root), dp=False, model="mlp", num_train=2048,
                      num_test=1000, epochs=1, batch_size=64, learning_rate=0.05)
    assert cfg.sampling == "poisson"
    (row,) = train_dpsgd(cfg)
    assert row["accuracy"] > 0.7
    assert all(math.isnan(row[k]) for k in ("epsilon", "epsilon_monitor", "epsilon_rdp",
                                            "epsilon_pld"))
    assert row["neighbouring"] == row["sensitivity"] == "none"


# ------------------------------------------------------------------------------ accounting


@pytest.mark.parametrize("micro_batches", [8, 64])
def test_shuffle_epsilon_is_exact_composition_of_half_multiplier_gaussians(micro_batches):
    """E epochs of shuffled batches: E Gaussians with multiplier z/2, whatever M."""
    z, delta, n = 1.3, 1e-5, 6400
    cfg = DpsgdConfig(sampling="shuffle", noise_multiplier=z, epochs=3, batch_size=64,
                      micro_batches=micro_batches, delta=delta, clip_mechanism=None)
    rows = epsilon_by_epoch(cfg, n)
    assert [r["step"] for r in rows] == [100, 200, 300]
    for e, row in enumerate(rows, start=1):
        exact = dp_accounting.get_epsilon_gaussian(z / (2 * math.sqrt(e)), delta)
        assert row["epsilon"] == pytest.approx(exact, rel=1e-9)
        assert row["epsilon_pld"] == row["epsilon"] <= row["epsilon_rdp"]
        assert (row["neighbouring"], row["sensitivity"]) == ("replace one example", "2C")
        assert row["accounted_noise_multiplier"] == z / 2
    # The Poisson figure the trainer used to print for these shuffled batches is far smaller.
    old = dpsgd_epsilon(noise_multiplier=z, batch_size=64, num_examples=n, steps=300,
                        delta=delta).epsilon
    assert rows[-1]["epsilon"] > 5 * old


def test_shuffle_epsilon_with_noise_decay_charges_each_epoch_its_smallest_multiplier():
    z, r, delta = 2.0, 0.01, 1e-5
    cfg = DpsgdConfig(sampling="shuffle", noise_multiplier=z, epochs=2, batch_size=64,
                      micro_batches=8, noise_mechanism="AdaGaussian", noise_decay="Step",
                      noise_decay_rate=r, clip_mechanism=None, delta=delta)
    rows = epsilon_by_epoch(cfg, 640)  # 10 steps per epoch
    z_epochs = [z * (1 - r) ** 9 / 2, z * (1 - r) ** 19 / 2]
    exact = dp_accounting.get_epsilon_gaussian(1 / math.sqrt(sum(1 / v**2 for v in z_epochs)),
                                               delta)
    assert rows[-1]["epsilon"] == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("micro_batches,factor", [(16, 2), (64, 1)])
def test_poisson_epsilon_uses_the_true_sensitivity(micro_batches, factor):
    """M < B: a micro-batch of several examples, sensitivity 2C (z/2); M = B: C (z)."""
    z, delta, n, B = 1.1, 1e-5, 6400, 64
    cfg = DpsgdConfig(noise_multiplier=z, epochs=2, batch_size=B, micro_batches=micro_batches,
                      delta=delta, pld="final", clip_mechanism=None)
    setting = privacy_setting(cfg)
    assert (setting.sampling, setting.neighbouring) == ("poisson", "add-or-remove one example")
    assert setting.sensitivity == ("2C" if factor == 2 else "C")
    rows = epsilon_by_epoch(cfg, n)
    for e, row in enumerate(rows, start=1):
        steps = e * (n // B)
        assert row["accounted_noise_multiplier"] == z / factor
        assert row["epsilon_rdp"] == pytest.approx(_poisson_epsilon(
            z / factor, B / n, steps, delta, dp_accounting.rdp.RdpAccountant), rel=1e-9)
        if e == len(rows):
            assert row["epsilon_pld"] == pytest.approx(_poisson_epsilon(
                z / factor, B / n, steps, delta, dp_accounting.pld.PLDAccountant), rel=1e-6)
            assert row["epsilon"] == min(row["epsilon_rdp"], row["epsilon_pld"])
        else:
            assert math.isnan(row["epsilon_pld"]) and row["epsilon"] == row["epsilon_rdp"]


def _adaptive(**kw):
    """A Linear adaptive-clipping config (MindArmour's rule): b = 1, M = 8 < B = 64; the
    fraction's multiplier is 0.5 · 8 = 4 (multipliers of a few units keep dp_accounting's
    RDP of large sampling rates fast)."""
    base = dict(noise_multiplier=10.0, batch_size=64, micro_batches=8, norm_bound=1.0,
                clip_mechanism="Linear", fraction_stddev=0.5, delta=1e-5, pld="final")
    return DpsgdConfig(**{**base, **kw})


def test_combined_gaussian_rule_is_the_composition_of_value_and_fraction():
    """Two Gaussians on the same data are one Gaussian with 1/z² = 1/z_v² + 1/z_f²."""
    from ldpsim._src.fl.dpsgd.guarantee import combine_noise_multipliers

    z_v, z_f = 1.5, 2.0
    z = combine_noise_multipliers(z_v, z_f)
    assert z == pytest.approx((z_v**-2 + z_f**-2) ** -0.5, rel=1e-15)
    assert combine_noise_multipliers(z_v, math.inf) == z_v
    assert combine_noise_multipliers(0.5, 0.0) == 0.0  # a release without noise
    # RDP: dp_accounting composing the two events separately = the one combined event,
    # at every order, to rounding.
    apart, joint = dp_accounting.rdp.RdpAccountant(), dp_accounting.rdp.RdpAccountant()
    apart.compose(dp_accounting.GaussianDpEvent(z_v))
    apart.compose(dp_accounting.GaussianDpEvent(z_f))
    joint.compose(dp_accounting.GaussianDpEvent(z))
    np.testing.assert_allclose(apart.rdp, joint.rdp, rtol=1e-13)
    # PLD (and the exact Gaussian value): equal up to the PLD's discretisation.
    apart, joint = dp_accounting.pld.PLDAccountant(), dp_accounting.pld.PLDAccountant()
    apart.compose(dp_accounting.GaussianDpEvent(z_v))
    apart.compose(dp_accounting.GaussianDpEvent(z_f))
    joint.compose(dp_accounting.GaussianDpEvent(z))
    exact = dp_accounting.get_epsilon_gaussian(z, 1e-5)
    assert apart.get_epsilon(1e-5) == pytest.approx(exact, rel=2e-3)
    assert joint.get_epsilon(1e-5) == pytest.approx(exact, rel=2e-3)
    # Under Poisson sampling the two releases share one sampled batch: one sampled Gaussian
    # of z. Composing two separately sampled events would model independent batches and
    # understate ε.
    q = 0.01
    shared = _poisson_epsilon(z, q, 1000, 1e-5, dp_accounting.rdp.RdpAccountant)
    separate = dp_accounting.rdp.RdpAccountant()
    for zz in (z_v, z_f):
        separate.compose(dp_accounting.PoissonSampledDpEvent(
            q, dp_accounting.GaussianDpEvent(zz)), 1000)
    assert shared > 1.05 * separate.get_epsilon(1e-5)


def test_fraction_noise_multiplier_and_step_multipliers():
    from ldpsim._src.fl.dpsgd.guarantee import fraction_noise_multiplier, step_noise_multipliers

    cfg = _adaptive()
    # β/M has sensitivity 1/M (one unit's indicator): z_f = σ_f·M, the same for shuffle.
    assert fraction_noise_multiplier(cfg) == 0.5 * 8
    assert fraction_noise_multiplier(dataclasses.replace(cfg, sampling="shuffle")) == 0.5 * 8
    assert privacy_setting(cfg).fraction_noise_multiplier == 4.0
    # Nothing released: a fixed clip bound, or η = 0 (C_t never moves); DP off.
    for other in (dataclasses.replace(cfg, clip_mechanism=None),
                  dataclasses.replace(cfg, clip_learning_rate=0.0),
                  dataclasses.replace(cfg, dp=False)):
        assert fraction_noise_multiplier(other) == math.inf
    clip = np.array([1.0, 1.5, 2.0])
    z_value, z = step_noise_multipliers(cfg, clip, 10.0)
    np.testing.assert_allclose(z_value, 10.0 / (2 * clip), rtol=1e-15)
    np.testing.assert_allclose(z, _step_multipliers(clip, noise=10.0, z_fraction=4.0),
                               rtol=1e-15)
    # noise_follows_clip: noise C_t·m on sensitivity 2C_t, whatever C_t.
    follows = dataclasses.replace(cfg, noise_follows_clip=True)
    z_value, _ = step_noise_multipliers(follows, clip, 10.0)
    np.testing.assert_allclose(z_value, 5.0, rtol=1e-15)
    # Per-example Poisson clipping: sensitivity C_t, fraction over B = 64 examples.
    per_example = dataclasses.replace(cfg, micro_batches=64)
    z_value, z = step_noise_multipliers(per_example, clip, 10.0)
    np.testing.assert_allclose(z_value, 10.0 / clip, rtol=1e-15)
    np.testing.assert_allclose(z, _step_multipliers(clip, noise=10.0, s=1, z_fraction=32.0),
                               rtol=1e-15)
    # A non-finite clip bound bounds nothing: multiplier 0 (ε = inf).
    assert step_noise_multipliers(cfg, [np.nan], 10.0)[1][0] == 0.0


def test_poisson_adaptive_epsilon_is_the_heterogeneous_composition():
    """A known C_t trajectory (few distinct values, so no rounding): ε is dp_accounting's
    composition of one Poisson-sampled Gaussian per step with that step's multiplier."""
    n, B = 640, 64  # 10 steps per epoch, q = 0.1
    cfg = _adaptive(epochs=2)
    clip = np.repeat([1.0, 1.2, 1.5, 1.5, 2.0], 4)  # 20 steps
    rows = epsilon_by_epoch(cfg, n, clip_norms=clip)
    z = _step_multipliers(clip, noise=10.0, z_fraction=4.0)
    expected = _heterogeneous_poisson_rdp(z, B / n, 1e-5, every=10)
    for e, row in enumerate(rows, start=1):
        assert row["epsilon_rdp"] == pytest.approx(expected[e - 1], rel=1e-9)
        assert row["epsilon"] == row["epsilon_rdp"] and math.isnan(row["epsilon_pld"])
        assert row["accounted_noise_multiplier"] == pytest.approx(z[10 * e - 1], rel=1e-15)
        assert "PLD not computed" in row["accounting"] and "rounded" not in row["accounting"]
    # What the trainer printed before: the value's multiplier at C_0 for every step, the
    # fraction ignored: far smaller, and no guarantee.
    before = _poisson_epsilon(5.0, B / n, 20, 1e-5, dp_accounting.rdp.RdpAccountant)
    assert rows[-1]["epsilon"] > 2 * before
    # More than 16 distinct values in an epoch: each z_t rounded down to the 1 % grid, so
    # ε lies between 17 steps at the largest z_t and 17 at the smallest z_t / 1.01 (the
    # real run in test_cli_poisson_adaptive_clipping_accounts_every_step compares it with
    # the step-by-step composition).
    clip = np.linspace(1.0, 1.5, 17)
    (row,) = epsilon_by_epoch(dataclasses.replace(cfg, epochs=1), 17 * B, clip_norms=clip)
    z = _step_multipliers(clip, noise=10.0, z_fraction=4.0)
    lower, upper = (_poisson_epsilon(v, 1 / 17, 17, 1e-5, dp_accounting.rdp.RdpAccountant)
                    for v in (float(z.max()), float(z.min()) / 1.01))
    assert lower < row["epsilon_rdp"] < upper
    assert "rounded down to a 1% grid" in row["accounting"]
    # Adaptive clipping without the trajectory: refused.
    with pytest.raises(LdpsimError, match="clip_norms"):
        epsilon_by_epoch(cfg, n)
    with pytest.raises(LdpsimError, match="at least"):
        epsilon_by_epoch(cfg, n, clip_norms=clip[:5])


def test_noise_follows_clip_adaptive_run_is_homogeneous_and_gets_a_pld():
    n, B = 6400, 64
    cfg = _adaptive(noise_follows_clip=True, epochs=1)
    clip = np.linspace(1.0, 1.3, 100)
    (row,) = epsilon_by_epoch(cfg, n, clip_norms=clip)
    z = (1 / 5.0**2 + 1 / 4.0**2) ** -0.5
    assert row["accounted_noise_multiplier"] == pytest.approx(z, rel=1e-12)
    assert row["epsilon_rdp"] == pytest.approx(
        _poisson_epsilon(z, B / n, 100, 1e-5, dp_accounting.rdp.RdpAccountant), rel=1e-9)
    assert row["epsilon_pld"] == pytest.approx(
        _poisson_epsilon(z, B / n, 100, 1e-5, dp_accounting.pld.PLDAccountant), rel=1e-6)


@pytest.mark.parametrize("sampling", ["poisson", "shuffle"])
def test_fraction_released_without_noise_gives_infinite_epsilon(sampling):
    from ldpsim._src.fl.dpsgd.config import UnaccountedReleaseWarning

    cfg = _adaptive(fraction_stddev=0.0, sampling=sampling, epochs=2)
    assert "epsilon = inf" in privacy_setting(cfg).describe(cfg)
    with pytest.warns(UnaccountedReleaseWarning, match="without noise"):
        rows = epsilon_by_epoch(cfg, 640, clip_norms=np.ones(20))
    for row in rows:
        assert row["epsilon"] == row["epsilon_rdp"] == row["epsilon_pld"] == math.inf
        assert "fraction_stddev = 0" in row["accounting"]
    # η = 0: the fraction moves nothing and is not released; finite ε.
    cfg = dataclasses.replace(cfg, clip_learning_rate=0.0)
    assert math.isfinite(epsilon_by_epoch(cfg, 640, clip_norms=np.ones(20))[-1]["epsilon"])


def test_shuffle_adaptive_epsilon_charges_each_epoch_its_worst_multiplier():
    n = 640  # 10 steps per epoch
    cfg = _adaptive(sampling="shuffle", epochs=3)
    # C_t rises within each epoch (the worst step is not the last of epoch 2).
    clip = np.concatenate([np.linspace(1.0, 1.4, 10), [1.4, 2.5, 1.6] + [1.5] * 7,
                           np.linspace(1.5, 1.2, 10)])
    rows = epsilon_by_epoch(cfg, n, clip_norms=clip)
    z = _step_multipliers(clip, noise=10.0, z_fraction=4.0).reshape(3, 10)
    worst = z.min(axis=1)
    assert worst[1] == z[1, 1]
    for e, row in enumerate(rows, start=1):
        z_total = 1 / math.sqrt(np.sum(1 / worst[:e] ** 2))
        assert row["accounted_noise_multiplier"] == pytest.approx(worst[e - 1], rel=1e-15)
        assert row["epsilon"] == pytest.approx(
            dp_accounting.get_epsilon_gaussian(z_total, 1e-5), rel=1e-9)
        assert row["epsilon_pld"] == row["epsilon"] <= row["epsilon_rdp"]
    # Charging the epoch's mean or last multiplier instead would understate ε.
    mean = 1 / math.sqrt(np.sum(1 / z.mean(axis=1) ** 2))
    last = 1 / math.sqrt(np.sum(1 / z[:, -1] ** 2))
    assert rows[-1]["epsilon"] > dp_accounting.get_epsilon_gaussian(mean, 1e-5)
    assert rows[-1]["epsilon"] > dp_accounting.get_epsilon_gaussian(last, 1e-5)


def test_poisson_noise_decay_composes_each_steps_multiplier():
    """AdaGaussian (fixed clip bound): each Poisson step with its decayed multiplier."""
    from ldpsim._src.privacy.accountants.monitors import decayed_noise_multipliers

    z0, r, n, B = 6.0, 0.05, 320, 64
    cfg = DpsgdConfig(noise_multiplier=z0, epochs=2, batch_size=B, micro_batches=8,
                      noise_mechanism="AdaGaussian", noise_decay="Time", noise_decay_rate=r,
                      clip_mechanism=None, delta=1e-5)
    rows = epsilon_by_epoch(cfg, n)  # 5 steps per epoch
    zs = decayed_noise_multipliers(z0, np.arange(10), "Time", r) / 2
    assert rows[-1]["epsilon_rdp"] == pytest.approx(
        _heterogeneous_poisson_rdp(zs, B / n, 1e-5), rel=1e-9)
    assert math.isnan(rows[-1]["epsilon_pld"])
    # Recorded multipliers (what the trainer passes) take precedence over the closed form.
    recorded = epsilon_by_epoch(cfg, n, noise_multipliers=zs * 2)
    assert recorded[-1]["epsilon"] == pytest.approx(rows[-1]["epsilon"], rel=1e-12)


def test_poisson_ledger_of_2340_adaptive_steps_is_fast():
    """The MindArmour configuration's size: 10 epochs of 234 steps, all C_t distinct."""
    from ldpsim._src.fl.dpsgd import ledger

    # delta 0.01: above the sampler floor q·Φ(1/0.09 − 6.76) = 4.3e-3 of these multipliers.
    cfg = DpsgdConfig(noise_multiplier=0.4, delta=0.01)  # Linear adaptive clipping, M = 32
    clip = np.linspace(1.0, 2.2, 2340)
    ledger._RDP_CACHE.clear()
    rows = epsilon_by_epoch(cfg, 60000, clip_norms=clip)   # ~1 s (not asserted: no timings)
    z = _step_multipliers(clip, noise=0.4)
    assert rows[-1]["accounted_noise_multiplier"] == pytest.approx(z[-1], rel=1e-12)
    # Bracketed by the composition at the grid's worst case and at the smallest z.
    lo = _poisson_epsilon(float(z[0]), 256 / 60000, 2340, 0.01, dp_accounting.rdp.RdpAccountant)
    hi = _poisson_epsilon(float(z[-1]) / 1.01, 256 / 60000, 2340, 0.01,
                          dp_accounting.rdp.RdpAccountant)
    # The run's smallest multipliers (z ≈ 0.09) shift a step's noise by 1/z ≈ 11.1σ, close to
    # the float32 sampler's reach (11.6σ): a step holding the example lands where the
    # neighbour's noise cannot reach with probability ~0.3, q·0.3 per step, ~0.95 over the
    # 2,340 steps > δ = 0.01 — what runs has no ε at this δ (the ideal composition is
    # bracketed as before).
    assert math.isinf(rows[-1]["epsilon"]) and "bounded tails" in rows[-1]["accounting"]
    ideal = _poisson_epsilon(float(z[0]), 256 / 60000, 2340, 0.01,
                             dp_accounting.rdp.RdpAccountant)
    assert lo <= ideal < hi


def test_vectorised_poisson_rdp_equals_dp_accounting():
    from ldpsim._src.fl.dpsgd.ledger import RDP_ORDERS, _poisson_rdp

    for q in (256 / 60000, 0.05):
        zs = [0.05, 1.1, 4.0]
        ours = _poisson_rdp(q, zs)
        for k, z in enumerate(zs):
            acc = dp_accounting.rdp.RdpAccountant(orders=list(RDP_ORDERS))
            acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)))
            ref = np.asarray(acc.rdp)
            finite = np.isfinite(ref)
            np.testing.assert_allclose(ours[k][finite], ref[finite], rtol=1e-10)
            assert np.all(np.isinf(ours[k][~finite]))


def test_noise_norm_bound_enters_the_accounted_multiplier():
    cfg = DpsgdConfig(noise_multiplier=1.0, norm_bound=2.0, noise_norm_bound=1.0,
                      batch_size=64, micro_batches=64)
    assert privacy_setting(cfg).noise_ratio == 0.5  # noise std 1.0 on sensitivity C = 2
    follows = dataclasses.replace(cfg, noise_follows_clip=True)
    assert privacy_setting(follows).noise_ratio == 1.0  # noise std C_t·m, sensitivity C_t


def test_micro_batch_sensitivity_really_is_2c():
    """Adding one example to a micro-batch can move its clipped gradient by exactly 2C.

    Linear softmax model without bias at W = 0: ∇ℓ(x, y) = (softmax(0) − e_y) xᵀ, so an
    example with x_b = −3 x_a (same label) turns the chunk mean gradient from g_a to −g_a.
    """
    from ldpsim._src.privacy.randomizers.clipping import clip_by_global_norm
    from ldpsim._src.fl.dpsgd.aggregate import microbatch_grads

    apply_fn = lambda p, x: x @ p  # noqa: E731
    loss = lambda p, b: optax.losses.softmax_cross_entropy_with_integer_labels(  # noqa: E731
        apply_fn(p, b[0]), b[1]).mean()
    w = jnp.zeros((4, 3))
    xa = jnp.array([[1.0, -2.0, 0.5, 3.0]])
    C = 0.1

    @jax.jit
    def clipped_chunk(xb, yb):
        g, _ = microbatch_grads(loss, w, (xb, yb), 1)
        return clip_by_global_norm(g[0], C)[0]

    ca = clipped_chunk(xa, jnp.array([1]))
    cab = clipped_chunk(jnp.concatenate([xa, -3 * xa]), jnp.array([1, 1]))
    assert float(jnp.linalg.norm(ca - cab)) == pytest.approx(2 * C, rel=1e-6)


# ------------------------------------------------------------------------- Poisson batches


def test_poisson_inclusion_is_independent_binomial():
    """4,000 draws over n = 64 examples with q = 8/64, fixed key.

    (a) batch sizes follow Binomial(64, 1/8) (chi-square goodness of fit over bins with
    expected count >= 5; fixed-size or without-replacement batches fail it hopelessly);
    (b) each example's inclusion count is Binomial(4000, 1/8): Σ (c_i − Tq)²/(Tq(1−q)) is
    ~χ²(64). Each test rejects at p < 1e-6, so a correct sampler with a random key would
    fail this test with probability < 2e-6 (with the fixed key it is deterministic).
    """
    n, B, T = 64, 8, 4000
    q = B / n
    keys = jax.random.split(jax.random.key(20240607), T)
    inc = np.asarray(jax.jit(jax.vmap(lambda k: poisson_sample(k, n, B)))(keys))
    assert inc.shape == (T, n) and inc.dtype == bool
    sizes = inc.sum(axis=1)
    support = np.arange(n + 1)
    expected = T * stats.binom.pmf(support, n, q)
    observed = np.bincount(sizes, minlength=n + 1).astype(float)
    lo, hi = support[expected >= 5][[0, -1]]
    obs = np.concatenate([[observed[:lo + 1].sum()], observed[lo + 1:hi], [observed[hi:].sum()]])
    exp = np.concatenate([[expected[:lo + 1].sum()], expected[lo + 1:hi], [expected[hi:].sum()]])
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-6
    counts = inc.sum(axis=0)
    chi2 = np.sum((counts - T * q) ** 2 / (T * q * (1 - q)))
    assert stats.chi2.sf(chi2, n) > 1e-6
    assert stats.chi2.cdf(chi2, n) > 1e-6  # not suspiciously uniform either


def test_poisson_capacity_overflow_probability():
    for n, B in ((60000, 256), (2048, 64), (50, 10)):
        k = poisson_capacity(n, B)
        assert stats.binom.sf(k, n, B / n) < 1e-9 <= stats.binom.sf(k - 1, n, B / n)
    assert poisson_capacity(60000, 256) == 357


_SHAPE, _CLASSES = (5,), 3
_MODEL = get_model("mlp", input_shape=_SHAPE, num_classes=_CLASSES, hidden=(8,))
_PARAMS = _MODEL.init(jax.random.key(0), jnp.zeros((1,) + _SHAPE))


def _toy(n):
    kx, ky = jax.random.split(jax.random.key(1))
    return jax.random.normal(kx, (n,) + _SHAPE), jax.random.randint(ky, (n,), 0, _CLASSES)


def _one_step(x, y, key, *, micro_batches, capacity, clip=0.05, batch_size=8):
    n = x.shape[0]
    from ldpsim._src.fl.dpsgd.steps import make_optimizer

    cfg = DpsgdConfig(optimizer="sgd", learning_rate=1.0, batch_size=batch_size,
                      dp=micro_batches is not None, micro_batches=micro_batches or 1,
                      norm_bound=clip, noise_multiplier=0.0, clip_mechanism=None)
    opt = make_optimizer(cfg, jax.random.key(9), presummed_divisor=(
        batch_size if micro_batches == batch_size else None))
    fn = make_poisson_epoch_fn(_MODEL.apply, opt, num_train=n, batch_size=batch_size,
                               micro_batches=micro_batches, capacity=capacity)
    params, state, losses, trace = jax.jit(fn)(_PARAMS, opt.init(_PARAMS), x, y, key[None])
    # The per-step record the accountant uses: C_t and m_t before the step's update.
    if micro_batches is None:
        assert trace == {}
    else:
        assert trace["clip_norm"].shape == (1,)
        assert float(trace["clip_norm"][0]) == pytest.approx(clip, rel=1e-7)
        assert float(trace["noise_multiplier"][0]) == 0.0
    update = jax.tree_util.tree_map(jnp.subtract, params, _PARAMS)
    return update, state, losses


@jax.jit
def _per_row(x, y):
    """Per-row losses and gradients at _PARAMS (leading axis = rows)."""
    def loss(p, xi, yi):
        logits = _MODEL.apply(p, xi[None])
        return optax.losses.softmax_cross_entropy_with_integer_labels(logits, yi[None])[0]

    return jax.vmap(jax.value_and_grad(loss), in_axes=(None, 0, 0))(_PARAMS, x, y)


def _row_grads(x, y, rows):
    _, g = _per_row(x[rows], y[rows])
    return [jax.tree_util.tree_map(lambda v, i=i: v[i], g) for i in range(len(rows))]


def _tree_sum(trees):
    return functools.reduce(lambda a, b: jax.tree_util.tree_map(jnp.add, a, b), trees)


def _clip(tree, c):
    norm = math.sqrt(sum(float(jnp.sum(v * v)) for v in jax.tree_util.tree_leaves(tree)))
    return jax.tree_util.tree_map(lambda v: v * min(1.0, c / norm), tree), norm


def _close(a, b, rtol=1e-4, atol=1e-6):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


@pytest.mark.parametrize("micro_batches,capacity", [(None, 40), (8, 3), (2, 5)])
def test_poisson_step_uses_every_sampled_example_once(micro_batches, capacity):
    """One SGD step (lr 1, no noise) on n = 40, B = 8, recomputed by hand from the mask.

    None: −Σ_S ∇ℓ_i / B. M = B = 8: −Σ_S clip(∇ℓ_i) / B. M = 2: chunk
    j = {i ∈ S: i mod 2 = j}, −Σ_j clip(Σ_{chunk j} ∇ℓ_i / 4) / 2. With capacity 3 or 5 the draw (> 6 rows) overflows
    the padded batch and is processed in several blocks: no example is dropped.
    """
    x, y = _toy(40)
    key = jax.random.key(11)
    rows = np.flatnonzero(np.asarray(poisson_sample(key, 40, 8)))
    assert len(rows) > 6  # more than one block of capacity 3 or 5
    grads = _row_grads(x, y, rows)
    C = 0.05
    if micro_batches is None:
        expected = jax.tree_util.tree_map(lambda g: -g / 8, _tree_sum(grads))
    elif micro_batches == 8:
        clipped = [_clip(g, C) for g in grads]
        assert any(norm > C for _, norm in clipped)  # the bound is active
        expected = jax.tree_util.tree_map(lambda g: -g / 8, _tree_sum([c for c, _ in clipped]))
        unclipped = sum(norm < C for _, norm in clipped) / 8
    else:
        units = []
        for j in range(2):
            chunk = [g for g, i in zip(grads, rows) if i % 2 == j]
            units.append(_clip(jax.tree_util.tree_map(lambda g: g / 4, _tree_sum(chunk)), C)[0])
        expected = jax.tree_util.tree_map(lambda g: -g / 2, _tree_sum(units))
    update, state, losses = _one_step(x, y, key, micro_batches=micro_batches,
                                      capacity=capacity, clip=C)
    _close(update, expected)
    ce, _ = _per_row(x[rows], y[rows])
    assert float(losses[0]) == pytest.approx(float(np.mean(ce)), rel=1e-5)
    if micro_batches == 8:
        assert float(state[0].unclipped_fraction) == pytest.approx(unclipped)


def test_presummed_aggregate_equals_dp_aggregate():
    """With all K units valid and divisor K, the Poisson per-example aggregator is dp_aggregate."""
    from ldpsim._src.privacy.randomizers.clipping import clip_by_global_norm
    from ldpsim._src.fl.dpsgd.aggregate import dp_aggregate

    K = 6
    units = {"a": jax.random.normal(jax.random.key(2), (K, 3, 2)),
             "b": 0.3 * jax.random.normal(jax.random.key(3), (K, 4))}
    kw = dict(norm_bound=1.2, noise_multiplier=0.7, key=jax.random.key(5),
              noise_decay="Time", noise_decay_rate=0.01, clip_decay="Linear",
              clip_learning_rate=0.1, noise_norm_bound=0.9)
    ref, pre = dp_aggregate(**kw), presummed_dp_aggregate(K, **kw)
    s_ref, s_pre = ref.init(units), pre.init(units)

    @jax.jit
    def presummed(s):
        clipped, norms = jax.vmap(clip_by_global_norm, in_axes=(0, None))(units, s.clip_norm)
        total = jax.tree_util.tree_map(lambda c: jnp.sum(c, axis=0), clipped)
        return pre.update((total, jnp.sum(norms < s.clip_norm)), s)

    for _ in range(2):
        out_ref, s_ref = jax.jit(ref.update)(units, s_ref)
        out_pre, s_pre = presummed(s_pre)
        _close(out_pre, out_ref, rtol=1e-6)
        _close(s_pre._replace(key=0), s_ref._replace(key=0), rtol=1e-6)


# -------------------------------------------------------------------------- config & CLI


def test_config_errors(tmp_path, capsys):
    with pytest.raises(LdpsimError, match="micro_batches"):
        DpsgdConfig(batch_size=100, micro_batches=32)
    with pytest.raises(LdpsimError, match="AdaGaussian"):
        DpsgdConfig(noise_mechanism="AdaGaussian", noise_decay="Time")  # with clip_mechanism
    with pytest.raises(LdpsimError, match="noise_decay"):
        DpsgdConfig(noise_decay="Time")
    with pytest.raises(LdpsimError, match="sampling"):
        DpsgdConfig(sampling="fixed")
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
    # MindArmour's batching, for parity with the claims it reproduces; --sampling overrides.
    assert cfg.sampling == "shuffle"
    assert load_config("experiments/mindarmour_lenet_dpsgd.toml",
                       sampling="poisson").sampling == "poisson"
    assert main(["dpsgd", "--config", str(bad)]) == 2
    capsys.readouterr()
    # A bad sampling, from the command line or a config file: one line, no traceback.
    with pytest.raises(SystemExit) as exc:
        main(["dpsgd", "--sampling", "fixed"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--sampling" in err and "Traceback" not in err
    bad.write_text('[train]\nsampling = "fixed"\n')
    assert main(["dpsgd", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "ldpsim dpsgd: error: sampling must be one of poisson, shuffle; got 'fixed'"]


def test_cli_sampling_flag_matches_the_config(capsys):
    from ldpsim._src.cli import cmd_dpsgd
    from ldpsim._src.fl.dpsgd import config as dpsgd_config

    assert cmd_dpsgd.SAMPLINGS == dpsgd_config.SAMPLINGS
    assert cmd_dpsgd.DEFAULT_SAMPLING == DpsgdConfig().sampling == "poisson"
    with pytest.raises(SystemExit):
        main(["dpsgd", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--sampling {poisson,shuffle}" in help_text and "(default: poisson" in help_text


def test_epoch_permutation_is_a_fresh_permutation_per_epoch():
    from ldpsim._src.fl.dpsgd.batches import epoch_permutation

    key = jax.random.key(0)
    a = np.asarray(epoch_permutation(key, 0, 100, 3, 32))
    b = np.asarray(epoch_permutation(key, 1, 100, 3, 32))
    assert a.shape == (3, 32) and len(set(a.ravel())) == 96 and a.max() < 100
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, np.asarray(epoch_permutation(key, 0, 100, 3, 32)))


def test_kernel_init_options():
    from ldpsim._src.fl.dpsgd.train import _redraw_kernels

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


def test_sampler_floor_makes_epsilon_inf_when_noise_is_tiny():
    """Bounded-tail noise (docs/privacy_sharp_edges.md §4): z = 0.05 with micro-batches
    (value multiplier 0.025) tells neighbours apart with probability ~1 whenever the
    example is in the step, so no δ = 1e-5 holds, with either sampling."""
    from ldpsim._src.privacy.noise.calibration import SamplerTailWarning, sampler_delta_floor

    for sampling, q in (("shuffle", 1.0), ("poisson", 256 / 60000)):
        cfg = DpsgdConfig(noise_multiplier=0.05, clip_mechanism=None, sampling=sampling,
                          epochs=2)
        with pytest.warns(SamplerTailWarning):
            rows = epsilon_by_epoch(cfg, 60000)
        assert all(math.isinf(r["epsilon"]) for r in rows)
        assert rows[-1]["sampler_delta_floor"] == pytest.approx(
            q * sampler_delta_floor(0.025, 1.0))
    cfg = DpsgdConfig(noise_multiplier=1.1, clip_mechanism=None, epochs=2)
    rows = epsilon_by_epoch(cfg, 60000)
    assert math.isfinite(rows[-1]["epsilon"]) and rows[-1]["sampler_delta_floor"] < 1e-8
