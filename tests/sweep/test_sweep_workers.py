"""Sweeps in worker processes (``run_sweep(workers=N)``, ``ldpsim sweep --workers``): the same
rows as one process, errors and interrupts that stop every worker and keep finished cells, and
the CPU shares the workers are pinned to."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim._src.sweep.parallel import available_cpus, cpu_shares
from ldpsim.cli import main
from ldpsim.sweep import run_sweep, sidecar_path
from sweep_fakes import FakeRunner, small_config, wait_for_cells

REPO = Path(__file__).resolve().parents[2]
TWO_CORES = len(available_cpus()) >= 2
needs_two = pytest.mark.skipif(not TWO_CORES, reason="needs two CPU cores for two workers")


def _rows(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path).drop(columns=["wall_time"])
    return df.sort_values(["cell", "round"]).reset_index(drop=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split(")")[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def test_cpu_shares_are_disjoint_contiguous_and_even():
    assert cpu_shares(1, [0, 1, 2]) == [(0, 1, 2)]
    assert cpu_shares(2, [0, 1, 2, 3, 4]) == [(0, 1, 2), (3, 4)]
    assert cpu_shares(3, [4, 5, 6, 7, 8, 9, 10]) == [(4, 5, 6), (7, 8), (9, 10)]
    shares = cpu_shares(4, list(range(10)))
    assert sorted(c for s in shares for c in s) == list(range(10))
    assert {len(s) for s in shares} == {2, 3}
    with pytest.raises(LdpsimError, match="exceeds the 2 CPU core"):
        cpu_shares(3, [0, 1])
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(LdpsimError, match="positive integer"):
            cpu_shares(bad, [0, 1])


@needs_two
def test_workers_write_the_rows_of_one_process(tmp_path):
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    run_sweep(small_config(), one, runner=FakeRunner(), progress=False)
    pids = tmp_path / "pids"
    pids.mkdir()
    os.environ["SWEEP_FAKES_PIDS"] = str(pids)
    try:
        s = run_sweep(small_config(), two, runner=FakeRunner(), progress=False, workers=2)
    finally:
        del os.environ["SWEEP_FAKES_PIDS"]
    assert s.ran == 27 and s.skipped == 0 and s.rows == 27 * 4
    pd.testing.assert_frame_equal(_rows(two), _rows(one))
    workers = {int(p.name) for p in pids.iterdir()}
    assert len(workers) == 2 and os.getpid() not in workers   # two processes did the work
    assert not any(_alive(p) for p in workers)                 # and are gone


@needs_two
@pytest.mark.slow
def test_a_failing_cell_stops_the_sweep_and_keeps_finished_cells(tmp_path):
    out = tmp_path / "out.csv"
    cells = small_config().cells()
    bad = cells[10].key
    with pytest.raises(LdpsimError, match="failed on purpose"):
        run_sweep(small_config(), out, runner=FakeRunner(sleep=0.01, fail_on=bad), progress=False,
                  workers=2)
    done = json.loads(sidecar_path(out).read_text())["done"]
    assert bad not in done and len(done) < 27
    s = run_sweep(small_config(), out, runner=FakeRunner(), progress=False, workers=2)
    assert s.skipped == len(done) and s.ran == 27 - len(done)
    full = tmp_path / "full.csv"
    run_sweep(small_config(), full, runner=FakeRunner(), progress=False)
    pd.testing.assert_frame_equal(_rows(out), _rows(full))


def test_workers_refuse_bad_counts_and_vmap_epsilon(tmp_path):
    out = tmp_path / "out.csv"
    with pytest.raises(LdpsimError, match="exceeds"):
        run_sweep(small_config(), out, runner=FakeRunner(), progress=False,
                  workers=len(available_cpus()) + 1)
    if TWO_CORES:
        with pytest.raises(LdpsimError, match="vmap_epsilon"):
            run_sweep(small_config(), out, runner=FakeRunner(), progress=False, workers=2,
                      vmap_epsilon=True)
    assert not out.exists()


@needs_two
@pytest.mark.parametrize("how", [signal.SIGINT,
                                 pytest.param(signal.SIGKILL, marks=pytest.mark.slow)])
def test_an_interrupted_parent_leaves_no_worker_and_resumes(tmp_path, how):
    out, pids = tmp_path / "out.csv", tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
           "SWEEP_FAKES_PIDS": str(pids)}
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "sweep_fakes.py"), str(out),
                             "--sleep", "0.05", "--workers", "2"], env=env,
                            stderr=subprocess.DEVNULL)
    try:
        if not wait_for_cells(out, 4, ready=lambda: len(list(pids.iterdir())) == 2):
            pytest.fail("the sweep subprocess made no progress")   # both workers busy, 4 cells
        children = _children(proc.pid)   # the workers (and multiprocessing's helpers)
        proc.send_signal(how)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0
    workers = {int(p.name) for p in pids.iterdir()}
    assert len(workers) == 2 and workers <= children
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in children), "a worker outlived its parent"
    done = len(json.loads(sidecar_path(out).read_text())["done"])
    assert 4 <= done < 27
    s = run_sweep(small_config(), out, runner=FakeRunner(), progress=False)
    assert s.skipped == done and s.ran == 27 - done
    full = tmp_path / "full.csv"
    run_sweep(small_config(), full, runner=FakeRunner(), progress=False)
    pd.testing.assert_frame_equal(_rows(out), _rows(full))


@needs_two
@pytest.mark.slow
def test_cli_sweep_workers_runs_the_engine_in_two_processes(tmp_path, capsys):
    args = ["sweep", "--preset", "none", "--dataset", "synthetic", "--model", "logreg",
            "--population", "200", "--rounds", "2", "--epsilon", "1,inf", "--clients", "10",
            "--no-progress", "--no-plots"]
    assert main(args + ["--out", str(tmp_path / "one.csv")]) == 0
    assert main(args + ["--out", str(tmp_path / "two.csv"), "--workers", "2"]) == 0
    assert "ran 2 cells" in capsys.readouterr().out
    # equal up to float summation order (a worker has one host device per core of its share)
    pd.testing.assert_frame_equal(_rows(tmp_path / "two.csv"), _rows(tmp_path / "one.csv"),
                                  check_exact=False, rtol=1e-4)


def test_cli_sweep_workers_errors(tmp_path, capsys):
    out = str(tmp_path / "x.csv")
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--workers", "0", "--out", out])
    assert exit_.value.code == 2
    assert "--workers: expected a positive integer" in capsys.readouterr().err
    too_many = str(len(available_cpus()) + 1)
    assert main(["sweep", "--workers", too_many, "--out", out]) == 2
    assert f"--workers {too_many}: workers = {too_many} exceeds" in capsys.readouterr().err
    if TWO_CORES:
        assert main(["sweep", "--workers", "2", "--vmap-epsilon", "--out", out]) == 2
        assert "--vmap-epsilon" in capsys.readouterr().err
    assert not Path(out).exists()


def test_a_worker_asks_for_one_host_device_per_core_of_its_share(monkeypatch):
    from ldpsim._src.sweep.parallel import _host_devices

    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_foo=1 --xla_force_host_platform_device_count=16")
    _host_devices(3)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=3"
    _host_devices(1)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_foo=1"
    _host_devices(64)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8"
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    _host_devices(1)
    assert "XLA_FLAGS" not in os.environ


@needs_two
def test_fewer_cells_than_workers_start_one_worker_per_cell(tmp_path):
    config = small_config(epsilon=[1], clients_per_round=[10], seed=[0])   # one cell
    pids = tmp_path / "pids"
    pids.mkdir()
    os.environ["SWEEP_FAKES_PIDS"] = str(pids)
    try:
        s = run_sweep(config, tmp_path / "out.csv", runner=FakeRunner(), progress=False, workers=2)
    finally:
        del os.environ["SWEEP_FAKES_PIDS"]
    assert s.ran == 1 and len(list(pids.iterdir())) == 1


@needs_two
def test_cli_sweep_workers_refuse_more_devices_than_a_worker_has(tmp_path, capsys):
    out = str(tmp_path / "x.csv")
    per_worker = min(len(available_cpus()) // 2, 8)
    asked = str(per_worker + 1)
    assert main(["sweep", "--workers", "2", "--devices", asked, "--out", out]) == 2
    assert (f"--devices {asked}: a worker of --workers 2 has {per_worker} host device"
            in capsys.readouterr().err)
    assert not Path(out).exists()


@needs_two
def test_an_unpicklable_runner_is_refused_before_any_worker_starts(tmp_path):
    def runner(cells, on_round):   # a closure: cannot be pickled
        yield from FakeRunner()(cells, on_round)

    with pytest.raises(LdpsimError, match="cannot be pickled"):
        run_sweep(small_config(), tmp_path / "out.csv", runner=runner, progress=False, workers=2)
