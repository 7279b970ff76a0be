"""The named experiment configs load through `ldpsim sweep --config` and encode the claim they test.

Nothing is trained here (the sweeps take minutes to hours); every cell is validated as
``ldpsim sweep`` would before running, and the MindSpore settings are checked field by field.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ldpsim._src.cli import build_parser
from ldpsim._src.cli.cmd_sweep import build_config
from ldpsim._src.sweep.engine import EngineRunner

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
MINDSPORE = ["mindspore_lenet5.toml", "mindspore_lenet5_quick.toml"]


def _config(name: str):
    args = build_parser().parse_args(["sweep", "--config", str(EXPERIMENTS / name)])
    return build_config(args)


@pytest.mark.parametrize("name", MINDSPORE)
def test_mindspore_config_encodes_the_claim(name):
    config, out, plots = _config(name)
    assert config.grid["epsilon"] == (10, 50, 100, math.inf)
    want_m = (10, 100, 1000, 3000) if name == "mindspore_lenet5.toml" else (10, 100, 1000)
    assert config.grid["clients_per_round"] == want_m
    base = config.base
    assert (base["dataset"], base["model"]) == ("mnist", "lenet5")
    # MindSpore's privacy mode, stated explicitly: sensitivity C (add/remove), analytic Gaussian.
    assert (base["mechanism"], base["neighbours"], base["calibration"]) == ("gaussian", "add-remove", "analytic")
    assert base["clip"] == 1.0 and base["delta"] == "1/population"
    assert base["population"] >= 2 * max(want_m)  # cohorts are a sample, not the whole federation
    assert out == Path("results") / f"{Path(name).stem}.csv" and plots
    runner = EngineRunner()
    for cell in config.cells():
        runner.check(cell)  # every cell is a valid SimulationConfig
        assert cell.params["delta"] == pytest.approx(1 / base["population"])


def test_quick_and_full_differ_only_in_size():
    full, _, _ = _config("mindspore_lenet5.toml")
    quick, _, _ = _config("mindspore_lenet5_quick.toml")
    differ = {k for k in set(full.base) | set(quick.base) if full.base.get(k) != quick.base.get(k)}
    assert differ == {"rounds"}
    assert quick.base["rounds"] < full.base["rounds"]
    assert len(quick.cells()) < len(full.cells()) == 4 * 4 * 3


def test_mechanisms_config_compares_every_randomizer_at_equal_epsilon():
    from ldpsim._src.fl.config import MECHANISMS

    config, out, _ = _config("mechanisms_lenet5.toml")
    assert config.grid["mechanism"] == tuple(sorted(MECHANISMS))
    assert config.grid["clients_per_round"] == (1000,) and max(config.grid["epsilon"]) <= 16
    base = config.base
    # the client and server setting of seed000_converged.toml, replace-one neighbours
    assert (base["dataset"], base["model"], base["population"]) == ("mnist", "lenet5", 20000)
    assert (base["local_steps"], base["batch_size"], base["client_lr"]) == (3, 3, 0.1)
    assert (base["server_optimizer"], base["server_lr"]) == ("fedavg", 2.0)
    assert base["neighbours"] == "replace" and base["noise_mode"] == "per-client"
    assert out == Path("results") / "mechanisms_lenet5.csv"
    runner = EngineRunner()
    for cell in config.cells():
        runner.check(cell)


def test_femnist_config_is_the_natural_writer_partition_under_honest_ldp():
    config, out, plots = _config("femnist_ldp.toml")
    base = config.base
    # every writer of the ../shared/data subset is one client; m up to all 105 of them
    assert (base["dataset"], base["partition"], base["population"]) == ("femnist", "natural", 105)
    assert config.grid["clients_per_round"] == (10, 50, 105)
    assert config.grid["epsilon"] == (10, 100, 1000, math.inf)
    # LeNet-5 (62 outputs from the data), not the 6.6 M-parameter LEAF CNN that "auto" would pick
    assert base["model"] == "lenet5"
    assert (base["mechanism"], base["neighbours"], base["calibration"]) == ("gaussian", "replace", "analytic")
    assert base["noise_mode"] == "aggregate" and base["clip"] == 1.0
    assert (base["local_epochs"], base["batch_size"], base["client_lr"]) == (1, 16, 0.2)
    assert out == Path("results") / "femnist_ldp.csv" and not plots
    runner = EngineRunner()
    for cell in config.cells():
        runner.check(cell)
        assert cell.params["delta"] == pytest.approx(1 / 105)
