"""``ldpsim run``: CSV output, --help, errors."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from ldpsim.cli import main
from ldpsim._src.fl.config import SimulationConfig

ARGS = ["run", "--dataset", "synthetic", "--model", "logreg", "--population", "30",
        "--clients-per-round", "10", "--rounds", "3", "--local-steps", "1",
        "--chunk-size", "5", "--no-progress"]


def test_run_writes_one_csv_row_per_evaluated_round(tmp_path, capsys):
    out = tmp_path / "metrics.csv"
    rc = main(ARGS + ["--epsilon", "5", "--delta", "1e-4", "--clip", "0.5", "--out", str(out)])
    assert rc == 0
    df = pd.read_csv(out)
    assert list(df["round"]) == [1, 2, 3]
    assert {"accuracy", "noise_norm", "signal_norm", "snr", "clip_fraction", "epsilon",
            "sigma", "sensitivity", "neighbours", "mechanism", "wall_time"} <= set(df.columns)
    assert (df["epsilon"] == 5).all() and (df["neighbours"] == "replace").all()
    assert (df["sensitivity"] == 1.0).all() and (df["noise_norm"] > 0).all()
    assert "accuracy" in capsys.readouterr().out


@pytest.mark.slow
def test_run_epsilon_inf_means_no_noise(tmp_path):
    out = tmp_path / "m.csv"
    assert main(ARGS + ["--epsilon", "inf", "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert (df["noise_norm"] == 0).all() and (df["mechanism"] == "none").all()


@pytest.mark.parametrize("bad", [
    ["--epsilon", "-1"], ["--epsilon", "0"], ["--delta", "1.5", "--epsilon", "1"],
    ["--clip", "0"], ["--clients-per-round", "50"], ["--rounds", "0"],
    ["--out", "/proc/nonexistent-folder/x.csv"], ["--dataset", "no-such-dataset"],
])
def test_bad_input_exits_2_with_one_line(bad, capsys):
    assert main(ARGS + bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ldpsim run: error:")


def test_unparsable_number_exits_2():
    with pytest.raises(SystemExit) as exc:
        main(ARGS + ["--rounds", "many"])
    assert exc.value.code == 2


def test_help_lists_every_config_field_with_its_default(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    for field in dataclasses.fields(SimulationConfig):
        assert "--" + field.name.replace("_", "-") in text, field.name
    assert text.count("(default:") >= len(dataclasses.fields(SimulationConfig))


def test_stop_at_epsilon_ends_the_run_before_the_budget(tmp_path):
    # Laplace epsilon 1 per round: k participations are exactly k; budget 1.5 = one each.
    out = tmp_path / "budget.csv"
    rc = main(ARGS + ["--rounds", "6", "--mechanism", "laplace", "--epsilon", "1",  # last wins
                      "--stop-at-epsilon", "1.5", "--stop-policy", "run", "--eval-every", "4",
                      "--out", str(out)])
    assert rc == 0
    df = pd.read_csv(out)
    assert df["round"].iloc[-1] < 6 and (df["ledger_epsilon_max"] == 1.0).all()
    assert df["retired_clients"].iloc[-1] == df["clients"].sum()


@pytest.mark.parametrize("bad", [["--epsilon", "1", "--stop-at-epsilon", "0"],
                                 ["--epsilon", "1", "--stop-policy", "run"],
                                 ["--epsilon", "1", "--stop-at-epsilon", "0.5"]])
def test_bad_budget_exits_2_with_one_line(bad, capsys):
    assert main(ARGS + bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stop_" in err[0]
