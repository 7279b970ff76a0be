"""Composition of the report randomizers' accounting event (randomized response) over rounds.

dp_accounting 0.6's PLDAccountant returns the ε of ONE randomized-response release whatever
the count it is told to compose, so a wrong ε would be printed silently; these tests pin the
engine's composition against independent references.
"""

from __future__ import annotations

import math

import dp_accounting
import pytest

from ldpsim._src.fl.dp_client import event_epsilon
from ldpsim._src.privacy.randomizers import mechanism


def _rr(eps0: float, k: int = 2) -> dp_accounting.RandomizedResponseDpEvent:
    # keep the true value with probability 1 - p, else a uniform bucket: ratio e^eps0
    p = k / (math.exp(eps0) + k - 1)
    return dp_accounting.RandomizedResponseDpEvent(noise_parameter=p, num_buckets=k)


@pytest.mark.parametrize("eps0,k", [(1.0, 2), (0.3, 2), (2.0, 5)])
def test_one_release_is_eps0_and_k_releases_grow(eps0, k):
    ev = _rr(eps0, k)
    one = event_epsilon(ev, 1, 1e-9)
    assert one <= eps0 * (1 + 1e-6) and one >= eps0 * 0.95
    many = [event_epsilon(ev, n, 1e-5) for n in (1, 2, 5, 20)]
    assert all(b > a for a, b in zip(many, many[1:]))      # composition costs privacy
    assert all(e <= n * eps0 * (1 + 1e-9) for e, n in zip(many, (1, 2, 5, 20)))


def test_binary_rr_composition_equals_the_exact_binomial_privacy_curve():
    # n releases of binary RR at eps0: the privacy loss is eps0*(2B - n), B ~ Bin(n, q),
    # q = e^eps0/(1+e^eps0); delta(eps) = sum over outcomes of (P - e^eps Q)_+ (exact).
    from scipy import optimize, stats

    eps0, n, delta = 0.5, 40, 1e-5
    q = math.exp(eps0) / (1 + math.exp(eps0))
    b = list(range(n + 1))
    pmf_p = stats.binom.pmf(b, n, q)
    pmf_q = stats.binom.pmf(b, n, 1 - q)

    def delta_of(eps):
        return sum(max(0.0, pp - math.exp(eps) * qq) for pp, qq in zip(pmf_p, pmf_q)) - delta

    exact = optimize.brentq(delta_of, 0.0, n * eps0)
    got = event_epsilon(_rr(eps0, 2), n, delta)
    assert exact <= got <= exact + 0.05      # PLD discretisation is pessimistic, and close
    assert got < n * eps0                    # below basic composition


def test_a_report_randomizer_accounts_over_rounds():
    lm = mechanism.make("privunitg", epsilon=1.0, dim=16, clip=1.0)
    ev = lm.dp_event(lm.params)
    assert event_epsilon(ev, 1, 1e-5) <= 1.0 + 1e-6
    assert 3.0 < event_epsilon(ev, 10, 1e-5) <= 10.0 + 1e-6
