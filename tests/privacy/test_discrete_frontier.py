"""The secure-aggregation frontier: the exact MSE of the decoded mean of the distributed discrete
mechanisms, checked against an independent float64 computation and against Monte-Carlo runs of
the real encode -> sum mod 2^b -> decode pipeline, and its refusals."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import hadamard
from scipy.stats import chi2

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.analysis import discrete_frontier as dfr
from ldpsim._src.privacy.discrete import accounting as dacc
from ldpsim._src.privacy.discrete import modular, pipeline
from ldpsim._src.privacy.hadamard import random_signs

# Statistical checks: |measured - exact| <= Z standard deviations of the measured mean, the
# standard deviation an upper bound (dfr.mse_sd_bound, or the same bound computed here). The
# measured mean is a sum over >= 100 effectively independent squared coordinates, near normal:
# the false-failure rate at Z = 5 is about 6e-7 (Chebyshev's bound without normality: 4 %).
Z = 5.0


def _rounding_reference(mech, seed=0):
    """γ²(d/D)·Σ f(1−f)/n from float64 arithmetic: the rotation as a dense matrix
    (scipy.linalg.hadamard and the round's signs), not ldpsim's fast transform."""
    d, big, n = mech.dim, mech.padded_dim, mech.clients
    x = np.asarray(dfr._input(seed, d, mech.clip), np.float64)
    s = np.asarray(random_signs(dfr._rotation_key(seed), big), np.float64)
    u = hadamard(big).astype(np.float64) / math.sqrt(big)
    y = u @ (s * np.pad(x, (0, big - d))) / mech.granularity
    f = y - np.floor(y)
    return mech.granularity**2 * (d / big) * float(np.sum(f * (1 - f))) / n


@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_theory_against_float64_reference(kind):
    mech = dacc.DiscreteMechanism(kind, 1.0, 1 / 6, 3.0 if kind == "ddg" else 9.0, 40, 100, 16)
    th = dfr.theory(mech)
    g2 = mech.granularity**2
    assert th["mse_noise"] == pytest.approx(g2 * 100 * mech.client_variance / 40, rel=1e-12)
    # float32 rotation in the code vs float64 here: f agrees to ~1e-6 absolute
    assert th["mse_rounding"] == pytest.approx(_rounding_reference(mech), rel=1e-4)
    assert th["mse_theory"] == pytest.approx(th["mse_noise"] + th["mse_rounding"], rel=1e-12)


def test_rounding_variance_against_the_pipeline_without_noise():
    """The rounding term alone, measured on the real client encoding (noise off) and the
    server's modular sum and decoding: 64 clients, 300 trials, d = 100, coarse γ (c = 6)."""
    n, trials, d = 64, 300, 100
    mech = dacc.DiscreteMechanism("ddg", 1.0, 1 / 6, 1.0, n, d, 12)
    big = mech.padded_dim
    x = dfr._input(0, d, 1.0)
    rkey = dfr._rotation_key(0)

    @jax.jit
    def trial(t):
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.fold_in(jax.random.key(5), t),
                                                     i))(jnp.arange(n))
        rep = jax.vmap(lambda k: pipeline.encode(rkey, k, jnp.pad(x, (0, big - d)), mech,
                                                 noise=False)[0])(keys)
        err = pipeline.decode(rkey, modular.modular_sum(rep, mech.bits), mech) / n - x
        return jnp.sum(err.astype(jnp.float32) ** 2)

    mses = np.array([float(trial(t)) for t in range(trials)])
    th = dfr.theory(mech)
    exact = th["mse_rounding"]
    # Var‖e‖² ≤ 2(γ/n)²·max p(1−p)·n·E‖e‖² + ((γ/n)²d/D)²·Σ|κ₄| (dfr.mse_sd_bound, noise 0)
    g2n = mech.granularity**2 / n**2
    var1 = 2 * g2n * n * 0.25 * exact + (g2n * d / big) ** 2 * n * big * 0.25
    assert abs(mses.mean() - exact) <= Z * math.sqrt(var1 / trials), (mses.mean(), exact)
    assert exact > 1e-3                                # the term is not negligible here


