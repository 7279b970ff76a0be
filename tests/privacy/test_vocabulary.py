"""One accounting vocabulary: calibration, the LDP accountants, ``ldpsim account ldp`` and
the engine take ``clip`` with ``neighbours`` (or ``sensitivity``) alike; ``total_epsilon``
turns a per-round ε into the total a client spends. References: the exact Gaussian mechanism
at 50 digits (tests/exact_gaussian.py, mpmath) and dp_accounting's PLD accountant."""

from __future__ import annotations

import json
import math
import warnings

import dp_accounting
import pytest

from exact_gaussian import gaussian_epsilon, gaussian_mu
from ldpsim.cli import main
from ldpsim.privacy import LdpAccountant, calibrate, ldp_epsilon, ldp_round_epsilon, total_epsilon
from ldpsim._src._checks import LdpsimError


@pytest.mark.parametrize("neighbours,factor", [("replace", 2.0), ("add-remove", 1.0)])
def test_clip_and_neighbours_mean_the_same_sensitivity_everywhere(neighbours, factor):
    clip, sigma = 0.7, 3.0
    by_clip = ldp_epsilon(clip=clip, neighbours=neighbours, sigma=sigma, rounds=4, delta=1e-5,
                          method="analytic")
    by_sens = ldp_epsilon(sensitivity=factor * clip, sigma=sigma, rounds=4, delta=1e-5,
                          method="analytic")
    assert by_clip.epsilon == by_sens.epsilon and by_clip.details["sensitivity"] == factor * clip
    assert ldp_round_epsilon(clip=clip, neighbours=neighbours, sigma=sigma, delta=1e-5).epsilon \
        == ldp_round_epsilon(sensitivity=factor * clip, sigma=sigma, delta=1e-5).epsilon
    a = calibrate(epsilon=2.0, delta=1e-5, clip=clip, neighbours=neighbours)
    b = calibrate(epsilon=2.0, delta=1e-5, sensitivity=factor * clip, neighbours=neighbours)
    assert (a.sigma, a.clip, a.sensitivity) == (b.sigma, b.clip, b.sensitivity)
    acc = LdpAccountant(sigma=sigma, clip=clip, neighbours=neighbours, delta=1e-5,
                        method="analytic")
    assert acc.epsilon(4) == by_clip.epsilon


def test_the_words_refuse_ambiguity():
    with pytest.raises(LdpsimError, match="not both"):
        ldp_epsilon(clip=1.0, sensitivity=2.0, sigma=1.0, rounds=1, delta=1e-5)
    with pytest.raises(LdpsimError, match="or sensitivity="):
        ldp_epsilon(sigma=1.0, rounds=1, delta=1e-5)
    with pytest.raises(LdpsimError, match="neighbours= goes with clip="):
        ldp_epsilon(sensitivity=2.0, neighbours="replace", sigma=1.0, rounds=1, delta=1e-5)
    with pytest.raises(LdpsimError, match="not both"):
        calibrate(epsilon=1.0, delta=1e-5, clip=1.0, sensitivity=2.0)
    with pytest.raises(LdpsimError, match="needs clip="):
        calibrate(epsilon=1.0, delta=1e-5)


def test_laplace_scale_as_sigma_is_deprecated_but_works():
    with pytest.warns(DeprecationWarning, match="scale="):
        old = LdpAccountant(1.0, 2.0, None, mechanism="laplace", method="basic")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = LdpAccountant(scale=1.0, sensitivity=2.0, mechanism="laplace", method="basic")
    assert old.epsilon(3) == new.epsilon(3) == pytest.approx(6.0, rel=1e-6)


@pytest.mark.parametrize("eps0,rounds,delta", [(1.0, 10, 1e-5), (10.0, 20, 1e-5),
                                               (10.0, 3, 1 / 6000), (0.5, 100, 1e-6)])
def test_total_epsilon_of_the_gaussian_is_the_exact_composition(eps0, rounds, delta):
    """k Gaussians of ratio mu compose into one of mu*sqrt(k) (Balle & Wang 2018, Thm. 8);
    mu solved independently at 50 digits. The default sampler's tails (<= 1e-20 per release
    here) move epsilon by far less than the tolerance."""
    mu = gaussian_mu(eps0, delta)
    want = gaussian_epsilon(mu * math.sqrt(rounds), delta)
    assert total_epsilon(eps0, rounds, delta) == pytest.approx(want, rel=1e-6)
    if eps0 > 1:   # PLD of a multiplier below ~1 takes tens of seconds: checked where cheap
        return
    # dp_accounting's PLD composition of the same calibrated noise agrees (discretisation 1e-3).
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(dp_accounting.GaussianDpEvent(1.0 / mu), rounds)
    assert total_epsilon(eps0, rounds, delta) == pytest.approx(pld.get_epsilon(delta), rel=2e-3)


def test_total_epsilon_is_the_engines_epsilon_spent():
    """The committed MindSpore sweep (LeNet-5, d = 61,706, add/remove, delta = 1/6000):
    epsilon_spent after 3 and 4 participations at 10 per round."""
    for k, spent in ((3, 20.847774), (4, 25.50965)):
        assert total_epsilon(10.0, k, 1 / 6000, neighbours="add-remove", dim=61706) \
            == pytest.approx(spent, rel=1e-6)


def test_total_epsilon_of_pure_randomizers_and_edges():
    assert total_epsilon(2.0, 5, 1e-5, mechanism="laplace") == pytest.approx(10.0, rel=1e-6)
    assert total_epsilon(4.0, 5, 1e-5, mechanism="privunit2", dim=1000) <= 20.0
    assert total_epsilon(4.0, 5, 1e-5, mechanism="privunit2", dim=1000) \
        == pytest.approx(20.0, rel=1e-5)
    assert total_epsilon(3.0, 0, 1e-5) == 0.0 and total_epsilon(math.inf, 2, 1e-5) == math.inf
    with pytest.raises(LdpsimError, match="dim="):
        total_epsilon(4.0, 5, 1e-5, mechanism="privunit2")
    with pytest.raises(LdpsimError, match="mechanism must be one of"):
        total_epsilon(4.0, 5, 1e-5, mechanism="gauss")


def test_cli_account_ldp_takes_a_per_round_epsilon_and_clip(capsys):
    assert main(["account", "ldp", "--epsilon", "10", "--delta", "1e-5", "--rounds", "20",
                 "--method", "analytic", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon"] == pytest.approx(total_epsilon(10.0, 20, 1e-5), rel=1e-6)
    assert out["epsilon_per_round"] == 10.0
    assert main(["account", "ldp", "--sigma", "4", "--clip", "1", "--neighbours", "add-remove",
                 "--delta", "1e-5", "--rounds", "10", "--json"]) == 0
    by_clip = json.loads(capsys.readouterr().out)
    assert main(["account", "ldp", "--sigma", "4", "--sensitivity", "1", "--delta", "1e-5",
                 "--rounds", "10", "--json"]) == 0
    assert by_clip["epsilon"] == json.loads(capsys.readouterr().out)["epsilon"]
    assert main(["account", "ldp", "--sigma", "4", "--clip", "1", "--sensitivity", "2",
                 "--delta", "1e-5"]) == 2
    assert "keep one" in capsys.readouterr().err
