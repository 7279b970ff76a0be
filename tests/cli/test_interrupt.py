"""SIGINT / SIGTERM during ``ldpsim sweep`` and ``ldpsim run``.

The end-to-end tests start the command in its own process group (what a terminal's Ctrl-C
signals) and check: exit status 130 / 143, one last line saying what was saved and how to
go on, a CSV of whole rows only, the manifest's status, and that re-running the sweep
finishes with rows identical to an uninterrupted sweep (wall_time aside). The first tests
check the mechanism in-process: an interrupt is held during a critical section, while JAX
compiles (the cause of the old segfault: an abandoned compilation still running when the
interpreter exits), and re-delivered when Python swallows it in a gc callback.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

from ldpsim._src import _interrupt

# --------------------------------------------------------------------------- in-process


def _kill_self_later(seconds: float, signum: int = signal.SIGINT) -> threading.Timer:
    main = threading.main_thread().ident
    timer = threading.Timer(seconds, lambda: signal.pthread_kill(main, signum))
    timer.daemon = True
    timer.start()
    return timer


def test_critical_section_holds_the_interrupt_until_it_ends():
    restore = _interrupt.install()
    try:
        done = []
        with pytest.raises(KeyboardInterrupt):
            with _interrupt.critical():
                signal.raise_signal(signal.SIGINT)
                for _ in range(1000):   # the handler runs between bytecodes: held here
                    sum(range(10))
                done.append(True)
        assert done == [True]
        assert _interrupt.received() == signal.SIGINT
        assert _interrupt.exit_status() == 130
    finally:
        restore()


def test_sigterm_is_a_keyboard_interrupt_with_status_143():
    restore = _interrupt.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
            time.sleep(5)
        assert _interrupt.exit_status() == 143
        assert "interrupted by SIGTERM" in _interrupt.message("run")
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is not _interrupt._handler


def test_interrupt_swallowed_by_a_gc_callback_is_delivered_again():
    restore = _interrupt.install()
    fired = []

    def callback(phase, info):  # noqa: ARG001
        if phase == "start" and not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGINT)
            for _ in range(1000):   # KeyboardInterrupt raised here is "ignored" by Python
                sum(range(10))

    gc.callbacks.append(callback)
    try:
        with pytest.raises(KeyboardInterrupt):
            gc.collect()
            gc.callbacks.remove(callback)
            time.sleep(5)           # re-delivered by the watcher within ~0.05 s
        assert fired
    finally:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
        restore()


def test_interrupt_swallowed_by_a_bare_except_is_delivered_again():
    """JAX has bare ``except:`` clauses (one right after a compilation returns)."""
    restore = _interrupt.install()
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            try:
                signal.raise_signal(signal.SIGINT)
                for _ in range(1000):
                    sum(range(10))
            except:  # noqa: E722 - what the test is about
                pass
            time.sleep(10)
        assert time.monotonic() - start < 5
    finally:
        restore()


def test_interrupt_waits_for_a_jax_compilation_to_return():
    """The segfault's cause: a KeyboardInterrupt raised inside jaxlib's compile wait left
    the compilation running in a client thread while the interpreter shut down."""
    import jax
    import jax.numpy as jnp

    def f(x):
        for i in range(25):
            x = jnp.sin(x) @ x + i
        return x

    x = jnp.ones((4, 4))
    main = threading.main_thread().ident
    sent = []

    def signal_while_compiling() -> None:   # SIGINT once the main thread is in XLA's compile
        end = time.monotonic() + 60
        while time.monotonic() < end and not sent:
            frame = sys._current_frames().get(main)
            if _interrupt._in_compile(frame):
                sent.append(True)
                signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.001)

    restore = _interrupt.install()
    try:
        threading.Thread(target=signal_while_compiling, daemon=True).start()
        with pytest.raises(KeyboardInterrupt) as info:
            jax.jit(f).lower(x).compile()
            time.sleep(5)
        assert sent, "the compilation ended before the signal could be sent"
        names = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
        assert "backend_compile_and_load" not in names and "backend_compile" not in names
    finally:
        sent.append(True)
        restore()


# --------------------------------------------------------------------------- end to end

SWEEP = ["sweep", "--preset", "none", "--dataset", "synthetic", "--model", "mlp", "--population", "40",
         "--rounds", "3", "--epsilon", "1", "--clients", "4,6,8", "--seeds", "0",
         "--no-progress"]
RUN = ["run", "--dataset", "synthetic", "--model", "mlp", "--population", "40",
       "--clients-per-round", "4", "--rounds", "100000", "--epsilon", "4", "--no-progress"]


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ldpsim", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"command did not end; stderr:\n{err}")
    return proc.returncode, err


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"command ended ({proc.returncode}) before the signal; stderr:\n"
                        f"{proc.stderr.read()}")
        time.sleep(0.05)
    pytest.fail("timed out waiting for the command to make progress")


def _whole_rows(path: Path) -> tuple[list[str], list[dict]]:
    """The CSV's header and rows, asserting that every row is complete."""
    text = path.read_text()
    assert text.endswith("\n"), "the last row is cut"
    rows = list(csv.reader(io.StringIO(text, newline="")))
    header = rows[0]
    assert all(len(r) == len(header) for r in rows[1:]), "a row has a missing field"
    return header, [dict(zip(header, r)) for r in rows[1:]]


