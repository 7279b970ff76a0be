"""Composing a round from its stages (ldpsim._src.fl.stages, modes.chain), optax-style."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src.fl import modes, stages
from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
from ldpsim.models import get_model

from toy_data import toy_logreg_problem


def test_the_factories_are_compositions_of_stages():
    d = modes.distributed(10)
    assert isinstance(d.privatizer, stages.ClientStage) and d.noise is None
    assert d.aggregator == stages.float_sum(weighted=False, fixed_denominator=10.0)
    assert modes.chain(d.privatizer, d.aggregator, name="distributed") == d
    c = modes.central(10, True)
    assert c.server_noise is c.noise.add and c.update is c.clip_policy.update
    # the former flat attributes still read the stages
    assert (c.randomizer, c.weighted, c.fixed_denominator, c.per_client_clip) == (
        "none", False, 10.0, False)
    assert modes.mindspore().per_client_clip and modes.local("gaussian").weighted


def test_chain_takes_stages_only_once_each():
    st = modes.local("gaussian").privatizer
    with pytest.raises(TypeError, match="ClientStage"):
        modes.chain(stages.float_sum())
    with pytest.raises(TypeError, match="two"):
        modes.chain(st, stages.float_sum(), stages.float_sum())
    with pytest.raises(TypeError, match="stages"):
        modes.chain(st, "float")


def test_a_mode_of_ones_own_runs_in_the_kernel():
    """Local Gaussian clients, one vote each over a fixed m, and a clip policy of our own that
    halves C every round: no name is registered, the kernel calls the stages."""
    def update(state, skey, params, new_params, ids, mask, bits, phyper):
        return state * 0.5, state * 0.5, jnp.float32(jnp.nan)

    policy = stages.ClipPolicy(init=lambda n, clip: jnp.float32(clip),
                               round_clip=lambda state, clip, phyper: state, update=update)
    mech = modes.chain(modes.local("gaussian").privatizer, policy,
                       stages.float_sum(weighted=False, fixed_denominator=6.0), name="mine")
    pop, _, _ = toy_logreg_problem(n_clients=12)
    model = get_model("logreg", input_shape=(6,), num_classes=3)
    params = model.init(jax.random.key(0), jnp.zeros((1, 6)))
    fn = jax.jit(make_round_fn(apply_fn=model.apply, mechanism=mech, local_steps=1,
                               batch_size=4, chunk_size=3))
    state = init_state(params, jax.random.key(1), privacy=mech.init(12, 2.0))
    hyper = RoundHyper.create(clip=2.0, client_lr=0.5, server_lr=1.0, sigma=0.0)
    ids, mask = jnp.arange(6, dtype=jnp.int32), jnp.ones(6, bool)
    bounds = []
    for t in range(3):
        state, rm = fn(state, pop, t, ids, mask, hyper)
        bounds.append(float(rm.clip_bound))
        assert float(rm.n_eff) == pytest.approx(6.0)     # one vote each
    assert bounds == [2.0, 1.0, 0.5]
    assert np.isnan(float(rm.wrapped_fraction)) and int(rm.rounding_failures) == 0
