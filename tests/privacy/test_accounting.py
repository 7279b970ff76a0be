"""Accounting: reference values from dp-accounting 0.6.0 and exact identities.

The exact Gaussian references are computed here, independently of ldpsim: Balle & Wang's
closed form of the Gaussian mechanism's δ(ε) (ICML 2018, arXiv:1805.06530, Thm. 8) written
out with mpmath at 50 digits and inverted by bisection, cross-checked against Google's
``dp_accounting.get_epsilon_gaussian`` and PLD accountant.
"""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from exact_gaussian import gaussian_epsilon as _gaussian_epsilon
from exact_gaussian import gaussian_mu as _gaussian_mu
from dp_accounting.pld import PLDAccountant

from ldpsim._src._checks import LdpsimError
from ldpsim.cli import main
from ldpsim._src.privacy.accountants.accounting import (
    LdpAccountant,
    SampledGaussianAccountant,
    dpfedavg_epsilon,
    dpfedavg_noise_multiplier,
    dpsgd_epsilon,
    dpsgd_noise_multiplier,
    ldp_epsilon,
    ldp_round_epsilon,
)

MNIST = dict(batch_size=256, num_examples=60000, steps=14062, delta=1e-5)


def test_independent_reference_agrees_with_dp_accounting():
    # The reference above against Google's analytic-Gaussian solvers (dp_accounting 0.6.0,
    # their own bisection of the same closed form in log space): σ for (1, 1e-5), Δ = 1,
    # and ε for several ratios.
    assert 1 / _gaussian_mu(1.0, 1e-5) == pytest.approx(
        dp_accounting.get_sigma_gaussian(1.0, 1e-5), rel=1e-9)
    for mu, delta in [(0.5, 1e-5), (1 / 3, 1e-5), (2.0, 1e-6)]:
        assert _gaussian_epsilon(mu, delta) == pytest.approx(
            dp_accounting.get_epsilon_gaussian(1 / mu, delta), rel=1e-9)


# ------------------------------------------------------------------ DP-SGD / DP-FedAvg figures


@pytest.mark.parametrize("method, expected", [("rdp", 2.5966), ("pld", 2.3817)])
def test_dpsgd_mnist_60_epochs(method, expected):
    report = dpsgd_epsilon(noise_multiplier=1.1, method=method, **MNIST)
    assert report.epsilon == pytest.approx(expected, abs=5e-5)
    assert report.neighbouring == "add-or-remove one example"
    assert report.count == 14062 and report.delta == 1e-5


@pytest.mark.parametrize("method, expected", [("rdp", 2.4367), ("pld", 2.1245)])
def test_dpfedavg_q001_z1_t1000(method, expected):
    report = dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=100, population=10000,
                              rounds=1000, delta=1e-6, method=method)
    assert report.epsilon == pytest.approx(expected, abs=5e-5)
    assert report.neighbouring == "add-or-remove one user"
    assert report.details["sampling_probability"] == 0.01


def test_unsampled_gaussian_100_rounds():
    # q = 1 (every user every round): RDP of Gaussian(1) x 100 at 1e-5 is 96.12 (§4.5).
    report = dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=5, population=5,
                              rounds=100, delta=1e-5)
    assert report.epsilon == pytest.approx(96.12, abs=5e-3)


def test_fixed_size_sampling_is_replace_one_and_rdp_only():
    fixed = dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=100, population=10000,
                             rounds=1000, delta=1e-6, sampling="fixed")
    poisson = dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=100, population=10000,
                               rounds=1000, delta=1e-6)
    assert fixed.neighbouring == "replace one user"
    # Replace-one costs more than add/remove at the same z (it moves the sum by up to 2C).
    assert fixed.epsilon > poisson.epsilon
    with pytest.raises(LdpsimError, match="method='rdp'"):
        dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=100, population=10000,
                         rounds=10, delta=1e-6, sampling="fixed", method="pld")


def test_epsilon_monotone_in_rounds_and_zero_rounds():
    eps = [dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=10, population=1000,
                            rounds=t, delta=1e-5).epsilon for t in (0, 1, 10, 100)]
    assert eps[0] == 0.0
    assert eps == sorted(eps) and eps[1] < eps[3]
    inf = dpfedavg_epsilon(noise_multiplier=0.0, clients_per_round=10, population=1000,
                           rounds=1, delta=1e-5)
    assert math.isinf(inf.epsilon)


def test_inverse_rdp_recovers_z():
    z = dpfedavg_noise_multiplier(target_epsilon=2.4366938, clients_per_round=100,
                                  population=10000, rounds=1000, delta=1e-6)
    assert z == pytest.approx(1.0, abs=1e-5)
    z = dpsgd_noise_multiplier(target_epsilon=2.0, **MNIST)
    assert dpsgd_epsilon(noise_multiplier=z, **MNIST).epsilon <= 2.0 + 1e-9
    assert dpsgd_epsilon(noise_multiplier=z - 1e-3, **MNIST).epsilon > 2.0


