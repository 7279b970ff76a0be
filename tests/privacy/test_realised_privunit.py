"""What the float32 PrivUnitG and PrivUnit2 deliver: the samplers' ranges, their laws, and the
printed (ε', δ') against independent computations of the realised guarantee.

The model is that of :mod:`ldpsim._src.privacy.noise.realised`: each sampler's transform is exact
real maths on its uniforms, whose reach is kept (a 96-bit uniform ``(K + ½)/2⁹⁶`` reaches
``[2⁻⁹⁷, 1 − 2⁻⁹⁷]``; ``sampling.normal(impl="icdf")`` reaches ``|z| ≤ Φ̄⁻¹(2⁻⁶⁴)``). The
references here are mpmath (100 digits) and scipy, never ldpsim inverting itself.

Statistical checks use fixed keys with p-value > 1e-6 (KS) or 5-standard-error windows: a
correct implementation fails each with probability ≤ 1e-6; this file makes fewer than 20, so
the chance of a false failure for fresh keys is below 2e-5.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from privunit_coins import norm_coin, p_lower
from scipy import integrate, special, stats

from ldpsim._src.privacy.randomizers import mechanism, privunit2, privunitg, randomizer
from ldpsim._src.privacy.noise import sampling

mp = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp
mp.dps = 100

ONES = np.full(3, 0xFFFFFFFF, np.uint32)
ZEROS = np.zeros(3, np.uint32)


def _sf_inv(p) -> mpmath.mpf:
    """Φ̄⁻¹(p) to 100 digits (mpmath)."""
    p = mp.mpf(p)
    return mp.sqrt(2) * mp.erfinv(1 - 2 * p)


def _sf(x) -> mpmath.mpf:
    return mp.ncdf(-mp.mpf(x))


def _cdf(x) -> mpmath.mpf:
    return mp.ncdf(mp.mpf(x))


def _u96(words) -> Fraction:
    k = (int(words[0]) << 64) | (int(words[1]) << 32) | int(words[2])
    return (Fraction(k) + Fraction(1, 2)) / 2**96


@functools.lru_cache(maxsize=None)
def _g(eps, dim):
    return mechanism.make("privunitg", epsilon=eps, dim=dim)


@functools.lru_cache(maxsize=None)
def _alpha_fn():
    return jax.jit(privunitg.alpha_from_bits)


def _alpha(m, words, upper) -> float:
    return float(_alpha_fn()(jnp.asarray(words, jnp.uint32), jnp.bool_(upper), m.params))


# ------------------------------------------------------------------------- building blocks


def test_upper_quantile_is_accurate_far_into_the_tail():
    """Φ̄⁻¹ from log s in float32 against scipy's float64 ndtri, down to log s = −150
    (s = 7e-66, far below float32's range): relative error < 1e-6 (absolute < 4e-6)."""
    ls = np.concatenate([np.linspace(-150.0, math.log(0.5), 40_001),
                         np.log(np.linspace(0.3, 0.5, 2_001))]).astype(np.float32)
    x = np.asarray(jax.jit(privunit2.upper_quantile)(jnp.asarray(ls)), np.float64)
    ref = -special.ndtri(np.exp(ls.astype(np.float64)))
    assert np.all(np.abs(x - ref) <= 1e-6 * ref + 3e-7)
    assert np.abs(x - ref).max() < 4e-6


def test_96_bit_uniform_is_exact_at_both_ends_and_accurate_inside():
    logs = jax.jit(privunit2.uniform_logs)
    lu, lw = logs(jnp.asarray(ZEROS))
    assert float(lu) == pytest.approx(-97 * math.log(2), rel=1e-7)   # U = 2⁻⁹⁷
    assert float(lw) == 0.0                                          # 1 − 2⁻⁹⁷ rounds to 1
    lu, lw = logs(jnp.asarray(ONES))
    assert float(lu) == 0.0 and float(lw) == pytest.approx(-97 * math.log(2), rel=1e-7)
    rng = np.random.default_rng(0)
    words = rng.integers(0, 2**32, size=(2000, 3), dtype=np.uint64).astype(np.uint32)
    words[:500, 0] = 0                       # small U: the lower words matter
    words[:100, 1] = 0
    lu, lw = (np.asarray(a, np.float64) for a in jax.jit(jax.vmap(logs))(jnp.asarray(words)))
    for row, a, b in zip(words, lu, lw):
        u = _u96(row)
        # float32 logs: U (and 1 − U) to a few ulps, the log rounded to its own ulp
        assert a == pytest.approx(float(mp.log(mp.mpf(u.numerator) / u.denominator)),
                                  abs=3e-7, rel=1e-7)
        assert b == pytest.approx(float(mp.log(1 - mp.mpf(u.numerator) / u.denominator)),
                                  abs=3e-7, rel=1e-7)


@pytest.mark.parametrize("eps", [2.0, 30.0, 60.0])
def test_alpha_is_the_truncated_inverse_cdf_at_chosen_bit_patterns(eps):
    """α(U) against mpmath's exact truncated quantile at extreme and interior U, both regions:
    upper Φ̄⁻¹(Q·U), lower Φ⁻¹((1 − Q)·U), Q the float32 q the sampler uses."""
    m = _g(eps, 2)
    q = mp.mpf(float(m.params.q))
    pats = [ZEROS, np.array([0, 0, 1 << 20], np.uint32), np.array([0, 1, 0], np.uint32),
            np.array([1 << 10, 0, 0], np.uint32), np.array([1 << 31, 0, 0], np.uint32),
            np.array([0xFFFFFFFF, 0xFFFF0000, 0], np.uint32), ONES]
    for w in pats:
        u = _u96(w)
        u = mp.mpf(u.numerator) / u.denominator
        hi = _sf_inv(q * u)
        lo = -_sf_inv((1 - q) * u) if (1 - q) * u <= 0.5 else _sf_inv(q + (1 - q) * (1 - u))
        assert _alpha(m, w, True) == pytest.approx(float(hi), rel=1e-6, abs=1e-6)
        assert _alpha(m, w, False) == pytest.approx(float(lo), rel=1e-6, abs=1e-6)
    # the two regions meet where the cap starts (within float32 rounding)
    gamma = float(_sf_inv(q))
    assert _alpha(m, ONES, True) == pytest.approx(gamma, rel=1e-6)
    assert float(m.params.gamma) == pytest.approx(gamma, rel=1e-6)
    if float(q) > 2.0**-60:
        assert _alpha(m, ONES, False) == pytest.approx(gamma, rel=1e-6)


def test_sample_alpha_is_alpha_of_the_key_bits():
    m = _g(2.0, 2)
    key = jax.random.key(3)
    words = jax.random.bits(key, (3,), jnp.uint32)
    for up in (True, False):
        got = float(jax.jit(privunitg.sample_alpha)(key, jnp.bool_(up), m.params))
        assert got == pytest.approx(_alpha(m, words, up), rel=1e-6)   # jit fusion: an ulp


@jax.jit
def _alpha_draws(keys, params):
    """α in each region, and α behind the cap coin, for each key (one compilation)."""
    def one(k):
        hi = privunitg.sample_alpha(k, jnp.bool_(True), params)
        lo = privunitg.sample_alpha(k, jnp.bool_(False), params)
        up = ~randomizer.bernoulli(randomizer.subkey(k, 2), params.p_out)
        return hi, lo, privunitg.sample_alpha(randomizer.subkey(k, 1), up, params)

    return jax.vmap(one)(keys)


@pytest.mark.parametrize("eps", [2.0, 30.0, 60.0])
def test_alpha_follows_its_truncated_law(eps):
    """KS of 20,000 draws per region against the truncated normal CDF with the realised q
    (log space, scipy), and E[α] = m with the cap coin (5 SE)."""
    n = 20_000
    m = _g(eps, 2)
    q = float(m.params.q)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(jnp.arange(n))
    hi, lo, a = (np.asarray(x, np.float64) for x in _alpha_draws(keys, m.params))
    cdf_hi = lambda x: -np.expm1(special.log_ndtr(-x) - math.log(q))   # noqa: E731
    cdf_lo = lambda x: np.exp(special.log_ndtr(x) - math.log1p(-q))    # noqa: E731
    assert stats.kstest(hi, cdf_hi).pvalue > 1e-6
    assert stats.kstest(lo, cdf_lo).pvalue > 1e-6
    mean, ea2 = float(m.params.m), float(m.params.ea2)
    assert abs(a.mean() - mean) <= 5 * math.sqrt((ea2 - mean**2) / n)


# --------------------------------------------------------------- the reviewer's counterexample


def test_counterexample_alpha_now_reaches_past_the_direction_sampler():
    """ε = 2, d = 2, inputs e₁ vs e₂: coordinate 1 is α under e₁ and the direction draw g₁
    under e₂. The old α (24-bit uniform) stopped at ndtri(2⁻²³(1 − q)) = −5.2498 while g₁
    reached ±9.08; now α's range [α_min, α_max] contains g₁'s (from the extreme bit patterns
    of both samplers), and what α reaches beyond g₁ has e₁-probability below the printed δ."""
    m = _g(2.0, 2)
    q = float(m.params.q)
    old_floor = float(special.ndtri(2.0**-23 * (1 - q)))
    assert old_floor == pytest.approx(-5.2498, abs=2e-4)
    assert privunit2.DIRECTION_IMPL == "icdf"
    g_max = float(sampling.normal_from_bits(jnp.uint32(0), jnp.uint32(0)))
    g_min = float(sampling.normal_from_bits(jnp.uint32(0x80000000), jnp.uint32(0)))
    assert g_max == pytest.approx(float(_sf_inv(mp.mpf(2) ** -64)), rel=1e-6) == -g_min
    a_min, a_max = _alpha(m, ZEROS, False), _alpha(m, ZEROS, True)
    assert a_min < g_min < old_floor and a_max > g_max
    assert a_min == pytest.approx(float(-_sf_inv((1 - mp.mpf(q)) * mp.mpf(2) ** -97)), rel=1e-6)
    # the e₁-probability that α lands where g₁ never does (|α| > 9.08), in the model
    t = _sf_inv(mp.mpf(2) ** -64)
    p = 1 - _p_lower(m)
    qq = mp.mpf(q)
    beyond = (p * (_sf(t) - _sf(_sf_inv(qq * mp.mpf(2) ** -97))) / qq
              + (1 - p) * (_cdf(-t) - (1 - qq) * mp.mpf(2) ** -97) / (1 - qq))
    assert 0 < beyond < m.delta
    assert float(beyond) == pytest.approx(float(p / qq + (1 - p) / (1 - qq)) * 2.0**-64, rel=1e-3)



@pytest.fixture(autouse=True)
def _icdf_direction(monkeypatch):
    """The exact references below model the direction draws as the "icdf" sampler (a cube of
    reach Φ̄⁻¹(2⁻⁶⁴)); the module's default ("tail", a disk of reach 11.6) is checked by
    test_default_direction_sampler_is_tail. Every make() here runs with "icdf"."""
    monkeypatch.setattr(privunit2, "DIRECTION_IMPL", "icdf")
    privunit2.constants.cache_clear() if hasattr(privunit2.constants, "cache_clear") else None
    yield


def test_default_direction_sampler_is_tail(monkeypatch):
    monkeypatch.undo()
    assert privunit2.DIRECTION_IMPL == "tail"
    m = mechanism.make("privunitg", epsilon=8.0, dim=61_706)
    assert "'tail'" in m.realisation and m.epsilon == 8.0
    # the coupling part alone: (1 + e^ε')·(d·2⁻⁹⁷ + 2⁻⁹⁶) — δ' is at most that
    tv = 61_706 * 2.0**-97 + 2.0**-96
    assert 0 < m.delta <= (1 + math.exp(m.epsilon)) * tv * (1 + 1e-9)

# ------------------------------------------------------------------ the printed guarantee


_p_lower, _norm_coin = p_lower, norm_coin   # tests/privunit_coins.py


def _independent_epsilon(m, q=None) -> mpmath.mpf:
    pl = _p_lower(m)
    q = mp.mpf(float(m.params.q)) if q is None else mp.mpf(q)
    s = _norm_coin(m)
    return mp.log((1 - pl) / pl) + mp.log((1 - q) / q) + mp.log((1 - s) / s)


@pytest.mark.parametrize("d", [2, 61_706])
@pytest.mark.parametrize("eps", [1.0, 4.0, 8.0, 16.0, 30.0, 60.0])
def test_privunitg_prints_its_realised_epsilon_and_the_interface(eps, d):
    m = _g(eps, d)
    exact = _independent_epsilon(m)
    assert mp.mpf(m.epsilon) >= exact                       # never below, not even by an ulp
    # printed: ε itself when the realised ε' is below it (any ε above ε' holds)
    assert m.epsilon == pytest.approx(max(float(exact), eps), rel=1e-11)
    assert m.epsilon == pytest.approx(eps, rel=1e-5)
    assert (m.ideal_epsilon, m.ideal_delta, m.tail_scale) == (eps, 0.0, 1.0)
    assert m.tail_mass == m.delta and 0 < m.delta <= 1
    assert "PrivUnitG" in m.realisation and "icdf" in m.realisation
    assert m.delta == pytest.approx(float(_expected_delta_g(m, d, mp.mpf(2) ** -63)), rel=1e-9)


def _expected_delta_g(m, d, tail, eps=None, q=None, p=None) -> mpmath.mpf:
    """min of the coupling bound (1 + e^ε')·TV and the density-ratio bound (p/Q)·κ (100 digits)."""
    eps = mp.mpf(m.epsilon if eps is None else eps)
    q = mp.mpf(float(m.params.q)) if q is None else mp.mpf(q)
    p = 1 - _p_lower(m) if p is None else mp.mpf(p)
    keep = (1 - tail) ** d
    tv = mp.mpf(2) ** -96 + 1 - keep
    kappa = 1 / ((1 - mp.mpf(2) ** -96) * keep) - 1
    return min(mp.mpf(1), (1 + mp.exp(eps)) * tv, p / q * kappa)


def _pair_delta(m, t_g, eps) -> mpmath.mpf:
    """Exact hockey-stick divergence at ``eps`` of the realised PrivUnitG reports (V, r̂) at
    d = 2 for the inputs C·e₁ and (0+)·e₂, and for C·e₁ and (0+)·(−e₁), in the model: α the
    truncated normal of mass Q restricted to the 96-bit uniform's reach, each g coordinate
    N(0, 1) restricted to [−t_g, t_g], the coins at their exact realised probabilities.
    Both densities are φ(v₁)φ(v₂) times a constant on each cell of the breakpoints, so the
    integral is a finite sum (mpmath, 100 digits). Returns the larger of the two pairs."""
    q = mp.mpf(float(m.params.q))
    p = 1 - _p_lower(m)
    two = mp.mpf(2) ** -97
    gamma = _sf_inv(q)
    a_max, a_min = _sf_inv(q * two), -_sf_inv((1 - q) * two)
    a_top = _sf_inv(q + (1 - q) * two)                  # the lower region's reach
    c_hi = p / (q - _sf(a_max))
    c_lo = (1 - p) / (_cdf(a_top) - _cdf(a_min))
    c_g = 1 / (1 - 2 * _sf(t_g))

    def dens_alpha(x):
        if gamma <= x <= a_max:
            return c_hi
        if a_min <= x <= a_top and x < gamma:
            return c_lo
        return mp.mpf(0)

    def dens_g(x):
        return c_g if -t_g <= x <= t_g else mp.mpf(0)

    pts = sorted({a_min, -t_g, -gamma, gamma, a_top, -a_top, t_g, a_max, -a_max, -a_min})
    cells = [(lo, hi, (lo + hi) / 2, _cdf(hi) - _cdf(lo)) for lo, hi in zip(pts, pts[1:])]
    s = _norm_coin(m)
    coins = [(1 - s, s), (s, 1 - s)]      # P(r̂ = ±B) for r = C and r = 0
    e = mp.exp(mp.mpf(eps))
    out = []
    for second in ("e2", "-e1"):
        total = mp.mpf(0)
        for p1, p2 in coins:
            for _, _, x, mx in cells:
                for _, _, y, my in cells:
                    f1 = dens_alpha(x) * dens_g(y)
                    f2 = dens_g(x) * dens_alpha(y) if second == "e2" else dens_alpha(-x) * dens_g(y)
                    total += max(p1 * f1 - e * p2 * f2, 0) * mx * my
        out.append(total)
    return max(out)


@pytest.mark.parametrize("eps", [1.0, 2.0, 8.0, 16.0, 30.0])
def test_printed_delta_is_never_below_the_exact_realised_delta_at_d_2(eps):
    """The printed δ' is at least the exact δ of the realised pairs (e₁ vs e₂, e₁ vs −e₁, with
    the norm coin at its extremes) at the printed ε': the pairs' support mismatches have
    positive probability (so δ = 0 would be wrong) and the coupling bound covers them."""
    m = _g(eps, 2)
    t_g = _sf_inv(mp.mpf(2) ** -64)          # the icdf sampler's reach
    exact = _pair_delta(m, t_g, m.epsilon)
    assert 0 < exact <= m.delta
    # below ε' the ideal ratio itself is exceeded on the cap/complement cells: δ grows
    assert _pair_delta(m, t_g, m.epsilon - 0.01) > 1e-3


@pytest.mark.parametrize("eps", [2.0, 16.0])
def test_printed_delta_covers_the_rotated_pair_at_d_2(eps):
    """u = e₁ vs u' = (e₁ + e₂)/√2: under u', V₂ = (α + β)/√2 (β = ⟨g, (−1, 1)/√2⟩, g in the
    square [−T, T]²) exceeds T, which V₂ = g₂ never does under u; that probability (scipy
    quadrature of the realised densities) is a lower bound on the pair's δ at any ε."""
    m = _g(eps, 2)
    t = float(_sf_inv(mp.mpf(2) ** -64))
    q, p = float(m.params.q), 1.0 - float(_p_lower(m))
    gamma, a_max = float(_sf_inv(q)), float(_sf_inv(mp.mpf(q) * mp.mpf(2) ** -97))
    z = 1 - 2 * special.ndtr(-t)
    r2t = math.sqrt(2) * t

    def beta_sf(c):   # P(β > c), β's density φ(b)(2Φ(√2T − |b|) − 1)/Z²
        if c >= r2t:
            return 0.0
        f = lambda b: stats.norm.pdf(b) * (2 * special.ndtr(r2t - abs(b)) - 1) / z**2  # noqa: E731
        return integrate.quad(f, c, r2t, epsabs=0, epsrel=1e-7, limit=100)[0]

    # cap part (the lower region, α < γ, needs β > √2T − γ: included, smaller)
    cap = integrate.quad(lambda a: stats.norm.pdf(a) / q * beta_sf(r2t - a), gamma, a_max,
                         epsabs=0, epsrel=1e-5, limit=100, points=[r2t / 2])[0]
    low = integrate.quad(lambda a: stats.norm.pdf(a) / (1 - q) * (beta_sf(r2t - a)
                                                                  + beta_sf(r2t + a)),
                         -12.0, gamma, epsabs=0, epsrel=1e-5, limit=100)[0]
    mismatch = p * cap + (1 - p) * low
    print(f"eps {eps}: P_u'(|V2| > T) = {mismatch:.4g}, printed delta {m.delta:.4g}")
    assert 0 < mismatch <= m.delta
    # at most (p/q + 2(1 − p)/(1 − q))·P(N(0, 1) > T): (α + β)/√2 is N(0, 1) reweighted by
    # the coin; the cap's weight p/q dominates at large ε
    scale = (p / q + 2 * (1 - p) / (1 - q)) * 2.0**-64
    assert 0.01 < mismatch / scale < 1.0 + 1e-6


# ------------------------------------------------------------------------------- PrivUnit2


@pytest.mark.parametrize("d,eps", [(5, 1.0), (10, 20.0), (1000, 8.0), (61_706, 4.0)])
def test_privunit2_prints_its_realised_epsilon(d, eps):
    """ε' from the realised coin and the sphere mass of the float32 cap (mpmath's incomplete
    beta, ½·I_{1−γ²}((d−1)/2, ½), 100 digits; scipy's quadrature is only good to ~1e-11
    at d = 61,706), never below the exact value."""
    m = mechanism.make("privunit2", epsilon=eps, dim=d)
    gamma = mp.mpf(float(m.params.gamma))
    q = mp.betainc((d - 1) / mp.mpf(2), mp.mpf(0.5), 0, 1 - gamma**2, regularized=True) / 2
    exact = _independent_epsilon(m, q)
    assert m.epsilon == pytest.approx(max(float(exact), eps), rel=1e-11)
    assert mp.mpf(m.epsilon) >= exact
    assert (m.ideal_epsilon, m.ideal_delta, m.tail_mass, m.tail_scale) == (eps, 0.0, m.delta, 1.0)
    k = privunit2.constants(epsilon=eps, dim=d)
    a = mp.mpf(min(k["acceptance"]))
    r = mp.mpf(2) ** -96
    keep = (1 - mp.mpf(2) ** -63) ** d
    cut = (1 - a + 2 * r) ** privunit2.MAX_TRIES
    tv = 2 * r / a + cut + 1 - keep
    kappa = a / ((1 - r) ** 2 * (a - 2 * r)) / keep - 1
    e = 1 + mp.exp(m.epsilon)
    expected = min(mp.mpf(1), e * tv, (1 - _p_lower(m)) / q * kappa + e * cut)
    assert m.delta == pytest.approx(float(expected), rel=1e-9)


@pytest.mark.parametrize("d,eps,proposal", [(5, 1.0, "normal"), (10, 20.0, "exponential"),
                                            (1000, 8.0, "normal")])
def test_privunit2_acceptance_is_the_hosts(d, eps, proposal):
    """The fraction of accepted tries of each region (20,000 tries, 5 SE) is the acceptance
    the host computes (which bounds the expected number of tries in δ'), and the normal
    proposals overlap the cap boundary on both sides (trimmed there by the rejection step)."""
    n = 20_000
    m = mechanism.make("privunit2", epsilon=eps, dim=d)
    k = privunit2.constants(epsilon=eps, dim=d)
    assert (k["cap_rate"] > 0) == (proposal == "exponential")
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(8), i))(jnp.arange(n))
    words = jax.vmap(lambda kk: jax.random.bits(kk, (6,), jnp.uint32))(keys)
    tries = jax.jit(jax.vmap(privunit2.t_try, in_axes=(0, None, None)))
    for in_cap, acc in zip((True, False), k["acceptance"]):
        t, ok = (np.asarray(a) for a in tries(words, jnp.bool_(in_cap), m.params))
        assert abs(ok.mean() - acc) <= 5 * math.sqrt(acc * (1 - acc) / n) + 1e-9
        g = float(m.params.gamma)
        assert np.all((t[ok] >= g) if in_cap else (t[ok] < g))
    s = float(m.params.scale)
    assert ((d - 3) / 2) * s * s >= 0.5
    uq = jax.jit(privunit2.upper_quantile)
    assert s * float(uq(m.params.log_q_hi)) < float(m.params.gamma) < s * float(uq(m.params.log_q_lo))


