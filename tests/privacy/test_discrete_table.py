"""The table sampler of the integer noise (ldpsim._src.privacy.discrete.table, .samplers
.table_sample) against independent computations of N_Z(0, σ²) and Sk(μ).

Exact checks: the alias table's law equals the table's integer masses; the lookup returns the
right value at every threshold boundary; the proven TV bound holds against the exact law
computed by mpmath (50 digits, by a different formula). Statistical checks use fixed keys; the
false-failure rate of each (were the key random) is stated beside it."""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import special, stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.discrete import samplers as S
from ldpsim._src.privacy.discrete import table as T
from ldpsim._src.privacy.discrete.spec import discrete_gaussian_spec

ONE = 1 << 128


def _from_words(rows) -> list:
    return [int(sum(int(w) << (32 * (3 - j)) for j, w in enumerate(r))) for r in rows]


def _exact_pmf(law, param, xs, dps=50):
    """The ideal law at ``xs`` with mpmath: DDG by direct exponentials normalised over
    ``|x| ≤ 60σ + 60`` (the rest is below 1e-700); Skellam by ``e^{−μ} I_k(μ)``
    (mpmath.besseli)."""
    with mpmath.workdps(dps):
        if law == "ddg":
            s2 = mpmath.mpf(param) ** 2
            w = int(60 * param + 60)
            z = mpmath.fsum(mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s2)) for x in range(-w, w + 1))
            return [mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s2)) / z for x in xs]
        mu = mpmath.mpf(param)
        return [mpmath.exp(-mu) * mpmath.besseli(abs(x), mu) for x in xs]


@pytest.mark.parametrize("law,param", [("ddg", 0.5), ("ddg", 1.0), ("ddg", 3.8),
                                       ("skellam", 1.0), ("skellam", 15.0)])
def test_tv_bound_is_a_real_bound_against_the_exact_law(law, param):
    """TV(table law, ideal law) computed exactly (the table's masses are exact integers; the
    ideal law to 50 digits by mpmath, a different formula from the table's recurrences) is
    below the plan's proven bound; and the masses agree with the ideal pmf to ~1e-30."""
    tb = T.noise_table(law, param)
    half = tb.half
    xs = list(range(-half, half + 1))
    with mpmath.workdps(50):
        p = _exact_pmf(law, param, xs)
        q = [mpmath.mpf(m) / ONE for m in tb.masses]
        inside = mpmath.fsum(p)
        tv = (mpmath.fsum(abs(a - b) for a, b in zip(q, p)) + (1 - inside)) / 2
        assert tv <= tb.plan.tv_bound
        assert max(abs(a - b) for a, b in zip(q, p)) < 1e-29
    assert sum(tb.masses) == ONE and all(m >= 0 for m in tb.masses)


def test_skellam_pmf_against_scipy_ive():
    """Float64 reference ``ive(k, μ) = e^{−μ} I_k(μ)`` at μ = 1.5·10⁵ over ±6σ: relative
    agreement 1e-9 (scipy's own accuracy), and the exact mean 0 and variance μ (to 1e-25)."""
    mu = 1.5e5
    tb = T.noise_table("skellam", mu)
    half = tb.half
    k = np.arange(-int(6 * math.sqrt(mu)), int(6 * math.sqrt(mu)) + 1)
    ref = special.ive(np.abs(k), mu)
    got = np.array([tb.masses[int(i) + half] for i in k], dtype=float) / 2.0**128
    assert np.max(np.abs(got / ref - 1)) < 1e-9
    assert tb.mean == 0
    assert abs(tb.variance - Fraction(mu)) < Fraction(1, 10**25) * Fraction(mu)


def test_ddg_variance_against_mpmath():
    """The table's exact variance equals N_Z(0, σ²)'s (mpmath sum over |x| ≤ 60σ) to 1e-25."""
    for sigma in (0.5, 2.0, 280.0):
        tb = T.noise_table("ddg", sigma)
        with mpmath.workdps(40):
            s2 = mpmath.mpf(sigma) ** 2
            w = int(60 * sigma + 60)
            ws = [mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s2)) for x in range(0, w + 1)]
            z = ws[0] + 2 * mpmath.fsum(ws[1:])
            var = 2 * mpmath.fsum(x * x * ws[x] for x in range(1, w + 1)) / z
            assert abs(mpmath.mpf(tb.variance.numerator) / tb.variance.denominator - var) \
                <= 1e-25 * var
        assert tb.mean == 0


@pytest.mark.parametrize("law,param", [("ddg", 0.7), ("ddg", 3.8), ("ddg", 280.0),
                                       ("skellam", 2.0), ("skellam", 1.5e5)])
