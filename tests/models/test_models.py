"""Tests for ldpsim.models: shapes, parameter counts, and the fast conv/pool path against lax."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim.models import get_model, num_params
from ldpsim._src.models._layers import (conv2d, conv2d_chwn, conv2d_cnhw, max_pool2x2,
                                        relu_max_pool2x2, resolve_conv_impl,
                                        resolve_pool_impl)

KEY = jax.random.key(0)
IMPLS = ("im2col", "cnhw", "chwn", "xla")  # conv2d's ("mixed" = conv1 cnhw, conv2 im2col)
LENET_IMPLS = ("chwn", "mixed", "xla")
POOLS = ("reshape", "window")
REFERENCE = dict(conv_impl="xla", pool_impl="window")  # lax.conv_general_dilated, reduce_window


def _leaves_close(a, b, **tol):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), **tol)


def test_lenet5_parameter_count():
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(KEY, jnp.zeros((1, 28, 28, 1)))
    count = num_params(params)
    print(f"LeNet-5 (28x28x1, first conv SAME, conv bias): {count:,} parameters")
    # 5*5*1*6+6 + 5*5*6*16+16 + 400*120+120 + 120*84+84 + 84*10+10
    assert count == 61_706 == model.num_params(params)
    seed = get_model("lenet5", input_shape=(28, 28), num_classes=10, conv_bias=False)
    assert num_params(seed.init(KEY, jnp.zeros((1, 28, 28)))) == 61_706 - 6 - 16
    # 32x32 'VALID' (the seed's resized input) has the same 16*5*5 = 400 features.
    valid = get_model("lenet5", input_shape=(32, 32, 1), num_classes=10, first_conv_padding="VALID")
    assert num_params(valid.init(KEY, jnp.zeros((1, 32, 32, 1)))) == 61_706


def test_lenet5_with_62_classes_for_femnist():
    """The model of experiments/femnist_ldp.toml: only the last layer grows, 84*62+62 weights."""
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=62)
    params = model.init(KEY, jnp.zeros((1, 28, 28, 1)))
    assert num_params(params) == 61_706 - (84 * 10 + 10) + (84 * 62 + 62) == 66_126
    logits = model.apply(params, jax.random.uniform(KEY, (5, 28, 28, 1)))
    assert logits.shape == (5, 62) and bool(jnp.all(jnp.isfinite(logits)))


def test_lenet5_same_equals_valid_on_zero_padded_32x32():
    """'SAME' on 28x28 is exactly 'VALID' on the image zero-padded to 32x32."""
    same = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    valid = get_model("lenet5", input_shape=(32, 32, 1), num_classes=10, first_conv_padding="VALID")
    x = jax.random.normal(KEY, (3, 28, 28, 1))
    params = same.init(KEY, x)
    x32 = jnp.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)))
    np.testing.assert_allclose(same.apply(params, x), valid.apply(params, x32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("channels", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_conv2d_matches_lax_reference(impl, padding, channels):
    """Each formulation against lax.conv_general_dilated, in value and in both gradients."""
    kx, kw, kg = jax.random.split(jax.random.key(channels), 3)
    x = jax.random.normal(kx, (2, 9, 7, channels))
    w = jax.random.normal(kw, (3, 5, channels, 4))
    ref_fn = lambda x, w: jax.lax.conv_general_dilated(  # noqa: E731
        x, w, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"),
        precision=jax.lax.Precision.HIGHEST)
    ref, ref_vjp = jax.vjp(ref_fn, x, w)
    out, vjp = jax.vjp(lambda x, w: conv2d(x, w, padding=padding, impl=impl), x, w)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    g = jax.random.normal(kg, out.shape)
    for a, b in zip(vjp(g), ref_vjp(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [3, 10, 16])  # 16: the convolution forward and kernel gradient
@pytest.mark.parametrize("channels", [1, 3])
def test_conv2d_chwn_matches_lax_reference(batch, channels):
    """Batch-innermost conv2d_chwn ([C, H, W, B]) on both of its paths, value and gradients."""
    kx, kw, kg = jax.random.split(jax.random.key(batch + channels), 3)
    x = jax.random.normal(kx, (batch, 9, 7, channels))
    w = jax.random.normal(kw, (3, 5, channels, 4))
    for padding in ("SAME", "VALID"):
        ref, ref_vjp = jax.vjp(lambda x, w, padding=padding: jax.lax.conv_general_dilated(
            x, w, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"),
            precision=jax.lax.Precision.HIGHEST), x, w)
        out, vjp = jax.vjp(lambda x, w, padding=padding: jnp.transpose(conv2d_chwn(
            jnp.transpose(x, (3, 1, 2, 0)), w, padding=padding), (3, 1, 2, 0)), x, w)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
        g = jax.random.normal(kg, out.shape)
        for a, b in zip(vjp(g), ref_vjp(g), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_max_pool_impls_agree_and_match_numpy():
    """reshape-max against lax.reduce_window and numpy, in value and gradient (odd sizes crop)."""
    x = jax.random.normal(KEY, (2, 7, 6, 3))  # no ties: the gradient is unambiguous
    ref = np.asarray(x)[:, :6, :6, :].reshape(2, 3, 2, 3, 2, 3).max(axis=(2, 4))
    grads = []
    for impl in POOLS:
        np.testing.assert_array_equal(max_pool2x2(x, impl=impl), ref)
        grads.append(jax.grad(lambda x, impl=impl: jnp.sum(max_pool2x2(x, impl=impl) ** 3))(x))
    np.testing.assert_array_equal(grads[0], grads[1])
    assert np.count_nonzero(grads[0]) == ref.size


def _relu_pool_reference(x):
    """ReLU then reshape + max (crop odd sizes): JAX's gradient gives every tied maximum of
    a window ``g / count`` (and ReLU zero where ``x <= 0``)."""
    c, h, w, b = x.shape
    x = jax.nn.relu(x[:, : h // 2 * 2, : w // 2 * 2, :])
    return x.reshape(c, h // 2, 2, w // 2, 2, b).max(axis=(2, 4))


@pytest.mark.parametrize("shape", [(6, 28, 28, 16), (3, 7, 6, 16), (16, 10, 10, 32),
                                   (3, 7, 6, 10)])  # B = 10: "phases" is "reshape" there
def test_relu_pool_phases_equals_the_reference_with_ties(shape):
    """pool_impl "phases" (hand VJP for B a multiple of 16) against relu + reshape-max
    autodiff, bit for bit, on data full of ties: values on a 0.5 grid (equal positive
    maxima: 2, 3 and 4 to a window), a channel of zeros and negative windows (all four
    tied at 0 after ReLU); odd sizes are cropped; under jax.vmap too (per-client inputs,
    as the engine runs)."""
    kx, kg = jax.random.split(jax.random.fold_in(KEY, shape[1]))
    x = jnp.round(2 * jax.random.normal(kx, shape)) / 2
    x = x.at[0].set(0.0).at[1, :4].set(-1.0).at[2, :2, :2].set(1.5)  # ties, incl. 4 positive
    windows = np.asarray(x)[:, : shape[1] // 2 * 2, : shape[2] // 2 * 2]
    windows = windows.reshape(shape[0], shape[1] // 2, 2, shape[2] // 2, 2, shape[3])
    top = windows.max(axis=(2, 4), keepdims=True)
    ties = ((windows == top) & (top > 0)).sum(axis=(2, 4))
    assert {2, 3, 4} <= set(np.unique(ties).tolist()) and (top <= 0).any()  # the data has ties
    g = jax.random.normal(kg, (shape[0], shape[1] // 2, shape[2] // 2, shape[3]))
    got, vjp = jax.vjp(lambda x: relu_max_pool2x2(x, impl="phases"), x)
    want, ref_vjp = jax.vjp(_relu_pool_reference, x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(vjp(g)[0], ref_vjp(g)[0])
    for impl in POOLS:  # the other kept poolings (ReLU first) compute the same values
        np.testing.assert_array_equal(relu_max_pool2x2(x, impl=impl), want)
    xs, gs = jnp.stack([x, -x, x[::-1]]), jnp.stack([g, -g, 2 * g])

    def pullback(f):
        return jax.jit(jax.vmap(lambda x, g: jax.vjp(f, x)[1](g)[0]))(xs, gs)

    np.testing.assert_array_equal(pullback(lambda x: relu_max_pool2x2(x, impl="phases")),
                                  pullback(_relu_pool_reference))
    # differentiable again (inversion attacks take the gradient of a gradient): on data
    # without ties, as the reference
    xc = jax.random.normal(kx, shape)

    def second(f):
        return jax.grad(lambda x: jnp.sum(jax.vjp(f, x)[1](g)[0] * jnp.sin(x)))(xc)

    np.testing.assert_allclose(second(lambda x: relu_max_pool2x2(x, impl="phases")),
                               second(_relu_pool_reference), rtol=1e-6, atol=1e-7)


def _value_and_grad(model, x, y):
    params = model.init(KEY, x)

    def loss(p):
        logits = model.apply(p, x)
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), y])

    return jax.jit(lambda p: (model.apply(p, x), jax.grad(loss)(p)))(params)


@pytest.mark.parametrize("conv, pool", [
    ("chwn", "phases"), ("mixed", "reshape"), ("xla", "reshape"),
    # one compilation each; on CPU auto is chwn/phases, and the pools agree (tests above)
    pytest.param("chwn", "reshape", marks=pytest.mark.slow),
    pytest.param("chwn", "window", marks=pytest.mark.slow),
    pytest.param("mixed", "window", marks=pytest.mark.slow),
    pytest.param("auto", "auto", marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape, padding", [((28, 28, 1), "SAME"),
                                            pytest.param((32, 32, 3), "VALID", marks=pytest.mark.slow)])
def test_lenet5_fast_path_matches_reference_in_value_and_gradient(conv, pool, shape, padding):
    """Every kept LeNet-5 formulation against the lax reference (xla conv, reduce_window)."""
    kx, ky = jax.random.split(KEY)
    x = jax.random.normal(kx, (4,) + shape)
    y = jax.random.randint(ky, (4,), 0, 10)
    build = lambda **kw: get_model("lenet5", input_shape=shape, num_classes=10,  # noqa: E731
                                   first_conv_padding=padding, **kw)
    logits, grads = _value_and_grad(build(conv_impl=conv, pool_impl=pool), x, y)
    ref_logits, ref_grads = _value_and_grad(build(**REFERENCE), x, y)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5)
    _leaves_close(grads, ref_grads, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("rows", [10, 16])  # 16: chwn's convolution forward and gradient
def test_lenet5_chwn_params_unchanged_and_partial_batch_under_vmap(rows):
    """chwn: the same param tree as the reference; per-client weights under jax.vmap
    (as the engine runs), for a batch of 16 and of 10 (not a multiple of the 16-float
    vector), padded: the masked rows must not change the gradient."""
    build = lambda **kw: get_model("lenet5", input_shape=(28, 28, 1),  # noqa: E731
                                   num_classes=10, **kw)
    chwn, ref = build(conv_impl="chwn", pool_impl="phases"), build(**REFERENCE)
    x = jax.random.normal(KEY, (1, 28, 28, 1))
    p_chwn, p_ref = chwn.init(KEY, x), ref.init(KEY, x)
    assert (jax.tree_util.tree_structure(p_chwn) == jax.tree_util.tree_structure(p_ref))
    _leaves_close(p_chwn, p_ref, rtol=0, atol=0)  # same names, shapes and initial values
    clients = 2
    kx, ky, kp = jax.random.split(jax.random.key(3), 3)
    xs = jax.random.uniform(kx, (clients, rows, 28, 28, 1))
    ys = jax.random.randint(ky, (clients, rows), 0, 10)
    mask = jnp.arange(rows) < 7  # rows 7.. are padding
    params = jax.vmap(lambda k: chwn.init(k, x))(jax.random.split(kp, clients))

    def grads(model, p, x, y):
        def loss(p):
            ce = -jax.nn.log_softmax(model.apply(p, x))[jnp.arange(rows), y]
            return jnp.sum(jnp.where(mask, ce, 0.0)) / jnp.sum(mask)
        return jax.grad(loss)(p)

    got = jax.jit(jax.vmap(lambda p, x, y: grads(chwn, p, x, y)))(params, xs, ys)
    want = jax.jit(jax.vmap(lambda p, x, y: grads(ref, p, x, y)))(params, xs, ys)
    _leaves_close(got, want, rtol=1e-3, atol=1e-5)
    # the padded rows are ignored: garbage in them gives the same gradient
    junk = xs.at[:, 7:].set(1e3)
    _leaves_close(jax.jit(jax.vmap(lambda p, x, y: grads(chwn, p, x, y)))(params, junk, ys),
                  got, rtol=1e-5, atol=1e-6)


def test_auto_is_the_per_backend_policy():
    assert resolve_conv_impl("auto", "cpu") == "chwn"
    assert resolve_pool_impl("auto", "cpu", conv_impl="chwn") == "phases"
    assert resolve_pool_impl("auto", "cpu", conv_impl="mixed") == "reshape"
    assert resolve_pool_impl("auto", "cpu") == "reshape"
    assert resolve_pool_impl("auto", "cpu", conv_impl="chwn", model="femnist_cnn") == "reshape"
    with pytest.raises(LdpsimError):
        resolve_pool_impl("phases", model="femnist_cnn")
    assert resolve_conv_impl("auto", "cpu", model="femnist_cnn") == "mixed"  # chwn: LeNet only
    for backend in ("gpu", "tpu", "cuda"):
        assert resolve_conv_impl("auto", backend) == "xla"
        assert resolve_conv_impl("auto", backend, model="femnist_cnn") == "xla"
        assert resolve_pool_impl("auto", backend) == "window"
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    assert model.config["conv_impl"] == resolve_conv_impl("auto")
    conv = resolve_conv_impl("auto")
    assert model.config["pool_impl"] == resolve_pool_impl("auto", conv_impl=conv)
    import ldpsim.models

    assert not {"conv2d", "im2col", "max_pool2x2", "CONV_IMPLS"} & set(ldpsim.models.__all__)


@pytest.mark.slow
@pytest.mark.parametrize("impl", LENET_IMPLS)
def test_lenet5_vmap_over_per_client_params(impl):
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10, conv_impl=impl)
    keys = jax.random.split(KEY, 3)
    x = jax.random.normal(KEY, (3, 2, 28, 28, 1))
    params = jax.vmap(lambda k: model.init(k, x[0]))(keys)
    batched = jax.jit(jax.vmap(model.apply))(params, x)
    for c in range(3):
        one = jax.tree_util.tree_map(lambda leaf, c=c: leaf[c], params)
        np.testing.assert_allclose(batched[c], model.apply(one, x[c]), rtol=1e-4, atol=1e-5)


def test_logreg_is_affine_softmax_regression():
    model = get_model("logreg", input_shape=(28, 28), num_classes=10)
    x = jax.random.normal(KEY, (5, 28, 28))
    params = model.init(KEY, x)
    assert num_params(params) == 784 * 10 + 10
    w, b = params["out"]["kernel"], params["out"]["bias"]
    ref = np.asarray(x).reshape(5, -1) @ np.asarray(w) + np.asarray(b)
    np.testing.assert_allclose(model.apply(params, x), ref, rtol=1e-5, atol=1e-5)


def test_mlp_shapes_and_count():
    model = get_model("mlp", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(KEY, jnp.zeros((1, 28, 28, 1)))
    assert num_params(params) == (784 * 200 + 200) + (200 * 200 + 200) + (200 * 10 + 10)
    custom = get_model("mlp", input_shape=(60,), num_classes=3, hidden=(7,))
    p = custom.init(KEY, jnp.zeros((1, 60)))
    assert num_params(p) == 60 * 7 + 7 + 7 * 3 + 3
    assert custom.apply(p, jnp.ones((4, 60))).shape == (4, 3)


def test_apply_accepts_flat_rows():
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    x = jax.random.normal(KEY, (2, 28, 28, 1))
    params = model.init(KEY, x)
    np.testing.assert_array_equal(model.apply(params, x.reshape(2, 784)), model.apply(params, x))


@pytest.mark.parametrize(
    "name, kw, match",
    [
        ("resnet", {}, "model must be one of"),
        ("lenet5", {"input_shape": (8, 8, 1)}, "too small"),
        ("lenet5", {"conv_impl": "fft"}, "conv_impl must be one of auto, chwn, mixed, xla"),
        ("lenet5", {"conv_impl": "im2col"}, "conv_impl must be one of auto, chwn, mixed, xla"),
        ("femnist_cnn", {"conv_impl": "chwn"}, "conv_impl must be one of auto, mixed, xla"),
        ("lenet5", {"pool_impl": "slices"}, "pool_impl must be one of auto, reshape, window"),
        ("lenet5", {"first_conv_padding": "FULL"}, "first_conv_padding"),
        ("mlp", {"hidden": (0,)}, "hidden must be an integer"),
    ],
)
def test_bad_model_options_raise(name, kw, match):
    kw = {"input_shape": (28, 28, 1), "num_classes": 10, **kw}
    with pytest.raises(LdpsimError, match=match):
        get_model(name, **kw)


def test_parameter_count_helper_matches_shapes():
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(KEY, jnp.zeros((1, 28, 28, 1)))
    shapes = jax.tree_util.tree_map(lambda a: a.shape, params)
    assert shapes["conv1"]["kernel"] == (5, 5, 1, 6) and shapes["fc1"]["kernel"] == (400, 120)
    assert num_params(params) == sum(math.prod(s) for s in jax.tree_util.tree_leaves(
        shapes, is_leaf=lambda s: isinstance(s, tuple)))


@pytest.mark.slow
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_cnhw_patches_vjp_is_the_transpose_of_im2col(padding):
    """The hand-written col2im of ``patches_cnhw`` equals autodiff through lax.conv."""
    kx, kw, kg = jax.random.split(jax.random.key(7), 3)
    x = jax.random.normal(kx, (3, 2, 9, 8))  # [C, N, H, W]
    w = jax.random.normal(kw, (5, 3, 3, 4))  # HWIO, non-square
    ref_fn = lambda x, w: jnp.transpose(jax.lax.conv_general_dilated(  # noqa: E731
        jnp.transpose(x, (1, 2, 3, 0)), w, (1, 1), padding,
        dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=jax.lax.Precision.HIGHEST),
        (3, 0, 1, 2))
    fn = lambda x, w: conv2d_cnhw(x, w, padding=padding)  # noqa: E731
    out, vjp = jax.vjp(fn, x, w)
    ref, ref_vjp = jax.vjp(ref_fn, x, w)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    g = jax.random.normal(kg, out.shape)
    for a, b in zip(vjp(g), ref_vjp(g), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    # and under vmap (per-client inputs and kernels)
    xs, ws = jnp.stack([x, -x]), jnp.stack([w, 2 * w])
    gx = jax.vmap(lambda x, w: jax.grad(lambda x: jnp.sum(fn(x, w) ** 2))(x))(xs, ws)
    gx_ref = jax.vmap(lambda x, w: jax.grad(lambda x: jnp.sum(ref_fn(x, w) ** 2))(x))(xs, ws)
    np.testing.assert_allclose(gx, gx_ref, rtol=1e-4, atol=1e-3)


def test_auto_model_name_and_lenet_error_on_vectors():
    from ldpsim import LdpsimError
    from ldpsim.models import get_model, resolve_model_name

    assert resolve_model_name("auto", (28, 28, 1)) == "lenet5"
    assert resolve_model_name("auto", (28, 28)) == "lenet5"
    assert resolve_model_name("auto", (60,)) == "mlp"
    assert resolve_model_name("logreg", (28, 28, 1)) == "logreg"
    assert get_model("auto", input_shape=(60,), num_classes=10).name == "mlp"
    with pytest.raises(LdpsimError, match="use model 'mlp'"):
        get_model("lenet5", input_shape=(60,), num_classes=10)
    with pytest.raises(LdpsimError, match="model"):
        resolve_model_name("resnet", (28, 28, 1))