# ----------------------------------------------------------------------------- the table


IMPL_TAIL = {"icdf": 2.0**-63, "tail": 2.0**-97}


@pytest.mark.parametrize("impl", sorted(IMPL_TAIL))
def test_realised_delta_table(impl):
    """δ' at ε ∈ {1, 4, 8, 16, 30, 60} and d ∈ {2, 1000, 61,706, 10⁶} for each direction
    sampler: the smaller bound, increasing in ε and d, at most 1, and tiny where it should be."""
    table = {}
    for d in (2, 1000, 61_706, 1_000_000):
        for eps in (1.0, 4.0, 8.0, 16.0, 30.0, 60.0):
            k = privunitg.realise(privunitg.constants(epsilon=eps, dim=d), impl)
            expected = _expected_delta_g(None, d, mp.mpf(IMPL_TAIL[impl]), k["epsilon_real"],
                                         k["q"], k["p"])
            assert k["delta_real"] == pytest.approx(float(expected), rel=1e-9)
            table[d, eps] = k["delta_real"]
    for d in (2, 1000, 61_706, 1_000_000):
        vals = [table[d, e] for e in (1.0, 4.0, 8.0, 16.0, 30.0, 60.0)]
        assert vals == sorted(vals) and vals[-1] <= 1.0
    assert table[61_706, 8.0] < (1e-12 if impl == "icdf" else 1e-22)
    assert table[1_000_000, 16.0] < (1e-8 if impl == "icdf" else 1e-18)
    assert table[61_706, 30.0] < (1e-4 if impl == "icdf" else 1e-14)


