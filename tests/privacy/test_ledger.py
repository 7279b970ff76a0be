"""Per-client privacy ledger: each client's ε from its own participations."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from exact_gaussian import gaussian_epsilon as _gaussian_epsilon
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.randomizers import mechanism, rr
from ldpsim._src.privacy.accountants.ledger import PrivacyLedger

REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE


def _participations(num_clients, rounds, cohort, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.choice(num_clients, cohort, replace=False) for _ in range(rounds)]


def test_rdp_ledger_equals_client_by_client_composition():
    event = dp_accounting.GaussianDpEvent(1.7)
    led = PrivacyLedger(60, event=event, delta=1e-6)
    history = _participations(60, 25, 12)
    for cohort in history:
        led.record(cohort)
    got = led.epsilons()
    for client in range(60):
        acc = RdpAccountant()
        count = sum(int(client in cohort) for cohort in history)
        for _ in range(count):                      # one compose per participation
            acc.compose(event)
        assert got[client] == pytest.approx(acc.get_epsilon(1e-6), rel=1e-12, abs=0)
    assert led.max_epsilon() == got.max()


def test_pld_ledger_equals_client_by_client_composition():
    event = dp_accounting.LaplaceDpEvent(2.0)
    led = PrivacyLedger(8, event=event, delta=1e-5, method="pld")
    history = _participations(8, 6, 3, seed=1)
    for cohort in history:
        led.record(cohort)
    got = led.epsilons()
    for client in range(8):
        acc = PLDAccountant()
        for cohort in history:
            if client in cohort:
                acc.compose(event)
        assert got[client] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6, abs=1e-12)


def test_randomized_response_events_compose_count_times():
    """The pure-eps event of ldpsim's randomizers (binary RR) and k-ary RR, under PLD: the
    ledger composes k times (dp_accounting 0.6.0's compose(event, k) composes once)."""
    mech = rr.make(epsilon=1.0, k=4)
    led = PrivacyLedger.from_mechanism(mech, mech.params, 3, delta=1e-5, method="pld")
    assert led.neighbours == "replace"
    led.record([0, 0, 0, 1])
    event = mech.dp_event(mech.params)
    for client, count in enumerate((3, 1, 0)):
        acc = PLDAccountant(REPLACE)
        for _ in range(count):
            acc.compose(event)
        want = acc.get_epsilon(1e-5) if count else 0.0
        assert led.epsilons()[client] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert led.epsilons()[0] > 2.5                  # three 1-DP releases, not one
    rdp = PrivacyLedger(3, event=event, delta=1e-5)
    rdp.record([0, 0, 0])
    assert rdp.epsilons()[0] >= led.epsilons()[0] - 1e-9   # RDP is never tighter than PLD


def test_pure_epsilon_is_exact_basic_composition():
    led = PrivacyLedger(5, epsilon0=0.75)
    led.record([0, 1, 1, 3])
    led.record(np.array([True, True, False, False, False]))
    np.testing.assert_array_equal(led.counts, [2, 3, 0, 1, 0])
    np.testing.assert_array_equal(led.epsilons(), [1.5, 2.25, 0.0, 0.75, 0.0])
    assert led.delta == 0.0 and led.method == "basic"


def test_pure_mechanism_basic_and_shuffled_rounds():
    mech = rr.make(epsilon=0.5, k=3)
    led = PrivacyLedger.from_mechanism(mech, mech.params, 2, method="basic", delta=1e-5)
    led.record([1, 1, 1])
    np.testing.assert_array_equal(led.epsilons(), [0.0, 1.5])
    gauss = mechanism.gaussian(epsilon=1.0, delta=1e-5, clip=1.0)
    with pytest.raises(LdpsimError, match="pure"):
        PrivacyLedger.from_mechanism(gauss, gauss.params, 2, method="basic")
    # One participation = one shuffled round of 500 reports (the clone pair's PLD).
    from ldpsim._src.privacy.accountants import shuffling

    one = shuffling.shuffle_pld(1.0, 500)
    shuf = PrivacyLedger(3, pld=one, delta=1e-6)
    shuf.record([0, 0, 0, 1])
    eps = shuf.epsilons()
    assert eps[0] == pytest.approx(shuffling.shuffle_rounds_epsilon(1.0, 500, 3, 1e-6))
    assert eps[1] == pytest.approx(one.get_epsilon_for_delta(1e-6)) and eps[2] == 0.0


def test_analytic_gaussian_ledger():
    led = PrivacyLedger(4, event=dp_accounting.GaussianDpEvent(3.0), delta=1e-5,
                        method="analytic")
    led.record([1, 2, 2, 2, 2])
    eps = led.epsilons()
    # k participations of multiplier z are one Gaussian of ratio μ = √k/z (Dong, Roth & Su
    # 2019): client 2 took part 4 times (μ = 2/3), client 1 once (μ = 1/3).
    assert eps[2] == pytest.approx(_gaussian_epsilon(2.0 / 3.0, 1e-5), rel=1e-12)
    assert eps[1] == pytest.approx(_gaussian_epsilon(1.0 / 3.0, 1e-5), rel=1e-12)
    assert eps[2] == pytest.approx(dp_accounting.get_epsilon_gaussian(1.5, 1e-5), rel=1e-9)
    gauss = mechanism.gaussian(epsilon=2.0, delta=1e-5, clip=1.0)
    led2 = PrivacyLedger.from_mechanism(gauss, gauss.params, 2, delta=1e-5, method="analytic")
    led2.record([0])
    # The float32 σ it runs with, on Δ = 2C (replace one): the closed form's ε, ≈ 2.
    sigma = float(gauss.params.scale)
    assert led2.epsilons()[0] == pytest.approx(_gaussian_epsilon(2.0 / sigma, 1e-5), rel=1e-12)
    assert led2.epsilons()[0] == pytest.approx(2.0, rel=1e-4)


def test_budget_flags():
    led = PrivacyLedger(4, epsilon0=1.0, target_epsilon=2.5)
    led.record([0, 0, 1])
    np.testing.assert_array_equal(led.allowed(), [False, True, True, True])  # 3 > 2.5
    np.testing.assert_array_equal(led.allowed([1, 0]), [True, False])
    np.testing.assert_array_equal(led.exhausted(), [False, False, False, False])
    assert led.run_exhausted("any") and not led.run_exhausted("all")
    led.record([0])
    np.testing.assert_array_equal(led.exhausted(), [True, False, False, False])
    np.testing.assert_array_equal(led.exhausted(target_epsilon=1.0), [True, True, False, False])
    led.record([1, 1, 2, 2, 3, 3])
    assert led.run_exhausted("all")


def test_million_clients_one_call_per_distinct_count():
    led = PrivacyLedger(10**6, event=dp_accounting.GaussianDpEvent(4.0), delta=1e-6)
    for cohort in _participations(10**6, 40, 20_000, seed=3):
        led.record(cohort)
    eps = led.epsilons()
    assert eps.shape == (10**6,) and eps.dtype == np.float64
    distinct = np.unique(led.counts)
    assert set(led._cache) == set(distinct.tolist()) | {0}
    order = np.argsort(led.counts, kind="stable")
    assert np.all(np.diff(eps[order]) >= 0)        # more participations, more epsilon


@pytest.mark.parametrize("make, word", [
    (lambda: PrivacyLedger(0, epsilon0=1.0), "num_clients"),
    (lambda: PrivacyLedger(3), "exactly one"),
    (lambda: PrivacyLedger(3, epsilon0=1.0, event=dp_accounting.GaussianDpEvent(1.0)),
     "exactly one"),
    (lambda: PrivacyLedger(3, epsilon0=-1.0), "epsilon0"),
    (lambda: PrivacyLedger(3, event=dp_accounting.GaussianDpEvent(1.0)), "delta"),
    (lambda: PrivacyLedger(3, event="gaussian", delta=1e-5), "DpEvent"),
    (lambda: PrivacyLedger(3, event=dp_accounting.LaplaceDpEvent(1.0), delta=1e-5,
                           method="analytic"), "GaussianDpEvent"),
    (lambda: PrivacyLedger(3, event=dp_accounting.UnsupportedDpEvent(), delta=1e-5),
     "does not support"),
    (lambda: PrivacyLedger(3, event=dp_accounting.RandomizedResponseDpEvent(0.5, 2),
                           delta=1e-5, neighbours="add-remove"), "replace"),
    (lambda: PrivacyLedger(3, pld="pld", delta=1e-5), "PrivacyLossDistribution"),
    (lambda: PrivacyLedger(3, epsilon0=1.0).record([3]), "out of range"),
    (lambda: PrivacyLedger(3, epsilon0=1.0).record([0.5]), "integer"),
    (lambda: PrivacyLedger(3, epsilon0=1.0).record([True, False]), "mask"),
    (lambda: PrivacyLedger(3, epsilon0=1.0).record([0], times=-1), "times"),
    (lambda: PrivacyLedger(3, epsilon0=1.0).allowed(), "target_epsilon"),
    (lambda: PrivacyLedger(3, epsilon0=1.0, target_epsilon=1.0).run_exhausted("most"),
     "policy"),
])
def test_bad_input(make, word):
    with pytest.raises(LdpsimError) as err:
        make()
    assert word in str(err.value)


def test_rdp_ledger_matches_documented_multiplier():
    """Sanity of the units: a Gaussian event of multiplier z composed k times is one of
    multiplier z/sqrt(k) (exactly, so RDP's answers agree)."""
    led = PrivacyLedger(1, event=dp_accounting.GaussianDpEvent(2.0), delta=1e-5)
    led.record([0], times=4)
    acc = RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(2.0 / math.sqrt(4)))
    assert led.epsilons()[0] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)


