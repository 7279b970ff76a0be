"""Pipeline audit with canary clients (``ldpsim.audit.audit_pipeline``): the one-run bound of
Steinke, Nasr & Jagielski (2023), the GDP route, the engine run, planted bugs, bad input.

False-failure rates. Keys and canary designs are fixed, so the file is deterministic; the
rates are over the choice of seed.

* "Correct pipeline" assertions (``ε_lb ≤ claimed ε``, for the one-run bound and the GDP
  bound) fail only if the bound's confidence fails: probability ≤ 1 − CONFIDENCE = 1e-3 each,
  ≤ 6e-3 over the six of them (union bound). Their margins are wide: over seeds 0–5 at these
  sizes, one-run ε_lb = 0.50 ± 0.11 and GDP ε_lb = 1.12 ± 0.24 for a claim of 2; 1.18 ± 0.04
  and 3.08 ± 0.26 (max 3.47) for a claim of 4 over 16 rounds.
* Planted-bug assertions fail when the audit lacks power. Measured over seeds 0–5 at these
  sizes and CONFIDENCE: σ for sensitivity C has GDP ε_lb 3.36 ± 0.25 (min 3.13) and μ_lb
  0.795 ± 0.051 against a claim of 2 (μ 0.502). A miss is a > 5-sd event (about 3e-7 under
  a normal approximation). The half-clip bug is the same noise. The one-round-accounting
  bug has one-run ε_lb 1.18 ± 0.04 (min 1.13) against a claim of 0.85, an 8-sd margin.
* The bound computations are exact checks against independent float64 sums and SciPy's
  Beta quantile (no randomness).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy import optimize, special, stats

from ldpsim import audit as A
from ldpsim._src._checks import LdpsimError
from ldpsim._src.audit import _pipeline
from ldpsim._src.fl import modes, planning
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.round import RoundHyper, init_state
from ldpsim.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_data import toy_logreg_problem  # noqa: E402

CONFIDENCE = 0.999
DELTA = 1e-5
M = 4000          # canaries: one shape, so every engine run below shares one compilation
DATA = toy_logreg_problem(24)


def _config(total_epsilon: float, rounds: int, **kw) -> SimulationConfig:
    return SimulationConfig(
        dataset="toy", model="logreg", population=24, clients_per_round=8, rounds=rounds,
        epsilon=A.per_round_epsilon(total_epsilon, DELTA, rounds), delta=DELTA, clip=1.0,
        seed=0, **kw)


# ----------------------------------------------------------------------------- the bound


def _p_brute(m, r, v, eps, delta):
    """Steinke et al.'s p-value from float64 sums of binomial terms (no SciPy)."""
    q = 1.0 / (1.0 + math.exp(-eps))
    pmf = [math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(r + 1)]
    tail = sum(pmf[v:])
    worst, acc = 0.0, 0.0
    for i in range(1, v + 1):
        acc += pmf[v - i]
        worst = max(worst, acc / i)
    return min(1.0, tail + 2 * m * delta * worst)


@pytest.mark.parametrize("m,r,v,eps,delta", [
    (100, 40, 30, 0.5, 0.0), (100, 40, 30, 0.5, 1e-5), (1000, 200, 170, 1.3, 1e-5),
    (1000, 200, 170, 3.0, 1e-3), (500, 60, 60, 4.0, 1e-6), (50, 10, 0, 1.0, 1e-5)])
def test_p_value_is_the_exact_binomial_sum(m, r, v, eps, delta):
    assert A.one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        _p_brute(m, r, v, eps, delta), rel=1e-10, abs=1e-15)


@pytest.mark.parametrize("m,r,v", [(100, 40, 30), (1000, 200, 170), (2000, 1000, 620),
                                   (500, 60, 60)])
def test_pure_dp_bound_is_the_logit_of_the_clopper_pearson_lower_bound(m, r, v):
    # δ = 0: P[Bin(r, q) ≥ v] = β exactly at q = Beta⁻¹(β; v, r − v + 1), so ε_lb = logit(q).
    for conf in (0.9, 0.95, 0.999):
        q = stats.beta.ppf(1 - conf, v, r - v + 1)
        expect = max(0.0, math.log(q / (1 - q)))
        got = A.one_run_epsilon_lower_bound(m, r, v, delta=0.0, confidence=conf)
        assert got == pytest.approx(expect, rel=1e-8, abs=1e-9)