# --------------------------------------------------------------------------- at real sizes


@pytest.mark.slow   # 3-9 CPU s each: compiling and drawing 10⁶ coordinates
@pytest.mark.parametrize("name", ["privunitg", "privunit2"])
def test_a_million_coordinates_stay_in_the_samplers_reach(name):
    """d = 10⁶, ε = 4, input along e₁ (so V₂..V_d are the direction draws): the report is
    finite, every direction coordinate within the icdf sampler's reach Φ̄⁻¹(2⁻⁶⁴) (PrivUnitG:
    ‖V‖² within 6 SD of its mean E[α²] + d − 1; PrivUnit2: a unit vector), and the realised
    (ε', δ') printed."""
    d = 1_000_000
    m = mechanism.make(name, epsilon=4.0, dim=d)
    x = jnp.zeros(d).at[0].set(0.5)
    # x an argument, not a closed-over constant (XLA would constant-fold 10⁶ entries)
    rep = jax.jit(lambda k, x, p: m.privatize(k, x, p).report)(jax.random.key(5), x, m.params)
    v = np.asarray(rep["direction"], np.float64)
    assert np.all(np.isfinite(v)) and np.isfinite(float(rep["norm"]))
    t = float(_sf_inv(mp.mpf(2) ** -64))
    if name == "privunitg":
        assert np.abs(v[1:]).max() <= t * (1 + 1e-6)
        assert abs(v @ v - (float(m.params.ea2) + d - 1)) <= 6 * math.sqrt(2 * d)
    else:
        assert v @ v == pytest.approx(1.0, abs=1e-4)
    assert m.delta < 1e-11 and m.epsilon == pytest.approx(4.0, rel=1e-6)
