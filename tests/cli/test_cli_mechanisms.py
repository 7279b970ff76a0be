"""``ldpsim run --mechanism M`` and ``ldpsim sweep --mechanism M1,M2`` (a grid axis)."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from ldpsim.cli import main

RUN = ["run", "--dataset", "synthetic", "--model", "logreg", "--population", "30",
       "--clients-per-round", "6", "--rounds", "2", "--local-steps", "1", "--no-progress"]
SWEEP = ["sweep", "--preset", "none", "--dataset", "synthetic", "--model", "logreg", "--population", "30",
         "--rounds", "1", "--local-steps", "1", "--clients", "5", "--seeds", "0",
         "--no-progress"]


def test_run_privunit2_writes_its_columns(tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert main(RUN + ["--mechanism", "privunit2", "--epsilon", "3", "--norm-epsilon", "1",
                       "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert (df["mechanism"] == "privunit2").all() and df["delta"].isna().all()
    assert (df["epsilon_spent"] == 3 * df["max_participation"]).all()
    assert (df["theory_noise_norm"] > 0).all() and (df["noise_norm"] > 0).all()
    # ideally pure; the float32 samplers' bounded reach adds a tiny delta (composed by k)
    assert ((df["delta_spent"] > 0) & (df["delta_spent"] < 1e-12)).all()
    assert "(pure composition; the float32 realisation's delta)" in capsys.readouterr().out


@pytest.mark.parametrize("extra, match", [
    (["--mechanism", "duchi", "--norm-epsilon", "1"], "--norm-epsilon does not apply to --mechanism duchi"),
    (["--mechanism", "privunit2", "--sign-k", "0.02"], "--sign-k does not apply to --mechanism privunit2"),
    (["--mechanism", "duchi", "--delta", "1e-3"], "--delta does not apply to --mechanism duchi"),
    (["--mechanism", "privunitg", "--calibration", "classic"], "--calibration does not apply"),
    (["--mechanism", "signds", "--epsilon", "200"], r"valid range \(0, 100\]"),
    (["--mechanism", "duchi", "--noise-mode", "aggregate"], "Gaussian noise only"),
    (["--mechanism", "privunit2", "--neighbours", "add-remove"], "neighbours must be 'replace'"),
    (["--mechanism", "signds", "--sign-k", "0.5"], r"sign_k must be in \(0, 0.25\]"),
])
def test_run_option_errors_name_the_value(extra, match, capsys):
    args = RUN + extra + ([] if "--epsilon" in extra else ["--epsilon", "2"])
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ldpsim run: error:")
    assert re.search(match, err[0]), err[0]


def test_sweep_mechanism_list_is_a_grid_axis(tmp_path):
    out = tmp_path / "s.csv"
    # --delta is Gaussian's: kept for its cells, unused by the pure ones (not an error)
    assert main(SWEEP + ["--mechanism", "gaussian,laplace,privunit2", "--epsilon", "4",
                         "--delta", "1e-3", "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert sorted(df["mechanism"]) == ["gaussian", "laplace", "privunit2"]
    g = df.set_index("mechanism")
    assert g.loc["gaussian", "delta"] == 1e-3 and math.isnan(g.loc["privunit2", "delta"])


def test_sweep_unknown_mechanism_lists_the_valid_ones(tmp_path, capsys):
    assert main(SWEEP + ["--mechanism", "gaussian,privunit3", "--epsilon", "4",
                         "--out", str(tmp_path / "s.csv")]) == 2
    err = capsys.readouterr().err
    from ldpsim._src.privacy import registry

    names = ", ".join(registry.engine_randomizers())
    assert "privunitg, projunit" in names   # the registry's order
    assert f"mechanism must be one of {names}; got 'privunit3'" in err


def test_sweep_toml_grid_mechanism_is_validated(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[grid]\nepsilon = [4]\nclients_per_round = [5]\nseed = [0]\n'
                   'mechanism = ["duchi", "sign-ds"]\n[run]\ndataset = "synthetic"\n')
    assert main(["sweep", "--config", str(cfg), "--out", str(tmp_path / "s.csv"),
                 "--no-progress"]) == 2
    assert "got 'sign-ds'" in capsys.readouterr().err


def test_sweep_option_that_no_cell_uses_is_an_error(tmp_path, capsys):
    assert main(SWEEP + ["--mechanism", "gaussian,duchi", "--epsilon", "4",
                         "--norm-epsilon", "1", "--out", str(tmp_path / "s.csv")]) == 2
    assert "--norm-epsilon does not apply" in capsys.readouterr().err


def test_cli_mechanism_choices_are_the_engines():
    from ldpsim._src.cli import cmd_run, cmd_sweep
    from ldpsim._src.fl.config import MECHANISMS

    run_choices = {o[0]: o[3] for o in cmd_run._OPTIONS}["--mechanism"]
    assert tuple(run_choices) == MECHANISMS == cmd_sweep.MECHANISMS
