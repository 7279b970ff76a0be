"""Client-updates per second of one federated round: the engine vs a per-client Python loop.

Workload: LeNet-5 on MNIST-shaped inputs (28×28×1, 10 classes), 32 examples per
client, local training = 2 SGD steps of batch 16, update clipped to L2 norm C = 1, plus
per-client Gaussian noise N(0, σ²) on every coordinate, FedAvg aggregation.  Client data
comes from a :class:`~ldpsim.data.SampledPopulation` over 4,096 random uint8 images, so
the data gather is part of the measured round (as in a real run).

Rows:
* ``engine``: :func:`ldpsim._src.fl.round.make_round_fn` jitted (chunked vmap, one kernel),
  at m = 10, 100, 1,000, 10,000 clients per round.
* ``loop``: a Python loop over clients calling ONE jitted single-client step (the same
  ``local_update`` + ``privatize`` code, local steps unrolled, data gather included) and
  accumulating the sum on the device: the baseline, measured in the same run.
* breakdown at m = 1,000 (engine kernels built from the same building blocks, scanned with
  the engine's chunks in flight): training only (no clip, no noise), training + clip
  (``mechanism="none"``), noise only (per-client ``gaussian_noise`` draws, summed).

* ``--host-devices K1 K2 ...``: the engine rows again with the cohort split over ``K`` host
  CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=K`` set in the worker
  before jax is imported, ``make_round_fn(devices=K)``, :mod:`ldpsim._src.fl.sharding`); the
  ``x 1 dev`` column is the rate over the first K's engine rate at the same m, same run.

Every configuration runs in a fresh subprocess so that its peak resident memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own; times are medians of repeats
after one warm-up (compilation excluded).  Speed of light: training FLOPs per client
(XLA's cost analysis of one client's ``local_update``) at the measured float32 matmul peak,
plus the per-client noise at the measured rate of ldpsim's default sampler. Every ldpsim
program (engine, loop, breakdown) is compiled with :func:`ldpsim._src._xla.jit` (ldpsim's XLA CPU
options), so the loop baseline gets the same code generation as the engine.

Usage::

    python benchmarks/throughput.py                     # full table
    python benchmarks/throughput.py --quick             # m = 10, 100 only
    python benchmarks/throughput.py --chunks 32 64 128  # chunk-size scan at m = 1,000
    python benchmarks/throughput.py --ms 1000 --loop-max 0 --host-devices 1 2 --budget 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES, BATCH, STEPS, SIGMA, CLIP, LR = 32, 16, 2, 0.25, 1.0, 0.05


# ----------------------------------------------------------------------------- worker


def _setup(m: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ldpsim.data import SampledPopulation
    from ldpsim.models import get_model

    rng = np.random.default_rng(0)
    base_x = rng.integers(0, 256, size=(4096, 28, 28, 1), dtype=np.uint8)
    base_y = rng.integers(0, 10, size=4096)
    pop = SampledPopulation.create(base_x, base_y, num_clients=max(m, 10_000),
                                   examples_per_client=EXAMPLES, seed=0)
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    ids = np.sort(rng.choice(pop.num_clients, size=m, replace=False)).astype(np.int32)
    return pop, model, params, ids


def _time(fn, repeats: int, budget_s: float) -> list[float]:
    """One warm-up call, then up to ``repeats`` timed calls (at least 1, within budget)."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (not times or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _block(tree):
    import jax

    return jax.block_until_ready(tree)


