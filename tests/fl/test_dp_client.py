"""Tests for ldpsim._src.fl.dp_client: DP-SGD as the client optimizer of the FL engine."""

from __future__ import annotations

import functools
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ldpsim import LdpsimError
from ldpsim.data import PaddedPopulation
from ldpsim._src.fl.client import client_optimizer, local_update
from ldpsim._src.fl.dp_client import dp_client_epsilon, dp_local_update, make_dp_client_update
from ldpsim.models import get_model
from ldpsim._src.privacy.accountants.accounting import dpsgd_epsilon

SHAPE = (5,)
CLASSES = 3
MODEL = get_model("mlp", input_shape=SHAPE, num_classes=CLASSES, hidden=(16,))
PARAMS = MODEL.init(jax.random.key(0), jnp.zeros((1,) + SHAPE))
D = sum(p.size for p in jax.tree_util.tree_leaves(PARAMS))


def _data(n, seed=1):
    kx, ky = jax.random.split(jax.random.key(seed))
    return jax.random.normal(kx, (n,) + SHAPE), jax.random.randint(ky, (n,), 0, CLASSES)


def _pad(x, y, size):
    extra = size - x.shape[0]
    return (jnp.concatenate([x, jnp.full((extra,) + x.shape[1:], 1e4, x.dtype)]),
            jnp.concatenate([y, jnp.full((extra,), 2, y.dtype)]))


def _dp(x, y, count, key, *, opt=None, **kw):
    # unroll=1: same semantics, much faster to compile than the default full unroll.
    opt = opt or client_optimizer("sgd", 0.1)
    f = jax.jit(functools.partial(dp_local_update, apply_fn=MODEL.apply, optimizer=opt,
                                  unroll=1, **kw))
    return f(PARAMS, x, y, jnp.int32(count), key=key)


def _close(a, b, rtol=1e-5, atol=1e-6):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["sgd", pytest.param("adam", marks=pytest.mark.slow)])
def test_without_noise_or_clipping_equals_local_update_partial_batches(name):
    """M = 1 and C never reached: the batch gradient itself, so exactly local_update (n=13, B=5)."""
    x, y = _data(13)
    opt = client_optimizer(name, 0.05)
    key = jax.random.key(3)
    d, m = _dp(x, y, 13, key, opt=opt, batch_size=5, local_steps=7, micro_batches=1,
               clip_norm=1e6, noise_multiplier=0.0)
    ref = jax.jit(functools.partial(local_update, apply_fn=MODEL.apply, optimizer=opt,
                                    batch_size=5, local_steps=7, unroll=1))(
        PARAMS, x, y, jnp.int32(13), key=key)
    _close(d, ref[0])
    np.testing.assert_allclose(m.loss, ref[1].loss, rtol=1e-6)
    assert int(m.num_steps) == 7


@pytest.mark.slow
def test_full_batches_many_micro_batches_equal_local_update():
    """Full batches split in equal chunks: the mean of chunk means is the batch mean."""
    x, y = _data(16)
    key = jax.random.key(4)
    opt = client_optimizer("momentum", 0.1)
    d, m = _dp(x, y, 16, key, opt=opt, batch_size=8, local_epochs=2, micro_batches=4,
               clip_norm=1e6, noise_multiplier=0.0)
    ref, rm = jax.jit(functools.partial(local_update, apply_fn=MODEL.apply, optimizer=opt,
                                        batch_size=8, local_epochs=2, unroll=1))(
        PARAMS, x, y, jnp.int32(16), key=key)
    _close(d, ref)
    np.testing.assert_allclose(m.loss, rm.loss, rtol=1e-6)


