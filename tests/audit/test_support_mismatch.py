"""The support-mismatch test (``ldpsim.audit.support_mismatch_test``): an event one input's
releases hit and the other's never do, chosen on selection trials and bounded on held-out ones.

False-failure rates. Every seed is fixed, so each test is deterministic; the rates below are
over the choice of seed.

* "Correct mechanism" assertions (no refutation) fail only if a Clopper–Pearson bound fails:
  at ``CONFIDENCE = 0.999`` each support-mismatch bound errs with probability ≤ 1e-3, and a
  verdict that also counts the threshold test with ≤ 2e-3 (union bound); ≤ 1e-2 over the
  five mechanisms here. Measured: 0 refutations in 3 × 200 seeds at 95 % (Laplace, Gaussian,
  RR at ε = 1, 20,000 trials), against ≤ 5 % allowed.
* Planted-bug assertions (refuted) fail when the test lacks power. Each planted region has a
  known mass ``p`` (stated per test) and the trials are at least twice
  :func:`~ldpsim.audit.trials_to_refute` for it; the hit count is then ≥ 5 sd above the count
  that refutes (a miss is a < 3e-7 event under a normal approximation).
* The exact checks (Clopper–Pearson against scipy's ``binomtest``, host and kernel counts, the
  region's hits recomputed by :func:`~ldpsim.audit.play`) are deterministic.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from ldpsim import audit as A
from ldpsim._src.audit import _audit, _mismatch
from ldpsim._src.cli import main
from ldpsim._src.privacy.noise import calibration
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib
from ldpsim._src.privacy.randomizers import privunitg
from ldpsim._src.privacy.randomizers import randomizer as rz

CONFIDENCE = 0.999
ALPHA = 1 - CONFIDENCE


# --- the bound -------------------------------------------------------------------------


@pytest.mark.parametrize("hits,other,n", [(40, 0, 1000), (1000, 0, 1000), (300, 3, 20_000), (0, 0, 50)])
def test_event_bound_is_clopper_pearson_on_both_rates(hits, other, n):
    each = 1 - ALPHA / 2
    lower = stats.binomtest(hits, n).proportion_ci(1 - 2 * (1 - each), "exact").low if hits else 0.0
    upper = stats.binomtest(other, n).proportion_ci(1 - 2 * (1 - each), "exact").high
    if other == 0:   # zero hits in n draws: the other rate is at most 1 - (alpha/2)^(1/n)
        assert upper == pytest.approx(1 - (ALPHA / 2) ** (1 / n), rel=1e-9)
    for delta in (0.0, 1e-3):
        want = max(0.0, math.log((lower - delta) / upper)) if lower > delta else 0.0
        got = A.event_epsilon(hits, other, n, delta=delta, alpha=ALPHA)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
        # refuted iff L > e^eps U + delta
        for eps in (0.5, 2.0, 5.0):
            assert (got > eps) == (lower > math.exp(eps) * upper + delta)


def test_trials_to_refute_is_the_smallest_refuting_size():
    for rate, eps in ((0.01, 2.0), (0.2, 5.0), (0.0025, 2.0)):
        n = A.trials_to_refute(rate, eps, confidence=CONFIDENCE)
        assert A.event_epsilon(math.floor(rate * n), 0, n, delta=0.0, alpha=ALPHA) > eps
        m = math.floor(0.97 * n)
        assert A.event_epsilon(math.floor(rate * m), 0, m, delta=0.0, alpha=ALPHA) <= eps
        # about e^eps log(2/alpha)/rate (plus the lower bound's slack)
        assert 1.0 <= n / (math.exp(eps) * math.log(2 / ALPHA) / rate) < 2.0
    # far beyond sampling: epsilon 100 from a region of mass 1/2 (normal approximation branch)
    big = A.trials_to_refute(0.5, 100.0, confidence=0.95)
    assert big == pytest.approx(math.exp(100) * math.log(40) / 0.5, rel=1e-3)
    assert A.trials_to_refute(1e-6, 1.0, delta=1e-5) == math.inf


def test_candidate_regions_are_the_values_one_input_reaches_alone():
    inf = np.inf
    # statistic 0 ordered: x0 in [-1, 2], x1 in [0, 5]; statistic 1 categorical (hash-like):
    # x0 saw {1, 2}, x1 saw {2, 3}; statistic 2: NaN under x1 only
    extremes = ((np.array([-1.0, 1.0, 0.0]), np.array([2.0, 2.0, 0.0]), np.array([0, 0, 0])),
                (np.array([0.0, 2.0, inf]), np.array([5.0, 3.0, -inf]), np.array([0, 0, 7])))
    sets = ([frozenset({-1.0, 2.0}), frozenset({1.0, 2.0}), frozenset({0.0})],
            [frozenset({0.0, 5.0}), frozenset({2.0, 3.0}), frozenset()])
    regions = A.candidate_regions(extremes, sets, (True, False, True))
    got = {(g.column, g.kind, g.hit, g.threshold, g.values, g.nan) for g in regions}
    want = {
        (0, "lt", 0, 0.0, (), False), (0, "gt", 0, 5.0, (), False),       # x0 beyond x1's range
        (0, "lt", 1, -1.0, (), False), (0, "gt", 1, 2.0, (), False),      # x1 beyond x0's range
        (0, "in", 0, 0.0, (-1.0, 2.0), False), (0, "in", 1, 0.0, (0.0, 5.0), False),
        (1, "in", 0, 0.0, (1.0,), False), (1, "in", 1, 0.0, (3.0,), False),  # categorical: sets only
        (2, "lt", 1, 0.0, (), False), (2, "gt", 1, 0.0, (), False),
        (2, "in", 0, 0.0, (0.0,), False), (2, "in", 1, 0.0, (), True),    # NaN under x1 only
        (2, "lt", 0, inf, (), False), (2, "gt", 0, -inf, (), False),      # every value x1 never took
    }
    assert got == want
    # a region's hits follow the kernel's float32 rule
    v = np.array([-1.0, 0.0, 2.0, np.nan, 5.0], np.float32)
    assert A.region_hits(v, A.Region(0, "lt", 0, 0.0)) == 1
    assert A.region_hits(v, A.Region(0, "gt", 0, 2.0)) == 1
    assert A.region_hits(v, A.Region(0, "in", 0, 0.0, (2.0, 5.0), True)) == 3


def test_the_region_is_chosen_on_selection_trials_only():
    # x0 uniform on [0, 1), x1 uniform on [0, 1.1): x1 reaches (1, 1.1) with mass 1/11, x0 never
    rng = np.random.default_rng(0)
    n = 4_000
    v0, v1 = rng.random(n).astype(np.float32), (1.1 * rng.random(n)).astype(np.float32)
    sm = A.support_mismatch_from_values(v0, v1, names=("u",), confidence=CONFIDENCE)
    n_sel = n // 2
    assert (sm.kind, sm.hit_input, sm.select_trials, sm.eval_trials) == ("gt", "x1", n_sel, n - n_sel)
    assert sm.threshold == float(v0[:n_sel // 2].max())          # x0's largest value on S1
    assert sm.hits == int(np.sum(v1[n_sel:] > sm.threshold))     # counted on the held-out trials
    assert sm.other_hits == int(np.sum(v0[n_sel:] > sm.threshold))
    assert sm.refutes(1.0) and not sm.refutes(sm.epsilon_cap)
    # held-out values do not move the choice: an outlier of x0 among them only adds a hit
    v0[-1] = 1.05
    moved = A.support_mismatch_from_values(v0, v1, names=("u",), confidence=CONFIDENCE)
    assert (moved.threshold, moved.hits) == (sm.threshold, sm.hits)
    assert moved.other_hits == sm.other_hits + 1 and moved.epsilon_lb < sm.epsilon_lb


# --- planted bugs are caught -----------------------------------------------------------


def _planted_clamp(epsilon=1.0, c=6.44):
    """Laplace noise of scale 2/ε on a 2-coordinate update (pure ε for the pair ±e₁), except
    that for updates with a negative first coordinate the SECOND coordinate is clamped to
    [-c, c]: an output above c (mass exp(-c/2)/2 = 2 % under +e₁) never comes from -e₁."""
    def privatize(key, update, params):
        z = jax.random.laplace(key, (2,), jnp.float32) * params.scale
        out = update + z
        out = out.at[1].set(jnp.where(update[0] < 0, jnp.clip(out[1], -c, c), out[1]))
        return rz.Privatized(out, update, z, jnp.float32(1), jnp.float32(1), jnp.bool_(False), jnp.bool_(True))

    return rz.LocalMechanism("planted-clamp", rz.MechanismParams.create(clip=1.0, scale=2.0 / epsilon),
                             "replace", epsilon, 0.0, privatize, lambda p: p.scale,
                             lambda p: rz.pure_dp_event(epsilon))


def test_a_clamp_in_a_coordinate_the_score_ignores_is_caught():
    # region mass 2 % each side under x1 = +e1, 0 under x0; trials_to_refute(0.02, 1) ~ 1,100
    local = _planted_clamp()
    mech = A.from_local_mechanism(local)
    x0, x1 = A.worst_case_pair(2, clip=1.0)
    r = A.audit(mech, x0, x1, key=jax.random.key(0), trials=20_000, delta=0.0, confidence=CONFIDENCE)
    assert r.epsilon_lb <= local.epsilon            # the projection on x1 - x0 is blind to it
    sm = r.support_mismatch
    assert sm.statistic in ("output[1]", "min of output", "max of output") and sm.hit_input == "x1"
    assert sm.observed and sm.other_hits == 0 and sm.refutes(local.epsilon), sm
    assert sm.kind in ("lt", "gt") and abs(sm.threshold) == pytest.approx(6.44, rel=1e-6)
    assert (sm.select_trials, sm.eval_trials) == (10_000, 10_000)
    # the held-out counts, recomputed from the releases at the evaluation positions
    s = A.play(mech, x0, x1, _mismatch._coordinate(0, 1), key=jax.random.key(0), trials=10_000, start=10_000)
    region = A.Region(0, sm.kind, 1, sm.threshold)
    if sm.statistic == "output[1]":
        assert (A.region_hits(s.x1, region), A.region_hits(s.x0, region)) == (sm.hits, sm.other_hits)
    assert 0.01 < sm.hits / sm.eval_trials < 0.03
    # an AuditReport counts it: refuted by the support-mismatch test only
    rep = _audit.AuditReport("planted-clamp", 1.0, None, "replace", 1.0, 2.0, 2.0, "full-mechanism", 2,
                             "planted", "planted", "", 0.0, r)
    assert rep.refuted and rep.refuted_by == ("support-mismatch",)
    assert json.loads(json.dumps(rep.to_dict()))["support_mismatch"]["observed"] is True


def test_a_category_one_input_never_outputs_is_caught():
    # k-RR (k = 4, eps = 1) whose release under value 0 never takes category 3 (its mass moves
    # to 2); under value 1, category 3 has mass 1/(e + 3) = 0.175. The RR score gives categories
    # 2 and 3 the same value, so the threshold test cannot see it.
    k, eps = 4, 1.0

    def buggy(key, value):
        y = A.k_randomized_response(key, value, k=k, epsilon=eps)
        return jnp.where((value == 0) & (y == 3), 2, y)

    r = A.audit(buggy, np.int32(0), np.int32(1), key=jax.random.key(3), trials=4_000, delta=0.0,
                score=A.rr_score(0, 1), confidence=CONFIDENCE)
    assert r.epsilon_lb <= eps
    sm = r.support_mismatch
    assert sm.refutes(eps) and sm.hit_input == "x1" and sm.other_hits == 0, sm
    if sm.statistic == "output":   # the category itself (or its hash, one value)
        assert sm.kind == "in" and sm.values == (3.0,) or sm.kind == "gt" and sm.threshold == 2.0
    else:
        assert sm.statistic == "the whole release (hashed)" and len(sm.values) == 1
    # the clean RR at the same epsilon: nothing (no value of one input is missing under the other)
    clean = A.audit(A.rr_mechanism(k=k, epsilon=eps), np.int32(0), np.int32(1), key=jax.random.key(3),
                    trials=4_000, delta=0.0, score=A.rr_score(0, 1), confidence=CONFIDENCE)
    assert not clean.support_mismatch.refutes(eps) and clean.support_mismatch.epsilon_lb <= eps


def _truncated_gaussian(*, clip, stddev, bound):
    """``clip(x) + σz`` with ``z`` the normal truncated to ``|z| ≤ bound`` (inverse CDF)."""
    tail = float(stats.norm.sf(bound))

    def mechanism(key, x):
        u = jax.random.uniform(key, (), jnp.float32, minval=tail, maxval=1.0 - tail)
        z = jnp.clip(jax.scipy.special.ndtri(u), -bound, bound)
        return jnp.clip(jnp.asarray(x, jnp.float32), -clip, clip) + np.float32(stddev) * z

    return mechanism


def test_bounded_gaussian_noise_against_a_shifted_input_is_caught():
    # the analytic sigma of (eps 1, delta 1e-5) with noise bounded at 2.5 sigma: an output above
    # -C + 2.5 sigma never comes from x0 = -C and has mass Phi(-(2.5 - 2C/sigma)) - Phi(-2.5)
    # = 0.0067 under x1 = +C (trials_to_refute ~ 5,800 with no hit of x0)
    sigma = calibration.calibrate("gaussian", epsilon=1.0, delta=1e-5, clip=1.0).sigma
    mech = _truncated_gaussian(clip=1.0, stddev=sigma, bound=2.5)
    sm = A.support_mismatch_test(mech, np.float32(-1.0), np.float32(1.0), key=jax.random.key(5),
                                 trials=40_000, delta=1e-5, confidence=CONFIDENCE)
    assert sm.refutes(1.0) and sm.kind in ("lt", "gt"), sm
    # x0's largest output (x1's smallest: -edge), reached within 0.05 sigma on S1's 10,000
    # trials: the truncated density there is 0.0178/sigma, so a larger gap has probability
    # (1 - 0.0178 * 0.05)^10000 = 1.4e-4
    edge = 2.5 * sigma - 1.0
    assert edge - 0.05 * sigma <= abs(sm.threshold) <= edge + 1e-4 * sigma
    # the ideal Gaussian at the same (eps, delta) (the engine's sampler): not refuted
    ideal = A.support_mismatch_test(A.scalar_gaussian(clip=1.0, stddev=sigma), np.float32(-1.0),
                                    np.float32(1.0), key=jax.random.key(5), trials=40_000, delta=1e-5,
                                    confidence=CONFIDENCE)
    assert not ideal.refutes(1.0), ideal


def test_privunitg_alpha_on_a_coarse_grid_is_caught(monkeypatch):
    """PrivUnitG's float32 floor of alpha, at a scale sampling reaches: alpha comes from
    ``ndtri`` of a uniform that is at least one grid step, so the coordinate along the input never falls below
    ``ndtri(step·(1 − q))``, while for the orthogonal input that coordinate is a raw Gaussian
    draw. With the float32 grid (2^-23) the region has mass 7.6e-8 at eps 2, d = 2 and refuting
    the claim takes ~5e8 held-out trials per input; on a 2^-6 grid it has mass 2^-6·(1 − q) = 0.010
    (trials_to_refute ~ 8,300)."""
    step = 2.0**-6

    def coarse_alpha(key, upper, params):   # the earlier sampler, on a 2^-6 grid
        u = 1.0 - jnp.floor(jax.random.uniform(key, (), jnp.float32) / step) * step
        q = jnp.asarray(params.q, jnp.float32)
        hi = jnp.maximum(-jax.scipy.special.ndtri(u * q), params.gamma)
        lo = jnp.minimum(jax.scipy.special.ndtri(u * (1.0 - q)), params.gamma)
        return jnp.where(upper, hi, lo)

    monkeypatch.setattr(privunitg, "sample_alpha", coarse_alpha)
    local = mechanism_lib.make("privunitg", epsilon=2.0, dim=2)

    def mech(key, x):
        return local.privatize(key, x, local.params).report

    e1, e2 = jnp.array([1.0, 0.0], jnp.float32), jnp.array([0.0, 1.0], jnp.float32)
    sm = A.support_mismatch_test(mech, e1, e2, key=jax.random.key(0), trials=40_000, confidence=CONFIDENCE)
    floor = float(special.ndtri(step * (1 - float(local.params.q))))
    assert sm.refutes(local.epsilon) and sm.kind == "lt", sm
    assert sm.statistic in ("direction[0]", "direction[1]", "min of direction")
    assert sm.threshold == pytest.approx(floor, abs=1e-3)   # alpha's floor, reached on S1
    assert sm.hit_input == ("x1" if sm.statistic == "direction[0]" else "x0")


def test_a_nan_release_under_one_input_is_a_mismatch():
    # a release that is all NaN for one input (a diverged client) is told apart with certainty
    def leaky(key, x):
        out = x + jax.random.normal(key, x.shape)
        return jnp.where(x[0] > 0, jnp.nan, out)

    sm = A.support_mismatch_test(leaky, jnp.array([-1.0, 0.0]), jnp.array([1.0, 0.0]),
                                 key=jax.random.key(0), trials=2_000, confidence=CONFIDENCE)
    # (the region: NaN itself, or a statistic XLA computes from NaNs: its min/max reductions)
    assert sm.hit_input == "x1" and sm.hits == sm.eval_trials and sm.other_hits == 0, sm
    assert sm.epsilon_lb == pytest.approx(sm.epsilon_cap) and sm.refutes(1.0)


# --- correct mechanisms are not flagged ------------------------------------------------


@pytest.mark.parametrize("name", ["laplace", "gaussian-full", "rr", "privunitg"])
def test_correct_mechanisms_are_not_refuted(name):
    eps, delta = 1.0, 0.0
    if name == "laplace":
        b = calibration.calibrate("laplace", epsilon=eps, clip=1.0).scale
        mech, x0, x1 = A.scalar_laplace(clip=1.0, scale=b), np.float32(-1.0), np.float32(1.0)
    elif name == "gaussian-full":
        delta = 1e-5
        sigma = calibration.calibrate("gaussian", epsilon=eps, delta=delta, clip=1.0).sigma
        mech = A.gaussian_mechanism(clip=1.0, stddev=sigma)
        x0, x1 = A.worst_case_pair(3, clip=1.0)
    elif name == "rr":
        mech, x0, x1 = A.rr_mechanism(k=4, epsilon=eps), np.int32(0), np.int32(3)
    else:   # the real PrivUnitG on orthogonal inputs (its float32 mismatch needs ~5e8 trials)
        eps = 2.0
        local = mechanism_lib.make("privunitg", epsilon=eps, dim=2)
        mech = A.from_local_mechanism(local)
        x0, x1 = jnp.array([1.0, 0.0], jnp.float32), jnp.array([0.0, 1.0], jnp.float32)
    sm = A.support_mismatch_test(mech, x0, x1, key=jax.random.key(11), trials=20_000, delta=delta,
                                 confidence=CONFIDENCE)
    assert not sm.refutes(eps) and sm.epsilon_lb <= eps, sm
    assert sm.candidates > 0 and sm.eval_trials == 10_000


# --- the kernel path (large audits) counts what the host path counts -------------------


@pytest.mark.slow   # three more kernels to compile; the accelerator-size path of every count
def test_kernel_counts_equal_host_counts(monkeypatch):
    local = _planted_clamp()
    mech = A.from_local_mechanism(local)
    x0, x1 = A.worst_case_pair(2, clip=1.0)

    def buggy(key, value):   # an "in" region (the category test)
        y = A.k_randomized_response(key, value, k=4, epsilon=1.0)
        return jnp.where((value == 0) & (y == 3), 2, y)

    def both():
        return (A.support_mismatch_test(mech, x0, x1, key=jax.random.key(2), trials=6_001,
                                        confidence=CONFIDENCE, chunk_size=512),
                A.support_mismatch_test(buggy, np.int32(0), np.int32(1), key=jax.random.key(3),
                                        trials=3_000, confidence=CONFIDENCE, chunk_size=256))

    host = both()
    monkeypatch.setattr(_mismatch, "HOST_TRIALS", 0)      # every count and extreme in the kernel
    monkeypatch.setattr(_mismatch, "PILOT_TRIALS", 700)   # S1's extremes in the kernel beyond 700
    kernel = both()
    for h, k in zip(host, kernel):
        assert dataclasses.asdict(h) == dataclasses.asdict(k)
    assert kernel[1].refutes(1.0) and kernel[1].kind == "in"


# --- the default audit of a randomizer and the CLI -------------------------------------


def test_default_audit_reports_the_support_mismatch():
    rep = A.audit_randomizer("laplace", epsilon=1.0, trials=4_000, confidence=CONFIDENCE, seed=2)
    sm = rep.result.support_mismatch
    assert isinstance(sm, A.SupportMismatch) and sm.eval_trials == 2_000 and not rep.refuted
    out = json.loads(json.dumps(rep.to_dict()))
    assert out["support_mismatch"]["eval_trials"] == 2_000 and out["refuted_by"] == []
    off = A.audit_randomizer("laplace", epsilon=1.0, trials=4_000, confidence=CONFIDENCE, seed=2,
                             support_check=False)
    assert off.result.support_mismatch is None
    assert off.result.epsilon_lb == rep.result.epsilon_lb   # the threshold test is unchanged


def test_cli_prints_the_support_line(capsys):
    assert main(["audit", "--epsilon", "50", "--trials", "4000"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    line = rows["support"]
    # sigma 0.30 against a 2C shift: perfectly separated, but epsilon 50 is beyond sampling
    assert "held-out trials" in line and "epsilon_lb" in line and "trials per input" in line
    assert main(["audit", "--mechanism", "rr", "--epsilon", "1", "--k", "3", "--trials", "2000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["support_mismatch"]) >= {"statistic", "region", "hits", "other_hits", "epsilon_lb",
                                            "observed"}


# --- the real SignDS at the epsilons where its float32 CDF drops counts ------------------


def _signds_overlap_pair(d):
    """x1 = (0, ..., d-1) and x0 with half of each top-10 / bottom-10 set swapped out."""
    x1 = np.arange(d, dtype=np.float32)
    x0 = x1.copy()
    x0[[*range(d - 10, d - 5), *range(d - 20, d - 15)]] = x1[[*range(d - 20, d - 15), *range(d - 10, d - 5)]]
    x0[[*range(5, 10), *range(15, 20)]] = x1[[*range(15, 20), *range(5, 10)]]
    return jnp.asarray(x0), jnp.asarray(x1)


def _ideal_count_pmf(d, k, h, thr, eps, shared):
    """Law of ``|S ∩ T(x)|`` for a report S of the ideal SignDS law (Jiang et al. 2022) from an
    update whose top-k set T' shares ``shared`` indices with T(x) (same sign): ν ∝
    C(k,ν)C(d−k,h−ν)e^{ε·1[ν≥thr]}; ν indices uniform in T' (hypergeometric in the shared
    ones) and h − ν uniform outside T' (hypergeometric in the k − shared of T(x) there)."""
    nu = np.arange(h + 1)
    logw = np.array([math.lgamma(k + 1) - math.lgamma(v + 1) - math.lgamma(k - v + 1) if v <= k else -np.inf
                     for v in nu])
    logw += np.array([math.lgamma(d - k + 1) - math.lgamma(h - v + 1) - math.lgamma(d - k - h + v + 1)
                      for v in nu]) + eps * (nu >= thr)
    p_nu = np.exp(logw - special.logsumexp(logw))
    out = np.zeros(h + k + 1)
    for v in nu:
        if p_nu[v] == 0:
            continue
        a = stats.hypergeom(k, shared, v).pmf(np.arange(v + 1)) if v <= k else np.zeros(1)
        c = stats.hypergeom(d - k, k - shared, h - v).pmf(np.arange(h - v + 1))
        out[:a.size + c.size - 1] += p_nu[v] * np.convolve(a, c)
    return out


