"""`data_source` reaches the loader (TFDS path selectable from the engine and the CLI)."""

import pytest

from ldpsim import LdpsimError
from ldpsim._src.data import registry as data_registry
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig


def test_bad_data_source_is_rejected():
    with pytest.raises(LdpsimError, match="data_source"):
        SimulationConfig(data_source="hdf5")


@pytest.mark.parametrize("source,expected", [("auto", None), ("idx", "idx"), ("tfds", "tfds")])
def test_build_data_passes_source_to_the_loader(monkeypatch, source, expected):
    seen = {}

    class _Stop(Exception):
        pass

    def fake_load(name, data_dir=None, **kwargs):
        seen.update(name=name, data_dir=data_dir, **kwargs)
        raise _Stop

    monkeypatch.setattr(data_registry, "load_dataset", fake_load)
    config = SimulationConfig(dataset="mnist", data_dir="/some/dir", data_source=source,
                              population=10, clients_per_round=2)
    with pytest.raises(_Stop):
        sim.build_data(config)
    assert seen["name"] == "mnist" and seen["data_dir"] == "/some/dir"
    assert seen.get("source") == expected


def test_cli_lists_data_source(capsys):
    from ldpsim.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--data-source" in capsys.readouterr().out
