"""Adaptive clip rules (MindSpore §1.3, Andrew et al./TFF §3.3) and server-side DP noise."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim._src.privacy.server import adaptive, server_dp

# Global model of 4 consecutive rounds, W_1 .. W_4 (2-d, Pythagorean steps):
#   g_1 = ‖W_1 − W_2‖ = 0.05, g_2 = 0.1, g_3 = 0.02.
W = [np.array([0.0, 0.0]), np.array([0.03, 0.04]), np.array([0.09, 0.12]),
     np.array([0.102, 0.136])]
FACTOR = 1.5


def _mindspore_sequence(rule, participated=True):
    state = rule.init()
    out = [np.asarray(state.clip)]
    for t in range(3):
        g = adaptive.global_change_norm({"w": W[t]}, {"w": W[t + 1]})
        state = rule.update(state, g, participated[t] if isinstance(participated, list)
                            else participated)
        out.append(np.asarray(state.clip))
    return out, state


def test_mindspore_three_rounds_by_hand():
    # Round 1 uses the hard-coded 0.05. After iteration 1: overwrite C = 1.5·0.05 = 0.075.
    # After 2: min(0.075, 1.5·0.1 = 0.15) = 0.075. After 3: min(0.075, 1.5·0.02) = 0.03.
    seq, state = _mindspore_sequence(adaptive.mindspore_clip(FACTOR))
    np.testing.assert_allclose(seq, [0.05, 0.075, 0.075, 0.03], rtol=1e-6)
    assert int(state.iteration) == 4


def test_mindspore_every_round_overwrite_variant():
    seq, _ = _mindspore_sequence(adaptive.mindspore_clip(FACTOR, running_min=False))
    np.testing.assert_allclose(seq, [0.05, 0.075, 0.15, 0.03], rtol=1e-6)


def test_mindspore_per_client_skipping_iteration_one_never_overwrites():
    # Client 0 takes part in every round; client 1 misses iteration 1, so its bound is
    # min(0.05, 0.15) = 0.05 after iteration 2 and min(0.05, 0.03) = 0.03 after 3.
    rule = adaptive.mindspore_clip(FACTOR, num_clients=2)
    part = [jnp.array([True, False]), jnp.array([True, True]), jnp.array([True, True])]
    seq, _ = _mindspore_sequence(rule, part)
    np.testing.assert_allclose(np.stack(seq), [[0.05, 0.05], [0.075, 0.05],
                                               [0.075, 0.05], [0.03, 0.03]], rtol=1e-6)


def test_mindspore_update_jits_with_traced_factor():
    def run(factor, g):
        rule = adaptive.mindspore_clip(factor)
        s = rule.init()
        s = rule.update(s, g)
        return rule.update(s, 2 * g).clip

    got = jax.jit(run)(jnp.float32(2.0), jnp.float32(0.1))
    np.testing.assert_allclose(got, 0.2, rtol=1e-6)   # overwrite 0.2, then min(0.2, 0.4)
    np.testing.assert_allclose(jax.jit(run)(jnp.float32(0.5), jnp.float32(0.1)), 0.05,
                               rtol=1e-6)


def test_mindspore_bad_factor():
    with pytest.raises(LdpsimError, match="dp_norm_clip"):
        adaptive.mindspore_clip(0.0)


@pytest.mark.parametrize("z, m, expected", [(1.0, 100, 1.005038), (1.0, 1000, 1.0000500),
                                            (0.5, 100, 0.500626)])
def test_noise_split_tff_vectors(z, m, expected):
    z_value, sb = adaptive.adaptive_noise_split(z, m)
    assert sb == pytest.approx(m / 20)
    assert z_value == pytest.approx(expected, abs=5e-7)
    # Independent check: 1/z² = 1/z_Δ² + 1/(2σ_b)².
    assert 1 / z ** 2 == pytest.approx(1 / z_value ** 2 + 1 / (2 * sb) ** 2, rel=1e-12)


def test_noise_split_errors_and_zero():
    with pytest.raises(LdpsimError, match="noise_multiplier"):
        adaptive.adaptive_noise_split(10.0, 100)   # z = 2σ_b = 10
    assert adaptive.adaptive_noise_split(0.0, 100) == (0.0, 0.0)
    with pytest.warns(UserWarning, match="factor"):
        adaptive.adaptive_noise_split(9.0, 100)    # z_Δ/z = 2.29


@pytest.mark.parametrize("norm, factor", [(0.01, math.exp(-0.1)), (10.0, math.exp(0.1))])
def test_quantile_direction(norm, factor):
    m = 100
    rule = adaptive.quantile_clip(clients_per_round=m)
    state = rule.init()
    bits = adaptive.quantile_bits(jnp.full((m,), norm), state.clip)
    new, info = jax.jit(rule.update)(state, jax.random.key(0), jnp.sum(bits))
    np.testing.assert_allclose(new.clip, 0.1 * factor, rtol=1e-6)
    assert float(info.unclipped_fraction) == pytest.approx(1.0 if norm < 0.1 else 0.0, abs=1e-6)


def test_quantile_converges_to_median_without_noise():
    norms = jnp.linspace(0.5, 1.5, 101)   # median 1.0
    rule = adaptive.quantile_clip(clients_per_round=101, initial_clip=0.1)
    state = rule.init()
    for t in range(200):
        state, _ = rule.update(state, jax.random.key(t),
                               jnp.sum(adaptive.quantile_bits(norms, state.clip)))
    # The update moves C by at most e^{η/101·...}; it oscillates within one norm step.
    assert abs(float(state.clip) - 1.0) < 0.03


def test_quantile_count_noise_std():
    # bit_sum = 0, m = 100, σ_b = 5: b̄ ~ N(0.5, 0.05²). 4000 draws: the sample std has
    # relative SE 1/√8000 = 1.1 %; tolerance 5.5 % (5 SE; false failure < 1e-6).
    rule = adaptive.quantile_clip(clients_per_round=100, clipped_count_stddev=5.0)
    keys = jax.random.split(jax.random.key(1), 4000)
    _, info = jax.vmap(rule.update, in_axes=(None, 0, None))(rule.init(), keys, 0.0)
    frac = np.asarray(info.unclipped_fraction)
    assert np.std(frac) == pytest.approx(0.05, rel=0.055)
    assert abs(np.mean(frac) - 0.5) < 5 * 0.05 / math.sqrt(4000)


def test_quantile_bits_mask_and_nonfinite():
    b = adaptive.quantile_bits(jnp.array([0.5, 2.0, jnp.nan, 0.1]), 1.0,
                               jnp.array([True, True, True, False]))
    np.testing.assert_array_equal(b, [0.5, -0.5, 0.0, 0.0])


def test_central_mean_fixed_denominator_and_noise_std():
    tree = {"a": jnp.ones((3,)), "b": 2 * jnp.ones((2, 2))}
    mean, noise = server_dp.central_gaussian_mean(jax.random.key(0), tree,
                                                  noise_multiplier=0.0, clip=1.0,
                                                  denominator=4)
    np.testing.assert_allclose(mean["b"], 0.5)
    np.testing.assert_array_equal(noise["a"], 0.0)
    # Noise on the mean: std zC/m = 2·0.5/10 = 0.1 per coordinate; d = 20,000 → relative
    # SE of the sample std 1/√(2d) = 0.5 %; tolerance 2.5 % (5 SE).
    big = {"x": jnp.zeros((20_000,))}
    _, noise = jax.jit(server_dp.central_gaussian_mean)(
        jax.random.key(3), big, noise_multiplier=2.0, clip=0.5, denominator=10)
    assert float(jnp.std(noise["x"])) == pytest.approx(0.1, rel=0.025)


def test_distributed_std_and_shortfall():
    sigma, n, d = 3.0, 50, 4000
    s = server_dp.distributed_client_stddev(sigma, n)
    np.testing.assert_allclose(s, sigma / math.sqrt(n), rtol=1e-6)
    draws = jax.random.normal(jax.random.key(0), (n, d)) * s
    # std of the sum: σ; relative SE 1/√(2d) = 1.1 %, tolerance 5.6 % (5 SE).
    assert float(jnp.std(draws.sum(0))) == pytest.approx(sigma, rel=0.056)
    survivors = 30
    short = server_dp.distributed_shortfall(sigma, n, survivors, clip=1.5)
    np.testing.assert_allclose(short.variance, survivors * sigma ** 2 / n, rtol=1e-6)
    np.testing.assert_allclose(short.target_variance, sigma ** 2, rtol=1e-6)
    np.testing.assert_allclose(short.fraction, 0.6, rtol=1e-6)
    np.testing.assert_allclose(short.effective_noise_multiplier, 2.0 * math.sqrt(0.6),
                               rtol=1e-6)
    assert float(jnp.var(draws[:survivors].sum(0))) == pytest.approx(
        float(short.variance), rel=0.12)   # relative SE of a variance √(2/d) = 2.2 %


def test_aggregate_noise_matches_sum_of_weighted_draws():
    w = jnp.array([1.0, 2.0, 3.0])
    sigma, d = 0.7, 20_000
    agg = server_dp.aggregate_gaussian_noise(jax.random.key(0), {"x": jnp.zeros(d)}, sigma,
                                             jnp.sum(w * w))
    expected = sigma * math.sqrt(14.0)
    assert float(jnp.std(agg["x"])) == pytest.approx(expected, rel=0.025)  # 5 SE
