"""A fast, deterministic stand-in for the engine, for sweep and plot tests.

``FakeRunner`` yields plausible rows (accuracy falling with the aggregated noise
σ(ε)·√(d/m)) that depend only on the cell's parameters, so an interrupted-then-resumed
sweep must produce exactly the rows of an uninterrupted one.

Run as a script, it runs a small sweep into ``OUT`` (used by the kill-and-resume test)::

    python tests/sweep_fakes.py OUT.csv [--sleep SECONDS] [--workers N]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldpsim._src._checks import LdpsimError  # noqa: E402
from ldpsim._src.privacy.noise.calibration import analytic_gaussian_sigma  # noqa: E402
from ldpsim.sweep import SweepConfig, run_sweep  # noqa: E402

DIM = 1000


def small_config(**grid) -> SweepConfig:
    return SweepConfig(
        base={"dataset": "synthetic", "model": "mlp", "rounds": 4, "delta": 1e-5, "clip": 1.0},
        grid={"epsilon": [1, 10, "inf"], "clients_per_round": [10, 100, 1000], "seed": [0, 1, 2], **grid},
    )


class FakeRunner:
    """Deterministic rows from the cell parameters; optional sleep per round."""

    def __init__(self, sleep: float = 0.0, fail_on: str | None = None) -> None:
        self.sleep = sleep
        self.fail_on = fail_on
        self.calls: list[list[str]] = []

    def __call__(self, cells, on_round):
        self.calls.append([c.key for c in cells])
        pids = os.environ.get("SWEEP_FAKES_PIDS")   # a folder: record the process that runs
        if pids:
            Path(pids, str(os.getpid())).touch()
        for cell in cells:
            if self.fail_on is not None and cell.key == self.fail_on:
                raise LdpsimError(f"cell {cell.key} failed on purpose")
            p = cell.params
            eps, m, seed = p["epsilon"], p["clients_per_round"], p["seed"]
            sigma = 0.0 if math.isinf(eps) else analytic_gaussian_sigma(eps, p["delta"], 2 * p["clip"])
            rng = np.random.default_rng(int(hashlib.sha256(cell.key.encode()).hexdigest()[:8], 16))
            rows = []
            for r in range(1, p["rounds"] + 1):
                if self.sleep:
                    time.sleep(self.sleep)
                noise = sigma * math.sqrt(DIM / m) * (1 + 0.02 * rng.standard_normal())
                signal = 0.5 / math.sqrt(r)
                acc = 0.9 * (1 - math.exp(-r / 2)) / (1 + 0.3 * noise) + 0.01 * rng.standard_normal()
                rows.append({
                    "dataset": p["dataset"], "model": p["model"], "mechanism": p.get("mechanism", "gaussian"),
                    "epsilon": eps, "delta": p["delta"], "clip": p["clip"], "clients_per_round": m,
                    "population": 1000, "round": r, "seed": seed, "accuracy": acc, "loss": 2.3 * (1 - acc),
                    "noise_norm": noise, "signal_norm": signal, "snr": signal / noise if noise else math.inf,
                    "theory_noise_norm": sigma * math.sqrt(DIM / m), "clip_fraction": 1.0,
                    "wall_time": time.perf_counter(),
                })
                on_round()
            yield cell, rows


def wait_for_cells(out, count: int, *, ready=lambda: True, timeout: float = 120.0) -> bool:
    """Poll a running sweep's sidecar until ``count`` cells are finished and ``ready()`` holds;
    False after ``timeout`` seconds (for the tests that interrupt a sweep subprocess)."""
    import json

    from ldpsim.sweep import sidecar_path

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = sidecar_path(out)
        if meta.exists() and ready():
            try:
                if len(json.loads(meta.read_text())["done"]) >= count:
                    return True
            except ValueError:   # caught mid-write
                pass
        time.sleep(0.02)
    return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    run_sweep(small_config(), args.out, runner=FakeRunner(args.sleep), progress=False,
              workers=args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
