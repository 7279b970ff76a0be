"""Time to answer of a small grid: ``ldpsim sweep`` in one process against ``--workers N``.

Workload: the seed-000 client shape (experiments/seed000_converged.toml: MNIST, LeNet-5,
20,000 clients of 3 images, 3 local SGD steps of batch 3 at lr 0.1, FedAvg with server lr 2,
the aggregate noise draw), ``--cells`` cells (ε = 10, 50, 100, ∞, ... at ``--clients``
clients per round), ``--rounds`` rounds each, evaluated at the last round. Each variant is a
whole ``ldpsim sweep`` process into a fresh CSV (start-up, data loading and compilation
included: what a user waits for), timed by wall clock and by the CPU time of the process and
its children. A warm-up sweep first fills the compilation cache (ldpsim keeps it on for the
command line), so every timed run loads its programs from it. Variants alternate, order
flipping every pair; the table gives the medians and the paired ratios, and checks that the
variants wrote the same cells and rows (values equal up to float summation order: a worker
has one host device per core of its share, the single process one per core of the host).

Usage::

    LDPSIM_DATA_DIR=... python benchmarks/sweep_workers.py --workers 2 --pairs 3
    LDPSIM_DATA_DIR=... python benchmarks/sweep_workers.py --workers 2 4 --cells 8 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EPSILONS = ["10", "50", "100", "inf", "20", "200", "5", "500"]
TIMING = ("wall_time", "round_time", "elapsed", "seconds")


def _sweep_command(out: Path, args: argparse.Namespace, workers: int) -> list[str]:
    eps = ",".join(EPSILONS[:args.cells]) if args.cells <= len(EPSILONS) else None
    if eps is None:
        raise SystemExit(f"--cells at most {len(EPSILONS)}")
    return [sys.executable, "-m", "ldpsim", "sweep", "--preset", "none", "--no-plots",
            "--no-progress", "--dataset", "mnist", "--model", "lenet5", "--population", "20000",
            "--epsilon", eps, "--clients", str(args.clients), "--seeds", "0",
            "--rounds", str(args.rounds), "--eval-every", str(args.rounds),
            "--local-steps", "3", "--batch-size", "3", "--client-lr", "0.1",
            "--server-lr", "2", "--noise-mode", "aggregate", "--neighbours", "add-remove",
            "--delta", "1/population", "--workers", str(workers), "--out", str(out)]


def _run(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:])
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _rows(path: Path):
    import pandas as pd

    df = pd.read_csv(path)
    df = df.drop(columns=[c for c in df.columns if c in TIMING or c.endswith("_time")])
    return df.sort_values(["cell", "round"]).reset_index(drop=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[2], help="worker counts against 1")
    p.add_argument("--cells", type=int, default=4)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--pairs", type=int, default=3)
    args = p.parse_args()
    variants = [1] + [w for w in args.workers if w != 1]
    tmp = Path(tempfile.mkdtemp(prefix="sweep_workers_"))
    try:
        print(f"# cores available: {len(os.sched_getaffinity(0))}; cells {args.cells}, m = "
              f"{args.clients}, {args.rounds} rounds each; warm-up (fills the compilation cache)",
              flush=True)
        _run(_sweep_command(tmp / "warm.csv", args, variants[-1]))
        times: dict[int, list[tuple[float, float]]] = {w: [] for w in variants}
        for pair in range(args.pairs):
            order = variants if pair % 2 == 0 else variants[::-1]
            for w in order:
                out = tmp / f"w{w}_{pair}.csv"
                wall, cpu = _run(_sweep_command(out, args, w))
                times[w].append((wall, cpu))
                print(f"pair {pair}: workers {w}: wall {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
        reference = _rows(tmp / "w1_0.csv")
        for w in variants[1:]:
            got = _rows(tmp / f"w{w}_0.csv")
            if got.shape != reference.shape or list(got["cell"]) != list(reference["cell"]):
                raise SystemExit(f"workers {w} wrote other cells or rows than one process")
            diff = {c: float((got[c] - reference[c]).abs().max()) for c in ("accuracy", "loss")}
            print(f"workers {w}: same cells and rows as one process; largest difference "
                  f"(float summation order: one host device per worker, one per core in the "
                  f"single process): accuracy {diff['accuracy']:.2g}, loss {diff['loss']:.2g}")
        print()
        print("| workers | wall s (median) | CPU s (median) | wall 1/N (paired, median [range]) |")
        print("|---|---:|---:|---|")
        for w in variants:
            walls = [t[0] for t in times[w]]
            cpus = [t[1] for t in times[w]]
            if w == 1:
                ratio = ""
            else:
                r = [a[0] / b[0] for a, b in zip(times[1], times[w])]
                ratio = f"**{statistics.median(r):.2f}** [{min(r):.2f}-{max(r):.2f}]"
            print(f"| {w} | {statistics.median(walls):.1f} | {statistics.median(cpus):.1f} | {ratio} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
