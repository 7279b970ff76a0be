"""The discrete randomizers' float32 realisations (SignDS, k-RR, Duchi et al.'s coin): the
guarantee printed is that of the exact law that runs.

Each law is rebuilt here from the integers the mechanism ships to the device (its cut and
thresholds words) and enumerated with exact fractions; logarithms are taken with mpmath at
60 digits, independent of ldpsim's own host arithmetic. The statistical checks use fixed
keys with chi-square p-value > 1e-6 or 5-standard-error windows (false-failure rate below
1e-6 each under the null; fewer than 20 such checks here).
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import special, stats

from ldpsim._src.privacy.randomizers import duchi, mechanism, rr, signds

mpmath.mp.dps = 60
EPS = (1.0, 4.0, 8.0, 16.0, 20.0, 30.0, 100.0)


def _int(words) -> int:
    """uint32 words (most significant first) -> integer (independent of rr.int_of)."""
    out = 0
    for w in np.asarray(words).reshape(-1).tolist():
        out = out * 2**32 + int(w)
    return out


def _ln(x: Fraction) -> mpmath.mpf:
    return mpmath.log(mpmath.mpf(x.numerator)) - mpmath.log(mpmath.mpf(x.denominator))


def _check_pure(ratio: Fraction, mech, eps: float, tight: float | None):
    """ln(ratio) <= the printed ε (= the requested ε), within ``tight`` of it if given; the
    mechanism states pure DP, its ideal ε and its realisation."""
    loss = _ln(ratio)
    assert mech.epsilon == eps and mech.ideal_epsilon == eps
    assert loss <= mpmath.mpf(mech.epsilon)
    if tight is not None:
        assert loss >= mpmath.mpf(eps) * (1 - tight)
    assert mech.delta == 0.0 and mech.tail_mass == 0.0 and mech.tail_scale == 1.0
    assert mech.realisation and "eps'" in mech.realisation


# ----------------------------------------------------------------------------- SignDS


def _signds_counts(mech) -> tuple[list[int], int]:
    """The grid counts m_j of ν = 0..min(h, k) and the grid size, from the thresholds."""
    th = np.asarray(mech.params.thresholds)
    total = 2 ** (32 * th.shape[1])
    cum = [0] + [_int(t) for t in th] + [total]
    return [b - a for a, b in zip(cum[:-1], cum[1:])], total


def _old_float32_counts(k, d, h, thr, eps):
    """The previous sampler's law of ν: ν = #{j < h : u ≥ cdf_j} for the float32 CDF and
    jax.random.uniform's float32 u, a multiple of 2^-23: P(ν ≥ j) = #{m : m·2^-23 ≥ cdf_{j−1}}/2^23."""
    cdf = np.cumsum(signds.pmf(thr, k, d, h, eps)).astype(np.float32)
    grid = 2**23
    at_least = [grid] + [max(grid - math.ceil(Fraction(float(c)) * grid), 0) for c in cdf[:-1]] + [0]
    counts = [a - b for a, b in zip(at_least[:-1], at_least[1:])]
    top = min(h, k)                                 # ν was clamped to min(h, k)
    return counts[:top] + [sum(counts[top:])], grid


def _worst_ratio_by_count(counts, total, k, d, h) -> Fraction | None:
    """max over two top-k sets and one index set of P(S | T)/P(S | T'), from the per-count
    probabilities (None: a feasible count has probability 0, no finite ratio)."""
    w = []
    for nu in range(max(0, h - (d - k)), min(h, k) + 1):
        if counts[nu] == 0:
            return None
        w.append(Fraction(counts[nu], total * math.comb(k, nu) * math.comb(d - k, h - nu)))
    return max(w) / min(w)


SMALL = [(6, 0.25, 2), (8, 0.25, 3), (12, 0.25, 0), (10, 0.2, 4)]   # (d, sign_k, sign_dim_out)


