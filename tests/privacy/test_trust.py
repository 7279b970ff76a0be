"""Each trust model's noise for one target central (ε, δ): exact checks against independent
formulas (the Balle-Wang δ(ε) by SciPy, dp_accounting's Gaussian ε, the authors' published
shuffling bracket)."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from scipy import stats

from ldpsim import privacy
from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.accountants.shuffling import shuffle_epsilon
from ldpsim._src.privacy.accountants.trust import TRUST_MODELS, shuffle_local_epsilon, trust_model_noise


def _gaussian_delta(eps: float, sigma: float, sens: float) -> float:
    """Balle & Wang (2018), Thm. 8: the exact δ(ε) of N(0, σ²) at sensitivity Δ, written
    out with SciPy (independent of ldpsim's calibration code)."""
    a, b = sens / (2 * sigma), eps * sigma / sens
    return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)


def test_exported_from_the_facade():
    assert privacy.trust_model_noise is trust_model_noise
    assert {"trust_model_noise", "TrustModelNoise", "TRUST_MODELS",
            "shuffle_local_epsilon"} <= set(privacy.__all__)


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-5), (4.0, 5e-5), (0.3, 1e-6)])
def test_central_is_the_exact_gaussian_on_the_sum(eps, delta):
    n, clip = 1000, 1.5
    out = trust_model_noise("central", target_epsilon=eps, delta=delta, clients=n, clip=clip)
    assert out.sigma_client == 0.0 and math.isinf(out.local_epsilon)
    # The δ of the calibrated σ at the target ε is the target δ (rounded up: ≤, tight).
    got = _gaussian_delta(eps, out.sigma_sum, 2 * clip)
    assert got <= delta * (1 + 1e-9) and got == pytest.approx(delta, rel=1e-6)
    # dp_accounting's exact Gaussian ε for the multiplier σ/Δ.
    assert dp_accounting.get_epsilon_gaussian(out.sigma_sum / (2 * clip), delta) == \
        pytest.approx(eps, rel=1e-6)
    assert out.sigma_mean == pytest.approx(out.sigma_sum / n, rel=1e-15)
    assert out.central_epsilon == pytest.approx(eps, rel=1e-9)


def test_local_report_carries_the_whole_budget():
    eps, delta, n = 2.0, 5e-5, 300
    loc = trust_model_noise("local", target_epsilon=eps, delta=delta, clients=n)
    cen = trust_model_noise("central", target_epsilon=eps, delta=delta, clients=n)
    assert loc.sigma_client == cen.sigma_sum           # one report = the central release
    assert loc.sigma_sum == pytest.approx(cen.sigma_sum * math.sqrt(n), rel=1e-15)
    assert loc.local_epsilon == pytest.approx(eps, rel=1e-9)
    assert loc.central_epsilon == loc.local_epsilon


@pytest.mark.parametrize("dropout, shares", [(0.0, 0), (0.1, 0), (0.25, 1)])
def test_secagg_worst_case_survivors_hold_the_central_noise(dropout, shares):
    eps, delta, n = 4.0, 5e-5, 1000
    sec = trust_model_noise("secagg", target_epsilon=eps, delta=delta, clients=n,
                            dropout=dropout, known_shares=shares)
    cen = trust_model_noise("central", target_epsilon=eps, delta=delta, clients=n)
    s = n - math.floor(dropout * n)
    assert sec.details["survivors"] == s
    # The unknown shares of the worst-case survivors sum to exactly central's noise.
    assert sec.sigma_client * math.sqrt(s - shares) == pytest.approx(cen.sigma_sum, rel=1e-12)
    assert sec.sigma_sum == pytest.approx(sec.sigma_client * math.sqrt(n), rel=1e-15)
    assert sec.central_epsilon == pytest.approx(eps, rel=1e-6)
    assert sec.central_epsilon <= eps * (1 + 1e-9)
    # Each share alone is a weak local guarantee.
    assert sec.local_epsilon > 10 * eps


def test_secagg_without_dropout_is_central_split_over_clients():
    sec = trust_model_noise("secagg", target_epsilon=1.0, delta=1e-5, clients=400)
    cen = trust_model_noise("central", target_epsilon=1.0, delta=1e-5, clients=400)
    assert sec.sigma_sum == pytest.approx(cen.sigma_sum, rel=1e-12)
    assert sec.sigma_mean == pytest.approx(cen.sigma_mean, rel=1e-12)


@pytest.mark.parametrize("eps, n", [(1.0, 1000), (4.0, 3000), (0.5, 10_000)])
def test_shuffle_epsilon0_is_the_largest_meeting_the_target(eps, n):
    delta = 5e-5
    out = trust_model_noise("shuffle", target_epsilon=eps, delta=delta, clients=n)
    eps0, delta0 = out.local_epsilon, out.local_delta
    assert eps0 >= eps
    central = float(shuffle_epsilon(delta / 2, eps0, n))
    assert central <= eps and out.central_epsilon == central
    # Maximal: a slightly larger ε₀ exceeds the target (bisection to 1e-6 relative).
    assert float(shuffle_epsilon(delta / 2, eps0 * (1 + 3e-6), n)) > eps
    # The total δ: the clones bound's half plus the approximate-DP term (Thm. 3.8).
    extra = (math.exp(eps) + 1) * (1 + math.exp(-eps0) / 2) * n * delta0
    assert delta / 2 + extra == pytest.approx(delta, rel=1e-12)
    # Each report is (ε₀, δ₀)-DP at sensitivity 2C, by the exact Gaussian δ(ε).
    assert _gaussian_delta(eps0, out.sigma_client, 2.0) == pytest.approx(delta0, rel=1e-6)
    assert out.sigma_sum == pytest.approx(out.sigma_client * math.sqrt(n), rel=1e-15)


