"""The engine's secure-aggregation round as the experiment runs it, this tree against a commit.

Workload: one cell of ``experiments/distributed_discrete_lenet5.py`` (MNIST, LeNet-5, 20,000
clients of 3 images, 3 local SGD steps of batch 3, Poisson cohorts of expected size ``--m``,
``--mechanism`` at ``--bits`` bits and whole-run ε = 8, or ``continuous`` for the distributed
Gaussian reference), run through ``ldpsim.simulate`` exactly as the driver runs it (the
driver's own ``solve`` and ``engine_config``), for ``--rounds`` rounds evaluated every round.

Each tree runs in its own fresh worker process (``PYTHONPATH`` = that tree; the older one
from a temporary ``git worktree``), the two alternating in order over ``--pairs``; a worker
reports the process CPU seconds (all threads) of each round after the first (the first
compiles), evaluation included. The table gives the median per tree and the median of the
paired old/new ratios.

    LDPSIM_DATA_DIR=... python benchmarks/discrete_engine.py --ref e5597ed
    LDPSIM_DATA_DIR=... python benchmarks/discrete_engine.py --ref e5597ed --mechanism skellam

``--layouts`` instead runs this tree's cell in the ways a grid can use the host's cores, each
in fresh processes (a warm-up process first fills the compilation cache): one process on one
host device (XLA's default, what a script gets unless it calls ``ldpsim.use_host_devices``),
one process on one host device per core, and two concurrent processes, each on one device,
unpinned or pinned to one core each (``taskset``). Rounds per second counts every process's
rounds over the wall time (two processes: twice the rounds)::

    LDPSIM_DATA_DIR=... python benchmarks/discrete_engine.py --layouts --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKER = r"""
import dataclasses, importlib.util, json, os, sys, time
tree, mech, m, bits, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
spec = importlib.util.spec_from_file_location(
    "dd", os.path.join(tree, "experiments", "distributed_discrete_lenet5.py"))
dd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dd)
from ldpsim import simulate
sp = dd.load_spec()
cell = dict(mechanism=mech, target="whole_run_8", clients_per_round=m, bits=bits, seed=0)
solved = dd.solve(cell, sp)
cfg = dataclasses.replace(dd.engine_config(cell, solved, sp), rounds=rounds + 1, eval_every=1)
marks, walls = [], []
t0, w0 = time.process_time(), time.perf_counter()
simulate(cfg, callback=lambda r: (marks.append(time.process_time() - t0),
                                  walls.append(time.perf_counter() - w0)))