def worker(mode: str, m: int, chunk: int, repeats: int, budget_s: float,
           devices: int = 1) -> dict:
    import resource

    import jax
    import jax.numpy as jnp
    from jax import lax

    from ldpsim._src import _xla
    from ldpsim._src.fl import client as client_lib
    from ldpsim._src.fl import sharding
    from ldpsim._src.fl.privatize import privatize
    from ldpsim._src.fl._policy import chunk_layout, resolve_chunks_in_flight
    from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
    from ldpsim._src.privacy.noise import mechanisms

    pop, model, params, ids = _setup(m)
    mask = jnp.ones(m, bool)
    hyper = RoundHyper.create(sigma=SIGMA, clip=CLIP, client_lr=LR, server_lr=1.0)
    state = init_state(params, jax.random.key(1))
    opt = lambda: client_lib.client_optimizer("sgd", hyper.client_lr)  # noqa: E731

    def train(params, cid, key):
        x, y, c = pop.gather(cid[None])
        delta, _ = client_lib.local_update(params, x[0], y[0], c[0], apply_fn=model.apply,
                                           optimizer=opt(), batch_size=BATCH, key=key,
                                           local_steps=STEPS)
        return delta

    if mode in ("engine", "clip_only"):
        fn = _xla.jit(make_round_fn(apply_fn=model.apply, local_steps=STEPS, batch_size=BATCH,
                                   chunk_size=chunk, devices=devices,
                                   mechanism="gaussian" if mode == "engine" else "none"))
        state, pop = sharding.replicate((state, pop), devices)   # as simulate() does
        run = lambda: _block(fn(state, pop, jnp.int32(0), ids, mask, hyper))  # noqa: E731
    elif mode in ("train_only", "noise_only"):
        n_chunks, c = chunk_layout(m, chunk)  # the engine's layout, padding included
        chunks = jnp.zeros(n_chunks * c, jnp.int32).at[:m].set(ids).reshape(n_chunks, c)

        def body(acc, cids):
            keys = jax.vmap(lambda i: jax.random.fold_in(state.key, i))(cids)
            if mode == "train_only":
                x, y, cnt = pop.gather(cids)
                d = jax.vmap(lambda x, y, cnt, k: client_lib.local_update(
                    params, x, y, cnt, apply_fn=model.apply, optimizer=opt(),
                    batch_size=BATCH, key=k, local_steps=STEPS)[0])(x, y, cnt, keys)
            else:
                d = jax.vmap(lambda k: mechanisms.gaussian_noise(k, params, hyper.privacy.scale))(keys)
            return jax.tree_util.tree_map(lambda a, b: a + b.sum(0), acc, d), None

        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        # The engine's scan: the same chunks in flight (the default for this layout).
        in_flight = resolve_chunks_in_flight(None, 1, n_chunks)
        fn = _xla.jit(lambda: lax.scan(body, zeros, chunks, unroll=in_flight)[0])
        run = lambda: _block(fn())  # noqa: E731
    elif mode == "loop":
        @_xla.jit  # the same compile options as the engine
        def step(acc, params, cid, hyper):  # params, σ, C are arguments, as in a real loop
            key = jax.random.fold_in(state.key, cid)
            tk, nk = jax.random.split(key)
            p = privatize(nk, train(params, cid, tk), clip=hyper.clip, scale=hyper.privacy.scale)
            w = EXAMPLES * p.finite.astype(jnp.float32)
            return jax.tree_util.tree_map(lambda a, b: a + w * b, acc, p.noisy)

        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        id_arr = [jnp.int32(i) for i in ids]

        def run():
            acc = zeros
            for cid in id_arr:
                acc = step(acc, params, cid, hyper)
            return _block(acc)
    else:
        raise ValueError(mode)

    times = _time(run, repeats, budget_s)
    med = statistics.median(times)
    return {"mode": mode, "m": m, "chunk": chunk, "devices": devices, "seconds": med,
            "repeats": len(times),
            "rate": m / med, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            / 1024}