def test_one_step_clips_each_micro_batch_exactly():
    """One SGD step, small C: Δ = −lr·Σ_j g_j·min(1, C/‖g_j‖)/M (computed independently)."""
    x, y = _data(8)
    lr, C, M, B = 0.5, 0.05, 4, 8
    key = jax.random.key(5)
    d, _ = _dp(x, y, 8, key, opt=optax.sgd(lr), batch_size=B, local_steps=1, micro_batches=M,
               clip_norm=C, noise_multiplier=0.0)
    # The batch is the whole (permuted) client; rebuild the permutation's chunks by hand.
    from ldpsim._src.fl.client import _epoch_permutation

    perm = np.asarray(_epoch_permutation(key, jnp.int32(0), jnp.int32(8), 8))
    total = None
    for j in range(M):
        rows = perm[j * (B // M):(j + 1) * (B // M)]

        def loss(p, rows=rows):
            logits = MODEL.apply(p, x[rows])
            return optax.losses.softmax_cross_entropy_with_integer_labels(logits, y[rows]).mean()

        g = jax.grad(loss)(PARAMS)
        norm = math.sqrt(sum(float(jnp.sum(v * v)) for v in jax.tree_util.tree_leaves(g)))
        assert norm > C  # the bound is active for every chunk, so the test checks clipping
        g = jax.tree_util.tree_map(lambda v, s=min(1.0, C / norm): v * s, g)
        total = g if total is None else jax.tree_util.tree_map(jnp.add, total, g)
    expected = jax.tree_util.tree_map(lambda v: -lr * v / M, total)
    _close(d, expected, rtol=1e-4, atol=1e-7)


def test_noise_std_is_z_c_over_m():
    """One SGD step (lr 1): noisy minus clean update is N(0, (zC/M)²) per coordinate.

    64 clients' keys × D coordinates; the sample std has relative standard error
    1/√(2·64·D) ≈ 0.4 %; the 3 % tolerance is > 7 standard errors (false failure < 1e-12).
    """
    x, y = _data(8)
    z, C, M = 1.3, 0.2, 4
    keys = jax.random.split(jax.random.key(6), 64)
    run = jax.jit(jax.vmap(lambda k, zz: dp_local_update(
        PARAMS, x, y, jnp.int32(8), apply_fn=MODEL.apply, optimizer=optax.sgd(1.0),
        batch_size=8, key=k, local_steps=1, micro_batches=M, clip_norm=C,
        noise_multiplier=zz)[0], in_axes=(0, None)))
    noisy, clean = run(keys, jnp.float32(z)), run(keys, jnp.float32(0.0))
    diff = np.concatenate([np.asarray(a - b).reshape(64, -1) for a, b in zip(
        jax.tree_util.tree_leaves(noisy), jax.tree_util.tree_leaves(clean))], axis=1)
    assert diff.shape == (64, D)
    np.testing.assert_allclose(diff.std(), z * C / M, rtol=0.03)
    assert abs(diff.mean()) < 5 * (z * C / M) / math.sqrt(diff.size)
    # Different clients' keys give different noise.
    assert not np.allclose(diff[0], diff[1])


def test_padding_exact_with_noise():
    """A padded client (garbage rows) trains exactly as the same client unpadded, noise included."""
    x, y = _data(11)
    xp, yp = _pad(x, y, 20)
    key = jax.random.key(8)
    kw = dict(batch_size=4, local_epochs=2, micro_batches=2, clip_norm=0.3, noise_multiplier=0.8)
    a, ma = _dp(x, y, 11, key, **kw)
    b, mb = _dp(xp, yp, 11, key, **kw)
    _close(a, b)
    assert int(ma.num_steps) == int(mb.num_steps) == 2 * 3
    np.testing.assert_allclose(ma.loss, mb.loss, rtol=1e-6)


@pytest.mark.slow
def test_empty_client_takes_no_step():
    x, y = _data(6)
    d, m = _dp(x, y, 0, jax.random.key(1), batch_size=2, local_steps=3, micro_batches=2,
               clip_norm=1.0, noise_multiplier=5.0)
    assert int(m.num_steps) == 0
    for leaf in jax.tree_util.tree_leaves(d):
        assert np.all(np.asarray(leaf) == 0)


@pytest.mark.slow
def test_clip_and_noise_are_traced_no_recompile():
    x, y = _data(8)
    traces = []

    def fn(c, z):
        traces.append(1)
        return dp_local_update(PARAMS, x, y, jnp.int32(8), apply_fn=MODEL.apply,
                               optimizer=optax.sgd(0.1), batch_size=4, key=jax.random.key(0),
                               local_steps=2, micro_batches=2, clip_norm=c, noise_multiplier=z)

    f = jax.jit(fn)
    out = [f(jnp.float32(c), jnp.float32(z))[0] for c, z in [(1.0, 0.0), (0.1, 2.0), (3.0, 0.5)]]
    assert len(traces) == 1
    assert not np.allclose(np.asarray(jax.tree_util.tree_leaves(out[0])[0]),
                           np.asarray(jax.tree_util.tree_leaves(out[1])[0]))


def test_bad_arguments():
    x, y = _data(8)
    with pytest.raises(LdpsimError, match="micro_batches"):
        _dp(x, y, 8, jax.random.key(0), batch_size=6, local_steps=1, micro_batches=4,
            clip_norm=1.0, noise_multiplier=1.0)
    with pytest.raises(LdpsimError, match="clip_norm"):
        make_dp_client_update(micro_batches=2, clip_norm=0.0, noise_multiplier=1.0)
    with pytest.raises(LdpsimError, match="noise_multiplier"):
        make_dp_client_update(micro_batches=2, clip_norm=1.0, noise_multiplier=-1.0)


@pytest.mark.slow
def test_plugs_into_the_round():
    """make_round_fn(client_update=...) runs DP-SGD clients: the round's new model is the
    example-weighted mean of the clients' dp_local_update deltas (keys as the engine documents:
    the first half of split(fold_in(fold_in(root, round), client)))."""
    from ldpsim._src.fl.round import RoundHyper, client_key, init_state, make_round_fn
    from ldpsim._src.fl.simulate import sample_cohort

    rng = np.random.default_rng(0)
    xs = rng.normal(size=(12, 8) + SHAPE).astype(np.float32)
    ys = rng.integers(0, CLASSES, size=(12, 8))
    counts = rng.integers(1, 9, size=12)
    pop = PaddedPopulation.from_arrays(xs, ys, counts, num_classes=CLASSES, compact=False)
    ids, mask = sample_cohort(0, 0, 12, 6)
    st = init_state(PARAMS, jax.random.key(1))
    dp_kw = dict(micro_batches=2, clip_norm=0.5, noise_multiplier=2.0)
    update = functools.partial(make_dp_client_update(**dp_kw), unroll=1)
    fn = jax.jit(make_round_fn(apply_fn=MODEL.apply, batch_size=4, local_steps=2,
                               chunk_size=6, client_update=update))
    hyper = RoundHyper.create(sigma=0.0, clip=1e6, client_lr=0.1, server_lr=1.0)
    new, _ = fn(st, pop, jnp.int32(0), ids, mask, hyper)

    keys = jnp.stack([jax.random.split(client_key(st.key, 0, int(c)))[0] for c in ids])
    deltas, _ = jax.jit(jax.vmap(lambda x, y, n, k: dp_local_update(
        PARAMS, x, y, n, apply_fn=MODEL.apply, optimizer=optax.sgd(0.1), batch_size=4, key=k,
        local_steps=2, unroll=1, **dp_kw)))(xs[ids], ys[ids], jnp.asarray(counts[ids]), keys)
    w = counts[ids].astype(np.float64) / counts[ids].sum()
    expected = jax.tree_util.tree_map(
        lambda p, d: p + jnp.tensordot(jnp.asarray(w, jnp.float32), d, axes=1), PARAMS, deltas)
    _close(new.params, expected, rtol=1e-4, atol=1e-6)
    # The DP-SGD noise is really there: zC/M = 0.5 per coordinate per step, far above
    # what 2 clipped steps of lr 0.1 could move a parameter (< 0.1).
    assert max(float(jnp.max(jnp.abs(d))) for d in jax.tree_util.tree_leaves(deltas)) > 0.2


# ----------------------------------------------------------------------------- accounting


def test_shuffle_epsilon_is_k_gaussians_of_half_multiplier():
    """n = 100, B = 10: 25 steps touch each example in ceil(25/10) = 3 passes."""
    rep = dp_client_epsilon(noise_multiplier=2.0, batch_size=10, num_examples=100,
                            local_steps=25, delta=1e-5, method="shuffle")
    assert rep.count == 3
    # Each round starts a fresh pass: 3 rounds of 4 steps are 3 passes, not ceil(12/10) = 2.
    assert dp_client_epsilon(noise_multiplier=2.0, batch_size=10, num_examples=100,
                             local_steps=4, rounds=3, delta=1e-5).epsilon == rep.epsilon
    # Independent: PLD of three Gaussians with multiplier 1 (= z/2) composed by dp_accounting.
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(1.0), 3)
    np.testing.assert_allclose(rep.epsilon, acc.get_epsilon(1e-5), rtol=2e-3)
    exact = dp_accounting.get_epsilon_gaussian(1.0 / math.sqrt(3), 1e-5)
    np.testing.assert_allclose(rep.epsilon, exact, rtol=1e-9)
    assert "replace one example" in rep.neighbouring


def test_poisson_epsilon_sensitivity_follows_the_micro_batches():
    """rdp/pld: sensitivity C (multiplier z) only with per-example clipping (M = B); with
    micro-batches of several rows (M < B) or M unknown, 2C (multiplier z/2)."""
    kw = dict(noise_multiplier=1.1, batch_size=256, num_examples=60000, local_steps=7031,
              rounds=2, delta=1e-5, method="rdp")
    rep = dp_client_epsilon(**kw, micro_batches=256)
    assert rep.epsilon == pytest.approx(2.5966, abs=1e-4)  # dp_accounting's RDP accountant (TF Privacy's MNIST example)
    ref = dpsgd_epsilon(noise_multiplier=1.1, batch_size=256, num_examples=60000, steps=14062,
                        delta=1e-5, method="rdp")
    assert rep.epsilon == ref.epsilon
    assert rep.details["sensitivity"] == "C" and rep.details["accounted_noise_multiplier"] == 1.1
    # Independent: dp_accounting's Poisson-sampled Gaussian with multiplier z/2 = 0.55.
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        256 / 60000, dp_accounting.GaussianDpEvent(0.55)), 14062)
    for m in (32, 128, None):
        rep2 = dp_client_epsilon(**kw, micro_batches=m)
        assert rep2.epsilon == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
        assert rep2.details["sensitivity"] == "2C"
        assert "add-or-remove one example" in rep2.neighbouring
        assert "2C" in rep2.neighbouring and "Poisson" in rep2.neighbouring
    assert rep2.epsilon > 3 * rep.epsilon
    # The shuffle guarantee is replace-one, 2C whatever M.
    kw["method"] = "shuffle"
    assert (dp_client_epsilon(**kw, micro_batches=256).epsilon
            == dp_client_epsilon(**kw, micro_batches=32).epsilon
            == dp_client_epsilon(**kw).epsilon)
    with pytest.raises(LdpsimError, match="micro_batches"):
        dp_client_epsilon(**kw, micro_batches=3)


