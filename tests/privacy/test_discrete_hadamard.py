"""Fast Walsh–Hadamard transform and the randomized rotation (ldpsim._src.privacy.hadamard)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import hadamard as H


@pytest.mark.parametrize("dim", [1, 2, 4, 8, 64, 1024])
def test_fwht_matches_scipy_hadamard(dim):
    x = np.random.default_rng(dim).normal(size=(3, dim))
    ref = x @ scipy.linalg.hadamard(dim) / np.sqrt(dim)       # independent reference, float64
    got = np.asarray(jax.jit(H.fwht)(jnp.asarray(x, jnp.float32)), np.float64)
    # float32: log2(D) butterfly stages, each at most one rounding per value of size <= |x|_1
    tol = (np.log2(dim) + 2) * 2.0**-23 * np.abs(x).sum(axis=1, keepdims=True).max()
    np.testing.assert_allclose(got, ref, atol=tol, rtol=0)


def test_fwht_is_an_involution_and_exact_on_integers():
    x = jnp.asarray(np.random.default_rng(0).integers(-50, 50, 256), jnp.float32)
    # D = 256 = 2^8: the scale 1/16 is exact, integer sums below 2^24 are exact
    y = H.fwht(x)
    np.testing.assert_array_equal(np.asarray(H.fwht(y)), np.asarray(x))


def test_non_power_of_two_is_refused():
    with pytest.raises(LdpsimError, match="power-of-two"):
        H.fwht(jnp.zeros(6))


def test_rotation_inverse_and_norm_at_lenet5_size():
    d = 61_706
    tree = {"a": jnp.asarray(np.random.default_rng(1).normal(size=(d - 6,)), jnp.float32),
            "b": jnp.ones((2, 3), jnp.float32)}
    v, unflatten, n = H.flatten_pad(tree)
    assert n == d and v.shape == (65_536,)
    key = jax.random.key(7)
    y = jax.jit(H.rotate)(key, v)
    back = unflatten(jax.jit(H.unrotate)(key, y))
    scale = float(jnp.max(jnp.abs(v)))
    # 2 × 16 stages + 2 scalings, each one float32 rounding relative to the running magnitude
    for leaf, ref in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree)):
        assert float(jnp.max(jnp.abs(leaf - ref))) <= 40 * 2.0**-24 * scale * np.sqrt(65_536) / 16
    np.testing.assert_allclose(float(jnp.linalg.norm(y)), float(jnp.linalg.norm(v)), rtol=1e-5)
    # the rotation flattens: every coordinate is about |v|/sqrt(D)
    assert float(jnp.max(jnp.abs(y))) < 6 * float(jnp.linalg.norm(v)) / np.sqrt(65_536)


def test_signs_depend_on_the_key_only():
    a = H.random_signs(jax.random.key(3), 1024)
    b = H.random_signs(jax.random.key(3), 1024)
    c = H.random_signs(jax.random.key(4), 1024)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert set(np.unique(np.asarray(a))) == {-1.0, 1.0}
    assert np.mean(np.asarray(a) != np.asarray(c)) > 0.4