def test_alias_table_realises_the_masses_exactly(law, param):
    """Exact: rebuilding each value's probability from (threshold, alias) in integers gives the
    table's masses, and those are the differences of the stored CDF (F[L] = 2^128)."""
    tb = T.noise_table(law, param)
    half, k = tb.half, tb.plan.columns_log2
    cap = ONE >> k
    thr = _from_words(tb.threshold)
    got = {}
    for c, (t, a) in enumerate(zip(thr, tb.alias.tolist())):
        assert 0 <= t < cap
        got[c - half] = got.get(c - half, 0) + t
        got[a] = got.get(a, 0) + cap - t
    for x in range(-half, half + 1):
        assert got.pop(x, 0) == tb.masses[x + half]
    assert all(v == 0 for v in got.values())          # padding columns carry no mass
    cdf = _from_words(tb.cdf)
    cdf[-1] += ONE                                     # stored modulo 2^128
    assert [cdf[0]] + [b - a for a, b in zip(cdf, cdf[1:])] == list(tb.masses)


def test_lookup_is_exact_at_every_threshold_boundary():
    """Hand-made words: for every column c of a table and U's remainder V = T_c − 1, T_c,
    T_c + 1 (where in range), the lookup returns c − L below T_c and alias[c] from T_c on."""
    for law, param in (("ddg", 3.8), ("skellam", 15.0)):
        tb = T.noise_table(law, param)
        half, k = tb.half, tb.plan.columns_log2
        cap = ONE >> k
        thr = _from_words(tb.threshold)
        us, want = [], []
        for c, t in enumerate(thr):
            for v in (t - 1, t, t + 1):
                if 0 <= v < cap:
                    us.append(c * cap + v)
                    want.append(c - half if v < t else int(tb.alias[c]))
        words = [jnp.asarray(np.array([(u >> (32 * (3 - j))) & 0xFFFFFFFF for u in us],
                                      np.uint32)) for j in range(4)]
        got = S.table_lookup(words, jnp.asarray(tb.threshold), jnp.asarray(tb.alias), k, half)
        assert np.array_equal(np.asarray(got), np.array(want))


def test_less128_is_the_128_bit_order():
    """The 128-bit comparison against Python integers: every pair over an alphabet of
    edge words (0, 1, 2, 2^31 - 1, 2^31, 2^32 - 2, 2^32 - 1; equal prefixes included) and
    random pairs."""
    rng = np.random.default_rng(0)
    edge = np.array([0, 1, 2, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1], np.uint64)
    grid = np.stack(np.meshgrid(*[np.arange(len(edge))] * 4, indexing="ij"), -1).reshape(-1, 4)
    pairs = rng.integers(0, len(grid), (50_000, 2))
    a = np.concatenate([edge[grid[pairs[:, 0]]], edge[grid], rng.integers(0, 2**32, (20_000, 4),
                                                                           dtype=np.uint64)])
    b = np.concatenate([edge[grid[pairs[:, 1]]], edge[grid], rng.integers(0, 2**32, (20_000, 4),
                                                                           dtype=np.uint64)])
    got = np.asarray(S._less128(tuple(jnp.asarray(a[:, j].astype(np.uint32)) for j in range(4)),
                                tuple(jnp.asarray(b[:, j].astype(np.uint32)) for j in range(4))))

    def value(row):
        return sum(int(w) << (32 * (3 - j)) for j, w in enumerate(row))

    want = np.array([value(x) < value(y) for x, y in zip(a, b)])
    assert 0.3 < want.mean() < 0.7
    assert np.array_equal(got, want)


def _chisquare_p(x, pmf):
    """Chi-square p-value of integer draws ``x`` against ``pmf`` (values with expected count
    < 5 pooled into the two tails)."""
    n = len(x)
    lo, hi = int(x.min()), int(x.max())
    grid = np.arange(lo, hi + 1)
    p = pmf(grid)
    keep = n * p >= 5
    first, last = grid[keep][0], grid[keep][-1]
    counts = np.bincount(x - lo, minlength=hi - lo + 1)
    obs = np.concatenate([[counts[: first - lo].sum()], counts[first - lo: last - lo + 1],
                          [counts[last - lo + 1:].sum()]]).astype(float)
    pin = p[keep]
    ex = np.concatenate([[(1 - pin.sum()) / 2], pin, [(1 - pin.sum()) / 2]]) * n
    ok = ex > 0
    stat = np.sum((obs[ok] - ex[ok]) ** 2 / ex[ok])
    return float(stats.chi2.sf(stat, ok.sum() - 1))


def _ddg_pmf(sigma):
    w = int(40 * sigma + 40)
    g = np.arange(-w, w + 1)
    z = np.exp(-g.astype(float) ** 2 / (2 * sigma * sigma)).sum()
    return lambda x: np.exp(-x.astype(float) ** 2 / (2 * sigma * sigma)) / z


