"""Tests of the Threefry Laplace sampler (``sampling.laplace``, impl ``"bits"``) and of
``mechanisms.laplace_noise`` on top of it: exact bits, accuracy against float64, the
standard Laplace law (scipy), its reach, determinism, jit/vmap and the fallback for
non-threefry keys.

Statistical tests use fixed keys; each states the probability that a correct sampler would
fail it over a random choice of key.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.noise import mechanisms, sampling

LN2 = math.log(2.0)


def _u32(rng, n):
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


def _laplace_f64(b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """The same formula in float64 from the integers: k = 63 bits, U = (k + 1/2)·2**-63,
    x = ±(-ln U); -log1p of the exact complement where U ≥ 1/2 (float64 relative 1e-16)."""
    k = (b0 & np.uint32(0x7FFFFFFF)).astype(np.uint64) * np.uint64(2**32) + b1.astype(np.uint64)
    u = (k.astype(np.float64) + 0.5) * 2.0**-63
    comp = ((np.uint64(2**63 - 1) - k).astype(np.float64) + 0.5) * 2.0**-63   # 1 - U
    with np.errstate(divide="ignore"):
        mag = np.where(u < 0.5, -np.log(u), -np.log1p(-comp))
    return np.where(b0 >= np.uint32(2**31), -mag, mag)


# ---------------------------------------------------------------- exact bits and accuracy


def test_extreme_bits():
    b0 = np.array([0, 0x80000000, 0, 0, 0x40000000, 0x7FFFFFFF, 0xFFFFFFFF, 0x3FFFFFFF],
                  np.uint32)
    b1 = np.array([0, 0, 1, 2, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], np.uint32)
    x = np.asarray(jax.jit(sampling.laplace_from_bits)(b0, b1), np.float64)
    # k = 0: U = 2**-64, the reach 64 ln 2 (float32-rounded: within half an ulp, 1.9e-6).
    assert x[0] == np.float32(64 * LN2) and x[1] == -np.float32(64 * LN2)
    assert x[2] == pytest.approx(-math.log(1.5 * 2.0**-63), rel=1e-7)   # k = 1
    assert x[3] == pytest.approx(-math.log(2.5 * 2.0**-63), rel=1e-7)   # k = 2
    assert x[4] == pytest.approx(LN2, rel=1e-7)                         # U = 1/2 + 2**-64
    # k = 2**63 - 1: U = 1 - 2**-64, |x| = 2**-64; within the documented 2**-46 of it, and
    # the sign bit still decides the sign (never a negative zero from the magnitude).
    assert 0.0 <= x[5] <= 2.0**-46 and not np.signbit(x[5])
    assert -(2.0**-46) <= x[6] <= 0.0 and np.signbit(x[6])
    assert x[7] == pytest.approx(-math.log1p(-(2.0**62 - 0.5) * 2.0**-63), rel=1e-7)  # U ≈ 1/2
    model = sampling.laplace_model("bits")
    assert model[1:] == ("cube", pytest.approx(64 * LN2, rel=1e-15), 2.0**-64)
    assert math.exp(-model.bound) == pytest.approx(model.coordinate_tail_mass, rel=1e-12)
    assert abs(x[0]) <= sampling.LAPLACE_TAIL_BOUNDS["bits"]
    assert x[0] == pytest.approx(model.bound, rel=1e-7)


def test_matches_float64_on_random_and_tail_heavy_bits():
    rng = np.random.default_rng(5)
    n = 1 << 20
    b0, b1 = _u32(rng, n), _u32(rng, n)
    b0[: n // 4] &= np.uint32(0x8000007F)         # top 24 bits of U zero: U < 2**-24
    b0[n // 4: n // 2] |= np.uint32(0x7FFFFF80)   # U > 1 - 2**-24: |x| < 6e-8
    b0[: n // 32] &= np.uint32(0x80000000)        # U < 2**-31
    b1[: n // 64] = rng.integers(0, 4, n // 64).astype(np.uint32)  # U within 4·2**-63 of 0
    x = np.asarray(jax.jit(sampling.laplace_from_bits)(b0, b1), np.float64)
    exact = _laplace_f64(b0, b1)
    # Documented bound 2e-7·|x| + 2**-46 (measured: 1.4e-7 relative, 1.8e-15 absolute part).
    assert np.all(np.abs(x - exact) <= 2e-7 * np.abs(exact) + 2.0**-46)
    assert np.all(np.signbit(x) == (b0 >= np.uint32(2**31)))
    assert np.max(np.abs(x)) <= sampling.LAPLACE_TAIL_BOUNDS["bits"]


# ---------------------------------------------------------------- distribution

N_BIG = 1 << 21


@pytest.fixture(scope="module")
def big_sample() -> np.ndarray:
    x = jax.jit(lambda k: sampling.laplace(k, (N_BIG,)))(jax.random.key(20240602))
    return np.asarray(x, np.float64)


def test_ks_against_scipy_laplace(big_sample):
    # False-failure rate 1e-6 (the KS p-value is uniform under H0); power: a 2% scale error
    # is seen at this n.
    assert stats.kstest(big_sample, "laplace").pvalue > 1e-6
    assert stats.kstest(big_sample * 1.02, "laplace").pvalue < 1e-6


def test_moments(big_sample):
    # Standard Laplace: mean 0 (SE √(2/n)), variance 2 (SE √(20/n): E x⁴ = 24), 5 SE each:
    # false-failure rate ≤ 5.7e-7 per moment (normal approximation).
    n = big_sample.size
    assert abs(big_sample.mean()) < 5 * math.sqrt(2 / n)
    assert abs(big_sample.var() - 2.0) < 5 * math.sqrt(20 / n)


@pytest.mark.parametrize("t", [1.0, 5.0, 10.0, 13.0])
def test_tail_frequencies(big_sample, t):
    # #{|x| > t} ~ Binomial(n, e^{-t}); exact binomial central interval with tails 1e-6
    # each: false-failure rate ≤ 2e-6 per level (n·q at t = 13: 4.7).
    n, q = big_sample.size, math.exp(-t)
    count = int(np.sum(np.abs(big_sample) > t))
    assert stats.binom.ppf(1e-6, n, q) <= count <= stats.binom.isf(1e-6, n, q)


@pytest.mark.parametrize("m, mask", [(24, 0x8000007F), (31, 0x80000000)])
def test_magnitude_law_beyond_jax_reach(m, mask):
    # Conditioned on U < 2**-m (the top m - 31 + 31 bits of k zero), an exact exponential
    # magnitude has |x| - m ln 2 ~ Exponential(1) (memorylessness), cut at 64 ln 2 (mass
    # 2**-(64-m) beyond). jax.random.laplace never exceeds 16.64: this is the range it
    # cannot produce. KS on 2**18 draws, false-failure rate 1e-6.
    rng = np.random.default_rng(m)
    n = 1 << 18
    b0 = _u32(rng, n) & np.uint32(mask)
    x = np.asarray(jax.jit(sampling.laplace_from_bits)(b0, _u32(rng, n)), np.float64)
    assert stats.kstest(np.abs(x) - m * LN2, "expon").pvalue > 1e-6
    # Signs: fair coin, 5 SE (false-failure rate 5.7e-7).
    assert abs(np.mean(x > 0) - 0.5) < 5 * 0.5 / math.sqrt(n)


def test_two_sample_against_jax_random_laplace():
    # Two-sample KS on different keys, false-failure rate 1e-6.
    a = np.asarray(sampling.laplace(jax.random.key(1), (1 << 19,)))
    b = np.asarray(sampling.laplace(jax.random.key(2), (1 << 19,), impl="jax"))
    assert stats.ks_2samp(a, b).pvalue > 1e-6


# ---------------------------------------------------------------- determinism, jit, vmap


def test_bits_come_from_threefry_at_the_laplace_tag():
    k = jax.random.key(8)
    kd = jax.random.key_data(k)
    ctr = jnp.arange(12, dtype=jnp.uint32)
    words = jax.jit(lambda a, b, c: sampling.laplace_from_bits(*sampling.threefry2x32(
        a, b, jnp.full_like(c, sampling.LAPLACE_TAG), c)))(kd[0], kd[1], ctr)
    np.testing.assert_allclose(np.asarray(sampling.laplace(k, (4, 3))).ravel(),
                               np.asarray(words), rtol=1e-6, atol=1e-7)
    assert sampling.LAPLACE_TAG not in (sampling.TAG, sampling.TAIL_TAG)


def test_determinism_prefix_and_key_forms():
    k = jax.random.key(5)
    a = np.asarray(sampling.laplace(k, (10_000,)))
    np.testing.assert_array_equal(a, np.asarray(sampling.laplace(k, (10_000,))))
    np.testing.assert_array_equal(a[:6], np.asarray(sampling.laplace(k, (2, 3))).ravel())
    np.testing.assert_array_equal(np.asarray(sampling.laplace(jax.random.PRNGKey(5), (6,))), a[:6])
    b = np.asarray(sampling.laplace(jax.random.fold_in(k, 1), (10_000,)))
    assert np.mean(a == b) < 1e-3


def test_jit_vmap_and_laplace_like_leaf_offsets():
    keys = jax.random.split(jax.random.key(11), 4)
    eager = np.stack([np.asarray(sampling.laplace(k, (3, 7))) for k in keys])
    batched = np.asarray(jax.jit(jax.vmap(lambda k: sampling.laplace(k, (3, 7))))(keys))
    np.testing.assert_allclose(batched, eager, rtol=1e-6, atol=1e-7)  # FMA contraction: 1-2 ulp
    k = jax.random.key(10)
    tree = {"w": jnp.zeros((3, 4), jnp.bfloat16), "b": jnp.zeros((5,), jnp.int32),
            "s": jnp.zeros(())}
    noise = jax.jit(lambda kk: sampling.laplace_like(kk, tree))(k)
    assert noise["w"].dtype == jnp.bfloat16 and noise["b"].dtype == jnp.float32
    flat = np.asarray(jax.jit(lambda kk: sampling.laplace(kk, (18,)))(k))
    got = np.concatenate([np.asarray(x, np.float32).ravel()
                          for x in jax.tree_util.tree_leaves(noise)])   # order: b, s, w
    np.testing.assert_allclose(got[:6], flat[:6], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[6:], flat[6:], rtol=1e-2)  # bfloat16 leaf


# ---------------------------------------------------------------- laplace_noise


def test_laplace_noise_uses_bits_for_threefry_and_jax_otherwise():
    tree = {"w": jnp.zeros((2, 3)), "b": jnp.zeros((2, 3))}
    k = jax.random.key(3)
    assert sampling.resolve_laplace_impl(k, None) == "bits"
    got = mechanisms.laplace_noise(k, tree, 2.0)
    ref = jax.tree_util.tree_map(lambda x: 2.0 * x, sampling.laplace_like(k, tree))
    for g, r in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-6)
    # impl="jax" and non-threefry keys: jax.random.laplace on per-leaf split keys (the
    # previous behaviour, bit for bit).
    for key, impl in ((k, "jax"), (jax.random.key(3, impl="rbg"), None)):
        assert sampling.resolve_laplace_impl(key, impl) == "jax"
        noise = mechanisms.laplace_noise(key, tree, 2.0, impl=impl)
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        keys = jax.random.split(key, len(leaves))
        old = [jax.random.laplace(kk, x.shape, x.dtype) * jnp.float32(2.0)
               for kk, x in zip(keys, leaves)]
        for g, r in zip(jax.tree_util.tree_leaves(noise), old):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
    y = mechanisms.add_laplace_noise(k, tree, 2.0)
    np.testing.assert_allclose(np.asarray(y["w"]), np.asarray(got["w"]), rtol=1e-6)


@pytest.mark.slow
def test_laplace_noise_at_lenet_size_under_jit_vmap():
    # 8 clients x the LeNet-5 update (d = 61,706, 10 leaves): per-client noise with scale b
    # has E|x| = b; the mean of |x|/b over 8·61,706 draws has SE 1/√n (Var|x| = b²):
    # 5 SE, false-failure rate 5.7e-7. Clients differ; the draw stays within the reach.
    shapes = [(5, 5, 1, 6), (6,), (5, 5, 6, 16), (16,), (400, 120), (120,),
              (120, 84), (84,), (84, 10), (10,)]
    tree = [jnp.zeros(s, jnp.float32) for s in shapes]
    b = 0.37
    keys = jax.vmap(lambda c: jax.random.fold_in(jax.random.key(7), c))(jnp.arange(8))
    noise = jax.jit(jax.vmap(lambda kk: mechanisms.laplace_noise(kk, tree, b)))(keys)
    flat = np.concatenate([np.asarray(x).reshape(8, -1) for x in noise], axis=1)
    assert flat.shape == (8, 61706)
    n = flat.size
    assert abs(np.mean(np.abs(flat)) / b - 1.0) < 5 / math.sqrt(n)
    assert np.max(np.abs(flat)) <= b * sampling.LAPLACE_TAIL_BOUNDS["bits"]
    assert np.mean(flat[0] == flat[1]) < 1e-3


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sampling.laplace(jax.random.key(0), (3,), impl="fast"), "impl"),
        (lambda: sampling.laplace(jax.random.key(0), (3,), jnp.int32), "dtype"),
        (lambda: sampling.laplace(jax.random.split(jax.random.key(0), 2), (3,)), "shape"),
        (lambda: sampling.laplace(jax.random.key(0, impl="rbg"), (3,), impl="bits"), "threefry"),
        (lambda: mechanisms.laplace_noise(jax.random.key(0), {"a": jnp.zeros(2)}, 1.0,
                                          impl="tail"), "impl"),
    ],
)
def test_bad_input_is_rejected(call, match):
    with pytest.raises(LdpsimError, match=match):
        call()