def test_inverse_pld_matches_exact_gaussian():
    # Every user every round (q = 1): T rounds of Gaussian(z) are one Gaussian(z/sqrt(T)),
    # so the exact answer is sqrt(T) * (analytic-Gaussian multiplier for (eps, delta)).
    # (Sampled PLD calibration works the same way but takes ~20 s, too slow for a unit test.)
    kw = dict(clients_per_round=10, population=10, rounds=16, delta=1e-5)
    exact = math.sqrt(16) / _gaussian_mu(2.0, 1e-5)
    z_pld = dpfedavg_noise_multiplier(target_epsilon=2.0, method="pld", **kw)
    z_rdp = dpfedavg_noise_multiplier(target_epsilon=2.0, method="rdp", **kw)
    assert dpfedavg_epsilon(noise_multiplier=z_pld, method="pld", **kw).epsilon <= 2.0 + 1e-9
    assert z_pld == pytest.approx(exact, rel=1e-3)
    assert z_pld < z_rdp  # PLD is tighter than RDP


def test_sampled_gaussian_accountant_running():
    acc = SampledGaussianAccountant(1.1, 256, 60000, 1e-5, unit="example")
    assert acc.epsilon() == 0.0
    acc.step(14000)
    acc.step(62)
    assert acc.steps == 14062
    assert acc.epsilon() == pytest.approx(2.5966, abs=5e-5)
    assert acc.report().neighbouring == "add-or-remove one example"
    pld = SampledGaussianAccountant(1.0, 100, 10000, 1e-6, method="pld")
    assert pld.epsilon(1000) == pytest.approx(2.1245, abs=5e-5)


# ------------------------------------------------------------------ LDP


def test_ldp_round_epsilon_gaussian_is_exact():
    # Independent reference: the closed form's root (mpmath), and dp_accounting's solver.
    sigma, sens, delta = 4.0, 2.0, 1e-5
    report = ldp_round_epsilon(sigma=sigma, sensitivity=sens, delta=delta)
    assert report.epsilon == pytest.approx(_gaussian_epsilon(sens / sigma, delta), rel=1e-12)
    assert report.epsilon == pytest.approx(
        dp_accounting.get_epsilon_gaussian(sigma / sens, delta), rel=1e-9)
    assert report.neighbouring.startswith("local")
    # The σ at which the closed form is exactly (1, 1e-5)-DP for Δ = 2 reports ε = 1.
    s = 2.0 / _gaussian_mu(1.0, 1e-5)
    assert ldp_round_epsilon(sigma=s, sensitivity=2.0, delta=1e-5).epsilon == pytest.approx(
        1.0, rel=1e-12)


def test_ldp_round_epsilon_laplace():
    report = ldp_round_epsilon("laplace", scale=0.5, sensitivity=2.0, sampler="ideal")
    assert report.epsilon == 4.0 and report.delta == 0.0
    # what the 64-bit Laplace sampler (|x| <= 64 ln 2 scales) delivers: ½·e^{-T}·(e^ε − 1)
    # for a one-coordinate worst case (T = 44.36), up to the renormalisation
    real = ldp_round_epsilon("laplace", scale=0.5, sensitivity=2.0)
    t = 64 * math.log(2)
    assert real.epsilon == 4.0
    assert real.delta == pytest.approx(0.5 * math.exp(-t) * math.expm1(4.0), rel=1e-4)


def test_ldp_composition_methods_ordering():
    kw = dict(sigma=4.0, sensitivity=2.0, delta=1e-5)
    k = 10
    per_round = ldp_round_epsilon(**kw).epsilon
    basic = ldp_epsilon(rounds=k, method="basic", **kw)
    assert basic.epsilon == pytest.approx(k * per_round, rel=1e-12)
    assert basic.delta == pytest.approx(k * 1e-5)
    exact = ldp_epsilon(rounds=k, method="analytic", **kw).epsilon
    # k Gaussians of ratio μ = Δ/σ compose to one of ratio √k·μ (Dong, Roth & Su 2019,
    # Gaussian DP): the closed form's root, computed here.
    assert exact == pytest.approx(_gaussian_epsilon(math.sqrt(k) * 2.0 / 4.0, 1e-5), rel=1e-12)
    # Google's PLD accountant, hand built, lies above the exact value and within its grid.
    acc = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dp_accounting.GaussianDpEvent(4.0 / 2.0), k)
    assert exact <= acc.get_epsilon(1e-5) <= exact + 1e-3
    pld = ldp_epsilon(rounds=k, method="pld", **kw).epsilon
    rdp = ldp_epsilon(rounds=k, method="rdp", **kw).epsilon
    assert exact <= pld <= exact + 1e-3  # PLD is a pessimistic discretization of the exact value
    assert pld < rdp < basic.epsilon
    assert ldp_epsilon(rounds=0, method="pld", **kw).epsilon == 0.0


def test_ldp_laplace_pld_close_to_basic():
    # Laplace composition: PLD can only improve on basic composition.
    basic = ldp_epsilon("laplace", scale=1.0, sensitivity=2.0, rounds=10, method="basic")
    pld = ldp_epsilon("laplace", scale=1.0, sensitivity=2.0, rounds=10, delta=1e-5, method="pld")
    assert basic.epsilon == 20.0
    assert pld.epsilon <= 20.0 + 1e-3