def _done(path: Path) -> list[str]:
    try:
        return json.loads(path.with_suffix(".sweep.json").read_text())["done"]
    except (OSError, ValueError, KeyError):
        return []


def _comparable(rows: list[dict]) -> list[dict]:
    out = [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]
    return sorted(out, key=lambda r: (r["cell"], int(r["round"])))


@pytest.mark.slow
def test_sigint_to_a_sweep_then_resume_equals_an_uninterrupted_sweep(tmp_path):
    reference = tmp_path / "reference.csv"
    code, err = _finish(_start([*SWEEP, "--out", str(reference)], tmp_path))
    assert code == 0, err

    out = tmp_path / "sweep.csv"
    proc = _start([*SWEEP, "--out", str(out)], tmp_path)
    # After the first cell, the next one compiles (another cohort size): Ctrl-C lands there.
    _wait_for(lambda: len(_done(out)) >= 1, proc)
    os.killpg(proc.pid, signal.SIGINT)
    code, err = _finish(proc)
    assert code == 130, err
    assert "Segmentation fault" not in err and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ldpsim sweep: interrupted by SIGINT; finished cells (if any) are in")
    assert "run the same command again to resume" in last
    _, rows = _whole_rows(out)
    done = _done(out)
    assert 1 <= len(done) < 3
    assert {r["cell"] for r in rows} == set(done)
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["ended_at"]
    assert set(manifest["privacy"]["cells"]) == set(done)

    code, err = _finish(_start([*SWEEP, "--out", str(out)], tmp_path))
    assert code == 0, err
    _, resumed = _whole_rows(out)
    _, expected = _whole_rows(reference)
    assert _comparable(resumed) == _comparable(expected)
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["status"] == "finished"
    assert [s["status"] for s in manifest["earlier_sessions"]] == ["interrupted"]
    assert len(manifest["privacy"]["cells"]) == 3


@pytest.mark.slow
def test_sigterm_to_a_run(tmp_path):
    out = tmp_path / "run.csv"
    proc = _start([*RUN, "--out", str(out)], tmp_path)
    _wait_for(lambda: out.is_file() and out.read_text().count("\n") >= 3, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    code, err = _finish(proc)
    assert code == 143, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ldpsim run: interrupted by SIGTERM; ")
    assert f"saved in {out}" in last and "--overwrite" in last
    header, rows = _whole_rows(out)
    assert len(rows) >= 2 and "accuracy" in header
    assert [int(r["round"]) for r in rows] == list(range(1, len(rows) + 1))
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["results"]["rows"] == len(rows)
    assert manifest["privacy"]["epsilon"] == 4
