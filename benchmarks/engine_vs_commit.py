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
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _worker(tree: Path, m: int, chunk: int, repeats: int, budget: float,
            devices: int | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    cmd = [sys.executable, str(tree / "benchmarks" / "throughput.py"), "--worker", "engine",
           str(m), str(chunk), "--repeats", str(repeats), "--budget", str(budget)]
    if devices:
        cmd += ["--devices", str(devices)]
    cpu0 = _children_cpu()
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "cpu_s": _children_cpu() - cpu0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", required=True, help="older commit to compare against")
    p.add_argument("--m", type=int, default=1000, help="clients per round")
    p.add_argument("--chunk", type=int, default=1)
    p.add_argument("--pairs", type=int, default=5, help="old/new pairs")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per worker")
    p.add_argument("--budget", type=float, default=20.0, help="seconds of repeats per worker")
    p.add_argument("--devices", type=int, default=None, help="host CPU devices (default 1)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach",
                        str(old), args.ref], check=True, capture_output=True)
        try:
            rates: dict[str, list[float]] = {"old": [], "new": []}
            cpu: dict[str, list[float]] = {"old": [], "new": []}
            rounds: dict[str, list[int]] = {"old": [], "new": []}
            for i in range(args.pairs):
                order = [("old", old), ("new", ROOT)]
                for name, tree in (order if i % 2 == 0 else order[::-1]):
                    r = _worker(tree, args.m, args.chunk, args.repeats, args.budget,
                                args.devices)
                    rates[name].append(r["rate"])
                    cpu[name].append(r["cpu_s"])
                    rounds[name].append(int(r.get("repeats", 0)))
                    print(f"pair {i + 1} {name}: {r['rate']:.1f} client-updates/s, "
                          f"{r['cpu_s']:.1f} CPU s ({r.get('repeats', '?')} timed rounds), "
                          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                           check=False, capture_output=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    load = os.getloadavg()[0]
    print(f"m={args.m} chunk={args.chunk} devices={args.devices or 1} pairs={args.pairs} "
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
