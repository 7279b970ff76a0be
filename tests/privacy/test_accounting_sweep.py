"""Every accounting entry point, both samplings, both neighbouring relations, against
independent references (privacy review, finding 1).

References are computed here without ldpsim's accounting code:

* the exact (ε, δ) curve of the Gaussian mechanism in closed form (Balle & Wang 2018,
  Thm. 8; equivalently μ-GDP with μ = Δ/σ, Dong, Roth & Su 2019):
  ``δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)``, solved for ε with scipy;
  ``k`` compositions are μ√k-GDP;
* dp_accounting events built by hand with the convention stated next to each: under
  ``REPLACE_ONE``, dp_accounting's ``SampledWithoutReplacementDpEvent`` (RDP) takes the
  inner Gaussian's multiplier relative to the replace-one sensitivity 2C, i.e. z/2.

The full-participation cases (every user in every round) are the ones where sampling
cannot amplify: there the reported ε must be at least the exact Gaussian value.
"""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
from scipy import optimize, stats

from ldpsim.cli import main
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig
from toy_data import toy_logreg_problem
from ldpsim._src.privacy.accountants import accounting

REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE
ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest ε with δ(ε) ≤ delta for μ-GDP (closed form, scipy only)."""

    def log_delta(eps: float) -> float:
        a = stats.norm.logcdf(-eps / mu + mu / 2)
        b = eps + stats.norm.logcdf(-eps / mu - mu / 2)
        return a + math.log1p(-math.exp(b - a)) if b < a else -math.inf

    if log_delta(0.0) <= math.log(delta):
        return 0.0
    hi = 1.0
    while log_delta(hi) > math.log(delta):
        hi *= 2
    return optimize.brentq(lambda e: log_delta(e) - math.log(delta), 0.0, hi, xtol=1e-12)


def reference_rdp(event, count: int, delta: float, relation) -> float:
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    acc.compose(event, count)
    return float(acc.get_epsilon(delta))


def wor(n: int, m: int, z: float):
    """Fixed-size sampling, replace-one: inner multiplier relative to 2C."""
    return dp_accounting.SampledWithoutReplacementDpEvent(n, m, dp_accounting.GaussianDpEvent(z / 2))


def poisson(q: float, z: float):
    return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))


# ------------------------------------------------------------------ the review's vectors


def test_exact_reference_reproduces_the_review():
    # σ = C with sensitivity 2C: μ = 2, ε = 9.997 at δ = 1e-5 (the review's figure).
    assert exact_gaussian_epsilon(2.0, 1e-5) == pytest.approx(9.997256, abs=1e-5)
    assert exact_gaussian_epsilon(2.0, 1e-5) == pytest.approx(
        dp_accounting.get_epsilon_gaussian(0.5, 1e-5), rel=1e-7)


@pytest.mark.parametrize("z", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("rounds", [1, pytest.param(5, marks=pytest.mark.slow)])
def test_full_participation_fixed_is_never_below_the_exact_gaussian(z, rounds):
    """m = N: no amplification. Sensitivity 2C ⇒ μ = 2√T / z."""
    exact = exact_gaussian_epsilon(2.0 * math.sqrt(rounds) / z, 1e-5)
    kw = dict(noise_multiplier=z, clients_per_round=100, population=100, rounds=rounds,
              delta=1e-5, sampling="fixed")
    rdp = accounting.dpfedavg_epsilon(method="rdp", **kw)
    pld = accounting.dpfedavg_epsilon(method="pld", **kw)
    assert rdp.epsilon >= exact * (1 - 1e-9)
    assert pld.epsilon >= exact * (1 - 1e-9)
    assert pld.epsilon == pytest.approx(exact, rel=2e-3, abs=2e-3)   # PLD is tight
    assert rdp.neighbouring == "replace one user" and rdp.details["sensitivity"] == "2C"
    assert rdp.details["accounted_noise_multiplier"] == z / 2


def test_review_figures():
    fed = accounting.dpfedavg_epsilon(noise_multiplier=1, clients_per_round=100, population=100,
                                      rounds=1, delta=1e-5, sampling="fixed")
    assert fed.epsilon >= 9.997   # was 4.73
    fed = accounting.dpfedavg_epsilon(noise_multiplier=0.8, clients_per_round=50,
                                      population=20_000, rounds=500, delta=1e-6, sampling="fixed")
    assert fed.epsilon == pytest.approx(15.66, abs=0.01)   # was 1.97
    sgd = accounting.dpsgd_epsilon(noise_multiplier=0.9, batch_size=500, num_examples=50_000,
                                   steps=2000, delta=1e-6, sampling="fixed")
    assert sgd.epsilon == pytest.approx(67.5, abs=0.05)   # was 6.76


# ------------------------------------------------------------------ the sweep

CASES = [  # (m, N, T, z, delta)
    (16, 64, 6, 1.2, 1e-5),
    pytest.param(50, 2_000, 40, 0.9, 1e-6, marks=pytest.mark.slow),
    (10, 10, 3, 3.0, 1e-5),
]


@pytest.mark.parametrize("m,n,t,z,delta", CASES)
@pytest.mark.parametrize("sampling", ["poisson", pytest.param("fixed", marks=pytest.mark.slow)])
def test_dpfedavg_and_dpsgd_epsilon_match_independent_events(m, n, t, z, delta, sampling):
    if sampling == "fixed":
        event, relation = (wor(n, m, z), REPLACE) if m < n else (
            dp_accounting.GaussianDpEvent(z / 2), ADD_REMOVE)
    else:
        event, relation = poisson(m / n, z), ADD_REMOVE
    ref = reference_rdp(event, t, delta, relation)
    fed = accounting.dpfedavg_epsilon(noise_multiplier=z, clients_per_round=m, population=n,
                                      rounds=t, delta=delta, sampling=sampling)
    sgd = accounting.dpsgd_epsilon(noise_multiplier=z, batch_size=m, num_examples=n, steps=t,
                                   delta=delta, sampling=sampling)
    assert fed.epsilon == pytest.approx(ref, rel=1e-9)
    assert sgd.epsilon == pytest.approx(ref, rel=1e-9)
    acc = accounting.SampledGaussianAccountant(z, m, n, delta, sampling=sampling)
    assert acc.epsilon(t) == pytest.approx(ref, rel=1e-6)
    if m == n:
        exact = exact_gaussian_epsilon((1 if sampling == "poisson" else 2) * math.sqrt(t) / z,
                                       delta)
        assert fed.epsilon >= exact


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["poisson", "fixed"])
def test_solvers_return_the_multiplier_the_relation_needs(sampling):
    m, n, t, delta, target = 50, 2_000, 40, 1e-6, 3.0
    z = accounting.dpfedavg_noise_multiplier(target_epsilon=target, clients_per_round=m,
                                             population=n, rounds=t, delta=delta,
                                             sampling=sampling)
    z_sgd = accounting.dpsgd_noise_multiplier(target_epsilon=target, batch_size=m,
                                              num_examples=n, steps=t, delta=delta,
                                              sampling=sampling)
    assert z_sgd == pytest.approx(z, rel=1e-9)
    event = wor(n, m, z) if sampling == "fixed" else poisson(m / n, z)
    eps = reference_rdp(event, t, delta, REPLACE if sampling == "fixed" else ADD_REMOVE)
    assert eps <= target * (1 + 1e-6)
    assert eps == pytest.approx(target, rel=1e-3)
    if sampling == "fixed":
        # The old code solved for the replace-one event with multiplier z itself: half.
        z_half = accounting.dpfedavg_noise_multiplier(
            target_epsilon=target, clients_per_round=m, population=n, rounds=t, delta=delta,
            sampling="poisson")
        assert z > 1.5 * z_half


@pytest.mark.slow
def test_full_participation_solver_matches_the_exact_gaussian():
    z = accounting.dpfedavg_noise_multiplier(target_epsilon=2.0, clients_per_round=30,
                                             population=30, rounds=4, delta=1e-5,
                                             sampling="fixed", method="pld")
    assert exact_gaussian_epsilon(2 * math.sqrt(4) / z, 1e-5) == pytest.approx(2.0, rel=2e-3)


def test_adaptive_clipping_split_composes_to_half_the_multiplier_under_replace():
    from ldpsim._src.privacy.server.adaptive import adaptive_noise_split

    z = 1.1
    z_value, sb = adaptive_noise_split(z, 100)
    for relation_factor in (1.0, 2.0):   # add/remove: (C, 1/2); replace-one: (2C, 1)
        pair = dp_accounting.ComposedDpEvent([
            dp_accounting.GaussianDpEvent(z_value / relation_factor),
            dp_accounting.GaussianDpEvent(sb / (0.5 * relation_factor))])
        one = dp_accounting.GaussianDpEvent(z / relation_factor)
        assert reference_rdp(pair, 3, 1e-5, ADD_REMOVE) == pytest.approx(
            reference_rdp(one, 3, 1e-5, ADD_REMOVE), rel=1e-9)


@pytest.mark.parametrize("kind,extra", [
    ("dpfedavg", ["--clients-per-round", "100", "--population", "100", "--rounds", "1"]),
    ("dpsgd", ["--batch-size", "100", "--num-examples", "100", "--steps", "1"]),
])
def test_cli_account_full_participation(kind, extra, capsys):
    code = main(["account", kind, "--noise-multiplier", "1", "--delta", "1e-5", "--sampling",
                 "fixed", "--method", "pld", "--json", *extra])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon"] == pytest.approx(9.997256, abs=2e-3)
    assert out["epsilon"] >= 9.997256 - 1e-9
    assert out["sensitivity"] == "2C" and out["neighbouring"].startswith("replace one")


def test_cli_account_pld_out_of_range_reports_rdp(capsys):
    """A tiny multiplier used to exhaust memory in PLD (87 TiB); now the RDP bound."""
    code = main(["account", "ldp", "--sigma", "1e-4", "--sensitivity", "2", "--delta", "1e-5",
                 "--rounds", "3", "--method", "pld", "--json", "--sampler", "ideal"])
    captured = capsys.readouterr()
    assert code == 0
    out = json.loads(captured.out)
    assert out["method"] == "rdp"
    assert out["epsilon"] >= exact_gaussian_epsilon(2e4 * math.sqrt(3), 1e-5)
    assert "warning" in captured.err and "Traceback" not in captured.err


# ------------------------------------------------------------------ the engine


@pytest.fixture(scope="module")
def toy_data():
    return toy_logreg_problem(64, n_test=50)


def _engine_rows(toy_data, **kw) -> list[dict]:
    base = dict(dataset="toy", model="logreg", population=64, clients_per_round=16, rounds=6,
                epsilon=10.0, delta=1e-5, clip=1.0, local_steps=1, batch_size=4,
                client_lr=0.1, chunk_size=8, eval_every=3, seed=0)
    base.update(kw)
    if base.get("privacy_mode", "ldp") != "ldp":
        base.pop("epsilon")   # the local-DP budget; the other modes have their own
    return sim.simulate(SimulationConfig(**base), data=toy_data)


def _engine_epsilon(toy_data, **kw) -> list[float]:
    return [r["epsilon_spent"] for r in _engine_rows(toy_data, **kw)]


@pytest.fixture(scope="module")
def full_cohort_data():
    """16 clients only, so a cohort of 16 is every client in every round."""
    return toy_logreg_problem(16, n_test=50)


@pytest.mark.slow
def test_engine_central_uniform_is_replace_one(toy_data):
    """The review's engine case: N = 64, m = 16, z = 1.2, 6 rounds, δ = 1e-5: 16.74."""
    eps = _engine_epsilon(toy_data, privacy_mode="central", noise_multiplier=1.2)
    assert eps[-1] == pytest.approx(reference_rdp(wor(64, 16, 1.2), 6, 1e-5, REPLACE), rel=1e-9)
    assert eps[-1] == pytest.approx(16.74, abs=0.01)   # was 5.79
    assert eps[0] == pytest.approx(reference_rdp(wor(64, 16, 1.2), 3, 1e-5, REPLACE), rel=1e-9)


