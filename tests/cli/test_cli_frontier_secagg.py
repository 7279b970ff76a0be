"""``ldpsim frontier --secagg``: the table of the distributed discrete mechanisms (columns,
resume, figure) and its one-line refusals."""

from __future__ import annotations

import csv

import pytest

from ldpsim.cli import main

TINY = ["frontier", "--secagg", "--mechanisms", "ddg,skellam", "--epsilon", "4", "--dims", "100",
        "--clients", "20", "--bits", "12,16", "--no-progress"]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow   # the CLI end to end: theory rows, resume, plot
def test_secagg_csv_resume_and_plot(tmp_path, capsys):
    out = tmp_path / "secagg.csv"
    assert main(TINY + ["--out", str(out)]) == 0
    rows = _rows(out)
    assert len(rows) == 2 * 2
    for r in rows:
        assert int(r["bits_sent"]) == int(r["bits"]) * 128
        assert float(r["mse_theory"]) >= float(r["mse_continuous"]) > 0
        assert float(r["wrap_probability"]) <= 1e-6
        assert r["mse"] == "nan" or r["mse"] == ""            # no --trials: theory only
    capsys.readouterr()
    argv = TINY[:]
    argv[argv.index("12,16")] = "12,16,20"
    png = tmp_path / "s.png"
    assert main(argv + ["--out", str(out), "--plot", str(png)]) == 0
    rows2 = _rows(out)
    assert len(rows2) == 6 and rows2[:4] == rows                # finished cells kept, skipped
    assert png.stat().st_size > 0


@pytest.mark.parametrize("extra, problem", [
    (["--bits", "12,40"], "--bits must be whole numbers in [2, 32]"),
    (["--mechanisms", "gaussian"], "not a secure-aggregation mechanism"),
    (["--trials", "-1"], "--trials must be >= 0"),
    (["--clip", "0"], "--clip must be > 0"),
    (["--mechanisms", "skellam", "--bits", "12", "--dims", "61706", "--clients", "1000"],
     "least that fits is 13 bits"),
])
def test_secagg_bad_input_is_one_line(extra, problem, tmp_path, capsys):
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


@pytest.mark.parametrize("flag", [["--bits", "16"], ["--clip", "2"], ["--skip-unfit"]])
def test_secagg_options_need_secagg(flag, capsys):
    argv = [a for a in TINY if a != "--secagg"]
    argv[argv.index("ddg,skellam")] = "gaussian"
    argv = [a for a in argv if a not in ("--bits", "12,16")] + flag
    assert main(argv) == 2
    assert "--secagg only" in capsys.readouterr().err
