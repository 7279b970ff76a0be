"""The LEAF FEMNIST CNN (ldpsim.models.femnist_cnn): shapes, parameter count, the function
and its gradient against an independent float64 NumPy network, per-client vmap, and
``model="auto"`` for 62-class 28x28 data."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim.models import femnist_cnn, get_model, mlp128, num_params, resolve_model_name

KEY = jax.random.key(0)
# Small instances keep compilation short; the architecture is the same function of its sizes.
SMALL = dict(input_shape=(12, 12, 1), num_classes=7, dense=16)


def test_leaf_sizes_and_parameter_count():
    model = femnist_cnn()
    params = jax.eval_shape(model.init, KEY, jnp.zeros((1, 28, 28, 1)))
    shapes = {k: {n: v.shape for n, v in layer.items()} for k, layer in params.items()}
    # LEAF models/femnist/cnn.py: conv 32@5x5 same, pool, conv 64@5x5 same, pool, dense 2048, 62.
    assert shapes == {"conv1": {"kernel": (5, 5, 1, 32), "bias": (32,)},
                      "conv2": {"kernel": (5, 5, 32, 64), "bias": (64,)},
                      "fc1": {"kernel": (7 * 7 * 64, 2048), "bias": (2048,)},
                      "fc2": {"kernel": (2048, 62), "bias": (62,)}}
    assert num_params(params) == 832 + 51_264 + 6_424_576 + 127_038 == 6_603_710
    out = jax.eval_shape(model.apply, params, jnp.zeros((3, 28, 28)))  # (H, W) rows work
    assert out.shape == (3, 62)
    assert model.name == "femnist_cnn" and model.input_shape == (28, 28, 1)


def test_mlp128_is_the_articles_784_128_10():
    model = mlp128(input_shape=(28, 28, 1), num_classes=10)
    params = model.init(KEY, jnp.zeros((1, 28, 28, 1)))
    assert num_params(params) == 784 * 128 + 128 + 128 * 10 + 10 == 101_770


def _numpy_forward(p, x):
    """Float64 NumPy LEAF CNN: explicit loops over the 5x5 window (no JAX)."""
    def conv_same(x, w, b):
        n, h, wd, c = x.shape
        xp = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)))
        out = np.zeros((n, h, wd, w.shape[-1]))
        for i in range(5):
            for j in range(5):
                out += np.einsum("nhwc,co->nhwo", xp[:, i:i + h, j:j + wd, :], w[i, j])
        return out + b

    def pool(x):
        n, h, w, c = x.shape
        return x[:, :h // 2 * 2, :w // 2 * 2].reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))

    x = pool(np.maximum(conv_same(x, p["conv1"]["kernel"], p["conv1"]["bias"]), 0))
    x = pool(np.maximum(conv_same(x, p["conv2"]["kernel"], p["conv2"]["bias"]), 0))
    x = x.reshape(x.shape[0], -1)
    x = np.maximum(x @ p["fc1"]["kernel"] + p["fc1"]["bias"], 0)
    return x @ p["fc2"]["kernel"] + p["fc2"]["bias"]


def _numpy_loss(p, x, y):
    z = _numpy_forward(p, x)
    z = z - z.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))


def _problem():
    kx, ky, kp = jax.random.split(KEY, 3)
    x = jax.random.uniform(kx, (4, 12, 12, 1))
    y = jax.random.randint(ky, (4,), 0, SMALL["num_classes"])
    params = femnist_cnn(**SMALL).init(kp, x)
    # Non-zero biases, so that they enter the checks.
    params = jax.tree_util.tree_map(lambda a: a + 0.05 * jnp.cos(jnp.arange(a.size).reshape(a.shape)), params)
    return x, y, params


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
@pytest.mark.parametrize("impl", ["mixed", "xla"])
def test_function_and_gradient_match_a_float64_numpy_network(impl):
    x, y, params = _problem()
    model = femnist_cnn(**SMALL, conv_impl=impl, pool_impl="reshape" if impl == "mixed" else "window")
    p64 = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    x64, y64 = np.asarray(x, np.float64), np.asarray(y)
    np.testing.assert_allclose(model.apply(params, x), _numpy_forward(p64, x64), rtol=2e-4, atol=2e-5)

    def loss(p):
        z = model.apply(p, x)
        return jnp.mean(jax.nn.logsumexp(z, axis=1) - z[jnp.arange(4), y])

    grads = jax.grad(loss)(params)
    # Central differences of the float64 reference on a few coordinates of every layer:
    # truncation O(h^2) ~ 1e-12 and rounding ~ 1e-16/h ~ 1e-10, far below the float32 tolerance.
    h = 1e-5
    rng = np.random.default_rng(0)
    for layer in ("conv1", "conv2", "fc1", "fc2"):
        for name in ("kernel", "bias"):
            g = np.asarray(grads[layer][name])
            flat = np.flatnonzero(np.abs(g) > 1e-4)   # coordinates that carry gradient
            assert flat.size, (layer, name)
            for idx in rng.choice(flat, size=min(3, flat.size), replace=False):
                pos = np.unravel_index(idx, g.shape)
                plus, minus = (jax.tree_util.tree_map(np.copy, p64) for _ in range(2))
                plus[layer][name][pos] += h
                minus[layer][name][pos] -= h
                fd = (_numpy_loss(plus, x64, y64) - _numpy_loss(minus, x64, y64)) / (2 * h)
                np.testing.assert_allclose(g[pos], fd, rtol=2e-3, atol=2e-6,
                                           err_msg=f"{layer}.{name}{pos}")


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_vmap_over_per_client_params_equals_a_loop():
    x, _, _ = _problem()
    model = femnist_cnn(**SMALL)
    keys = jax.random.split(jax.random.key(1), 3)
    stacked = jax.vmap(lambda k: model.init(k, x))(keys)
    xs = jnp.stack([x, x[::-1], x * 0.5])
    batched = jax.jit(jax.vmap(model.apply))(stacked, xs)
    for i in range(3):
        one = jax.tree_util.tree_map(lambda a, i=i: a[i], stacked)
        np.testing.assert_allclose(batched[i], model.apply(one, xs[i]), rtol=1e-5, atol=1e-6)
    grads = jax.vmap(jax.grad(lambda p, x: jnp.sum(model.apply(p, x) ** 2)))(stacked, xs)
    assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(stacked)


def test_auto_picks_it_for_62_class_28x28_images_only():
    assert resolve_model_name("auto", (28, 28, 1), np.float32, num_classes=62) == "femnist_cnn"
    assert resolve_model_name("auto", (28, 28), np.float32, num_classes=62) == "femnist_cnn"
    assert resolve_model_name("auto", (28, 28, 1), np.uint8, num_classes=10) == "lenet5"
    assert resolve_model_name("auto", (32, 32, 3), np.float32, num_classes=62) == "lenet5"
    assert resolve_model_name("auto", (28, 28, 1)) == "lenet5"   # classes unknown
    model = get_model("auto", input_shape=(28, 28, 1), num_classes=62)
    assert model.name == "femnist_cnn"


@pytest.mark.parametrize("kw,match", [
    (dict(input_shape=(784,)), "images"), (dict(input_shape=(3, 3, 1)), "too small"),
    (dict(dense=0), "dense"), (dict(conv_impl="fft"), "conv_impl"),
])
def test_bad_options_are_named(kw, match):
    with pytest.raises(LdpsimError, match=match):
        femnist_cnn(**kw)
