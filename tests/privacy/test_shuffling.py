"""Privacy amplification by shuffling: published values, exact small cases, limits, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.accountants import shuffling as sh


# --------------------------------------------------------------------------- published values


def test_reference_implementation_readme_values():
    """apple/ml-shuffling-amplification README (commit 993d285, the authors' code for
    arXiv:2012.12803): n = 1e5, eps0 = 4, delta = 1e-6 -> numerical eps between
    0.1675385583317841 and 0.172790550755978; closed form 0.5378040242374512."""
    eps = float(sh.shuffle_epsilon(1e-6, 4.0, 10**5))
    assert 0.1675385583317841 <= eps <= 0.172790550755978
    assert float(sh.closed_form_epsilon(4.0, 10**5, 1e-6)) == pytest.approx(
        0.5378040242374512, rel=1e-13)


@pytest.mark.parametrize("n, eps0, delta, lower, upper", [
    # The authors' reference implementation run here (numericalanalysis, 30 bisection steps,
    # step=1): its lower and upper bounds bracket the exact divergence ldpsim computes.
    (10**5, 4.0, 1e-6, 0.16976972299480453, 0.17697308111923968),
    (10**4, 1.0, 1e-6, 0.05300519174626192, 0.05556159207050932),
])
def test_bracketed_by_reference_implementation(n, eps0, delta, lower, upper):
    eps = float(sh.shuffle_epsilon(delta, eps0, n))
    assert lower <= eps <= upper
    # The reference's lower bound drops only the unexplored tail: it is within 1e-6.
    assert eps - lower < 1e-6


@pytest.mark.parametrize("n, eps, ref_delta", [
    # deltacomp(n, eps0=1, eps, 1.0, step=1, upperbound=False) of the reference implementation
    # (its lower bound: it omits the Bin(n-1, e^-eps0) mass it did not visit), run here.
    (10**5, 0.015282062488558987, 9.99998284462933e-07),
    (10**6, 0.004334519806915592, 9.999989844345e-07),
])
def test_delta_matches_reference_implementation(n, eps, ref_delta):
    got = float(sh.shuffle_delta(eps, 1.0, n))
    assert ref_delta <= got <= ref_delta * (1 + 1e-5)


@pytest.mark.parametrize("eps0, theirs", [
    # Wang et al.'s independent implementation of the stronger clone (wangsw/
    # PrivacyAmplification@34ca048, unifiedamplification.py: amplificationUBCore with their
    # "strong_clone" parameters alpha = r = 1/(e^eps0 + 1), T = 30), run here: an upper
    # bound from bisection on their own evaluation of the same pair.
    (1.0, 0.09089112654328346),
    (3.0, 0.4937186613678932),
])
def test_stronger_matches_independent_implementation(eps0, theirs):
    n = 2000
    got = float(sh.shuffle_epsilon(0.01 / n, eps0, n, analysis="stronger"))
    assert got <= theirs and got == pytest.approx(theirs, rel=1e-6)


# --------------------------------------------------------------------------- exact small cases


def _pair_delta_bruteforce(eps, eps0, n, p):
    """D_{e^eps}(P||Q) of the clone pair by enumerating every (c, x): a sum of positive
    parts of the joint pmfs, independent of ldpsim's telescoped formula."""
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    total = 0.0
    for c in range(n):
        wc = stats.binom.pmf(c, n - 1, p)
        b = stats.binom.pmf(np.arange(c + 2), c, 0.5)          # b(x), x = 0..c+1
        b_prev = np.concatenate([[0.0], b[:-1]])                 # b(x - 1)
        pc = alpha * b + (1 - alpha) * b_prev
        qc = (1 - alpha) * b + alpha * b_prev
        total += wc * np.maximum(pc - math.exp(eps) * qc, 0.0).sum()
    return total


@pytest.mark.parametrize("analysis", ["clones", "stronger"])
@pytest.mark.parametrize("n, eps0", [(2, 1.0), (17, 0.7), (60, 2.5)])
def test_delta_equals_bruteforce_divergence(analysis, n, eps0):
    p = math.exp(-eps0) if analysis == "clones" else 2 / (math.exp(eps0) + 1)
    eps = np.array([0.0, 0.05, 0.3, 0.9 * eps0])
    got = sh.shuffle_delta(eps, eps0, n, analysis=analysis)
    want = np.array([_pair_delta_bruteforce(e, eps0, n, p) for e in eps])
    assert np.all(got >= want - 1e-15)               # an upper bound ...
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-14)   # ... and exact


@pytest.mark.parametrize("delta", [1e-10, 1e-14])
def test_tiny_delta_still_exact(delta):
    """The telescoped difference A F(t) - B F(t-1) cancels; with its rounding margin it
    stays an upper bound and agrees with the sum of positive terms at tiny delta."""
    n, eps0 = 400, 1.0
    eps = float(sh.shuffle_epsilon(delta, eps0, n))
    got = float(sh.shuffle_delta(eps, eps0, n))
    want = _pair_delta_bruteforce(eps, eps0, n, math.exp(-eps0))
    assert want <= got <= delta
    assert got == pytest.approx(want, rel=1e-9)