def test_shuffle_matches_the_authors_published_bracket():
    """Feldman, McMillan & Talwar's reference implementation (apple/ml-shuffling-
    amplification, README): n = 10⁵, ε₀ = 4, δ = 1e-6 gives a numerical central ε between
    0.16754 and 0.17279. Inverting: at those targets the largest ε₀ brackets 4."""
    n, delta_s = 100_000, 1e-6
    lo, _ = shuffle_local_epsilon(0.16754, 2 * delta_s, n)
    hi, _ = shuffle_local_epsilon(0.17279, 2 * delta_s, n)
    assert lo <= 4.0 <= hi
    assert hi - lo < 0.1


def test_shuffle_amplification_grows_with_clients():
    eps0s = [shuffle_local_epsilon(1.0, 1e-5, n)[0] for n in (100, 1000, 10_000)]
    assert eps0s == sorted(eps0s) and eps0s[-1] > 4.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="trusted"), "model"),
    (dict(target_epsilon=0.0), "target_epsilon"),
    (dict(target_epsilon=math.inf), "target_epsilon"),
    (dict(target_epsilon=float("nan")), "target_epsilon"),
    (dict(delta=1.0), "delta"),
    (dict(clients=0), "clients"),
    (dict(clip=-1.0), "clip"),
    (dict(model="central", dropout=0.1), "dropout"),
    (dict(model="local", delta_split=0.3), "delta_split"),
    (dict(model="secagg", dropout=1.0), "dropout"),
])
def test_bad_input_names_the_value(kwargs, match):
    args = dict(model="shuffle", target_epsilon=1.0, delta=1e-5, clients=100)
    args.update(kwargs)
    model = args.pop("model")
    with pytest.raises(LdpsimError, match=match):
        trust_model_noise(model, **args)


def test_every_model_listed():
    assert TRUST_MODELS == ("local", "shuffle", "secagg", "central")


def _realised_delta(sigma: float, eps: float, sens: float = 2.0) -> float:
    """δ at ``eps`` of one release of ldpsim's default float32 sampler at ``sigma``, for
    updates of up to 10⁷ coordinates (the default ``dim``)."""
    from ldpsim._src.privacy.noise import realised

    return realised.realised_delta("gaussian", realised.default_sampler("gaussian"),
                                   sens / sigma, realised.DEFAULT_DIM, eps)


@pytest.mark.parametrize("model", ["local", "central"])
def test_large_epsilon_is_calibrated_for_the_float32_noise(model):
    """At ε = 100, δ = 1e-5 the textbook σ (0.1893 at Δ = 2) is not (100, δ)-DP as float32
    noise (the sampler's bounded tails): the σ given is the float32 calibration's, larger,
    and delivers the target; ``sampler="ideal"`` gives the textbook σ back."""
    eps, delta = 100.0, 1e-5
    out = trust_model_noise(model, target_epsilon=eps, delta=delta, clients=50)
    ideal = trust_model_noise(model, target_epsilon=eps, delta=delta, clients=50,
                              sampler="ideal")
    sigma = out.sigma_client if model == "local" else out.sigma_sum
    textbook = ideal.sigma_client if model == "local" else ideal.sigma_sum
    assert _gaussian_delta(eps, textbook, 2.0) == pytest.approx(delta, rel=1e-6)
    assert _realised_delta(textbook, eps) > 100 * delta       # the textbook σ fails
    assert sigma > 1.3 * textbook
    assert _realised_delta(sigma, eps) <= delta                 # the σ given delivers it
    assert out.central_epsilon <= eps
    assert out.details["sampler"] == "tail" and ideal.details["sampler"] == "ideal"


def test_shuffle_reports_are_float32_calibrated_at_their_tiny_delta0():
    """Shuffling at a large target makes δ₀ tiny (4.7e-22 at ε = 30, n = 1000); each
    report's σ must deliver (ε₀, δ₀) as float32 noise, which the textbook σ does not."""
    out = trust_model_noise("shuffle", target_epsilon=30.0, delta=1e-5, clients=1000)
    ideal = trust_model_noise("shuffle", target_epsilon=30.0, delta=1e-5, clients=1000,
                              sampler="ideal")
    eps0, delta0 = out.local_epsilon, out.local_delta
    assert (eps0, delta0) == (ideal.local_epsilon, ideal.local_delta)
    assert _realised_delta(ideal.sigma_client, eps0) > 100 * delta0
    assert out.sigma_client > ideal.sigma_client
    assert _realised_delta(out.sigma_client, eps0) <= delta0


def test_small_epsilon_unchanged_by_the_float32_calibration():
    """Below ε ≈ 40 at δ = 1e-5 the tails add nothing measurable: the same σ either way."""
    for model in TRUST_MODELS:
        a = trust_model_noise(model, target_epsilon=4.0, delta=5e-5, clients=1000)
        b = trust_model_noise(model, target_epsilon=4.0, delta=5e-5, clients=1000,
                              sampler="ideal")
        assert a.sigma_client == b.sigma_client and a.sigma_sum == b.sigma_sum, model


def test_a_secagg_share_alone_is_not_private_as_float32_noise():
    """A share's shift (Δ/σ = 8.5 scales at ε = 1, n = 1000) puts one coordinate's release
    where the neighbour's bounded sampler cannot reach with probability above δ: no ε holds
    at δ (ideal noise would say ε ≈ 71)."""
    out = trust_model_noise("secagg", target_epsilon=1.0, delta=1e-5, clients=1000)
    assert math.isinf(out.local_epsilon)
    ideal = trust_model_noise("secagg", target_epsilon=1.0, delta=1e-5, clients=1000,
                              sampler="ideal")
    assert 50 < ideal.local_epsilon < 100
