"""Client-updates per second of LeNet-5 local training, by formulation.

Workload: LeNet-5 (61,706 params), MNIST-shaped inputs,
32 examples per client, batch 16, 2 local SGD steps (unrolled), m clients per cohort;
every formulation returns the *sum* of the m client updates (what a round aggregates),
so no formulation is charged for materialising m updates that another skips.
No clipping or noise here (see benchmarks/throughput.py for the whole round).

Formulations:
  loop-<conv>     Python loop over clients calling a jitted single-client update
                  (the baseline); <conv> = mixed | xla | im2col | cnhw | ...
                  (every LeNet-5 formulation in benchmarks/conv_variants.py).
  vmap-<conv>     jax.vmap of local_update over the whole cohort.
  map<c>-<conv>   lax.scan over chunks of c clients, each chunk vmapped (bounded memory);
                  map1 = one client per scan iteration (a loop inside XLA).
  <conv>/<pool>   optional pooling formulation (reshape | window | slices).
ldpsim.models keeps chwn, mixed and xla (reshape and window); the others come from
benchmarks/conv_variants.py (same params, same function).  --batch B changes the local
batch (2 steps either way).

Measured (2-core CPU shared with other jobs, load ~8, m = 200, CPU-ms per update):
loop-im2col 6.8, map1-im2col 4.4, map2 6.9, map4 7.2, map10 7.4, map25 7.9; after the
in-place col2im VJP of im2col, map1-im2col 3.8 (channels-first cnhw 4.4, xla 23).
Later (quiet machine, 512-bit kernels, m = 128, median of 7, updates/s): map1-im2col 345,
map1-mixed 435 (LeNet-5's conv1 channels-first, conv2 im2col; the CPU default since),
map1-mixed/slices 377, map1-mixed/window 358, map2-mixed 374.
chwn (batch-innermost, 25 Nov 2026, m = 200, CPU-ms per update): one core 2.01 against
2.86 for mixed; both cores 479 against 338 updates/s (details in conv_variants.py).

Speed of light: training FLOPs (3x the forward FLOPs of 32 examples, counted from the
layer shapes) at the float32 matmul peak measured in the same run (2048^2 jnp.dot).

Run:  PYTHONPATH=. python benchmarks/client_formulations.py [--m 10 100 1000] [--repeats 3]
Rows: wall-clock client-updates/s (median of repeats), then CPU-ms per client-update
(process time over all threads; steadier than wall time on a shared machine).
Ratios are against the best loop measured in the same run; repeats are interleaved
across formulations (round-robin), so load changes on a shared machine hit all alike.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from ldpsim._src.fl.client import client_optimizer, local_update
from ldpsim.models import get_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conv_variants import lenet5_variant  # noqa: E402  (benchmarks/ is not a package)

EXAMPLES, BATCH, STEPS = 32, 16, 2


def lenet_forward_flops(h=28, w=28):
    """Forward FLOPs (2 per multiply-add) of one example through LeNet-5 (first conv SAME)."""
    macs = h * w * 25 * 1 * 6  # conv1 SAME
    h2, w2 = h // 2 - 4, w // 2 - 4
    macs += h2 * w2 * 25 * 6 * 16  # conv2 VALID
    macs += 16 * (h2 // 2) * (w2 // 2) * 120 + 120 * 84 + 84 * 10
    return 2 * macs


def matmul_peak(n=2048, repeats=5):
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(jnp.dot)
    f(a, a).block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f(a, a).block_until_ready()
        times.append(time.perf_counter() - t)
    return 2 * n**3 / min(times)


def _client_fn(conv_impl, pool_impl="auto"):
    batch = BATCH
    model = lenet5_variant(conv_impl, pool_impl, input_shape=(28, 28, 1), num_classes=10)

    def one(params, x, y, count, key):
        delta, metrics = local_update(params, x, y, count, apply_fn=model.apply,
                                      optimizer=client_optimizer("sgd", 0.05),
                                      batch_size=batch, local_steps=STEPS, key=key)
        return delta, metrics.loss

    return model, one


def make_loop(conv_impl):
    _, one = _client_fn(conv_impl)

    @functools.partial(jax.jit, donate_argnums=0)
    def step(acc, params, x, y, count, key):
        delta, loss = one(params, x, y, count, key)
        return jax.tree_util.tree_map(jnp.add, acc, delta), loss

    def run(params, x, y, counts, keys):
        acc = jax.tree_util.tree_map(jnp.zeros_like, params)
        for c in range(x.shape[0]):
            acc, _ = step(acc, params, x[c], y[c], counts[c], keys[c])
        return acc

    return run


def make_vmap(conv_impl, pool_impl="auto"):
    _, one = _client_fn(conv_impl, pool_impl)

    @jax.jit
    def run(params, x, y, counts, keys):
        deltas, _ = jax.vmap(one, in_axes=(None, 0, 0, 0, 0))(params, x, y, counts, keys)
        return jax.tree_util.tree_map(lambda d: d.sum(0), deltas)

    return run


def make_chunked(conv_impl, chunk, pool_impl="auto"):
    _, one = _client_fn(conv_impl, pool_impl)
    vone = jax.vmap(one, in_axes=(None, 0, 0, 0, 0))

    @jax.jit
    def run(params, x, y, counts, keys):
        m = x.shape[0]
        width = min(chunk, m)
        pad = -m % width
        if pad:  # padded clients have count 0: their update is exactly zero
            x = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
            y = jnp.concatenate([y, jnp.zeros((pad,) + y.shape[1:], y.dtype)])
            counts = jnp.concatenate([counts, jnp.zeros((pad,), counts.dtype)])
            keys = jnp.concatenate([keys, keys[:pad]])
        resh = lambda a: a.reshape((-1, width) + a.shape[1:])

        def body(acc, xs):
            deltas, _ = vone(params, *xs)
            return jax.tree_util.tree_map(lambda a, d: a + d.sum(0), acc, deltas), None

        acc0 = jax.tree_util.tree_map(jnp.zeros_like, params)
        acc, _ = jax.lax.scan(body, acc0, tuple(map(resh, (x, y, counts, keys))))
        return acc

    return run


def build(name):
    kind, _, conv = name.partition("-")
    conv, _, pool = conv.partition("/")
    pool = pool or "auto"
    if kind == "loop":
        return make_loop(conv)
    if kind == "vmap":
        return make_vmap(conv, pool)
    if kind.startswith("map"):
        return make_chunked(conv, int(kind[3:]), pool)
    raise ValueError(name)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, nargs="+", default=[10, 100, 1000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--formulations", nargs="+", default=[
        "loop-im2col", "map1-im2col", "map1-mixed", "map1-cnhw", "map2-im2col", "map8-im2col",
        "map25-im2col", "vmap-im2col"])
    p.add_argument("--loop-max-m", type=int, default=200,
                   help="time loops on at most this many clients (rate is per client)")
    p.add_argument("--batch", type=int, default=16,
                   help="local batch size (default 16; 2 steps over 32 examples either way)")
    args = p.parse_args(argv)
    global BATCH  # noqa: PLW0603  (read by _client_fn when the formulations are built)
    BATCH = args.batch

    peak = matmul_peak()
    train_flops = 3 * lenet_forward_flops() * BATCH * STEPS
    sol = peak / train_flops
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")
    print(f"matmul peak {peak / 1e9:.0f} GFLOP/s; training {train_flops / 1e6:.1f} MFLOP/client "
          f"-> speed of light {sol:.0f} client-updates/s (training only)")

    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    fns = {name: build(name) for name in args.formulations}
    print(f"{'m':>5} | " + " | ".join(f"{n:>13}" for n in args.formulations) + " | best/loop | SoL")
    for m in args.m:
        kx, ky = jax.random.split(jax.random.key(m))
        x = jax.random.uniform(kx, (m, EXAMPLES, 28, 28, 1))
        y = jax.random.randint(ky, (m, EXAMPLES), 0, 10)
        counts = jnp.full((m,), EXAMPLES, jnp.int32)
        keys = jax.random.split(jax.random.key(1), m)
        sizes = {n: (min(m, args.loop_max_m) if n.startswith("loop") else m) for n in fns}
        for name, fn in fns.items():  # warm-up / compile
            k = sizes[name]
            jax.block_until_ready(fn(params, x[:k], y[:k], counts[:k], keys[:k]))
        times = {n: [] for n in fns}
        cpu = {n: [] for n in fns}
        for _ in range(args.repeats):
            for name, fn in fns.items():
                k = sizes[name]
                t, c = time.perf_counter(), time.process_time()
                jax.block_until_ready(fn(params, x[:k], y[:k], counts[:k], keys[:k]))
                times[name].append((time.perf_counter() - t) / k)
                cpu[name].append((time.process_time() - c) / k)
        rates = {n: 1.0 / statistics.median(t) for n, t in times.items()}
        cpu_ms = {n: 1e3 * statistics.median(t) for n, t in cpu.items()}
        loops = [r for n, r in rates.items() if n.startswith("loop")]
        fast = [r for n, r in rates.items() if not n.startswith("loop")]
        best = max(fast) if fast else float("nan")
        ratio = best / max(loops) if loops else float("nan")
        print(f"{m:>5} | " + " | ".join(f"{rates[n]:>13.1f}" for n in fns)
              + f" | {ratio:>9.2f} | {best / sol:.1%}", flush=True)
        print(f"{'cpu-ms':>5} | " + " | ".join(f"{cpu_ms[n]:>13.2f}" for n in fns)
              + " |  (CPU time per client-update, all threads)", flush=True)


if __name__ == "__main__":
    main()
