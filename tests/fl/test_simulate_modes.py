"""simulate() and ``ldpsim run`` in every privacy mode: MindSpore, central, distributed,
aggregate noise, DP-SGD clients (ldpsim._src.fl.modes through the driver)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest

from ldpsim import LdpsimError
from ldpsim._src.fl import planning
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig
from toy_data import toy_logreg_problem

MODE_COLUMNS = {"privacy_mode", "noise_mode", "noise_multiplier", "clip_bound", "noise_sum_std",
                "survivors", "noise_variance_fraction", "unclipped_fraction",
                "model_change_norm", "epsilon_spent", "client_dp_epsilon"}
N = 24


@pytest.fixture(scope="module")
def data():
    """A 24-client, 3-class logistic-regression problem (counts 3..10 of 10 slots)."""
    return toy_logreg_problem(N, n_test=100)


def _config(**kw):
    base = dict(dataset="toy", model="logreg", population=N, clients_per_round=8, rounds=2,
                epsilon=10.0, delta=1e-3, clip=1.0, local_steps=2, batch_size=4,
                client_lr=0.5, chunk_size=4, eval_every=1, seed=3)
    # epsilon 10 (not 20) and dp_eps 10 below: the float32 sampler's bounded tails deliver
    # delta = 1e-3 only up to a per-release epsilon of ~17 (docs/privacy_sharp_edges.md);
    # above it epsilon_spent is inf by design (tests/privacy/test_release.py).
    base.update(kw)
    if base.get("privacy_mode", "ldp") != "ldp":
        base.pop("epsilon")   # the local-DP budget; the other modes have their own
    return SimulationConfig(**base)


@pytest.mark.parametrize("kw", [
    # one compilation each: CI runs all six; the fast tier runs the modes in the tests below
    pytest.param(dict(privacy_mode="mindspore", dp_eps=10.0), marks=pytest.mark.slow),
    pytest.param(dict(privacy_mode="central", noise_multiplier=0.8), marks=pytest.mark.slow),
    pytest.param(dict(privacy_mode="central", adaptive_clip=True, noise_multiplier=0.5, clip=0.1),
                 marks=pytest.mark.slow),
    pytest.param(dict(privacy_mode="distributed", noise_multiplier=0.8, dropout_rate=0.25),
                 marks=pytest.mark.slow),
    pytest.param(dict(noise_mode="aggregate"), marks=pytest.mark.slow),
    pytest.param(dict(client_dp=True, client_dp_micro_batches=2, client_dp_noise_multiplier=1.0),
                 marks=pytest.mark.slow),
], ids=["mindspore", "central", "central-adaptive", "distributed", "aggregate", "client-dp"])
def test_each_mode_runs_and_names_itself(data, kw):
    history = sim.simulate(_config(**kw), data=data)
    assert [r["round"] for r in history] == [1, 2]
    for row in history:
        assert MODE_COLUMNS <= set(row)
        assert row["privacy_mode"] == kw.get("privacy_mode", "ldp")
        assert row["noise_mode"] == kw.get("noise_mode", "per-client")
        assert math.isfinite(row["loss"]) and row["clip_bound"] > 0
        assert row["noise_sum_std"] > 0 and 1 <= row["survivors"] <= 8
        assert 0 < row["epsilon_spent"] < math.inf
        assert math.isfinite(row["model_change_norm"])
        assert math.isnan(row["unclipped_fraction"]) != bool(kw.get("adaptive_clip"))
        assert math.isfinite(row["client_dp_epsilon"]) == bool(kw.get("client_dp"))
    # The privacy budget only grows.
    assert history[1]["epsilon_spent"] >= history[0]["epsilon_spent"]


@pytest.mark.slow   # two whole runs (two configurations)
def test_default_rows_name_the_mode_and_match_the_aggregate_kernel(data):
    # Default engine (host-side mode columns) vs the same run in noise_mode="aggregate"
    # (computed in the kernel): same cohort, weights and clean updates in round 1.
    default = sim.simulate(_config(rounds=1), data=data)[0]
    agg = sim.simulate(_config(rounds=1, noise_mode="aggregate"), data=data)[0]
    assert (default["privacy_mode"], default["noise_mode"]) == ("ldp", "per-client")
    assert agg["noise_mode"] == "aggregate"
    for key in ("clip_bound", "survivors", "noise_variance_fraction", "epsilon_spent",
                "sigma", "theory_noise_norm"):
        assert default[key] == pytest.approx(agg[key], rel=1e-5), key
    # noise_sum_std = σ·√(Σ n_k²): host float64 vs kernel float32.
    assert default["noise_sum_std"] == pytest.approx(agg["noise_sum_std"], rel=1e-5)
    assert default["signal_norm"] == pytest.approx(agg["signal_norm"], rel=1e-5)
    assert default["noise_norm"] != agg["noise_norm"]   # different draws, same law


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["running-min", "overwrite"])
def test_mindspore_clip_bound_sequence(data, rule):
    # Full participation: every client's C_t is the same, so the clip_bound column is C_t:
    # 0.05 in round 1, then dp_norm_clip·‖W_{t+1} − W_t‖ (overwrite after round 1, then the
    # running minimum, or overwrite every round), with ‖W_{t+1} − W_t‖ the previous row's
    # model_change_norm.
    c = 1.5
    history = sim.simulate(_config(privacy_mode="mindspore", clients_per_round=N, rounds=3,
                                   dp_norm_clip=c, mindspore_clip_rule=rule, dp_eps=10.0),
                           data=data)
    bounds = [r["clip_bound"] for r in history]
    g = [r["model_change_norm"] for r in history]
    expected = [0.05, c * g[0], min(c * g[0], c * g[1]) if rule == "running-min" else c * g[1]]
    np.testing.assert_allclose(bounds, expected, rtol=1e-5)
    a = planning.mindspore_sigma_per_clip(10.0, 0.01)
    for row in history:
        assert row["neighbours"] == "add-remove" and row["epsilon"] == 10.0
        assert row["delta"] == 0.01 and math.isnan(row["clip"])
        assert row["sensitivity"] == pytest.approx(row["clip_bound"], rel=1e-6)
        assert row["sigma"] == pytest.approx(a * row["clip_bound"], rel=1e-6)
    # Every round is exactly (dp_eps, dp_delta)-DP: one participation costs dp_eps.
    assert history[0]["max_participation"] == 1
    assert history[0]["epsilon_spent"] == pytest.approx(10.0, rel=1e-4)
    assert history[2]["epsilon_spent"] > history[0]["epsilon_spent"]


def test_mindspore_replace_neighbours_doubles_sigma(data):
    row = sim.simulate(_config(privacy_mode="mindspore", rounds=1, dp_eps=10.0,
                               mindspore_neighbours="replace"), data=data)[0]
    a = planning.mindspore_sigma_per_clip(10.0, 0.01, neighbours="replace")
    assert row["neighbours"] == "replace"
    assert row["sensitivity"] == pytest.approx(2 * row["clip_bound"], rel=1e-6)
    assert row["sigma"] == pytest.approx(a * row["clip_bound"], rel=1e-6)
    assert row["epsilon_spent"] == pytest.approx(10.0, rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
def test_central_epsilon_spent_is_dpfedavg_epsilon(data, sampling):
    from ldpsim._src.privacy.accountants import accounting

    z, m = 0.9, 8
    history = sim.simulate(_config(privacy_mode="central", noise_multiplier=z, clip=0.5,
                                   sampling=sampling, rounds=3, eval_every=1), data=data)
    for row in history:
        ref = accounting.dpfedavg_epsilon(
            noise_multiplier=z, clients_per_round=m, population=N, rounds=row["round"],
            delta=1e-3, sampling="poisson" if sampling == "poisson" else "fixed",
            method="rdp").epsilon
        assert row["epsilon_spent"] == pytest.approx(ref, rel=1e-12)
        assert row["noise_multiplier"] == z and math.isnan(row["epsilon"])
        assert row["neighbours"] == ("add-remove" if sampling == "poisson" else "replace")
        assert row["noise_sum_std"] == pytest.approx(z * 0.5, rel=1e-6)
        assert row["sigma"] == pytest.approx(z * 0.5, rel=1e-6)


@pytest.mark.slow
def test_central_adaptive_uses_the_noise_split(data):
    from ldpsim._src.privacy.server.adaptive import adaptive_noise_split

    z, m, c0 = 0.1, 8, 0.1
    history = sim.simulate(_config(privacy_mode="central", adaptive_clip=True, noise_multiplier=z,
                                   clip=c0, rounds=2), data=data)
    z_value, _ = adaptive_noise_split(z, m)
    assert history[0]["clip_bound"] == pytest.approx(c0, rel=1e-6)   # C_0 = --clip
    for row in history:
        assert row["noise_sum_std"] == pytest.approx(z_value * row["clip_bound"], rel=1e-5)
        assert 0.0 <= row["unclipped_fraction"] <= 1.0
    # Round 2's C is round 1's C·exp(−η(b̄ − γ)) (η = 0.2, γ = 0.5).
    b = history[0]["unclipped_fraction"]
    assert history[1]["clip_bound"] == pytest.approx(c0 * math.exp(-0.2 * (b - 0.5)), rel=1e-5)


@pytest.mark.slow
def test_distributed_epsilon_uses_smallest_effective_multiplier(data):
    z, m = 1.2, 8
    history = sim.simulate(_config(privacy_mode="distributed", noise_multiplier=z,
                                   dropout_rate=0.3, rounds=3), data=data)
    z_min = math.inf
    for row in history:
        assert row["noise_variance_fraction"] == pytest.approx(row["survivors"] / m, rel=1e-6)
        assert row["noise_sum_std"] == pytest.approx(z * math.sqrt(row["survivors"] / m),
                                                     rel=1e-5)
        assert row["sigma"] == pytest.approx(z / math.sqrt(m), rel=1e-6)
        z_min = min(z_min, z * math.sqrt(row["survivors"] / m))
        ref = planning.central_epsilon(noise_multiplier=z_min, clients_per_round=m, population=N,
                                    rounds=row["round"], delta=1e-3)
        assert row["epsilon_spent"] == pytest.approx(ref, rel=1e-12)


@pytest.mark.slow
def test_client_dp_epsilon_column(data):
    from ldpsim._src.fl.dp_client import dp_client_epsilon

    z = 1.3
    history = sim.simulate(_config(privacy_mode="central", client_dp=True,
                                   client_dp_micro_batches=4, client_dp_clip=0.5,
                                   client_dp_noise_multiplier=z, rounds=2), data=data)
    n_min = int(np.min(data[0].client_counts()))
    for row in history:
        ref = dp_client_epsilon(noise_multiplier=z, batch_size=4, num_examples=n_min,
                                local_steps=2, rounds=row["max_participation"], delta=1e-3)
        assert row["client_dp_epsilon"] == pytest.approx(ref.epsilon, rel=1e-12)


@pytest.mark.slow
def test_mode_hyperparameters_are_traced(data):
    # Runs that differ only in z, dropout, quantile or DP-SGD knobs share one compilation.
    sim._compiled.cache_clear()
    for z, rate in ((0.5, 0.0), (1.0, 0.1), (2.0, 0.3)):
        sim.simulate(_config(privacy_mode="distributed", noise_multiplier=z, dropout_rate=rate,
                             rounds=1), data=data)
    info = sim._compiled.cache_info()
    assert info.misses == 1 and info.hits == 2


@pytest.mark.parametrize("kw,field", [
    (dict(noise_mode="aggregate", mechanism="laplace"), "aggregate"),
    (dict(client_dp_micro_batches=3), "client_dp_micro_batches"),
    (dict(client_dp_micro_batches=0), "client_dp_micro_batches"),
    (dict(privacy_mode="central", mechanism="laplace"), "mechanism"),
    (dict(privacy_mode="secagg"), "privacy_mode"), (dict(noise_mode="one"), "noise_mode"),
    (dict(privacy_mode="distributed", adaptive_clip=True), "adaptive_clip"),
    (dict(privacy_mode="central", dropout_rate=0.1), "dropout_rate"),
    (dict(privacy_mode="distributed", dropout_rate=1.0), "dropout_rate"),
    (dict(dp_eps=0.0), "dp_eps"), (dict(dp_delta=1.0), "dp_delta"),
    (dict(dp_norm_clip=-1.0), "dp_norm_clip"), (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(target_quantile=1.5), "target_quantile"),
    (dict(mindspore_clip_rule="max"), "mindspore_clip_rule"),
    (dict(mindspore_neighbours="swap"), "mindspore_neighbours"),
    (dict(client_dp="yes"), "client_dp"),
    (dict(privacy_mode="central", clip=math.inf, epsilon=math.inf), "clip"),
    # z must stay below 2σ_b = 2·(8/20) for the adaptive noise split.
    (dict(privacy_mode="central", adaptive_clip=True, noise_multiplier=1.0), "noise_multiplier"),
])
def test_bad_mode_combinations_raise(kw, field):
    with pytest.raises(LdpsimError, match=field):
        _config(**kw)


@pytest.mark.slow
def test_cli_run_central_writes_csv(tmp_path):
    from ldpsim.cli import main
    from ldpsim._src.privacy.accountants import accounting

    out = tmp_path / "x.csv"
    rc = main(["run", "--dataset", "synthetic", "--model", "logreg", "--population", "30",
               "--clients-per-round", "10", "--rounds", "2", "--local-steps", "1",
               "--chunk-size", "5", "--no-progress", "--privacy-mode", "central",
               "--noise-multiplier", "1.1", "--clip", "0.5", "--delta", "1e-4",
               "--out", str(out)])
    assert rc == 0
    df = pd.read_csv(out)
    assert list(df["round"]) == [1, 2] and (df["privacy_mode"] == "central").all()
    assert (df["noise_mode"] == "per-client").all()
    ref = accounting.dpfedavg_epsilon(noise_multiplier=1.1, clients_per_round=10, population=30,
                                      rounds=2, delta=1e-4, sampling="fixed").epsilon
    assert df["epsilon_spent"].iloc[-1] == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("bad", [["--adaptive-clip", "maybe"],
                                 ["--noise-mode", "aggregate", "--mechanism", "laplace"]])
def test_cli_bad_mode_exits_2(bad, capsys):
    from ldpsim.cli import main

    args = ["run", "--model", "logreg", "--population", "30", "--clients-per-round", "10",
            "--rounds", "1", "--no-progress"] + bad
    try:
        rc = main(args)
    except SystemExit as exc:   # argparse rejects an unparsable value
        rc = exc.code
    assert rc == 2
    assert capsys.readouterr().err.strip()


def test_sweep_help_lists_the_mode_options(capsys):
    from ldpsim.cli import main

    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    for flag in ("--privacy-mode", "--noise-mode", "--noise-multiplier", "--dp-eps",
                 "--mindspore-clip-rule", "--client-dp-micro-batches", "--dropout-rate"):
        assert flag in text


# ------------------------------------------------------------- DP-SGD client partial batch


def test_dp_local_update_partial_batch_is_mean_of_micro_batch_means():
    # MindArmour semantics: each micro-batch's loss is the mean over its (valid) rows, the
    # clipped micro-batch gradients are summed and divided by M (not by the number of valid
    # rows). One SGD step, n = 3 rows in a batch of B = 4, M = 2: chunk 1 holds 2 valid rows,
    # chunk 2 holds 1 valid row and 1 padding row.
    from ldpsim._src.fl.client import _epoch_permutation, local_update
    from ldpsim._src.fl.dp_client import dp_local_update
    from ldpsim.models import get_model

    model = get_model("logreg", input_shape=(5,), num_classes=3)
    params = model.init(jax.random.key(0), jnp.zeros((1, 5)))
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(4, 5)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 3, size=4), jnp.int32)
    key, lr = jax.random.key(7), 0.5
    kw = dict(apply_fn=model.apply, optimizer=optax.sgd(lr), batch_size=4, local_steps=1)
    # jitted: one compilation each, not one per operation
    delta, _ = jax.jit(functools.partial(dp_local_update, micro_batches=2, **kw))(
        params, x, y, 3, key=key, clip_norm=1e6, noise_multiplier=0.0)
    perm = np.asarray(_epoch_permutation(key, jnp.int32(0), jnp.int32(3), 4))

    def mean_loss(p, rows):
        ce = optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x[rows]), y[rows])
        return jnp.mean(ce)

    g1 = jax.grad(mean_loss)(params, perm[:2])
    g2 = jax.grad(mean_loss)(params, perm[2:3])
    expected = jax.tree_util.tree_map(lambda a, b: -lr * (a + b) / 2, g1, g2)
    flat = lambda t: np.concatenate([np.ravel(v) for v in jax.tree_util.tree_leaves(t)])  # noqa: E731
    np.testing.assert_allclose(flat(delta), flat(expected), rtol=1e-5, atol=1e-7)
    # ... which is not the batch mean over the 3 valid rows that local_update takes.
    plain, _ = jax.jit(functools.partial(local_update, **kw))(params, x, y, 3, key=key)
    g_all = jax.grad(mean_loss)(params, perm[:3])
    np.testing.assert_allclose(flat(plain), -lr * flat(g_all), rtol=1e-5, atol=1e-7)
    assert not np.allclose(flat(delta), flat(plain), rtol=1e-3)