def test_shuffle_sensitivity_2c_is_attained_by_dp_local_update():
    """Replacing one row of a micro-batch can move the noiseless step by the full 2C/M·lr.

    One step, B = M = 2 (each chunk is one row, per-example clipping), lr 1, a linear model
    without bias at W = 0 (∇ℓ(x, y) = (softmax(0) − e_y) xᵀ): replacing x by −x turns the
    row's clipped gradient g into −g, so the two updates differ by 2C/M in norm.
    """
    apply_fn = lambda p, x: x @ p  # noqa: E731
    w = jnp.zeros((5, 3))
    x, y = _data(2)
    C = 0.01

    @jax.jit
    def step(xb):
        return dp_local_update(w, xb, y, jnp.int32(2), apply_fn=apply_fn,
                               optimizer=optax.sgd(1.0), batch_size=2, key=jax.random.key(0),
                               local_steps=1, micro_batches=2, clip_norm=C,
                               noise_multiplier=0.0, unroll=1)[0]

    a = step(x)
    b = step(x.at[0].multiply(-1.0))
    np.testing.assert_allclose(float(jnp.linalg.norm(a - b)), 2 * C / 2, rtol=1e-5)


def test_epsilon_edge_cases():
    assert dp_client_epsilon(noise_multiplier=1.0, batch_size=4, num_examples=8, local_steps=0,
                             delta=1e-5).epsilon == 0.0
    assert dp_client_epsilon(noise_multiplier=0.0, batch_size=4, num_examples=8,
                             local_steps=3, delta=1e-5).epsilon == math.inf
    more = dp_client_epsilon(noise_multiplier=1.0, batch_size=4, num_examples=8,
                             local_steps=8, delta=1e-5).epsilon
    less = dp_client_epsilon(noise_multiplier=1.0, batch_size=4, num_examples=8,
                             local_steps=2, delta=1e-5).epsilon
    assert more > less > 0
    with pytest.raises(LdpsimError, match="batch_size"):
        dp_client_epsilon(noise_multiplier=1.0, batch_size=8, num_examples=8, local_steps=2,
                          delta=1e-5, method="rdp")
    with pytest.raises(LdpsimError, match="method"):
        dp_client_epsilon(noise_multiplier=1.0, batch_size=4, num_examples=8, local_steps=2,
                          delta=1e-5, method="basic")