@pytest.mark.parametrize("d,sign_k,dim_out", SMALL)
@pytest.mark.parametrize("eps", EPS)
def test_signds_exact_enumeration_of_index_sets(d, sign_k, dim_out, eps):
    """Every index set S and every top-k set T (all k-subsets: T_b(Δ) takes each for some
    update): P(S | T) = P(ν = |S ∩ T|)/#{S' : |S' ∩ T| = ν}, the number counted by brute
    force; the law sums to 1 exactly and its worst ratio is within the printed ε."""
    mech = mechanism.make("signds", dim=d, sign_k=sign_k, sign_eps=eps, sign_dim_out=dim_out)
    k, h = mech.params.k, mech.params.h
    counts, total = _signds_counts(mech)
    assert sum(counts) == total and len(counts) == min(h, k) + 1
    sets = list(itertools.combinations(range(d), h))
    tops = [set(t) for t in itertools.combinations(range(d), k)]
    same = {}                                   # overlap -> number of sets with it (T fixed)
    for s in sets:
        nu = len(tops[0] & set(s))
        same[nu] = same.get(nu, 0) + 1
    assert sum(Fraction(counts[nu], total) for nu in same) == 1
    worst = Fraction(1)
    for s in sets:
        overlaps = {len(t & set(s)) for t in tops}
        probs = [Fraction(counts[nu], total * same[nu]) for nu in overlaps]
        assert min(probs) > 0                  # no feasible count is unreachable
        worst = max(worst, max(probs) / min(probs))
    # tight while the grid resolves the law (at ε = 100 the rare counts get 2^-128 > e^-100:
    # more private than asked)
    _check_pure(worst, mech, eps, tight=1e-6 if eps <= 30 else None)
    assert float(_ln(worst)) <= signds.realised_epsilon(mech.params.threshold, k, d, h, eps) + 1e-12


@pytest.mark.parametrize("d", [1000, 61_706, 1_000_000])
@pytest.mark.parametrize("eps", EPS)
def test_signds_realised_law_at_real_sizes(d, eps):
    """MindSpore's defaults (sign_k = 0.01, h and ν_th from its searches): the realised law's
    worst ratio (per count; the enumeration above shows it is the index sets' ratio) is within
    the printed ε and tight; the previous float32 CDF had no finite ratio from ε = 30 and
    exceeded ε at 16 and 20 (d = 1000)."""
    mech = mechanism.make("signds", dim=d, sign_eps=eps)
    k, h, thr = mech.params.k, mech.params.h, mech.params.threshold
    counts, total = _signds_counts(mech)
    assert sum(counts) == total
    worst = _worst_ratio_by_count(counts, total, k, d, h)
    _check_pure(worst, mech, eps, tight=1e-12)
    expected = Fraction(sum(j * m for j, m in enumerate(counts)), total)
    assert float(mech.params.expected) == pytest.approx(float(expected), rel=1e-6)
    if d == 1000 and eps in (16.0, 20.0, 30.0, 100.0):      # the bug this replaces
        old = _old_float32_counts(k, d, h, thr, eps)
        ratio = _worst_ratio_by_count(*old, k, d, h)
        assert ratio is None or _ln(ratio) > eps


@pytest.mark.parametrize("eps", [1.0, 100.0])
def test_signds_mindspore_unit_test_size(eps):
    """d = 800,000, sign_k = 0.2 (MindSpore's own test, h in [40, 70]): k = 160,000."""
    mech = mechanism.make("signds", dim=800_000, sign_k=0.2, sign_eps=eps)
    counts, total = _signds_counts(mech)
    worst = _worst_ratio_by_count(counts, total, mech.params.k, 800_000, mech.params.h)
    _check_pure(worst, mech, eps, tight=1e-12)


def _chisquare(observed, expected_p, n):
    """Chi-square p-value with bins of expected count < 5 merged into their neighbour."""
    obs, exp = [], []
    o_acc = e_acc = 0.0
    for o, p in zip(observed, expected_p):
        o_acc, e_acc = o_acc + o, e_acc + n * p
        if e_acc >= 5:
            obs.append(o_acc), exp.append(e_acc)
            o_acc = e_acc = 0.0
    if e_acc or o_acc:
        if not exp:
            return 1.0 if o_acc == e_acc else 0.0
        obs[-1] += o_acc
        exp[-1] += e_acc
    if len(obs) < 2:
        return 1.0
    return stats.chisquare(obs, exp).pvalue


