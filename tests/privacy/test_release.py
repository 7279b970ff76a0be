"""What a run releases: bounded-tail samplers put a floor under δ, and every results
column is classified as a setting, part of the release, or a simulation diagnostic."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src.fl import planning
from scipy import stats

from ldpsim._src.fl import columns
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig
from toy_data import toy_logreg_problem
from ldpsim._src.privacy.noise import calibration, sampling

# ------------------------------------------------------------------ sampler tails


@pytest.mark.parametrize("impl", ["fast", "icdf", "jax"])
def test_samplers_never_exceed_their_tail_bound(impl):
    z = sampling.normal(jax.random.key(3), (2_000_000,), impl=impl)
    assert float(jnp.max(jnp.abs(z))) <= sampling.TAIL_BOUND[impl]


def test_laplace_never_exceeds_its_tail_bound():
    x = jax.random.laplace(jax.random.key(4), (2_000_000,))
    assert float(jnp.max(jnp.abs(x))) <= sampling.LAPLACE_TAIL_BOUND


def test_floor_formula():
    t = sampling.TAIL_BOUND["fast"]
    # (the model's reach is the exact √(66 ln 2); TAIL_BOUND adds the float32 error 1.6e-6)
    assert calibration.sampler_delta_floor(1.0, t - 2.0, impl="fast") == pytest.approx(
        stats.norm.cdf(-2.0), rel=1e-4)
    assert t == pytest.approx(math.sqrt(66 * math.log(2)), abs=2e-6)
    assert calibration.sampler_delta_floor(1.0, 2 * t, impl="fast") == 1.0
    # Laplace: P(L < ε − T) for a standard Laplace, T = 24 ln 2 − ln 3 (jax.random.laplace's
    # shorter side)
    tl = sampling.laplace_model("jax").bound
    assert calibration.sampler_delta_floor(1.0, 1.0, mechanism="laplace",
                                           impl="jax") == pytest.approx(0.5 * math.exp(1.0 - tl))
    # The review-level numbers: replace-one, δ = 1e-5.
    s10 = calibration.analytic_gaussian_sigma(10.0, 1e-5, 2.0)
    s50 = calibration.analytic_gaussian_sigma(50.0, 1e-5, 2.0)
    assert calibration.sampler_delta_floor(s10, 2.0, impl="fast") < 1e-5 < \
        calibration.sampler_delta_floor(s10, 2.0, impl="jax")
    assert calibration.sampler_delta_floor(s50, 2.0, impl="fast") > 0.4
    # the default sampler reaches 11.6σ: at ε = 50 its floor is below 1e-6
    assert calibration.sampler_delta_floor(s50, 2.0) < 1e-6


def test_bounded_tails_break_the_claim_empirically():
    """The distinguishing event of the floor, sampled with the engine's own noise: at
    ε = 50, δ = 1e-5 (replace-one, C = 1, Δ = 2 on one coordinate) a release below
    Δ − T·σ never happens when the input is Δ and happens ~47 % of the time when it is 0.
    n = 200,000 draws; the check is 6 binomial standard errors below the floor (false
    failure < 1e-9)."""
    sigma = calibration.analytic_gaussian_sigma(50.0, 1e-5, 2.0)
    floor = calibration.sampler_delta_floor(sigma, 2.0)
    n = 200_000
    z0 = np.asarray(sampling.normal(jax.random.key(11), (n,))) * sigma          # input 0
    z1 = 2.0 + np.asarray(sampling.normal(jax.random.key(12), (n,))) * sigma    # input Δ
    cut = 2.0 - sampling.TAIL_BOUND["fast"] * sigma
    p0, p1 = np.mean(z0 < cut), np.mean(z1 < cut)
    assert p1 == 0.0
    assert p0 > floor - 6 * math.sqrt(floor * (1 - floor) / n)
    assert p0 - math.exp(50.0) * p1 > 1e-5   # (50, 1e-5)-DP would need this <= 1e-5


# ------------------------------------------------------------------ the engine


@pytest.fixture(scope="module")
def toy_data():
    return toy_logreg_problem(24, n_test=40, seed=1)


def _rows(data, **kw):
    base = dict(dataset="toy", model="logreg", population=24, clients_per_round=6, rounds=2,
                epsilon=5.0, delta=1e-5, clip=1.0, local_steps=1, batch_size=3,
                client_lr=0.1, chunk_size=3, eval_every=1, seed=0)
    base.update(kw)
    if base.get("privacy_mode", "ldp") != "ldp":
        base.pop("epsilon")   # the local-DP budget; the other modes have their own
    return sim.simulate(SimulationConfig(**base), data=data)


@pytest.mark.slow
def test_engine_reports_inf_when_the_sampler_cannot_deliver_delta(toy_data, monkeypatch):
    # the default sampler: ε = 100 per round is calibrated for what runs (a larger σ), finite
    # the default sampler: ε = 100 per round is calibrated for what runs (a 45 % larger σ);
    # one release delivers (100, 1e-5), but its tails then hold ~1e-5 each, so a client's
    # second participation exhausts δ: inf, with one warning
    with pytest.warns(calibration.SamplerTailWarning, match="epsilon_spent is reported as inf"):
        rows = _rows(toy_data, epsilon=100.0)
    assert rows[0]["sigma"] > 1.4 * calibration.analytic_gaussian_sigma(100.0, 1e-5, 2.0)
    for r in rows:
        assert math.isfinite(r["epsilon_spent"]) == (r["max_participation"] <= 1)
    # central DP at z = 0.41 (a round's shift ~5σ): Box–Muller's 6.76σ reach cannot deliver δ
    # (a configuration no other test runs: the engine caches plans by configuration)
    monkeypatch.setenv("LDPSIM_NOISE_SAMPLER", "fast")
    with pytest.warns(calibration.SamplerTailWarning, match="epsilon_spent is reported as inf"):
        rows = _rows(toy_data, privacy_mode="central", noise_multiplier=0.41)
    assert all(math.isinf(r["epsilon_spent"]) for r in rows)
    monkeypatch.delenv("LDPSIM_NOISE_SAMPLER")
    with warnings.catch_warnings():
        warnings.simplefilter("error", calibration.SamplerTailWarning)
        rows = _rows(toy_data, epsilon=5.0)
    assert all(math.isfinite(r["epsilon_spent"]) for r in rows)
    assert rows[0]["sampler_delta_floor"] < 1e-5


@pytest.mark.slow
def test_engine_central_floor_uses_the_sum_sensitivity(toy_data):
    rows = _rows(toy_data, privacy_mode="central", noise_multiplier=0.4)
    assert rows[-1]["sampler_delta_floor"] == pytest.approx(
        calibration.sampler_delta_floor(0.4, 2.0))
    assert math.isfinite(rows[-1]["epsilon_spent"])   # the default sampler reaches 11.6σ


# ------------------------------------------------------------------ results columns


_SLOW = pytest.mark.slow   # one engine compilation per mode: the fast tier runs two


@pytest.mark.parametrize("kw", [
    {}, pytest.param({"mechanism": "laplace", "epsilon": 2.0}, marks=_SLOW),
    pytest.param({"epsilon": math.inf}, marks=_SLOW),
    {"privacy_mode": "central", "noise_multiplier": 1.0},
    pytest.param({"privacy_mode": "central", "noise_multiplier": 0.5, "adaptive_clip": True},
                 marks=_SLOW),
    pytest.param({"privacy_mode": "distributed", "noise_multiplier": 1.0, "dropout_rate": 0.2},
                 marks=_SLOW),
    pytest.param({"privacy_mode": "mindspore"}, marks=_SLOW),
    pytest.param({"noise_mode": "aggregate"}, marks=_SLOW),
])
def test_every_results_column_is_classified(toy_data, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", calibration.SamplerTailWarning)
        rows = _rows(toy_data, rounds=1, **kw)
    unknown = set(rows[0]) - set(columns.COLUMNS)
    assert not unknown, f"unclassified results columns: {sorted(unknown)}"
    assert {columns.column_kind(c) for c in rows[0]} <= set(columns.KINDS)


def test_diagnostics_are_the_columns_that_need_client_data():
    assert set(columns.columns_of_kind("diagnostic")) == {
        "noise_norm", "theory_noise_norm", "signal_norm", "snr", "cosine", "clip_fraction",
        "nonfinite_clients", "train_loss", "effective_noise_std", "wrapped_fraction",
        "rounding_failures"}
    with pytest.raises(ValueError, match="kind must be one of"):
        columns.columns_of_kind("secret")


def test_account_ldp_reports_the_sampler_floor(capsys):
    import json

    from ldpsim.cli import main

    assert main(["account", "ldp", "--sigma", "0.2", "--sensitivity", "2", "--delta", "1e-5",
                 "--rounds", "3", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["sampler_delta_floor"] == pytest.approx(calibration.sampler_delta_floor(0.2, 2.0))
    assert "bounded tails" in captured.err and "Traceback" not in captured.err
    assert main(["account", "ldp", "--sigma", "4", "--sensitivity", "2", "--delta", "1e-5",
                 "--rounds", "3", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["sampler_delta_floor"] < 1e-9 and captured.err == ""


def test_mindspore_defaults_are_not_delivered_by_float32_noise(toy_data, monkeypatch):
    """MindSpore's default (dp_eps = 50, dp_delta = 0.01): Box–Muller with a 32-bit radius
    (reach 6.76σ, the sampler of earlier versions) tells worst-case neighbours apart with
    probability ~0.88 > 0.01, so no epsilon holds; the default sampler (reach 11.6σ) delivers."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", calibration.SamplerTailWarning)
        rows = _rows(toy_data, privacy_mode="mindspore")
    assert rows[0]["sampler_delta_floor"] < 0.01 and math.isfinite(rows[0]["epsilon_spent"])
    monkeypatch.setenv("LDPSIM_NOISE_SAMPLER", "fast")
    # with the short reach, the analytic calibration must raise σ to deliver one release ...
    a_fast = planning.mindspore_sigma_per_clip(50.0, 0.01)
    monkeypatch.delenv("LDPSIM_NOISE_SAMPLER")
    assert a_fast > 1.5 * planning.mindspore_sigma_per_clip(50.0, 0.01)
    # ... and MindSpore's own σ (its numerics, as deployed) is not delivered at all
    monkeypatch.setenv("LDPSIM_NOISE_SAMPLER", "fast")
    a_ms = planning.mindspore_sigma_per_clip(50.0, 0.01, method="mindspore")
    assert calibration.sampler_delta_floor(a_ms, 1.0) > 0.8


def test_history_rows_are_typed_rows(toy_data):
    from typing import get_type_hints

    from ldpsim._src.fl.columns import COLUMNS, HistoryRow

    hints = get_type_hints(HistoryRow)
    assert set(hints) == set(COLUMNS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", calibration.SamplerTailWarning)
        for kw in ({}, {"privacy_mode": "central", "noise_multiplier": 0.5}):
            for row in _rows(toy_data, rounds=1, **kw):
                assert set(row) == set(hints)        # every column, nothing else
                for name, value in row.items():
                    assert type(value) is hints[name], (name, value)
