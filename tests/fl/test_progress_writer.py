"""The driver's hooks: a callback that stops the run, progress on stderr, the optional
TensorBoard writer, ``ldpsim run --checkpoint-dir/--tensorboard``, and flat memory over
1,000 rounds."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from ldpsim import LdpsimError
from ldpsim.cli import main
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.simulate import simulate


def _config(**kw) -> SimulationConfig:
    base = dict(model="logreg", population=40, clients_per_round=5, rounds=6, eval_every=2,
                epsilon=10.0, delta=1e-3, seed=2)
    base.update(kw)
    return SimulationConfig(**base)


def test_callback_returning_false_stops_the_run():
    seen = []

    def stop_at_4(row):
        seen.append(row["round"])
        return row["round"] < 4
    history = simulate(_config(), callback=stop_at_4)
    assert [r["round"] for r in history] == [2, 4] == seen
    # Any other return value (None included) goes on.
    assert [r["round"] for r in simulate(_config(), callback=lambda r: 0)] == [2, 4, 6]


def test_progress_shows_each_phase_on_stderr(capsys):
    simulate(_config(), progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    phases = ["ldpsim: loading data (synthetic)...", "ldpsim: building the model",
              "rounds (compiling)", "6/6"]
    assert all(p in err for p in phases), err
    assert [err.index(p) for p in phases] == sorted(err.index(p) for p in phases)


def _read_scalars(folder) -> dict[str, dict[int, float]]:
    """Scalars of the TFRecord event files in ``folder`` (length, crc, event, crc)."""
    from tensorboardX.proto import event_pb2

    out: dict[str, dict[int, float]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                out.setdefault(value.tag, {})[event.step] = value.simple_value
    return out


def test_tensorboard_callback_writes_the_numeric_columns(tmp_path):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed")
    from ldpsim._src.fl.writers import tensorboard_callback

    with tensorboard_callback(tmp_path / "tb") as board:
        history = simulate(_config(), callback=board)
    scalars = _read_scalars(tmp_path / "tb")
    assert set(scalars["accuracy"]) == {2, 4, 6}
    for row in history:
        assert scalars["accuracy"][row["round"]] == pytest.approx(row["accuracy"])
        assert scalars["epsilon_spent"][row["round"]] == pytest.approx(row["epsilon_spent"])
    assert "dataset" not in scalars and "round" not in scalars   # text and the step: no


def test_tensorboard_callback_without_the_package_names_the_extra(monkeypatch, tmp_path):
    from ldpsim._src.fl.writers import tensorboard_callback

    monkeypatch.setitem(sys.modules, "tensorboardX", None)   # import fails
    with pytest.raises(LdpsimError, match=r"ldpsim\[tensorboard\]"):
        tensorboard_callback(tmp_path)


ARGS = ["run", "--model", "logreg", "--population", "40", "--clients-per-round", "5",
        "--rounds", "4", "--epsilon", "10", "--delta", "1e-3", "--no-progress"]


def test_cli_checkpoint_resume_and_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed")
    whole, part = tmp_path / "whole.csv", tmp_path / "part.csv"
    assert main(ARGS + ["--out", str(whole)]) == 0
    resumable = ARGS + ["--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "3",
                        "--tensorboard", str(tmp_path / "tb"), "--out", str(part)]
    assert main(resumable) == 0
    # The same command again continues from the final checkpoint (nothing left to run)
    # and writes the whole history again.
    assert main(resumable) == 0
    pd.testing.assert_frame_equal(pd.read_csv(whole).drop(columns="wall_time"),
                                  pd.read_csv(part).drop(columns="wall_time"))
    assert set(_read_scalars(tmp_path / "tb")["accuracy"]) == {1, 2, 3, 4}
    capsys.readouterr()
    # Other settings with that checkpoint: one line naming the difference.
    assert main([a if a != "4" else "5" for a in resumable]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another configuration (rounds 4 there, 5 here)" in err[0]
    assert main(ARGS + ["--checkpoint-dir", str(tmp_path / "c"), "--checkpoint-every",
                        "0"]) == 2


_MEMORY_SCRIPT = textwrap.dedent("""
    import json
    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.fl.simulate import simulate_lanes

    def peak_rss_mib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024

    marks, seen, peak = {50, 1000}, [0], {}

    def on_round():
        seen[0] += 1
        if seen[0] in marks:
            peak[seen[0]] = peak_rss_mib()

    config = SimulationConfig(model="logreg", population=40, clients_per_round=5,
                              rounds=1000, eval_every=100000, epsilon=10, delta=1e-3)
    simulate_lanes([config], on_round=on_round)
    print(json.dumps(peak))
""")


@pytest.mark.slow   # 12 s alone, up to ~30 s on a loaded 2-core machine
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_driver_memory_is_flat_over_1000_rounds():
    """No leak in the driver: the peak RSS after 1,000 rounds is within a few MiB of that
    after 50 (measured: 495.5 MiB after 50 rounds, 495.7 MiB after 1,000)."""
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True,
                         text=True, timeout=300, check=True)
    peak = json.loads(out.stdout.strip().splitlines()[-1])
    assert peak["1000"] - peak["50"] < 8.0, peak
