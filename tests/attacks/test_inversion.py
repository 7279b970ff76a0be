"""DLG / iDLG on tiny models: exact recovery without noise, failure at small ε, iDLG labels,
vmap = per-client, and second-order gradients through LeNet-5's CPU convolutions."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from ldpsim._src._checks import LdpsimError
from ldpsim._src.attacks._experiment import (attack_mechanisms, attack_trials, build_mechanism,
                                             release_of)
from ldpsim._src.attacks._inversion import (InversionConfig, clip_dummy, client_gradient, invert,
                                            recover_labels, victim_loss)
from ldpsim._src.attacks._metrics import psnr
from ldpsim._src.models import get_model

SHAPE = (6, 6, 1)
K = 4


@pytest.fixture(scope="module")
def tiny():
    """A 6×6 → 16 ReLU → 4 MLP (676 parameters) and its parameters."""
    model = get_model("mlp", input_shape=SHAPE, num_classes=K, hidden=(16,))
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1,) + SHAPE))
    return model, params


def _examples(seed: int, b: int):
    rng = np.random.default_rng(seed)
    x = rng.random((b,) + SHAPE).astype(np.float32)
    y = rng.choice(K, b, replace=False).astype(np.int32)
    return jnp.asarray(x), jnp.asarray(y)


_COMPILED: dict = {}
CFG = InversionConfig(steps=60)


def _attack(model, params, release, b, key=1, clip=jnp.inf, cfg=CFG):
    """One jitted attack per (B, config) for the module's tiny model (clip is traced)."""
    fn = _COMPILED.get((b, cfg))
    if fn is None:
        fn = jax.jit(lambda k, r, c: invert(k, r, params, apply_fn=model.apply,
                                            input_shape=SHAPE, num_classes=K, batch=b, clip=c,
                                            config=cfg))
        _COMPILED[(b, cfg)] = fn
    return fn(jax.random.PRNGKey(key), release, jnp.asarray(clip, jnp.float32))


def test_unnoised_single_example_is_recovered_nearly_exactly(tiny):
    model, params = tiny
    for seed in range(3):
        x, y = _examples(seed, 1)
        g = client_gradient(model.apply, params, x, y, K)
        rec = _attack(model, params, g, 1)
        assert int(rec.labels[0]) == int(y[0])
        assert float(psnr(rec.x[0], x[0])) > 50.0, seed   # ~float32 rounding, not a blur
        assert float(rec.loss) < 1e-8


@pytest.mark.slow   # a further case of the recovery above (clip active)
def test_clipped_unnoised_release_is_still_recovered(tiny):
    """The attacker clips its dummy gradient like the client: an active clip bound hides
    the gradient's norm but not the example."""
    model, params = tiny
    x, y = _examples(7, 1)
    mech = build_mechanism("gaussian", epsilon=math.inf, delta=1e-5, clip=0.05, dim=676)
    release = release_of(mech, jax.random.PRNGKey(0), client_gradient(model.apply, params, x, y, K),
                         mech.params)
    assert float(jnp.linalg.norm(ravel_pytree(release)[0])) == pytest.approx(0.05, rel=1e-5)
    rec = _attack(model, params, release, 1, clip=mech.params.clip)
    assert float(psnr(rec.x[0], x[0])) > 40.0


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_dlg_with_joint_labels_recovers_an_unnoised_example(tiny):
    model, params = tiny
    x, y = _examples(3, 1)
    g = client_gradient(model.apply, params, x, y, K)
    rec = _attack(model, params, g, 1, cfg=InversionConfig(method="dlg", steps=150))
    assert int(rec.labels[0]) == int(y[0])
    assert float(psnr(rec.x[0], x[0])) > 30.0


def test_attack_fails_at_small_epsilon(tiny):
    """At ε = 1 (Gaussian, δ = 1e-5, C = 1, replace-one: σ ≈ 7.6 per coordinate against an
    update of norm ≤ 1) the reconstruction is no better than a guess: every seed's PSNR is
    below 15 dB where the unnoised attack on the same examples exceeds 50 dB."""
    model, params = tiny
    mech = build_mechanism("gaussian", epsilon=1.0, delta=1e-5, clip=1.0, dim=676)
    assert float(mech.params.scale) > 5.0
    for seed in range(3):
        x, y = _examples(seed, 1)
        release = release_of(mech, jax.random.PRNGKey(100 + seed),
                             client_gradient(model.apply, params, x, y, K), mech.params)
        rec = _attack(model, params, release, 1, clip=mech.params.clip)
        assert float(psnr(rec.x[0], x[0])) < 15.0, seed


@pytest.mark.slow  # compiles LeNet-5's gradient (28×28): the engine's model, not a tiny one
def test_idlg_labels_exact_without_noise_lenet5():
    """iDLG's sign rule on the engine's LeNet-5 (ReLU before the output layer): the label of
    a single example is the only negative column sum of the output kernel's gradient."""
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))
    rng = np.random.default_rng(0)
    grad = jax.jit(lambda x, y: client_gradient(model.apply, params, x, y, 10))
    for label in range(10):
        x = jnp.asarray(rng.random((1, 28, 28, 1)), jnp.float32)
        g = grad(x, jnp.asarray([label], jnp.int32))
        assert int(recover_labels(g, 10, 1)[0]) == label


