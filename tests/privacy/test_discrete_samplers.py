"""Integer noise samplers (ldpsim._src.privacy.discrete.samplers) against exact laws.

Every statistical check uses a fixed key; its tolerance is a p-value or z-score threshold whose
false-failure rate (were the key random) is stated beside it."""

import math

import jax
import numpy as np
import pytest
from scipy import special, stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.discrete import samplers as S
from ldpsim._src.privacy.discrete.spec import discrete_gaussian_spec


def _chisquare_p(samples, logpmf_fn, min_expected=5.0):
    """Chi-square p-value of integer samples against an exact pmf (tails pooled into two bins)."""
    n = len(samples)
    lo, hi = int(samples.min()) - 50, int(samples.max()) + 50
    grid = np.arange(lo, hi + 1)
    p = np.exp(logpmf_fn(grid))
    exp_counts = n * p
    keep = exp_counts >= min_expected
    first, last = grid[keep][0], grid[keep][-1]
    obs = [np.sum(samples < first)] + [np.sum(samples == g) for g in grid[keep]] + [np.sum(samples > last)]
    tail_lo = n * (np.exp(logpmf_fn(np.arange(first - 10_000, first))).sum())
    tail_hi = n * (np.exp(logpmf_fn(np.arange(last + 1, last + 10_001))).sum())
    ex = [tail_lo] + list(exp_counts[keep]) + [tail_hi]
    obs, ex = np.asarray(obs, float), np.asarray(ex, float)
    ex = ex * obs.sum() / ex.sum()
    stat = np.sum((obs - ex) ** 2 / np.maximum(ex, 1e-300))
    return float(stats.chi2.sf(stat, len(obs) - 1))


def test_uniform_below_is_uniform():
    for n in (7, 1000):
        x = np.asarray(S.uniform_below(jax.random.key(n), n, (70_000,)))
        assert x.min() >= 0 and x.max() < n
        counts = np.bincount(x, minlength=n)
        # false-failure rate 1e-4 per n
        assert stats.chisquare(counts).pvalue > 1e-4


def test_unit_coin_digit_reproduces_algorithm_1_exactly():
    """Exact enumeration: over the 5040 values of the digit, the first failing stage K of CKS
    Algorithm 1 with γ = 1 has P(K = k) = 1/(k−1)! − 1/k! for k ≤ 7, and the 'continue' event
    (all 7 stages passed) has probability 1/7!; the coin is K odd."""
    r = np.arange(S._FACT, dtype=np.uint32)
    coin, cont = (np.asarray(a) for a in S._unit_coin(jax.numpy.asarray(r)))
    passes = np.array([sum(int(x < f) for f in S._FT) for x in r])
    for k in range(1, 8):
        expect = S._FACT // math.factorial(k - 1) - S._FACT // math.factorial(k)
        assert np.sum(~cont & (passes + 1 == k)) == expect, k
        assert np.all(coin[~cont & (passes + 1 == k)] == (k % 2 == 1))
    assert cont.sum() == 1 and cont[0]


def test_digits_are_exactly_uniform_given_valid():
    """Exact enumeration on a reduced word space: with radices (6, 7) every pair of digits is hit
    by the same number of valid words (checked on all words below 42·1000 and the validity
    threshold computed for 2^32)."""
    w = jax.numpy.arange(42 * 1000, dtype=jax.numpy.uint32)
    (a, b), valid = S._digits(w, (6, 7))
    assert bool(np.all(np.asarray(valid)))                   # 2^32 mod 42 = 4: all these valid
    counts = np.zeros((6, 7), int)
    np.add.at(counts, (np.asarray(a), np.asarray(b)), 1)
    assert np.all(counts == 1000)
    top = jax.numpy.asarray([2**32 - 1, 2**32 - 4, 2**32 - 5], jax.numpy.uint32)
    assert np.asarray(S._digits(top, (6, 7))[1]).tolist() == [False, False, True]


@pytest.mark.parametrize("num,den", [(0, 1), (1, 1), (1, 3), (5, 7), (999, 1000),
                                     (2**30 + 7, 2**31 - 1)])
def test_bernoulli_exp_probability(num, den):
    n = 200_000
    b = np.asarray(jax.jit(lambda k: S.bernoulli_exp(k, num, den, (n,)))(jax.random.key(den + num)))
    p = math.exp(-num / den)
    if p == 1.0:
        assert b.all()
        return
    # two-sided binomial test, false-failure rate 1e-4
    assert stats.binomtest(int(b.sum()), n, p).pvalue > 1e-4


def test_spec_rounds_variance_up_and_bounds_truncation():
    for sigma in (0.5, 1.0, 3.3, 100.0, 5000.0, 11_000.0, 2e4, 3e5):
        spec = discrete_gaussian_spec(sigma)
        assert spec.variance >= sigma**2
        assert spec.variance <= sigma**2 * (1 + 1e-3) + 1e-3
        assert spec.tv_bound < 1e-28
        assert 2 * spec.q * spec.t * spec.p < 2**27
    assert discrete_gaussian_spec(2e4).pieces == 12
    with pytest.raises(LdpsimError):
        discrete_gaussian_spec(-1.0)