@pytest.mark.parametrize("m,r,v,delta", [(1000, 200, 170, 1e-5), (4000, 100, 95, 1e-5),
                                         (300, 300, 240, 1e-4)])
def test_approximate_dp_bound_is_the_first_crossing(m, r, v, delta):
    beta = 1 - 0.95
    eps = A.one_run_epsilon_lower_bound(m, r, v, delta=delta, confidence=0.95)
    assert eps > 0
    assert _p_brute(m, r, v, eps, delta) == pytest.approx(beta, rel=1e-6)
    # every smaller ε is rejected (p ≤ β on a fine grid), and p is non-decreasing in ε there
    grid = np.linspace(0, eps * (1 - 1e-9), 400)
    p = np.array([_p_brute(m, r, v, e, delta) for e in grid])
    assert np.all(p <= beta) and np.all(np.diff(p) >= -1e-15)
    assert _p_brute(m, r, v, eps + 1e-6, delta) > beta


def test_cap_and_trivial_observations():
    beta = 0.05
    for r in (10, 100, 500):   # δ = 0 and all right: q^r = β
        q = beta ** (1 / r)
        assert A.one_run_epsilon_cap(1000, r, confidence=0.95) == pytest.approx(
            math.log(q / (1 - q)), rel=1e-8)
    assert A.one_run_epsilon_lower_bound(10, 0, 0) == 0.0
    assert A.one_run_epsilon_lower_bound(1000, 100, 50, delta=1e-5) == 0.0
    # δ only weakens the bound
    assert (A.one_run_epsilon_lower_bound(1000, 100, 95, delta=1e-3)
            < A.one_run_epsilon_lower_bound(1000, 100, 95, delta=0.0))


def test_guesses_take_the_largest_scores():
    scores = np.array([3.0, -2.0, 0.1, -0.2, 5.0])
    signs = np.array([1, 1, -1, -1, -1])
    # by |score|: 5.0 (+1, wrong), 3.0 (+1, right), -2.0 (-1, wrong), -0.2 (-1, right), 0.1
    assert A.one_run_guesses(scores, signs, 2) == (2, 1)
    assert A.one_run_guesses(scores, signs, 3) == (3, 1)
    assert A.one_run_guesses(scores, signs, 4) == (4, 2)
    assert A.one_run_guesses(scores, signs, 5) == (5, 2)


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 2.0, 4.0])
def test_gdp_epsilon_against_dp_accounting_and_an_independent_root(mu):
    import dp_accounting

    def delta_of(eps):   # Dong, Roth & Su, Cor. 2.13
        return (special.ndtr(-eps / mu + mu / 2)
                - math.exp(eps) * special.ndtr(-eps / mu - mu / 2))

    ref = optimize.brentq(lambda e: delta_of(e) - DELTA, 1e-12, 200, xtol=1e-13)
    got = A.gdp_epsilon(mu, DELTA)
    assert got == pytest.approx(ref, rel=1e-7)
    assert got == pytest.approx(dp_accounting.get_epsilon_gaussian(1 / mu, DELTA), rel=1e-4)
    assert A.gdp_epsilon(0.0, DELTA) == 0.0 and A.gdp_epsilon(math.inf, DELTA) == math.inf


def test_gdp_mu_lower_bound_from_clopper_pearson():
    out = A.gdp_mu_lower_bound(300, 1000, 250, 1000, confidence=0.95)
    fpr_u = stats.beta.ppf(1 - 0.025, 301, 700)
    fnr_u = stats.beta.ppf(1 - 0.025, 251, 750)
    assert out["fpr_upper"] == pytest.approx(fpr_u, rel=1e-12)
    assert out["mu_lb"] == pytest.approx(stats.norm.ppf(1 - fpr_u) - stats.norm.ppf(fnr_u),
                                         rel=1e-10)
    assert out["mu_hat"] == pytest.approx(stats.norm.ppf(0.7) - stats.norm.ppf(0.25), rel=1e-10)
    assert A.gdp_mu_lower_bound(600, 1000, 600, 1000)["mu_lb"] == 0.0


