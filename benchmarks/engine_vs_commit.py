"""Engine throughput of this tree against an older commit, measured in the same run.

Each repeat runs ``benchmarks/throughput.py --worker engine M CHUNK`` once in this tree and
once in a git worktree of ``--ref`` (old and new interleaved, order alternating), each in
a fresh process, and prints the median client-updates/s of both and their ratio.

    python benchmarks/engine_vs_commit.py --ref 6d71fe9 --m 1000 --pairs 5

The worker of the older commit is the one of that commit (its own round kernel and its
own benchmark code), so the comparison is of the whole round as each commit builds it.

On a shared machine wall-clock rates swing with the other processes' load; the CPU
seconds each worker process used (all its threads: start-up, compilation, the warm-up
and the timed rounds, from ``getrusage(RUSAGE_CHILDREN)``) are printed as well, and with
``--budget`` large enough that every worker runs exactly ``--repeats`` rounds they compare
the same work, whatever the load.

``--cpu-per-update`` (the figure to trust on a loaded machine): each worker also reports
the CPU seconds of its timed rounds alone (``time.process_time`` around each call: every
thread of the process, compilation and start-up excluded), divided by the client-updates
they did. The worker is the tree's own ``throughput.worker`` with its ``_time`` wrapped
by this script (both commits have the same ``_time(fn, repeats, budget)`` helper).

    python benchmarks/engine_vs_commit.py --ref 7de142f --m 1000 --pairs 5 --cpu-per-update
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu_worker(tree: str, m: int, chunk: int, repeats: int, budget: float,
                devices: int) -> dict:
    """``throughput.worker("engine", ...)`` of ``tree`` with the CPU seconds of its timed
    calls recorded (runs in the worker process, ``PYTHONPATH`` = ``tree``)."""
    spec = importlib.util.spec_from_file_location(
        "tree_throughput", Path(tree) / "benchmarks" / "throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    timed_cpu: list[float] = []
    plain_time = mod._time

    def _time(fn, repeats, budget_s):
        def measured():
            c0 = time.process_time()
            out = fn()
            timed_cpu.append(time.process_time() - c0)
            return out
        return plain_time(measured, repeats, budget_s)

    mod._time = _time
    result = mod.worker("engine", m, chunk, repeats, budget, devices)
    timed = timed_cpu[1:]   # the first call is the warm-up
    return {**result, "cpu_ms_per_update": 1e3 * statistics.median(timed) / m,
            "cpu_ms_per_update_all": [1e3 * t / m for t in timed]}


def _worker(tree: Path, m: int, chunk: int, repeats: int, budget: float,
            devices: int | None, cpu_per_update: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    if cpu_per_update:
        cmd = [sys.executable, __file__, "--cpu-worker", str(tree), str(m), str(chunk),
               str(repeats), str(budget), str(devices or 1)]
    else:
        cmd = [sys.executable, str(tree / "benchmarks" / "throughput.py"), "--worker",
               "engine", str(m), str(chunk), "--repeats", str(repeats), "--budget",
               str(budget)]
        if devices:
            cmd += ["--devices", str(devices)]
    cpu0 = _children_cpu()
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"worker failed: {' '.join(cmd)}\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "cpu_s": _children_cpu() - cpu0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", help="older commit to compare against (required)")
    p.add_argument("--m", type=int, default=1000, help="clients per round")
    p.add_argument("--chunk", type=int, default=1, help="chunk size (both trees)")
    p.add_argument("--new-chunk", type=int, default=None,
                   help="chunk size of this tree, if it differs (default: --chunk)")
    p.add_argument("--pairs", type=int, default=5, help="old/new pairs")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per worker")
    p.add_argument("--budget", type=float, default=20.0, help="seconds of repeats per worker")
    p.add_argument("--devices", type=int, default=None, help="host CPU devices (default 1)")
    p.add_argument("--cpu-per-update", action="store_true",
                   help="also report CPU ms per client update of the timed rounds alone")
    p.add_argument("--cpu-worker", nargs=6, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cpu_worker:
        tree, m, chunk, repeats, budget, devices = args.cpu_worker
        print(json.dumps(_cpu_worker(tree, int(m), int(chunk), int(repeats), float(budget),
                                     int(devices))))
        return 0
    new_chunk = args.chunk if args.new_chunk is None else args.new_chunk
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach",
                        str(old), args.ref], check=True, capture_output=True)
        try:
            rates: dict[str, list[float]] = {"old": [], "new": []}
            cpu: dict[str, list[float]] = {"old": [], "new": []}
            per_update: dict[str, list[float]] = {"old": [], "new": []}
            rounds: dict[str, list[int]] = {"old": [], "new": []}
            for i in range(args.pairs):
                order = [("old", old, args.chunk), ("new", ROOT, new_chunk)]
                for name, tree, chunk in (order if i % 2 == 0 else order[::-1]):
                    r = _worker(tree, args.m, chunk, args.repeats, args.budget,
                                args.devices, args.cpu_per_update)
                    rates[name].append(r["rate"])
                    cpu[name].append(r["cpu_s"])
                    if args.cpu_per_update:
                        per_update[name].append(r["cpu_ms_per_update"])
                        print(f"pair {i + 1} {name}: CPU ms per client update "
                              + ", ".join(f"{v:.3f}" for v in r["cpu_ms_per_update_all"]),
                              file=sys.stderr)
                    rounds[name].append(int(r.get("repeats", 0)))
                    print(f"pair {i + 1} {name}: {r['rate']:.1f} client-updates/s, "
                          f"{r['cpu_s']:.1f} CPU s ({r.get('repeats', '?')} timed rounds), "
                          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                           check=False, capture_output=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    load = os.getloadavg()[0]
    print(f"m={args.m} chunk old={args.chunk} new={new_chunk} devices={args.devices or 1} pairs={args.pairs} "
          f"load={load:.2f}")
    print(f"{'tree':6s} {'median/s':>10s} {'min/s':>8s} {'max/s':>8s}")
    for k in ("old", "new"):
        print(f"{k:6s} {med[k]:10.1f} {min(rates[k]):8.1f} {max(rates[k]):8.1f}")
    print(f"new/old = {med['new'] / med['old']:.3f}")
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    same = len(set(rounds["old"] + rounds["new"])) == 1
    print(f"CPU seconds per worker (median; {'same' if same else 'DIFFERENT'} number of "
          f"timed rounds): old {cmed['old']:.1f}, new {cmed['new']:.1f}, "
          f"new/old = {cmed['new'] / cmed['old']:.3f}")
    if args.cpu_per_update:
        pmed = {k: statistics.median(v) for k, v in per_update.items()}
        print(f"CPU ms per client update, timed rounds only (median of workers' medians): "
              f"old {pmed['old']:.3f} [{min(per_update['old']):.3f}-"
              f"{max(per_update['old']):.3f}], new {pmed['new']:.3f} "
              f"[{min(per_update['new']):.3f}-{max(per_update['new']):.3f}], "
              f"old/new = {pmed['old'] / pmed['new']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
