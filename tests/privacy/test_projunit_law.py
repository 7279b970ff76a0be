"""ProjUnit's decoded-law simulation (``simulation="law"``) against the deployed client and
server: the same law of the decoded value (two-sample Kolmogorov–Smirnov on its projections,
mean and per-coordinate variance against the exact formula), its cost-free size (jit(vmap) at
LeNet-5's d), the same printed guarantee, and its refusals.

Statistical checks use fixed keys. KS tests reject at p < 1e-6 (false failure 1e-6 each);
mean checks are 5-standard-error windows (≤ 6e-7 each, normal approximation); variance checks
are 6-standard-error windows on the sample variance (normal approximation with the sample's
fourth moment). With fewer than 20 such checks a correct implementation fails one for fresh
keys with probability < 2e-5.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.randomizers import projunit as pj

D, K, N = 48, 8, 40_000


@functools.lru_cache(maxsize=None)
def _mech(simulation, d=D, k=K, eps=4.0):
    return pj.make(epsilon=eps, dim=d, k=k, fast=False, simulation=simulation)


def _input(d, norm, seed=1):
    x = np.random.default_rng(seed).normal(size=d)
    return jnp.asarray(norm * x / np.linalg.norm(x), jnp.float32)


@functools.lru_cache(maxsize=None)
def _draws(simulation, norm, root):
    mech = _mech(simulation)
    x = _input(D, norm)

    @jax.jit
    def run(keys):
        return jax.vmap(lambda kk: mech.decode(mech.privatize(kk, x, mech.params).report,
                                                mech.params))(keys)

    keys = jax.random.split(jax.random.key(root), N)
    return np.asarray(run(keys), np.float64), np.asarray(x, np.float64)


@pytest.mark.slow   # 6-7 s: both paths compiled, 40,000 draws each
@pytest.mark.parametrize("norm", [1.0, 0.4])
def test_law_matches_the_deployed_decoded_value(norm):
    law, x = _draws("law", norm, 11)
    dep, _ = _draws("report", norm, 12)
    u = x / np.linalg.norm(x)
    rng = np.random.default_rng(5)
    v = rng.normal(size=D)
    v -= v @ u * u
    v /= np.linalg.norm(v)
    for stat in (lambda a: a @ u, lambda a: a @ v, lambda a: np.linalg.norm(a, axis=1),
                 lambda a: a[:, 0]):
        p = stats.ks_2samp(stat(law), stat(dep)).pvalue
        assert p > 1e-6, p


@pytest.mark.parametrize("norm", [1.0, 0.4])
def test_law_mean_and_variance_are_projunits_exact_ones(norm):
    law, x = _draws("law", norm, 21)
    mech = _mech("law")
    var = np.asarray(pj.variance(mech.params, jnp.asarray(x, jnp.float32)), np.float64)
    se = np.sqrt(var / N)
    assert np.all(np.abs(law.mean(0) - x) < 5 * se + 1e-6)
    sample_var = law.var(0, ddof=1)
    m4 = ((law - law.mean(0)) ** 4).mean(0)
    se_var = np.sqrt((m4 - sample_var**2) / N)
    assert np.all(np.abs(sample_var - var) < 6 * se_var), np.max(np.abs(sample_var - var) / se_var)
    total = pj.total_variance_formula(mech.params, norm)
    assert law.var(0, ddof=1).sum() == pytest.approx(total, rel=0.03)


def test_law_prints_the_deployed_guarantee_and_runs_at_lenet5_size():
    d, k = 61_706, 1000
    law = pj.make(epsilon=8.0, dim=d, k=k, simulation="law")
    dep = pj.make(epsilon=8.0, dim=d, k=k)
    assert (law.epsilon, law.delta, law.ideal_epsilon) == (dep.epsilon, dep.delta,
                                                          dep.ideal_epsilon)
    x = _input(d, 1.0, seed=3)

    @jax.jit
    def run(keys):
        return jax.vmap(lambda kk: law.decode(law.privatize(kk, x, law.params).report,
                                               law.params))(keys)

    n = 256
    out = np.asarray(run(jax.random.split(jax.random.key(0), n)), np.float64)
    assert out.shape == (n, d) and np.all(np.isfinite(out))
    # total variance E‖x̂ − x‖² against the exact formula: its sample sum over n draws has
    # relative standard error ≈ √(2/(n·d_eff)); 5 % is > 5 of those here.
    err = ((out - np.asarray(x, np.float64)) ** 2).sum(1).mean()
    assert err == pytest.approx(pj.total_variance_formula(law.params, 1.0), rel=0.05)


def test_bad_simulation_is_refused():
    with pytest.raises(LdpsimError, match="simulation"):
        pj.make(epsilon=4.0, dim=D, k=K, simulation="fast")
    with pytest.raises(LdpsimError, match="FastProjUnit"):
        pj.make(epsilon=4.0, dim=D, k=K, fast=True, simulation="law")


@pytest.mark.slow   # ~12 s: two 3-round simulations
def test_the_engine_runs_the_law_when_asked_and_its_error_matches_the_exact_variance():
    """``--projunit-simulation law`` reaches the round: the same run (same keys) differs from
    the deployed one, and both decoded aggregates' errors match ProjUnit's exact variance
    (the tolerance of tests/fl/test_mechanisms_training.py: 5 standard deviations of the mean
    of noise_norm²/theory² over R rounds; false failure about 6e-7 per run)."""
    import math
    import warnings

    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.fl.simulate import simulate
    from ldpsim._src.privacy.noise import calibration

    base = dict(dataset="synthetic", model="logreg", population=300, examples_per_client=8,
                local_steps=2, client_lr=0.5, clients_per_round=150, rounds=3, clip=0.05,
                epsilon=4.0, mechanism="projunit", projection_dim=16)
    runs = {}
    for sim in SIMULATIONS_RUN:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", calibration.SamplerTailWarning)
            runs[sim] = simulate(SimulationConfig(**base, projunit_simulation=sim))
    assert [r["noise_norm"] for r in runs["law"]] != [r["noise_norm"] for r in runs["report"]]
    d, m = 610, base["clients_per_round"]
    for sim, rows in runs.items():
        assert rows[-1]["mechanism"] == "projunit"
        q = np.mean([r["noise_norm"] ** 2 / r["theory_noise_norm"] ** 2 for r in rows])
        sd = math.sqrt((2.0 / d + 0.5 / m) / len(rows))
        assert abs(q - 1.0) <= 5 * sd, (sim, q, sd)


SIMULATIONS_RUN = ("report", "law")
