"""Committed experiment files and run manifests written by earlier versions still load, to the
same settings.

``tests/fixtures/committed_configs.json`` records, for every TOML file of SimulationConfig
settings under experiments/, notebooks/ and docs/, what each sweep cell and the one-run reading
resolved to when it was generated (``tests/fixtures/make_config_fixtures.py``, run with the
code before the configuration became one nested schema). ``tests/fixtures/main_run_*.manifest.json``
are manifests ``ldpsim run --out`` wrote then.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from ldpsim._src import _manifest
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.experiment import Experiment
from ldpsim._src.sweep.config import load_run_config, load_sweep_config
from ldpsim._src.sweep.engine import make_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = FIXTURES.parents[1]
RECORDED = json.loads((FIXTURES / "committed_configs.json").read_text())
MANIFESTS = sorted(FIXTURES.glob("main_run_*.manifest.json"))


def is_simulation_file(path: Path) -> bool:
    """A sweep/run file of SimulationConfig settings: not an ``ldpsim dpsgd`` file (a [train]
    table, another schema) nor an experiment driver's own file ([grid] cells)."""
    import tomllib

    table = tomllib.loads(path.read_text())
    return not ({"train", "dp", "accounting"} & set(table) or "cells" in table.get("grid", {}))


def _value(v):
    return float(v) if v in ("inf", "-inf", "nan") else v


def _expected(cell: dict) -> dict:
    return {k: _value(v) for k, v in {**RECORDED["defaults"], **cell}.items()}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b) or (isinstance(a, (int, float)) and not isinstance(
        a, bool) and isinstance(b, (int, float)) and not isinstance(b, bool) and a == b)


def test_every_committed_file_is_recorded():
    """A TOML file added later must be recorded too (rerun make_config_fixtures.py)."""
    import tomllib

    files = {str(p.relative_to(REPO)) for folder in ("experiments", "notebooks", "docs")
             for p in (REPO / folder).rglob("*.toml")
             if is_simulation_file(p)}
    assert files and files == set(RECORDED["files"])


def test_every_field_of_then_is_a_field_now():
    assert set(RECORDED["defaults"]) <= {f.name for f in dataclasses.fields(SimulationConfig)}


@pytest.mark.parametrize("name", sorted(RECORDED["files"]))
def test_committed_file_resolves_to_the_same_configs(name):
    record = RECORDED["files"][name]
    config, _ = load_sweep_config(REPO / name)
    cells = {c.key: c for c in config.cells()}
    assert set(cells) == set(record["cells"])
    for key, cell in cells.items():
        got = make_config(dict(cell.params))
        want = _expected(record["cells"][key])
        for field, value in want.items():
            assert _same(getattr(got, field), value), (name, key, field, getattr(got, field),
                                                      value)
        assert Experiment.from_flat(got).flat() == got   # and the nested form holds it all
    settings, axes = load_run_config(REPO / name)
    assert {k: v for k, v in settings.items()} == {
        k: _value(v) for k, v in record["run"]["settings"].items()}
    assert axes == record["run"]["axes"]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_of_then_recreates_its_config(path):
    manifest = json.loads(path.read_text())
    config = _manifest.simulation_config(path)
    recorded = manifest["configuration"]
    for f in dataclasses.fields(SimulationConfig):
        if f.name in recorded:
            assert _same(getattr(config, f.name), _value(recorded[f.name])), f.name
    assert Experiment.from_flat(config).flat() == config


def test_manifests_cover_a_randomizer_option_and_the_adaptive_options():
    """The fixtures exercise the options whose place moved (a randomizer's own option, the
    adaptive-clipping and DP-SGD-client options), not only defaults."""
    configs = [_manifest.simulation_config(p) for p in MANIFESTS]
    assert any(c.mechanism == "privunit2" and c.norm_epsilon == 1.0 for c in configs)
    assert any(c.adaptive_clip and c.target_quantile == 0.4 and c.client_dp
               and c.client_dp_clip == 0.8 for c in configs)


@pytest.mark.slow   # one small run (5 s on an idle 2-core machine, JIT included)
def test_manifest_of_then_runs_again_to_the_same_history(tmp_path):
    """``ldpsim run --config MANIFEST`` with a manifest today's main wrote reproduces the
    history main wrote beside it (tests/fixtures/main_run_central_adaptive.csv), every
    column but the wall time, up to float32 rounding."""
    import csv

    from ldpsim._src.cli import main

    out = tmp_path / "again.csv"
    assert main(["run", "--config", str(FIXTURES / "main_run_central_adaptive.manifest.json"),
                 "--out", str(out), "--no-progress"]) == 0
    again = list(csv.DictReader(out.open()))
    then = list(csv.DictReader((FIXTURES / "main_run_central_adaptive.csv").open()))
    assert len(again) == len(then) == 2
    for a, b in zip(again, then):
        assert a.keys() >= b.keys()   # columns may be added (new diagnostics), never lost
        for k in b:
            if k == "wall_time" or a[k] == b[k]:
                continue
            # float32 reductions: XLA's CPU thread pool may sum in another order in another
            # process (seen: train_loss 1 ulp apart), and the suite compiles with other
            # machine-code options than main's recording (tests/conftest.py): a few ulps
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5), k
