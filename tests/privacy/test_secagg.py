"""Secure aggregation of local Gaussian noise: the central guarantee of the sum."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from exact_gaussian import gaussian_epsilon as _gaussian_epsilon
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.accountants.secagg import (
    secagg_epsilon,
    secagg_noise_multiplier,
    secagg_sigma,
    secagg_survivors,
)


def _hand_built(z: float, rounds: int, delta: float, method: str) -> float:
    acc = (PLDAccountant if method == "pld" else RdpAccountant)(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dp_accounting.GaussianDpEvent(z), rounds)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("method", ["pld", "rdp"])
@pytest.mark.parametrize("neighbours, sens", [("replace", 2.0), ("add-remove", 1.0)])
def test_equals_hand_built_dp_accounting_event(method, neighbours, sens):
    sigma, clip, n, rounds, delta = 0.8, 1.5, 64, 7, 1e-6
    rep = secagg_epsilon(sigma=sigma, clip=clip, clients=n, rounds=rounds, delta=delta,
                         neighbours=neighbours, method=method)
    z = sigma * math.sqrt(n) / (sens * clip)          # sigma sqrt(n) against Delta
    assert rep.details["noise_multiplier"] == pytest.approx(z, rel=1e-15)
    assert rep.epsilon == pytest.approx(_hand_built(z, rounds, delta, method), rel=1e-12)
    assert rep.count == rounds and rep.method == method


def test_analytic_is_exact_and_below_pld():
    rep = secagg_epsilon(sigma=1.0, clip=1.0, clients=100, rounds=1, delta=1e-5,
                         method="analytic")
    # z = σ√n/(2C) = 5 against Δ = 2C (replace one): ratio μ = 1/5, computed here.
    assert rep.epsilon == pytest.approx(_gaussian_epsilon(1 / 5.0, 1e-5), rel=1e-12)
    assert rep.epsilon == pytest.approx(dp_accounting.get_epsilon_gaussian(5.0, 1e-5), rel=1e-9)
    pld = secagg_epsilon(sigma=1.0, clip=1.0, clients=100, rounds=1, delta=1e-5)
    assert rep.epsilon <= pld.epsilon <= rep.epsilon + 1e-3   # PLD is pessimistic, tight
    assert rep.epsilon <= _hand_built(5.0, 1, 1e-5, "pld") <= rep.epsilon + 1e-3


def test_dropout_worst_case_and_known_shares():
    assert secagg_survivors(100, 0.1) == 90
    assert secagg_survivors(10, 0.25) == 8          # at most floor(2.5) = 2 drop
    assert secagg_survivors(3, 0.99) == 1
    base = dict(sigma=1.0, clip=1.0, clients=100, rounds=5, delta=1e-5, method="analytic")
    full = secagg_epsilon(**base).epsilon
    drop = secagg_epsilon(**base, dropout=0.1)
    assert drop.details["survivors"] == 90
    # 90 survivors' noise, 5 rounds: ratio μ = 2√5/√90 (computed here).
    assert drop.epsilon == pytest.approx(
        _gaussian_epsilon(2 * math.sqrt(5) / math.sqrt(90), 1e-5), rel=1e-12)
    assert drop.epsilon > full
    # The sharp-edges doc's conservative multiplier: the target's own share known.
    own = secagg_epsilon(**base, dropout=0.1, known_shares=1)
    assert own.details["noise_multiplier"] == pytest.approx(math.sqrt(89) / 2)
    assert own.epsilon > drop.epsilon
    assert secagg_noise_multiplier(2.0, 1.0, 50, neighbours="add-remove",
                                   known_shares=10) == pytest.approx(2 * math.sqrt(40))


def test_realised_survivors_per_round_compose_exactly():
    per_round = [100, 90, 90, 75]
    rep = secagg_epsilon(sigma=1.0, clip=1.0, clients=100, rounds=4, delta=1e-5,
                         survivors=per_round, method="pld")
    acc = PLDAccountant()
    for s in per_round:
        acc.compose(dp_accounting.GaussianDpEvent(math.sqrt(s) / 2))
    # Same events; PLD rounding differs slightly with the order they are composed in.
    assert rep.epsilon == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    exact = secagg_epsilon(sigma=1.0, clip=1.0, clients=100, rounds=4, delta=1e-5,
                           survivors=per_round, method="analytic").epsilon
    z_total = 1 / math.sqrt(sum(4 / s for s in per_round))
    assert exact == pytest.approx(_gaussian_epsilon(1 / z_total, 1e-5), rel=1e-12)
    assert exact <= rep.epsilon


@pytest.mark.parametrize("neighbours", ["replace", "add-remove"])
def test_sigma_for_a_target_central_epsilon(neighbours):
    kw = dict(delta=1e-5, clip=0.5, clients=200, rounds=30, dropout=0.2, known_shares=1,
              neighbours=neighbours)
    sigma = secagg_sigma(target_epsilon=2.0, **kw)
    rep = secagg_epsilon(sigma=sigma, method="analytic", **kw)
    assert rep.epsilon == pytest.approx(2.0, rel=1e-9) and rep.epsilon <= 2.0 + 1e-12
    assert secagg_epsilon(sigma=sigma * 0.99, method="analytic", **kw).epsilon > 2.0
    pld = secagg_epsilon(sigma=sigma, method="pld", **kw).epsilon
    assert 2.0 - 1e-9 <= pld <= 2.0 + 2e-3           # PLD: pessimistic grid, tight


@pytest.mark.parametrize("method", ["rdp", "pld"])
def test_sigma_solved_by_the_chosen_accountant_certifies_the_target(method):
    """With a looser accountant (RDP) the least σ that accountant certifies: its ε is at most
    the target and within the bisection's tolerance of it; never below the exact σ."""
    kw = dict(delta=1e-5, clip=1.0, clients=100, rounds=100, neighbours="replace")
    exact = secagg_sigma(target_epsilon=2.0, **kw)
    sigma = secagg_sigma(target_epsilon=2.0, method=method, **kw)
    assert sigma >= exact
    assert secagg_epsilon(sigma=sigma, method=method, **kw).epsilon <= 2.0
    assert secagg_epsilon(sigma=sigma * (1 - 1e-5), method=method, **kw).epsilon > 2.0 or sigma == exact
    if method == "rdp":   # RDP is looser than the exact composition here: more noise
        assert sigma > 1.05 * exact


