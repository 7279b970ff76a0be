"""The mechanism frontier (ldpsim._src.privacy.analysis.frontier): measured MSE against exact theory,
chunking, the lower bound's formula, keys and bad input.

Statistical checks use fixed keys (deterministic), tolerances from the sampling error: the
measured MSE is the mean of T = 40 independent trials, compared with the theory in units of
its standard error estimated from the trials; the bound 5 gives a false-failure rate below
1e-4 per check (Student t with 39 dof: P(|t| > 5) ≈ 1.3e-5; the trials' MSE is a weighted
chi-square of ~d degrees of freedom, whose mild skew at d ≥ 16 leaves this well under 1e-4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.noise import calibration
from ldpsim._src.privacy.randomizers import duchi
from ldpsim._src.privacy.analysis import frontier as fr
from ldpsim._src.privacy.randomizers import mechanism

UNBIASED = ("gaussian", "laplace", "privunit2", "privunitg", "duchi")


@pytest.mark.parametrize("name", UNBIASED)
def test_measured_mse_matches_exact_theory_unbiased(name):
    row = fr.frontier_cell(name, epsilon=2.0, dim=16, clients=20, trials=40, seed=3)
    assert row.mse_theory_bias2 < 1e-9 * row.mse_theory          # unbiased: no bias term
    assert abs(row.mse - row.mse_theory) <= 5 * row.mse_se, row


def test_signds_error_is_its_squared_bias_plus_variance():
    row = fr.frontier_cell("signds", epsilon=4.0, dim=100, clients=20, trials=40, seed=3)
    # biased: the bias term is most of its error, and the measured error matches the sum
    assert row.mse_theory_bias2 > 0.5 * row.mse_theory
    assert abs(row.mse - row.mse_theory) <= 5 * row.mse_se, row


def test_sphere_inputs_theory_is_summed_per_client():
    row = fr.frontier_cell("duchi", epsilon=1.0, dim=16, clients=20, trials=40, seed=5,
                           inputs="sphere")
    b = duchi.radius(epsilon=1.0, dim=16)
    # tr Var = B² − ‖x‖² = B² − 1 for every unit input (independent of its direction)
    assert row.mse_theory == pytest.approx((b * b - 1.0) / 20, rel=1e-5)
    assert abs(row.mse - row.mse_theory) <= 5 * row.mse_se, row


def test_theory_values_from_independent_formulas():
    d, n, eps = 50, 7, 1.5
    # Gaussian: d σ²/n, σ the analytic Gaussian for sensitivity 2 (replace, clip 1)
    sigma = calibration.analytic_gaussian_sigma(eps, 1e-5, 2.0)
    g = fr.build_mechanism("gaussian", epsilon=eps, dim=d)
    v, b2 = fr.theory_mse(g, fr.common_input(0, d), n)
    assert v == pytest.approx(d * sigma**2 / n, rel=1e-5) and b2 < 1e-12
    # Laplace with L1 clip √d: b = 2√d/ε per coordinate, variance 2b², total 8d²/ε²
    lap = fr.build_mechanism("laplace", epsilon=eps, dim=d)
    v, _ = fr.theory_mse(lap, fr.common_input(0, d), n)
    assert v == pytest.approx(8 * d * d / eps**2 / n, rel=1e-5)
    # Duchi et al.: B² − 1, B = coth(ε/2)(d−1)B(½,(d−1)/2)/2 (float64 here, independently)
    bb = (d - 1) * math.exp(special.betaln(0.5, (d - 1) / 2)) / (2 * math.tanh(eps / 2))
    v, _ = fr.theory_mse(fr.build_mechanism("duchi", epsilon=eps, dim=d),
                         fr.common_input(0, d), n)
    assert v == pytest.approx((bb * bb - 1) / n, rel=1e-5)


@pytest.mark.parametrize("name", ["privunit2", "signds"])   # rejection loop; top-k
def test_chunking_changes_only_the_summation_order(name):
    mech = fr.build_mechanism(name, epsilon=1.0, dim=100)
    sums = [np.asarray(fr.decoded_error_sum(mech, dim=100, clients=20, trial=1, chunk=c)[0],
                       np.float64) for c in (3, 7, 20)]
    scale = np.max(np.abs(sums[0]))
    for s in sums[1:]:
        np.testing.assert_allclose(s, sums[0], rtol=0, atol=1e-5 * scale)
    # another trial is another draw
    other = np.asarray(fr.decoded_error_sum(mech, dim=100, clients=20, trial=2, chunk=7)[0])
    assert not np.allclose(other, sums[0])


def test_padding_clients_do_not_count():
    mech = fr.build_mechanism("gaussian", epsilon=1.0, dim=10)
    # 5 clients in chunks of 4 (3 padded slots) equal 5 clients in one chunk
    a = np.asarray(fr.decoded_error_sum(mech, dim=10, clients=5, chunk=4)[0])
    b = np.asarray(fr.decoded_error_sum(mech, dim=10, clients=5, chunk=5)[0])
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_lower_bound_formula():
    assert fr.lower_bound(epsilon=0.5, dim=100, clients=10) == pytest.approx(100 / (10 * 0.25))
    assert fr.lower_bound(epsilon=1.0, dim=100, clients=10) == pytest.approx(10.0)
    assert fr.lower_bound(epsilon=4.0, dim=100, clients=10) == pytest.approx(100 / 40)
    assert fr.lower_bound(epsilon=2.0, dim=8, clients=1, radius=3.0) == pytest.approx(9 * 8 / 2)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(LdpsimError, match="epsilon"):
            fr.lower_bound(epsilon=bad, dim=10, clients=1)


def test_keys_differ_across_mechanisms_and_from_the_inputs():
    tags = {fr._tag(n) for n in mechanism.REGISTRY}
    assert len(tags) == len(mechanism.REGISTRY) and fr._INPUT_TAG not in tags


def test_common_input_is_a_unit_vector_shared_by_every_mechanism():
    x = np.asarray(fr.common_input(0, 1000), np.float64)
    assert np.linalg.norm(x) == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_array_equal(x, np.asarray(fr.common_input(0, 1000)))
    assert not np.allclose(x, np.asarray(fr.common_input(1, 1000)))


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="rr", epsilon=1.0, dim=10), "mechanism must be one of"),
    (dict(name="nope", epsilon=1.0, dim=10), "'nope'"),
    (dict(name="duchi", epsilon=0.0, dim=10), "epsilon"),
    (dict(name="duchi", epsilon=-1.0, dim=10), "epsilon"),
    (dict(name="privunit2", epsilon=1.0, dim=3), "dim"),
    (dict(name="signds", epsilon=1.0, dim=50), "dim 50"),
    (dict(name="duchi", epsilon=701.0, dim=10), "700"),
])
def test_bad_input_is_one_clear_error(kwargs, match):
    name = kwargs.pop("name")
    with pytest.raises(LdpsimError, match=match):
        fr.build_mechanism(name, **kwargs)


def test_bad_trials_and_inputs():
    with pytest.raises(LdpsimError, match="trials"):
        fr.frontier_cell("gaussian", epsilon=1.0, dim=10, clients=2, trials=0)
    with pytest.raises(LdpsimError, match="inputs"):
        fr.frontier_cell("gaussian", epsilon=1.0, dim=10, clients=2, trials=1, inputs="cube")


def test_winners_table():
    import pandas as pd

    base = dict(epsilon=8.0, dim=100, clients=10, inputs="common")
    df = pd.DataFrame([dict(base, mechanism="gaussian", mse=3.0, ratio_to_bound=12.0),
                       dict(base, mechanism="duchi", mse=2.0, ratio_to_bound=8.0),
                       dict(base, mechanism="signds", mse=0.99, ratio_to_bound=3.96)])
    w = fr.winners(df).iloc[0]
    assert (w["best"], w["best_unbiased"], w["runner_up"]) == ("signds", "duchi", "duchi")
    assert w["beats_zero"] and w["best_unbiased_ratio"] == 8.0
    assert w["runner_up_factor"] == pytest.approx(2.0 / 0.99)