def test_bits_that_cannot_fit_are_refused_with_the_least_that_fits():
    with pytest.raises(LdpsimError, match=r"ddg at 12 bits cannot fit.*least that fits is 13"):
        dfr.plan_mechanism("ddg", bits=12, epsilon=4, delta=1e-5, clients=1000, dim=61_706)
    with pytest.raises(LdpsimError, match="bits must be an integer in"):
        dfr.plan_mechanism("ddg", bits=33, epsilon=4, delta=1e-5, clients=10, dim=100)
    with pytest.raises(LdpsimError, match="cannot fit"):
        dfr.discrete_frontier(["skellam"], [12, 16], [4.0], [61_706], [1000])
    rows = []
    skipped = []
    dfr.discrete_frontier(["skellam"], [12], [4.0], [61_706], [1000], skip_unfit=True,
                          on_row=rows.append, on_unfit=skipped.append)
    assert rows == [] and len(skipped) == 1 and "skellam at 12 bits" in skipped[0]


def test_planned_rows_against_the_continuous_reference():
    """The plan keeps the wrap bound at 1e-6; its MSE contribution is negligible; more bits
    bring the MSE down towards the continuous Gaussian's (ratio → 1 for ddg)."""
    ratios = []
    for b in (12, 16, 20):
        r = dfr.frontier_cell("ddg", bits=b, epsilon=4.0, clients=100, dim=1000)
        assert r.wrap_probability <= 1e-6
        assert r.mse_wrap_bound < 1e-4 * r.mse_theory
        assert r.bits_sent == b * 1024
        ref = 1000 * dacc.gaussian_central_variance(4.0, 1e-5, 1, 1.0) / 100**2
        assert r.mse_continuous == pytest.approx(ref, rel=1e-12)
        assert r.mse_theory >= r.mse_continuous
        ratios.append(r.ratio_to_continuous)
    assert ratios[0] > ratios[1] > ratios[2] and ratios[2] < 1.01


def _check_measured(row):
    assert row.wrapped_fraction == 0.0
    sd = row.mse_sd_bound / math.sqrt(row.trials)
    assert abs(row.mse - row.mse_theory) <= Z * sd, (row.mse, row.mse_theory, sd)
    # the bound on the standard deviation is a bound: the sample's is not above it beyond the
    # chi-square spread of T trials ((T-1)s²/σ² ~ χ²_{T-1}; false failures ≤ 1e-6)
    spread = math.sqrt(chi2.ppf(1 - 1e-6, row.trials - 1) / (row.trials - 1))
    assert row.mse_se <= spread * sd


@pytest.mark.slow   # compiles the samplers (~20 s each)
@pytest.mark.parametrize("kind, bits, eps", [("ddg", 12, 16.0), ("skellam", 16, 1.0)])
def test_monte_carlo_small(kind, bits, eps):
    """d = 100, n = 50, 40 trials: at 12 bits and ε = 16 the rounding is ~1 % of the MSE."""
    row = dfr.frontier_cell(kind, bits=bits, epsilon=eps, clients=50, dim=100, trials=40,
                            chunk=16)
    _check_measured(row)


@pytest.mark.slow   # LeNet-5 size: 3 trials of 16 clients (2 chunks) of 65,536 draws
def test_monte_carlo_lenet5_size():
    """ddg and Skellam at d = 61,706. Executing the draws, not compiling, is the cost, so both
    run in one child process with XLA's default options (the suite's skip LLVM's
    optimisation)."""
    from conftest import run_with_xla_defaults

    out = run_with_xla_defaults("import sys\nsys.path[:0] = ['tests', 'tests/privacy']\n"
                                "import test_discrete_frontier as t\n"
                                "for kind in ('ddg', 'skellam'):\n"
                                "    t._monte_carlo_lenet5_size(kind)\nprint('ok')\n")
    assert out.strip().splitlines()[-1] == "ok", out


def _monte_carlo_lenet5_size(kind):
    row = dfr.frontier_cell(kind, bits=16, epsilon=4.0, clients=16, dim=61_706, trials=3,
                            chunk=8)
    _check_measured(row)


@pytest.mark.slow
def test_chunking_does_not_change_the_decoded_mean():
    mech = dfr.plan_mechanism("skellam", bits=14, epsilon=4.0, delta=1e-5, clients=20, dim=50)
    a = dfr.measure(mech, trials=2, chunk=20)
    b = dfr.measure(mech, trials=2, chunk=7)
    assert a["mse_trials"] == b["mse_trials"]      # the modular sum is exact: bit-identical
