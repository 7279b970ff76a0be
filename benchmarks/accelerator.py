"""The accelerator path measured: client-updates/s of one round from m = 10³ to 10⁶ clients.

Workload: the one of ``benchmarks/throughput.py`` (LeNet-5 on 28×28×1 inputs, 10 classes,
32 examples per client from a virtual :class:`~ldpsim.data.SampledPopulation`, 2 local SGD
steps of batch 16, update clipped to L2 norm C = 1, per-client Gaussian noise on every
coordinate, FedAvg aggregation), run by the engine's round kernel
(:func:`ldpsim.make_round_fn`) with the cohort in vmapped chunks of ``chunk`` clients.

For every (m, chunk) it reports, from its own fresh process:

* client-updates/s: m / the median round time after one warm-up (compilation excluded,
  reported separately as ``compile s``);
* fraction of peak: training FLOPs per client (XLA's cost analysis of one client's
  ``local_update``) × the rate, over the float32 matrix-product rate measured in the same
  process (a 4096³ ``a @ a`` at JAX's default precision, so on NVIDIA GPUs TF32 tensor
  cores where JAX uses them); the noise, clip and aggregation are not counted as FLOPs;
* peak memory: the device's ``peak_bytes_in_use`` (GPU/TPU), else the process's peak RSS
  (CPU).

and the best chunk per m, which is how ``AUTO_CHUNK_ACCELERATOR`` in
``ldpsim/_src/fl/_policy.py`` is to be chosen on a device.

Usage (one command; on the device machine it runs unchanged)::

    python benchmarks/accelerator.py                          # the backend's default grid
    python benchmarks/accelerator.py --ms 1000 100000 --chunks 256 1024 4096 --out r.json

Default grid: on GPU/TPU m ∈ {10³, 10⁴, 10⁵, 10⁶} × chunk ∈ {256, 1024, 4096}; on CPU
(which has no accelerator path worth measuring at that size) m = 10³ with chunk ∈ {1, 8, 64}.

Through the ``device`` tool (dp-accounting is not in the device image: carry its wheel, see
the device tool's README, /work/.library/device/README.md, "a Python package missing
 there")::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl \\
      && PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 \\
      python3 benchmarks/accelerator.py --out $OUT/accelerator.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import throughput as tp  # noqa: E402  (the workload's definition, shared)


def worker(m: int, chunk: int, repeats: int, budget_s: float) -> dict:
    import resource

    import jax
    import jax.numpy as jnp

    from ldpsim._src import _xla
    from ldpsim._src.fl import sharding
    from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn

    pop, model, params, ids = tp._setup(m)
    mask = jnp.ones(m, bool)
    hyper = RoundHyper.create(sigma=tp.SIGMA, clip=tp.CLIP, client_lr=tp.LR, server_lr=1.0)
    state = init_state(params, jax.random.key(1))
    fn = _xla.jit(make_round_fn(apply_fn=model.apply, local_steps=tp.STEPS,
                                batch_size=tp.BATCH, chunk_size=chunk, devices=1,
                                mechanism="gaussian"))
    state, pop = sharding.replicate((state, pop), 1)
    ids = jnp.asarray(ids)
    t0 = time.perf_counter()
    compiled = fn.lower(state, pop, jnp.int32(0), ids, mask, hyper).compile()
    compile_s = time.perf_counter() - t0
    run = lambda: tp._block(compiled(state, pop, jnp.int32(0), ids, mask, hyper))  # noqa: E731
    times = tp._time(run, repeats, budget_s)
    med = statistics.median(times)
    dev = jax.devices()[0]
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        peak_mb, peak_kind = stats["peak_bytes_in_use"] / 2**20, "device"
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        peak_kind = "host RSS"
    return {"m": m, "chunk": chunk, "seconds": med, "repeats": len(times), "rate": m / med,
            "compile_s": compile_s, "peak_mb": peak_mb, "peak_kind": peak_kind}


def limits() -> dict:
    """float32 matmul rate and training FLOPs of one client, measured in this process."""
    import jax
    import jax.numpy as jnp

    from ldpsim._src.fl import client as client_lib

    n = 4096
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    mm = jax.jit(lambda a: a @ a)
    t = tp._time(lambda: tp._block(mm(a)), 9, 10.0)
    peak = 2 * n ** 3 / statistics.median(t)
    pop, model, params, _ = tp._setup(10)
    x, y, c = pop.gather(jnp.arange(1))
    one = jax.jit(lambda p, x, y, c, k: client_lib.local_update(
        p, x, y, c, apply_fn=model.apply,
        optimizer=client_lib.client_optimizer("sgd", tp.LR),
        batch_size=tp.BATCH, key=k, local_steps=tp.STEPS)[0])
    cost = one.lower(params, x[0], y[0], c[0], jax.random.key(0)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    dev = jax.devices()[0]
    return {"matmul_tflops": peak / 1e12, "train_mflops": float(cost.get("flops", "nan")) / 1e6,
            "backend": jax.default_backend(), "device": getattr(dev, "device_kind", str(dev)),
            "jax": jax.__version__}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", nargs=2, type=int, metavar=("M", "CHUNK"), help=argparse.SUPPRESS)
    p.add_argument("--limits", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ms", type=int, nargs="+", default=None,
                   help="clients per round (default: 1e3 1e4 1e5 1e6 on an accelerator, "
                        "1e3 on CPU)")
    p.add_argument("--chunks", type=int, nargs="+", default=None,
                   help="clients per vmapped chunk (default: 256 1024 4096 on an "
                        "accelerator, 1 8 64 on CPU)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget", type=float, default=60.0, help="seconds of repeats per row")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per row at most")
    p.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeats, args.budget)))
        return 0
    if args.limits:
        print(json.dumps(limits()))
        return 0
    for name in ("repeats", "budget", "timeout"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive")
    if any(v < 1 for v in (args.ms or []) + (args.chunks or [])):
        p.error("--ms and --chunks take positive integers")

    lim = tp._spawn(["--limits"], args.timeout, script=__file__)
    if lim is None:
        return 1
    accel = lim["backend"] != "cpu"
    ms = args.ms or ([1_000, 10_000, 100_000, 1_000_000] if accel else [1_000])
    chunks = args.chunks or ([256, 1024, 4096] if accel else [1, 8, 64])
    print(f"ldpsim accelerator path: LeNet-5, {tp.EXAMPLES} examples/client, {tp.STEPS} steps "
          f"of batch {tp.BATCH}, clip + per-client Gaussian noise; {lim['backend']} "
          f"({lim['device']}), jax {lim['jax']}; float32 matmul {lim['matmul_tflops']:.3g} "
          f"TFLOP/s measured; training {lim['train_mflops']:.1f} MFLOP/client", flush=True)
    hdr = (f"| {'m':>9} | {'chunk':>5} | {'updates/s':>10} | {'of peak':>7} | "
           f"{'s/round':>8} | {'compile s':>9} | {'peak MB':>9} |")
    print(hdr)
    print("|" + "|".join("-" * len(c) for c in hdr.split("|")[1:-1]) + "|", flush=True)
    rows = []
    for m in ms:
        for c in chunks:
            if c > m:
                continue
            r = tp._spawn(["--worker", str(m), str(c), "--repeats", str(args.repeats),
                        "--budget", str(args.budget)], args.timeout, script=__file__)
            if r is None:
                continue
            r["of_peak"] = r["rate"] * lim["train_mflops"] * 1e6 / (lim["matmul_tflops"] * 1e12)
            rows.append(r)
            print(f"| {m:>9,} | {c:>5} | {r['rate']:>10,.0f} | {r['of_peak']:>7.1%} | "
                  f"{r['seconds']:>8.3f} | {r['compile_s']:>9.1f} | "
                  f"{r['peak_mb']:>7,.0f} {'D' if r['peak_kind'] == 'device' else 'H'} |",
                  flush=True)
    print("\npeak MB: D = device peak_bytes_in_use, H = host peak RSS (CPU backend).")
    for m in ms:
        best = max((r for r in rows if r["m"] == m), key=lambda r: r["rate"], default=None)
        if best:
            print(f"best chunk at m = {m:,}: {best['chunk']} ({best['rate']:,.0f} updates/s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"limits": lim, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
