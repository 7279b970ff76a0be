"""ldpsim._src.privacy.randomizers.mechanism: a local randomizer as one object of pure functions."""

from __future__ import annotations

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim._src.fl.privatize import privatize
from ldpsim._src.privacy.noise import calibration
from ldpsim._src.privacy.randomizers import mechanism

TREE = {"w": jnp.arange(12.0).reshape(3, 4) / 10.0, "b": jnp.array([3.0, -4.0])}


@pytest.mark.parametrize("neighbours", ["replace", "add-remove"])
def test_gaussian_is_calibrated_and_accounted_for_its_relation(neighbours):
    m = mechanism.make("gaussian", epsilon=2.0, delta=1e-5, clip=1.5, neighbours=neighbours)
    cal = calibration.calibrate("gaussian", epsilon=2.0, delta=1e-5, clip=1.5,
                                neighbours=neighbours)
    assert float(m.params.scale) == pytest.approx(cal.sigma, rel=1e-6)
    assert (m.name, m.neighbours, m.epsilon, m.delta) == ("gaussian", neighbours, 2.0, 1e-5)
    event = m.dp_event(m.params)
    eps = dp_accounting.get_epsilon_gaussian(event.noise_multiplier, 1e-5)
    assert eps == pytest.approx(2.0, rel=1e-4)   # float32 σ: 1e-4 relative
    assert float(m.noise_std(m.params)) == pytest.approx(cal.sigma, rel=1e-6)


def test_laplace_is_calibrated_and_accounted():
    m = mechanism.make("laplace", epsilon=3.0, clip=2.0)
    assert float(m.params.scale) == pytest.approx(4.0 / 3.0, rel=1e-6)
    # ideally pure; the 64-bit sampler's bounded tails add a δ below 1e-18 (realised)
    assert m.ideal_delta == 0.0 and 0.0 < m.delta < 1e-18
    assert m.tail_mass == pytest.approx(m.delta, rel=1e-12)
    assert m.dp_event(m.params).noise_multiplier == pytest.approx(1 / 3.0, rel=1e-6)
    assert float(m.noise_std(m.params)) == pytest.approx(math.sqrt(2) * 4 / 3, rel=1e-6)


def test_infinite_epsilon_is_clip_only():
    m = mechanism.gaussian(epsilon=math.inf, delta=1e-5, clip=1.0)
    assert m.name == "none" and float(m.params.scale) == 0.0
    r = m.privatize(jax.random.key(0), TREE, m.params)
    np.testing.assert_array_equal(np.asarray(r.noisy["b"]), np.asarray(r.clipped["b"]))
    assert float(jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(r.noisy)))) \
        == pytest.approx(1.0, rel=1e-6)
    assert isinstance(m.dp_event(m.params), dp_accounting.NonPrivateDpEvent)


def test_privatize_matches_the_standalone_randomizers():
    """The object's privatize releases bit for bit what gaussian_randomizer /
    laplace_randomizer release with the same key."""
    key = jax.random.key(5)
    g = mechanism.gaussian(epsilon=4.0, delta=1e-5, clip=1.0)
    ref = mechanism.gaussian_randomizer(key, TREE, clip=g.params.clip, stddev=g.params.scale)
    out = g.privatize(key, TREE, g.params)   # both eager: same float ops
    for a, b in zip(jax.tree_util.tree_leaves(out.noisy), jax.tree_util.tree_leaves(ref.noisy)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    lap = mechanism.laplace(epsilon=4.0, clip=1.0)
    ref = mechanism.laplace_randomizer(key, TREE, clip=lap.params.clip, scale=lap.params.scale)
    out = lap.privatize(key, TREE, lap.params)
    for a, b in zip(jax.tree_util.tree_leaves(out.noisy), jax.tree_util.tree_leaves(ref.noisy)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", ["gaussian", "laplace", "none"])
def test_engine_privatize_goes_through_the_registry(name):
    params = mechanism.MechanismParams.create(clip=1.0, scale=0.3)
    keys = jax.random.split(jax.random.key(1), 4)
    trees = jax.tree_util.tree_map(lambda x: jnp.stack([x, -x, 2 * x, x * jnp.nan]), TREE)
    via_registry = jax.vmap(mechanism.privatize_fn(name), in_axes=(0, 0, None))(
        keys, trees, params)
    via_engine = jax.vmap(lambda k, t: privatize(k, t, clip=1.0, scale=0.3, mechanism=name))(
        keys, trees)
    for a, b in zip(jax.tree_util.tree_leaves(via_registry), jax.tree_util.tree_leaves(via_engine)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(via_engine.finite).tolist() == [True, True, True, False]


def test_params_are_traced_one_compilation_for_every_epsilon():
    traces = []

    @jax.jit
    def release(key, params):
        traces.append(1)
        return mechanism.privatize_fn("gaussian")(key, TREE, params).noisy

    for eps in (0.5, 2.0, 8.0):
        m = mechanism.gaussian(epsilon=eps, delta=1e-5, clip=1.0)
        release(jax.random.key(0), m.params)
    assert len(traces) == 1


def test_mean_noise_variance():
    assert float(mechanism.mean_noise_variance(2.0, 10.0, 10.0)) == pytest.approx(0.4)
    # weights 1, 3: n_eff = 16/10
    assert float(mechanism.mean_noise_variance(1.0, 4.0, 10.0)) == pytest.approx(10 / 16)
    assert float(mechanism.mean_noise_variance(1.0, 0.0, 0.0)) == 0.0


def test_unknown_mechanism_is_a_clear_error():
    with pytest.raises(LdpsimError, match="mechanism must be one of gaussian, laplace, none"):
        mechanism.make("privunit", epsilon=1.0)
    with pytest.raises(LdpsimError, match="got 'duchi'"):
        mechanism.privatize_fn("duchi")
    with pytest.raises(LdpsimError):
        mechanism.noise_std_factor("rr")


@pytest.mark.parametrize("name", ["gaussian", "laplace", "privunit2", "duchi", "signds"])
def test_mean_variance_is_the_exact_total_variance_over_d(name):
    """What the round's theory_noise_norm sums: d * mean_variance = total_variance exactly
    (input dependent for the report randomizers; (factor*scale)^2 for additive noise)."""
    d = 14
    kw = dict(epsilon=2.0, clip=1.0) | ({"delta": 1e-5} if name == "gaussian" else {})
    kw |= {} if name in ("gaussian", "laplace") else {"dim": d}
    if name == "signds":
        kw = dict(epsilon=2.0, dim=400, sign_k=0.05)
    m = mechanism.make(name, **kw)
    n = 400 if name == "signds" else d
    x = {"w": jnp.linspace(-0.2, 0.3, n - 2), "b": jnp.array([0.1, -0.05])}
    mv = float(mechanism.mean_variance_fn(name)(m.params, x))
    assert mv * n == pytest.approx(float(mechanism.total_variance(m, x)), rel=1e-5)
    if name in mechanism.ADDITIVE:
        assert mv == pytest.approx(float(m.noise_std(m.params)) ** 2, rel=1e-5)
    assert mechanism.VECTOR == ("gaussian", "laplace", "none", "privunit2", "privunitg",
                                "projunit", "fastprojunit", "duchi", "signds")
    with pytest.raises(LdpsimError, match="privatizes categories"):
        mechanism.mean_variance_fn("rr")
