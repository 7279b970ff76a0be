"""Clipping: ‖clip(u)‖ = min(‖u‖, C), direction preserved, edge cases explicit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpsim.privacy import clipping


def _tree(seed: int, scale: float, shapes):
    rng = np.random.default_rng(seed)
    return {f"w{i}": jnp.asarray(rng.normal(size=s) * scale, jnp.float32) for i, s in enumerate(shapes)}


def _flat(tree):
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree_util.tree_leaves(tree)])


shapes_st = st.lists(st.lists(st.integers(1, 6), min_size=0, max_size=3).map(tuple), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(1e-6, 1e6), clip=st.floats(1e-3, 1e3),
       shapes=shapes_st)
def test_global_clip_norm_and_direction(seed, scale, clip, shapes):
    tree = _tree(seed, scale, shapes)
    clipped, norm = clipping.clip_by_global_norm(tree, clip)
    u, v = _flat(tree), _flat(clipped)
    true_norm = np.linalg.norm(u)
    np.testing.assert_allclose(float(norm), true_norm, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(v), min(true_norm, clip), rtol=1e-5, atol=1e-30)
    if true_norm > 0:
        cos = u @ v / (np.linalg.norm(u) * max(np.linalg.norm(v), 1e-300))
        assert cos == pytest.approx(1.0, abs=1e-5)  # direction preserved
    if true_norm <= clip:
        np.testing.assert_array_equal(v, u)  # untouched below the bound


def test_zero_update_is_returned_unchanged_with_zero_norm():
    tree = {"a": jnp.zeros((3, 2)), "b": jnp.zeros(4)}
    clipped, norm = clipping.clip_by_global_norm(tree, 1.0)
    assert float(norm) == 0.0
    assert all(np.all(np.isfinite(x)) and not np.any(x) for x in jax.tree_util.tree_leaves(clipped))


def test_huge_finite_values_never_give_nan():
    tree = {"a": jnp.full((10,), 1e30, jnp.float32)}  # squares overflow float32
    clipped, norm = clipping.clip_by_global_norm(tree, 2.0)
    np.testing.assert_allclose(float(norm), 1e30 * np.sqrt(10), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(clipped["a"]), np.full(10, 2.0 / np.sqrt(10)), rtol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_update_becomes_zero_and_is_flagged(bad):
    tree = {"a": jnp.array([1.0, bad, 3.0]), "b": jnp.ones(2)}
    clipped, norm = clipping.clip_by_global_norm(tree, 1.0)
    assert not np.isfinite(float(norm))
    for leaf in jax.tree_util.tree_leaves(clipped):
        np.testing.assert_array_equal(np.asarray(leaf), 0.0)


def test_l1_clip():
    tree = {"a": jnp.array([3.0, -4.0]), "b": jnp.array([1.0])}
    clipped, norm = clipping.clip_by_l1_norm(tree, 4.0)
    assert float(norm) == pytest.approx(8.0)
    np.testing.assert_allclose(_flat(clipped), np.array([1.5, -2.0, 0.5]), rtol=1e-6)


def test_per_layer_clip_uses_each_leaf_bound():
    tree = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([0.3, 0.4])}
    clipped, norms = clipping.clip_per_layer(tree, {"a": 1.0, "b": 1.0})
    np.testing.assert_allclose(np.asarray(clipped["a"]), [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["b"]), [0.3, 0.4], rtol=1e-6)  # below its bound
    assert float(norms["a"]) == pytest.approx(5.0) and float(norms["b"]) == pytest.approx(0.5)
    assert float(clipping.per_layer_bound({"a": 3.0, "b": 4.0})) == pytest.approx(5.0)
    scalar, _ = clipping.clip_per_layer(tree, 0.5)
    np.testing.assert_allclose(np.asarray(scalar["b"]), [0.3, 0.4], rtol=1e-6)


def test_clip_is_jittable_vmappable_and_clip_is_traced():
    traces = []

    @jax.jit
    def f(u, c):
        traces.append(1)
        return jax.vmap(clipping.clip_by_global_norm, in_axes=(0, None))(u, c)

    u = {"w": jnp.arange(12.0).reshape(3, 4)}
    for c in (0.5, 1.0, 7.0):
        clipped, norms = f(u, jnp.float32(c))
        np.testing.assert_allclose(np.linalg.norm(np.asarray(clipped["w"]), axis=1),
                                   np.minimum(np.linalg.norm(np.arange(12.0).reshape(3, 4), axis=1), c),
                                   rtol=1e-6)
    assert len(traces) == 1