def _sampled_counts(mech, x, n, seed):
    """ν = |S ∩ T_b| of n jit(vmap) reports of x."""
    p = mech.params
    masks = {b: np.zeros(p.dim, bool) for b in (1.0, -1.0)}
    for b in masks:
        masks[b][np.asarray(jax.lax.top_k(b * x, p.k)[1])] = True
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))
    rep = jax.jit(jax.vmap(lambda key: mech.privatize(key, x, p).report))(keys)
    idx, sign = np.asarray(rep["indices"]), np.asarray(rep["sign"])
    nu = np.where(sign > 0, masks[1.0][idx].sum(1), masks[-1.0][idx].sum(1))
    assert np.all(np.diff(idx, axis=1) > 0)                   # h distinct sorted indices
    return nu, idx, sign


@pytest.mark.slow   # 10-25 CPU s of compilation each; the d = 8 test below is the fast tier's
@pytest.mark.parametrize("d,eps,n", [(1000, 16.0, 20_000), (200, 4.0, 20_000), (61_706, 100.0, 2_000)])
def test_signds_sampled_counts_follow_the_realised_law(d, eps, n):
    """Chi-square of the sampled ν against the exact realised law (p > 1e-6)."""
    kw = dict(sign_k=0.05, sign_dim_out=6) if d == 200 else {}
    mech = mechanism.make("signds", dim=d, sign_eps=eps, **kw)
    x = jax.random.normal(jax.random.key(5), (d,))
    nu, _, sign = _sampled_counts(mech, x, n, seed=3)
    counts, total = _signds_counts(mech)
    law = [m / total for m in counts]
    assert _chisquare(np.bincount(nu, minlength=len(law)), law, n) > 1e-6
    assert abs(np.mean(sign > 0) - 0.5) <= 5 * math.sqrt(0.25 / n)


def test_signds_index_sets_are_exactly_uniform_given_the_count():
    """d = 8, k = 2, h = 3: the 56 sets × 2 signs of 60,000 reports against the exact law
    ½·P(ν)/(C(k,ν)C(d−k,h−ν)) (chi-square p > 1e-6): Floyd's selection is uniform; and ν
    against its realised law."""
    d, n = 8, 60_000
    mech = mechanism.make("signds", dim=d, sign_k=0.25, sign_eps=2.0, sign_dim_out=3)
    k, h = mech.params.k, mech.params.h
    x = jnp.array([0.3, -1.2, 0.5, 2.0, -0.1, 0.9, -0.7, 0.05])
    nu, idx, sign = _sampled_counts(mech, x, n, seed=4)
    counts, total = _signds_counts(mech)
    assert _chisquare(np.bincount(nu, minlength=len(counts)), [m / total for m in counts], n) > 1e-6
    tops = {b: set(np.asarray(jax.lax.top_k(b * x, k)[1]).tolist()) for b in (1.0, -1.0)}
    outcomes = [(s, b) for s in itertools.combinations(range(d), h) for b in (1.0, -1.0)]
    law = []
    for s, b in outcomes:
        nu = len(set(s) & tops[b])
        law.append(0.5 * counts[nu] / total / (math.comb(k, nu) * math.comb(d - k, h - nu)))
    assert sum(law) == pytest.approx(1.0, abs=1e-12)
    where = {o: i for i, o in enumerate(outcomes)}
    observed = np.bincount([where[(tuple(r), float(b))] for r, b in zip(idx.tolist(), sign)],
                           minlength=len(outcomes))
    assert stats.chisquare(observed, n * np.array(law)).pvalue > 1e-6


# ------------------------------------------------------------------------------- k-RR


