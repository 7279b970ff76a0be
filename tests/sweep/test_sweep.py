"""Sweeps: grid and fingerprint, resumable incremental CSV, refusal of foreign files, engine wiring."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim.cli import main
from ldpsim.sweep import ResultsStore, SweepConfig, load_sweep_config, run_sweep, sidecar_path
from sweep_fakes import FakeRunner, small_config, wait_for_cells

REPO = Path(__file__).resolve().parents[2]
DESIGN_COLUMNS = ["dataset", "model", "mechanism", "epsilon", "delta", "clip", "clients_per_round", "population",
                  "round", "seed", "accuracy", "loss", "noise_norm", "signal_norm", "snr", "clip_fraction",
                  "epsilon_spent", "wall_time"]


def _rows(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path).drop(columns=["wall_time"])
    return df.sort_values(["cell", "round"]).reset_index(drop=True)


# --------------------------------------------------------------------------- config


def test_normalisation_and_fingerprint():
    a = SweepConfig(base={"rounds": 3, "clip": 1.0}, grid={"epsilon": [10, "inf", 1.0, 10.0], "clients": [100, 10],
                                                            "seeds": [1, 0]})
    b = SweepConfig(base={"clip": 1, "rounds": 3}, grid={"seed": [0, 1], "clients_per_round": [10, 100],
                                                          "epsilon": ["∞", 1, 10]})
    assert a.normalized() == b.normalized()
    assert a.fingerprint() == b.fingerprint()
    assert a.grid["epsilon"] == (1.0, 10.0, math.inf)
    c = SweepConfig(base={"rounds": 4, "clip": 1.0}, grid=dict(a.grid))
    assert c.fingerprint() != a.fingerprint()
    assert "base.rounds: 3 there vs 4 here" in c.describe_difference(a.normalized())
    cells = a.cells()
    assert len(cells) == 12 and len({x.key for x in cells}) == 12
    assert cells[0].key == "clients_per_round=10;epsilon=1;seed=0"
    assert [x.axes["epsilon"] for x in cells[:3]] == [1.0, 10.0, math.inf]  # ε innermost


def test_delta_rules_and_errors():
    cfg = SweepConfig(base={"delta": "1/clients_per_round", "population": 500},
                      grid={"epsilon": [1], "clients_per_round": [10, 50], "seed": [0]})
    assert [c.params["delta"] for c in cfg.cells()] == [0.1, 0.02]
    cfg = SweepConfig(base={"delta": "1/population", "population": 500},
                      grid={"epsilon": [1], "clients_per_round": [10], "seed": [0]})
    assert cfg.cells()[0].params["delta"] == 1 / 500
    with pytest.raises(LdpsimError, match="missing: seed"):
        SweepConfig(base={}, grid={"epsilon": [1], "clients_per_round": [10]})
    with pytest.raises(LdpsimError, match="epsilon"):
        SweepConfig(base={}, grid={"epsilon": [0], "clients_per_round": [10], "seed": [0]})
    with pytest.raises(LdpsimError, match="both"):
        SweepConfig(base={"seed": 1}, grid={"epsilon": [1], "clients_per_round": [10], "seed": [0]})
    with pytest.raises(LdpsimError, match="delta"):
        SweepConfig(base={"delta": "1/n"}, grid={"epsilon": [1], "clients_per_round": [10], "seed": [0]})


def test_toml_config(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[sweep]\nname = "t"\nout = "x.csv"\n[grid]\nepsilon = [1, "inf"]\nclients = [10]\n'
                    'seeds = [0, 1]\n[run]\nrounds = 2\nmodel = "mlp"\n')
    cfg, meta = load_sweep_config(path)
    assert meta["out"] == "x.csv" and cfg.name == "t"
    assert cfg.grid == {"epsilon": (1, math.inf), "clients_per_round": (10,), "seed": (0, 1)}
    (tmp_path / "bad.toml").write_text("[grid\n")
    with pytest.raises(LdpsimError, match="not valid TOML"):
        load_sweep_config(tmp_path / "bad.toml")
    with pytest.raises(LdpsimError, match="not found"):
        load_sweep_config(tmp_path / "missing.toml")


# --------------------------------------------------------------------------- store / resume


def test_groups_share_everything_but_epsilon(tmp_path):
    runner = FakeRunner()
    s = run_sweep(small_config(), tmp_path / "r.csv", runner=runner, progress=False)
    assert (s.total, s.ran, s.skipped) == (27, 27, 0)
    assert len(runner.calls) == 9 and all(len(g) == 3 for g in runner.calls)
    for group in runner.calls:
        assert len({k.replace(k.split(";")[1], "") for k in group}) == 1  # only epsilon differs
    df = pd.read_csv(tmp_path / "r.csv")
    assert len(df) == 27 * 4 and not df.duplicated(["cell", "round"]).any()
    assert df.columns[-1] == "cell"
    again = run_sweep(small_config(), tmp_path / "r.csv", runner=FakeRunner(), progress=False)
    assert (again.ran, again.skipped) == (0, 27)


def test_resume_after_kill_equals_uninterrupted_run(tmp_path):
    full = tmp_path / "full.csv"
    run_sweep(small_config(), full, runner=FakeRunner(), progress=False)
    out = tmp_path / "killed.csv"
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "sweep_fakes.py"), str(out), "--sleep", "0.05"],
                            env=env)
    try:
        if not wait_for_cells(out, 4):   # a few cells finished, then kill -9
            pytest.fail("the sweep subprocess made no progress")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    done_before = len(json.loads(sidecar_path(out).read_text())["done"])
    assert 4 <= done_before < 27
    s = run_sweep(small_config(), out, runner=FakeRunner(), progress=False)
    assert s.skipped == done_before and s.ran == 27 - done_before
    pd.testing.assert_frame_equal(_rows(out), _rows(full))


def test_rows_of_an_unfinished_cell_and_a_torn_line_are_dropped(tmp_path):
    full, out = tmp_path / "full.csv", tmp_path / "out.csv"
    run_sweep(small_config(), full, runner=FakeRunner(), progress=False)

    class Crash(Exception):
        pass

    class CrashingRunner(FakeRunner):
        """Dies after the 5th cell's rows reach the CSV but before it is marked done."""

    original = ResultsStore._write_meta
    calls = {"n": 0}

    def flaky(self):
        if self.done and len(self.done) == 5:
            calls["n"] += 1
            raise Crash
        original(self)

    ResultsStore._write_meta = flaky
    try:
        with pytest.raises(Crash):
            run_sweep(small_config(), out, runner=CrashingRunner(), progress=False)
    finally:
        ResultsStore._write_meta = original
    with open(out, "a") as f:
        f.write("1.0,10,0,1,0.5")  # a torn last line, as after a kill mid-write
    s = run_sweep(small_config(), out, runner=FakeRunner(), progress=False)
    assert s.skipped == 4 and s.dropped_rows == 4 + 1
    pd.testing.assert_frame_equal(_rows(out), _rows(full))