def _dg_logpmf_realised(spec):
    v = spec.variance

    def f(x):
        big = np.arange(-spec.z_limit - 200, spec.z_limit + 201)
        logz = special.logsumexp(-big.astype(float) ** 2 / (2 * v))
        return -np.asarray(x, float) ** 2 / (2 * v) - logz
    return f


@pytest.mark.slow
def test_discrete_gaussian_pmf_chi_square():
    """Exact pmf of N_Z(0, σ̂²) (σ̂² the realised variance) against 60,000 draws per σ;
    false-failure rate 1e-4 per σ."""
    shape = (60_000,)
    for i, sigma in enumerate((0.5, 1.0, 3.3, 40.0)):
        spec = discrete_gaussian_spec(sigma)
        x = np.asarray(S.discrete_gaussian(jax.random.key(100 + i), spec, shape))
        assert _chisquare_p(x, _dg_logpmf_realised(spec)) > 1e-4, sigma


def test_discrete_gaussian_continuation_path_alone_has_the_exact_law():
    """Every proposal finished by the continuation path (coins run to their end: the code that
    the ≈ 0.5 % of proposals take) gives the exact law too: 60,000 proposals at σ = 3.3 and
    σ = 40, accepted values against the exact pmf; false-failure rate 1e-4 per σ."""
    @jax.jit
    def run(key, prm):                                 # one compilation: the parameters traced
        st = S._bulk(key, prm, 0, jax.lax.iota(jax.numpy.uint32, 60_000))
        z, ok, _ = S._finish(st, prm, S._cont_key(key, 0, 0))
        return z, ok

    for i, sigma in enumerate((3.3, 40.0)):
        spec = discrete_gaussian_spec(sigma)
        z, ok = (np.asarray(a) for a in run(jax.random.key(300 + i), S._dg_params(spec)))
        assert 0.3 < ok.mean() < 0.6
        assert _chisquare_p(z[ok], _dg_logpmf_realised(spec)) > 1e-4, sigma


@pytest.mark.slow
def test_discrete_gaussian_keys_vmap_and_large_sigma():
    spec = discrete_gaussian_spec(3000.0)
    keys = jax.random.split(jax.random.key(5), 3)
    batch = jax.jit(jax.vmap(lambda k: S.discrete_gaussian(k, spec, (4096,))))(keys)
    one = S.discrete_gaussian(keys[1], spec, (4096,))
    np.testing.assert_array_equal(np.asarray(batch[1]), np.asarray(one))   # keyed per client only
    assert not np.array_equal(np.asarray(batch[0]), np.asarray(batch[1]))
    x = np.asarray(batch, float).ravel()
    n = x.size
    # mean: z-score < 5 (false failure 6e-7); variance ratio within 5 SE (normal kurtosis)
    assert abs(x.mean()) < 5 * math.sqrt(spec.variance / n)
    assert abs(x.var() / spec.variance - 1) < 5 * math.sqrt(2 / n)
    # pieces: σ = 2e4 is a sum of 12 exact discrete Gaussians
    spec2 = discrete_gaussian_spec(2e4)
    y = np.asarray(S.discrete_gaussian(jax.random.key(9), spec2, (20_000,)), float)
    assert abs(y.var() / spec2.variance - 1) < 5 * math.sqrt(2 / y.size)


@pytest.mark.parametrize("mu", [3.0, 2000.0, pytest.param(1e6, marks=pytest.mark.slow)])
def test_skellam_mean_and_variance(mu):
    n = 100_000
    x = np.asarray(jax.jit(lambda k: S.skellam(k, mu, (n,)))(jax.random.key(int(mu))), float)
    # z-scores below 5 (false failure 6e-7 each); Skellam kurtosis 3 + 1/μ
    assert abs(x.mean()) < 5 * math.sqrt(mu / n)
    assert abs(x.var() / mu - 1) < 5 * math.sqrt((2 + 1 / mu) / n)


@pytest.mark.parametrize("lam", [10.0, 1000.0, 2.0**16, 2.0**20])
def test_poisson_matches_the_exact_pmf_at_large_rates(lam):
    """The float32 PTRS sampler with the saddle-point acceptance test against scipy's exact
    Poisson pmf (chi-square on 200,000 draws; false failure 1e-4 per rate), and its variance
    (z < 5: false failure 6e-7). At 2^16-2^20 jax.random.poisson's lgamma-based test is
    biased by float32 cancellation (variance/λ off by 1-3 % at 10^6, more on some CPUs)."""
    n = 200_000
    x = np.asarray(jax.jit(lambda k: S.poisson(k, lam, (n,)))(jax.random.key(int(lam))))
    assert _chisquare_p(x, lambda g: stats.poisson.logpmf(g, lam)) > 1e-4
    assert abs(x.var() / lam - 1) < 5 * math.sqrt((2 + 1 / lam) / n)
    with pytest.raises(ValueError, match="outside"):
        S.poisson(jax.random.key(0), 5.0, (3,))


def test_skellam_pmf_chi_square():
    mu = 30.0
    x = np.asarray(S.skellam(jax.random.key(11), mu, (100_000,)))
    # false-failure rate 1e-4
    assert _chisquare_p(x, lambda g: stats.skellam.logpmf(g, mu / 2, mu / 2)) > 1e-4
