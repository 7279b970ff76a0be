"""``ldpsim sweep`` says what it runs: flags change the preset a bare ``sweep`` runs, the
command prints the base and every change before any work, ``--preset none`` gives the run
defaults, and ``--config`` is a base too."""

from __future__ import annotations

import dataclasses
import math
import shlex

import pandas as pd
import pytest

from ldpsim._src.cli import build_parser
from ldpsim._src.cli.cmd_sweep import DEFAULT_RUN, _describe, resolve
from ldpsim.cli import main


def _resolve(line: str):
    return resolve(build_parser().parse_args(["sweep", *shlex.split(line)]))


def _run_defaults() -> dict:
    from ldpsim.fl import SimulationConfig

    return {f.name: f.default for f in dataclasses.fields(SimulationConfig)}


def test_bare_sweep_is_the_quick_preset_with_no_changes():
    r = _resolve("")
    assert r.config.name == "quick" and r.plots and r.changes == ()
    assert r.config.grid == {"epsilon": (1, 10, 100, math.inf), "clients_per_round": (10, 100, 1000),
                             "seed": (0,)}
    for field, value in DEFAULT_RUN.items():
        assert r.config.base[field] == value


def test_the_quick_start_grid_written_out_runs_the_quick_sweep():
    """The quick start's own grid, typed, is the same experiment (same fingerprint)."""
    bare, typed = _resolve(""), _resolve("--epsilon 1,10,100,inf --out p.csv")
    assert typed.config.fingerprint() == bare.config.fingerprint()
    assert typed.changes == () and "quick" in typed.base


def test_a_flag_changes_one_field_of_the_preset_and_keeps_the_rest():
    r = _resolve("--clients 10,100,1000,2000 --rounds 3")
    quick = _resolve("").config
    assert r.config.grid["clients_per_round"] == (10, 100, 1000, 2000)
    assert r.config.base["rounds"] == 3
    # Everything else is the preset's: population 2000 (so m = 2000 is valid), logreg, ...
    same = {k: v for k, v in quick.base.items() if k != "rounds"}
    assert {k: r.config.base[k] for k in same} == same
    assert r.changes == (("clients_per_round", "10,100,1000", "10,100,1000,2000"),
                         ("rounds", "20", "3"))
    for cell in r.config.cells():   # m = 2000 <= population 2000: no error
        assert cell.params["clients_per_round"] <= cell.params["population"] == 2000
        assert cell.params["delta"] == 1 / 2000


def test_preset_none_is_the_bare_run_defaults():
    r = _resolve("--preset none --epsilon 1")
    defaults = _run_defaults()
    assert not r.plots and r.config.name is None
    for field, value in r.config.base.items():
        assert value == defaults[field], field
    assert "run defaults" in r.base and r.changes == (("epsilon", "1,10,100,inf", "1"),)


def test_the_screen_names_the_base_and_each_change():
    text = _describe(_resolve("--mechanism gaussian,laplace --client-lr 0.3 --population 3000"))
    lines = text.splitlines()
    assert lines[0].startswith("  base:    the 'quick' preset (the default; --preset none")
    assert lines[1] == ("  changed: client_lr: 0.1 -> 0.3  mechanism: gaussian -> gaussian,laplace "
                        "(axis)  population: 2000 -> 3000")
    # Floats print in their shortest form (0.3, not 0.29999999999999999).
    assert "client_lr=0.3 " in lines[3] and "0.2999" not in text


def test_a_config_file_is_the_base_and_conflicts_with_a_preset(tmp_path):
    from ldpsim._src._checks import LdpsimError

    cfg = tmp_path / "s.toml"
    cfg.write_text('[grid]\nepsilon = [4]\nclients_per_round = [5]\nseed = [0]\n'
                   '[run]\ndataset = "synthetic"\npopulation = 30\n')
    r = _resolve(f"--config {cfg} --seeds 0,1")
    assert not r.plots and r.config.base["population"] == 30
    assert r.config.base["model"] == _run_defaults()["model"]   # no preset under a file
    assert r.changes == (("seed", "0", "0,1"),) and str(cfg) in r.base
    with pytest.raises(LdpsimError, match="--preset and --config"):
        _resolve(f"--config {cfg} --preset quick")


def test_plots_follow_the_base_unless_asked():
    assert not _resolve("--no-plots").plots
    assert _resolve("--preset none --plots").plots