def test_per_round_epsilon_gives_the_total_back_through_the_engines_accountant():
    for total, rounds in ((1.0, 4), (4.0, 16), (16.0, 3)):
        plan = planning.plan(_config(total, rounds), 100)
        assert plan.epsilon_of(rounds, rounds, 1.0) == pytest.approx(total, rel=1e-3)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,needle", [
    (lambda: A.one_run_epsilon_lower_bound(0, 0, 0), "canaries"),
    (lambda: A.one_run_epsilon_lower_bound(10, 5, 6), "correct"),
    (lambda: A.one_run_epsilon_lower_bound(10, 5, 2.5), "correct"),
    (lambda: A.one_run_epsilon_lower_bound(10, 5, 3, confidence=1.0), "confidence"),
    (lambda: A.one_run_epsilon_lower_bound(10, 5, 3, confidence=0.0), "confidence"),
    (lambda: A.one_run_epsilon_lower_bound(10, 5, 3, delta=1.0), "delta"),
    (lambda: A.one_run_p_value(10, 5, 3, -1.0), "epsilon"),
    (lambda: A.gdp_epsilon(-1.0, 1e-5), "mu"),
    (lambda: A.gdp_epsilon(1.0, 0.0), "delta"),
    (lambda: A.audit_pipeline(_config(2, 1), canaries=0, data=DATA), "canaries"),
    (lambda: A.audit_pipeline(_config(2, 1), canaries=10, confidence=1.5, data=DATA),
     "confidence"),
    (lambda: A.audit_pipeline(_config(2, 1), canaries=10, observe="model", data=DATA),
     "observe"),
    (lambda: A.audit_pipeline(_config(2, 1), canaries=10, planted_bug="typo", data=DATA),
     "planted_bug"),
    (lambda: A.audit_pipeline(_config(2, 1), canaries=1, data=DATA), "select_fraction"),
    (lambda: A.audit_pipeline(_config(2, 1), canaries=10, guesses=11, data=DATA), "guesses"),
    (lambda: A.audit_pipeline(_config(2, 1, privacy_mode="central"), canaries=10, data=DATA),
     "ldp"),
    (lambda: A.audit_pipeline(_config(2, 1, noise_mode="aggregate"), canaries=10, data=DATA),
     "per-client"),
])
def test_bad_input_is_a_clear_error(call, needle):
    with pytest.raises(LdpsimError, match=needle):
        call()


# ----------------------------------------------------------------------------- the engine run


def test_rebuilt_reports_are_the_releases_the_kernel_aggregated():
    """The auditor's reports are bit-for-bit the engine's: their weighted mean is the
    round's FedAvg update (server lr 1), coordinate by coordinate."""
    pop = DATA[0]
    mech = modes.local("gaussian")
    model, round_fn, report_scores, _, unravel, d = _pipeline._compiled(
        "logreg", (6,), 3, mech, "sgd", "fedavg", 0.9, 2, None, 16, "examples", None)
    signs, dirs = A.canary_design(M, d, 0, 2.0)
    cpop = A.CanaryPopulation(pop, jnp.asarray(signs[:, None] * 2.0 * dirs), 24)
    params = model.init(_key(1), jnp.zeros((1, 6)))
    state = init_state(params, _key(2))
    hyper = RoundHyper.create(clip=1.0, client_lr=0.05, server_lr=1.0, sigma=0.7)
    ids = np.concatenate([np.arange(8), 24 + np.arange(M)]).astype(np.int32)
    mask = np.concatenate([np.zeros(8, bool), np.ones(M, bool)])   # real slots: padding
    new, _ = round_fn(state, cpop, jnp.int32(3), ids, mask, hyper)
    flat = lambda p: np.asarray(ravel_pytree(p)[0], np.float64)  # noqa: E731
    applied = flat(new.params) - flat(state.params)
    w = cpop.client_counts()[24:].astype(np.float64)
    cids = jnp.asarray(24 + np.arange(M), jnp.int32)
    rebuilt = [np.sum(w * np.asarray(report_scores(
        state.key, jnp.int32(3), cids, cpop.updates, jnp.tile(jnp.eye(d)[j], (M, 1)),
        state.privacy, hyper), np.float64)) / w.sum() for j in range(d)]
    np.testing.assert_allclose(rebuilt, applied, atol=2e-5, rtol=0)
    # and a canary's own projection is ±C plus noise (clipped from norm 2C)
    score = np.asarray(report_scores(state.key, jnp.int32(3), cids, cpop.updates,
                                     jnp.asarray(dirs), state.privacy, hyper))
    z = (score - signs) / 0.7
    assert abs(z.mean()) < 5 / math.sqrt(M) and abs(z.std() - 1) < 5 / math.sqrt(2 * M)


def _key(i):
    return jax.random.key(i)


@pytest.fixture(scope="module")
def correct_run():
    return A.audit_pipeline(_config(2.0, 4), canaries=M, confidence=CONFIDENCE, data=DATA)


