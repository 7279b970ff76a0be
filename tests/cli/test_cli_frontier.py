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
    (["--projection-dim", "4"], "--projection-dim is the k of projunit and fastprojunit"),
    (["--mechanisms", "projunit", "--projection-dim", "9"], "projunit at epsilon 1, dim 8, k 9"),
    (["--mechanisms", "projunit", "--projection-dim", "1"], "k (projection_dim)"),
    (["--mechanisms", "projunit", "--projection-dim", "2,x"], "not a whole number"),
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


def test_projection_dims_are_cells_and_resume_skips_pure_randomizers(tmp_path, capsys):
    """--projection-dim K[,K...] runs one ProjUnit cell per k (the projection_dim column,
    empty for the other randomizers; floats_sent k + 3); a rerun skips finished cells, also
    those of pure randomizers whose delta column is the float sampler's realised delta."""
    out = tmp_path / "f.csv"
    argv = ["frontier", "--mechanisms", "privunitg,projunit", "--epsilon", "2", "--dims", "8",
            "--clients", "2", "--trials", "2", "--no-progress", "--out", str(out)]
    assert main(argv + ["--projection-dim", "2,4"]) == 0
    rows = _rows(out)
    assert [(r["mechanism"], r["projection_dim"], r["floats_sent"]) for r in rows] == [
        ("privunitg", "", "9"), ("projunit", "2", "5"), ("projunit", "4", "7")]
    assert float(rows[0]["delta"]) > 0   # PrivUnitG's realised delta (float32 sampler)
    capsys.readouterr()
    # k = 8 = d is the default at this d: the same cell as no --projection-dim
    assert main(argv + ["--projection-dim", "4,8"]) == 0
    assert "2 of 3 cells already" in capsys.readouterr().err
    assert main(argv) == 0
    assert "2 of 2 cells already" in capsys.readouterr().err
    assert len(_rows(out)) == 4


@pytest.mark.parametrize("missing", [("projection_dim",), ("floats_sent", "projection_dim")])
def test_a_table_from_before_the_projection_dim_column_gains_it(missing, tmp_path, capsys):
    """A frontier CSV of an earlier version's columns (before projection_dim, or before
    floats_sent too) resumes: the columns are added, each row's from the mechanism it ran
    (ProjUnit at its default k), and the finished cells are skipped."""
    out = tmp_path / "f.csv"
    argv = ["frontier", "--mechanisms", "gaussian,projunit", "--epsilon", "2", "--dims", "8",
            "--clients", "2", "--trials", "2", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    rows = _rows(out)
    with open(out, "w", newline="") as f:   # the old layout: no projection_dim column
        w = csv.DictWriter(f, fieldnames=[c for c in rows[0] if c not in missing],
                           extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert main(argv) == 0
    assert "2 of 2 cells already" in capsys.readouterr().err
    assert _rows(out) == rows
