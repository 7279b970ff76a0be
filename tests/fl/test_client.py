"""Tests for ldpsim._src.fl.client.local_update: padding exactness, step semantics, optimizers, vmap."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ldpsim import LdpsimError
from ldpsim._src.fl.client import (ClientMetrics, client_optimizer, local_update, num_local_steps,
                                  train_local_steps)
from ldpsim.models import get_model

KEY = jax.random.key(0)
SHAPE = (6, 5)
MODEL = get_model("mlp", input_shape=SHAPE, num_classes=4, hidden=(8,))
PARAMS = MODEL.init(KEY, jnp.zeros((1,) + SHAPE))


def _data(n, seed=1, shape=SHAPE, classes=4):
    kx, ky = jax.random.split(jax.random.key(seed))
    return jax.random.normal(kx, (n,) + shape), jax.random.randint(ky, (n,), 0, classes)


def _pad(x, y, size, fill=np.nan):
    extra = size - x.shape[0]
    xp = jnp.concatenate([x, jnp.full((extra,) + x.shape[1:], fill, x.dtype)])
    yp = jnp.concatenate([y, jnp.full((extra,), 3, y.dtype)])
    return xp, yp


def _update(params, x, y, count, key, *, model=MODEL, opt=None, **kw):
    opt = opt or client_optimizer("sgd", 0.1)
    f = jax.jit(functools.partial(local_update, apply_fn=model.apply, optimizer=opt, **kw))
    return f(params, x, y, jnp.int32(count), key=key)


def _assert_trees_close(a, b, rtol=1e-6, atol=1e-6):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


def _reference(params, x, y, key, *, opt, batch_size, steps):
    """Independent plain-Python reading of the documented semantics (variable-size batches)."""
    n = x.shape[0]
    nb = -(-n // batch_size)
    state = opt.init(params)
    losses = []

    def loss_fn(p, xb, yb):
        return optax.losses.softmax_cross_entropy_with_integer_labels(MODEL.apply(p, xb), yb).mean()

    # The arithmetic is jitted (one compilation per batch size, not one per operation); the
    # shuffle and the batching stay plain Python.
    value_and_grad, update = jax.jit(jax.value_and_grad(loss_fn)), jax.jit(opt.update)
    row_bits = jax.jit(jax.vmap(lambda k, i: jax.random.bits(jax.random.fold_in(k, i),
                                                             dtype=jnp.uint32),
                                in_axes=(None, 0)))
    p = params
    for s in range(steps):
        ekey = jax.random.fold_in(key, s // nb)
        sort_keys = [int(b) for b in np.asarray(row_bits(ekey, jnp.arange(n)))]
        perm = sorted(range(n), key=lambda i: (sort_keys[i], i))
        rows = np.array(perm[(s % nb) * batch_size:(s % nb + 1) * batch_size])
        loss, g = value_and_grad(p, x[rows], y[rows])
        upd, state = update(g, state, p)
        p = optax.apply_updates(p, upd)
        losses.append(float(loss))
    delta = jax.tree_util.tree_map(lambda a, b: a - b, p, params)
    return delta, np.mean(losses)


@pytest.mark.parametrize("name", [
    # one compilation each; the fast tier keeps adam, whose state crosses the steps
    pytest.param("sgd", marks=pytest.mark.slow), pytest.param("momentum", marks=pytest.mark.slow),
    "adam"])
def test_matches_plain_reference_with_partial_batches(name):
    """n = 13, B = 5: batches of 5, 5, 3 per epoch; 7 steps cross two epoch boundaries."""
    x, y = _data(13)
    opt = client_optimizer(name, 0.05)
    key = jax.random.key(7)
    delta, metrics = _update(PARAMS, x, y, 13, key, opt=opt, batch_size=5, local_steps=7)
    ref_delta, ref_loss = _reference(PARAMS, x, y, key, opt=opt, batch_size=5, steps=7)
    _assert_trees_close(delta, ref_delta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics.loss, ref_loss, rtol=1e-5)
    assert int(metrics.num_steps) == 7 and int(metrics.num_examples) == 13


@pytest.mark.parametrize(
    "name, mode, n",
    [
        # one compilation each; the fast tier keeps one case
        pytest.param("sgd", {"local_steps": 4}, 7, marks=pytest.mark.slow),
        ("sgd", {"local_epochs": 2}, 16),
        pytest.param("momentum", {"local_epochs": 2}, 1, marks=pytest.mark.slow),
        pytest.param("adam", {"local_epochs": 2}, 7, marks=pytest.mark.slow),
        pytest.param("adam", {"local_steps": 4}, 16, marks=pytest.mark.slow),
    ],
)
def test_padded_client_trains_exactly_as_unpadded(name, mode, n):
    x, y = _data(n, seed=n)
    xp, yp = _pad(x, y, 24)  # NaN padding: any leak would show
    opt = client_optimizer(name, 0.05)
    key = jax.random.key(n)
    d_pad, m_pad = _update(PARAMS, xp, yp, n, key, opt=opt, batch_size=5, **mode)
    d_unp, m_unp = _update(PARAMS, x, y, n, key, opt=opt, batch_size=5, **mode)
    _assert_trees_close(d_pad, d_unp, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m_pad.loss, m_unp.loss, rtol=1e-6)
    assert int(m_pad.num_steps) == int(m_unp.num_steps)


def test_local_epochs_equal_the_corresponding_number_of_steps():
    x, y = _data(11)
    xp, yp = _pad(x, y, 20)
    key = jax.random.key(3)
    d_ep, m_ep = _update(PARAMS, xp, yp, 11, key, batch_size=4, local_epochs=2)
    d_st, m_st = _update(PARAMS, xp, yp, 11, key, batch_size=4, local_steps=6)  # 2 * ceil(11/4)
    assert int(m_ep.num_steps) == 6
    assert num_local_steps(max_examples=20, batch_size=4, local_epochs=2) == 10  # static slots
    _assert_trees_close(d_ep, d_st)
    np.testing.assert_allclose(m_ep.loss, m_st.loss, rtol=1e-6)


def test_one_epoch_visits_every_valid_row_once():
    """SGD on a linear model with a zero-loss-gradient trick: with lr small and a single epoch,
    batch b's gradient only involves its rows; visiting all rows once means the summed
    per-row gradient mass is each row exactly once.  Checked via logreg's bias gradient."""
    model = get_model("logreg", input_shape=(3,), num_classes=4)
    params = jax.tree_util.tree_map(jnp.zeros_like, model.init(KEY, jnp.zeros((1, 3))))
    x = jnp.zeros((9, 3))
    y = jnp.array([0, 1, 2, 3, 0, 1, 2, 3, 0])
    # zero weights and zero x => softmax stays uniform => bias grad of a row = 1/4 - onehot(y)
    delta, metrics = _update(params, x, y, 9, KEY, model=model,
                             opt=client_optimizer("sgd", 1.0), batch_size=9, local_epochs=1)
    expected = -(0.25 - np.eye(4)[np.asarray(y)]).mean(axis=0)
    np.testing.assert_allclose(delta["out"]["bias"], expected, atol=1e-6)
    assert int(metrics.num_steps) == 1


