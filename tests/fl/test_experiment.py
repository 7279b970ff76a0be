"""Nested configs (ldpsim._src.fl.experiment): lossless conversion, errors name nested options,
and the engine gives the same history for the nested and the flat form."""

from __future__ import annotations

import math

import pytest

import ldpsim
from ldpsim import LdpsimError
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.experiment import (AdaptiveClip, CentralDP, Data, DistributedDP, DpSgdClients,
                                       Execution, Experiment, Laplace, LocalDP, MindSpore,
                                       PrivUnit2, SignDS, Training, randomizer_config)
from toy_data import toy_logreg_problem

EXPERIMENTS = [
    Experiment(),
    Experiment(privacy=LocalDP(epsilon=4.0, randomizer=Laplace(), neighbours="add-remove")),
    Experiment(privacy=LocalDP(epsilon=4.0, randomizer=PrivUnit2(norm_epsilon=1.5))),
    Experiment(privacy=LocalDP(epsilon=50.0, randomizer=SignDS(sign_k=0.05, sign_dim_out=3))),
    Experiment(privacy=LocalDP(epsilon=4.0, noise_mode="aggregate"),
               execution=Execution(chunk_size=8, devices=1)),
    Experiment(privacy=MindSpore(epsilon=20.0, delta=0.05, norm_clip=0.5, clip_rule="overwrite",
                                 neighbours="replace")),
    Experiment(privacy=CentralDP(noise_multiplier=0.7, clip=0.3,
                                 adaptive=AdaptiveClip(target_quantile=0.3, learning_rate=0.1,
                                                       count_stddev=2.0))),
    Experiment(privacy=DistributedDP(noise_multiplier=1.5, dropout_rate=0.2),
               client_dp=DpSgdClients(micro_batches=4, clip=0.5, noise_multiplier=0.8),
               data=Data(dataset="mnist", population=600),
               training=Training(rounds=3, clients_per_round=60, sampling="poisson")),
]


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_round_trip_is_lossless(exp):
    flat = exp.flat()
    assert isinstance(flat, SimulationConfig)
    assert Experiment.from_flat(flat) == exp
    assert Experiment.from_flat(flat).flat() == flat


def test_one_budget_name_and_mode_options_only():
    # MindSpore's dp_eps / dp_delta are the mode's epsilon / delta.
    flat = Experiment(privacy=MindSpore(epsilon=20.0, delta=0.05)).flat()
    assert (flat.privacy_mode, flat.dp_eps, flat.dp_delta) == ("mindspore", 20.0, 0.05)
    # An option of another mode cannot even be written.
    with pytest.raises(TypeError):
        LocalDP(noise_multiplier=1.0)
    with pytest.raises(TypeError):
        CentralDP(epsilon=1.0)
    with pytest.raises(TypeError):
        MindSpore(clip=1.0)
    # A randomizer's option exists on that randomizer only.
    with pytest.raises(TypeError):
        PrivUnit2(sign_k=0.05)
    with pytest.raises(TypeError):
        LocalDP(norm_epsilon=1.0, randomizer=PrivUnit2())
    flat = Experiment(privacy=LocalDP(epsilon=4.0, randomizer=PrivUnit2(norm_epsilon=1.5))).flat()
    assert (flat.mechanism, flat.norm_epsilon) == ("privunit2", 1.5)
    assert randomizer_config("privunit2", norm_epsilon=1.5) == PrivUnit2(norm_epsilon=1.5)


def test_the_older_spelling_still_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="randomizer="):
        old = LocalDP(epsilon=4.0, mechanism="privunit2", norm_epsilon=1.5)
    assert old == LocalDP(epsilon=4.0, randomizer=PrivUnit2(norm_epsilon=1.5))
    assert (old.mechanism, old.norm_epsilon, old.sign_k) == ("privunit2", 1.5, 0.01)
    with pytest.warns(DeprecationWarning), pytest.raises(LdpsimError,
                                                         match="sign_k=0.05 does not apply"):
        LocalDP(mechanism="privunit2", sign_k=0.05)


@pytest.mark.parametrize("kw, path", [
    (dict(privacy=MindSpore(epsilon=-1.0)), "privacy.epsilon"),
    (dict(privacy=LocalDP(delta=2.0)), "privacy.delta"),
    (dict(privacy=CentralDP(adaptive=AdaptiveClip(target_quantile=1.5))),
     "privacy.adaptive.target_quantile"),
    (dict(client_dp=DpSgdClients(micro_batches=3)), "client_dp.micro_batches"),
    (dict(training=Training(clients_per_round=5000)), "training.clients_per_round"),
    (dict(data=Data(population=0)), "data.population"),
    (dict(execution=Execution(devices=0)), "execution.devices"),
])
def test_errors_name_the_nested_option(kw, path):
    with pytest.raises(LdpsimError, match=rf"^{path.replace('.', '[.]')}\b"):
        Experiment(**kw)


def test_wrong_types_are_clear():
    with pytest.raises(LdpsimError, match="privacy must be one of"):
        Experiment(privacy=AdaptiveClip())
    with pytest.raises(LdpsimError, match="data must be"):
        Experiment(data=Training())


def test_flat_options_that_do_not_apply_are_errors():
    with pytest.raises(LdpsimError, match="epsilon=8.0 does not apply"):
        SimulationConfig(privacy_mode="central", epsilon=8.0)
    with pytest.raises(LdpsimError, match="noise_multiplier=2.0 does not apply"):
        SimulationConfig(noise_multiplier=2.0)
    with pytest.raises(LdpsimError, match="dp_eps=10.0 does not apply"):
        SimulationConfig(dp_eps=10.0)
    with pytest.raises(LdpsimError, match="target_quantile=0.3 does not apply"):
        SimulationConfig(privacy_mode="central", target_quantile=0.3)
    with pytest.raises(LdpsimError, match="client_dp_clip=0.5 does not apply"):
        SimulationConfig(client_dp_clip=0.5)
    # The same values where they apply are fine.
    SimulationConfig(privacy_mode="central", noise_multiplier=2.0, adaptive_clip=True,
                     target_quantile=0.3)
    SimulationConfig(client_dp=True, client_dp_clip=0.5)


@pytest.mark.slow   # two whole runs (two configuration spellings)
def test_nested_and_flat_give_the_same_history():
    data = toy_logreg_problem(24)
    exp = Experiment(data=Data(dataset="toy", population=24),
                     training=Training(model="logreg", rounds=2, clients_per_round=6,
                                       batch_size=4, client_lr=0.5, seed=2),
                     privacy=DistributedDP(noise_multiplier=0.9, dropout_rate=0.3))
    a = ldpsim.simulate(exp, data=data)
    b = ldpsim.simulate(exp.flat(), data=data)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]  # noqa: E731
    assert strip(a) == strip(b)
    assert a[-1]["privacy_mode"] == "distributed" and math.isfinite(a[-1]["epsilon_spent"])
