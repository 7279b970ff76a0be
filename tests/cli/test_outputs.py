"""Every file a command writes is checked before any work starts (one rule)."""

from __future__ import annotations

import pytest

from ldpsim.cli import main

FAST = {  # commands that would do real work if the check let them through
    "run": ["run", "--rounds", "1", "--no-progress"],
    "noise": ["noise", "--model", "logreg", "--epsilon", "1", "--delta", "1e-5",
              "--clients", "1"],
    "dpsgd": ["dpsgd", "--no-progress"],
    "sweep": ["sweep", "--no-progress"],
}


@pytest.mark.parametrize("command", sorted(FAST))
@pytest.mark.parametrize("bad,problem", [
    ("/proc/ldpsim-x.csv", "not writable"),
    ("/etc/hostname/x.csv", "is a file, not a folder"),
    ("{tmp}", "is a folder"),
])
def test_bad_output_paths_fail_fast_with_one_line(command, bad, problem, tmp_path, capsys):
    argv = FAST[command] + ["--out", bad.format(tmp=tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and problem in err and "--out" in err
    assert "Traceback" not in err


def test_noise_plot_path_is_checked(tmp_path, capsys):
    assert main(FAST["noise"] + ["--plot", str(tmp_path)]) == 2
    assert "--plot" in capsys.readouterr().err


def test_missing_parent_folders_are_created_and_nothing_is_left_behind(tmp_path, capsys):
    from ldpsim._src.cli import check_output_path

    target = tmp_path / "a" / "b" / "r.csv"
    check_output_path(target, "--out")
    assert target.parent.is_dir() and not target.exists()
    existing = tmp_path / "keep.csv"
    existing.write_text("x\n")
    check_output_path(existing, "--out")
    assert existing.read_text() == "x\n"


def test_run_csv_widens_when_a_row_brings_new_columns(tmp_path):
    """``ldpsim run --out`` resumed from a checkpoint of an earlier version replays history
    rows without the columns added since; the first row that has them widens the file (the
    earlier rows' cells empty) instead of failing at the end of the run."""
    import csv

    from ldpsim._src.cli.cmd_run import _CsvWriter

    out = tmp_path / "r.csv"
    w = _CsvWriter(out)
    w.write({"round": 5, "accuracy": 0.5})
    w.write({"round": 10, "accuracy": 0.6, "client_dp_delta": 1e-5})
    w.write({"round": 15, "accuracy": float("nan"), "client_dp_delta": 1e-5})
    w.close()
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["round", "accuracy", "client_dp_delta"], ["5", "0.5", ""],
                    ["10", "0.6", "1e-05"], ["15", "", "1e-05"]]
    assert w.rows == 3 and not (tmp_path / "r.csv.tmp").exists()


def test_a_run_that_fails_before_its_first_row_leaves_no_csv(tmp_path, capsys):
    """A setting found wrong only once the data are loaded (bits too small for the cohort,
    found by the engine's plan) fails with one line; no empty CSV is left, and the manifest
    records the failure."""
    import json

    out = tmp_path / "r.csv"
    rc = main(["run", "--dataset", "synthetic", "--model", "logreg", "--population", "20",
               "--clients-per-round", "5", "--rounds", "1", "--privacy-mode", "discrete",
               "--bits", "4", "--epsilon", "4", "--no-progress", "--out", str(out)])
    assert rc == 2 and "bits = 4 too small" in capsys.readouterr().err
    assert not out.exists()
    assert json.loads(out.with_suffix(".manifest.json").read_text())["status"] == "failed"