@pytest.mark.slow   # SignDS at d = 1000 compiles for ~30 s on 2 CPU cores
@pytest.mark.parametrize("eps", [30.0, 100.0])
def test_signds_overlapping_updates_are_told_apart_but_the_printed_epsilon_is_not_refuted(eps):
    """SignDS (MindSpore defaults, d = 1000, k = 10) on two updates whose top-k sets share 5
    indices. Its float32 CDF never draws the counts ν with probability below its resolution
    (the signds module docstring), and every report is told apart. Sampling sees the
    separation, but the ideal law gives the same region a probability too small to sample (computed here
    exactly), so no sampling audit can refute eps = 30 or 100: the bound stays at its cap and
    never above the printed epsilon, whatever the sampler prints after a fix."""
    d = 1000
    local = mechanism_lib.make("signds", dim=d, sign_eps=eps)
    p = local.params
    x0, x1 = _signds_overlap_pair(d)

    def mech(key, x):
        return local.privatize(key, x, p).report

    counts = A.signds_statistics(p, {"x1": x1, "x0": x0})
    n = 2_000
    sm = A.support_mismatch_test(mech, x0, x1, key=jax.random.key(0), trials=n,
                                 statistics=A.statistics_of(counts), confidence=CONFIDENCE)
    assert sm.epsilon_lb <= local.epsilon and not sm.refutes(local.epsilon), sm
    assert sm.observed and sm.epsilon_lb > 0.9 * sm.epsilon_cap   # told apart in (almost) every report
    # the region's ideal probabilities: under the hit input (the statistic counts in its own
    # top-k set: shared = k) and under the other (shared = 5)
    own = sm.statistic.endswith(sm.hit_input)
    pmf_hit = _ideal_count_pmf(d, p.k, p.h, p.threshold, eps, p.k if own else 5)
    pmf_other = _ideal_count_pmf(d, p.k, p.h, p.threshold, eps, 5 if own else p.k)
    values = np.arange(pmf_hit.size, dtype=float)
    region = A.Region(0, sm.kind, 0, sm.threshold or 0.0, sm.values, sm.nan)
    mask = np.array([A.region_hits(np.array([v], np.float32), region) == 1 for v in values])
    hit_p, other_p = pmf_hit[mask].sum(), pmf_other[mask].sum()
    z = (sm.hits - sm.eval_trials * hit_p) / math.sqrt(sm.eval_trials * hit_p * (1 - hit_p) + 1e-12)
    assert abs(z) < 5 or sm.hits == sm.eval_trials and hit_p > 1 - 1e-3
    # the ideal law explains the other input's count too (a count this low has probability
    # >= 1e-3 under it): sampling sees nothing the ideal SignDS would not show
    assert stats.binom.cdf(sm.other_hits, sm.eval_trials, other_p) >= 1e-3
    assert math.log(hit_p / max(other_p, 1e-300)) <= eps + 1e-6   # and is eps-DP on this region
