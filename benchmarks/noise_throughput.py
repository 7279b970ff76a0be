"""Throughput of per-client N(0, 1) noise: ldpsim's fast sampler vs jax.random.

Workload: ``--clients`` clients × ``--dim`` coordinates (default 1,000 × 61,706, the
LeNet-5 update), client ``c`` drawing from ``fold_in(fold_in(root, round), c)``
inside one jitted ``vmap`` (key derivation included). Methods run round-robin,
``--repeats`` times after a warm-up call each, so that load on a shared machine
hits every method alike; the table shows the median and the ratio to
``jax.random.normal`` (threefry) measured in the same run.

Rows:
  * ``jax.random.normal threefry``: the baseline (default key impl).
  * ``jax.random.normal rbg`` / ``unsafe_rbg``: JAX's other key impls.
  * ``jax.random.bits threefry``: raw 32-bit words, no transform (context).
  * ``ldpsim fast normal``: :func:`ldpsim.privacy.sampling.normal`, ``impl="fast"``.
  * ``... then sum over clients``: the noise consumed by a reduction (as in an
    aggregate), for both the baseline and the fast sampler.

Usage::

    PYTHONPATH=. python benchmarks/noise_throughput.py [--clients 1000] [--dim 61706] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from ldpsim.privacy import sampling


def _client_keys(root, rnd, clients):
    k = jax.random.fold_in(root, rnd)
    return jax.vmap(lambda c: jax.random.fold_in(k, c))(jnp.arange(clients, dtype=jnp.uint32))


def _methods(clients: int, dim: int):
    def per_client(draw, impl_name=None):
        def f(root, rnd):
            return jax.vmap(draw)(_client_keys(root, rnd, clients))

        return f

    def summed(draw):
        def f(root, rnd):
            return jnp.sum(jax.vmap(draw)(_client_keys(root, rnd, clients)), axis=0)

        return f

    ref = lambda k: jax.random.normal(k, (dim,))  # noqa: E731
    fast = lambda k: sampling.normal(k, (dim,))  # noqa: E731
    return {
        "jax.random.normal threefry": (per_client(ref), "threefry2x32"),
        "jax.random.normal rbg": (per_client(ref), "rbg"),
        "jax.random.normal unsafe_rbg": (per_client(ref), "unsafe_rbg"),
        "jax.random.bits threefry (uint32)": (
            per_client(lambda k: jax.random.bits(k, (dim,))),
            "threefry2x32",
        ),
        "ldpsim fast normal": (per_client(fast), "threefry2x32"),
        "jax.random.normal threefry, summed over clients": (summed(ref), "threefry2x32"),
        "ldpsim fast normal, summed over clients": (summed(fast), "threefry2x32"),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=61706)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--round", type=int, default=3)
    args = parser.parse_args(argv)

    n = args.clients * args.dim
    methods = _methods(args.clients, args.dim)
    compiled = {}
    for name, (fn, impl) in methods.items():
        root = jax.random.key(0, impl=impl)
        jitted = jax.jit(fn)
        jax.block_until_ready(jitted(root, args.round))  # compile + warm-up
        compiled[name] = (jitted, root)

    times: dict[str, list[float]] = {name: [] for name in compiled}
    for rep in range(args.repeats):
        for name, (jitted, root) in compiled.items():
            t0 = time.perf_counter()
            jax.block_until_ready(jitted(root, args.round + 1 + rep))
            times[name].append(time.perf_counter() - t0)

    base = statistics.median(times["jax.random.normal threefry"])
    print(
        f"\nper-client noise: {args.clients} clients x {args.dim} coordinates, "
        f"median of {args.repeats} round-robin repeats after warm-up, "
        f"jax {jax.__version__}, {jax.devices()[0].platform}\n"
    )
    print("| method | M samples/s | ratio vs threefry normal | median s |")
    print("|---|---:|---:|---:|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {n / med / 1e6:.1f} | {base / med:.2f} | {med:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
