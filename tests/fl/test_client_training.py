"""DP-SGD clients as one object (ldpsim._src.fl.dp_client.ClientTraining) composed with a
privacy mode, and accounting taken from the mechanisms' dp_event (local randomizers and
DP-SGD clients) instead of from names."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim.data import PaddedPopulation
from ldpsim._src.fl import dp_client, modes, planning
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.experiment import Experiment
from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
from ldpsim._src.privacy.noise import calibration
from ldpsim.models import get_model

FEATURES, CLASSES, MAX_EX, N = 5, 3, 8, 24


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, MAX_EX, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(N, MAX_EX))
    counts = rng.integers(1, MAX_EX + 1, size=N)
    pop = PaddedPopulation.from_arrays(x, y, counts, num_classes=CLASSES, compact=False)
    model = get_model("logreg", input_shape=(FEATURES,), num_classes=CLASSES)
    params = model.init(jax.random.key(0), jnp.zeros((1, FEATURES)))
    return model, params, pop


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(tree)])


@pytest.mark.parametrize("z, n, b, steps, rounds", [
    (0.8, 50, 8, 3, 5), (1.3, 7, 8, 10, 2), (2.0, 100, 10, 25, 1), (0.5, 16, 4, 4, 0),
    (0.0, 16, 4, 4, 3)])
def test_dpsgd_event_gives_the_shuffle_epsilon_exactly(z, n, b, steps, rounds):
    # The object's accounting event (one round) composed over the rounds equals the
    # reference function's "shuffle" epsilon bit for bit (the same exact composition).
    training = dp_client.dpsgd(4)
    event = training.dp_event(z, num_examples=n, batch_size=b, local_steps=steps)
    ours = dp_client.event_epsilon(event, rounds, 1e-5)
    ref = dp_client.dp_client_epsilon(noise_multiplier=z, batch_size=b, num_examples=n,
                                      local_steps=steps, rounds=rounds, delta=1e-5,
                                      method="shuffle").epsilon
    assert ours == ref
    assert training.sensitivity == "2C" and "replace one example" in training.neighbours


def test_event_epsilon_against_independent_references():
    # Gaussian: k releases of multiplier z are one of z/sqrt(k); dp_accounting's own exact
    # Gaussian epsilon is an independent implementation (relative agreement 1e-6).
    for z, k in ((0.9, 1), (1.7, 12), (4.0, 300)):
        ours = dp_client.event_epsilon(dp_accounting.GaussianDpEvent(z), k, 1e-6)
        ref = dp_accounting.get_epsilon_gaussian(z / math.sqrt(k), 1e-6)
        assert ours == pytest.approx(ref, rel=1e-6)
    # Laplace (pure DP): basic composition k/b exactly; self-composition multiplies counts.
    assert dp_client.event_epsilon(dp_accounting.LaplaceDpEvent(0.25), 3, 1e-5) == 12.0
    nested = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 3)
    assert dp_client.event_epsilon(nested, 4, 1e-5) == dp_client.event_epsilon(
        dp_accounting.GaussianDpEvent(2.0), 12, 1e-5)
    assert dp_client.event_epsilon(dp_accounting.NonPrivateDpEvent(), 2, 1e-5) == math.inf
    assert dp_client.event_epsilon(dp_accounting.GaussianDpEvent(1.0), 0, 1e-5) == 0.0
    # Any other event goes to dp_accounting (PLD where it supports the event, else RDP).
    sampled = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.5))
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(sampled, 3)
    assert dp_client.event_epsilon(sampled, 3, 1e-5) == pld.get_epsilon(1e-5)
    with pytest.raises(LdpsimError, match="UnsupportedDpEvent"):
        dp_client.event_epsilon(dp_accounting.UnsupportedDpEvent(), 1, 1e-5)


@pytest.mark.parametrize("mechanism, neighbours", [("gaussian", "replace"),
                                                   ("gaussian", "add-remove"),
                                                   ("laplace", "replace")])
def test_local_plan_accounts_from_the_randomizers_event(mechanism, neighbours):
    cfg = SimulationConfig(dataset="synthetic", population=N, clients_per_round=4,
                           epsilon=2.5, mechanism=mechanism, neighbours=neighbours, clip=0.3,
                           delta=1e-5)
    plan = planning.plan(cfg, N)
    sigma, sens = plan.columns["sigma"], plan.columns["sensitivity"]
    assert sens == calibration.sensitivity(0.3, neighbours)
    for k in (1, 7):
        if mechanism == "gaussian":   # independent: dp_accounting's exact Gaussian epsilon
            ref = dp_accounting.get_epsilon_gaussian(sigma / sens / math.sqrt(k), 1e-5)
            assert plan.epsilon_of(k, k, 1.0) == pytest.approx(ref, rel=1e-6)
        else:                         # basic composition of k pure-DP releases: k * Δ/b
            assert plan.epsilon_of(k, k, 1.0) == pytest.approx(k * sens / sigma, rel=1e-12)
    assert math.isnan(plan.columns["delta"]) == (mechanism == "laplace")
    assert math.isnan(plan.client_epsilon_of(3))   # ordinary clients: no sample-level ε


def test_no_privacy_plan_has_no_epsilon():
    plan = planning.plan(SimulationConfig(dataset="synthetic", population=N, clients_per_round=4,
                                       epsilon=math.inf), N)
    assert plan.mechanism.randomizer == "none"
    assert math.isnan(plan.epsilon_of(5, 5, 1.0))


@pytest.mark.filterwarnings("ignore::ldpsim._src.privacy.noise.calibration.SamplerTailWarning")
def test_client_dp_plan_composes_with_every_mode():
    for mode, extra in (("ldp", dict(epsilon=4.0)), ("central", dict(noise_multiplier=1.0)),
                        ("distributed", dict(noise_multiplier=1.0)),
                        ("mindspore", {})):
        cfg = SimulationConfig(dataset="synthetic", population=N, clients_per_round=4,
                               privacy_mode=mode, client_dp=True, client_dp_micro_batches=2,
                               client_dp_noise_multiplier=0.9, batch_size=4, local_steps=3,
                               **extra)
        plain = planning.plan(dataclasses.replace(cfg, client_dp=False, client_dp_micro_batches=1,
                                               client_dp_noise_multiplier=0.0), N)
        plan = planning.plan(cfg, N, smallest_client=5)
        # The mode is unchanged; only the clients' trainer is composed in (cached object).
        assert plan.mechanism._replace(client=dp_client.PLAIN) == plain.mechanism
        assert plan.mechanism.client is dp_client.dpsgd(2)
        assert plan.mechanism is modes.with_client_training(plain.mechanism, dp_client.dpsgd(2))
        assert isinstance(plan.client_hyper, dp_client.ClientDpHyper)
        # the float32 sampler's reach (bound (1)) moves δ by ~1e-25: the ideal ε to 1e-12
        assert plan.client_epsilon_of(4) == pytest.approx(dp_client.dp_client_epsilon(
            noise_multiplier=0.9, batch_size=4, num_examples=5, local_steps=3, rounds=4,
            delta=cfg.delta, method="shuffle").epsilon, rel=1e-12)


@pytest.mark.filterwarnings("ignore::ldpsim._src.privacy.noise.calibration.SamplerTailWarning")
@pytest.mark.parametrize("mode,extra", [("ldp", dict(mechanism="privunit2", epsilon=4.0)),
                                        ("mindspore", {}), ("ldp", dict(epsilon=4.0))])
def test_client_dp_delta_is_the_clients_accountants_delta_in_every_mode(mode, extra):
    """client_dp_delta sets the DP-SGD clients' δ (also where the mode has no δ of its
    own: a pure randomizer, MindSpore's dp_delta); unset, the run's delta."""
    cfg = SimulationConfig(dataset="synthetic", population=N, clients_per_round=4,
                           privacy_mode=mode, client_dp=True, client_dp_noise_multiplier=0.9,
                           batch_size=4, local_steps=3, **extra)
    def eps(c):
        return planning.plan(c, N, dim=1000, smallest_client=5).client_epsilon_of(4)
    def ideal(delta):
        return dp_client.dp_client_epsilon(
            noise_multiplier=0.9, batch_size=4, num_examples=5, local_steps=3, rounds=4,
            delta=delta, method="shuffle").epsilon
    # (the float32 sampler's reach, bound (1), moves δ by a negligible amount: 1e-9 relative)
    assert eps(cfg) == pytest.approx(ideal(cfg.delta), rel=1e-9)
    own = dataclasses.replace(cfg, client_dp_delta=1e-9)
    assert eps(own) == pytest.approx(ideal(1e-9), rel=1e-9) and eps(own) > eps(cfg)
    # the δ is a results column beside client_dp_epsilon (NaN without DP-SGD clients)
    cols = lambda c: planning.plan(c, N, dim=1000, smallest_client=5).columns  # noqa: E731
    assert cols(own)["client_dp_delta"] == 1e-9 and cols(cfg)["client_dp_delta"] == cfg.delta
    assert math.isnan(cols(dataclasses.replace(cfg, client_dp=False,
                                               client_dp_noise_multiplier=0.0))["client_dp_delta"])
    # the nested schema holds it, losslessly
    assert Experiment.from_flat(own).flat() == own
    assert Experiment.from_flat(own).client_dp.delta == 1e-9
    with pytest.raises(LdpsimError, match="client_dp_delta"):
        SimulationConfig(privacy_mode=mode, client_dp=True, client_dp_delta=1.5, **extra)
    with pytest.raises(LdpsimError, match="client_dp_delta"):   # no DP-SGD clients: no place
        SimulationConfig(privacy_mode=mode, client_dp_delta=1e-9, **extra)


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_round_runs_dpsgd_clients_from_the_mechanism(setup):
    # The kernel takes the clients' trainer and its traced knobs from the composed object:
    # equal to the same trainer bound as a client_update hook (same keys); a new
    # clip/multiplier changes the result and reuses the compiled round.
    model, params, pop = setup
    state = init_state(params, jax.random.key(0))
    ids, mask = np.arange(8, dtype=np.int32), np.ones(8, bool)
    mech = modes.with_client_training(modes.local("gaussian"), dp_client.dpsgd(4))
    kw = dict(apply_fn=model.apply, local_steps=2, batch_size=4, chunk_size=4)
    fn = jax.jit(make_round_fn(mechanism=mech, **kw))
    hyper = RoundHyper.create(sigma=0.0, clip=1e6, client_lr=0.3, server_lr=1.0)
    hyper = hyper._replace(client=dp_client.dpsgd(4).knobs(0.1, 1.0))
    ours = fn(state, pop, 0, ids, mask, hyper)[0]
    hook = jax.jit(make_round_fn(client_update=dp_client.make_dp_client_update(
        micro_batches=4, clip_norm=0.1, noise_multiplier=1.0), **kw))
    ref = hook(state, pop, 0, ids, mask, hyper._replace(client=()))[0]
    np.testing.assert_allclose(_flat(ours.params), _flat(ref.params), rtol=1e-6, atol=1e-7)
    other = fn(state, pop, 0, ids, mask, hyper._replace(
        client=dp_client.dpsgd(4).knobs(0.2, 0.5)))[0]
    assert not np.allclose(_flat(other.params), _flat(ours.params))
    assert fn._cache_size() == 1


def test_a_report_randomizers_epsilon_column_is_the_setting_and_spent_is_realised():
    """PrivUnit2's float32 parameters at ε = 16 deliver 16.0000009: the column keeps the
    setting (runs group by it), epsilon_spent composes what the floats deliver."""
    cfg = SimulationConfig(dataset="synthetic", population=N, clients_per_round=4,
                           mechanism="privunit2", epsilon=16.0)
    plan = planning.plan(cfg, N, dim=61_706)
    realised = planning.local_randomizer(cfg, 61_706).epsilon
    assert realised > 16.0 and realised == pytest.approx(16.0, rel=1e-6)
    assert plan.columns["epsilon"] == 16.0
    assert plan.epsilon_of(1, 1, 1.0) == pytest.approx(realised, rel=1e-9)