def test_foreign_results_file_is_refused(tmp_path):
    out = tmp_path / "r.csv"
    run_sweep(small_config(), out, runner=FakeRunner(), progress=False)
    other = small_config(seed=[0])
    with pytest.raises(LdpsimError) as err:
        run_sweep(other, out, runner=FakeRunner(), progress=False)
    msg = str(err.value)
    assert str(out) in msg and str(sidecar_path(out)) in msg
    assert small_config().fingerprint() in msg and other.fingerprint() in msg
    assert "grid.seed: [0, 1, 2] there vs [0] here" in msg
    assert "--out" in msg and "--overwrite" in msg
    s = run_sweep(other, out, runner=FakeRunner(), overwrite=True, progress=False)
    assert s.ran == 9 and len(pd.read_csv(out)) == 9 * 4
    plain = tmp_path / "plain.csv"
    plain.write_text("a,b\n1,2\n")
    with pytest.raises(LdpsimError, match="no sweep record"):
        run_sweep(other, plain, runner=FakeRunner(), progress=False)


def _with_base(**changes) -> SweepConfig:
    cfg = small_config()
    return SweepConfig(base={**cfg.base, **changes}, grid=dict(cfg.grid))


def test_execution_only_settings_do_not_change_the_fingerprint(tmp_path):
    from ldpsim._src.sweep.config import EXECUTION_FIELDS, fingerprint_of

    assert set(EXECUTION_FIELDS) == {"chunk_size", "data_dir", "devices"}
    a = _with_base(chunk_size=None, data_dir=None, devices=None)
    b = _with_base(chunk_size=4, data_dir="/elsewhere", devices=1)
    assert a.fingerprint() == b.fingerprint()
    assert b.describe_difference(a.normalized()) == "(no difference in settings)"
    # Settings that change results still change the fingerprint.
    for field, value in [("rounds", 5), ("clip", 2.0), ("delta", 1e-6), ("local_steps", 3),
                         ("batch_size", 8), ("eval_every", 2), ("partition", "dirichlet")]:
        assert _with_base(**{field: value}).fingerprint() != a.fingerprint(), field
    # Resume across a change of chunk_size: nothing re-run, nothing refused.
    out = tmp_path / "r.csv"
    run_sweep(a, out, runner=FakeRunner(), progress=False)
    s = run_sweep(b, out, runner=FakeRunner(), progress=False)
    assert s.ran == 0 and s.skipped == 27
    # A results file whose sidecar predates this rule (fingerprint over every setting) resumes.
    meta = json.loads(sidecar_path(out).read_text())
    old = json.dumps(meta["config"], sort_keys=True, separators=(",", ":"))
    import hashlib

    meta["fingerprint"] = hashlib.sha256(old.encode()).hexdigest()[:16]
    assert meta["fingerprint"] != a.fingerprint() and fingerprint_of(meta["config"]) == a.fingerprint()
    sidecar_path(out).write_text(json.dumps(meta))
    s = run_sweep(a, out, runner=FakeRunner(), progress=False)
    assert s.ran == 0 and s.skipped == 27
    assert json.loads(sidecar_path(out).read_text())["fingerprint"] == a.fingerprint()
    # ...but not when a result-changing setting differs.
    with pytest.raises(LdpsimError, match="base.rounds: 4 there vs 5 here"):
        run_sweep(_with_base(chunk_size=4, rounds=5), out, runner=FakeRunner(), progress=False)


