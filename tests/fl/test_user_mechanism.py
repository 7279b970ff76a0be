"""A user's own LocalMechanism, built from the public types outside ldpsim and never
registered, runs in ``ldpsim.simulate``: the round calls its functions, not a name lookup."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import pytest

import ldpsim
from ldpsim import mechanism as M
from ldpsim._src.fl.config import SimulationConfig
from toy_data import toy_logreg_problem

N = 24


class HalfParams(NamedTuple):
    clip: jax.Array
    sigma: jax.Array   # std of the noise in the MESSAGE (the decoded estimate has half)


def _privatize(key, update, params):
    """Sends ``2·(clip(x) + (sigma/2)·z)``: a message, twice the estimate (z drawn by
    ldpsim's public Gaussian randomizer, so the decoded estimate can be compared)."""
    rel = ldpsim.privacy.gaussian_randomizer(key, update, clip=params.clip,
                                             stddev=0.5 * params.sigma)
    message = jax.tree_util.tree_map(lambda m: 2.0 * m, rel.noisy)
    return M.Report(message, rel.clipped, rel.norm, rel.release_norm, rel.was_clipped,
                    rel.finite)


def _decode(report, params, like=None):
    return jax.tree_util.tree_map(lambda m: 0.5 * m, report)


def _mean(params, update):
    return ldpsim.privacy.gaussian_randomizer(jax.random.key(0), update, clip=params.clip,
                                              stddev=0.0).clipped


def _variance(params, update):
    v = jnp.square(0.5 * params.sigma)
    return jax.tree_util.tree_map(lambda x: jnp.full(jnp.shape(x), v, jnp.float32), update)


def _half_gaussian(*, epsilon: float, delta: float, clip: float) -> M.LocalMechanism:
    """A user's randomizer: decoded, ``clip(x) + N(0, (sigma/2)²)``; its guarantee is the
    Gaussian mechanism's at the decoded noise (sensitivity 2C, replace-one; the ideal law's,
    as a user would state it)."""
    import dp_accounting

    ref = M.gaussian(epsilon=epsilon, delta=delta, clip=clip)   # only its calibrated sigma
    sigma = 2.0 * float(ref.params.scale)
    params = HalfParams(jnp.float32(clip), jnp.float32(sigma))
    return M.LocalMechanism(
        name="users_half_gaussian", params=params, neighbours="replace", epsilon=epsilon,
        delta=delta, privatize=_privatize, decode=_decode, mean=_mean, variance=_variance,
        noise_std=lambda p: 0.5 * p.sigma, additive=False,
        dp_event=lambda p: dp_accounting.GaussianDpEvent(float(0.5 * p.sigma) / (2 * clip)))


@pytest.fixture(scope="module")
def data():
    return toy_logreg_problem(N, n_test=100)


def _config(**kw):
    base = dict(dataset="toy", model="logreg", population=N, clients_per_round=8, rounds=2,
                epsilon=8.0, delta=1e-3, clip=1.0, local_steps=2, batch_size=4,
                client_lr=0.5, chunk_size=4, eval_every=1, seed=3)
    base.update(kw)
    return SimulationConfig(**base)


def test_an_unregistered_local_mechanism_runs_in_simulate(data):
    mech = _half_gaussian(epsilon=8.0, delta=1e-3, clip=1.0)
    assert mech.name not in M.REGISTRY
    history = ldpsim.simulate(_config(), data=data, mechanism=mech)
    assert len(history) == 2
    row = history[-1]
    assert row["mechanism"] == "users_half_gaussian"
    assert row["epsilon"] == 8.0 and row["delta"] == 1e-3
    assert row["clip"] == 1.0
    assert math.isfinite(row["accuracy"]) and row["noise_norm"] > 0
    # its own accountant: the Gaussian event at the decoded noise, composed over the worst
    # client's participations (an independent computation with dp_accounting)
    import dp_accounting

    sigma = float(mech.params.sigma) / 2
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(dp_accounting.GaussianDpEvent(sigma / 2.0), row["max_participation"])
    assert row["epsilon_spent"] == pytest.approx(pld.get_epsilon(1e-3), rel=1e-3)


@pytest.mark.slow
def test_its_decoded_release_equals_the_registered_one_it_mirrors(data):
    """Decoded, the user's message is ``clip(x) + (sigma/2)·z`` with the same key use as
    the registered Gaussian randomizer at std sigma/2, so the two training runs agree: the
    round applied the user's privatize and decode (the message is twice the estimate)."""
    mech = _half_gaussian(epsilon=8.0, delta=1e-3, clip=1.0)
    mine = ldpsim.simulate(_config(), data=data, mechanism=mech)
    ref = ldpsim.simulate(_config(), data=data)
    assert ref[-1]["sigma"] == pytest.approx(float(mech.params.sigma) / 2, rel=1e-6)
    for a, b in zip(mine, ref):
        for col in ("signal_norm", "clip_fraction"):
            assert a[col] == b[col], col
        for col in ("accuracy", "loss", "noise_norm", "model_change_norm"):
            assert a[col] == pytest.approx(b[col], rel=1e-5, abs=1e-6), col
