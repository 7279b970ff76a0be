"""``ldpsim frontier``: the CSV's columns, resume, the figure, and one-line errors."""

from __future__ import annotations

import csv

import pytest

from ldpsim.cli import main

TINY = ["frontier", "--mechanisms", "gaussian,duchi", "--epsilon", "1,4", "--dims", "8",
        "--clients", "1,3", "--trials", "2", "--no-progress"]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow   # the CLI end to end: runs, resume, plot
def test_csv_columns_resume_and_plot(tmp_path, capsys):
    out = tmp_path / "sub" / "frontier.csv"
    assert main(TINY + ["--out", str(out)]) == 0
    rows = _rows(out)
    assert len(rows) == 2 * 2 * 2
    for col in ("mechanism", "epsilon", "delta", "dim", "clients", "mse", "mse_theory",
                "lower_bound", "trials", "mse_se"):
        assert col in rows[0]
    g = [r for r in rows if r["mechanism"] == "gaussian"]
    assert {float(r["delta"]) for r in g} == {1e-5}
    assert {float(r["delta"]) for r in rows if r["mechanism"] == "duchi"} == {0.0}
    first = {(r["mechanism"], r["epsilon"], r["clients"]): r["mse"] for r in rows}
    # rerun with one more epsilon: the 8 finished cells are skipped, 4 new ones appended
    capsys.readouterr()
    argv = TINY[:]
    argv[argv.index("1,4")] = "1,4,16"
    assert main(argv + ["--out", str(out), "--plot", str(tmp_path / "f.png")]) == 0
    err = capsys.readouterr().err
    assert "8 of 12 cells already" in err
    rows = _rows(out)
    assert len(rows) == 12
    assert {(r["mechanism"], r["epsilon"], r["clients"]): r["mse"] for r in rows[:8]} == first
    assert (tmp_path / "f.png").stat().st_size > 0


def test_other_csv_is_refused(tmp_path, capsys):
    out = tmp_path / "other.csv"
    out.write_text("a,b\n1,2\n")
    assert main(TINY + ["--out", str(out)]) == 2
    assert "other columns" in capsys.readouterr().err


@pytest.mark.parametrize("extra, problem", [
    (["--epsilon", "0"], "--epsilon must be > 0"),
    (["--epsilon", "0.5,-1"], "--epsilon must be > 0"),
    (["--epsilon", "x"], "not a number"),
    (["--mechanisms", "gaussian,nope"], "unknown mechanism 'nope'"),
    (["--mechanisms", "rr"], "unknown mechanism 'rr'"),
    (["--mechanisms", "signds", "--dims", "50"], "signds at epsilon 1, dim 50"),
    (["--mechanisms", "privunit2", "--dims", "3"], "privunit2 at epsilon 1, dim 3"),
    (["--mechanisms", "duchi", "--epsilon", "701"], "duchi at epsilon 701"),
    (["--trials", "0"], "--trials must be an integer >= 1"),
    (["--clients", "0"], "--clients must be an integer >= 1"),
    (["--dims", "10.5"], "not a whole number"),
    (["--delta", "1.5"], "--delta"),
    (["--plot", "x.txt"], "--plot must end in"),
])
def test_bad_input_is_one_line(extra, problem, tmp_path, capsys):
    argv = TINY[:]
    for opt, val in zip(extra[::2], extra[1::2]):
        if opt in argv:
            argv[argv.index(opt) + 1] = val
        else:
            argv += [opt, val]
    assert main(argv + ["--out", str(tmp_path / "a.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ldpsim frontier: error:"), err
    assert problem in err, err
    assert not (tmp_path / "a.csv").exists()


def test_output_folder_is_refused_before_work(tmp_path, capsys):
    assert main(TINY + ["--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
