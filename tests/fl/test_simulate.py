"""simulate(): the driver, its history rows, reproducibility, learning, configuration."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim.data import PaddedPopulation, load_dataset, make_population
from ldpsim._src.fl import modes, planning
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig

RESULT_COLUMNS = {
    "dataset", "model", "mechanism", "neighbours", "epsilon", "delta", "clip", "sensitivity",
    "sigma", "clients_per_round", "population", "round", "seed", "accuracy", "loss",
    "noise_norm", "signal_norm", "snr", "cosine", "clip_fraction", "nonfinite_clients",
    "n_eff", "theory_noise_norm", "train_loss", "epsilon_spent", "wall_time",
}


@pytest.fixture(scope="module")
def small_data():
    """A 40-client, 3-class logistic-regression problem with a learnable signal."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 3))
    x = rng.normal(size=(40, 10, 6)).astype(np.float32)
    y = np.argmax(x @ w, -1)
    counts = rng.integers(3, 11, size=40)
    xt = rng.normal(size=(200, 6)).astype(np.float32)
    pop = PaddedPopulation.from_arrays(x, y, counts, num_classes=3, compact=False)
    return pop, xt, np.argmax(xt @ w, -1)


def _config(**kw):
    # epsilon 10: at delta 1e-3 the float32 sampler's bounded tails deliver up to ~17.
    base = dict(dataset="toy", model="logreg", population=40, clients_per_round=8, rounds=4,
                epsilon=10.0, delta=1e-3, clip=1.0, local_steps=2, batch_size=4,
                client_lr=0.5, chunk_size=3, eval_every=2, seed=3)
    base.update(kw)
    return SimulationConfig(**base)


def _strip(history):
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in history]


def test_history_rows_have_the_results_columns(small_data):
    rows = []
    history = sim.simulate(_config(rounds=5), data=small_data, callback=rows.append)
    assert [r["round"] for r in history] == [2, 4, 5]  # every 2 rounds, and the last
    assert rows == history
    for row in history:
        assert RESULT_COLUMNS <= set(row)
        assert row["mechanism"] == "gaussian" and row["neighbours"] == "replace"
        assert row["sensitivity"] == 2.0 and row["sigma"] > 0
        assert row["clients"] == 8 and 0 <= row["accuracy"] <= 1
        assert math.isfinite(row["epsilon_spent"]) and row["epsilon_spent"] >= 10.0 - 1e-6
    # The most-sampled client's epsilon grows with its participations.
    assert history[-1]["max_participation"] >= history[0]["max_participation"]


def test_same_seed_reproduces_history_and_other_seeds_differ(small_data):
    a = sim.simulate(_config(), data=small_data)
    b = sim.simulate(_config(), data=small_data)
    assert _strip(a) == _strip(b)  # exact, float for float
    c = sim.simulate(_config(seed=4), data=small_data)
    assert [r["noise_norm"] for r in a] != [r["noise_norm"] for r in c]
    assert [r["loss"] for r in a] != [r["loss"] for r in c]


@pytest.mark.slow
def test_chunk_size_changes_history_only_by_rounding(small_data):
    a = sim.simulate(_config(chunk_size=3), data=small_data)
    b = sim.simulate(_config(chunk_size=8), data=small_data)
    for ra, rb in zip(a, b):
        for key in ("loss", "noise_norm", "signal_norm", "train_loss"):
            np.testing.assert_allclose(ra[key], rb[key], rtol=1e-4)


@pytest.mark.slow
def test_epsilon_sweep_reuses_one_compilation(small_data):
    sim._compiled.cache_clear()
    for eps in (0.5, 5.0, 50.0):
        sim.simulate(_config(epsilon=eps, rounds=2), data=small_data)
    info = sim._compiled.cache_info()
    assert info.misses == 1 and info.hits == 2
    _, round_fn, _ = sim._compiled(*next(iter(_cached_keys())))
    assert round_fn._cache_size() == 1


def _cached_keys():
    # lru_cache keeps its keys private: rebuild the one key this module's config uses.
    c = _config()
    yield ("logreg", (6,), 3, modes.local("gaussian"), c.client_optimizer,
           c.server_optimizer, float(c.server_momentum), c.local_steps, None, c.batch_size,
           c.weighting, c.chunk_size)


@pytest.mark.slow
def test_no_privacy_has_no_noise_and_learns(small_data):
    history = sim.simulate(_config(epsilon=math.inf, clip=math.inf, rounds=8, eval_every=8),
                           data=small_data)
    row = history[-1]
    assert row["mechanism"] == "none" and row["noise_norm"] == 0.0
    assert math.isnan(row["epsilon_spent"])
    assert row["accuracy"] > 0.8  # chance is 1/3; the labels are a linear function of x


