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