def test_correct_pipeline_is_not_refuted(correct_run):
    a = correct_run
    assert a.epsilon_claimed == pytest.approx(2.0, rel=1e-3)
    assert a.participations == 4 and a.rounds == 4 and a.canaries == M
    assert 0 <= a.epsilon_lb <= a.epsilon_claimed and not a.refuted
    assert 0 <= a.epsilon_lb_gdp <= a.epsilon_claimed and not a.refuted_gdp
    assert a.mu_lb <= a.mu_claimed
    # μ̂ (moment fit) near the claimed √k·2C/σ: sd ≈ 2/√M
    assert abs(a.mu_hat - a.mu_claimed) < 5 * 2 / math.sqrt(M)
    assert a.epsilon_lb <= a.epsilon_cap
    assert a.select_canaries + a.eval_canaries == M and a.correct <= a.guesses


@pytest.mark.parametrize("bug", ["sensitivity-c", "half-clip"])
def test_planted_noise_bugs_exceed_the_claim(bug, correct_run):
    a = A.audit_pipeline(_config(2.0, 4), canaries=M, confidence=CONFIDENCE, data=DATA,
                         planted_bug=bug)
    assert a.epsilon_claimed == pytest.approx(correct_run.epsilon_claimed)
    assert a.sigma_applied == pytest.approx(a.sigma / 2, rel=1e-6)
    assert a.epsilon_lb_gdp > a.epsilon_claimed and a.refuted_gdp
    assert a.mu_lb > a.mu_claimed


@pytest.mark.slow   # two 16-round runs; the other planted bugs stay fast
def test_composition_bug_is_caught_by_the_one_run_bound():
    """Claiming one round's ε for 16 rounds: the one-run bound alone (no GDP assumption)
    refutes it."""
    good = A.audit_pipeline(_config(4.0, 16), canaries=M, confidence=CONFIDENCE, data=DATA)
    bad = A.audit_pipeline(_config(4.0, 16), canaries=M, confidence=CONFIDENCE, data=DATA,
                           planted_bug="one-round-accounting")
    assert not good.refuted and not good.refuted_gdp
    assert bad.epsilon_claimed < 1.0 < good.epsilon_claimed
    assert bad.epsilon_lb > bad.epsilon_claimed and bad.refuted
    assert bad.epsilon_lb_gdp > bad.epsilon_claimed


def test_aggregate_view_sees_far_less():
    a = A.audit_pipeline(_config(2.0, 4), canaries=M, confidence=CONFIDENCE, data=DATA,
                         observe="aggregate")
    assert a.observe == "aggregate" and math.isnan(a.epsilon_lb_gdp)
    assert 0 <= a.epsilon_lb <= a.epsilon_claimed


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_laplace_pipeline_is_audited_as_pure_dp():
    """Laplace LDP: basic composition claims k·ε; the one-run bound runs at δ = 0 and the
    GDP route (a Gaussian assumption) is not computed."""
    cfg = SimulationConfig(dataset="toy", model="logreg", population=24, clients_per_round=8,
                           rounds=4, epsilon=1.0, clip=1.0, mechanism="laplace", seed=0)
    a = A.audit_pipeline(cfg, canaries=1000, confidence=CONFIDENCE, data=DATA)
    assert a.delta == 0.0 and a.epsilon_claimed == pytest.approx(4.0)
    assert 0 <= a.epsilon_lb <= a.epsilon_claimed and math.isnan(a.epsilon_lb_gdp)


# ----------------------------------------------------------------------------- CLI


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_cli_pipeline_prints_claim_against_bound(capsys):
    rc = main(["audit", "--pipeline", "--epsilon", "2", "--total-epsilon", "--rounds", "2",
               "--canaries", "200", "--population", "24", "--clients-per-round", "4",
               "--model", "logreg", "--examples-per-client", "8"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "epsilon claimed" in out and "epsilon_lb (one run)" in out and "GDP" in out


@pytest.mark.parametrize("argv,needle", [
    (["audit", "--pipeline", "--epsilon", "2", "--canaries", "0"], "canaries"),
    (["audit", "--pipeline", "--epsilon", "2", "--confidence", "1"], "confidence"),
    (["audit", "--pipeline", "--epsilon", "2", "--trials", "10"], "--trials"),
    (["audit", "--epsilon", "2", "--canaries", "10"], "--pipeline"),
])
def test_cli_pipeline_bad_input(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