def test_empty_client_returns_zero_update():
    x, y = _data(8)
    delta, metrics = _update(PARAMS, x, y, 0, KEY, opt=client_optimizer("adam", 0.1),
                             batch_size=4, local_steps=3)
    for leaf in jax.tree_util.tree_leaves(delta):
        np.testing.assert_array_equal(leaf, 0.0)
    assert int(metrics.num_steps) == 0 and float(metrics.loss) == 0.0


def test_adam_first_step_has_magnitude_learning_rate():
    """Kingma & Ba (2015), Sec. 2.1: the first bias-corrected Adam step is lr * g/(|g| + eps')."""
    x, y = _data(8)
    delta, _ = _update(PARAMS, x, y, 8, KEY, opt=optax.adam(0.01, eps=1e-12),
                       batch_size=8, local_steps=1)
    for leaf in jax.tree_util.tree_leaves(delta):
        mags = np.abs(np.asarray(leaf)).ravel()
        mags = mags[mags > 0]  # coordinates with an exactly-zero gradient (dead ReLUs) do not move
        np.testing.assert_allclose(mags, 0.01, rtol=1e-4)


def test_different_keys_shuffle_differently_and_same_key_reproduces():
    x, y = _data(16)
    a, _ = _update(PARAMS, x, y, 16, jax.random.key(1), batch_size=4, local_steps=2)
    b, _ = _update(PARAMS, x, y, 16, jax.random.key(1), batch_size=4, local_steps=2)
    c, _ = _update(PARAMS, x, y, 16, jax.random.key(2), batch_size=4, local_steps=2)
    _assert_trees_close(a, b, rtol=0, atol=0)
    leaf_a, leaf_c = jax.tree_util.tree_leaves(a)[0], jax.tree_util.tree_leaves(c)[0]
    assert not np.allclose(leaf_a, leaf_c)


@pytest.mark.slow
def test_vmap_over_clients_matches_loop_lenet5():
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(KEY, jnp.zeros((1, 28, 28, 1)))
    m, size = 3, 12
    x, y = _data(m * size, shape=(28, 28, 1), classes=10)
    x, y = x.reshape(m, size, 28, 28, 1), y.reshape(m, size)
    counts = jnp.array([12, 5, 9], jnp.int32)
    keys = jax.random.split(jax.random.key(5), m)
    lr = jnp.float32(0.05)

    def one(params, x, y, count, key, lr):
        return local_update(params, x, y, count, apply_fn=model.apply,
                            optimizer=client_optimizer("momentum", lr), batch_size=4,
                            local_steps=2, key=key)

    batched = jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0, 0, None)))
    deltas, metrics = batched(params, x, y, counts, keys, lr)
    assert isinstance(metrics, ClientMetrics) and metrics.loss.shape == (m,)
    single = jax.jit(one)
    for c in range(m):
        d, met = single(params, x[c], y[c], counts[c], keys[c], lr)
        _assert_trees_close(jax.tree_util.tree_map(lambda leaf, c=c: leaf[c], deltas), d,
                            rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(metrics.loss[c], met.loss, rtol=1e-5)
    # A new learning rate is a traced value: no recompilation.
    before = batched._cache_size()
    batched(params, x, y, counts, keys, jnp.float32(0.01))
    assert batched._cache_size() == before


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"local_steps": 2, "local_epochs": 1}, "exactly one of local_steps and local_epochs"),
        ({}, "exactly one of local_steps and local_epochs"),
        ({"local_steps": 0}, "local_steps must be an integer >= 1"),
        ({"local_epochs": 1, "batch_size": 0}, "batch_size must be an integer >= 1"),
    ],
)
def test_bad_step_options_raise(kw, match):
    x, y = _data(4)
    kw = {"batch_size": 2, **kw}
    with pytest.raises(LdpsimError, match=match):
        local_update(PARAMS, x, y, 4, apply_fn=MODEL.apply, optimizer=optax.sgd(0.1), key=KEY, **kw)


