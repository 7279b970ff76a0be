"""Checkpoints (ldpsim._src.fl.checkpoint): a stopped or crashed run resumes with the history of
an uninterrupted one, bit for bit; a checkpoint of another configuration is refused."""

from __future__ import annotations

import math

import pytest

from ldpsim import LdpsimError
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.simulate import simulate, simulate_lanes


def _config(**kw) -> SimulationConfig:
    # Central DP-FedAvg with an adaptive clip bound and a momentum server optimizer: the
    # checkpoint must carry the privacy mode's state and the optimizer state, not only the
    # params. eval_every 1: a row per round.
    base = dict(model="logreg", population=40, clients_per_round=5, rounds=6, seed=1,
                privacy_mode="central", noise_multiplier=0.5, adaptive_clip=True,
                clipped_count_stddev=1.0,
                server_optimizer="fedavgm", server_lr=0.5, delta=1e-2, eval_every=1)
    base.update(kw)
    return SimulationConfig(**base)


def _strip(history):
    """Rows without wall_time (a resumed run adds up the time of both sessions)."""
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in history]


@pytest.fixture(scope="module")
def uninterrupted():
    return simulate(_config())


def test_stop_after_round_3_of_6_then_resume_is_bit_identical(tmp_path, uninterrupted):
    ckpt = tmp_path / "ckpt"
    first = simulate(_config(), checkpoint_dir=ckpt, checkpoint_every=10,
                     callback=lambda row: row["round"] < 3)   # stops after round 3
    assert [r["round"] for r in first] == [1, 2, 3]
    assert _strip(first) == _strip(uninterrupted[:3])
    seen = []
    resumed = simulate(_config(), checkpoint_dir=ckpt, checkpoint_every=10,
                       callback=seen.append)
    # Exact equality, float for float (NaN columns are the one object math.nan).
    assert _strip(resumed) == _strip(uninterrupted)
    assert [r["round"] for r in seen] == [1, 2, 3, 4, 5, 6]   # restored rows replayed first
    assert resumed[2]["clip_bound"] != resumed[0]["clip_bound"]  # the adaptive clip moved
    # Wall time adds up across the two sessions.
    assert resumed[3]["wall_time"] >= resumed[2]["wall_time"]
    # A finished run's checkpoint gives its history back without running again.
    again = simulate(_config(), checkpoint_dir=ckpt)
    assert again == resumed


def test_crash_resumes_from_the_last_periodic_checkpoint(tmp_path, uninterrupted):
    ckpt = tmp_path / "ckpt"

    def crash(row):
        if row["round"] == 5:
            raise KeyboardInterrupt  # e.g. Ctrl-C: nothing is saved after round 4
    with pytest.raises(KeyboardInterrupt):
        simulate(_config(), checkpoint_dir=ckpt, checkpoint_every=2, callback=crash)
    assert sorted(p.name for p in ckpt.iterdir() if p.name.isdigit()) == ["4"]
    resumed = simulate(_config(), checkpoint_dir=ckpt, checkpoint_every=2)
    assert _strip(resumed) == _strip(uninterrupted)


def test_an_interrupt_between_checkpoints_saves_the_last_finished_round(tmp_path,
                                                                       uninterrupted):
    """Ctrl-C (or SIGTERM) between periodic checkpoints: the run saves the last round whose
    row was made before the interrupt goes on, so nothing finished is computed again."""
    ckpt = tmp_path / "ckpt"

    def crash(row):
        if row["round"] == 5:
            raise KeyboardInterrupt   # while round 5's row is handled: round 4 is the last
    with pytest.raises(KeyboardInterrupt):
        simulate(_config(), checkpoint_dir=ckpt, checkpoint_every=10, callback=crash)
    assert sorted(p.name for p in ckpt.iterdir() if p.name.isdigit()) == ["4"]
    seen = []
    resumed = simulate(_config(), checkpoint_dir=ckpt, checkpoint_every=10,
                       callback=seen.append)
    assert _strip(resumed) == _strip(uninterrupted)


def test_an_interrupt_inside_a_step_checkpoints_the_step_before():
    """The loop's own contract: an interrupt raised inside step i checkpoints (final) the
    carry, next step and rows of step i − 1, once, and is raised again."""
    from ldpsim._src.fl.loop import run_loop

    saved = []

    def step(carry, i):
        if i == 7:
            raise KeyboardInterrupt
        return carry + 1

    with pytest.raises(KeyboardInterrupt):
        run_loop(10, step, 0, report=lambda c, i: [{"round": i + 1, "c": c}],
                 report_every=2, checkpoint=lambda *a: saved.append(
                     (a[0], a[1], [r["round"] for r in a[2]], a[3])))
    assert saved[-1] == (7, 7, [2, 4, 6], True)
    assert [s for s in saved if s[3]] == [saved[-1]]
    # Interrupted before any step finished: nothing to save.
    saved.clear()
    with pytest.raises(KeyboardInterrupt):
        run_loop(10, step, 0, report=lambda c, i: [], start=7,
                 checkpoint=lambda *a: saved.append(a))
    assert saved == []