def test_concurrent_writer_is_refused(tmp_path):
    cfg = small_config()
    kw = dict(fingerprint=cfg.fingerprint(), config=cfg.normalized())
    with ResultsStore(tmp_path / "r.csv", **kw):
        with pytest.raises(LdpsimError, match="another ldpsim sweep"):
            ResultsStore(tmp_path / "r.csv", **kw).open()


def test_new_columns_widen_the_file(tmp_path):
    cfg = small_config()
    with ResultsStore(tmp_path / "r.csv", fingerprint=cfg.fingerprint(), config=cfg.normalized()) as store:
        store.write_cell("a", [{"x": 1, "y": 2.5}])
        store.write_cell("b", [{"x": 3, "z": math.inf}])
    with open(tmp_path / "r.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["x", "y", "z", "cell"], ["1", "2.5", "", "a"], ["3", "", "inf", "b"]]


# --------------------------------------------------------------------------- the real engine


@pytest.mark.slow
def test_cli_sweep_with_engine_schema_resume_and_vmap(tmp_path, capsys):
    out = tmp_path / "r.csv"
    args = ["sweep", "--epsilon", "5,inf,1", "--clients", "4", "--seeds", "0", "--dataset", "synthetic",
            "--model", "logreg", "--population", "12", "--rounds", "2", "--delta", "1/population",
            "--preset", "none", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    df = pd.read_csv(out)
    assert set(DESIGN_COLUMNS) <= set(df.columns) and df.columns[-1] == "cell"
    assert len(df) == 3 * 2 and sorted(df["epsilon"].unique()) == [1.0, 5.0, math.inf]
    assert (df.loc[df["epsilon"] < math.inf, "delta"] == 1 / 12).all()  # NaN without noise
    assert main(args) == 0  # resume: nothing to do
    assert "ran 0 cells" in capsys.readouterr().out
    # The vmapped ε axis gives the same results as running the cells one by one.
    assert main(args[:-3] + ["--out", str(tmp_path / "vmap.csv"), "--vmap-epsilon", "--no-progress"]) == 0
    a, b = _rows(out), _rows(tmp_path / "vmap.csv")
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-4, atol=1e-6)
    # A different sweep into the same file is refused with exit status 2.
    assert main([*args[:2], "5", *args[3:]]) == 2
    assert "different sweep" in capsys.readouterr().err


def test_cli_sweep_rejects_bad_settings_before_running(tmp_path, capsys):
    rc = main(["sweep", "--epsilon", "1", "--clients", "50", "--seeds", "0", "--population", "10",
               "--out", str(tmp_path / "r.csv"), "--no-progress"])
    assert rc == 2
    assert "clients_per_round" in capsys.readouterr().err
    assert not (tmp_path / "r.csv").exists()
    rc = main(["sweep", "--set", "nonsense=1", "--out", str(tmp_path / "r.csv"), "--no-progress"])
    assert rc == 2 and "unknown run setting" in capsys.readouterr().err


def test_a_sweep_that_finished_no_cell_does_not_block_the_next(tmp_path):
    """A sweep that stopped before its first cell's rows (a bad setting found only once the
    data are loaded, or an interrupt) leaves a record but no results: a different sweep into
    the same file runs, and replaces that record. Finished cells are still never mixed."""

    class Failing(FakeRunner):
        def __call__(self, cells, on_round):
            raise LdpsimError("bits = 4 too small")
            yield  # pragma: no cover

    out = tmp_path / "r.csv"
    with pytest.raises(LdpsimError, match="too small"):
        run_sweep(small_config(), out, runner=Failing(), progress=False)
    assert sidecar_path(out).exists() and json.loads(sidecar_path(out).read_text())["done"] == []
    other = small_config(seed=[0])
    s = run_sweep(other, out, runner=FakeRunner(), progress=False)
    assert s.ran == 9 and len(pd.read_csv(out)) == 9 * 4
    assert json.loads(sidecar_path(out).read_text())["fingerprint"] == other.fingerprint()
    # Now it holds finished cells: the first sweep is refused.
    with pytest.raises(LdpsimError, match="different sweep"):
        run_sweep(small_config(), out, runner=FakeRunner(), progress=False)


def test_cli_a_corrected_sweep_reruns_into_the_file_of_one_that_failed(tmp_path, capsys):
    """``ldpsim sweep`` whose first cell fails once its data are loaded (bits too small for
    the cohort: found by the engine's plan) leaves a record of no finished cell; the corrected
    command into the same --out runs, and its manifest does not carry the failed sweep's
    session over as its own."""
    out = tmp_path / "r.csv"
    common = ["sweep", "--preset", "none", "--dataset", "synthetic", "--model", "logreg",
              "--population", "12", "--clients", "4", "--seeds", "0", "--epsilon", "4",
              "--rounds", "1", "--privacy-mode", "discrete", "--out", str(out), "--no-progress"]
    assert main([*common, "--bits", "4"]) == 2
    assert "too small" in capsys.readouterr().err and not out.exists()
    assert main(common) == 0
    assert len(pd.read_csv(out)) == 1
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["earlier_sessions"] == []
    (key, resolved), = manifest["resolved"].items()   # what the cell ran with
    assert resolved["model"] == "logreg" and resolved["local_steps"] >= 1