def _binary_rr_shuffled_delta(eps, eps0, n):
    """Exact delta of n shuffled binary randomized responses (the analyst sees the count of
    ones), worst case over the others' inputs, by direct convolution."""
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    worst = 0.0
    for ones in range(n):                      # how many of the other n-1 hold a 1
        others = np.convolve(stats.binom.pmf(np.arange(ones + 1), ones, alpha),
                             stats.binom.pmf(np.arange(n - ones), n - 1 - ones, 1 - alpha))
        k0 = np.convolve(others, [alpha, 1 - alpha])   # target holds 0: reports 1 w.p. 1-alpha
        k1 = np.convolve(others, [1 - alpha, alpha])
        for a, b in ((k0, k1), (k1, k0)):
            worst = max(worst, np.maximum(a - math.exp(eps) * b, 0).sum())
    return worst


@pytest.mark.parametrize("n, eps0", [(20, 1.0), (50, 2.0)])
def test_binary_randomized_response_below_both_bounds(n, eps0):
    """Binary RR qualifies for the stronger clone; its exact shuffled delta is below the
    stronger bound, which is below the 2021 bound."""
    for eps in (0.1, 0.5, 0.8 * eps0):
        exact = _binary_rr_shuffled_delta(eps, eps0, n)
        stronger = float(sh.shuffle_delta(eps, eps0, n, analysis="stronger"))
        clones = float(sh.shuffle_delta(eps, eps0, n))
        assert exact <= stronger + 1e-15 <= clones + 2e-15
        assert exact > 0


def test_one_client_is_randomized_response():
    """n = 1: the pair is eps0-randomized response: delta(eps) = alpha - e^eps (1 - alpha)."""
    eps0 = 1.3
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    eps = np.linspace(0, eps0, 7)
    want = np.maximum(alpha - np.exp(eps) * (1 - alpha), 0)
    np.testing.assert_allclose(sh.shuffle_delta(eps, eps0, 1), want, rtol=1e-12, atol=1e-15)
    deltas = np.array([1e-2, 1e-6, 1e-10])
    got = sh.shuffle_epsilon(deltas, eps0, 1)
    want_eps = eps0 + np.log1p(-deltas / alpha)              # solve alpha(1 - e^{eps-eps0})
    np.testing.assert_allclose(got, want_eps, rtol=0, atol=1e-9)
    assert np.all(got <= eps0)


# --------------------------------------------------------------------------- properties


def test_monotone_and_ordered():
    eps0, n = 2.0, 5000
    eps = np.linspace(0, eps0, 25)
    d = sh.shuffle_delta(eps, eps0, n)
    assert np.all(np.diff(d) <= 0) and d[-1] == 0
    deltas = np.logspace(-12, -2, 6)
    e = sh.shuffle_epsilon(deltas, eps0, n)
    assert np.all(np.diff(e) <= 0)                  # larger delta, smaller epsilon
    # delta(eps(delta)) <= delta: the returned epsilon holds.
    assert np.all(sh.shuffle_delta(e, eps0, n) <= deltas)
    es = sh.shuffle_epsilon(deltas, eps0, n, analysis="stronger")
    assert np.all(es <= e)
    assert np.all(e <= sh.closed_form_epsilon(eps0, n, deltas))
    by_n = [float(sh.shuffle_epsilon(1e-6, eps0, m)) for m in (1, 10, 100, 10**3, 10**4)]
    assert all(a > b for a, b in zip(by_n, by_n[1:])) and by_n[0] <= eps0


def test_large_n_rate():
    """eps = O((1 - e^{-eps0}) sqrt(e^{eps0} log(1/delta) / n)) (arXiv:2012.12803, abstract):
    eps / that scale stays of order one and settles as n grows 100-fold (it falls as the
    lower-order e^{eps0}/n term and the log(1 + x) curvature fade)."""
    eps0, delta = 1.0, 1e-6

    def ratio(n):
        scale = (1 - math.exp(-eps0)) * math.sqrt(math.exp(eps0) * math.log(1 / delta) / n)
        return float(sh.shuffle_epsilon(delta, eps0, n)) / scale

    r4, r5, r6 = ratio(10**4), ratio(10**5), ratio(10**6)
    assert 0.5 < r6 < r5 < r4 < 2.0
    assert r6 / r4 > 0.75                          # eps ∝ 1/sqrt(n) to within 25%


def test_blocks_of_clone_counts_stay_an_upper_bound():
    """Beyond max_c clone counts, blocks take their smallest c: never below the exact sum."""
    eps0, n = 1.0, 10**5
    p = math.exp(-eps0)
    eps = np.array([0.005, 0.01, 0.02])
    exact = sh._delta_of(eps, eps0, n, p)
    sh._clone_counts.cache_clear()
    try:
        c, w, below, above = sh._clone_counts(n, p, 200)
        assert c.size <= 200 and w.sum() + below + above == pytest.approx(1.0, abs=1e-12)
        d = sh._delta_given_c(eps, eps0, c)
        blocked = d @ w + below + above * d[:, -1]
    finally:
        sh._clone_counts.cache_clear()
    assert np.all(blocked >= exact) and np.allclose(blocked, exact, rtol=0.05)


