"""Accounting of the distributed discrete Gaussian and Skellam mechanisms, checked independently:
numerical Rényi divergences of the exact discrete laws (convolutions of exact pmfs, scipy's
Skellam pmf), the continuous limit against dp_accounting's Gaussian, and the wrap bound's
closed form."""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import special, stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.discrete import accounting as A


def _dg_logpmf(sigma, grid):
    logw = -grid.astype(float) ** 2 / (2 * sigma**2)
    return logw - special.logsumexp(logw)


def _log_convolve(la, lb, offset_a, offset_b):
    """log of the convolution of two pmfs given as logs on integer grids starting at offsets."""
    n = len(la) + len(lb) - 1
    out = np.full(n, -np.inf)
    for i, v in enumerate(la):
        out[i:i + len(lb)] = np.logaddexp(out[i:i + len(lb)], v + lb)
    return out, offset_a + offset_b


def _renyi(logp, logq, alpha):
    """D_α(P‖Q) for pmfs on the same grid (log-domain, exact up to float64 rounding)."""
    return float(special.logsumexp(alpha * logp + (1 - alpha) * logq)) / (alpha - 1)


@pytest.mark.parametrize("sigma", [0.5, 0.8, 1.5])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_ddg_bound_holds_for_exact_sum_of_discrete_gaussians(sigma, n):
    alphas = [1.5, 2.0, 4.0, 8.0]
    shifts = [1, 2, 3]
    half = int(2 * max(alphas) * max(shifts) + 60 * sigma * math.sqrt(n) + 20)
    grid = np.arange(-half, half + 1)
    one = _dg_logpmf(sigma, grid)
    logp, off = one, -half
    for _ in range(n - 1):
        logp, off = _log_convolve(logp, one, off, -half)
    for delta in shifts:
        # Q = law of S + Δ on the same grid (pad both by Δ)
        p = np.concatenate([logp, np.full(delta, -np.inf)])
        q = np.concatenate([np.full(delta, -np.inf), logp])
        keep = np.isfinite(p) & np.isfinite(q)
        for a in alphas:
            exact = _renyi(p[keep], q[keep], a)
            bound = float(A.ddg_rdp([a], l2=delta, l1=delta, sigma=sigma, summands=n, dim=1)[0])
            assert exact <= bound * (1 + 1e-9) + 1e-12, (sigma, n, delta, a, exact, bound)
            # and the bound is not vacuous: within 2x + τ of the exact value here
            assert bound <= 2 * exact + A.ddg_tau(sigma, n) + 1e-9


@pytest.mark.parametrize("mu", [1.0, 4.0, 25.0])
def test_skellam_bound_holds_for_exact_skellam(mu):
    half = 400
    grid = np.arange(-half, half + 1)
    logp = stats.skellam.logpmf(grid, mu / 2, mu / 2)
    for delta in (1, 2, 3):
        p = np.concatenate([logp, np.full(delta, -np.inf)])
        q = np.concatenate([np.full(delta, -np.inf), logp])
        keep = np.isfinite(p) & np.isfinite(q)
        for a in (2, 3, 5, 10):
            exact = _renyi(p[keep], q[keep], a)
            bound = float(A.skellam_rdp([a], l2=delta, l1=delta, variance=mu)[0])
            assert exact <= bound * (1 + 1e-9), (mu, delta, a, exact, bound)


def test_continuous_limit_matches_dp_accounting_gaussian():
    sigma, n, l2, rounds, delta = 40.0, 100, 300.0, 50, 1e-5
    orders = list(A.DDG_ORDERS)
    rdp = A.ddg_rdp(orders, l2=l2, l1=l2 * 30, sigma=sigma, summands=n, dim=1000)
    ours = A.rdp_to_epsilon(orders, rounds * rdp, delta)
    acc = dp_accounting.rdp.RdpAccountant(orders)
    acc.compose(dp_accounting.GaussianDpEvent(math.sqrt(n) * sigma / l2), rounds)
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
    # Skellam of the same variance approaches the same Gaussian (integer orders only)
    so = [o for o in A.SKELLAM_ORDERS]
    sk = A.rdp_to_epsilon(so, rounds * A.skellam_rdp(so, l2=l2, l1=l2 * 30, variance=n * sigma**2),
                          delta)
    acc2 = dp_accounting.rdp.RdpAccountant(so)
    acc2.compose(dp_accounting.GaussianDpEvent(math.sqrt(n) * sigma / l2), rounds)
    assert sk == pytest.approx(acc2.get_epsilon(delta), rel=2e-2)
    assert sk >= acc2.get_epsilon(delta)