@pytest.mark.slow
@pytest.mark.parametrize("server", ["fedavgm", "fedadam", "fedyogi"])
def test_server_optimizers_and_poisson_sampling_run(small_data, server):
    history = sim.simulate(_config(server_optimizer=server, server_lr=0.1, sampling="poisson",
                                   weighting="uniform", rounds=2), data=small_data)
    assert all(math.isfinite(r["loss"]) for r in history)
    assert history[-1]["clients"] >= 1


@pytest.mark.slow
def test_lenet5_fedavg_learns_mnist(data_root):
    """LeNet-5, FedAvg without noise, 20 clients of 32 MNIST digits per round."""
    ds = load_dataset("mnist", data_root)
    pop = make_population(ds, "sampled", 1000, examples_per_client=32, seed=0)
    config = SimulationConfig(dataset="mnist", model="lenet5", population=1000,
                              clients_per_round=20, rounds=12, epsilon=math.inf,
                              clip=math.inf, local_steps=2, batch_size=16, client_lr=0.1,
                              chunk_size=20, eval_every=12, seed=0)
    history = sim.simulate(config, data=(pop, ds.x_test[:2000], ds.y_test[:2000]))
    assert history[-1]["accuracy"] > 0.5, history[-1]  # chance: 0.1


@pytest.mark.parametrize("kw,field", [
    (dict(epsilon=0), "epsilon"), (dict(epsilon=-1), "epsilon"), (dict(delta=1.0), "delta"),
    (dict(clip=0), "clip"), (dict(clip=math.inf, epsilon=1.0), "clip"),
    (dict(clients_per_round=50, population=10), "clients_per_round"),
    (dict(mechanism="exp"), "mechanism"), (dict(neighbours="swap"), "neighbours"),
    (dict(rounds=0), "rounds"), (dict(chunk_size=2.5), "chunk_size"),
    (dict(server_optimizer="adam"), "server_optimizer"), (dict(seed=-1), "seed"),
    (dict(server_momentum=1.0), "server_momentum"), (dict(partition="x"), "partition"),
])
def test_config_rejects_bad_values_naming_the_field(kw, field):
    with pytest.raises(LdpsimError, match=field):
        SimulationConfig(**kw)


def test_config_is_frozen_and_keyword_only():
    c = SimulationConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.epsilon = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        SimulationConfig("mnist")  # type: ignore[misc]
    assert dataclasses.replace(c, epsilon=2.0).epsilon == 2.0


def test_noise_scale_uses_the_calibration():
    from ldpsim._src.privacy.noise.calibration import calibrate

    c = SimulationConfig(epsilon=2.0, delta=1e-5, clip=0.5, neighbours="add-remove")
    sigma, sens, mech = planning.noise_scale(c)
    assert mech == "gaussian" and sens == 0.5
    assert sigma == calibrate("gaussian", epsilon=2.0, delta=1e-5, clip=0.5,
                              neighbours="add-remove").sigma
    sigma, sens, mech = planning.noise_scale(SimulationConfig(epsilon=2.0, clip=0.5,
                                                         mechanism="laplace"))
    assert (mech, sens, sigma) == ("laplace", 1.0, 0.5)
    assert planning.noise_scale(SimulationConfig())[2] == "none"


@pytest.mark.parametrize("partition", ["iid", "natural", "dirichlet", "shards"])
def test_synthetic_padded_shape_does_not_depend_on_the_seed(partition):
    # FedProx synthetic draws each device's sample count; the padded width must come from
    # the settings (the cap), else every seed recompiles the round.  No client is truncated.
    shapes = set()
    for seed in (0, 1, 2):
        cfg = SimulationConfig(dataset="synthetic", population=30, clients_per_round=5, partition=partition,
                               alpha=1.0 if partition == "dirichlet" else math.inf, seed=seed)
        pop, _, _ = sim.build_data(cfg)
        ds = load_dataset("synthetic", num_clients=30, seed=seed)
        assert int(np.sum(pop.client_counts())) == len(ds.y_train)  # every example kept
        shapes.add(tuple(pop.x.shape))
    assert shapes == {(30, 900, 60)}  # int(0.9 * max_samples_per_client=1000)


@pytest.mark.slow
def test_two_synthetic_seeds_compile_the_round_once():
    kw = dict(dataset="synthetic", model="logreg", population=30, clients_per_round=5,
              rounds=1, epsilon=10.0, delta=1e-3, batch_size=7, local_steps=1)
    for seed in (0, 1):
        sim.simulate(SimulationConfig(seed=seed, **kw))
    cfg = SimulationConfig(**kw)
    _, round_fn, _ = sim._compiled(
        cfg.model, (60,), 10, planning.plan(cfg, 30).mechanism, cfg.client_optimizer,
        cfg.server_optimizer, float(cfg.server_momentum), cfg.local_steps, cfg.local_epochs,
        cfg.batch_size, cfg.weighting, cfg.chunk_size)
    assert round_fn._cache_size() == 1
