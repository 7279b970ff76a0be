"""Empirical ε lower bounds (``ldpsim.audit``): the game, the bound, planted bugs, the CLI.

False-failure rates. Every seed is fixed, so the suite is deterministic; the rates below are
over the choice of seed (the chance that a different seed would fail).

* "Correct mechanism" assertions (``ε_lb ≤ claimed ε``) fail only if a Clopper–Pearson
  bound fails: probability ≤ α = 1 − CONFIDENCE = 1e-4 each, ≤ 2.2e-3 over the twelve of them
  and the support-mismatch bounds of ten of them (union bound). For the Gaussian the true rates at reachable thresholds are far from the
  claim (ε_lb ≈ 0.9 for a claim of 2), so the real rate is astronomically smaller.
* Planted-bug assertions (``ε_lb > claimed ε``) fail when the audit lacks power. Measured
  over 20–30 seeds at these budgets (``CONFIDENCE`` as here): Gaussian bugs ε_lb = 3.00 ±
  0.20 (min 2.57) for a claim of 2 — a miss is a 5-sd event (≈ 3e-7 under a normal
  approximation); Laplace 1.91 ± 0.02 and RR 1.93 ± 0.014 for a claim of 1 (> 40 sd).
* Statistical consistency checks (z-tests, binomial/χ² tests) use |z| ≤ 5 or a p-value
  floor of 1e-6: ≤ 6e-7 each.
* The bounded-tail test is not statistical in its conclusion (an exactly-zero rate by the
  sampler's support), and its sampled part fails with probability ≤ 1e-4.

Union over the file: below 3e-3.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ldpsim import audit as A
from ldpsim._src._checks import LdpsimError
from ldpsim.cli import main
from ldpsim._src.privacy.noise.calibration import calibrate, classic_gaussian_sigma

CONFIDENCE = 1 - 1e-4
C = 1.0
DELTA = 1e-5


def _gaussian_sigma(epsilon, *, clip=C, neighbours="replace"):
    return calibrate("gaussian", epsilon=epsilon, delta=DELTA, clip=clip, neighbours=neighbours).sigma


def _laplace_scale(epsilon, *, clip=C):
    return calibrate("laplace", epsilon=epsilon, clip=clip).scale


def _audit_scalar(mechanism, *, trials, delta, seed=0, x0=-C, x1=C, score=A.identity_score, **kw):
    return A.audit(mechanism, np.float32(x0), np.float32(x1), key=jax.random.key(seed), trials=trials,
                   delta=delta, score=score, confidence=CONFIDENCE, **kw)


TEMPLATE = {"dense": np.zeros((2, 3), np.float32), "bias": np.zeros(6, np.float32)}  # d = 12, two leaves


# --- the game ------------------------------------------------------------------------


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey])
def test_trial_keys_are_fold_in_of_position(make_key):
    key = make_key(11)
    keys = jax.jit(A.trial_keys, static_argnums=(1, 3))(key, 1, 1000, 5)
    for j in range(5):
        want = jax.random.fold_in(jax.random.fold_in(key, 1), 1000 + j)
        got = keys[j]
        if jax.dtypes.issubdtype(want.dtype, jax.dtypes.prng_key):
            want, got = jax.random.key_data(want), jax.random.key_data(got)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_non_threefry_keys_fall_back_to_fold_in():
    key = jax.random.key(3, impl="rbg")
    keys = jax.jit(A.trial_keys, static_argnums=(1, 3))(key, 0, 7, 3)
    want = jax.random.fold_in(jax.random.fold_in(key, 0), 8)
    np.testing.assert_array_equal(jax.random.key_data(keys[1]), jax.random.key_data(want))
    s = A.play(A.scalar_gaussian(clip=C, stddev=1.0), np.float32(-C), np.float32(C), A.identity_score, key=key,
               trials=10, chunk_size=16)
    assert np.all(np.isfinite(s.x0)) and np.all(np.isfinite(s.x1))


def test_scores_depend_on_position_only():
    mech = A.scalar_gaussian(clip=C, stddev=1.0)
    key = jax.random.key(5)
    whole = A.play(mech, np.float32(-C), np.float32(C), A.identity_score, key=key, trials=50)
    game = A.Game(mech, np.float32(-C), np.float32(C), A.identity_score, key=key, chunk_size=7)
    chunked, tail = game.scores(trials=50), game.scores(trials=40, start=10)
    np.testing.assert_array_equal(whole.x0, chunked.x0)
    np.testing.assert_array_equal(whole.x1, chunked.x1)
    np.testing.assert_array_equal(whole.x0[10:], tail.x0)
    assert not np.any(whole.x0 == whole.x1)  # the two inputs draw different noise


def test_kernel_counts_match_host_counts():
    game = A.Game(A.scalar_laplace(clip=C, scale=1.0), np.float32(-C), np.float32(C), A.identity_score,
                  key=jax.random.key(2), chunk_size=3000)
    n, start = 10_000, 77
    s = game.scores(trials=n, start=start)
    rng = np.random.default_rng(0)

    def host(t):
        return [n - np.searchsorted(np.sort(v), t, side="right") for v in s]

    # 5 thresholds: direct comparisons; 9001 sorted ones: binary search (same kernel as the grid)
    for t in (np.sort(rng.normal(0, 2, 5)).astype(np.float32), np.sort(rng.normal(0, 2, 9001)).astype(np.float32)):
        got = game.count_above(t, trials=n, start=start)
        for g, h in zip(got, host(t)):
            np.testing.assert_array_equal(g, h)
    t, a0, a1 = game.count_above_grid(-9.0, 0.002, 9001, trials=n, start=start)
    h0, h1 = host(t)
    np.testing.assert_array_equal(a0, h0)
    np.testing.assert_array_equal(a1, h1)


def test_nan_scores_are_refused():
    def broken(key, x):
        return jnp.where(jax.random.uniform(key) < 0.5, jnp.nan, x)

    with pytest.raises(LdpsimError, match="NaN"):
        A.count_above(broken, np.float32(0), np.float32(1), A.identity_score, np.array([0.5], np.float32),
                      key=jax.random.key(0), trials=300, chunk_size=128)  # 3 chunks: counted in the kernel
    with pytest.raises(LdpsimError, match="NaN"):  # the audit's host-side path
        A.audit(broken, np.float32(0), np.float32(1), key=jax.random.key(0), trials=100, score=A.identity_score,
                chunk_size=128)


# --- the bound -----------------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (17, 1000), (0, 10**6)])
def test_clopper_pearson_is_scipys_exact_interval(k, n):
    a = 0.025
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * a, method="exact")
    assert A.clopper_pearson_upper(k, n, a) == pytest.approx(ci.high, rel=1e-9, abs=1e-15)
    assert A.clopper_pearson_lower(k, n, a) == pytest.approx(ci.low, rel=1e-9, abs=1e-15)
    if k == 0:
        assert A.clopper_pearson_upper(0, n, a) == pytest.approx(1 - a ** (1 / n), rel=1e-9)


def test_epsilon_lower_bound_formula():
    assert A.epsilon_lower_bound(0.01, 0.5, 0.0) == pytest.approx(math.log(0.5 / 0.01))
    assert A.epsilon_lower_bound(0.5, 0.01, 1e-3) == pytest.approx(math.log((1 - 1e-3 - 0.5) / 0.01))
    assert A.epsilon_lower_bound(0.0, 0.3, 1e-5) == math.inf  # impossible event under one input
    assert A.epsilon_lower_bound(0.0, 1.0, 1e-5) == 0.0  # ... but the other rate says nothing
    assert A.epsilon_lower_bound(0.6, 0.6, 0.0) == 0.0
    np.testing.assert_allclose(A.epsilon_lower_bound(np.array([0.01, 0.02]), np.array([0.5, 0.5]), 0.0),
                               np.log([50.0, 25.0]))


def test_black_box_cap():
    # with n evaluation trials no sampled bound exceeds log((1 - U0)/U0), U0 = 1 - (alpha/2)^(1/n)
    cap = A.epsilon_cap(10**6, 0.95)
    u0 = 1 - 0.025 ** 1e-6
    assert cap == pytest.approx(math.log((1 - u0) / u0), rel=1e-9)
    assert 12.5 < cap < 13.5


def test_threshold_is_chosen_on_separate_trials():
    mech = A.scalar_gaussian(clip=C, stddev=_gaussian_sigma(4))
    r = _audit_scalar(mech, trials=20_001, delta=DELTA, select_fraction=0.25)
    assert (r.select_trials, r.eval_trials, r.trials) == (5000, 15_001, 20_001)
    # the rates are exactly those of the evaluation positions [5000, 20001)
    s = A.play(mech, np.float32(-C), np.float32(C), A.identity_score, key=jax.random.key(0), trials=15_001,
               start=5000)
    above = r.test.orientation == "above"
    fp = np.sum(s.x0 > r.test.threshold) if above else np.sum(s.x0 <= r.test.threshold)
    fn = np.sum(s.x1 <= r.test.threshold) if above else np.sum(s.x1 > r.test.threshold)
    assert (r.fpr, r.fnr) == (fp / 15_001, fn / 15_001)
    fixed = _audit_scalar(mech, trials=1000, delta=DELTA, test=A.Test(3.0, "above"))
    assert (fixed.select_trials, fixed.eval_trials) == (0, 1000)


def test_wrong_support_is_detected():
    mech = A.scalar_gaussian(clip=C, stddev=1.0)
    narrow = ((-C - 0.5, -C + 0.5), (C - 0.5, C + 0.5))  # claims |noise| <= 0.5 sigma: false
    with pytest.raises(LdpsimError, match="support"):
        _audit_scalar(mech, trials=2000, delta=DELTA, support=narrow, test=A.Test(0.0, "above"))


# --- randomized response -------------------------------------------------------------


def test_k_randomized_response_law():
    k, eps, n = 5, 0.7, 400_000
    draw = jax.jit(jax.vmap(lambda key: A.k_randomized_response(key, 2, k=k, epsilon=eps)))
    y = np.asarray(draw(jax.random.split(jax.random.key(0), n)))
    assert y.dtype == np.int32 and y.min() >= 0 and y.max() < k
    keep = math.exp(eps) / (math.exp(eps) + k - 1)
    expected = np.full(k, (1 - keep) / (k - 1) * n)
    expected[2] = keep * n
    _, p = stats.chisquare(np.bincount(y, minlength=k), expected)
    assert p > 1e-6
    # vmapped over values and a traced epsilon (no recompilation per epsilon)
    out = jax.jit(lambda key, e: A.k_randomized_response(key, jnp.arange(k), k=k, epsilon=e))(
        jax.random.key(1), 3.0)
    assert out.shape == (k,)


@pytest.mark.parametrize("kw", [dict(k=1, epsilon=1.0), dict(k=3, epsilon=0.0), dict(k=3, epsilon=-1.0),
                                dict(k=3, epsilon=math.inf)])
def test_k_randomized_response_rejects_bad_arguments(kw):
    with pytest.raises(LdpsimError):
        A.k_randomized_response(jax.random.key(0), 0, **kw)


# --- planted bugs are caught; correct mechanisms are not refuted -----------------------


def test_bug_gaussian_calibrated_with_add_remove_sensitivity_under_replace():
    # (a) sigma for sensitivity C while replace-one neighbours are 2C apart: true epsilon 4.39
    mech = A.scalar_gaussian(clip=C, stddev=_gaussian_sigma(2, neighbours="add-remove"))
    r = _audit_scalar(mech, trials=2_000_000, delta=DELTA, support_check=False)  # the threshold test's power
    assert r.epsilon_lb > 2.0, r


def test_bug_noise_for_half_the_applied_clip_full_randomizer():
    # (b) the real gaussian_randomizer on a 12-coordinate pytree: clips to C but its noise is
    # calibrated for C/2; dense pair u vs -u (u spread over both leaves)
    mech = A.gaussian_mechanism(clip=C, stddev=_gaussian_sigma(2, clip=C / 2))
    x0, x1 = A.worst_case_pair(TEMPLATE, clip=C, direction="dense")
    r = A.audit(mech, x0, x1, key=jax.random.key(1), trials=2_000_000, delta=DELTA, confidence=CONFIDENCE,
                support_check=False)   # the threshold test's power (tests/audit/test_support_mismatch.py)
    assert r.epsilon_lb > 2.0, r


def test_bug_laplace_noise_for_half_the_applied_clip():
    r = _audit_scalar(A.scalar_laplace(clip=C, scale=_laplace_scale(1, clip=C / 2)), trials=100_000, delta=0.0)
    assert r.epsilon_lb > 1.0, r


def test_bug_randomized_response_keep_probability_from_two_epsilon():
    # (c) keep probability e^{2eps}/(e^{2eps} + k - 1) while claiming eps
    def buggy(key, value):
        return A.k_randomized_response(key, value, k=4, epsilon=2 * 1.0)

    r = A.audit(buggy, np.int32(0), np.int32(1), key=jax.random.key(0), trials=100_000, delta=0.0,
                score=A.rr_score(0, 1), confidence=CONFIDENCE)
    assert r.epsilon_lb > 1.0, r


@pytest.mark.parametrize("neighbours", ["replace", "add-remove"])
def test_correct_gaussian_is_not_refuted(neighbours):
    mech = A.scalar_gaussian(clip=C, stddev=_gaussian_sigma(2, neighbours=neighbours))
    r = _audit_scalar(mech, trials=2_000_000, delta=DELTA, x0=-C if neighbours == "replace" else 0.0)
    assert 0.5 < r.epsilon_lb <= 2.0, r
    assert r.support_mismatch.epsilon_lb <= 2.0, r.support_mismatch   # no event one input never reaches


def test_correct_gaussian_full_randomizer_is_not_refuted():
    mech = A.gaussian_mechanism(clip=C, stddev=_gaussian_sigma(2))
    x0, x1 = A.worst_case_pair(TEMPLATE, clip=C, direction="dense")
    r = A.audit(mech, x0, x1, key=jax.random.key(1), trials=200_000, delta=DELTA, confidence=CONFIDENCE)
    assert r.epsilon_lb <= 2.0 and r.support_mismatch.epsilon_lb <= 2.0, r


@pytest.mark.parametrize("epsilon", [0.5, 1.0])
def test_correct_laplace_is_not_refuted(epsilon):
    r = _audit_scalar(A.scalar_laplace(clip=C, scale=_laplace_scale(epsilon)), trials=100_000, delta=0.0)
    assert 0.8 * epsilon < r.epsilon_lb <= epsilon, r
    assert r.support_mismatch.epsilon_lb <= epsilon, r.support_mismatch


@pytest.mark.parametrize("k,epsilon", [(2, 1.0), (4, 1.0), (10, 3.0)])
def test_correct_randomized_response_is_not_refuted(k, epsilon):
    r = A.audit(A.rr_mechanism(k=k, epsilon=epsilon), np.int32(0), np.int32(1), key=jax.random.key(k),
                trials=100_000, delta=0.0, score=A.rr_score(0, 1), confidence=CONFIDENCE)
    assert 0.85 * epsilon < r.epsilon_lb <= epsilon, r
    assert r.support_mismatch.epsilon_lb <= epsilon, r.support_mismatch


# --- the sampler's bounded tails (a real property of the implementation) -------------


def test_short_sampler_tails_refute_epsilon_50():
    # sigma for (50, 1e-5) is 0.30 for Delta = 2: Box–Muller with a 32-bit radius (the
    # default of earlier versions, |z| <= 6.764) makes an output below C - 6.764 sigma
    # impossible under x1 = +C, while under x0 = -C it has probability
    # Phi(Delta/sigma - 6.764) = 0.47 >> delta (sampler_delta_floor): no epsilon holds.
    rep = A.audit_randomizer("gaussian", epsilon=50, delta=DELTA, clip=C, trials=100_000,
                             confidence=CONFIDENCE, seed=3, impl="fast")
    r = rep.result
    assert r.epsilon_lb == math.inf and rep.refuted and r.zero_by_support in ("fpr", "fnr")
    # black-box, the same trials can show at most the cap (about log n): never 50
    assert 5 < r.epsilon_lb_sampled <= r.epsilon_cap < 50
    blind = A.audit_randomizer("gaussian", epsilon=50, delta=DELTA, clip=C, trials=100_000,
                               confidence=CONFIDENCE, seed=3, use_support=False,
                               impl="fast").result
    assert blind.zero_by_support is None and blind.epsilon_lb <= blind.epsilon_cap < 50
    # the default sampler reaches 11.6 sigma: the same audit does not refute epsilon 50
    default = A.audit_randomizer("gaussian", epsilon=50, delta=DELTA, clip=C, trials=100_000,
                                 confidence=CONFIDENCE, seed=3)
    assert not default.refuted and default.result.epsilon_lb <= 50


def test_jax_sampler_tails_refute_epsilon_10_but_default_does_not():
    # jax.random.normal stops at 5.42 sigma: floor Phi(2.0 - 5.42) = 3e-4 > 1e-5 at epsilon 10
    jax_rep = A.audit_randomizer("gaussian", epsilon=10, delta=DELTA, trials=400_000, confidence=CONFIDENCE,
                                 impl="jax", seed=4)
    assert jax_rep.result.epsilon_lb == math.inf
    fast = A.audit_randomizer("gaussian", epsilon=10, delta=DELTA, trials=400_000, confidence=CONFIDENCE, seed=4)
    assert fast.result.epsilon_lb <= 10


# --- the sufficient statistic vs the full randomizer ---------------------------------


def test_one_dimensional_game_is_the_full_randomizers_first_coordinate():
    x0, x1 = A.worst_case_pair(TEMPLATE, clip=C)  # axis pair: +-C on the first coordinate
    key = jax.random.key(7)
    sigma = _gaussian_sigma(2)  # the parameters of other tests here: the compiled kernels are shared
    full = A.play(A.gaussian_mechanism(clip=C, stddev=sigma), x0, x1, A.projection_score(x0, x1), key=key,
                  trials=2000)
    one = A.play(A.scalar_gaussian(clip=C, stddev=sigma), np.float32(-C), np.float32(C), A.identity_score,
                 key=key, trials=2000)
    np.testing.assert_array_equal(full.x0, one.x0)
    np.testing.assert_array_equal(full.x1, one.x1)


def test_engine_mechanism_interface_plugs_in():
    from ldpsim._src.privacy.randomizers import mechanism

    local = mechanism.make("gaussian", epsilon=2.0, delta=DELTA, clip=C)
    x0, x1 = A.worst_case_pair(TEMPLATE, clip=C, direction="dense")
    score = A.projection_score(x0, x1)
    key = jax.random.key(9)
    engine = A.play(A.from_local_mechanism(local), x0, x1, score, key=key, trials=500)
    direct = A.play(A.gaussian_mechanism(clip=C, stddev=float(local.params.scale)), x0, x1, score, key=key,
                    trials=500)
    np.testing.assert_allclose(engine.x0, direct.x0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(engine.x1, direct.x1, rtol=1e-6, atol=1e-6)
    r = A.audit(A.from_local_mechanism(local), x0, x1, key=key, trials=20_000, delta=DELTA, confidence=CONFIDENCE)
    assert r.epsilon_lb <= 2.0, r


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_full_and_sufficient_statistic_rates_agree(mechanism):
    # the calibrations of the "correct mechanism" tests, whose compiled kernels are reused
    n, t = 20_000, 0.8
    if mechanism == "gaussian":
        sigma = _gaussian_sigma(2)
        full, one = A.gaussian_mechanism(clip=C, stddev=sigma), A.scalar_gaussian(clip=C, stddev=sigma)
        x0, x1 = A.worst_case_pair(TEMPLATE, clip=C, direction="dense")
        t = 2.0
    else:  # one leaf: the Laplace randomizer draws per leaf (and compiles slowly per leaf)
        b = _laplace_scale(1.0)
        full, one = A.laplace_mechanism(clip=C, scale=b), A.scalar_laplace(clip=C, scale=b)
        x0, x1 = A.worst_case_pair(12, clip=C)
    a = A.count_above(full, x0, x1, A.projection_score(x0, x1), np.array([t], np.float32),
                      key=jax.random.key(100), trials=n)
    b = A.count_above(one, np.float32(-C), np.float32(C), A.identity_score, np.array([t], np.float32),
                      key=jax.random.key(200), trials=n)
    for ka, kb in zip(a, b):
        p = (ka[0] + kb[0]) / (2 * n)
        z = (ka[0] - kb[0]) / math.sqrt(2 * n * p * (1 - p))
        assert abs(z) < 5, (ka, kb)


# --- planning --------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:classic Gaussian calibration", "ignore:method 'classic' misses")
def test_trials_needed_for_the_classic_formula_at_epsilon_10():
    sigma = classic_gaussian_sigma(10, DELTA, 2 * C)  # delivers epsilon 10.39
    plan = A.gaussian_trials_needed(sigma=sigma, sensitivity=2 * C, epsilon=10, delta=DELTA)
    assert 1e10 < plan.trials < 1e11 and plan.true_epsilon > 10
    at = A.bound_at_quantile(plan.fpr, plan.fnr, plan.trials, delta=DELTA, confidence=0.95,
                             quantile=math.sqrt(0.5))
    assert at > 10
    correct = A.gaussian_trials_needed(sigma=_gaussian_sigma(10), sensitivity=2 * C, epsilon=10, delta=DELTA)
    assert correct.trials == math.inf


# --- the CLI ---------------------------------------------------------------------------


def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as exc:  # argparse errors exit directly
        return exc.code


def test_cli_json(capsys):
    assert main(["audit", "--mechanism", "rr", "--epsilon", "2", "--k", "4", "--trials", "20000",
                 "--confidence", "0.9999", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mechanism"] == "rr" and out["epsilon"] == 2.0 and out["trials"] == 20_000
    assert 1.0 < out["epsilon_lb"] <= 2.0 and out["confidence"] == 0.9999 and out["refuted"] is False
    assert "Clopper-Pearson" in out["description"]


def test_cli_text_and_strict(capsys):
    argv = ["audit", "--epsilon", "50", "--trials", "20000", "--sampler", "fast"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for needle in ("claimed", "epsilon = 50", "epsilon_lb", "inf", "REFUTED", "trials", "test"):
        assert needle in text
    assert main(argv + ["--strict"]) == 1


def test_cli_full_mechanism_path(capsys):
    assert main(["audit", "--epsilon", "1", "--dim", "30", "--trials", "2000", "--confidence", "0.9999",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == "full-mechanism" and out["dim"] == 30 and out["epsilon_lb"] <= 1.0


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--epsilon", "1", "--trials", "0"], "trials"),
        (["--epsilon", "1", "--trials", "-5"], "trials"),
        (["--epsilon", "1", "--confidence", "1.5"], "confidence"),
        (["--epsilon", "1", "--confidence", "0"], "confidence"),
        (["--epsilon", "1", "--mechanism", "foo"], "mechanism"),
        (["--epsilon", "0"], "epsilon"),
        (["--epsilon", "-1"], "epsilon"),
        (["--epsilon", "nan"], "epsilon"),
        (["--epsilon", "1", "--mechanism", "rr", "--dim", "10"], "dim"),
        (["--epsilon", "1", "--mechanism", "laplace", "--delta", "1e-5"], "delta"),
    ],
)
def test_cli_bad_input_is_one_line(argv, needle, capsys):
    assert _exit_code(["audit", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and needle in err