@pytest.mark.parametrize("k", [2, 3, 10, 1000])
@pytest.mark.parametrize("eps", EPS)
def test_rr_exact_law_and_event(k, eps):
    """The law from the shipped cut: keep (2^{32W} − c)/2^{32W}, each other c/((k−1)2^{32W})
    (exactly uniform: rejection); every ratio over two inputs within the printed ε, tight;
    the accounting event's noise parameter at most k·q' (a weakly less private event)."""
    mech = rr.make(epsilon=eps, k=k)
    cut = np.asarray(mech.params.cut)
    total = 2 ** (32 * cut.size)
    c = _int(cut)
    keep, other = Fraction(total - c, total), Fraction(c, total * (k - 1))
    laws = [[keep if y == x else other for y in range(k)] for x in range(min(k, 4))]
    assert all(sum(row) == 1 for row in laws)
    worst = max(a[y] / b[y] for a in laws for b in laws for y in range(k))
    _check_pure(worst, mech, eps, tight=1e-12)
    assert Fraction(mech.dp_event(mech.params).noise_parameter) <= k * other
    assert float(mech.params.keep) == pytest.approx(float(keep), rel=1e-7)
    np.testing.assert_allclose(rr.realised_probabilities(eps, k, 1)[:3],
                               [float(other), float(keep), float(other)][:k], rtol=1e-15)


@pytest.mark.parametrize("k,eps", [(7, 1.0), (3, 0.3)])
def test_rr_sampler_follows_the_exact_law(k, eps):
    """Chi-square of 70,000 draws (the rejection path: k − 1 is not a power of 2)."""
    n = 70_000
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(8), i))(jnp.arange(n))
    y = np.asarray(jax.jit(jax.vmap(lambda key: rr.k_randomized_response(key, 1, k=k, epsilon=eps)))(keys))
    assert stats.chisquare(np.bincount(y, minlength=k), n * rr.realised_probabilities(eps, k, 1)).pvalue > 1e-6
    mech = rr.make(epsilon=eps, k=k)                # the mechanism's path: same law
    rep = jax.jit(jax.vmap(lambda key: mech.privatize(key, 1, mech.params).report))(keys)
    assert stats.chisquare(np.bincount(np.asarray(rep), minlength=k),
                           n * rr.realised_probabilities(eps, k, 1)).pvalue > 1e-6


def test_rr_traced_epsilon_is_the_float32_cut():
    """A traced ε (float32 cut on a 64-bit grid): the law within float32 rounding of k-RR."""
    k, eps, n = 5, 3.0, 60_000
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(9), i))(jnp.arange(n))
    y = np.asarray(jax.jit(jax.vmap(lambda key, e: rr.k_randomized_response(key, 0, k=k, epsilon=e),
                                    in_axes=(0, None)))(keys, eps))
    ideal = np.full(k, 1.0 / (math.exp(eps) + k - 1))
    ideal[0] = math.exp(eps) / (math.exp(eps) + k - 1)
    assert stats.chisquare(np.bincount(y, minlength=k), n * ideal).pvalue > 1e-6
    cut = np.asarray(rr._traced_cut(jnp.float32(eps), k))
    q32 = np.float32(k - 1) * np.exp(-np.float32(eps))
    assert _int(cut) / 2.0**64 == pytest.approx(float(q32 / (1 + q32)), rel=1e-6)


def test_rr_huge_epsilon_is_refused_and_exact_below():
    from ldpsim._src._checks import LdpsimError

    with pytest.raises(LdpsimError, match="epsilon must be <= 700 for rr"):
        rr.make(epsilon=701.0, k=3)
    mech = rr.make(epsilon=700.0, k=3)
    c = _int(np.asarray(mech.params.cut))
    assert c >= 1 and mech.epsilon == 700.0


# ------------------------------------------------------------------------------ Duchi


@pytest.mark.parametrize("eps", EPS)
def test_duchi_exact_realised_epsilon(eps):
    """The side's probability a(1 − ρ) + (1 − a)ρ over any realised a ∈ [0, 1] and both sides:
    the worst ratio is (1 − ρ)/ρ with ρ = c/2^{32W} from the shipped cut."""
    mech = mechanism.make("duchi", epsilon=eps, dim=10)
    cut = np.asarray(mech.params.cut)
    rho = Fraction(_int(cut), 2 ** (32 * cut.size))
    a_grid = [Fraction(i, 64) for i in range(65)]
    sides = [a * (1 - rho) + (1 - a) * rho for a in a_grid] + [a * rho + (1 - a) * (1 - rho) for a in a_grid]
    _check_pure(max(sides) / min(sides), mech, eps, tight=1e-12)
    assert mech.dp_event(mech.params).noise_parameter == pytest.approx(2 / (math.exp(eps) + 1), rel=1e-12)