@pytest.mark.slow
def test_preset_and_resolved_grid_are_printed_before_the_run(tmp_path, capsys):
    out = tmp_path / "q.csv"
    rc = main(["sweep", "--clients", "5", "--seeds", "0", "--epsilon", "inf", "--rounds", "1",
               "--out", str(out), "--no-progress", "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "base:    the 'quick' preset" in err
    assert "changed: clients_per_round: 10,100,1000 -> 5  epsilon: 1,10,100,inf -> inf  rounds: 20 -> 1" in err
    assert "grid:  epsilon=inf  clients_per_round=5  seed=0" in err
    assert "population=2000" in err and "rounds=1" in err and "model=logreg" in err
    rows = pd.read_csv(out)
    assert set(rows["population"]) == {2000} and set(rows["round"]) == {1}
    assert set(rows["model"]) == {"logreg"}


def test_another_dataset_drops_the_presets_synthetic_training_settings():
    """The quick sweep's model and local training were measured on synthetic data; on MNIST
    the dataset's own defaults apply (5 local epochs at 0.1), unless typed."""
    r = _resolve("--dataset mnist --model lenet5 --population 6000 --rounds 30")
    assert "local_steps" not in r.config.base or r.config.base["local_steps"] is None
    assert r.config.base["client_lr"] is None and r.config.base["model"] == "lenet5"
    assert ("local_steps", "10", "(the dataset's default)") in r.changes
    typed = _resolve("--dataset mnist --local-steps 10")
    assert typed.config.base["local_steps"] == 10 and typed.config.base["model"] == "auto"
    assert _resolve("--rounds 3").config.base["local_steps"] == 10   # synthetic: kept


@pytest.mark.parametrize("mode", ["ldp", "mindspore", "central", "distributed", "discrete"])
def test_the_default_epsilon_axis_follows_whether_the_mode_reads_epsilon(mode):
    """A mode that reads epsilon (local DP, the discrete modes) keeps the preset's axis, so
    ``--privacy-mode discrete`` alone is not a sweep of non-private runs; the others have a
    budget of their own and get the single "not used" value."""
    from ldpsim._src.privacy import registry

    r = _resolve(f"--privacy-mode {mode}")
    reads = "epsilon" in registry.mode(mode).settings
    assert reads == (mode in ("ldp", "discrete"))
    assert r.config.grid["epsilon"] == ((1, 10, 100, math.inf) if reads else (math.inf,))


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    """``--dry-run``: every cell, marked done where the results file already holds it (only
    this sweep's), and no file written or changed."""
    from ldpsim.cli import main

    out = tmp_path / "s.csv"
    argv = ["sweep", "--epsilon", "1,inf", "--clients", "5", "--population", "20",
            "--rounds", "1", "--no-plots", "--no-progress", "--out", str(out)]
    assert main(argv + ["--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "to run  clients_per_round=5;epsilon=1;seed=0" in text
    assert "dry run: 2 cells to run, 0 already in" in text
    assert list(tmp_path.iterdir()) == []
    assert main(argv) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert main(argv + ["--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "done    clients_per_round=5;epsilon=inf;seed=0" in text
    assert "dry run: 0 cells to run, 2 already in" in text
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_resumed_sweep_says_what_it_continues(tmp_path, capsys):
    """The cells already in the results file, and a cell continuing from its checkpoint
    (``<stem>.checkpoints/<config hash>/<round>``), are announced before the work."""
    from ldpsim._src.cli.cmd_sweep import _announce_resume
    from ldpsim._src.fl.checkpoint import config_hash
    from ldpsim._src.sweep.config import SweepConfig
    from ldpsim._src.sweep.engine import make_config

    config = SweepConfig(base={"dataset": "synthetic", "population": 20, "rounds": 30},
                         grid={"epsilon": [1, "inf"], "clients_per_round": [5], "seed": [0]})
    cells = config.cells()
    out = tmp_path / "r.csv"
    _announce_resume(out, config, cells, len(cells), 0)
    assert capsys.readouterr().err == ""                       # nothing to resume
    (tmp_path / "r.checkpoints" / config_hash([make_config(dict(cells[0].params))])[:20]
     / "20").mkdir(parents=True)
    _announce_resume(out, config, cells, len(cells), 1)
    err = capsys.readouterr().err
    assert "resuming: 1 of 2 cells already in" in err
    assert f"{cells[0].key} continues after round 20" in err
    assert cells[1].key not in err