def test_accountant_ledger_uses_the_given_function_and_shared_counts():
    calls = []

    def acc(k):
        calls.append(k)
        return 0.75 * k

    counts = np.zeros(5, np.int64)
    led = PrivacyLedger(5, accountant=acc, delta=1e-5, target_epsilon=1.6, counts=counts)
    counts[[0, 0, 3]] += 1                 # the caller's counter is the ledger's
    np.add.at(counts, [0, 3], 1)
    assert led.counts is counts
    assert led.epsilons().tolist() == [1.5, 0.0, 0.0, 1.5, 0.0]
    assert led.allowed().tolist() == [False, True, True, False, True]
    assert led.max_epsilon() == 1.5 and led.method == "accountant"
    assert sorted(calls) == [1, 2, 3]      # once per distinct count (3: allowed)


@pytest.mark.parametrize("counts", [np.zeros(4, np.int64), np.zeros(5, np.int32), [0] * 5])
def test_bad_shared_counts_are_named(counts):
    with pytest.raises(LdpsimError, match="counts must be an int64 NumPy array of shape"):
        PrivacyLedger(5, epsilon0=1.0, counts=counts)


def test_accountant_is_one_of_the_sources():
    with pytest.raises(LdpsimError, match="exactly one of"):
        PrivacyLedger(3, epsilon0=1.0, accountant=lambda k: k)
    with pytest.raises(LdpsimError, match="accountant must be a function"):
        PrivacyLedger(3, accountant=2.0)


def test_allowed_counts_a_client_listed_twice_as_two_participations():
    """``allowed`` answers for the list it is given: ``record`` would count a client listed k
    times k times, so ``allowed`` asks about k more participations (budget 2 at ε₀ = 1)."""
    led = PrivacyLedger(3, epsilon0=1.0, target_epsilon=2.0)
    led.record([0])
    np.testing.assert_array_equal(led.allowed([0, 0, 1]), [False, False, True])
    np.testing.assert_array_equal(led.allowed([0, 1, 1, 2]), [True, True, True, True])
    np.testing.assert_array_equal(led.allowed([]), np.zeros(0, bool))
    np.testing.assert_array_equal(led.allowed(np.array([True, False, True])), [True, True])