def test_unknown_optimizer_raises():
    with pytest.raises(LdpsimError, match="client_optimizer must be one of"):
        client_optimizer("lamb", 0.1)


@pytest.mark.parametrize("optimizer, mode", [
    ("sgd", dict(local_steps=3)),
    pytest.param("adam", dict(local_steps=3), marks=pytest.mark.slow),
    pytest.param("sgd", dict(local_epochs=2), marks=pytest.mark.slow),
])
def test_peeled_first_step_equals_the_plain_step_loop(optimizer, mode):
    """Step 1 taken outside the step scan (so that ``vmap`` sees the shared global weights
    there) is the same computation as the scan over every step: single clients and a
    vmapped chunk (counts 0, partial and full) agree to float rounding."""
    def loss_and_grad(p, xb, yb, mask):
        def loss_fn(p):
            ce = optax.losses.softmax_cross_entropy_with_integer_labels(MODEL.apply(p, xb), yb)
            return jnp.sum(jnp.where(mask, ce, 0.0)) / jnp.maximum(jnp.sum(mask), 1)
        return jax.value_and_grad(loss_fn)(p)

    def one(x, y, count, key, peel):
        return train_local_steps(PARAMS, x, y, count, loss_and_grad=loss_and_grad,
                                 optimizer=client_optimizer(optimizer, 0.1), batch_size=4,
                                 key=key, peel_first_step=peel, **mode)

    m, size = 5, 10
    x, y = _data(m * size)
    x, y = x.reshape((m, size) + SHAPE), y.reshape(m, size)
    counts = jnp.array([10, 0, 3, 7, 1], jnp.int32)
    keys = jax.random.split(jax.random.key(9), m)
    va = jax.jit(jax.vmap(lambda *a: one(*a, True)))(x, y, counts, keys)
    vb = jax.jit(jax.vmap(lambda *a: one(*a, False)))(x, y, counts, keys)
    _assert_trees_close(va, vb, rtol=1e-5, atol=1e-6)
    single = {p: jax.jit(lambda *a, p=p: one(*a, p)) for p in (True, False)}
    for c in range(m):
        sa = single[True](x[c], y[c], counts[c], keys[c])
        _assert_trees_close(sa, single[False](x[c], y[c], counts[c], keys[c]),
                            rtol=1e-6, atol=1e-7)
        _assert_trees_close(jax.tree_util.tree_map(lambda v, c=c: v[c], va), sa,
                            rtol=1e-5, atol=1e-6)
    # The empty client's update is exactly zero either way.
    assert all(float(jnp.abs(leaf[1]).max()) == 0 for leaf in jax.tree_util.tree_leaves(va[0]))


@pytest.mark.parametrize("n, size, batch, name", [
    (3, 3, 3, "sgd"),        # the seed-000 client: 3 examples, 3 steps of batch 3
    (2, 3, 3, "adam"),       # padded (NaN rows), a partial batch every epoch
    (3, 4, 6, "momentum"),   # the batch wider than the padded client
])
def test_whole_client_batch_matches_the_permuted_reference(n, size, batch, name):
    """When one batch holds the whole client (B >= max_examples), local_update feeds the
    valid rows in storage order instead of each epoch's permutation: the same rows in
    every step, so the plain-Python reference (which permutes) agrees to float rounding;
    NaN padding shows any leak of padding rows."""
    x, y = _data(n, seed=10 + n)
    xp, yp = _pad(x, y, size)
    opt = client_optimizer(name, 0.05)
    key = jax.random.key(11)
    delta, metrics = _update(PARAMS, xp, yp, n, key, opt=opt, batch_size=batch, local_steps=3)
    ref_delta, ref_loss = _reference(PARAMS, x, y, key, opt=opt, batch_size=batch, steps=3)
    _assert_trees_close(delta, ref_delta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics.loss, ref_loss, rtol=1e-5)
    assert int(metrics.num_steps) == 3 and int(metrics.num_examples) == n
    empty, m0 = _update(PARAMS, xp, yp, 0, key, opt=opt, batch_size=batch, local_steps=3)
    for leaf in jax.tree_util.tree_leaves(empty):
        np.testing.assert_array_equal(leaf, 0.0)
    assert int(m0.num_steps) == 0 and float(m0.loss) == 0.0
