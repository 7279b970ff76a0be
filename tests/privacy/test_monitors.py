"""MindArmour monitor arithmetic: §2.4 test vectors and an independent RDP formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.accountants.accounting import dpsgd_epsilon
from ldpsim._src.privacy.accountants.monitors import (
    MINDARMOUR_ORDERS,
    RDPMonitor,
    ZCDPMonitor,
    classic_delta,
    classic_epsilon,
    decayed_noise_multipliers,
)

Q = 256 / 60000
P = 234  # 60000 // 256: MindArmour's per_print_times = one epoch in the §2.4 vectors


def _monitor(z, delta, **kw):
    return RDPMonitor(60000, 256, z, target_delta=delta, noise_decay_mode=None,
                      per_print_times=P, **kw)


@pytest.mark.parametrize("z, delta, first, last", [
    (0.4, 1e-5, 13.714, 33.528),  # current lenet5_config.py
    (1.1, 1e-5, 1.309, 1.574),
    (1.5, 1e-3, 0.389, 0.616),    # monitor defaults
])
def test_rdp_monitor_vectors_over_ten_epochs(z, delta, first, last):
    eps = [e for e, _ in _monitor(z, delta).run_epochs(10)]
    assert round(eps[0], 3) == first
    assert round(eps[-1], 3) == last
    assert np.all(np.diff(eps) > 0)


def test_rdp_monitor_z04_full_vector():
    eps = [round(e, 3) for e, _ in _monitor(0.4, 1e-5).run_epochs(3)]
    assert eps == [13.714, 15.916, 18.117]


def test_window_quirk_counts_p_plus_one_steps():
    m = _monitor(1.1, 1e-5)
    m.run_epochs(10)
    assert m.steps_composed == 10 * (P + 1)
    exact = _monitor(1.1, 1e-5)
    exact.add_steps(np.arange(10 * P))
    assert exact.privacy()[0] < m.privacy()[0]


def test_classic_conversion_is_looser_than_dp_accounting():
    # 60 epochs, z = 1.1: classic conversion with MindArmour's orders gives 3.0403 (§4.5),
    # dp_accounting's improved conversion 2.5966.
    m = _monitor(1.1, 1e-5)
    eps, _ = m.add_steps(np.arange(14062))
    assert eps == pytest.approx(3.0403, abs=5e-5)
    tight = dpsgd_epsilon(noise_multiplier=1.1, batch_size=256, num_examples=60000,
                          steps=14062, delta=1e-5).epsilon
    assert tight < eps


def test_target_eps_mode_reports_delta():
    m = RDPMonitor(60000, 256, 1.1, target_eps=1.309, target_delta=None,
                   noise_decay_mode=None, per_print_times=P)
    eps, delta = m.run_epochs(1)[0]
    assert eps == 1.309
    # ε(δ=1e-5) rounds to 1.309, so δ at ε = 1.309 is close to 1e-5.
    assert delta == pytest.approx(1e-5, rel=0.05)
    assert classic_delta(m.orders, m.rdp, 1.309) == delta
    assert classic_epsilon(m.orders, m.rdp, delta) == pytest.approx(1.309, abs=1e-9)


def _rdp_integer_order(q, z, alpha):
    """Independent: RDP_α of the sampled Gaussian for integer α."""
    k = np.arange(alpha + 1)
    terms = (np.log(special.comb(alpha, k)) + k * np.log(q) + (alpha - k) * np.log1p(-q)
             + (k * k - k) / (2 * z * z))
    return special.logsumexp(terms) / (alpha - 1)


@pytest.mark.parametrize("mode, rate", [("Time", 0.05), ("Step", 0.02), ("Exp", 0.03)])
def test_decay_rdp_matches_independent_formula(mode, rate):
    m = RDPMonitor(60000, 256, 1.5, target_delta=1e-5, noise_decay_mode=mode,
                   noise_decay_rate=rate, per_print_times=10)
    for cur in range(1, 21):
        m.step_end(cur)
    steps = np.concatenate([np.arange(0, 11), np.arange(10, 21)])  # the two quirky windows
    zs = {"Time": 1.5 / (1 + rate * steps), "Step": 1.5 * (1 - rate) ** steps,
          "Exp": 1.5 * np.exp(-rate * steps)}[mode]
    for i, alpha in enumerate(MINDARMOUR_ORDERS):
        if float(alpha).is_integer():
            expected = sum(_rdp_integer_order(Q, z, int(alpha)) for z in zs)
            assert m.rdp[i] == pytest.approx(expected, rel=1e-9)
    assert m.steps_composed == 22


def test_decayed_multipliers_closed_forms():
    s = np.arange(5)
    np.testing.assert_allclose(decayed_noise_multipliers(2.0, s, "Time", 0.1), 2 / (1 + 0.1 * s))
    np.testing.assert_allclose(decayed_noise_multipliers(2.0, s, "Step", 0.1), 2 * 0.9 ** s)
    np.testing.assert_allclose(decayed_noise_multipliers(2.0, s, "Exp", 0.1), 2 * np.exp(-0.1 * s))
    np.testing.assert_array_equal(decayed_noise_multipliers(2.0, s, None, 0.1), np.full(5, 2.0))


def test_decay_spends_more_than_constant_noise():
    const = RDPMonitor(60000, 256, 1.5, target_delta=1e-5, noise_decay_mode=None)
    decay = RDPMonitor(60000, 256, 1.5, target_delta=1e-5, noise_decay_mode="Time")
    assert decay.run_epochs(1, 100)[0][0] > const.run_epochs(1, 100)[0][0]


def test_zcdp_vector_ignores_sampling():
    m = ZCDPMonitor(60000, 256, 1.5, noise_decay_mode=None, per_print_times=P)
    eps, delta = m.run_epochs(1)[0]
    assert eps == pytest.approx(90.21, abs=5e-3)
    assert delta == 1e-3
    rho = 235 / (2 * 1.5 ** 2)
    assert m.rho == pytest.approx(rho, rel=1e-12)
    # Same ε for a different batch size: subsampling is ignored.
    other = ZCDPMonitor(60000, 32, 1.5, noise_decay_mode=None, per_print_times=P)
    assert other.run_epochs(1, steps_per_epoch=P)[0][0] == pytest.approx(eps, rel=1e-12)


def test_zcdp_decay_sums_rho():
    m = ZCDPMonitor(60000, 256, 1.0, noise_decay_mode="Exp", noise_decay_rate=0.01,
                    per_print_times=5)
    m.step_end(5)
    rho = sum(1 / (2 * math.exp(-0.01 * s) ** 2) for s in range(6))
    assert m.rho == pytest.approx(rho, rel=1e-12)


def test_max_epoch_suggest_is_first_epoch_over_budget():
    m = _monitor(1.5, 1e-5, max_eps=1.0)
    epoch = m.max_epoch_suggest()
    assert m.steps_composed == 0  # own state untouched
    check = _monitor(1.5, 1e-5)
    eps = [check.add_steps(np.arange((e - 1) * P, e * P + 1))[0] for e in range(1, epoch + 1)]
    assert eps[-1] > 1.0 and (epoch == 1 or eps[-2] <= 1.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_samples=100, batch_size=100), "batch_size"),
    (dict(num_samples=100, batch_size=10, initial_noise_multiplier=0), "initial_noise_multiplier"),
    (dict(num_samples=100, batch_size=10, target_eps=1.0), "exactly one"),
    (dict(num_samples=100, batch_size=10, target_delta=None), "exactly one"),
    (dict(num_samples=100, batch_size=10, orders=[1.0, 2.0]), "order"),
    (dict(num_samples=100, batch_size=10, noise_decay_mode="Linear"), "noise_decay_mode"),
    (dict(num_samples=100, batch_size=10, noise_decay_rate=1.5), "noise_decay_rate"),
    (dict(num_samples=100, batch_size=10, per_print_times=0), "per_print_times"),
])
def test_rdp_monitor_bad_input(kwargs, match):
    with pytest.raises(LdpsimError, match=match):
        RDPMonitor(**kwargs)


def test_monitor_bad_steps():
    m = _monitor(1.1, 1e-5)
    with pytest.raises(LdpsimError, match="steps"):
        m.add_steps([-1, 0])
    with pytest.raises(LdpsimError, match="cur_step"):
        m.step_end(0)
    with pytest.raises(LdpsimError, match="target_delta"):
        ZCDPMonitor(100, 10, target_delta=0.0)
