"""``ldpsim sweep`` says what it runs: named presets and the resolved grid before any work."""

from __future__ import annotations

import pandas as pd
import pytest

from ldpsim.cli import main


@pytest.mark.slow
def test_preset_and_resolved_grid_are_printed_before_the_run(tmp_path, capsys):
    out = tmp_path / "q.csv"
    rc = main(["sweep", "--preset", "quick", "--clients", "5", "--seeds", "0", "--epsilon",
               "inf", "--rounds", "1", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "grid:  epsilon=inf  clients_per_round=5  seed=0" in err
    # The preset's fixed settings are visible (and the flag overrides its rounds).
    assert "population=2000" in err and "rounds=1" in err and "model=logreg" in err
    rows = pd.read_csv(out)
    assert set(rows["population"]) == {2000} and set(rows["round"]) == {1}


@pytest.mark.slow
def test_flags_without_a_preset_use_the_run_defaults_and_say_so(tmp_path, capsys):
    out = tmp_path / "d.csv"
    rc = main(["sweep", "--clients", "5", "--seeds", "0", "--epsilon", "inf", "--rounds", "1",
               "--population", "30", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "quick" not in err and "fixed: population=30  rounds=1" in err
