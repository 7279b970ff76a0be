"""Every local randomizer trains through the engine (``privacy_mode="ldp"``, ``--mechanism``).

The round decodes each client's report (PrivUnit2, PrivUnitG, Duchi et al., SignDS) or takes
its additive release (Gaussian, Laplace) and averages; ``noise_norm`` is the error of that
decoded aggregate against the clean clipped aggregate and ``theory_noise_norm`` its
prediction from the mechanism's exact, input-dependent variance.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl import modes, planning
from ldpsim._src.fl.config import MECHANISMS, REPORT_MECHANISMS, SimulationConfig
from ldpsim._src.fl.simulate import build_data, simulate, simulate_lanes
from ldpsim._src.privacy.noise import calibration
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib

#: The small synthetic default (60 features, 10 classes) with logistic regression, d = 610.
BASE = dict(dataset="synthetic", model="logreg", population=300, examples_per_client=8,
            local_steps=2, client_lr=0.5)


@pytest.fixture(scope="module")
def data():
    return build_data(SimulationConfig(**BASE))


def _run(data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", calibration.SamplerTailWarning)
        return simulate(SimulationConfig(**{**BASE, **kw}), data=data)


def test_the_engine_runs_every_vector_randomizer_of_the_registry():
    assert set(MECHANISMS) == set(mechanism_lib.VECTOR) - {"none"}
    assert set(REPORT_MECHANISMS) == {n for n in MECHANISMS
                                      if not mechanism_lib.entry(n).additive}


# clip 0.05: every client's update is clipped (asserted), so each input has norm C; this keeps
# the relative spread of one client's squared decoding error small (kappa below)
ERR = dict(clients_per_round=150, rounds=3, clip=0.05, epsilon=4.0)


_SLOW = pytest.mark.slow


@pytest.mark.parametrize("mechanism", [
    "gaussian", pytest.param("laplace", marks=_SLOW), "privunit2",
    pytest.param("privunitg", marks=_SLOW), "duchi", "signds"])
def test_each_mechanism_trains_and_its_error_matches_the_exact_variance(data, mechanism):
    """Finite rows, the run's columns, pure composition, and the measured error of the
    decoded aggregate against its theory.

    Tolerance: per round, q_t = noise_norm^2 / theory_noise_norm^2 has mean 1 and relative
    variance at most 2/d (the cross terms of the sum) + kappa/m (the clients' own squared
    errors, kappa = Var||e||^2 / (E||e||^2)^2 <= 0.5 for every mechanism with inputs of norm C:
    PrivUnit's norm coin gives at most 0.24, Duchi's and SignDS's reports have a fixed norm,
    Gaussian 2/d). The mean of R = 3 rounds is accepted within 5 standard deviations of 1:
    false-failure rate about 6e-7 per mechanism (normal approximation of a sum of m = 150
    independent clients). SignDS's decoder is biased: its theory adds ||sum w bias||/sum w in
    quadrature (the variance alone predicts a small fraction of its error).
    """
    rows = _run(data, mechanism=mechanism, **ERR)
    last = rows[-1]
    assert (modes.local(mechanism).client_mean is not None) == (mechanism == "signds")
    assert last["mechanism"] == mechanism and len(rows) == ERR["rounds"]
    for key in ("accuracy", "loss", "noise_norm", "theory_noise_norm", "signal_norm"):
        assert all(math.isfinite(r[key]) for r in rows), key
    if mechanism != "signds":   # SignDS releases an order: nothing is clipped
        assert all(r["clip_fraction"] == 1.0 for r in rows)
    if mechanism in REPORT_MECHANISMS:
        assert math.isnan(last["delta"]) and math.isnan(last["sensitivity"])
        assert last["neighbours"] == "replace" and last["sigma"] > 0
    pure = mechanism != "gaussian"
    if pure:   # pure composition over the worst client's rounds, delta unused
        assert last["epsilon_spent"] == pytest.approx(ERR["epsilon"] * last["max_participation"])
    d = 610
    q = np.mean([r["noise_norm"] ** 2 / r["theory_noise_norm"] ** 2 for r in rows])
    sd = math.sqrt((2.0 / d + 0.5 / ERR["clients_per_round"]) / len(rows))
    assert abs(q - 1.0) <= 5 * sd, (mechanism, q, sd)


@pytest.mark.parametrize("mechanism", ["privunit2", pytest.param("duchi", marks=_SLOW),
                                       "signds"])
def test_results_do_not_depend_on_the_chunk_size(data, mechanism):
    """Keys come from (round, client id), never from the chunk a client lands in."""
    kw = dict(mechanism=mechanism, clients_per_round=9, rounds=2, epsilon=2.0)
    a = _run(data, chunk_size=1, **kw)
    b = _run(data, chunk_size=4, **kw)
    for ra, rb in zip(a, b):
        for key in ("accuracy", "noise_norm", "signal_norm", "theory_noise_norm", "loss"):
            assert ra[key] == pytest.approx(rb[key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["gaussian", "privunit2", "privunitg"])
def test_the_unbiased_l2_mechanisms_learn_at_large_epsilon(data, mechanism):
    """At a large per-round epsilon and 300 clients per round the aggregate of the unbiased
    L2 mechanisms whose error falls with epsilon follows the clean one closely enough to learn:
    test accuracy rises well above the initial model's. Not the others, by design (measured
    on LeNet-5 in experiments/README, "Local randomizers in training"): Laplace clips in L1,
    which shrinks a dense update's signal below 0.01; Duchi et al.'s error does not fall with
    epsilon (its output radius tends to ~sqrt(pi d / 2)) and epsilon is capped at 16 by its
    32-bit coin; SignDS releases a few indices and its fixed-step reconstruction is biased."""
    eps = 60.0
    kw = dict(mechanism=mechanism, clients_per_round=300, rounds=6, clip=1.0, epsilon=eps)
    rows = _run(data, **kw)
    start = _run(data, **{**kw, "rounds": 1, "client_lr": 1e-9})[0]["accuracy"]
    assert rows[-1]["accuracy"] > start + 0.15, (rows[-1]["accuracy"], start)


def test_signds_epsilons_with_different_output_sizes_cannot_share_lanes(data):
    c = SimulationConfig(**BASE, mechanism="signds", epsilon=1.0, clients_per_round=5, rounds=1)
    hs = {mechanism_lib.make("signds", epsilon=e, dim=610).params.h for e in (1.0, 100.0)}
    if len(hs) == 1:
        pytest.skip("same SignDS output size at both epsilons")
    with pytest.raises(LdpsimError, match="cannot run as lanes"):
        simulate_lanes([c, dataclasses.replace(c, epsilon=100.0)], data=data)


def test_report_randomizers_need_the_models_dimension():
    c = SimulationConfig(**BASE, mechanism="privunit2", epsilon=2.0)
    with pytest.raises(LdpsimError, match="pass dim"):
        planning.plan(c, 300)
    p = planning.plan(c, 300, dim=610)
    assert isinstance(p.hyper, modes.ReportHyper) and p.mechanism.randomizer == "privunit2"
    with pytest.raises(LdpsimError, match="adds no noise of a scale"):
        planning.noise_scale(c)


def test_aggregate_noise_mode_refuses_report_randomizers():
    with pytest.raises(ValueError, match="Gaussian noise only"):
        modes.aggregated(modes.local("duchi"))
    with pytest.raises(LdpsimError, match="Gaussian noise only"):
        SimulationConfig(**BASE, mechanism="privunit2", epsilon=2.0, noise_mode="aggregate")
    with pytest.raises(LdpsimError, match="privatizes categories"):
        modes.local("rr")


@pytest.mark.parametrize("kw, match", [
    (dict(mechanism="duchi", norm_epsilon=1.0), "norm_epsilon=1.0 does not apply"),
    (dict(mechanism="privunit2", sign_k=0.02), "sign_k=0.02 does not apply"),
    (dict(mechanism="privunit2", neighbours="add-remove"), "neighbours must be 'replace'"),
    (dict(mechanism="signds", epsilon=150.0), r"sign_eps, valid range \(0, 100\]"),
    (dict(mechanism="rr"), "mechanism must be one of gaussian, laplace, privunit2"),
])
def test_bad_mechanism_settings_are_named(kw, match):
    with pytest.raises(LdpsimError, match=match):
        SimulationConfig(**{**BASE, "epsilon": 2.0, **kw})