@pytest.mark.slow
def test_engine_central_poisson_is_add_remove(toy_data):
    eps = _engine_epsilon(toy_data, privacy_mode="central", noise_multiplier=1.2,
                          sampling="poisson")
    assert eps[-1] == pytest.approx(reference_rdp(poisson(0.25, 1.2), 6, 1e-5, ADD_REMOVE),
                                    rel=1e-9)


@pytest.mark.slow
def test_engine_distributed_full_cohort(full_cohort_data):
    eps = _engine_epsilon(full_cohort_data, privacy_mode="distributed", noise_multiplier=2.0,
                          population=16, clients_per_round=16)
    exact = exact_gaussian_epsilon(2 * math.sqrt(6) / 2.0, 1e-5)
    assert eps[-1] >= exact
    assert eps[-1] == pytest.approx(
        reference_rdp(dp_accounting.GaussianDpEvent(1.0), 6, 1e-5, ADD_REMOVE), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("neighbours,factor", [("replace", 2.0), ("add-remove", 1.0)])
def test_engine_ldp_epsilon_spent_is_exact(full_cohort_data, neighbours, factor):
    rows = _engine_rows(full_cohort_data, neighbours=neighbours, population=16,
                        clients_per_round=16)
    assert [r["max_participation"] for r in rows] == [3, 6]
    eps = [r["epsilon_spent"] for r in rows]
    from ldpsim._src.privacy.noise.calibration import analytic_gaussian_sigma

    sigma = analytic_gaussian_sigma(10.0, 1e-5, factor * 1.0)
    # every client takes part in every round: 6 Gaussians of sensitivity factor·C
    assert eps[-1] == pytest.approx(
        exact_gaussian_epsilon(factor * math.sqrt(6) / sigma, 1e-5), rel=1e-6)
    assert eps[0] == pytest.approx(
        exact_gaussian_epsilon(factor * math.sqrt(3) / sigma, 1e-5), rel=1e-6)


@pytest.mark.parametrize("argv", [
    pytest.param(["account", "dpfedavg", "--target-epsilon", "1e4", "--clients-per-round", "10",
                  "--population", "100", "--rounds", "3", "--delta", "1e-5"],
                 marks=pytest.mark.slow),
    pytest.param(["account", "dpfedavg", "--target-epsilon", "1e6", "--clients-per-round", "10",
                  "--population", "100", "--rounds", "3", "--delta", "1e-5", "--method", "pld"],
                 marks=pytest.mark.slow),
    pytest.param(["account", "dpsgd", "--target-epsilon", "800", "--batch-size", "10",
                  "--num-examples", "100", "--steps", "10", "--delta", "1e-5", "--sampling",
                  "fixed"], marks=pytest.mark.slow),
    ["account", "ldp", "--sigma", "1e-300", "--sensitivity", "2", "--delta", "1e-5",
     "--method", "analytic"],
    ["account", "ldp", "--mechanism", "laplace", "--scale", "1e-4", "--sensitivity", "2",
     "--delta", "1e-5", "--rounds", "3", "--method", "pld"],
])
def test_huge_epsilon_is_a_result_or_a_clear_error(argv, capsys):
    """Every accounting entry point handles ε in the hundreds and beyond: a result (inf
    where nothing finite holds) or a one-line error, never a traceback."""
    code = main(argv)
    captured = capsys.readouterr()
    assert code in (0, 2) and "Traceback" not in captured.err
    if code == 2:
        assert len(captured.err.strip().splitlines()) == 1
    else:
        assert captured.out.startswith("epsilon")


def test_ldp_round_epsilon_of_vanishing_noise_is_inf():
    rep = accounting.ldp_round_epsilon("gaussian", sensitivity=2.0, delta=1e-5, sigma=3.7e-299)
    assert math.isinf(rep.epsilon)


def test_cli_account_no_epsilon_where_the_sampler_cannot_hide_the_shift(capsys):
    """σ = 1e-4 for a sensitivity of 2: the shift is 20,000 noise stds, far beyond any float
    sampler's reach, so what runs tells the inputs apart with certainty (ε = inf)."""
    code = main(["account", "ldp", "--sigma", "1e-4", "--sensitivity", "2", "--delta", "1e-5",
                 "--rounds", "3", "--json"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["epsilon"] == float("inf")
    assert "no epsilon holds" in captured.err
