"""The manifest beside a run's CSV (ldpsim._src._manifest), ``run --config`` and ``--overwrite``.

End-to-end tests run the command in a subprocess (as a user does: the CLI's own host-device
setup), so that a run re-created from the manifest alone can be compared bit for bit.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ldpsim._src import _manifest
from ldpsim.cli import main
from ldpsim._src.fl.config import SimulationConfig

TOP_LEVEL = {"ldpsim_manifest", "kind", "status", "started_at", "ended_at", "wall_seconds",
             "error", "command_line", "command", "cwd", "results", "configuration", "seeds",
             "data", "privacy", "software", "hardware", "environment", "earlier_sessions",
             "resolved"}
SOFTWARE = {"ldpsim", "git_commit", "git_dirty", "python", "python_implementation", "jax",
            "jaxlib", "flax", "optax", "dp-accounting", "numpy", "scipy"}
HARDWARE = {"backend", "device_count", "device_kinds", "process_count", "cpu_model",
            "cpu_count", "host", "os"}
PRIVACY = {"privacy_mode", "mechanism", "neighbours", "epsilon", "delta", "epsilon_spent",
           "sensitivity", "statement"}
TINY = ["--dataset", "synthetic", "--model", "mlp", "--population", "40",
        "--clients-per-round", "4", "--rounds", "2", "--no-progress"]


def _ldpsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ldpsim", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in csv.DictReader(f)]


@pytest.mark.slow
def test_run_manifest_has_every_field_and_recreates_the_run(tmp_path):
    out = tmp_path / "a.csv"
    done = _ldpsim("run", *TINY, "--epsilon", "4", "--clip", "0.5", "--seed", "3",
                   "--local-steps", "1", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = _manifest.manifest_path(out)
    assert path == tmp_path / "a.manifest.json"
    m = json.loads(path.read_text())   # strict JSON: inf/nan are strings

    assert set(m) == TOP_LEVEL
    assert m["ldpsim_manifest"] == _manifest.FORMAT and m["kind"] == "run"
    assert m["status"] == "finished" and m["error"] is None
    assert m["started_at"] <= m["ended_at"] and m["wall_seconds"] > 0
    assert m["command_line"][:2] == ["ldpsim", "run"] and "--clip" in m["command"]
    assert m["resolved"] == {"model": _rows(out)[-1]["model"]}
    assert m["results"] == {"csv": str(out), "rows": 2}
    assert set(m["configuration"]) == {f.name for f in dataclasses.fields(SimulationConfig)}
    assert m["configuration"]["clip"] == 0.5 and m["configuration"]["alpha"] == "inf"
    assert m["seeds"] == [3]
    assert m["data"] == [{"dataset": "synthetic", "source": m["data"][0]["source"],
                          "folder": None, "files": None}]
    assert set(m["software"]) == SOFTWARE
    assert m["software"]["jax"] and m["software"]["numpy"] and m["software"]["dp-accounting"]
    assert set(m["hardware"]) == HARDWARE
    assert m["hardware"]["backend"] == "cpu" and m["hardware"]["device_count"] >= 1
    assert m["hardware"]["cpu_count"] >= 1
    assert isinstance(m["environment"], dict) and m["earlier_sessions"] == []
    privacy = m["privacy"]
    assert PRIVACY <= set(privacy)
    assert privacy["mechanism"] == "gaussian" and privacy["neighbours"] == "replace"
    assert privacy["epsilon"] == 4 and privacy["sensitivity"] == 1.0  # replace: 2C
    assert privacy["round"] == 2 and "(4, 1e-05) per round" in privacy["statement"]

    config = _manifest.simulation_config(m)
    assert config == SimulationConfig(dataset="synthetic", model="mlp", population=40,
                                      clients_per_round=4, rounds=2, epsilon=4.0, clip=0.5,
                                      seed=3, local_steps=1)

    # The manifest alone: `run --config a.manifest.json` gives the same history.
    again = tmp_path / "b.csv"
    done = _ldpsim("run", "--config", str(path), "--no-progress", "--out", str(again),
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _rows(again) == _rows(out)
    assert json.loads(_manifest.manifest_path(again).read_text())["configuration"] == \
        m["configuration"]


@pytest.mark.slow
def test_run_config_toml_with_flags_overriding(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[sweep]\nname = "labels are ignored"\n\n'
                      '[grid]\nepsilon = [8]\nclients_per_round = [4]\nseed = 5\n\n'
                      '[run]\ndataset = "synthetic"\nmodel = "mlp"\npopulation = 40\n'
                      'rounds = 3\ndelta = "1/population"\nclip = 2.0\n')
    out = tmp_path / "r.csv"
    done = _ldpsim("run", "--config", str(config), "--rounds", "2", "--no-progress",
                   "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(_manifest.manifest_path(out).read_text())["configuration"]
    assert (got["epsilon"], got["clients_per_round"], got["seed"]) == (8, 4, 5)
    assert got["clip"] == 2.0 and got["delta"] == 1 / 40
    assert got["rounds"] == 2                      # the flag wins over the file
    assert len(_rows(out)) == 2


def test_run_refuses_to_overwrite_without_overwrite(tmp_path, capsys):
    out = tmp_path / "r.csv"
    out.write_text("round,accuracy\n1,0.5\n")
    assert main(["run", *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists; pass --overwrite" in err and len(err.strip().splitlines()) == 1
    assert out.read_text() == "round,accuracy\n1,0.5\n"


@pytest.mark.parametrize("text, message", [
    ("[grid]\nepsilon = [1, 10]\n", "several values for epsilon"),
    ("population = 10\nbogus = 1\n", "unknown setting(s) bogus"),
    ("[run]\npopulation = 10\n[other]\nx = 1\n", "unknown table(s) other"),
    ("population = \n", "not valid TOML"),
    ("[run]\ndelta = \"1/nothing\"\n", "delta must be a number"),
])
def test_run_config_errors_are_one_line(tmp_path, capsys, text, message):
    config = tmp_path / "c.toml"
    config.write_text(text)
    assert main(["run", "--config", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_manifest_write_is_strict_json_and_atomic(tmp_path):
    m = _manifest.collect("run", SimulationConfig(), out=tmp_path / "x.csv", seeds=[0])
    path = _manifest.write(tmp_path / "x.manifest.json", {**m, "x": float("nan")})
    data = json.loads(path.read_text())   # no NaN/Infinity literals
    assert data["x"] == "nan" and data["configuration"]["epsilon"] == "inf"
    assert not list(tmp_path.glob("*.tmp"))
    assert _manifest.simulation_config(data) == SimulationConfig()


def test_dataset_record_reuses_the_verified_checksums(tmp_path):
    from ldpsim._src.data import idx
    from ldpsim._src.data._files import sha256_of

    folder = tmp_path / "mnist"
    folder.mkdir()
    first = idx.FILES[0]
    (folder / first).write_bytes(b"not really mnist")
    rec = _manifest.dataset_record("mnist", tmp_path)
    assert rec["source"] == "idx" and rec["folder"] == str(folder)
    assert set(rec["files"]) == set(idx.FILES)
    entry = rec["files"][first]
    assert entry["sha256"] == sha256_of(folder / first)
    assert entry["expected_sha256"] == idx.IDX_DATASETS["mnist"]["sha256"][first]
    assert rec["files"][idx.FILES[1]]["sha256"] is None   # not there (yet)
    assert _manifest.dataset_record("synthetic")["files"] is None


def test_software_records_the_commit_of_the_checkout_ldpsim_is_imported_from():
    import ldpsim

    root = Path(ldpsim.__file__).resolve().parent.parent
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True, check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
        pytest.skip("ldpsim is not imported from a git checkout here")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    software = _manifest.collect("run", SimulationConfig())["software"]
    assert software["git_commit"] == head and isinstance(software["git_dirty"], bool)


def test_the_statement_names_the_dp_sgd_clients_guarantee():
    from ldpsim._src._manifest.guarantee import guarantee

    row = {"privacy_mode": "mindspore", "mechanism": "gaussian", "neighbours": "add-remove",
           "epsilon": 50.0, "delta": 0.01, "epsilon_spent": 50.0, "sensitivity": 0.05,
           "round": 1, "client_dp_epsilon": 9.5, "client_dp_delta": 1e-6}
    rec = guarantee(row)
    assert rec["client_dp_delta"] == 1e-6
    assert rec["statement"].endswith("DP-SGD clients: sample-level (9.5, 1e-06)-DP for the "
                                     "most-sampled client's examples")
    row.update(client_dp_epsilon=float("nan"), client_dp_delta=float("nan"))
    assert "DP-SGD" not in guarantee(row)["statement"]


def test_the_statement_of_a_mode_this_version_does_not_register_still_reads():
    from ldpsim._src._manifest.guarantee import guarantee

    rec = guarantee({"privacy_mode": "a-mode-from-elsewhere", "mechanism": "gaussian",
                     "epsilon": 1.0, "delta": 1e-5, "epsilon_spent": 2.0, "round": 3})
    assert rec["statement"].endswith("after 3 rounds (a-mode-from-elsewhere)")