def test_idlg_labels_exact_for_distinct_labels_tiny(tiny):
    model, params = tiny
    for seed in range(5):
        x, y = _examples(seed, 2)
        g = client_gradient(model.apply, params, x, y, K)
        assert sorted(np.asarray(recover_labels(g, K, 2)).tolist()) == sorted(np.asarray(y).tolist())


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_vmapped_attack_equals_per_client_attack(tiny):
    model, params = tiny
    xs, ys = zip(*[_examples(s, 1) for s in (11, 12, 13)])
    releases = [client_gradient(model.apply, params, x, y, K) for x, y in zip(xs, ys)]
    keys = [5 + i for i in range(3)]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *releases)
    one = lambda k, r: invert(k, r, params, apply_fn=model.apply, input_shape=SHAPE,  # noqa: E731
                              num_classes=K, batch=1, clip=jnp.float32(jnp.inf), config=CFG)
    batched = jax.jit(jax.vmap(one))(jnp.stack([jax.random.PRNGKey(k) for k in keys]), stacked)
    for i in range(3):
        single = _attack(model, params, releases[i], 1, key=keys[i])
        np.testing.assert_allclose(batched.x[i], single.x, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(batched.labels[i], single.labels)


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_attack_trials_sum_of_clients_shapes_and_keys(tiny):
    """attack_trials: trials vmapped; the n = 1 and the first client of n = 3 see the same
    θ and noise key, and summing more clients changes what the server sees."""
    model, _ = tiny
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((2, 3, 1) + SHAPE), jnp.float32)
    y = jnp.asarray(rng.integers(0, K, (2, 3, 1)), jnp.int32)
    mech = build_mechanism("gaussian", epsilon=10.0, delta=1e-5, clip=1.0, dim=676)
    cfg = InversionConfig(steps=5)
    out3 = attack_trials(np.array([0, 1]), x, y, mech, model=model, mechanism_name="gaussian",
                         config=cfg)
    out1 = attack_trials(np.array([0, 1]), x[:, :1], y[:, :1], mech, model=model,
                         mechanism_name="gaussian", config=cfg)
    assert out3.recon.x.shape == (2, 1) + SHAPE and out3.recon.labels.shape == (2, 1)
    assert np.all(np.isfinite(np.asarray(out3.release_norm)))
    assert not np.allclose(out1.release_norm, out3.release_norm)


@pytest.mark.slow  # compiles LeNet-5's second-order gradient in both formulations
def test_second_order_gradients_through_lenet5_cpu_convolutions():
    """The attack differentiates the model's gradient: through the CPU formulations
    (``conv_impl="chwn"`` and ``"mixed"``, hand-written VJPs) it equals the plain-JAX
    reference."""
    x = jax.random.uniform(jax.random.PRNGKey(1), (1, 28, 28, 1))
    t = jax.random.normal(jax.random.PRNGKey(2), (61706,))
    y = jax.nn.one_hot(jnp.array([3]), 10)
    out = {}
    for impl, pool in (("chwn", "reshape"), ("mixed", "reshape"), ("xla", "window")):
        m = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10, conv_impl=impl,
                      pool_impl=pool)
        p = m.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))
        f = lambda z: jnp.sum((ravel_pytree(jax.grad(victim_loss, argnums=1)(  # noqa: E731
            m.apply, p, z, y))[0] - t) ** 2)
        out[impl] = np.asarray(jax.jit(jax.grad(f))(x))
    assert np.abs(out["xla"]).max() > 1e-3
    np.testing.assert_allclose(out["mixed"], out["xla"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["chwn"], out["xla"], rtol=1e-4, atol=1e-5)


def test_clip_dummy_without_bound_has_finite_gradient():
    g = jax.grad(lambda v: jnp.sum(clip_dummy(v, jnp.inf, "l2") ** 2))(jnp.ones(5))
    np.testing.assert_allclose(g, 2 * jnp.ones(5))
    v = jnp.array([3.0, -4.0])
    np.testing.assert_allclose(clip_dummy(v, 1.0, "l2"), v / 5, rtol=1e-6)
    np.testing.assert_allclose(clip_dummy(v, 1.0, "l1"), v / 7, rtol=1e-6)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(LdpsimError, match="method"):
        InversionConfig(method="magic").checked()
    with pytest.raises(LdpsimError, match="optimizer"):
        InversionConfig(optimizer="sgd").checked()
    with pytest.raises(LdpsimError, match="steps"):
        InversionConfig(steps=0).checked()
    with pytest.raises(LdpsimError, match="examples per client"):
        recover_labels({"k": jnp.zeros((3, 4))}, 4, 5)
    with pytest.raises(LdpsimError, match="mechanism"):
        build_mechanism("nope", epsilon=1.0, delta=1e-5, clip=1.0, dim=10)
    assert {"gaussian", "laplace"} <= set(attack_mechanisms())