@pytest.mark.parametrize("law,param", [("ddg", 0.6), ("ddg", 1.0), ("ddg", 50.0),
                                       ("ddg", 1500.0), ("skellam", 1.0), ("skellam", 15.0),
                                       ("skellam", 1.5e5)])
def test_device_draws_fit_the_law(law, param):
    """Chi-square at 2·10⁵ draws against the ideal pmf (numpy exponentials / scipy's Skellam);
    false-failure rate 1e-4 per case (p > 1e-4)."""
    x = np.asarray(S.table_noise(jax.random.key(int(param * 10) + 7), law, param, (200_000,)))
    pmf = _ddg_pmf(param) if law == "ddg" else (
        lambda g: stats.skellam.pmf(g, param / 2, param / 2))
    assert _chisquare_p(x, pmf) > 1e-4


@pytest.mark.slow   # ~7 s: compiles the rejection sampler
def test_table_agrees_with_the_reference_rejection_sampler():
    """Two-sample chi-square, table vs the Canonne–Kamath–Steinke sampler at σ = 3.8 (its σ̂² is
    σ² to 1e-6 relative), 2·10⁵ draws each; false-failure rate 1e-4."""
    n = 200_000
    a = np.asarray(S.table_noise(jax.random.key(1), "ddg", 3.8, (n,)))
    b = np.asarray(S.discrete_gaussian(jax.random.key(2), discrete_gaussian_spec(3.8), (n,)))
    edges = np.arange(-12, 14) - 0.5
    ca, _ = np.histogram(np.clip(a, -12, 12), edges)
    cb, _ = np.histogram(np.clip(b, -12, 12), edges)
    assert stats.chi2_contingency(np.stack([ca, cb]))[1] > 1e-4


def test_keyed_by_position_chunking_and_vmap_invariance():
    """Exact: coordinate i depends only on (key, i): a shorter draw is a prefix of a longer one,
    a (2, n) draw is the (2n,) draw reshaped, and vmap over keys equals per-key calls."""
    tb = T.noise_table("skellam", 15.0)
    key = jax.random.key(5)
    long = np.asarray(S.table_sample(key, tb, (4096,)))
    assert np.array_equal(np.asarray(S.table_sample(key, tb, (1000,))), long[:1000])
    assert np.array_equal(np.asarray(S.table_sample(key, tb, (2, 2048))).ravel(), long)
    keys = jax.random.split(jax.random.key(6), 3)
    batch = np.asarray(jax.jit(jax.vmap(lambda k: S.table_sample(k, tb, (1000,))))(keys))
    for i in range(3):
        assert np.array_equal(batch[i], np.asarray(S.table_sample(keys[i], tb, (1000,))))


def test_lenet5_size_draw():
    """D = 65,536 (LeNet-5's d = 61,706 padded), 4 clients vmapped, σ = 280: runs, and each
    client's sample variance is within 5 standard errors of the table's exact variance
    (false-failure rate < 1e-5 per client)."""
    tb = T.noise_table("ddg", 280.0)
    keys = jax.random.split(jax.random.key(9), 4)
    z = np.asarray(jax.jit(jax.vmap(lambda k: S.table_sample(k, tb, (65_536,))))(keys), float)
    assert z.shape == (4, 65_536)
    var = float(tb.variance)
    se = var * math.sqrt(2 / 65_536)
    assert np.all(np.abs(z.var(axis=1) - var) < 5 * se)
    assert not np.array_equal(z[0], z[1])


def test_large_parameters_use_pieces():
    """Beyond 2^18 atoms the law is a sum of pieces: DDG σ = 2·10⁴ draws `pieces` pieces of
    σ² / pieces (the accountant counts n·pieces summands), Skellam μ = 10^9 sums Sk(μ/pieces)."""
    plan = T.table_plan("ddg", 2e4)
    assert plan.pieces > 1 and plan.atoms <= T.MAX_ATOMS
    assert plan.piece == pytest.approx(2e4 / math.sqrt(plan.pieces), rel=1e-15)
    assert plan.summands(10) == 10 * plan.pieces
    splan = T.table_plan("skellam", 1e9)
    assert splan.pieces > 1 and splan.atoms <= T.MAX_ATOMS
    assert splan.piece * splan.pieces == pytest.approx(1e9, rel=1e-15)
    with pytest.raises(LdpsimError):
        T.table_plan("ddg", -1.0)
    with pytest.raises(LdpsimError):
        T.table_plan("laplace", 1.0)