def test_rounding_norm_bound_formula():
    c, dim, beta = 300.0, 65_536, 2.0**-20
    paper = math.sqrt(c * c + dim / 4 + math.sqrt(2 * math.log(1 / beta)) * (c + math.sqrt(dim) / 2))
    got = A.rounding_norm_bound(c, dim, beta)
    eta = (dim + 3) * 2.0**-24 / (1 - (dim + 3) * 2.0**-24)
    assert paper < got < paper * math.sqrt((1 + eta) / (1 - eta)) * (1 + 1e-6)
    assert A.rounding_norm_bound(1.0, 4, 0.0) == pytest.approx(3.0, rel=1e-3)   # c + √D
    # the threshold proves the bound: threshold/(1 − η) ≤ Δ²
    thr = A.norm_check_threshold(got, dim)
    assert thr / (1 - A.norm_check_slack(dim)) <= got * got


def test_integer_sensitivities():
    assert A.integer_sensitivity(10.0, 4, "add-remove") == (10.0, 20.0)     # √4·10 < 100
    assert A.integer_sensitivity(10.0, 4, "replace") == (20.0, 40.0)
    assert A.integer_sensitivity(1.5, 10_000, "replace") == (3.0, 4.0)      # 2⌊Δ²⌋ = 4


def test_wrap_probability_closed_form_for_discrete_gaussian():
    m = A.DiscreteMechanism("ddg", 1.0, 1e-3, 20.0, 100, 5000, bits=18)
    var = m.clients * 20.0**2          # the table's σ: N_Z(0, σ²) is σ²-sub-Gaussian
    v = (m.clients * m.scaled_clip) ** 2 / m.padded_dim + m.clients / 4
    big_m = 2.0**17
    ref = 2 * m.padded_dim * (1 - m.beta) ** (-m.clients) * math.exp(-big_m**2 / (2 * (v + var)))
    assert A.wrap_probability(m) == pytest.approx(ref, rel=1e-6)
    fewer = A.DiscreteMechanism("ddg", 1.0, 1e-3, 20.0, 100, 5000, bits=16)
    assert A.wrap_probability(fewer) > A.wrap_probability(m)
    tiny = A.DiscreteMechanism("ddg", 1.0, 1e-3, 20.0, 100, 5000, bits=8)
    assert A.wrap_probability(tiny) == 1.0
    with pytest.raises(LdpsimError, match="bits = 8 too small"):
        A.check_wrap(tiny)
    assert A.check_wrap(m) == A.wrap_probability(m)


def test_dropout_and_rounds_compose():
    m = A.DiscreteMechanism("ddg", 1.0, 1e-2, 60.0, 50, 100)
    full = A.discrete_epsilon(m, 1e-5, rounds=3)
    dropped = A.discrete_epsilon(m, 1e-5, rounds=3, survivors=[50, 40, 30])
    assert dropped > full
    o, r50 = A.discrete_rdp(m, 50)
    _, r30 = A.discrete_rdp(m, 30)
    _, r40 = A.discrete_rdp(m, 40)
    assert dropped == pytest.approx(A.rdp_to_epsilon(o, r50 + r40 + r30, 1e-5 * (1 - 1e-6)))


def test_bad_input_is_refused():
    with pytest.raises(LdpsimError, match="bits"):
        A.DiscreteMechanism("ddg", 1.0, 1e-3, 5.0, 10, 100, bits=40)
    with pytest.raises(LdpsimError, match="too fine"):
        A.DiscreteMechanism("ddg", 1.0, 1e-10, 5.0, 10, 100)
    with pytest.raises(LdpsimError, match="mechanism"):
        A.DiscreteMechanism("laplace", 1.0, 1e-3, 5.0, 10, 100)
    with pytest.raises(LdpsimError, match="sigma >= 1/2"):
        A.ddg_rdp([2.0], l2=1, l1=1, sigma=0.3, summands=2, dim=1)
    with pytest.raises(LdpsimError, match="integer orders"):
        A.skellam_rdp([1.5], l2=1, l1=1, variance=3.0)


def test_bits_needed_meets_its_constraints():
    rep = A.bits_needed("ddg", epsilon=4.0, delta=1e-5, clients=100, dim=1000, clip=1.0,
                        rounds=10, bit_range=[10, 16])
    assert rep.bits == 16
    for row in rep.rows:
        assert row.wrap_probability <= 1e-6
        assert row.epsilon <= 4.0
    ratios = [r.mse_ratio for r in rep.rows]
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] < 1.1


@pytest.mark.slow
def test_bits_table_lenet5():
    """The table of the report: n = 1,000, d = 61,706, C = 1, δ = 1e-5, ε whole run."""
    for mech in A.MECHANISMS:
        for eps in (4.0, 8.0):
            rep = A.bits_needed(mech, epsilon=eps, delta=1e-5, clients=1000, dim=61_706, clip=1.0,
                                rounds=1, bit_range=range(10, 21))
            assert rep.bits is not None and 12 <= rep.bits <= 20


# ----------------------------------------------------------------------- amplification by sampling

def _renyi(lp, lq, alpha):
    """D_α(P‖Q) of two pmfs given as logs on one grid."""
    return float(special.logsumexp(alpha * lp - (alpha - 1) * lq)) / (alpha - 1)