def machine_limits() -> dict:
    """Measured matmul peak, normal sampling rate, training FLOPs and d of one client."""
    import jax
    import jax.numpy as jnp

    from ldpsim._src import _xla
    from ldpsim._src.fl import client as client_lib
    from ldpsim.models import num_params
    from ldpsim._src.privacy.noise import sampling

    a = jnp.ones((2048, 2048), jnp.float32)
    mm = jax.jit(lambda a: a @ a)
    t = _time(lambda: _block(mm(a)), 7, 5.0)
    peak = 2 * 2048 ** 3 / statistics.median(t)
    pop, model, params, _ = _setup(10)
    d = num_params(params)
    # Noise at the rate of ldpsim's default sampler, compiled as the engine compiles it.
    normal = _xla.jit(lambda k: sampling.normal(k, (100, d)))
    t = _time(lambda: _block(normal(jax.random.key(0))), 5, 5.0)
    normal_rate = 100 * d / statistics.median(t)
    x, y, c = pop.gather(jnp.arange(1))
    one = jax.jit(lambda p, x, y, c, k: client_lib.local_update(
        p, x, y, c, apply_fn=model.apply, optimizer=client_lib.client_optimizer("sgd", LR),
        batch_size=BATCH, key=k, local_steps=STEPS)[0])
    cost = one.lower(params, x[0], y[0], c[0], jax.random.key(0)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    flops = float(cost.get("flops", float("nan")))
    sol = 1.0 / (flops / peak + d / normal_rate)
    return {"matmul_gflops": peak / 1e9, "normal_msamples": normal_rate / 1e6,
            "train_mflops_per_client": flops / 1e6, "d": d, "sol_rate": sol,
            "device": str(jax.devices()[0].platform), "devices": jax.device_count()}


# ----------------------------------------------------------------------------- driver


def _spawn(args: list[str], timeout: float, host_devices: int | None = None,
           script: str = __file__) -> dict | None:
    """Run ``script`` (this file by default) with ``args`` in a fresh process; its last stdout
    line parsed as JSON, or None (timed out or failed, said on stderr)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if host_devices is not None:   # must be set before the worker imports jax
        flags = [f for f in env.get("XLA_FLAGS", "").split()
                 if not f.startswith("--xla_force_host_platform_device_count")]
        env["XLA_FLAGS"] = " ".join(
            flags + [f"--xla_force_host_platform_device_count={host_devices}"])
        args = [*args, "--devices", str(host_devices)]
    try:
        out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                             env=env, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        print(f"  timed out: {' '.join(args)}", file=sys.stderr)
        return None
    except subprocess.CalledProcessError as err:
        print(f"  failed: {' '.join(args)}\n{err.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", nargs=3, metavar=("MODE", "M", "CHUNK"), help=argparse.SUPPRESS)
    p.add_argument("--limits", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ms", type=int, nargs="+", default=[10, 100, 1000, 10_000])
    p.add_argument("--loop-max", type=int, default=1000, help="largest m for the loop")
    p.add_argument("--chunk", type=int, default=None,
                   help="engine chunk size (default: ldpsim's per-backend default)")
    p.add_argument("--chunks", type=int, nargs="*", default=None,
                   help="also scan these chunk sizes at m = 1,000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget", type=float, default=60.0, help="seconds of repeats per row")
    p.add_argument("--quick", action="store_true", help="m = 10, 100; no breakdown")
    p.add_argument("--host-devices", type=int, nargs="+", default=None, metavar="K",
                   help="engine rows with the cohort split over K host CPU devices each "
                        "(XLA_FLAGS=--xla_force_host_platform_device_count=K in the worker); "
                        "compared with the first K; e.g. --host-devices 1 2")
    p.add_argument("--devices", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        mode, m, chunk = args.worker[0], int(args.worker[1]), int(args.worker[2])
        print(json.dumps(worker(mode, m, chunk, args.repeats, args.budget, args.devices)))
        return 0
    if args.limits:
        print(json.dumps(machine_limits()))
        return 0

    from ldpsim._src.fl._policy import resolve_chunk_size

    chunk = resolve_chunk_size(args.chunk)
    ms = [10, 100] if args.quick else args.ms
    common = ["--repeats", str(args.repeats), "--budget", str(args.budget)]
    limits = _spawn(["--limits"], 900)
    rows = []
    for m in ms:
        for k in args.host_devices or [None]:
            row = _spawn(["--worker", "engine", str(m), str(chunk), *common], 1800, k)
            if row and k is not None:
                row["mode"] = f"engine ({k} host dev)"
            rows.append(row)
        if m <= args.loop_max:
            rows.append(_spawn(["--worker", "loop", str(m), "1", *common], 1800))
    if not args.quick and not args.host_devices:
        m = 1000
        for mode in ("train_only", "clip_only", "noise_only"):
            rows.append(_spawn(["--worker", mode, str(m), str(chunk), *common], 1800))
        for c in args.chunks or []:
            rows.append(_spawn(["--worker", "engine", str(m), str(c), *common], 1800))
    rows = [r for r in rows if r]

    print(f"\nldpsim throughput: LeNet-5 (d = {limits['d']:,}), {EXAMPLES} examples/client, "
          f"batch {BATCH}, {STEPS} local steps, per-client Gaussian noise; backend "
          f"{limits['device']} x{limits['devices']}")
    print(f"machine: matmul {limits['matmul_gflops']:.0f} GFLOP/s, ldpsim noise "
          f"{limits['normal_msamples']:.0f} M samples/s, training "
          f"{limits['train_mflops_per_client']:.1f} MFLOP/client -> speed of light "
          f"{limits['sol_rate']:.0f} client-updates/s\n")
    loop_rate = {r["m"]: r["rate"] for r in rows if r["mode"] == "loop"}
    first_dev = {}
    for r in rows:
        if r["mode"].startswith("engine ("):
            first_dev.setdefault(r["m"], r["rate"])
    best_loop = max(loop_rate.values()) if loop_rate else float("nan")
    hdr = (f"| {'formulation':<22} | {'m':>6} | {'chunk':>5} | {'updates/s':>9} | "
           f"{'x loop':>6} | {'x 1 dev':>7} | {'of SOL':>6} | {'peak RSS MB':>11} | {'s/round':>8} |")
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    for r in rows:
        ref = loop_rate.get(r["m"], best_loop)
        engine = r["mode"].startswith("engine") or r["mode"] == "loop"
        speedup = r["rate"] / ref if engine else float("nan")
        sol = r["rate"] / limits["sol_rate"] if engine else float("nan")
        vs_dev = (r["rate"] / first_dev[r["m"]] if r["mode"].startswith("engine (")
                  else float("nan"))
        print(f"| {r['mode']:<22} | {r['m']:>6,} | {r['chunk']:>5} | {r['rate']:>9.1f} | "
              f"{speedup:>6.2f} | {vs_dev:>7.2f} | {sol:>6.1%} | {r['maxrss_mb']:>11.0f} | "
              f"{r['seconds']:>8.3f} |")
    by_mode = {r["mode"]: r for r in rows if r["m"] == 1000 and r["chunk"] == chunk}
    if {"engine", "train_only", "clip_only"} <= set(by_mode):
        # Each figure is its own measured program (ms per client); differences between
        # separately compiled programs are not reliable on XLA:CPU (fusion differs), so
        # they are reported side by side rather than subtracted.
        ms = {k: v["seconds"] for k, v in by_mode.items()}
        print(f"\nwhere the time goes at m = 1,000 (ms per client, each a separate program): "
              f"full round {ms['engine']:.3f}; local training only {ms['train_only']:.3f} "
              f"({ms['train_only'] / ms['engine']:.0%} of the round); round without noise "
              f"(training + clip + aggregate) {ms['clip_only']:.3f}"
              + (f"; per-client noise alone {ms['noise_only']:.3f}" if "noise_only" in ms else ""))
    print("\n'x loop' compares with the loop at the same m (the best loop rate where the loop "
          "was not run); the machine may be shared: compare ratios within one run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
