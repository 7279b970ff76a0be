"""DP-SGD optax transformations with MindArmour micro-batch semantics."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl.dpsgd.aggregate import (
    decay_noise_multiplier,
    dp_adam,
    dp_aggregate,
    dp_momentum,
    dp_sgd,
    microbatch_grads,
    update_clip_norm,
)
from ldpsim._src.privacy.accountants.monitors import decayed_noise_multipliers


def _grads():
    # Four micro-batch gradients with global norms 5, 0.5, 10 and exactly 1.
    return {"w": jnp.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0], [0.6, 0.8]]),
            "b": jnp.zeros((4, 1))}


def test_clipping_per_micro_batch_exact():
    tx = dp_aggregate(1.0, 0.0, key=0)
    out, state = tx.update(_grads(), tx.init(None))
    # clip: (0.6,0.8), (0.3,0.4), (0.6,0.8), (0.6,0.8); sum (2.1, 2.8); / 4
    np.testing.assert_allclose(out["w"], [2.1 / 4, 2.8 / 4], rtol=1e-6)
    np.testing.assert_array_equal(out["b"], [0.0])
    # beta counts norms strictly below C: only 0.5 (norm exactly 1 is not "below").
    assert float(state.unclipped_fraction) == 0.25
    assert int(state.count) == 1


def test_clipping_matches_optax_contrib_per_example():
    g = _grads()
    ours, _ = dp_aggregate(1.3, 0.0, key=0).update(g, dp_aggregate(1.3, 0.0, key=0).init(None))
    ref_tx = optax.contrib.differentially_private_aggregate(1.3, 0.0, key=jax.random.key(0))
    ref, _ = ref_tx.update(g, ref_tx.init(None))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), ours, ref)


def test_microbatch_grads_are_chunk_mean_gradients():
    def loss(params, chunk):
        x, y = chunk
        return jnp.mean((x @ params["w"] - y) ** 2)

    key = jax.random.key(1)
    x = jax.random.normal(key, (8, 3))
    y = jnp.arange(8.0)
    params = {"w": jnp.array([0.1, -0.2, 0.3])}
    grads, mean_loss = microbatch_grads(loss, params, (x, y), 4)
    assert grads["w"].shape == (4, 3)
    for j in range(4):
        xs, ys = x[2 * j:2 * j + 2], y[2 * j:2 * j + 2]  # contiguous chunks (ops.Split(0, M))
        expected = 2 * xs.T @ (xs @ params["w"] - ys) / 2
        np.testing.assert_allclose(grads["w"][j], expected, rtol=1e-5)
    np.testing.assert_allclose(mean_loss, loss(params, (x, y)), rtol=1e-6)
    with pytest.raises(LdpsimError, match="divisible by micro_batches=3"):
        microbatch_grads(loss, params, (x, y), 3)


def test_noise_std_on_average_is_norm_bound_times_m_over_M():
    # d = 40000 coordinates of zero gradient: output = noise / M with std b*m/M = 2*1.5/4.
    # The sample std has relative standard error 1/sqrt(2d) = 0.35%; the 2% tolerance
    # is 5.7 standard errors, false-failure rate ~1e-8 (fixed key, so deterministic anyway).
    g = {"w": jnp.zeros((4, 40000))}
    tx = dp_aggregate(2.0, 1.5, key=jax.random.key(7))
    out, _ = tx.update(g, tx.init(None))
    assert float(jnp.std(out["w"])) == pytest.approx(2.0 * 1.5 / 4, rel=0.02)
    assert abs(float(jnp.mean(out["w"]))) < 5 * 0.75 / math.sqrt(40000)


def test_noise_uses_mechanism_bound_not_adapted_clip():
    # MindArmour quirk (§2.3): std is noise_norm_bound * m / M even after C adapts;
    # noise_follows_clip=True uses C_t instead. Both within 2% (5.7 s.e., as above).
    g = {"w": jnp.zeros((4, 40000))}
    for follows, expected in ((False, 1.0 * 2.0 / 4), (True, 3.0 * 2.0 / 4)):
        tx = dp_aggregate(1.0, 2.0, key=3, noise_follows_clip=follows)
        state = tx.init(None)._replace(clip_norm=jnp.float32(3.0))
        out, _ = tx.update(g, state)
        assert float(jnp.std(out["w"])) == pytest.approx(expected, rel=0.02)


def test_fresh_noise_each_step():
    g = {"w": jnp.zeros((2, 8))}
    tx = dp_aggregate(1.0, 1.0, key=0)
    state = tx.init(None)
    a, state = tx.update(g, state)
    b, _ = tx.update(g, state)
    assert not np.allclose(a["w"], b["w"])


@pytest.mark.parametrize("policy", ["Time", "Step", "Exp"])
def test_decay_recursion_matches_closed_form(policy):
    m0, r, t = 1.5, 0.01, 200
    m = jnp.float32(m0)
    for _ in range(t):
        m = decay_noise_multiplier(policy, m, m0, r)
    closed = decayed_noise_multipliers(m0, [t], policy, r)[0]
    assert float(m) == pytest.approx(closed, rel=1e-4)  # float32 recursion over 200 steps
    # The transformation applies the same rule once per update (after drawing that step's noise).
    tx = dp_aggregate(1.0, m0, key=0, noise_decay=policy, noise_decay_rate=r)
    state = tx.init(None)
    step = jax.jit(tx.update)
    for _ in range(3):
        _, state = step({"w": jnp.zeros((2, 3))}, state)
    assert float(state.noise_multiplier) == pytest.approx(
        decayed_noise_multipliers(m0, [3], policy, r)[0], rel=1e-6)


def test_time_decay_with_zero_noise_stays_zero():
    assert float(decay_noise_multiplier("Time", 0.0, 0.0, 0.1)) == 0.0


def test_adaptive_clip_deterministic_vector():
    assert float(update_clip_norm("Linear", 1.0, 0.5, 0.001, 0.9)) == pytest.approx(1.0004, abs=1e-7)
    assert float(update_clip_norm("Geometric", 1.0, 0.5, 0.001, 0.9)) == pytest.approx(
        1.00040008, abs=1e-7)
    # Through the transformation: two of four norms (0.5, 0.2) strictly below C = 1.
    g = {"w": jnp.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0], [0.12, 0.16]])}
    for policy, expected in (("Linear", 1.0004), ("Geometric", math.exp(0.0004))):
        tx = dp_aggregate(1.0, 1.0, key=0, clip_decay=policy, fraction_stddev=0.0)
        _, state = tx.update(g, tx.init(None))
        assert float(state.unclipped_fraction) == 0.5
        assert float(state.clip_norm) == pytest.approx(expected, abs=1e-7)


def test_one_changed_micro_batch_moves_sum_by_2c_and_fraction_by_one_over_m():
    """The sensitivities the module docstring states, through dp_aggregate (no noise).

    Changing the data of one micro-batch of several examples (here: its gradient turned
    around, as one added example can do, see tests/fl/test_dpsgd_train.py) moves the clipped
    sum by exactly 2C, not C; and flips at most one unclipped indicator: β/M moves by 1/M.
    """
    C, M = 1.0, 4
    tx = dp_aggregate(C, 0.0, key=0, clip_decay="Linear", fraction_stddev=0.0)
    g = _grads()  # norms 5, 0.5, 10, 1
    changed = {"w": g["w"].at[0].multiply(-1.0), "b": g["b"]}
    out, s = tx.update(g, tx.init(None))
    out2, _ = tx.update(changed, tx.init(None))
    diff = (out2["w"] - out["w"]) * M  # the sums differ by the two clipped gradients
    assert float(jnp.linalg.norm(diff)) == pytest.approx(2 * C, rel=1e-6)
    # Micro-batch 1 (norm 0.5, unclipped) becomes clipped: β/M moves by exactly 1/M.
    bigger = {"w": g["w"].at[1].multiply(10.0), "b": g["b"]}
    _, s3 = tx.update(bigger, tx.init(None))
    assert float(s.unclipped_fraction - s3.unclipped_fraction) == pytest.approx(1 / M)


def test_adaptive_clip_fraction_noise_std():
    # β̃ = β + N(0, σ_f²); with η = 1, γ = 0 and Linear, C' = C − β̃, so C' has std σ_f.
    # 2000 independent keys: relative s.e. of the std is 1/sqrt(4000) = 1.6%; tolerance 8%
    # is 5 s.e. (false-failure rate ~6e-7).
    g = {"w": jnp.array([[0.3, 0.4], [6.0, 8.0]])}
    tx = dp_aggregate(1.0, 0.0, key=0, clip_decay="Linear", clip_learning_rate=1.0,
                      target_unclipped_quantile=0.0, fraction_stddev=0.05)
    states = jax.vmap(lambda k: tx.init(None)._replace(key=k))(
        jax.random.split(jax.random.key(5), 2000))
    _, new = jax.vmap(tx.update, in_axes=(None, 0))(g, states)
    assert float(jnp.std(new.clip_norm)) == pytest.approx(0.05, rel=0.08)
    assert float(jnp.mean(new.clip_norm)) == pytest.approx(0.5, abs=5 * 0.05 / math.sqrt(2000))


def test_hyperparameters_are_traced_no_retrace():
    tx = dp_aggregate(1.0, 1.0, key=0)
    traces = []

    @jax.jit
    def step(g, state):
        traces.append(1)
        return tx.update(g, state)

    g = {"w": jnp.zeros((2, 3))}
    state = tx.init(None)
    step(g, state)
    step(g, state._replace(noise_multiplier=jnp.float32(3.0), clip_norm=jnp.float32(0.1)))
    assert len(traces) == 1


def _toy_problem():
    key_x, key_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(key_x, (256, 5))
    w_true = jax.random.normal(key_w, (5,))
    y = (x @ w_true > 0).astype(jnp.float32)

    def loss(params, chunk):
        xs, ys = chunk
        logits = xs @ params["w"] + params["b"]
        return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, ys))

    return loss, (x, y), {"w": jnp.zeros(5), "b": jnp.zeros(())}


@pytest.mark.parametrize("make", [
    lambda: dp_momentum(0.1, 0.9, norm_bound=1.0, noise_multiplier=1.0, key=1),
    lambda: dp_sgd(0.5, norm_bound=1.0, noise_multiplier=1.0, key=1, noise_decay="Exp",
                   noise_decay_rate=0.01),
    lambda: dp_adam(0.05, norm_bound=1.0, noise_multiplier=1.0, key=1, clip_decay="Geometric"),
])
def test_short_training_decreases_loss(make):
    loss, data, params = _toy_problem()
    tx = make()
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state):
        grads, value = microbatch_grads(loss, params, data, 32)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    first = float(loss(params, data))
    for _ in range(60):
        params, opt_state, _ = train_step(params, opt_state)
    assert float(loss(params, data)) < 0.7 * first
    assert int(opt_state[0].count) == 60


@pytest.mark.parametrize("kwargs, match", [
    (dict(norm_bound=0.0), "norm_bound"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(noise_decay="Linear"), "noise_decay"),
    (dict(noise_decay_rate=2.0), "noise_decay_rate"),
    (dict(clip_decay="Time"), "clip_decay"),
    (dict(target_unclipped_quantile=1.5), "target_unclipped_quantile"),
    (dict(fraction_stddev=-0.1), "fraction_stddev"),
])
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(LdpsimError, match=match):
        dp_aggregate(key=0, **kwargs)


def test_mismatched_leading_axes_rejected():
    tx = dp_aggregate(1.0, 1.0, key=0)
    with pytest.raises(LdpsimError, match="leading micro-batch axis"):
        tx.update({"a": jnp.zeros((2, 3)), "b": jnp.zeros((3,))}, tx.init(None))
