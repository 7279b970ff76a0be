"""Per-client cost of each local randomizer at the LeNet-5 size, against Gaussian noise.

Workload: ``--clients`` clients per round, each with a ``--dim``-coordinate update (default
61,706, LeNet-5), inside ONE jitted kernel shaped like the engine's round: ``lax.scan`` over
chunks of ``--chunk`` clients, ``vmap`` over a chunk, client ``c``'s key
``fold_in(fold_in(root, round), c)``, and every client's privatized update decoded and added
to a running sum (the aggregate). The update of each client is a fixed dense vector of norm
2C (so clipping is active). Rows:

* ``gaussian``: the engine's Gaussian randomizer (clip + ``N(0, σ²I)``, ldpsim's fast sampler),
  the release summed (its decoder is the identity).
* ``laplace``: the engine's Laplace randomizer (context).
* ``privunit2``, ``privunitg``, ``duchi``: ``decode(privatize(key, update).report)`` summed.
* ``signds``: MindSpore's SignDS at its defaults (k = 617, ε = 100), the reconstruction summed.
* ``fastprojunit`` (k = 1,000: PrivUnitG in a randomized-Hadamard projection) and, with
  ``--only projunit``, ``projunit`` (a Gaussian projection: k·d normals per client, twice).

Each kernel is compiled and run once (warm-up), then the rows are timed round-robin
``--repeats`` times (median), so load on a shared machine hits every row alike; the ratio
column is to ``gaussian`` in the same run. Target: ≤ 3× Gaussian.

Measured (2 CPU cores shared with about eight other jobs, so single figures move by ±50 %;
three runs of 64 clients, chunk 16, ε = 4, medians of 7-9 repeats), ratio to Gaussian:
privunit2 0.72-1.31, privunitg 0.78-1.07, duchi 0.91-1.47, signds 0.53-1.10, laplace 0.90-1.93;
Gaussian 1.6-2.8 ms per client. Every randomizer is within the 3x target: each draws at most
one d-vector of ldpsim's fast normals (SignDS none: one ``top_k`` of the update and O(k + h²)
work) plus a few reductions. Before its rewrite SignDS (three full-size ``top_k`` and d
uniforms) measured 8.5x. FastProjUnit (k = 1,000; 32 clients, chunk 16, one run at load 7,
`--only privunitg,fastprojunit`): 4.2x Gaussian, 5.2x PrivUnitG, over the 3x target: per
client it draws 65,536 random words, a ``top_k`` and a 2^16-point Walsh–Hadamard transform
on each side (client and server), 8 CPU-ms in all; with the sort-based row draw it had
before (``jax.random.choice(replace=False)``) it was 99 CPU-ms.

Usage::

    PYTHONPATH=. python benchmarks/randomizers.py [--clients 64] [--chunk 16] [--dim 61706] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from ldpsim._src import _xla
from ldpsim._src.privacy.randomizers import mechanism


def _factories(dim: int, epsilon: float) -> dict:
    return {
        "gaussian": lambda: mechanism.gaussian(epsilon=epsilon, delta=1e-5, clip=1.0),
        "laplace": lambda: mechanism.laplace(epsilon=epsilon, clip=1.0),
        "privunit2": lambda: mechanism.make("privunit2", epsilon=epsilon, dim=dim),
        "privunitg": lambda: mechanism.make("privunitg", epsilon=epsilon, dim=dim),
        "duchi": lambda: mechanism.make("duchi", epsilon=epsilon, dim=dim),
        "signds": lambda: mechanism.make("signds", dim=dim),
        "fastprojunit": lambda: mechanism.make("fastprojunit", epsilon=epsilon, dim=dim),
        # k·d Gaussian draws per client, twice: ~2 CPU-s per client at LeNet-5 size, so only
        # on request (--only projunit).
        "projunit": lambda: mechanism.make("projunit", epsilon=epsilon, dim=dim),
    }


def kernel(mech, clients: int, chunk: int, dim: int):
    """``(root, update) -> aggregate``: scan over chunks, vmap within a chunk."""
    params = mech.params

    def one(key, update):
        rel = mech.privatize(key, update, params)
        return mech.decode(rel.report, params)

    def step(total, ids, root, update):
        keys = jax.vmap(lambda c: jax.random.fold_in(jax.random.fold_in(root, 0), c))(ids)
        out = jax.vmap(one, in_axes=(0, None))(keys, update)
        return total + jnp.sum(out, axis=0)

    def run(root, update):
        ids = jnp.arange(clients, dtype=jnp.int32).reshape(clients // chunk, chunk)
        total, _ = jax.lax.scan(lambda t, c: (step(t, c, root, update), None),
                                jnp.zeros((dim,), jnp.float32), ids)
        return total

    return _xla.jit(run)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--dim", type=int, default=61_706)
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated rows (gaussian always runs)")
    args = ap.parse_args(argv)
    if args.clients % args.chunk:
        raise SystemExit("--clients must be a multiple of --chunk")
    names = [n for n in _factories(args.dim, args.epsilon) if n != "projunit"]
    if args.only:
        names = ["gaussian"] + [n for n in args.only.split(",") if n != "gaussian"]
    facts = _factories(args.dim, args.epsilon)
    update = jnp.full((args.dim,), 2.0 / args.dim**0.5, jnp.float32)
    root = jax.random.key(0)
    kernels, compile_s = {}, {}
    for name in names:
        mech = facts[name]()
        f = kernel(mech, args.clients, args.chunk, args.dim)
        t = time.perf_counter()
        f(root, update).block_until_ready()
        compile_s[name] = time.perf_counter() - t
        kernels[name] = f
    times = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names:
            t = time.perf_counter()
            kernels[name](jax.random.fold_in(root, r + 1), update).block_until_ready()
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["gaussian"]) / args.clients
    print(f"# {args.clients} clients x d = {args.dim}, chunk {args.chunk}, eps = {args.epsilon}, "
          f"median of {args.repeats}, backend {jax.default_backend()}")
    print(f"{'randomizer':<12} {'ms/client':>10} {'x gaussian':>11} {'first call s':>13}")
    for name in names:
        per = statistics.median(times[name]) / args.clients
        print(f"{name:<12} {per * 1e3:>10.3f} {per / base:>11.2f} {compile_s[name]:>13.2f}")


if __name__ == "__main__":
    main()