def test_checkpoint_of_another_configuration_is_refused(tmp_path):
    ckpt = tmp_path / "ckpt"
    simulate(_config(rounds=2), checkpoint_dir=ckpt)
    with pytest.raises(LdpsimError, match=r"another configuration \(rounds 2 there, 3 here\)"):
        simulate(_config(rounds=3), checkpoint_dir=ckpt)
    with pytest.raises(LdpsimError, match="seed 1 there, 2 here"):
        simulate(_config(rounds=2, seed=2), checkpoint_dir=ckpt)


@pytest.mark.parametrize("every", [0, -1, 1.5, True])
def test_checkpoint_every_must_be_a_positive_integer(tmp_path, every):
    with pytest.raises(LdpsimError, match="checkpoint_every"):
        simulate(_config(rounds=1), checkpoint_dir=tmp_path, checkpoint_every=every)


def test_checkpoint_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(LdpsimError, match="is a file"):
        simulate(_config(rounds=1), checkpoint_dir=path)


@pytest.mark.slow
def test_lanes_resume(tmp_path):
    """simulate_lanes (a vmapped ε axis) keeps every lane in one checkpoint."""
    configs = [SimulationConfig(model="logreg", population=40, clients_per_round=5,
                                rounds=4, eval_every=2, epsilon=e, delta=1e-3)
               for e in (5.0, 10.0)]
    full = simulate_lanes(configs)
    stop = [0]

    def once(row):
        stop[0] += 1
        return stop[0] < 2   # both lanes' rows of round 2 are made, then it stops
    simulate_lanes(configs, checkpoint_dir=tmp_path, callback=once)
    resumed = simulate_lanes(configs, checkpoint_dir=tmp_path)
    assert [_strip(h) for h in resumed] == [_strip(h) for h in full]
    assert all(math.isfinite(h[-1]["epsilon_spent"]) for h in resumed)


@pytest.mark.slow
def test_interrupted_sweep_cell_continues_from_its_checkpoint(tmp_path):
    import pandas as pd

    from ldpsim.sweep import SweepConfig, run_sweep
    from ldpsim._src.sweep.engine import EngineRunner

    sweep = SweepConfig(base={"model": "logreg", "population": 40, "rounds": 12,
                              "delta": 1e-3, "eval_every": 1},
                        grid={"epsilon": [10.0], "clients_per_round": [5], "seed": [0]})
    whole, out = tmp_path / "whole.csv", tmp_path / "r.csv"
    run_sweep(sweep, whole, progress=False)
    folder = tmp_path / "r.checkpoints"          # run_sweep's default, next to the CSV
    engine = EngineRunner(checkpoint_dir=folder, checkpoint_every=2)

    def crashing(cells, on_round):
        count = [0]

        def tick():
            count[0] += 1
            if count[0] == 11:
                raise KeyboardInterrupt   # in round 11: the checkpoint is of round 10
            on_round()
        yield from engine(cells, tick)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, runner=crashing, progress=False)
    assert [p.name for p in folder.glob("*/*") if p.name.isdigit()] == ["10"]
    summary = run_sweep(sweep, out, progress=False)   # the default runner resumes the cell
    assert summary.ran == 1 and not folder.exists()  # removed once the cell is written
    timing = [c for c in pd.read_csv(out).columns if "time" in c]
    pd.testing.assert_frame_equal(pd.read_csv(whole).drop(columns=timing),
                                  pd.read_csv(out).drop(columns=timing))


def test_a_field_added_later_keeps_older_checkpoints_resumable():
    """A configuration field added after runs were checkpointed (client_dp_delta) is left out
    of the hash at its default: the hash is the one the run had before the field existed."""
    import dataclasses
    import hashlib
    import json

    from ldpsim._src.fl import checkpoint
    from ldpsim._src.fl.config import SimulationConfig

    cfg = SimulationConfig(dataset="synthetic", client_dp=True, client_dp_noise_multiplier=1.0)
    before = json.loads(json.dumps(dataclasses.asdict(cfg), default=repr))
    del before["client_dp_delta"]
    old = hashlib.sha256(json.dumps([before], sort_keys=True).encode()).hexdigest()
    assert checkpoint.config_hash([cfg]) == old
    assert checkpoint.config_hash([dataclasses.replace(cfg, client_dp_delta=1e-7)]) != old