per = [b - a for a, b in zip(marks, marks[1:])]
wall = [b - a for a, b in zip(walls, walls[1:])]
print("RESULT " + json.dumps({"first": marks[0], "rounds": per, "wall": wall}), flush=True)
"""


def _command(tree: str, args) -> list[str]:
    return [sys.executable, "-c", WORKER, tree, args.mechanism, str(args.m), str(args.bits),
            str(args.rounds)]


def _result(stdout: str) -> dict:
    line = [s for s in stdout.splitlines() if s.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _worker(tree: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(_command(tree, args), env=env, capture_output=True, text=True,
                         check=True)
    return _result(out.stdout)


def _layouts(args) -> int:
    """This tree's cell in four process layouts (module docstring)."""
    cores = sorted(os.sched_getaffinity(0))
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                     if not f.startswith("--xla_force_host_platform_device_count"))

    def env(devices: int) -> dict:
        extra = f" --xla_force_host_platform_device_count={devices}" if devices > 1 else ""
        return dict(os.environ, PYTHONPATH=ROOT, XLA_FLAGS=(flags + extra).strip())

    def run(procs: list[tuple[list[str], dict]]) -> list[dict]:
        started = [subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, text=True)
                   for cmd, e in procs]
        outs = [p.communicate()[0] for p in started]
        if any(p.returncode for p in started):
            raise SystemExit("a worker failed")
        return [_result(o) for o in outs]

    cmd = _command(ROOT, args)
    layouts = [
        ("1 process, 1 host device (XLA's default)", [(cmd, env(1))]),
        (f"1 process, {len(cores)} host devices (ldpsim.use_host_devices)",
         [(cmd, env(len(cores)))]),
        ("2 processes at once, 1 device each, unpinned", [(cmd, env(1)), (cmd, env(1))]),
        ("2 processes at once, 1 device each, pinned to one core each",
         [(["taskset", "-c", str(cores[0])] + cmd, env(1)),
          (["taskset", "-c", str(cores[-1])] + cmd, env(1))]),
    ]
    print("warm-up (fills the compilation cache)", flush=True)
    run([(cmd, env(1))])
    print(f"\n{args.mechanism}, b = {args.bits}, m = {args.m}, whole-run eps 8, {args.rounds} "
          f"timed rounds per process, {len(cores)} cores\n")
    print("| layout | CPU-s per round (per process) | wall s per round (per process) "
          "| rounds per second, all processes |")
    print("|---|---|---|---:|")
    for label, procs in layouts:
        res = run(procs)
        cpu = [statistics.median(r["rounds"]) for r in res]
        wall = [statistics.median(r["wall"]) for r in res]
        rate = sum(1 / w for w in wall)
        print(f"| {label} | {', '.join(f'{c:.2f}' for c in cpu)} | "
              f"{', '.join(f'{w:.2f}' for w in wall)} | {rate:.3f} |", flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", help="older commit to compare against")
    p.add_argument("--layouts", action="store_true",
                   help="this tree in four process layouts instead (module docstring)")
    p.add_argument("--mechanism", default="ddg", choices=("ddg", "skellam", "continuous"))
    p.add_argument("--m", type=int, default=1000, help="expected clients per round")
    p.add_argument("--bits", type=int, default=16)
    p.add_argument("--rounds", type=int, default=4, help="timed rounds per worker")
    p.add_argument("--pairs", type=int, default=2)
    args = p.parse_args(argv)
    if args.mechanism == "continuous":
        args.bits = 0
    if not os.environ.get("LDPSIM_DATA_DIR"):
        p.error("set LDPSIM_DATA_DIR to the folder holding MNIST")
    if args.layouts:
        return _layouts(args)
    if not args.ref:
        p.error("--ref COMMIT (or --layouts) is required")
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = os.path.join(tmp, "ref")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", old_tree,
                        args.ref], check=True)
        try:
            res = {"old": [], "new": []}
            ratios, wall_ratios = [], []
            for i in range(args.pairs):
                order = [("old", old_tree), ("new", ROOT)]
                if i % 2:
                    order.reverse()
                got, wall = {}, {}
                for name, tree in order:
                    r = _worker(tree, args)
                    got[name] = statistics.median(r["rounds"])
                    wall[name] = statistics.median(r["wall"])
                    res[name].append(r)
                    print(f"pair {i} {name}: CPU-s per round {[round(x, 2) for x in r['rounds']]}"
                          f", wall {[round(x, 2) for x in r['wall']]} (first round CPU-s "
                          f"{r['first']:.1f})", flush=True)
                ratios.append(got["old"] / got["new"])
                wall_ratios.append(wall["old"] / wall["new"])
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old_tree],
                           check=False)
    print(f"\n{args.mechanism}, b = {args.bits}, m = {args.m}, whole-run eps 8, "
          f"{args.rounds} rounds x {args.pairs} pairs\n")
    print("| tree | CPU-s per round (median of workers' medians) | old/new CPU (paired) "
          "| old/new wall (paired) |")
    print("|---|---|---|---|")
    for name, label in (("old", args.ref), ("new", "this tree")):
        med = statistics.median(statistics.median(r["rounds"]) for r in res[name])
        extra = (f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f}) | "
                 f"{statistics.median(wall_ratios):.2f} ({min(wall_ratios):.2f}-"
                 f"{max(wall_ratios):.2f})" if name == "new" else " | ")
        print(f"| {label} | {med:.2f} | {extra} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