@pytest.mark.parametrize("sigma,shift,q", [(1.0, 1, 0.1), (2.0, 3, 0.05), (0.8, 2, 0.3)])
def test_subsampled_bound_holds_for_exact_subsampled_discrete_gaussian(sigma, shift, q):
    """Numerical Rényi divergences, both directions, of the exact Poisson-subsampled discrete
    Gaussian (mixture (1−q)·N_Z(0,σ²) + q·N_Z(shift,σ²) against N_Z(0,σ²)) are below the
    Zhu–Wang bound applied to the DDG curve of one summand in one dimension."""
    grid = np.arange(-400, 401)
    lp = _dg_logpmf(sigma, grid)
    lshift = _dg_logpmf(sigma, grid - shift)
    lmix = np.logaddexp(math.log1p(-q) + lp, math.log(q) + lshift)
    orders = list(range(2, 21))
    bound = A.poisson_subsampled_rdp(
        orders, lambda ell: A.ddg_rdp(ell, l2=shift, l1=shift, sigma=sigma, summands=1, dim=1), q)
    for a, b in zip(orders, bound):
        assert _renyi(lmix, lp, a) <= b + 1e-12, a
        assert _renyi(lp, lmix, a) <= b + 1e-12, a


def test_subsampled_bound_is_above_dp_accounting_subsampled_gaussian_and_q1_is_identity():
    """On the continuous Gaussian's curve the generic bound (Zhu & Wang 2019, Thm 6) is never
    below dp_accounting's exact Poisson-subsampled Gaussian RDP (Mironov, Talwar & Zhang 2019),
    and at q = 1 it is the curve itself."""
    from dp_accounting.rdp import rdp_privacy_accountant as R
    o = np.asarray(A.SUBSAMPLED_ORDERS)
    for q in (1e-3, 0.01, 0.1):
        for s in (0.8, 1.5, 5.0):
            ours = A.poisson_subsampled_rdp(o, lambda l: A.gaussian_rdp(l, l2=1.0, variance=s * s), q)
            exact = R._compute_rdp_poisson_subsampled_gaussian(q, s, o)
            assert np.all(ours >= exact - 1e-12), (q, s)
    base = A.gaussian_rdp(o, l2=1.0, variance=4.0)
    np.testing.assert_allclose(
        A.poisson_subsampled_rdp(o, lambda l: A.gaussian_rdp(l, l2=1.0, variance=4.0), 1.0), base)


@pytest.mark.slow
def test_whole_run_epsilon_with_sampling_lenet5_scale():
    """Whole run at LeNet-5 size (d = 61,706), m = 1,000 of N = 100,000 clients per round
    (q = 0.01), 500 rounds, δ = 1/N: the noise solved with amplification meets ε = 8, is far
    below the unamplified noise, and its ε is within 1 % of the same bound on the continuous
    Gaussian of the same total noise and sensitivity (the discrete terms vanish at this scale)
    and never below dp_accounting's exact subsampled Gaussian."""
    n, big_n, rounds, delta = 1000, 100_000, 500, 1e-5
    kw = dict(epsilon=8.0, delta=delta, clients=n, dim=61_706, clip=1.0, granularity=2.0**-12,
              rounds=rounds)
    mech = A.solve_noise("ddg", sampling_rate=n / big_n, **kw)
    eps = A.discrete_epsilon(mech, delta, rounds, sampling_rate=n / big_n)
    assert eps <= 8.0
    assert A.discrete_epsilon(mech, delta, rounds) > 8.0            # amplification is needed
    assert mech.noise < 0.2 * A.solve_noise("ddg", **kw).noise
    l2, _ = A.integer_sensitivity(mech.norm_bound, mech.padded_dim, mech.neighbours)
    var = n * mech.client_variance
    o = np.asarray(A.SUBSAMPLED_ORDERS, float)
    gauss = A.poisson_subsampled_rdp(o, lambda l: A.gaussian_rdp(l, l2=l2, variance=var), n / big_n)
    eps_g = A.rdp_to_epsilon(o, rounds * gauss, delta)
    assert eps_g <= eps <= eps_g * 1.01
    acc = dp_accounting.rdp.RdpAccountant(list(o))
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        n / big_n, dp_accounting.GaussianDpEvent(math.sqrt(var) / l2)), rounds)
    assert acc.get_epsilon(delta) <= eps
    # q = 1 (or None) is today's unamplified accounting
    assert A.discrete_epsilon(mech, delta, 3, sampling_rate=1.0) == A.discrete_epsilon(mech, delta, 3)
    sk = A.solve_noise("skellam", sampling_rate=n / big_n, **kw)
    assert A.discrete_epsilon(sk, delta, rounds, sampling_rate=n / big_n) <= 8.0
    with pytest.raises(LdpsimError):
        A.discrete_epsilon(mech, delta, 1, sampling_rate=1.5)