def test_zero_rounds_and_one_client():
    assert secagg_epsilon(sigma=1.0, clip=1.0, clients=10, rounds=0, delta=1e-5).epsilon == 0
    one = secagg_epsilon(sigma=1.0, clip=1.0, clients=1, delta=1e-5, method="analytic")
    assert one.epsilon == pytest.approx(_gaussian_epsilon(2.0, 1e-5), rel=1e-12)  # = local DP


@pytest.mark.parametrize("kwargs, word", [
    (dict(sigma=0.0), "sigma"),
    (dict(clip=-1.0), "clip"),
    (dict(clients=0), "clients"),
    (dict(delta=1.0), "delta"),
    (dict(rounds=-1), "rounds"),
    (dict(dropout=1.0), "dropout"),
    (dict(dropout=0.1, survivors=5), "not both"),
    (dict(survivors=11), "survivors"),
    (dict(survivors=[10, 9]), "one per round"),
    (dict(known_shares=10), "known_shares"),
    (dict(neighbours="swap"), "neighbours"),
    (dict(method="basic"), "method"),
])
def test_bad_input(kwargs, word):
    args = dict(sigma=1.0, clip=1.0, clients=10, rounds=1, delta=1e-5)
    args.update(kwargs)
    with pytest.raises(LdpsimError) as err:
        secagg_epsilon(**args)
    assert word in str(err.value)


@pytest.mark.parametrize("eps", [50.0, 100.0])
def test_sigma_delivers_the_target_where_the_float32_tails_bind(eps):
    """At large ε the exact (textbook) σ's float32 noise misses the target (ε = 50: 50.1,
    ε = 100: no finite ε at δ = 1e-5); the σ returned is the least that meets it."""
    kw = dict(delta=1e-5, clip=1.0, clients=100)
    exact = secagg_sigma(target_epsilon=eps, sampler="ideal", **kw)
    assert secagg_epsilon(sigma=exact, method="analytic", **kw).epsilon > eps
    sigma = secagg_sigma(target_epsilon=eps, **kw)
    assert sigma > exact
    assert secagg_epsilon(sigma=sigma, method="analytic", **kw).epsilon <= eps
    assert secagg_epsilon(sigma=sigma * (1 - 1e-5), method="analytic", **kw).epsilon > eps
    assert secagg_epsilon(sigma=exact, method="analytic", sampler="ideal", **kw).epsilon == \
        pytest.approx(eps, rel=1e-9)


def test_rounds_with_different_survivors_charge_the_float32_tails():
    """Realised survivors that differ by round: the float32 accounting is never below the
    ideal one, equal where the tails are negligible, and inf where they exhaust δ."""
    kw = dict(clip=1.0, clients=100, rounds=3, delta=1e-5, survivors=[100, 90, 80],
              method="analytic")
    small = secagg_epsilon(sigma=1.0, **kw).epsilon
    assert small == pytest.approx(secagg_epsilon(sigma=1.0, sampler="ideal", **kw).epsilon,
                                  rel=1e-9)
    ideal = secagg_epsilon(sigma=0.02, sampler="ideal", **kw).epsilon
    assert math.isfinite(ideal)
    assert secagg_epsilon(sigma=0.02, **kw).epsilon > ideal
