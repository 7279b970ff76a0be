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