def test_report_and_vectorised_shapes():
    rep = sh.shuffle_report(1.0, 1000, 1e-6)
    assert rep.epsilon == pytest.approx(float(sh.shuffle_epsilon(1e-6, 1.0, 1000)))
    assert rep.epsilon0 == 1.0 and "replace one" in rep.neighbouring
    assert sh.shuffle_delta(np.zeros((2, 3)), 1.0, 10).shape == (2, 3)
    assert sh.shuffle_epsilon(np.full((3, 1), 1e-5), 1.0, 10).shape == (3, 1)


def test_stronger_clone_condition():
    eps0 = 1.5
    for k in (2, 3, 10):
        e = math.exp(eps0)
        rr = np.full((k, k), 1 / (e + k - 1)) + np.eye(k) * (e - 1) / (e + k - 1)
        assert sh.stronger_clone_applies(rr, eps0)
    # log(3)-DP, but two inputs put their most likely output where a third is least likely.
    bad = np.array([[0.75, 0.25], [0.75, 0.25], [0.25, 0.75]])
    assert not sh.stronger_clone_applies(bad, math.log(3))
    assert not sh.stronger_clone_applies(np.array([[0.9, 0.1], [0.1, 0.9]]), 1.0)  # not 1-DP


# --------------------------------------------------------------------------- rounds (PLD)


def test_pld_of_one_round_matches_exact_epsilon():
    for eps0, n in ((4.0, 10**5), (1.0, 1000), (0.5, 3)):
        exact = float(sh.shuffle_epsilon(1e-6, eps0, n))
        pld = sh.shuffle_pld(eps0, n).get_epsilon_for_delta(1e-6)
        assert exact - 1e-9 <= pld <= exact * (1 + 1e-3) + 1e-9   # pessimistic, grid-close


@pytest.mark.parametrize("rounds", [1, 10])
def test_pld_of_one_client_is_randomized_response(rounds):
    """n = 1: the pair is eps0-RR, whose PLD dp_accounting builds itself."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    eps0 = 2.0
    rr = pld_lib.from_randomized_response(noise_parameter=2 / (math.exp(eps0) + 1),
                                          num_buckets=2, value_discretization_interval=1e-4)
    want = rr.self_compose(rounds).get_epsilon_for_delta(1e-6)
    got = sh.shuffle_rounds_epsilon(eps0, 1, rounds, 1e-6)
    assert got == pytest.approx(want, rel=1e-6)


def test_rounds_compose_below_basic_composition():
    eps0, n, delta = 1.0, 2000, 1e-6
    by_rounds = [sh.shuffle_rounds_epsilon(eps0, n, t, delta) for t in (0, 1, 4, 16)]
    assert by_rounds[0] == 0.0
    assert all(a < b for a, b in zip(by_rounds, by_rounds[1:]))
    # Basic composition of 16 rounds at delta/16 each is a valid, looser answer.
    assert by_rounds[-1] < 16 * float(sh.shuffle_epsilon(delta / 16, eps0, n))
    stronger = sh.shuffle_rounds_epsilon(eps0, n, 16, delta, analysis="stronger")
    assert stronger < by_rounds[-1]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("call, word", [
    (lambda: sh.shuffle_epsilon(1e-6, 0.0, 10), "epsilon0"),
    (lambda: sh.shuffle_epsilon(1e-6, float("nan"), 10), "epsilon0"),
    (lambda: sh.shuffle_epsilon(1e-6, 1e4, 10), "epsilon0"),
    (lambda: sh.shuffle_epsilon(1e-6, 1.0, 0), "clients"),
    (lambda: sh.shuffle_epsilon(1e-6, 1.0, 2.5), "clients"),
    (lambda: sh.shuffle_epsilon(0.0, 1.0, 10), "delta"),
    (lambda: sh.shuffle_epsilon([1e-6, 1.0], 1.0, 10), "delta"),
    (lambda: sh.shuffle_delta(-0.1, 1.0, 10), "epsilon"),
    (lambda: sh.shuffle_delta(0.1, 1.0, 10, analysis="closed_form"), "closed_form"),
    (lambda: sh.shuffle_epsilon(1e-6, 1.0, 10, analysis="blanket"), "analysis"),
    (lambda: sh.closed_form_epsilon(4.0, 1000, 1e-6), "log(n / (16 log(4/delta)))"),
    (lambda: sh.stronger_clone_applies(np.array([[0.5, 0.6], [0.5, 0.5]]), 1.0), "sum to 1"),
    (lambda: sh.shuffle_rounds_epsilon(1.0, 10, -1, 1e-6), "rounds"),
    (lambda: sh.shuffle_pld(1.0, 10, value_discretization_interval=2.0), "interval"),
])
def test_bad_input(call, word):
    with pytest.raises(LdpsimError, match=None) as err:
        call()
    assert word in str(err.value)
