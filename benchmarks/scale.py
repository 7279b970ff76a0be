"""Scale: memory set by the chunk, time linear in n.

Two workloads, every configuration in a FRESH Python subprocess so that its peak
resident memory (``VmHWM`` from ``/proc/self/status``, read by the child at the end;
``ru_maxrss`` where /proc is missing) belongs to that configuration alone:

* ``noise``: ``ldpsim noise --dim D --clients N --trials T --draw MODE`` (the CLI's own
  ``main``), for each n in ``--ns`` and each MODE in ``--modes``:

  - ``per-client``: every client's d-dimensional noise is drawn for real
    (:func:`ldpsim._src.privacy.noise.mechanisms.gaussian_noise`, key ``fold_in(root, client)``),
    plus its random direction, in chunks of clients inside one ``fori_loop``: O(n·d) time,
    O(chunk·d) memory;
  - ``aggregate``: the mean noise is drawn from its exact distribution N(0, σ²/n·I): O(d).

  The child first compiles the trial at a small n (one compiled program serves every n:
  n is traced), then times the CLI call; ``wall s`` is the median over ``--repeats``
  timed calls (one call when n > ``--max-repeat-n``).  ``x vs first`` is the time ratio
  to the smallest n of the same mode and ``linearity`` is that ratio divided by the
  ratio of the n's (1.0 = exactly linear).

* ``--lenet-round M``: one LeNet-5 FedAvg round of :func:`ldpsim._src.fl.simulate` with M
  clients sampled from a virtual population (``SampledPopulation``, N =
  ``--population``, default max(10^6, M)) over MNIST-shaped data (random uint8 images
  and labels, 60,000 base examples, or the real MNIST with ``--data-dir``), per-client
  Gaussian LDP noise (ε = 50, δ = 0.01, C = 1, add-remove: MindSpore's setting) or
  ``--lenet-noise-mode aggregate``.  Reported: the round's wall time (compile, round and
  evaluation on 1,000 test examples, as ``simulate`` records it), the child's total
  time and its peak RSS.

Quick check (about a minute on 2 shared cores)::

    PYTHONPATH=. python benchmarks/scale.py

Full measurement of the issue (per-client n = 10^6 took 3.7 min on 2 quiet cores; the
LeNet-5 round with M = 10^5 about 5-10 min)::

    PYTHONPATH=. python benchmarks/scale.py --ns 1e3,1e4,1e5,1e6 --lenet-round 100000

Numbers on a shared machine are noisy: compare ratios measured in the same run.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: LeNet-5 parameter count on 28x28x1 inputs with 10 classes (``ldpsim noise --model lenet5``).
LENET5_DIM = 61_706


def peak_rss_mb() -> float:
    """Peak resident set size of THIS process in MiB (VmHWM; ru_maxrss as a fallback)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux
    return kb / 1024.0


# --------------------------------------------------------------------------- children


def child_noise(n: int, mode: str, dim: int, trials: int, repeats: int, chunk: int | None) -> dict:
    """Time ``ldpsim noise`` for one (n, mode) after compiling at a small n."""
    import jax

    from ldpsim.cli import main
    from ldpsim._src.privacy.analysis import averaging

    start = time.perf_counter()
    warm = averaging._chunk_for(10**9, dim, chunk)  # the chunk every large n uses
    averaging.simulate_average(jax.random.key(0), num_clients=max(1, min(n, warm)), dim=dim,
                               noise_scale=1.0, clip=1.0, method=mode,
                               chunk_size=chunk).noise_sq.block_until_ready()
    compile_s = time.perf_counter() - start
    argv = ["noise", "--dim", str(dim), "--epsilon", "50", "--delta", "0.01", "--clip", "1",
            "--neighbours", "add-remove", "--clients", str(n), "--trials", str(trials),
            "--draw", mode, "--no-progress"]
    if chunk is not None:
        argv += ["--chunk-size", str(chunk)]
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "noise.csv"
        for _ in range(repeats):
            t0 = time.perf_counter()
            rc = main(argv + ["--out", str(out)])
            times.append(time.perf_counter() - t0)
            if rc != 0:
                raise SystemExit(f"ldpsim noise exited with {rc}")
        import csv

        with open(out) as f:
            row = next(csv.DictReader(f))
    return {"wall_s": statistics.median(times), "compile_s": compile_s,
            "noise_norm": float(row["noise_norm_mean"]), "theory": float(row["noise_norm_theory"]),
            "method": row["method"]}


