"""Per-client random words: ``jax.random.bits`` against ldpsim's ``random_bits``, in one run.

``ldpsim._src.privacy.noise.sampling.random_bits(key, shape)`` returns exactly the words of
``jax.random.bits(key, shape, jnp.uint32)`` (tested bit for bit), computed by an unrolled
Threefry-2x32 that XLA fuses with its consumers; JAX lowers its own Threefry on CPU as a
five-iteration loop. Every row below is compiled twice in one process, once as the tree runs
it (``random_bits``) and once with ``jax.random.bits`` put back in its place at each call site
(the modules' ``random_bits`` names patched while the kernel traces), and the two are timed
round-robin; the ratio is jax / unrolled, CPU time of the process (all threads).

Rows, each per client, ``--clients`` clients in a ``lax.scan`` over chunks of ``--chunk``
vmapped clients with keys ``fold_in(root, c)``:

* ``words``: ``--dim`` words alone (summed, so nothing is dead code);
* ``ddg``, ``skellam``: the distributed discrete mechanisms' client encoding at LeNet-5 size
  (rotation, scaling, conditional rounding, table noise, wrap to 16 bits; d = 61,706 padded
  to 2^16) with the plan of ε = 4 per round, δ = 1e-5, C = 1, m = 1,000;
* ``signds``, ``duchi``, ``privunitg``, ``fastprojunit``: the local randomizers at d = 61,706,
  ``decode(privatize(...))`` summed;
* ``poisson``: DP-SGD's Poisson sampling of 60,000 examples (one step's draw).

    PYTHONPATH=. python benchmarks/random_bits.py [--clients 64] [--chunk 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from ldpsim._src import _xla
from ldpsim._src.privacy.noise import sampling

def _jax_bits(key, shape):
    return jax.random.bits(key, tuple(shape), jnp.uint32)


def _importers() -> list:
    """Every loaded ldpsim module that holds ``random_bits`` under that name (``sampling``
    itself and each ``from ... import random_bits``), after importing the package's modules
    that call it."""
    import importlib
    for name in ("ldpsim._src.privacy.hadamard", "ldpsim._src.privacy.discrete.pipeline",
                 "ldpsim._src.privacy.randomizers.mechanism", "ldpsim._src.fl.dpsgd.batches"):
        importlib.import_module(name)
    return [m for name, m in sorted(sys.modules.items())
            if name.startswith("ldpsim") and getattr(m, "random_bits", None)
            is sampling.random_bits]


@contextlib.contextmanager
def jax_bits_everywhere():
    """Put ``jax.random.bits`` back at every call site of ``random_bits`` (while tracing)."""
    saved = [(m, m.random_bits) for m in _importers()]
    try:
        for m, _ in saved:
            m.random_bits = _jax_bits
        yield
    finally:
        for m, f in saved:
            m.random_bits = f


def _client_rows(dim: int):
    from ldpsim._src.privacy.randomizers import mechanism
    from ldpsim._src.fl.dpsgd.batches import poisson_sample
    rows = {"words": lambda key, u: jnp.sum(sampling.random_bits(key, (dim,)) >> 8)
            .astype(jnp.float32)}
    for law in ("ddg", "skellam"):
        rows[law] = _discrete_row(law, dim)
    for name in ("signds", "duchi", "privunitg", "fastprojunit"):
        mech = (mechanism.make("signds", dim=dim) if name == "signds"
                else mechanism.make(name, epsilon=4.0, dim=dim))
        rows[name] = (lambda mech: lambda key, u: jnp.sum(
            mech.decode(mech.privatize(key, u, mech.params).report, mech.params)))(mech)
    rows["poisson"] = lambda key, u: jnp.sum(poisson_sample(key, 60_000, 256)).astype(jnp.float32)
    return rows


def _discrete_row(law: str, dim: int):
    from ldpsim._src.privacy.discrete import accounting, pipeline
    rep = accounting.bits_needed(law, epsilon=4.0, delta=1e-5, clients=1_000, dim=dim, clip=1.0,
                                 bit_range=(16,), wrap_target=1e-6)
    r = rep.rows[0]
    mech = accounting.DiscreteMechanism(law, 1.0, r.granularity, r.noise, 1_000, dim, 16)
    rot = jax.random.key(99)

    def row(key, u):
        x = jnp.pad(u, (0, mech.padded_dim - dim))
        report, _, _ = pipeline.encode(rot, key, x, mech)
        return jnp.sum(report).astype(jnp.float32)
    return row


def kernel(fn, clients: int, chunk: int, dim: int):
    def run(root, update):
        ids = jnp.arange(clients, dtype=jnp.int32).reshape(clients // chunk, chunk)

        def step(total, c):
            keys = jax.vmap(lambda i: jax.random.fold_in(root, i))(c)
            return total + jnp.sum(jax.vmap(fn, in_axes=(0, None))(keys, update)), None
        return jax.lax.scan(step, jnp.float32(0), ids)[0]
    return _xla.jit(run)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--dim", type=int, default=61_706)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated rows")
    args = ap.parse_args(argv)
    if args.clients % args.chunk:
        raise SystemExit("--clients must be a multiple of --chunk")
    rows = _client_rows(args.dim)
    names = args.only.split(",") if args.only else list(rows)
    unknown = sorted(set(names) - set(rows))
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; choose from {sorted(rows)}")
    update = jnp.full((args.dim,), 2.0 / args.dim**0.5, jnp.float32)
    root = jax.random.key(0)
    kernels, checks = {}, {}
    for name in names:
        for variant in ("jax", "unrolled"):
            f = kernel(rows[name], args.clients, args.chunk, args.dim)
            ctx = jax_bits_everywhere() if variant == "jax" else contextlib.nullcontext()
            with ctx:
                out = f(root, update).block_until_ready()   # traces (and compiles) here
            kernels[name, variant] = f
            checks.setdefault(name, []).append(float(out))
    times = {k: [] for k in kernels}
    for r in range(args.repeats):
        for k, f in kernels.items():
            t = time.process_time()
            f(root, update).block_until_ready()
            times[k].append(time.process_time() - t)
    print(f"# {args.clients} clients, chunk {args.chunk}, d = {args.dim}, median of "
          f"{args.repeats} round-robin repeats, process CPU time, backend {jax.default_backend()}")
    print(f"{'row':<13} {'jax.random.bits':>16} {'random_bits':>12} {'jax/unrolled':>13} "
          f"{'same output':>12}")
    for name in names:
        a = statistics.median(times[name, "jax"]) / args.clients * 1e3
        b = statistics.median(times[name, "unrolled"]) / args.clients * 1e3
        same = checks[name][0] == checks[name][1]
        print(f"{name:<13} {a:>13.3f} ms {b:>9.3f} ms {a / b:>13.2f} {str(same):>12}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