@functools.lru_cache(maxsize=None)
def _duchi_reports(d: int):
    """jit(vmap) over keys of Duchi's report, params an argument (one compile per d)."""
    return jax.jit(jax.vmap(lambda key, x, p: duchi.privatize(key, x, p).report, in_axes=(0, None, None)))


def _keys(seed: int, n: int):
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))


@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_duchi_sampled_side_follows_the_realised_coin(eps):
    """x = C·e₁: the report lands on e₁'s side with probability 1 − ρ; x = 0: ½ (5 SE)."""
    n, d = 40_000, 10
    mech = mechanism.make("duchi", epsilon=eps, dim=d)
    cut = np.asarray(mech.params.cut)
    rho = _int(cut) / 2.0 ** (32 * cut.size)
    for x, p in ((jnp.eye(d)[0], 1 - rho), (jnp.zeros(d), 0.5)):
        frac = float(np.mean(np.asarray(_duchi_reports(d)(_keys(6, n), x, mech.params))[:, 0] > 0))
        assert abs(frac - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def _radius_reference(eps: float, d: int, c: float = 1.0) -> float:
    """B = C·(e^ε + 1)/(e^ε − 1)·√π·Γ((d−1)/2 + 1)/Γ(d/2) (Duchi, Jordan & Wainwright 2018,
    §4.2.3), in log space."""
    return c * (math.exp(eps) + 1) / math.expm1(eps) * math.exp(
        0.5 * math.log(math.pi) + special.gammaln((d - 1) / 2 + 1) - special.gammaln(d / 2))


@pytest.mark.parametrize("eps,d", [(2.0, 10), (1.0, 3), (8.0, 61_706)])
def test_duchi_noise_std_is_the_worst_case_over_the_ball(eps, d):
    """Total variance B² − ‖x‖² (``variance``) over a grid of norms is largest at x = 0, where
    it equals noise_std²·d = B² (the previous value used ‖x‖ = C: B² − C²)."""
    mech = mechanism.make("duchi", epsilon=eps, dim=d)
    b = _radius_reference(eps, d)
    assert float(mech.params.bound) == pytest.approx(b, rel=1e-6)
    e1 = jnp.eye(d)[0] if d < 1000 else jnp.zeros(d).at[0].set(1.0)
    totals = [float(jnp.sum(mech.variance(mech.params, r * e1))) for r in np.linspace(0, 1, 21)]
    assert max(totals) == pytest.approx(totals[0], rel=1e-6)
    assert float(mech.noise_std(mech.params)) ** 2 * d == pytest.approx(b * b, rel=1e-5)
    assert float(mech.noise_std(mech.params)) ** 2 * d >= max(totals) * (1 - 1e-6)


def test_duchi_noise_std_against_monte_carlo():
    """ε = 2, d = 10: E‖decode − x‖² at ‖x‖ = 0, 0.7, 1 by 40,000 reports each (5 SE) is
    B² − ‖x‖² (25.76, 25.27, 24.76), all at most noise_std²·d = 25.76."""
    eps, d, n = 2.0, 10, 40_000
    mech = mechanism.make("duchi", epsilon=eps, dim=d)
    b2 = _radius_reference(eps, d) ** 2
    worst = float(mech.noise_std(mech.params)) ** 2 * d
    b = float(mech.params.bound)
    for r in (0.0, 0.7, 1.0):
        x = jnp.zeros(d).at[1].set(r)
        rep = np.asarray(_duchi_reports(d)(_keys(12, n), x, mech.params), np.float64)
        err = np.sum(np.square(b * rep - np.asarray(x, np.float64)), axis=1)
        tol = 5 * err.std() / math.sqrt(n) + 1e-5 * b2      # + float32 rounding of the report
        assert abs(err.mean() - (b2 - r * r)) <= tol
        assert err.mean() <= worst + tol
    assert worst == pytest.approx(b2, rel=1e-5)