@pytest.mark.slow   # ~6 s: builds a 2^18-atom table
def test_pieces_sum_has_the_variance():
    """Skellam μ = 10^9 as a sum of pieces: the draws' variance is μ within 5 standard errors
    (2·10⁴ draws; false-failure rate < 1e-6)."""
    x = np.asarray(S.table_noise(jax.random.key(3), "skellam", 1e9, (20_000,)), float)
    assert abs(x.var() - 1e9) < 5 * 1e9 * math.sqrt(2 / 20_000)


def test_plan_bounds_and_window():
    """The window reaches a tail below 2^-100 and no further than needed, at the planned sizes;
    the TV bound per draw is below 1e-30 (so n·D·rounds·TV stays ≪ δ)."""
    for law, param in (("ddg", 1.0), ("ddg", 1500.0), ("skellam", 15.0), ("skellam", 1.5e6)):
        plan = T.table_plan(law, param)
        assert T._tail(law, plan.piece, plan.half) < 2.0**-100
        assert T._tail(law, plan.piece, plan.half - 1) >= 2.0**-100
        assert plan.tv_bound < 1e-30


def test_mechanism_variance_is_the_tables():
    """DiscreteMechanism.client_variance (used for the MSE and the diagnostics) equals the
    table's exact variance to float64 precision, including σ < 1 where N_Z(0, σ²)'s variance is
    well below σ² (0.215 at σ = 1/2); noise_proxy is σ² (the sub-Gaussian parameter)."""
    from ldpsim._src.privacy.discrete.accounting import DiscreteMechanism

    for mech, param in (("ddg", 0.5), ("ddg", 0.6734), ("ddg", 3.8), ("ddg", 9.0),
                        ("ddg", 280.0), ("skellam", 15.0), ("skellam", 1.5e5)):
        m = DiscreteMechanism(mech, 1.0, 0.01, param, 10, 1000)
        exact = T.noise_table(mech, param).total_variance
        assert m.client_variance == pytest.approx(exact, rel=1e-14)
        assert m.noise_proxy == pytest.approx(param * param if mech == "ddg" else param,
                                              rel=1e-15)
    assert DiscreteMechanism("ddg", 1.0, 0.01, 0.5, 10, 1000).client_variance < 0.22


def test_encode_adds_the_table_noise():
    """Exact: the discrete mode's encoding adds table_sample's draw under the client's noise
    key (both mechanisms); the reference samplers stay reachable."""
    from ldpsim._src.privacy.discrete import pipeline
    from ldpsim._src.privacy.discrete.accounting import DiscreteMechanism
    from ldpsim._src.privacy.discrete.modular import wrap

    x = jax.random.normal(jax.random.key(0), (1000,)) * 0.01
    for kind, noise in (("ddg", 3.8), ("skellam", 15.0)):
        mech = DiscreteMechanism(kind, 1.0, 0.01, noise, 10, 1000, bits=20)
        x = jnp.pad(x[:1000], (0, mech.padded_dim - 1000))
        rk, ck = jax.random.key(1), jax.random.key(2)
        rep, v, ok = pipeline.encode(rk, ck, x, mech)
        z = S.table_sample(jax.random.split(ck)[1], T.noise_table(kind, noise), (1024,))
        assert bool(ok) and np.array_equal(np.asarray(rep), np.asarray(wrap(v + z, 20)))
    with pytest.raises(ValueError):
        pipeline.encode(rk, ck, x, mech, sampler="cks")


@pytest.mark.slow   # compiles the reference samplers inside the encoding (~10-20 s)
def test_encode_reference_samplers_stay_reachable():
    """encode(..., sampler="reference") runs the rejection sampler (DDG) and the Poisson
    differences (Skellam): same rounded vector, different noise, same noise scale (the sample
    variance of the reference noise within 5 standard errors of σ̂² / μ; false-failure rate
    < 1e-6)."""
    from ldpsim._src.privacy.discrete import pipeline
    from ldpsim._src.privacy.discrete.accounting import DiscreteMechanism
    from ldpsim._src.privacy.discrete.modular import wrap

    for kind, noise in (("ddg", 3.8), ("skellam", 15.0)):
        mech = DiscreteMechanism(kind, 1.0, 0.01, noise, 10, 60_000, bits=20)
        x = jnp.zeros((mech.padded_dim,))
        rk, ck = jax.random.key(1), jax.random.key(2)
        rep, v, _ = pipeline.encode(rk, ck, x, mech)
        ref, v2, _ = pipeline.encode(rk, ck, x, mech, sampler="reference")
        assert np.array_equal(np.asarray(v), np.asarray(v2))
        assert not np.array_equal(np.asarray(ref), np.asarray(rep))
        z = np.asarray(wrap(ref - v2, 20), float)
        var = discrete_gaussian_spec(noise).variance if kind == "ddg" else noise
        assert abs(z.var() - var) < 5 * var * math.sqrt(2 / z.size)
