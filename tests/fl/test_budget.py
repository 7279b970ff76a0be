"""stop_at_epsilon: the per-client ledger in the engine (retire clients, or end the run,
before any client's ε exceeds the budget). Exact: Laplace composes as k·ε."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.sweep.engine import make_config
from toy_data import toy_logreg_problem

N, M = 24, 8


@pytest.fixture(scope="module")
def data():
    return toy_logreg_problem(N, n_test=50)


def _config(**kw):
    # Laplace, epsilon 1 per round: k participations are exactly k-DP (basic composition).
    base = dict(dataset="toy", model="logreg", population=N, clients_per_round=M, rounds=8,
                epsilon=1.0, mechanism="laplace", clip=1.0, local_steps=1, batch_size=4,
                client_lr=0.5, chunk_size=4, eval_every=1, seed=5)
    base.update(kw)
    return SimulationConfig(**base)


def _replay(rounds, seed, budget_count, policy):
    """Participation counts and per-round participants, replayed from the cohorts alone."""
    counts = np.zeros(N, np.int64)
    per_round = []
    for t in range(rounds):
        ids, mask = sim.sample_cohort(seed, t, N, M)
        ok = counts[ids] + 1 <= budget_count
        if policy == "run" and not ok.all():
            break
        if policy == "client":
            if not ok.any():
                break
            ids = ids[ok]
        counts[ids] += 1
        per_round.append(len(ids))
    return counts, per_round


def test_client_policy_exact_counts(data):
    rows = sim.simulate(_config(stop_at_epsilon=2.5), data=data)
    counts, per_round = _replay(8, 5, 2, "client")
    assert len(rows) == len(per_round) == 8        # the run goes on with the others
    assert [r["clients"] for r in rows] == per_round
    assert per_round[-1] < M                       # clients were left out
    last = rows[-1]
    assert last["ledger_epsilon_max"] == 2.0 == float(counts.max())
    assert last["ledger_epsilon_mean"] == pytest.approx(counts.sum() / N, rel=1e-12)
    assert last["retired_clients"] == int((counts == 2).sum())
    assert last["max_participation"] == 2 and last["epsilon_spent"] == 2.0
    for r, k in zip(rows, np.cumsum(per_round)):
        assert r["ledger_epsilon_mean"] == pytest.approx(k / N, rel=1e-12)


def test_run_policy_stops_before_the_round_that_would_exceed(data):
    rows = sim.simulate(_config(stop_at_epsilon=2.5, stop_policy="run", rounds=12,
                                eval_every=3), data=data)
    counts, per_round = _replay(12, 5, 2, "run")
    done = len(per_round)
    assert 0 < done < 12
    # Reported every 3 rounds, and the last round done even off that schedule.
    expected = [t for t in range(3, done + 1, 3)] + ([done] if done % 3 else [])
    assert [r["round"] for r in rows] == expected
    assert rows[-1]["ledger_epsilon_max"] == float(counts.max()) <= 2.5
    assert all(r["clients"] == M for r in rows)     # no cohort was thinned
    assert rows[-1]["retired_clients"] == int((counts == 2).sum())


def test_without_budget_the_columns_are_empty(data):
    rows = sim.simulate(_config(rounds=2), data=data)
    assert all(math.isnan(r["ledger_epsilon_max"]) and math.isnan(r["ledger_epsilon_mean"])
               and r["retired_clients"] == 0 for r in rows)


def test_budget_below_one_participation_is_an_error(data):
    with pytest.raises(LdpsimError, match=r"stop_at_epsilon=0.5 is below the epsilon of one "
                                          r"participation \(1"):
        sim.simulate(_config(stop_at_epsilon=0.5), data=data)


def test_budget_with_lanes_is_an_error(data):
    configs = [_config(stop_at_epsilon=3.0, epsilon=e, mechanism="gaussian", delta=1e-3)
               for e in (1.0, 2.0)]
    with pytest.raises(LdpsimError, match="stop_at_epsilon needs one run per program"):
        sim.simulate_lanes(configs, data=data)


@pytest.mark.parametrize("kw, match", [
    (dict(stop_at_epsilon=0.0), r"stop_at_epsilon must be > 0"),
    (dict(stop_at_epsilon=-1.0), r"stop_at_epsilon must be > 0"),
    (dict(stop_at_epsilon=math.inf), r"stop_at_epsilon must be > 0.*finite"),
    (dict(stop_at_epsilon=math.nan), r"stop_at_epsilon"),
    (dict(stop_at_epsilon=True), r"stop_at_epsilon must be a number"),
    (dict(stop_at_epsilon=3.0, stop_policy="round"), r"stop_policy must be one of client, run"),
    (dict(stop_policy="run"), r"stop_policy='run' does not apply.*no stop_at_epsilon"),
    (dict(stop_at_epsilon=3.0, epsilon=math.inf), r"needs a private run"),
    (dict(stop_at_epsilon=3.0, privacy_mode="central", epsilon=math.inf, mechanism="gaussian"),
     r"applies to privacy_mode 'ldp' or 'mindspore'"),
])
def test_bad_values_name_the_option(kw, match):
    with pytest.raises(LdpsimError, match=match):
        _config(**kw)


def test_usable_from_a_sweep_table():
    cfg = make_config({"epsilon": 1.0, "stop_at_epsilon": 4.0, "stop_policy": "run"})
    assert cfg.stop_at_epsilon == 4.0 and cfg.stop_policy == "run"


def test_mindspore_mode_keeps_every_client_to_one_participation(data):
    # dp_eps 10 per round (exactly, at dp_delta): a budget of 12 fits one participation.
    cfg = SimulationConfig(dataset="toy", model="logreg", population=N, clients_per_round=M,
                           rounds=6, privacy_mode="mindspore", dp_eps=10.0, local_steps=1,
                           batch_size=4, client_lr=0.5, chunk_size=4, eval_every=2, seed=1,
                           stop_at_epsilon=12.0)
    rows = sim.simulate(cfg, data=data)
    counts, per_round = _replay(6, 1, 1, "client")
    assert [r["round"] for r in rows][-1] == len(per_round)
    assert rows[-1]["max_participation"] == 1
    assert rows[-1]["ledger_epsilon_max"] == rows[-1]["epsilon_spent"] == pytest.approx(10.0,
                                                                                      rel=1e-6)
    assert rows[-1]["retired_clients"] == int(counts.sum())
