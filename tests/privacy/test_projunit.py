"""ProjUnit and FastProjUnit (Asi, Feldman, Nelson, Nguyen & Talwar, NeurIPS 2023): the
projections against independent constructions, the realised guarantee against an mpmath
computation from the float32 parameters, privacy ratios of the k-dimensional step, the exact
mean and variance against Monte Carlo, and jit(vmap) at LeNet-5's size and at 10⁶.

Statistical checks use fixed keys and 5-standard-error windows (false-failure probability
≤ 6e-7 each, normal approximation) or χ² quantiles at 1 − 1e-6; this file makes fewer than 30
such checks, so a correct implementation fails one for fresh keys with probability < 3e-5.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from privunit_coins import norm_coin, p_lower
from scipy import linalg, stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.randomizers import privunitg as pg
from ldpsim._src.privacy.randomizers import projunit as pj

_project = jax.jit(pj.project)
_backproject = jax.jit(pj.backproject)

mp = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp
mp.dps = 60
Z5 = 5.0


@functools.lru_cache(maxsize=None)
def _m(eps, d, k, fast, clip=1.0):
    return pj.make(epsilon=eps, dim=d, k=k, clip=clip, fast=fast)


def _unit(d, seed=0):
    x = np.random.default_rng(seed).normal(size=d)
    return x / np.linalg.norm(x)


# ------------------------------------------------------------------------ the projections


@pytest.mark.parametrize("n", [1, 2, 8, 64, 1024])
def test_fwht_is_sylvesters_hadamard(n):
    x = np.random.default_rng(n).normal(size=n).astype(np.float32)
    got = np.asarray(jax.jit(pj.fwht)(jnp.asarray(x)), np.float64)
    np.testing.assert_allclose(got, linalg.hadamard(n) @ x.astype(np.float64), atol=2e-4 * math.sqrt(n))


def _matrix(params, seed, proj):
    """W built column by column from ``proj`` (d basis vectors)."""
    return np.asarray(_matrices(params, proj, seed[None]))[0]


def _matrices(params, proj, seeds):
    """W of each seed (one compiled program for the batch)."""
    eye = jnp.eye(params.dim, dtype=jnp.float32)
    cols = jax.vmap(lambda s: jax.vmap(lambda e: proj(s, e, params))(eye))
    return np.swapaxes(np.asarray(jax.jit(cols)(seeds), np.float64), 1, 2)


@pytest.mark.parametrize("d", [48, 64])
def test_hadamard_projection_is_the_papers_srht(d):
    """``W = √(d'/k)·S·H·D`` from scipy's Hadamard matrix and the signs and rows the seed
    draws (d = 48 is padded to d' = 64); Wᵀ is the adjoint of W."""
    k = 8
    m = _m(4.0, d, k, True)
    seed = jax.random.key(3)
    dp, signs, rows = pj._srht_parts(seed, d, k)
    assert dp == 64 and len(set(np.asarray(rows).tolist())) == k
    h = linalg.hadamard(dp) / math.sqrt(dp)
    ref = math.sqrt(dp / k) * (h * np.asarray(signs)[None, :])[np.asarray(rows)][:, :d]
    w = _matrix(m.params, seed, pj.project)
    np.testing.assert_allclose(w, ref, atol=1e-6)
    v = jnp.asarray(np.random.default_rng(1).normal(size=k), jnp.float32)
    np.testing.assert_allclose(np.asarray(_backproject(seed, v, m.params)), ref.T @ np.asarray(v),
                               atol=1e-5)


def test_gaussian_projection_blocks_adjoint_and_law(monkeypatch):
    """Gaussian W generated in row blocks (3 rows a block here: k = 8 is not a multiple):
    ``Wᵀ`` of backproject is the transpose of project's W, the same seed gives the same W,
    and the entries times √k are N(0, 1) (KS p > 1e-6)."""
    monkeypatch.setattr(pj, "BLOCK_ELEMENTS", 3 * 40)
    m = pj.make(epsilon=4.0, dim=40, k=8)
    assert pj._block_rows(40, 8) == 3
    seed = jax.random.key(5)
    w = _matrix(m.params, seed, pj.project)
    assert w.shape == (8, 40)
    v = np.random.default_rng(2).normal(size=8).astype(np.float32)
    np.testing.assert_allclose(np.asarray(_backproject(seed, jnp.asarray(v), m.params)),
                               w.T @ v, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(w, _matrix(m.params, seed, pj.project))
    seeds = jax.vmap(jax.random.key)(jnp.arange(40))
    many = _matrices(m.params, pj.project, seeds).ravel() * math.sqrt(8)
    assert stats.kstest(many, "norm").pvalue > 1e-6


# ------------------------------------------------------------------- the realised guarantee


_p_lower, _norm_coin = p_lower, norm_coin   # tests/privunit_coins.py


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("eps", [1.0, 8.0, 16.0, 30.0])
def test_printed_guarantee_is_privunitg_realised_in_k_dimensions(eps, fast):
    """ε' from the float32 coins and the float32 cap mass (mpmath), δ' = min(1, (1 + e^ε')·TV,
    (p/Q)·κ) with the tail mass of the k direction draws (2⁻⁹⁷ each), not of d."""
    d, k = 61_706, 1000
    m = _m(eps, d, k, fast)
    pl, s, q = _p_lower(m), _norm_coin(m), mp.mpf(float(m.params.q))
    exact = mp.log((1 - pl) / pl) + mp.log((1 - q) / q) + mp.log((1 - s) / s)
    assert mp.mpf(m.epsilon) >= exact
    assert m.epsilon == pytest.approx(max(float(exact), eps), rel=1e-11)
    keep = (1 - mp.mpf(2) ** -97) ** k
    tv = mp.mpf(2) ** -96 + 1 - keep
    kappa = 1 / ((1 - mp.mpf(2) ** -96) * keep) - 1
    delta = min(mp.mpf(1), (1 + mp.exp(mp.mpf(m.epsilon))) * tv, (1 - pl) / q * kappa)
    assert m.delta == pytest.approx(float(delta), rel=1e-9)
    assert (m.ideal_epsilon, m.ideal_delta, m.tail_mass, m.tail_scale) == (eps, 0.0, m.delta, 1.0)
    assert m.neighbours == "replace" and not m.additive and m.unbiased == (not fast)
    assert "k = 1000" in m.realisation
    assert m.params.floats_sent == 1001 and m.params.seed_bits == 64


def test_the_k_dimensional_step_is_privunitg_with_the_same_key():
    """Given ``w``, the direction and norm are PrivUnitG's own draws (same keys, same
    bits), so PrivUnitG's tests of the realised samplers cover them."""
    from ldpsim._src.privacy.randomizers import privunitg

    m = _m(4.0, 200, 16, False)
    g = privunitg.make(epsilon=4.0, dim=16)
    g = g._replace(params=dataclass_replace(g.params, m.params))
    w = jnp.asarray(_unit(16, 4), jnp.float32)
    key = jax.random.key(11)
    v, r_hat = jax.jit(pj.privatize_direction)(key, w, jnp.float32(0.3), m.params)
    rep = jax.jit(g.privatize)(key, w * 0.3, g.params).report
    # PrivUnitG normalises 0.3·w again: the same draws up to that float32 rounding
    np.testing.assert_allclose(np.asarray(v), np.asarray(rep["direction"]), rtol=1e-5, atol=1e-6)
    assert float(r_hat) == float(rep["norm"])


def dataclass_replace(gparams, pparams):
    import dataclasses

    names = [f.name for f in dataclasses.fields(gparams) if f.name != "dim"]
    return dataclasses.replace(gparams, **{n: getattr(pparams, n) for n in names})


def _log_c(t, m):
    """log of the realised direction density's cap factor: p/Q above γ, (1 − p)/(1 − Q) below."""
    pl = float(_p_lower(m))
    q = float(m.params.q)
    return np.where(t >= float(m.params.gamma), math.log((1 - pl) / q), math.log(pl / (1 - q)))


@pytest.mark.parametrize("fast", [False, True])
def test_privacy_ratio_of_the_k_dimensional_step(fast):
    """For one public W and inputs x, x' whose projections are orthogonal (w ⊥ w'), reports
    drawn under x: (i) ⟨V, w⟩ is α to float32 rounding, so the cap event has probability p
    under x and Q = Φ̄(γ) under x' (binomial windows); (ii) the log-likelihood ratio of every
    report between x and x' from the float32 parameters (cap factors and the norm coin) is
    within ±ε' and reaches ε' and −ε' on some reports."""
    eps, d, k, n = 4.0, 300, 16, 20_000
    m = _m(eps, d, k, fast)
    seed = jax.random.key(7)
    u = jnp.asarray(_unit(d, 1), jnp.float32)
    y = _project(seed, u, m.params)
    w = y / jnp.linalg.norm(y)
    # x' with W x' ⊥ W x: v − (⟨Wv, w⟩/⟨Wu, w⟩) u, normalised
    v0 = jnp.asarray(_unit(d, 2), jnp.float32)
    u2 = v0 - jnp.vdot(_project(seed, v0, m.params), w) / jnp.vdot(y, w) * u
    u2 = u2 / jnp.linalg.norm(u2)
    y2 = _project(seed, u2, m.params)
    w2 = y2 / jnp.linalg.norm(y2)
    assert abs(float(jnp.vdot(w, w2))) < 1e-5
    norm_x, norm_x2 = 1.0, 0.0                       # the norm coin at its two extremes
    keys = jax.random.split(jax.random.key(8), n)
    draw = jax.jit(jax.vmap(lambda kk, ww, r: pj.privatize_direction(kk, ww, r, m.params),
                            in_axes=(0, None, None)))
    v, rh = draw(keys, w, jnp.float32(norm_x))
    v2, _ = draw(keys, w2, jnp.float32(norm_x2))
    t, t2 = np.asarray(v @ w, np.float64), np.asarray(v2 @ w, np.float64)
    p, q = 1 - float(_p_lower(m)), float(m.params.q)
    for hits, prob in ((t >= float(m.params.gamma), p), (t2 >= float(m.params.gamma), q)):
        assert abs(hits.mean() - prob) <= Z5 * math.sqrt(prob * (1 - prob) / n) + 1.0 / n
    # the coupling of ⟨V, w⟩ with α: |⟨V, w⟩ − α| at float32 rounding (relative ~1e-6)
    alpha = np.asarray(jax.vmap(lambda kk: pj.privatize_direction(kk, w, jnp.float32(1.0),
                                                                   m.params)[0] @ w)(keys[:8]))
    assert np.allclose(alpha, t[:8], rtol=0, atol=1e-5 * (1 + np.abs(t[:8])).max())
    s = float(_norm_coin(m))
    plus = np.asarray(rh) > float(m.params.clip) / 2
    log_coin = np.where(plus, math.log((1 - s) / s), math.log(s / (1 - s)))   # r = C vs r = 0
    t_prime = np.asarray(v @ w2, np.float64)
    llr = _log_c(t, m) - _log_c(t_prime, m) + log_coin
    assert llr.max() <= m.epsilon * (1 + 1e-9) and llr.min() >= -m.epsilon * (1 + 1e-9)
    pl, q_ = _p_lower(m), mp.mpf(float(m.params.q))
    realised = float(mp.log((1 - pl) / pl) + mp.log((1 - q_) / q_) + mp.log((1 - s) / s))
    assert llr.max() == pytest.approx(realised, rel=1e-9)      # the extremes are reached
    assert llr.min() == pytest.approx(-realised, rel=1e-9)


@pytest.mark.slow
def test_float32_normalisation_of_the_projection():
    """w = Wu/‖Wu‖ in float32 at k = 1,000 (d = 61,706): |‖w‖ − 1| < 3e-7 for 64 seeds."""
    d, k = 61_706, 1000
    m = _m(4.0, d, k, True)
    u = jnp.asarray(_unit(d, 3), jnp.float32)

    def unit_w(key):
        y = pj.project(key, u, m.params)
        return y / jnp.sqrt(jnp.sum(y * y))      # as privunit2._direction computes it

    w = np.asarray(jax.jit(jax.vmap(unit_w))(jax.random.split(jax.random.key(0), 64)),
                   np.float64)
    got = np.linalg.norm(w, axis=1)             # float64 norms of the float32 vectors
    assert np.abs(got - 1).max() < 3e-7


# ----------------------------------------------------------------- mean and variance (MC)


def _mc(m, x, n, seed=0, chunk=5_000):
    f = jax.jit(jax.vmap(lambda key: m.decode(m.privatize(key, x, m.params).report, m.params)))
    keys = jax.random.split(jax.random.key(seed), n)
    return np.concatenate([np.asarray(f(keys[i:i + chunk]), np.float64)
                           for i in range(0, n, chunk)])


@pytest.mark.parametrize("eps", [pytest.param(1.0, marks=pytest.mark.slow), 8.0])
def test_projunit_is_unbiased_with_the_exact_variance(eps):
    """ProjUnit (Gaussian W) at d = 64, k = 8, ‖x‖ = 0.6: the mean is x (χ²_d of the
    standardised mean error below its 1 − 1e-6 quantile), the total variance and the
    variance of the coordinate with the largest |u_i| equal the formula (5 s.e.)."""
    d, k, n = 64, 8, 20_000
    m = _m(eps, d, k, False)
    u = _unit(d, 9)
    u[0] = 3.0
    x = 0.6 * u / np.linalg.norm(u)
    xj = jnp.asarray(x, jnp.float32)
    out = _mc(m, xj, n, seed=int(eps))
    var = np.asarray(m.variance(m.params, xj), np.float64)
    z2 = np.sum((out.mean(0) - x) ** 2 / (var / n))
    assert z2 < stats.chi2.ppf(1 - 1e-6, d)
    err2 = np.sum((out - x) ** 2, axis=1)
    assert abs(err2.mean() - var.sum()) <= Z5 * err2.std(ddof=1) / math.sqrt(n)
    assert var.sum() == pytest.approx(pj.total_variance_formula(m.params, 0.6), rel=1e-5)
    e0 = (out[:, 0] - x[0]) ** 2
    assert abs(e0.mean() - var[0]) <= Z5 * e0.std(ddof=1) / math.sqrt(n)
    if eps >= 8:   # σ_α² ≫ 1: the formula's u_i² term matters
        assert var[0] > 1.5 * np.delete(var, 0).mean()


def test_fastprojunit_second_moment_is_exact_at_a_power_of_two():
    """FastProjUnit at d = d' = 64, k = 8: E‖x̂‖² = E[r̂²]/(m²c²)·(d'/k)(σ_α² + k − 1)
    exactly (5 s.e.), and the variance formula's total is that minus ρ²."""
    d, k, n = 64, 8, 20_000
    m = _m(4.0, d, k, True)
    x = 0.6 * _unit(d, 5)
    out = _mc(m, jnp.asarray(x, jnp.float32), n, seed=3)
    sq = np.sum(out**2, axis=1)
    p = m.params
    b, c = float(p.norm_bound), float(p.clip)
    er2 = (b * b - (2 * 0.6 - c) ** 2) / 4 + 0.36
    exact = er2 / (float(p.m) * float(p.c)) ** 2 * (d / k) * (float(p.ea2) + k - 1)
    assert abs(sq.mean() - exact) <= Z5 * sq.std(ddof=1) / math.sqrt(n)
    assert pj.total_variance_formula(p, 0.6) == pytest.approx(exact - 0.36, rel=1e-9)


def _s_values(d, k, u, n, seed):
    """s = ‖Wu‖ for n Hadamard projections, and Wᵀ(Wu/‖Wu‖) (the noiseless decoder)."""
    m = _m(4.0, d, k, True)
    uj = jnp.asarray(u, jnp.float32)

    def one(key):
        y = pj.project(key, uj, m.params)
        s = jnp.linalg.norm(y)
        return s, pj.backproject(key, y / s, m.params)

    keys = jax.random.split(jax.random.key(seed), n)
    s, back = jax.jit(jax.vmap(one))(keys)
    return m, np.asarray(s, np.float64), np.asarray(back, np.float64)


@pytest.mark.slow
def test_fastprojunit_normalisation_bias_bounds():
    """The Hadamard normalisation (module docstring): E[s²] = 1, Var(s²) = 2(1 − ‖u‖₄⁴)f,
    1 − (1 − ‖u‖₄⁴)f ≤ E[s] ≤ 1; for e₁ s = 1 exactly; for a dense input E[s] = 1 − f/4 to
    second order (so the decoder's c leaves a bias along u well below f/4), and the
    component orthogonal to u of E[Wᵀw] is below f/4 (5 s.e.). d = 1,024, k = 32."""
    d, k, n = 1024, 32, 6_000
    f = pj.fpc(d, k)
    e1 = np.zeros(d)
    e1[0] = 1.0
    _, s, _ = _s_values(d, k, e1, 64, 1)
    np.testing.assert_allclose(s, 1.0, rtol=2e-6)
    u = _unit(d, 6)
    m, s, back = _s_values(d, k, u, n, 2)
    se = s.std(ddof=1) / math.sqrt(n)
    s2 = s**2
    assert abs(s2.mean() - 1) <= Z5 * s2.std(ddof=1) / math.sqrt(n)
    v_pred = 2 * (1 - np.sum(u**4)) * f
    # the variance of a variance estimate: 5 s.e. from the sample fourth moment
    dev = (s2 - 1) ** 2
    assert abs(dev.mean() - v_pred) <= Z5 * dev.std(ddof=1) / math.sqrt(n)
    assert 1 - (1 - np.sum(u**4)) * f - Z5 * se <= s.mean() <= 1 + Z5 * se
    # second order (the f² term is not derived: a coarse check, f² = 9e-4 beside 5 s.e. 8e-3)
    assert abs(s.mean() - (1 - f / 4)) <= Z5 * se + f * f
    orth = back.mean(0) - (back.mean(0) @ u) * u
    noise = math.sqrt(np.sum(back.var(0, ddof=1)) / n)
    assert np.linalg.norm(orth) <= f / 4 + Z5 * noise


# ---------------------------------------------------------------- jit, vmap, keys, sizes


def _cohort(m, x, keys):
    f = jax.jit(jax.vmap(lambda key: m.privatize(key, x, m.params)))
    rep = f(keys)
    dec = jax.jit(jax.vmap(lambda r: m.decode(r, m.params)))(rep.report)
    return rep, dec


@pytest.mark.slow
@pytest.mark.parametrize("fast,k", [(True, 1000), (False, 16)])
def test_jit_vmap_at_lenet5_size_determinism_and_decode(fast, k):
    """d = 61,706 (LeNet-5), 4 clients: shapes, determinism by key, different keys differ,
    the server decodes from the report's seed alone (= the client's W), like a pytree."""
    d = 61_706
    m = _m(4.0, d, k, fast)
    x = jnp.asarray(0.5 * _unit(d, 0), jnp.float32)
    keys = jax.random.split(jax.random.key(1), 4)
    rep, dec = _cohort(m, x, keys)
    assert rep.report["direction"].shape == (4, k) and rep.report["seed"].shape == (4, 2)
    assert dec.shape == (4, d) and bool(jnp.all(jnp.isfinite(dec)))
    assert rep.report["norm"].shape == (4,)          # k + 1 floats and a seed per client
    rep2, dec2 = _cohort(m, x, keys)
    np.testing.assert_array_equal(np.asarray(dec), np.asarray(dec2))
    assert not np.array_equal(np.asarray(dec[0]), np.asarray(dec[1]))
    # the server's W is the client's: Wᵀ from the seed of the key, outside vmap
    seed = jax.random.wrap_key_data(pj.projection_seed(keys[2]))
    back = _backproject(seed, rep.report["direction"][2], m.params)
    ref = back * rep.report["norm"][2] / (m.params.m * m.params.c)
    np.testing.assert_allclose(np.asarray(dec[2]), np.asarray(ref), rtol=1e-5, atol=1e-6)
    # one client alone gives the cohort's release (randomness by key, not by batch)
    one = jax.jit(m.privatize)(keys[3], x, m.params).report
    np.testing.assert_allclose(np.asarray(one["direction"]), np.asarray(rep.report["direction"][3]),
                               rtol=1e-5, atol=1e-5)
    tree = {"a": x[:61_696], "b": x[61_696:]}
    dt = jax.jit(m.decode)(jax.tree_util.tree_map(lambda a: a[0], rep.report), m.params, tree)
    assert set(dt) == {"a", "b"} and dt["b"].shape == (10,)


@pytest.mark.parametrize("fast,k", [(True, 1000), (False, 16)])
def test_a_diverged_client_releases_what_the_zero_update_releases(fast, k):
    """All-NaN, all-inf, mixed and huge-finite updates at d = 61,706 under jit(vmap) with ONE
    key: the non-finite ones release exactly the zero update's report; the huge one is clipped."""
    d = 61_706
    m = _m(4.0, d, k, fast)
    f32max = float(np.finfo(np.float32).max)
    mixed = np.zeros(d, np.float32)
    mixed[::3], mixed[1::3] = np.nan, np.inf
    xs = jnp.asarray(np.stack([np.zeros(d), np.full(d, np.nan), np.full(d, np.inf),
                               mixed, np.full(d, f32max)]), jnp.float32)
    key = jax.random.key(4)
    rep = jax.jit(jax.vmap(lambda x: m.privatize(key, x, m.params)))(xs)
    for i in (1, 2, 3):
        for name in ("direction", "norm", "seed"):
            np.testing.assert_array_equal(np.asarray(rep.report[name][i]),
                                          np.asarray(rep.report[name][0]))
    assert not bool(rep.finite[1]) and bool(rep.finite[4]) and bool(rep.was_clipped[4])
    assert bool(jnp.all(jnp.isfinite(rep.report["direction"])))


@pytest.mark.slow
@pytest.mark.parametrize("fast,k", [(True, 1000), (False, 8)])
def test_jit_vmap_at_a_million_coordinates(fast, k):
    """d = 10⁶, 2 clients under jit(vmap): FastProjUnit at k = 1,000 (FWHT on 2²⁰), ProjUnit at
    k = 8 (W in 8 scan steps of one 10⁶ row; memory O(d) per client, never k·d; at k = 1,000
    it is 10⁹ normal draws per client per pass: FastProjUnit is the one for 10⁶)."""
    d = 10**6
    m = _m(8.0, d, k, fast)
    x = jnp.asarray(0.5 * _unit(d, 0), jnp.float32)
    rep, dec = _cohort(m, x, jax.random.split(jax.random.key(2), 2))
    assert dec.shape == (2, d) and bool(jnp.all(jnp.isfinite(dec)))
    assert pj._block_rows(d, k) == 1
    _, dec2 = _cohort(m, x, jax.random.split(jax.random.key(2), 2))
    np.testing.assert_array_equal(np.asarray(dec), np.asarray(dec2))


@pytest.mark.slow
def test_projunit_at_lenet5_size_with_the_papers_k():
    """ProjUnit at d = 61,706 and k = 1,000 (6·10⁷ normal draws per client per pass, W in 63
    scan steps of 16 rows) under jit(vmap), 2 clients: finite, decoded from the seed alone.
    Its cost is executing the draws, not compiling, so it runs in a child process with XLA's
    default options (the suite's skip LLVM's optimisation: several times slower here)."""
    from conftest import run_with_xla_defaults

    out = run_with_xla_defaults("import sys\nsys.path[:0] = ['tests', 'tests/privacy']\n"
                                "import test_projunit\n"
                                "test_projunit._projunit_at_lenet5_size()\nprint('ok')\n")
    assert out.strip().splitlines()[-1] == "ok", out


def _projunit_at_lenet5_size():
    d, k = 61_706, 1000
    m = _m(4.0, d, k, False)
    x = jnp.asarray(0.5 * _unit(d, 0), jnp.float32)
    keys = jax.random.split(jax.random.key(1), 2)
    rep, dec = _cohort(m, x, keys)
    assert rep.report["direction"].shape == (2, k) and bool(jnp.all(jnp.isfinite(dec)))
    assert pj._block_rows(d, k) == 16
    seed = jax.random.wrap_key_data(pj.projection_seed(keys[1]))
    back = _backproject(seed, rep.report["direction"][1], m.params)
    ref = back * rep.report["norm"][1] / (m.params.m * m.params.c)
    np.testing.assert_allclose(np.asarray(dec[1]), np.asarray(ref), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- the factory


@pytest.mark.parametrize("bad", [dict(k=1), dict(k=61_707), dict(epsilon=0.0), dict(dim=1),
                                 dict(clip=-1.0), dict(epsilon=math.inf)])
def test_bad_arguments_are_refused(bad):
    kw = dict(epsilon=4.0, dim=61_706, k=100) | bad
    with pytest.raises(LdpsimError):
        pj.projunit(**kw)
    if bad != dict(k=61_707):
        with pytest.raises(LdpsimError):
            pj.fastprojunit(**kw)


def test_fastprojunit_k_up_to_the_padded_dimension():
    """k may exceed d for FastProjUnit up to d' (rows of the padded transform)."""
    assert pj.fastprojunit(epsilon=4.0, dim=48, k=64).params.k == 64
    # default k: the paper's 1,000, or the whole (padded) dimension below it
    assert pj.projunit(epsilon=4.0, dim=100).params.k == 100
    assert pj.fastprojunit(epsilon=4.0, dim=100).params.k == 128
    assert pj.projunit(epsilon=4.0, dim=61_706).params.k == 1000
    with pytest.raises(LdpsimError):
        pj.fastprojunit(epsilon=4.0, dim=48, k=65)


def test_projunit_costs_little_over_privunitg():
    """At the paper's d = 2¹⁵, k = 1,000: ProjUnit's exact worst-case MSE is within
    1 + O(ε/k) of PrivUnitG's (here < 1.05 for ε ≤ 15), FastProjUnit's within 1.05 too; each
    client sends k + 1 floats and a 64-bit seed instead of d + 1 floats."""
    from ldpsim._src.privacy.analysis import frontier as fr

    d = 2**15
    for eps in (1.0, 8.0, 15.0):
        base = pg.constants(epsilon=eps, dim=d)["worst_total_variance"]
        for fast in (False, True):
            m = _m(eps, d, 1000, fast)
            assert 1.0 <= pj.total_variance_formula(m.params, 1.0) / base < 1.05
            assert m.params.floats_sent == 1001 and fr.message_size(m, d) == 1003
    assert fr.message_size(fr.build_mechanism("privunitg", epsilon=1.0, dim=d), d) == d + 1


@pytest.mark.parametrize("fast", [False, True])
def test_log_likelihood_ratio_of_the_worst_pair(fast):
    """The audit's statistic at x1 = C·u, x0 = −10⁻⁶·C·u (d = 64, k = 16): on reports of x1
    it lies in [−ε', ε'] (float32 parameters), takes only the values of the cap sides and the
    norm coin, and its mean is the KL divergence's sign: positive; its exponential's mean
    under x0's reports is 1 up to sampling error (E_{x0}[f1/f0] = 1, 5 s.e.)."""
    d, k, n = 64, 16, 10_000
    m = _m(4.0, d, k, fast)
    u = jnp.asarray(_unit(d, 12), jnp.float32)
    x1, x0 = u, -1e-6 * u
    keys = jax.random.split(jax.random.key(13), n)
    f = jax.jit(jax.vmap(lambda kk, x: pj.log_likelihood_ratio(
        m.privatize(kk, x, m.params).report, m.params, x1, x0), in_axes=(0, None)))
    l1, l0 = np.asarray(f(keys, x1), np.float64), np.asarray(f(keys, x0), np.float64)
    assert np.abs(l1).max() <= m.epsilon * (1 + 1e-6) and l1.mean() > 0
    assert len(np.unique(np.round(l1, 4))) <= 6
    r = np.exp(l0)
    assert abs(r.mean() - 1) <= Z5 * r.std(ddof=1) / math.sqrt(n)


@pytest.mark.slow
def test_frontier_monte_carlo_agrees_with_the_formulas():
    """``ldpsim frontier``'s cell at d = 256, k = 16, ε = 4, one client, 400 trials: the
    measured MSE is within 5 s.e. of each mechanism's exact formula (normal approximation of
    a mean of 400 i.i.d. trials: false-failure rate ~6e-7 per mechanism; FastProjUnit with
    d = d', its formula exact up to the O(1/k) bias, ≤ 2·ρ²·f/(4c) ≈ 0.03 beside an MSE of
    ~600, inside the window)."""
    from ldpsim._src.privacy.analysis import frontier as fr

    for name, mech in [("privunitg", None), ("projunit", _m(4.0, 256, 16, False)),
                       ("fastprojunit", _m(4.0, 256, 16, True))]:
        row = fr.frontier_cell(name, epsilon=4.0, dim=256, clients=1, trials=400, mech=mech)
        assert abs(row.mse - row.mse_theory) <= Z5 * row.mse_se, row
        assert row.floats_sent == (257 if name == "privunitg" else 19)
