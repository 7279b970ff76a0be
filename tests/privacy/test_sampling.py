"""Tests of ldpsim._src.privacy.noise.sampling: exact generator, accurate transform, N(0, 1) law.

Statistical tests use fixed keys (so they are deterministic); each tolerance is
derived from the sampling error, and the comment states the probability that a
correct sampler would fail it over a random choice of key.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.noise import sampling

N_BIG = 1 << 21  # 2,097,152 samples for the distribution tests


@pytest.fixture(scope="module", params=["fast", "tail", "icdf"])
def big_sample(request) -> np.ndarray:
    impl = request.param
    x = jax.jit(lambda k: sampling.normal(k, (N_BIG,), impl=impl))(jax.random.key(20240601))
    return np.asarray(x, dtype=np.float64)


# ---------------------------------------------------------------- exact maths


def test_threefry_is_bit_exact_jax_threefry():
    # fold_in(k, j) is threefry_2x32(k, (0, j)) in JAX: our unrolled hash must agree.
    key = jax.random.key(7)
    kd = jax.random.key_data(key)
    j = jnp.array([0, 1, 2, 12345, 2**32 - 1], dtype=jnp.uint32)
    x0, x1 = sampling.threefry2x32(kd[0], kd[1], jnp.zeros_like(j), j)
    ref = np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(key, int(i)))) for i in j])
    np.testing.assert_array_equal(np.asarray(x0), ref[:, 0])
    np.testing.assert_array_equal(np.asarray(x1), ref[:, 1])


def test_upper_probit_matches_scipy_over_full_range():
    # p from 2**-64 (the smallest the sampler produces) to 1/2, log-spaced plus dense near 1/2.
    p = np.exp(np.linspace(np.log(2.0**-64), np.log(0.5), 400_001))
    p = np.concatenate([p, 0.5 - np.linspace(0.0, 0.1, 100_001)[1:]]).astype(np.float32)
    z = np.asarray(jax.jit(sampling.upper_probit)(jnp.asarray(p)), np.float64)
    exact = -special.ndtri(p.astype(np.float64))
    pos = exact > 1e-3
    assert np.max(np.abs(z[pos] / exact[pos] - 1.0)) < 4e-7
    assert np.max(np.abs(z - exact)) < 2.5e-6  # absolute, includes the far tail (|z| ~ 9)
    assert np.all(z >= 0.0)
    assert np.all(np.diff(z[: 400_001]) <= 1e-6)  # monotone (p increasing) up to rounding


def test_extreme_bits_reach_nine_sigma_with_sign():
    b0 = jnp.array([0x00000000, 0x80000000, 0x7FFFFFFF, 0xFFFFFFFF], dtype=jnp.uint32)
    b1 = jnp.array([0x00000000, 0x00000001, 0xFFFFFFFF, 0xFFFFFFFF], dtype=jnp.uint32)
    z = np.asarray(sampling.normal_from_bits(b0, b1), np.float64)
    z_max = -special.ndtri(2.0**-64)  # ~9.08
    np.testing.assert_allclose(z[:2], [z_max, -z_max], rtol=4e-7)
    assert abs(z[2]) < 1e-6 and abs(z[3]) < 1e-6  # p just below 1/2
    assert np.signbit(z[3]) and not np.signbit(z[2])


R_MAX = float(np.sqrt(-2.0 * np.log(2.0**-33)))  # Box–Muller radius bound, 6.7637


def _box_muller_f64(b0: np.ndarray, b1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = (b0.astype(np.float64) + 0.5) * 2.0**-32
    v = (b1.astype(np.float64) + 0.5) * 2.0**-32
    r = np.sqrt(-2.0 * np.log(u))
    return r * np.cos(2.0 * np.pi * v), r


def test_box_muller_matches_float64_on_same_bits():
    rng = np.random.default_rng(0)
    n = 1 << 20
    b0 = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b0[: n // 4] >>= 12  # a quarter in the tail (U < 2**-12, R > 4.08)
    b1 = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    edge = np.array(
        [0, 1, 255, 256, 2**24, 2**31 - 1, 2**31, 2**32 - 257, 2**32 - 256, 2**32 - 1],
        dtype=np.uint32,
    )
    quarter = np.array([0, 2**30 - 1, 2**30, 2**31 - 1, 2**31, 3 * 2**30, 2**32 - 1], np.uint32)
    b0 = np.concatenate([b0, np.repeat(edge, quarter.size)])
    b1 = np.concatenate([b1, np.tile(quarter, edge.size)])
    z = np.asarray(jax.jit(sampling.box_muller_from_bits)(b0, b1), np.float64)
    exact, r = _box_muller_f64(b0, b1)
    # Documented bound 2e-7·(1 + R) (measured max 1.4e-7·(1 + R)); float32 rounding alone
    # is 6e-8·|z|, so this is a few ulps.
    assert np.all(np.abs(z - exact) <= 2e-7 * (1.0 + r))
    assert np.max(np.abs(z)) <= R_MAX * (1 + 1e-6)


def test_box_muller_extremes_and_quadrant_signs():
    # U at its smallest (b0 = 0) gives R_max; the four quadrant starts give cos = +1, 0-, -1, 0+.
    b0 = np.zeros(4, np.uint32)
    b1 = np.array([0, 2**30, 2**31, 3 * 2**30], np.uint32)
    z = np.asarray(sampling.box_muller_from_bits(jnp.asarray(b0), jnp.asarray(b1)), np.float64)
    exact, _ = _box_muller_f64(b0, b1)
    np.testing.assert_allclose(z, exact, atol=2e-6)
    assert z[0] == pytest.approx(R_MAX, rel=1e-6) and z[2] == pytest.approx(-R_MAX, rel=1e-6)
    # U -> 1 (b0 = 2**32 - 1): radius √(2**-32) = 1.5e-5, kept to relative precision.
    z1 = float(sampling.box_muller_from_bits(jnp.uint32(2**32 - 1), jnp.uint32(0)))
    assert z1 == pytest.approx(np.sqrt(-2 * np.log1p(-0.5 * 2.0**-32)), rel=1e-5)


# ---------------------------------------------------------------- distribution


def test_ks_against_standard_normal(big_sample):
    # False-failure rate 1e-6: p-value of the one-sample KS test is uniform under H0.
    assert stats.kstest(big_sample, "norm").pvalue > 1e-6
    # ... and the same test has the power to see a 2% scale error at this n.
    assert stats.kstest(big_sample * 1.02, "norm").pvalue < 1e-6


def test_first_four_moments(big_sample):
    n = big_sample.size
    mean = big_sample.mean()
    var = big_sample.var()
    skew = stats.skew(big_sample)
    exkurt = stats.kurtosis(big_sample)  # excess kurtosis, 0 for a Gaussian
    # Standard errors under N(0,1): 1/√n, √(2/n), √(6/n), √(24/n). Tolerance 5 SE each:
    # two-sided false-failure rate 5.7e-7 per moment.
    assert abs(mean) < 5 / np.sqrt(n)
    assert abs(var - 1.0) < 5 * np.sqrt(2 / n)
    assert abs(skew) < 5 * np.sqrt(6 / n)
    assert abs(exkurt) < 5 * np.sqrt(24 / n)


@pytest.mark.parametrize("t", [1.0, 2.0, 3.0, 4.0, 5.0])
def test_tail_frequencies(big_sample, t):
    # Count of |z| > t is Binomial(n, q), q = 2(1 - Φ(t)). Accept the central
    # interval with exact binomial tails of 1e-6 each: false-failure rate ≤ 2e-6
    # per level. (At t = 5, n·q = 1.2: the test only catches gross excess.)
    n = big_sample.size
    q = 2 * stats.norm.sf(t)
    count = int(np.sum(np.abs(big_sample) > t))
    lo, hi = stats.binom.ppf(1e-6, n, q), stats.binom.isf(1e-6, n, q)
    assert lo <= count <= hi


def test_tail_frequencies_far_out():
    # 2**25 default samples (~0.6 s): P(|Z| > 5) = 5.7e-7 gives n·q = 19; exact binomial
    # central interval, false-failure rate ≤ 2e-6. Also every sample within R_max.
    n = 1 << 25
    z = np.asarray(jax.jit(lambda k: sampling.normal(k, (n,)))(jax.random.key(77)))
    q = 2 * stats.norm.sf(5.0)
    count = int(np.sum(np.abs(z) > 5.0))
    assert stats.binom.ppf(1e-6, n, q) <= count <= stats.binom.isf(1e-6, n, q)
    assert np.max(np.abs(z)) <= R_MAX * (1 + 1e-6)


@pytest.mark.parametrize("impl", ["fast", "tail", "icdf"])
def test_matches_reference_sampler_two_sample(impl):
    # vs jax.random.normal on different keys: two-sample KS, false-failure rate 1e-6.
    a = np.asarray(sampling.normal(jax.random.key(1), (1 << 19,), impl=impl))
    b = np.asarray(sampling.normal(jax.random.key(2), (1 << 19,), impl="jax"))
    assert stats.ks_2samp(a, b).pvalue > 1e-6


# ---------------------------------------------------------------- independence


def _client_noise(root, rnd, clients, dim):
    k = jax.random.fold_in(root, rnd)
    keys = jax.vmap(lambda c: jax.random.fold_in(k, c))(clients)
    return jax.vmap(lambda kk: sampling.normal(kk, (dim,)))(keys)


@pytest.fixture(scope="module")
def two_rounds():
    root = jax.random.key(99)
    clients = jnp.arange(256, dtype=jnp.uint32)
    f = jax.jit(_client_noise, static_argnums=(3,))
    z0 = np.asarray(f(root, 0, clients, 8192), np.float64)
    z1 = np.asarray(f(root, 1, clients, 8192), np.float64)
    return z0, z1


def _pair_correlations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = (a - a.mean(1, keepdims=True)) / a.std(1, keepdims=True)
    b = (b - b.mean(1, keepdims=True)) / b.std(1, keepdims=True)
    return np.mean(a * b, axis=1)


@pytest.mark.parametrize("pairing", ["adjacent clients", "consecutive rounds"])
def test_no_correlation_between_clients_or_rounds(two_rounds, pairing):
    z0, z1 = two_rounds
    a, b = (z0[:-1], z0[1:]) if pairing == "adjacent clients" else (z0, z1)
    d = a.shape[1]
    r = _pair_correlations(a, b)
    m = r.size
    # Under independence √d·r ≈ N(0,1) (d = 8192), so mean(d·r²) ≈ 1 with SE √(2/m):
    # 5 SE, false-failure rate 5.7e-7. The max over m pairs stays below 5.5
    # (Bonferroni: m·P(|N|>5.5) < 1e-5).
    assert abs(np.mean(d * r**2) - 1.0) < 5 * np.sqrt(2 / m)
    assert np.max(np.abs(np.sqrt(d) * r)) < 5.5


def test_sum_over_clients_has_variance_n(two_rounds):
    # Independent clients: Σ_c z_c ~ N(0, n) per coordinate (noise "cancellation" relies on it).
    # mean over d coordinates of (Σ z)²/n ≈ 1 with SE √(2/d); 5 SE, false-failure 5.7e-7.
    z0, _ = two_rounds
    n, d = z0.shape
    s = z0.sum(0)
    assert abs(np.mean(s**2) / n - 1.0) < 5 * np.sqrt(2 / d)


# ---------------------------------------------------------------- determinism / transforms


def test_same_key_same_noise_different_key_different_noise():
    k = jax.random.key(5)
    a = np.asarray(sampling.normal(k, (10_000,)))
    np.testing.assert_array_equal(a, np.asarray(sampling.normal(k, (10_000,))))
    b = np.asarray(sampling.normal(jax.random.fold_in(k, 1), (10_000,)))
    assert np.mean(a == b) < 1e-3


def test_raw_and_typed_keys_agree_and_prefix_property():
    a = sampling.normal(jax.random.PRNGKey(3), (6,))
    b = sampling.normal(jax.random.key(3), (6,))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    long = sampling.normal(jax.random.key(3), (2, 5))
    np.testing.assert_array_equal(np.asarray(long).ravel()[:6], np.asarray(a))


def test_jit_and_vmap():
    keys = jax.random.split(jax.random.key(11), 4)
    eager = np.stack([np.asarray(sampling.normal(k, (3, 7))) for k in keys])
    batched = np.asarray(jax.jit(jax.vmap(lambda k: sampling.normal(k, (3, 7))))(keys))
    # XLA may contract a*b+c into an FMA inside a fused kernel: 1-2 ulp differences.
    np.testing.assert_allclose(batched, eager, rtol=1e-6, atol=1e-7)


def test_noise_of_a_client_does_not_depend_on_its_chunk():
    root = jax.random.key(2024)
    f = jax.jit(_client_noise, static_argnums=(3,))
    chunk_a = np.asarray(f(root, 4, jnp.arange(0, 16, dtype=jnp.uint32), 1000))
    chunk_b = np.asarray(f(root, 4, jnp.arange(8, 40, dtype=jnp.uint32), 1000))
    alone = np.asarray(f(root, 4, jnp.arange(12, 13, dtype=jnp.uint32), 1000))
    np.testing.assert_array_equal(chunk_a[8:16], chunk_b[:8])
    np.testing.assert_allclose(alone[0], chunk_a[12], rtol=1e-6, atol=1e-7)


def test_icdf_impl_is_inverse_cdf_of_the_same_bits():
    k = jax.random.key(8)
    kd = jax.random.key_data(k)
    ctr = jnp.arange(12, dtype=jnp.uint32)
    b0, b1 = sampling.threefry2x32(kd[0], kd[1], jnp.full_like(ctr, sampling.TAG), ctr)
    np.testing.assert_allclose(
        np.asarray(sampling.normal(k, (4, 3), impl="icdf")).ravel(),
        np.asarray(sampling.normal_from_bits(b0, b1)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        np.asarray(sampling.normal(k, (4, 3))).ravel(),
        np.asarray(sampling.box_muller_from_bits(b0, b1)), rtol=1e-6, atol=1e-7)


def test_jax_impl_is_jax_random_normal():
    k = jax.random.key(8)
    np.testing.assert_array_equal(
        np.asarray(sampling.normal(k, (4, 3), impl="jax")),
        np.asarray(jax.random.normal(k, (4, 3))),
    )


def test_low_precision_dtype_is_rounded_float32():
    k = jax.random.key(9)
    z16 = sampling.normal(k, (100,), jnp.bfloat16)
    assert z16.dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        np.asarray(z16), np.asarray(sampling.normal(k, (100,)).astype(jnp.bfloat16))
    )


def test_normal_like_is_one_flat_draw_split_into_leaves():
    k = jax.random.key(10)
    tree = {"w": jnp.zeros((3, 4), jnp.bfloat16), "b": jnp.zeros((5,), jnp.int32), "s": jnp.zeros(())}
    noise = sampling.normal_like(k, tree)
    assert jax.tree_util.tree_structure(noise) == jax.tree_util.tree_structure(tree)
    assert noise["w"].dtype == jnp.bfloat16 and noise["b"].dtype == jnp.float32
    flat = np.asarray(sampling.normal(k, (18,)))
    leaves = jax.tree_util.tree_leaves(noise)  # dict order: b, s, w
    got = np.concatenate([np.asarray(x, np.float32).ravel() for x in leaves])
    np.testing.assert_allclose(got[:6], flat[:6])
    np.testing.assert_allclose(got[6:], flat[6:], rtol=1e-2)  # bfloat16 leaf
    ref = sampling.normal_like(k, tree, impl="jax", dtype=jnp.float32)
    assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(ref))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sampling.normal(jax.random.key(0), (3,), impl="ziggurat"), "impl"),
        (lambda: sampling.normal(jax.random.key(0), (3,), jnp.int32), "dtype"),
        (lambda: sampling.normal(jax.random.split(jax.random.key(0), 2), (3,)), "shape"),
        (lambda: sampling.normal(jax.random.key(0, impl="rbg"), (3,), impl="fast"),
         "threefry"),
        (lambda: sampling.normal(jax.random.key(0, impl="rbg"), (3,), impl="tail"),
         "threefry"),
        (lambda: sampling.sampler_model("ziggurat"), "impl"),
        (lambda: sampling.laplace_model("fast"), "impl"),
    ],
)
def test_bad_input_is_rejected(call, match):
    with pytest.raises(LdpsimError, match=match):
        call()


def test_rbg_key_works_with_reference_impl():
    z = sampling.normal(jax.random.key(0, impl="rbg"), (3,), impl="jax")
    assert z.shape == (3,)


def test_default_impl_follows_the_key_type():
    from ldpsim._src.privacy.noise import mechanisms

    assert sampling.resolve_impl(jax.random.key(0), None) == "tail"
    assert sampling.resolve_impl(jax.random.PRNGKey(0), None) == "tail"
    rbg = jax.random.key(0, impl="rbg")
    assert sampling.resolve_impl(rbg, None) == "jax"
    assert sampling.resolve_impl(rbg, "icdf") == "icdf"   # explicit wins (and then fails)
    # With a non-threefry key (jax_default_prng_impl="rbg") the default is jax.random.normal:
    # the engine's noise keeps working, bit for bit the reference draw.
    tree = {"w": jnp.zeros((4, 3)), "b": jnp.zeros(3)}
    np.testing.assert_array_equal(
        np.asarray(mechanisms.gaussian_noise(rbg, tree, 2.0)["w"]),
        np.asarray(mechanisms.gaussian_noise(rbg, tree, 2.0, impl="jax")["w"]))
    # With the default threefry key the default is the fast sampler.
    k = jax.random.key(1)
    np.testing.assert_array_equal(np.asarray(sampling.normal(k, (5,))),
                                  np.asarray(sampling.normal(k, (5,), impl="fast")))


# ---------------------------------------------------------------- "tail": 96-bit radius uniform

R_TAIL = float(np.sqrt(194.0 * np.log(2.0)))  # √(-2 ln 2**-97), 11.5961


def _u32(rng, n):
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


def _bits_f32(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def test_tail_is_fast_bit_for_bit_when_b0_at_least_256():
    # The refinement only touches b0 < 2**8; elsewhere the float32 result must be identical
    # (same bits, not just close), whatever the extra words are.
    rng = np.random.default_rng(3)
    n = 1 << 20
    b0 = rng.integers(256, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b0[: n // 4] = rng.integers(256, 2**16, n // 4).astype(np.uint32)  # tail-heavy, R up to 5.8
    b0[:8] = [256, 257, 511, 2**24, 2**31, 2**32 - 257, 2**32 - 256, 2**32 - 1]
    b1, b2, b3 = _u32(rng, n), _u32(rng, n), _u32(rng, n)
    b2[:4], b3[:4] = 0, 0
    fast = jax.jit(sampling.box_muller_from_bits)(b0, b1)
    tail = jax.jit(sampling.tail_box_muller_from_bits)(b0, b1, b2, b3)
    np.testing.assert_array_equal(_bits_f32(tail), _bits_f32(fast))


def test_tail_draw_differs_from_fast_exactly_where_b0_is_below_256():
    # Through the real kernel under jit(vmap): 16 clients x 2**18 coordinates (one coordinate
    # in 2**24 has b0 < 256: expect 0.25; this key has 2). Equal bit for bit everywhere else.
    keys = jax.vmap(lambda c: jax.random.fold_in(jax.random.key(9), c))(jnp.arange(16))
    d = 1 << 18
    def draw(impl):
        return jax.jit(jax.vmap(lambda k: sampling.normal(k, (d,), impl=impl)))(keys)

    fast, tail = _bits_f32(draw("fast")), _bits_f32(draw("tail"))

    def first_word(k):
        kd = jax.random.key_data(k)
        ctr = jnp.arange(d, dtype=jnp.uint32)
        return sampling.threefry2x32(kd[0], kd[1], jnp.full_like(ctr, sampling.TAG), ctr)[0]

    small = np.asarray(jax.jit(jax.vmap(first_word))(keys)) < sampling.TAIL_SPLIT
    assert small.sum() == 2  # this key has two refined coordinates
    np.testing.assert_array_equal(fast != tail, small)


def _tail_f64(b0, b1, b2, b3):
    u = (b0.astype(np.float64) + b2 * 2.0**-32 + (b3 + 0.5) * 2.0**-64) * 2.0**-32
    v = (b1.astype(np.float64) + 0.5) * 2.0**-32
    r = np.sqrt(-2.0 * np.log(u))
    return r * np.cos(2.0 * np.pi * v), r, u


def test_tail_matches_float64_on_extreme_and_random_patterns():
    # b0 < 256 (the refined branch): every combination of extreme words, plus random blocks
    # with b0 = 0 / b2 = 0 / tiny b3 over-represented. float64 evaluates the same formula
    # on the same 96 bits (relative rounding 1e-16, a reference here).
    e0 = np.array([0, 1, 2, 127, 128, 254, 255], np.uint32)
    e1 = np.array([0, 1, 2**30 - 1, 2**30, 2**31, 3 * 2**30, 2**32 - 1], np.uint32)
    e2 = np.array([0, 1, 2**31, 2**32 - 1], np.uint32)
    e3 = np.array([0, 1, 2, 2**31, 2**32 - 1], np.uint32)
    grid = [g.ravel() for g in np.meshgrid(e0, e1, e2, e3, indexing="ij")]
    rng = np.random.default_rng(4)
    n = 1 << 19
    b0 = rng.integers(0, 256, n).astype(np.uint32)
    b0[: n // 3] = 0
    b1, b2, b3 = _u32(rng, n), _u32(rng, n), _u32(rng, n)
    b2[: n // 4] = 0
    b3[: n // 8] = rng.integers(0, 4, n // 8).astype(np.uint32)
    b0, b1, b2, b3 = (np.concatenate([g, r]) for g, r in zip(grid, (b0, b1, b2, b3)))
    z = np.asarray(jax.jit(sampling.tail_box_muller_from_bits)(b0, b1, b2, b3), np.float64)
    exact, r, u = _tail_f64(b0, b1, b2, b3)
    # Same documented bound as "fast" (measured max 1.35e-7·(1 + R)); here R ∈ [5.77, 11.6].
    assert np.all(np.abs(z - exact) <= 2e-7 * (1.0 + r))
    # ln U itself (b1 = 0 gives cos = 1 - 7e-19, so z = R): relative error of -2 ln U = R²
    # well below 1e-7 (float32's own rounding of R is 6e-8 relative).
    at0 = b1 == 0
    np.testing.assert_allclose(z[at0] ** 2, -2.0 * np.log(u[at0]), rtol=3e-7)


def test_tail_reach_is_its_model_bound():
    # The smallest U, b0 = b2 = b3 = 0, is 2**-97: with the angle at 0 / π it gives ±R_TAIL.
    zero = jnp.zeros(3, jnp.uint32)
    z = np.asarray(jax.jit(sampling.tail_box_muller_from_bits)(
        zero, jnp.array([0, 2**31, 0], jnp.uint32), zero, jnp.array([0, 0, 1], jnp.uint32)),
        np.float64)
    z, z1 = z[:2], z[2]
    model = sampling.sampler_model("tail")
    assert model.kind == "disk" and model.coordinate_tail_mass == 2.0**-97
    assert model.bound == pytest.approx(R_TAIL, rel=1e-15)
    np.testing.assert_allclose(z, [model.bound, -model.bound], rtol=6e-8)
    assert np.all(np.abs(z) <= sampling.TAIL_BOUND["tail"])
    # The next value of U, 1.5·2**-96, is already inside: the reach is attained only there.
    assert z1 == pytest.approx(np.sqrt(-2.0 * np.log(1.5 * 2.0**-96)), rel=6e-8) and z1 < z[0]


@pytest.mark.parametrize("m, b0_max, b2_zero", [(24, 256, False), (32, 1, False), (64, 1, True)])
def test_tail_radius_law_beyond_the_fast_reach(m, b0_max, b2_zero):
    # Conditioned on U < 2**-m (b0 < 256: m = 24; b0 = 0: m = 32; b0 = b2 = 0: m = 64), an
    # exact Box–Muller radius has R² - 2m ln 2 ~ Exponential(mean 2) (memorylessness), cut
    # at R² = 194 ln 2 (mass 2**-(97-m) beyond: invisible). KS against scipy's exponential
    # on 2**18 draws, angle fixed at 0 (z = R): false-failure rate 1e-6 (KS p-value uniform).
    rng = np.random.default_rng(m)
    n = 1 << 18
    b0 = rng.integers(0, b0_max, n).astype(np.uint32)
    b2 = np.zeros(n, np.uint32) if b2_zero else _u32(rng, n)
    z = np.asarray(jax.jit(sampling.tail_box_muller_from_bits)(
        b0, np.zeros(n, np.uint32), b2, _u32(rng, n)), np.float64)
    excess = z**2 - 2 * m * np.log(2.0)
    assert stats.kstest(excess, stats.expon(scale=2.0).cdf).pvalue > 1e-6
    assert np.max(z) <= sampling.TAIL_BOUND["tail"]


@pytest.mark.parametrize("t", [6.0, 6.5, 7.0])
def test_tail_frequencies_beyond_the_fast_reach(t):
    # Given b0 < 256 (U < 2**-24, R > 5.768) and a uniform angle, |z| > t ≥ 5.768 forces
    # R > t, so P(|z| > t | b0 < 256) = 2**24 · 2Φ(-t) exactly for the ideal law, while "fast"
    # never exceeds 6.764. 2**20 conditional draws; exact binomial central interval with tails
    # 1e-6 each: false-failure rate ≤ 2e-6 per level (n·q = 34,700 / 1,400 / 45).
    rng = np.random.default_rng(int(10 * t))
    n = 1 << 20
    b0 = rng.integers(0, 256, n).astype(np.uint32)
    z = np.asarray(jax.jit(sampling.tail_box_muller_from_bits)(
        b0, _u32(rng, n), _u32(rng, n), _u32(rng, n)), np.float64)
    q = 2.0**24 * 2 * stats.norm.sf(t)
    count = int(np.sum(np.abs(z) > t))
    assert stats.binom.ppf(1e-6, n, q) <= count <= stats.binom.isf(1e-6, n, q)


def test_tail_jit_vmap_determinism_and_leaf_offsets():
    keys = jax.random.split(jax.random.key(12), 4)
    eager = np.stack([np.asarray(sampling.normal(k, (3, 7), impl="tail")) for k in keys])
    batched = np.asarray(jax.jit(jax.vmap(lambda k: sampling.normal(k, (3, 7), impl="tail")))(keys))
    np.testing.assert_allclose(batched, eager, rtol=1e-6, atol=1e-7)  # FMA contraction: 1-2 ulp
    k = jax.random.key(13)
    np.testing.assert_array_equal(np.asarray(sampling.normal(k, (3, 7), impl="tail")),
                                  np.asarray(sampling.normal(k, (3, 7), impl="tail")))
    # normal_like: leaves take consecutive counter blocks of both Threefry streams, so the
    # tree is the flat draw cut into leaves (the same contract as "fast").
    tree = {"a": jnp.zeros((5, 3)), "b": jnp.zeros((7,)), "c": jnp.zeros(())}
    noise = jax.jit(lambda kk: sampling.normal_like(kk, tree, impl="tail"))(k)
    flat = np.asarray(jax.jit(lambda kk: sampling.normal(kk, (23,), impl="tail"))(k))
    got = np.concatenate([np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(noise)])
    np.testing.assert_allclose(got, flat, rtol=1e-6, atol=1e-7)


def test_tail_second_block_uses_its_own_counter():
    # b2, b3 come from Threefry at counter (TAIL_TAG, j): forcing b0 < 256 in a hand-built
    # block and feeding the key's real second block reproduces the kernel's formula.
    assert sampling.TAIL_TAG != sampling.TAG and sampling.TAIL_TAG != sampling.LAPLACE_TAG
    assert min(sampling.TAG, sampling.TAIL_TAG, sampling.LAPLACE_TAG) > 2**30  # JAX's bits never
    k = jax.random.key(8)
    kd = jax.random.key_data(k)
    ctr = jnp.arange(12, dtype=jnp.uint32)
    b0, b1 = sampling.threefry2x32(kd[0], kd[1], jnp.full_like(ctr, sampling.TAG), ctr)
    b2, b3 = sampling.threefry2x32(kd[0], kd[1], jnp.full_like(ctr, sampling.TAIL_TAG), ctr)
    np.testing.assert_allclose(
        np.asarray(sampling.normal(k, (4, 3), impl="tail")).ravel(),
        np.asarray(sampling.tail_box_muller_from_bits(b0, b1, b2, b3)), rtol=1e-6, atol=1e-7)
    low = jnp.full_like(b0, 17)  # b0 < 256: the refined branch, reads b2, b3
    refined = np.asarray(sampling.tail_box_muller_from_bits(low, b1, b2, b3), np.float64)
    exact, _, _ = _tail_f64(np.asarray(low), np.asarray(b1), np.asarray(b2), np.asarray(b3))
    np.testing.assert_allclose(refined, exact, atol=3e-6)


# ---------------------------------------------------------------- the models of every sampler


def test_sampler_models_are_the_reach_of_the_bits():
    # Independent values: mpmath at 40 digits when installed, scipy otherwise.
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    probit_up = lambda p: float(-mp.sqrt(2) * mp.erfinv(2 * mp.mpf(p) - 1))  # noqa: E731
    ln2 = mp.log(2)
    fast, tail, icdf, jx = (sampling.sampler_model(i) for i in ("fast", "tail", "icdf", "jax"))
    assert fast[1:] == ("disk", pytest.approx(float(mp.sqrt(66 * ln2)), rel=1e-15), 2.0**-33)
    assert tail[1:] == ("disk", pytest.approx(float(mp.sqrt(194 * ln2)), rel=1e-15), 2.0**-97)
    assert icdf[1:] == ("cube", pytest.approx(probit_up(mp.mpf(2) ** -64), rel=1e-15), 2.0**-63)
    assert jx[1:] == ("cube", pytest.approx(probit_up(3 * mp.mpf(2) ** -25), rel=1e-15),
                  3 * 2.0**-24)
    # Disk: the mass outside is e^{-R²/2} = U_min; cube: P(|Z| > T) (scipy, independent).
    for m in (fast, tail):
        assert np.exp(-m.bound**2 / 2) == pytest.approx(m.coordinate_tail_mass, rel=1e-12)
    for m in (icdf, jx):
        assert 2 * stats.norm.sf(m.bound) == pytest.approx(m.coordinate_tail_mass, rel=1e-9)
    # The float32 extremes of the Threefry samplers: their smallest uniform, angle 0 / sign 0.
    zero = jnp.uint32(0)
    assert float(sampling.box_muller_from_bits(zero, zero)) == pytest.approx(fast.bound, rel=2e-7)
    assert float(sampling.normal_from_bits(zero, zero)) == pytest.approx(icdf.bound, rel=4e-7)
    for impl in IMPL_MODELS:
        assert sampling.sampler_model(impl).bound < sampling.TAIL_BOUND[impl] + 1e-6


IMPL_MODELS = ("fast", "tail", "icdf", "jax")


def _enumerate_jax_sampler(monkeypatch, draw):
    """JAX's own compiled sampler on every value of the 23 mantissa bits its uniform uses
    (``bits >> 9``): ``_random_bits`` is replaced by the enumeration, passed as a traced
    argument so that XLA compiles the real kernel instead of constant-folding it."""
    core = pytest.importorskip("jax._src.random.core")
    if not hasattr(core, "_random_bits"):
        pytest.skip("this JAX has no jax._src.random.core._random_bits")
    n = 1 << 23
    bits = (np.arange(n, dtype=np.uint32) << np.uint32(9)) | np.uint32(0x1FF)
    box = {}
    monkeypatch.setattr(core, "_random_bits", lambda key, width, shape: box["b"].reshape(shape))

    def f(b):
        box["b"] = b
        return draw(jax.random.key(0), (n,))

    return np.asarray(jax.jit(f)(jnp.asarray(bits)), np.float64)


def test_jax_normal_range_by_exhaustive_enumeration(monkeypatch):
    # jax.random.normal (float32) is monotone in its 2**23-point uniform; its range is
    # [Φ⁻¹(2**-25), Φ⁻¹(1 - 3·2**-25)] = [-5.41998, 5.22011] (u from -1 + 2**-24 to
    # 1 - 3·2**-24): the positive side stops short of TAIL_BOUND["jax"].
    z = _enumerate_jax_sampler(monkeypatch, jax.random.normal)
    assert np.all(np.diff(z) >= 0)
    assert -z.min() == sampling.TAIL_BOUND["jax"]
    assert -z.min() == pytest.approx(-special.ndtri(2.0**-25), rel=2e-7)
    assert z.max() == pytest.approx(sampling.sampler_model("jax").bound, rel=2e-7)


def test_jax_laplace_range_by_exhaustive_enumeration(monkeypatch):
    x = _enumerate_jax_sampler(monkeypatch, jax.random.laplace)
    assert x.max() == sampling.LAPLACE_TAIL_BOUND == sampling.LAPLACE_TAIL_BOUNDS["jax"]
    assert x.max() == pytest.approx(24 * np.log(2.0), rel=1e-7)
    assert -x.min() == pytest.approx(sampling.laplace_model("jax").bound, rel=1e-7)
    assert -x.min() == pytest.approx(24 * np.log(2.0) - np.log(3.0), rel=1e-7)


# --- random_bits: jax.random.bits, bit for bit, from the unrolled Threefry ------------------

@pytest.mark.parametrize("shape", [(), (0,), (1,), (5,), (3, 7), (2, 3, 4), (65_536,)])
def test_random_bits_is_jax_random_bits(shape):
    for seed in (0, 1, 2**31 + 5):
        key = jax.random.fold_in(jax.random.key(seed), 11)
        want = jax.random.bits(key, shape, jnp.uint32)
        got = sampling.random_bits(key, shape)
        assert got.dtype == jnp.uint32 and got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_random_bits_under_jit_and_vmap_and_with_raw_keys():
    keys = jax.random.split(jax.random.key(3), 16)
    want = jax.jit(jax.vmap(lambda k: jax.random.bits(k, (1_000,), jnp.uint32)))(keys)
    got = jax.jit(jax.vmap(lambda k: sampling.random_bits(k, (1_000,))))(keys)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    raw = jax.random.PRNGKey(7)                       # legacy uint32[2] key
    np.testing.assert_array_equal(np.asarray(sampling.random_bits(raw, (99,))),
                                  np.asarray(jax.random.bits(raw, (99,), jnp.uint32)))


def test_random_bits_falls_back_where_it_cannot_reproduce_jax():
    rbg = jax.random.key(0, impl="rbg")
    np.testing.assert_array_equal(np.asarray(sampling.random_bits(rbg, (64,))),
                                  np.asarray(jax.random.bits(rbg, (64,), jnp.uint32)))
    key = jax.random.key(4)
    with jax.threefry_partitionable(False):           # JAX's earlier stream
        want = jax.random.bits(key, (257,), jnp.uint32)
        got = sampling.random_bits(key, (257,))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