def child_lenet(m: int, population: int, noise_mode: str, data_dir: str | None) -> dict:
    """One LeNet-5 round with ``m`` clients from a sampled population of ``population``."""
    import numpy as np

    from ldpsim.data import SampledPopulation
    from ldpsim.fl import SimulationConfig
    from ldpsim._src.fl.simulate import simulate

    start = time.perf_counter()
    if data_dir:
        from ldpsim.data import load_dataset

        ds = load_dataset("mnist", data_dir)
        x, y, x_test, y_test = ds.x_train, ds.y_train, ds.x_test[:1000], ds.y_test[:1000]
    else:
        rng = np.random.default_rng(0)
        x = rng.integers(0, 256, (60_000, 28, 28, 1), dtype=np.uint8)
        y = rng.integers(0, 10, 60_000)
        x_test = rng.integers(0, 256, (1000, 28, 28, 1)).astype(np.float32) / 255.0
        y_test = rng.integers(0, 10, 1000)
    pop = SampledPopulation.create(x, y, num_clients=population, examples_per_client=32,
                                   num_classes=10, seed=0)
    config = SimulationConfig(dataset="mnist", partition="sampled", model="lenet5",
                              population=population, clients_per_round=m, rounds=1,
                              epsilon=50.0, delta=0.01, clip=1.0, neighbours="add-remove",
                              noise_mode=noise_mode)
    rows = simulate(config, data=(pop, x_test, y_test))
    row = rows[-1]
    return {"wall_s": row["wall_time"], "total_s": time.perf_counter() - start,
            "clients": int(row["clients"]), "noise_norm": row["noise_norm"],
            "theory": row["theory_noise_norm"], "accuracy": row["accuracy"]}


def _child_main(spec: dict) -> None:
    if spec["kind"] == "noise":
        out = child_noise(spec["n"], spec["mode"], spec["dim"], spec["trials"], spec["repeats"],
                          spec["chunk"])
    else:
        out = child_lenet(spec["m"], spec["population"], spec["mode"], spec["data_dir"])
    out["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(out), flush=True)


# --------------------------------------------------------------------------- parent


def run_child(spec: dict, timeout: float | None = None) -> dict:
    """Run one configuration in a fresh interpreter; returns its RESULT dict."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child {spec} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(lines[-1][len("RESULT "):])
    out["process_s"] = elapsed
    return out


def _parse_ns(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ns", default="1e3,1e4", help="client counts n (comma-separated, 1e6 ok)")
    p.add_argument("--modes", default="per-client,aggregate", help="noise modes to run")
    p.add_argument("--dim", type=int, default=LENET5_DIM, help="update dimension d (LeNet-5: 61,706)")
    p.add_argument("--trials", type=int, default=1, help="trials per ldpsim noise call")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per configuration (median)")
    p.add_argument("--max-repeat-n", type=float, default=1e4,
                   help="above this n, time a single call (per-client n = 1e6 takes ~20 min)")
    p.add_argument("--chunk-size", type=int, default=None, help="clients per chunk (default 2^22/d)")
    p.add_argument("--lenet-round", type=int, default=0, metavar="M",
                   help="also run one LeNet-5 round with M clients (0: skip)")
    p.add_argument("--population", type=int, default=None, help="LeNet population N (default max(1e6, M))")
    p.add_argument("--lenet-noise-mode", default="per-client", choices=("per-client", "aggregate"))
    p.add_argument("--data-dir", default=None, help="real MNIST folder for the LeNet round (default: random)")
    p.add_argument("--skip-noise", action="store_true", help="only the LeNet round")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        _child_main(json.loads(args.child))
        return 0

    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}  load {os.getloadavg()[0]:.2f}  "
          f"cpus {os.cpu_count()}  d = {args.dim}", flush=True)
    if not args.skip_noise:
        ns = sorted(_parse_ns(args.ns))
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        print(f"{'n':>9} {'mode':>10} {'wall s':>9} {'us/client':>10} {'peak RSS MB':>11} "
              f"{'x vs first':>10} {'linearity':>9} {'compile s':>9} {'||z||':>9} {'theory':>9}",
              flush=True)
        for mode in modes:
            first = None
            for n in ns:
                reps = args.repeats if n <= args.max_repeat_n else 1
                r = run_child({"kind": "noise", "n": n, "mode": mode, "dim": args.dim,
                               "trials": args.trials, "repeats": reps, "chunk": args.chunk_size})
                if first is None:
                    first = (n, r["wall_s"])
                ratio = r["wall_s"] / first[1]
                print(f"{n:>9.0e} {mode:>10} {r['wall_s']:>9.2f} {1e6 * r['wall_s'] / n:>10.1f} "
                      f"{r['peak_rss_mb']:>11.0f} {ratio:>10.2f} {ratio / (n / first[0]):>9.2f} "
                      f"{r['compile_s']:>9.2f} {r['noise_norm']:>9.4f} {r['theory']:>9.4f}",
                      flush=True)
    if args.lenet_round:
        m = args.lenet_round
        population = args.population or max(10**6, m)
        r = run_child({"kind": "lenet", "m": m, "population": population,
                       "mode": args.lenet_noise_mode, "data_dir": args.data_dir})
        print(f"LeNet-5 round: m = {m}, N = {population}, noise {args.lenet_noise_mode}: "
              f"round {r['wall_s']:.1f} s (compile + round + eval), "
              f"{1e3 * r['wall_s'] / m:.2f} ms/client, child total {r['total_s']:.1f} s, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB, clients {r['clients']}, "
              f"noise_norm {r['noise_norm']:.5f} (theory {r['theory']:.5f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