def test_ldp_accountant():
    acc = LdpAccountant(sigma=4.0, sensitivity=2.0, delta=1e-5)
    assert acc.epsilon() == 0.0
    acc.step()
    acc.step(2)
    assert acc.rounds == 3
    expected = ldp_epsilon(sigma=4.0, sensitivity=2.0, delta=1e-5, rounds=3, method="pld")
    assert acc.epsilon() == expected.epsilon
    assert acc.epsilon(rounds=1) < acc.epsilon()
    with pytest.raises(LdpsimError, match="rounds"):
        acc.step(-1)


@pytest.mark.parametrize("call, match", [
    (lambda: ldp_epsilon(sigma=-1.0, sensitivity=2.0, delta=1e-5, rounds=1), "sigma"),
    (lambda: ldp_epsilon(sigma=1.0, sensitivity=0.0, delta=1e-5, rounds=1), "sensitivity"),
    (lambda: ldp_epsilon(sigma=1.0, sensitivity=1.0, rounds=1), "delta is required"),
    (lambda: ldp_epsilon(sigma=1.0, sensitivity=1.0, delta=1.5, rounds=1), "delta"),
    (lambda: ldp_epsilon(sigma=1.0, sensitivity=1.0, delta=1e-5, rounds=1.5), "rounds"),
    (lambda: ldp_epsilon(sigma=1.0, sensitivity=1.0, delta=1e-5, rounds=1, method="x"), "method"),
    (lambda: ldp_epsilon("laplace", scale=1.0, sensitivity=1.0, rounds=2, method="analytic",
                         delta=1e-5), "the gaussian mechanism only"),
    (lambda: ldp_epsilon("laplace", sigma=1.0, sensitivity=1.0, rounds=2), "scale"),
    (lambda: dpsgd_epsilon(noise_multiplier=1.0, batch_size=0, num_examples=10, steps=1,
                           delta=1e-5), "batch_size"),
    (lambda: dpsgd_epsilon(noise_multiplier=1.0, batch_size=20, num_examples=10, steps=1,
                           delta=1e-5), "batch_size must be <="),
    (lambda: dpsgd_epsilon(noise_multiplier=-1.0, batch_size=2, num_examples=10, steps=1,
                           delta=1e-5), "noise_multiplier"),
    (lambda: dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=2, population=10,
                              rounds=-1, delta=1e-5), "rounds"),
    (lambda: dpfedavg_epsilon(noise_multiplier=1.0, clients_per_round=2, population=10,
                              rounds=1, delta=1e-5, sampling="shuffle"), "sampling"),
    (lambda: dpfedavg_noise_multiplier(target_epsilon=0.0, clients_per_round=2, population=10,
                                       rounds=1, delta=1e-5), "target_epsilon"),
])
def test_bad_input_raises_named_error(call, match):
    with pytest.raises(LdpsimError, match=match):
        call()


# ------------------------------------------------------------------ CLI


def _cli_json(capsys, *argv):
    assert main(["account", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_dpsgd_json(capsys):
    out = _cli_json(capsys, "dpsgd", "--noise-multiplier", "1.1", "--batch-size", "256",
                    "--num-examples", "60000", "--steps", "14062", "--delta", "1e-5")
    assert out["epsilon"] == pytest.approx(2.5966, abs=5e-5)
    assert out["kind"] == "dpsgd" and out["neighbouring"] == "add-or-remove one example"


def test_cli_dpsgd_mindarmour_epochs(capsys):
    out = _cli_json(capsys, "dpsgd", "--noise-multiplier", "1.1", "--batch-size", "256",
                    "--num-examples", "60000", "--epochs", "1", "--delta", "1e-5",
                    "--method", "mindarmour")
    assert out["epsilon"] == pytest.approx(1.309, abs=5e-4)


def test_cli_dpfedavg_inverse(capsys):
    out = _cli_json(capsys, "dpfedavg", "--target-epsilon", "2.4366938", "--clients-per-round",
                    "100", "--population", "10000", "--rounds", "1000", "--delta", "1e-6",
                    "--sampling", "poisson")
    assert out["noise_multiplier"] == pytest.approx(1.0, abs=1e-5)
    assert out["epsilon"] <= 2.4366938 + 1e-9


def test_cli_ldp_and_error(capsys):
    out = _cli_json(capsys, "ldp", "--sigma", "4", "--sensitivity", "2", "--delta", "1e-5",
                    "--rounds", "10", "--method", "analytic")
    assert out["epsilon"] == pytest.approx(
        ldp_epsilon(sigma=4, sensitivity=2, delta=1e-5, rounds=10, method="analytic").epsilon)
    assert out["neighbouring"].startswith("local")
    assert main(["account", "ldp", "--sigma", "4", "--sensitivity", "2", "--rounds", "3"]) == 2
    assert "delta is required" in capsys.readouterr().err
