"""Calibration against the MindSpore calibration reference table (exact σ, Balle & Wang 2018), dp_accounting and the δ(σ) identity."""

import math
import warnings

import numpy as np
import pytest
from dp_accounting import gaussian_mechanism

from ldpsim import LdpsimError
from ldpsim._src.privacy.noise import calibration as cal

# the MindSpore calibration reference table (exact σ, Balle & Wang 2018) (Δ = 1): ε, δ, exact σ, java-faithful σ, classic σ.
TABLE = [
    (0.5, 1e-5, 7.031827, 7.069653, 9.689611),
    (1, 1e-5, 3.730632, 3.739267, 4.844805),
    (1, 0.01, 1.877876, 1.877903, 3.107511),
    (8, 1e-5, 0.600229, 0.632772, 0.605601),
    (10, 0.01, 0.350097, 0.349953, 0.310751),
    (50, 0.01, 0.124601, 0.125934, 0.062150),
    (100, 0.01, 0.082854, 0.083293, 0.031075),
]


@pytest.mark.parametrize("eps,delta,exact,java,classic", TABLE)
def test_table_exact_java_classic(eps, delta, exact, java, classic):
    # The table is printed to 6 decimals: allow that rounding on top of 1e-6 relative.
    assert cal.analytic_gaussian_sigma(eps, delta) == pytest.approx(exact, rel=1e-6, abs=5e-7)
    with warnings.catch_warnings():
        # (10, 0.01) for MindSpore and ε ≥ 1 for classic miss the request: tests/privacy/test_calibration_extremes.py
        warnings.simplefilter("ignore", cal.CalibrationShortfallWarning)
        assert cal.mindspore_gaussian_sigma(eps, delta) == pytest.approx(java, rel=1e-3)
        warnings.simplefilter("ignore", cal.ClassicGaussianRangeWarning)
        assert cal.classic_gaussian_sigma(eps, delta) == pytest.approx(classic, rel=1e-6, abs=5e-7)


def test_exact_sigma_reproduces_delta():
    for eps in (0.1, 0.5, 1.0, 3.0, 10.0, 50.0, 100.0):
        for delta in (1e-10, 1e-5, 1e-3, 0.01, 0.3):
            sigma = cal.analytic_gaussian_sigma(eps, delta, sensitivity=2.0)
            assert cal.analytic_gaussian_delta(sigma, eps, 2.0) == pytest.approx(delta, rel=1e-9)


def test_agrees_with_dp_accounting_on_a_grid():
    for eps in np.geomspace(0.05, 200, 13):
        for delta in (1e-9, 1e-6, 1e-4, 1e-2, 0.2):
            ours = cal.analytic_gaussian_sigma(float(eps), delta)
            ref = gaussian_mechanism.get_sigma_gaussian(float(eps), delta)
            assert ours == pytest.approx(ref, rel=1e-9)


def test_sensitivity_scales_sigma_linearly():
    assert cal.analytic_gaussian_sigma(2.0, 1e-5, 3.0) == pytest.approx(3 * cal.analytic_gaussian_sigma(2.0, 1e-5))


def test_monotonic_in_epsilon_and_delta():
    eps = np.geomspace(0.01, 500, 40)
    sig = [cal.analytic_gaussian_sigma(float(e), 1e-5) for e in eps]
    assert all(a > b for a, b in zip(sig, sig[1:]))
    deltas = np.geomspace(1e-12, 0.5, 40)
    sig = [cal.analytic_gaussian_sigma(1.0, float(d)) for d in deltas]
    assert all(a > b for a, b in zip(sig, sig[1:]))
    ms = [cal.mindspore_gaussian_sigma(float(e), 0.01) for e in (1, 5, 20, 50, 100)]
    assert all(a > b for a, b in zip(ms, ms[1:]))


def test_exact_is_never_larger_than_classic_below_one():
    for eps in (0.05, 0.2, 0.5, 0.9):
        assert cal.analytic_gaussian_sigma(eps, 1e-5) < cal.classic_gaussian_sigma(eps, 1e-5)


def test_classic_warns_at_and_above_one():
    with pytest.warns(cal.ClassicGaussianRangeWarning, match="epsilon < 1"):
        cal.classic_gaussian_sigma(1.0, 1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal.classic_gaussian_sigma(0.99, 1e-5)  # no warning inside the proven range


def test_laplace_scale_and_neighbours():
    assert cal.laplace_scale(2.0, 1.0) == 0.5
    assert cal.sensitivity(1.5) == 3.0  # replace-one is the default: 2C
    assert cal.sensitivity(1.5, "add-remove") == 1.5
    c = cal.calibrate("laplace", epsilon=2.0, clip=1.0)
    assert (c.sensitivity, c.scale, c.neighbours, c.method) == (2.0, 1.0, "replace", "laplace")
    assert set(c.as_dict()) == {"mechanism", "epsilon", "delta", "clip", "neighbours", "sensitivity", "method", "scale",
                                "achieved_epsilon", "achieved_delta", "ideal_epsilon", "ideal_delta",
                                "sampler", "dim", "tail_mass"}
    assert c.achieved_epsilon == 2.0 and c.ideal_delta == 0.0 and not c.shortfall
    assert 0 < c.achieved_delta < 1e-18   # the 64-bit Laplace sampler's bounded tails
    g = cal.calibrate(epsilon=50, delta=0.01, clip=1, method="mindspore", neighbours="add-remove")
    assert g.sigma == pytest.approx(0.125934, rel=1e-3) and g.sensitivity == 1.0
    assert "sigma" in g.as_dict() and "scale" not in g.as_dict()
    g2 = cal.calibrate(epsilon=50, delta=0.01, clip=1)
    assert g2.sigma == pytest.approx(2 * 0.124601, rel=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(epsilon=0, delta=1e-5, clip=1), "epsilon"),
        (dict(epsilon=-1, delta=1e-5, clip=1), "epsilon"),
        (dict(epsilon=math.inf, delta=1e-5, clip=1), "epsilon"),
        (dict(epsilon=math.nan, delta=1e-5, clip=1), "epsilon"),
        (dict(epsilon=1, delta=0, clip=1), "delta"),
        (dict(epsilon=1, delta=1, clip=1), "delta"),
        (dict(epsilon=1, delta=math.nan, clip=1), "delta"),
        (dict(epsilon=1, delta=None, clip=1), "delta"),
        (dict(epsilon=1, delta=1e-5, clip=0), "clip"),
        (dict(epsilon=1, delta=1e-5, clip=math.inf), "clip"),
        (dict(epsilon=1, delta=1e-5, clip=1, method="bogus"), "method"),
        (dict(epsilon=1, delta=1e-5, clip=1, neighbours="swap"), "neighbours"),
    ],
)
def test_bad_input_names_parameter_and_range(kwargs, match):
    with pytest.raises(LdpsimError, match=match):
        cal.calibrate("gaussian", **kwargs)


def test_laplace_rejects_delta_and_gaussian_methods():
    with pytest.raises(LdpsimError, match="pure epsilon-DP"):
        cal.calibrate("laplace", epsilon=1, delta=1e-5, clip=1)
    with pytest.raises(LdpsimError, match="Gaussian mechanism only"):
        cal.calibrate("laplace", epsilon=1, clip=1, method="classic")
    with pytest.raises(LdpsimError, match="mechanism"):
        cal.calibrate("exponential", epsilon=1, clip=1)
