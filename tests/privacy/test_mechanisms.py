"""Gaussian and Laplace randomizers: scale, independence, determinism, averaging law.

Statistical tolerances are 5 standard errors of the estimator (two-sided false-failure
rate ≈ 6e-7 per check under a normal approximation); KS tests use α = 1e-6. Keys are
fixed, so the suite is deterministic; the rates state how unlikely a failure would be
for a correct sampler under another key.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ldpsim._src.privacy.noise import calibration, mechanisms
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib

TREE = {"conv": jnp.zeros((5, 5, 1, 6)), "dense": {"w": jnp.zeros((400, 120)), "b": jnp.zeros(120)}}


def _flat(tree):
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree_util.tree_leaves(tree)])


def test_gaussian_std_and_ks():
    sigma = 0.37
    z = _flat(mechanisms.gaussian_noise(jax.random.key(0), {"x": jnp.zeros(1_000_000)}, sigma))
    n = z.size
    assert abs(z.std() / sigma - 1) < 5 / np.sqrt(2 * n)  # SE of the sample std ≈ σ/√(2n)
    assert abs(z.mean()) < 5 * sigma / np.sqrt(n)
    sub = z[:100_000]
    assert stats.kstest(sub, "norm", args=(0, sigma)).pvalue > 1e-6
    # ... and the test has power: a 10 % wrong scale is rejected.
    assert stats.kstest(sub, "norm", args=(0, 1.1 * sigma)).pvalue < 1e-6
    assert stats.kstest(sub, "norm", args=(0, 0.9 * sigma)).pvalue < 1e-6


def test_laplace_scale_and_ks():
    b = 0.8
    z = _flat(mechanisms.laplace_noise(jax.random.key(1), {"x": jnp.zeros(1_000_000)}, b))
    n = z.size
    # MLE of b is mean|x|; |x| ~ Exp(b) has std b, so SE = b/√n.
    assert abs(np.abs(z).mean() - b) < 5 * b / np.sqrt(n)
    assert abs(z.var() / (2 * b * b) - 1) < 5 * np.sqrt(5) / np.sqrt(n)  # Var(x²)/E[x²]² = 5 for Laplace
    sub = z[:100_000]
    assert stats.kstest(sub, "laplace", args=(0, b)).pvalue > 1e-6
    assert stats.kstest(sub, "laplace", args=(0, 1.1 * b)).pvalue < 1e-6


def test_same_key_same_noise_different_keys_independent():
    a = _flat(mechanisms.gaussian_noise(jax.random.key(7), TREE, 1.0))
    b = _flat(mechanisms.gaussian_noise(jax.random.key(7), TREE, 1.0))
    c = _flat(mechanisms.gaussian_noise(jax.random.key(8), TREE, 1.0))
    np.testing.assert_array_equal(a, b)
    assert abs(np.corrcoef(a, c)[0, 1]) < 5 / np.sqrt(a.size)
    # Leaves get independent noise from split keys (no two leaves share a stream).
    leaves = [np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(mechanisms.gaussian_noise(jax.random.key(9), TREE, 1.0))]
    m = min(x.size for x in leaves)
    for i in range(len(leaves)):
        for j in range(i + 1, len(leaves)):
            assert abs(np.corrcoef(leaves[i][:m], leaves[j][:m])[0, 1]) < 5 / np.sqrt(m)


def test_noise_keeps_structure_and_dtype():
    tree = {"a": jnp.zeros((3, 4), jnp.float32), "b": jnp.zeros(5, jnp.bfloat16)}
    out = mechanisms.add_gaussian_noise(jax.random.key(0), tree, 1.0)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tree)
    assert out["a"].dtype == jnp.float32 and out["b"].dtype == jnp.bfloat16
    assert out["a"].shape == (3, 4)


def test_vmap_over_clients_matches_per_client_calls():
    keys = jax.random.split(jax.random.key(3), 4)
    batched = jax.vmap(lambda k: mechanisms.gaussian_noise(k, TREE, 0.5))(keys)
    for i in range(4):
        single = mechanisms.gaussian_noise(keys[i], TREE, 0.5)
        np.testing.assert_array_equal(_flat(jax.tree_util.tree_map(lambda x: x[i], batched)), _flat(single))


def test_changing_epsilon_does_not_recompile():
    traces = []

    @jax.jit
    def release(key, update, clip, stddev):
        traces.append(1)
        return mechanism_lib.gaussian_randomizer(key, update, clip=clip, stddev=stddev).noisy

    update = {"w": jnp.ones(1000)}
    for eps in (0.5, 1.0, 8.0, 50.0):
        sigma = calibration.calibrate(epsilon=eps, delta=1e-5, clip=1.0).sigma
        out = release(jax.random.key(0), update, jnp.float32(1.0), jnp.float32(sigma))
        assert np.isfinite(np.asarray(out["w"])).all()
    assert len(traces) == 1


def test_randomizers_clip_before_noise():
    update = {"w": jnp.full(100, 10.0)}
    g = mechanism_lib.gaussian_randomizer(jax.random.key(0), update, clip=1.0, stddev=0.0)
    assert float(jnp.linalg.norm(g.clipped["w"])) == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_array_equal(np.asarray(g.noisy["w"]), np.asarray(g.clipped["w"]))
    assert float(g.norm) == pytest.approx(100.0)
    lap = mechanism_lib.laplace_randomizer(jax.random.key(0), update, clip=2.0, scale=0.0)
    assert float(jnp.sum(jnp.abs(lap.clipped["w"]))) == pytest.approx(2.0, rel=1e-6)


# n = 5,000 (10^8 normals, ~16 CPU s) is the large-cohort repeat of the n = 200 check: full suite.
@pytest.mark.parametrize("n,d,trials", [(1, 20_000, 20), (200, 20_000, 10),
                                        pytest.param(5_000, 2_000, 10, marks=pytest.mark.slow)])
def test_averaging_law(n, d, trials):
    """noise averaging: the mean of n noised vectors has per-coordinate noise std σ/√n."""
    sigma = 0.5
    direction = jnp.ones(d) / jnp.sqrt(d)  # aligned clipped updates of norm C = 1

    @jax.jit
    def mean_noise(key):
        keys = jax.random.split(key, n)
        noised = jax.vmap(lambda k: mechanisms.add_gaussian_noise(k, {"u": direction}, sigma)["u"])(keys)
        return noised.mean(axis=0) - direction

    z = np.stack([np.asarray(mean_noise(jax.random.key(100 + t))) for t in range(trials)])
    # Per-coordinate std: relative SE 1/√(2dT); allow 5 SE.
    assert abs(z.std() / (sigma / np.sqrt(n)) - 1) < 5 / np.sqrt(2 * d * trials)
    # Norm: E‖z̄‖ = c_d σ/√n with c_d ≈ √d(1 − 1/(4d)); spread σ/√(2n) per trial.
    norms = np.linalg.norm(z, axis=1)
    expected = np.sqrt(d) * (1 - 1 / (4 * d)) * sigma / np.sqrt(n)
    assert abs(norms.mean() - expected) < 5 * sigma / np.sqrt(2 * n * trials)


# ---------------------------------------------------------------------------
# Argument checks: concrete bad values raise LdpsimError naming the argument; traced
# values are not checked (they cannot be inspected) and still work under jit.

from ldpsim._src._checks import LdpsimError  # noqa: E402

_UPDATE = {"w": jnp.array([3.0, -4.0]), "b": jnp.array([1.0])}
_BAD_CLIPS = [-1.0, 0.0, -0.0, np.nan, np.float32(-2.0), jnp.float32(-1.0), jnp.array([1.0, -1.0]), "x"]
_BAD_SCALES = [-1.0, -1e-30, np.nan, np.inf, -np.inf, np.float32(np.nan), jnp.float32(-0.5),
               jnp.array([0.5, np.inf]), "x"]


@pytest.mark.parametrize("clip", _BAD_CLIPS, ids=repr)
@pytest.mark.parametrize("randomizer,kw", [(mechanism_lib.gaussian_randomizer, "stddev"),
                                          (mechanism_lib.laplace_randomizer, "scale")])
def test_randomizers_reject_concrete_bad_clip(randomizer, kw, clip):
    with pytest.raises(LdpsimError, match="clip"):
        randomizer(jax.random.key(0), _UPDATE, clip=clip, **{kw: 1.0})
    with pytest.raises(ValueError):  # LdpsimError is a ValueError
        randomizer(jax.random.key(0), _UPDATE, clip=clip, **{kw: 1.0})


@pytest.mark.parametrize("value", _BAD_SCALES, ids=repr)
@pytest.mark.parametrize("call,name", [
    (lambda v: mechanism_lib.gaussian_randomizer(jax.random.key(0), _UPDATE, clip=1.0, stddev=v), "stddev"),
    (lambda v: mechanism_lib.laplace_randomizer(jax.random.key(0), _UPDATE, clip=1.0, scale=v), "scale"),
    (lambda v: mechanisms.gaussian_noise(jax.random.key(0), _UPDATE, v), "stddev"),
    (lambda v: mechanisms.gaussian_noise(jax.random.key(0), _UPDATE, v, impl="jax"), "stddev"),
    (lambda v: mechanisms.laplace_noise(jax.random.key(0), _UPDATE, v), "scale"),
    (lambda v: mechanisms.add_gaussian_noise(jax.random.key(0), _UPDATE, v), "stddev"),
    (lambda v: mechanisms.add_laplace_noise(jax.random.key(0), _UPDATE, v), "scale"),
], ids=["gaussian_randomizer", "laplace_randomizer", "gaussian_noise", "gaussian_noise_jax",
        "laplace_noise", "add_gaussian_noise", "add_laplace_noise"])
def test_noise_functions_reject_concrete_bad_scale(call, name, value):
    with pytest.raises(LdpsimError, match=name):
        call(value)


def test_negative_clip_no_longer_flips_the_update():
    # Before: clip=-1 silently released -u/‖u‖ (the sign-flipped update).
    with pytest.raises(LdpsimError, match="clip must be > 0"):
        mechanism_lib.gaussian_randomizer(jax.random.key(0), {"w": jnp.array([3.0, 4.0])},
                                       clip=-1.0, stddev=0.0)


@pytest.mark.parametrize("clip,scale", [(np.inf, 0.0), (1e-30, 0.0), (1e30, 1e30),
                                        (np.float32(2.0), np.float64(0.5)), (jnp.float32(1.0), jnp.float32(0.0)),
                                        (2, 1), (jnp.array([1.0]), jnp.array([0.5]))],
                         ids=repr)
def test_valid_concrete_arguments_are_accepted(clip, scale):
    g = mechanism_lib.gaussian_randomizer(jax.random.key(0), _UPDATE, clip=clip, stddev=scale)
    lap = mechanism_lib.laplace_randomizer(jax.random.key(0), _UPDATE, clip=clip, scale=scale)
    for out in (g, lap):
        assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(out.noisy))


def test_traced_arguments_are_not_checked_and_still_work_under_jit():
    @jax.jit
    def release(key, clip, stddev, scale):
        g = mechanism_lib.gaussian_randomizer(key, _UPDATE, clip=clip, stddev=stddev)
        lap = mechanism_lib.laplace_randomizer(key, _UPDATE, clip=clip, scale=scale)
        z = mechanisms.add_gaussian_noise(key, _UPDATE, stddev)
        y = mechanisms.add_laplace_noise(key, _UPDATE, scale)
        return g, lap, z, y

    g, lap, z, y = release(jax.random.key(0), jnp.float32(2.0), jnp.float32(0.0), jnp.float32(0.0))
    np.testing.assert_allclose(_flat(g.noisy), 2.0 * np.array([1.0, 3.0, -4.0]) / np.sqrt(26.0), rtol=1e-6)
    np.testing.assert_allclose(_flat(lap.noisy), np.array([1.0, 3.0, -4.0]) / 4.0, rtol=1e-6)
    np.testing.assert_array_equal(_flat(z), _flat(_UPDATE))
    np.testing.assert_array_equal(_flat(y), _flat(_UPDATE))
    # A traced bad value cannot be inspected: no error is raised (documented; the engine
    # validates its configuration before tracing).
    g, *_ = release(jax.random.key(0), jnp.float32(-1.0), jnp.float32(0.0), jnp.float32(0.0))
    np.testing.assert_allclose(_flat(g.noisy), -np.array([1.0, 3.0, -4.0]) / np.sqrt(26.0), rtol=1e-6)


def test_vmapped_per_client_arguments_are_accepted():
    keys = jax.random.split(jax.random.key(1), 3)
    updates = {"w": jnp.arange(6.0).reshape(3, 2)}
    clips, stds = jnp.array([0.5, 1.0, 2.0]), jnp.array([0.0, 0.0, 0.0])
    out = jax.vmap(lambda k, u, c, s: mechanism_lib.gaussian_randomizer(k, u, clip=c, stddev=s))(
        keys, updates, clips, stds)
    norms = np.linalg.norm(np.asarray(out.noisy["w"]), axis=1)
    np.testing.assert_allclose(norms, np.minimum(np.linalg.norm(np.arange(6.0).reshape(3, 2), axis=1),
                                                 clips), rtol=1e-6)
