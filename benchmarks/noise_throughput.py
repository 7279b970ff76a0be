"""Throughput of per-client N(0, 1) and Laplace noise: ldpsim's samplers vs jax.random.

Workload: ``--clients`` clients × ``--dim`` coordinates (default 1,000 × 61,706, the
LeNet-5 update), client ``c`` drawing from ``fold_in(fold_in(root, round), c)``
inside one jitted ``vmap`` (key derivation included). Methods run round-robin,
``--repeats`` times after a warm-up call each, so that load on a shared machine
hits every method alike; the table shows the median and the ratios to
``jax.random.normal`` (threefry) and to ldpsim's default ``"fast"`` sampler measured in the
same run, in wall-clock time and in process CPU time (all threads; steadier than wall time
when other jobs share the cores).

``--set samplers`` times only the samplers the privacy accounting distinguishes
(:func:`ldpsim._src.privacy.noise.sampling.sampler_model`): the N(0, 1) impls ``"fast"``,
``"tail"`` (96-bit radius uniform, reach 11.60), ``"icdf"`` and ``jax.random.normal``, and
the standard Laplace samplers ``"bits"`` (:func:`ldpsim._src.privacy.noise.sampling.laplace`) and
``jax.random.laplace``. ``--set all`` (default) adds the rows below.

Rows:
  * ``jax.random.normal threefry``: the baseline (default key impl).
  * ``jax.random.normal rbg`` / ``unsafe_rbg``: JAX's other key impls.
  * ``jax.random.bits threefry``: raw 32-bit words, no transform (context).
  * ``ldpsim fast normal (default)``: :func:`ldpsim._src.privacy.noise.sampling.normal`,
    ``impl="fast"`` (Threefry-2x32-20 + Box–Muller), the engine's default via
    :func:`ldpsim._src.privacy.noise.mechanisms.gaussian_noise`.
  * ``ldpsim icdf normal``: ``impl="icdf"`` (same bits, 64-bit inverse CDF).
  * ``ldpsim tail normal``: ``impl="tail"`` (``"fast"`` plus a second cipher block for the
    low 64 bits of the radius uniform).
  * ``ldpsim laplace bits`` / ``jax.random.laplace threefry``: the Laplace samplers.
  * ``ldpsim gaussian_noise`` : the engine's entry point on a LeNet-5-shaped
    pytree (10 leaves) when ``--dim`` is 61,706, so per-leaf overheads show.
  * ``... then sum over clients``: the noise consumed by a reduction (as in an
    aggregate), for both the baseline and the default sampler.
  * ``... one client at a time (scan + running sum)``: the CPU engine's pattern (chunk 1:
    ``lax.scan`` over the cohort, each client's noise added to the running sum), for both.

Compilation: the ``jax.random`` rows use plain ``jax.jit`` (JAX's defaults); the ldpsim
rows use :func:`ldpsim._src._xla.jit`, the way every ldpsim kernel is compiled (on CPU: XLA's
``xla_cpu_prefer_vector_width=512``, which lets AVX-512 machines run the cipher and the
transform 16 lanes wide). Two extra rows show each side under the other's options, so the
ratio is not an artefact of the options: ``jax.random.normal`` gains nothing from them.

Profile (jax 0.10.2, 2-core AMD EPYC with AVX-512): XLA splits the fused loop in
two partitions (``outer_dimension_partitions``), one per core, and vectorises it
8 lanes wide. The inner loop of ``icdf`` had ~190 instructions per 8 samples,
about 80 of them the 20 cipher rounds; cipher alone and icdf transform alone
each took about half of its time. ``fast`` has ~180 instructions per 8 samples
of which ~40 are register moves, and a transform without the two-branch
polynomial evaluation.

Usage::

    PYTHONPATH=. python benchmarks/noise_throughput.py [--clients 1000] [--dim 61706] [--repeats 5]
    PYTHONPATH=. python benchmarks/noise_throughput.py --set samplers --clients 64 --repeats 7
    PYTHONPATH=. python benchmarks/noise_throughput.py --set samplers --clients 1 --dim 1000000
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from ldpsim._src import _xla
from ldpsim._src.privacy.noise import mechanisms, sampling


def _client_keys(root, rnd, clients):
    k = jax.random.fold_in(root, rnd)
    return jax.vmap(lambda c: jax.random.fold_in(k, c))(jnp.arange(clients, dtype=jnp.uint32))


def _methods(clients: int, dim: int, which: str = "all"):
    def per_client(draw, impl_name=None):
        def f(root, rnd):
            return jax.vmap(draw)(_client_keys(root, rnd, clients))

        return f

    def scanned(draw):
        # The CPU engine's pattern (chunk 1): clients one at a time inside lax.scan, each
        # client's noise added to a running sum (ldpsim._src.fl.simulate accumulates the noised
        # updates this way), so the noise is consumed without being stored.
        def f(root, rnd):
            keys = _client_keys(root, rnd, clients)
            z = jnp.zeros((dim,), jnp.float32)
            return jax.lax.scan(lambda acc, k: (acc + draw(k), None), z, keys)[0]

        return f

    def summed(draw):
        def f(root, rnd):
            return jnp.sum(jax.vmap(draw)(_client_keys(root, rnd, clients)), axis=0)

        return f

    ref = lambda k: jax.random.normal(k, (dim,))  # noqa: E731
    fast = lambda k: sampling.normal(k, (dim,))  # noqa: E731
    icdf = lambda k: sampling.normal(k, (dim,), impl="icdf")  # noqa: E731
    tail = lambda k: sampling.normal(k, (dim,), impl="tail")  # noqa: E731
    lap_ref = lambda k: jax.random.laplace(k, (dim,))  # noqa: E731
    lap_bits = lambda k: sampling.laplace(k, (dim,))  # noqa: E731
    if which == "samplers":
        return {
            "ldpsim fast normal (default)": (per_client(fast), "threefry2x32"),
            "ldpsim tail normal": (per_client(tail), "threefry2x32"),
            "ldpsim icdf normal": (per_client(icdf), "threefry2x32"),
            "jax.random.normal threefry": (per_client(ref), "threefry2x32"),
            "ldpsim laplace bits (default)": (per_client(lap_bits), "threefry2x32"),
            "jax.random.laplace threefry": (per_client(lap_ref), "threefry2x32"),
        }
    if dim == 61706:  # LeNet-5 leaves: conv1, conv2, fc1, fc2, fc3 (kernel, bias)
        shapes = [(5, 5, 1, 6), (6,), (5, 5, 6, 16), (16,), (400, 120), (120,),
                  (120, 84), (84,), (84, 10), (10,)]
    else:
        shapes = [(dim,)]
    tree = [jnp.zeros(s, jnp.float32) for s in shapes]
    assert sum(x.size for x in tree) == dim
    tree_noise = lambda k: mechanisms.gaussian_noise(k, tree, 1.0)  # noqa: E731
    return {
        "jax.random.normal threefry": (per_client(ref), "threefry2x32"),
        "jax.random.normal rbg": (per_client(ref), "rbg"),
        "jax.random.normal unsafe_rbg": (per_client(ref), "unsafe_rbg"),
        "jax.random.bits threefry (uint32)": (
            per_client(lambda k: jax.random.bits(k, (dim,))),
            "threefry2x32",
        ),
        "ldpsim fast normal (default)": (per_client(fast), "threefry2x32"),
        "ldpsim icdf normal": (per_client(icdf), "threefry2x32"),
        "ldpsim tail normal": (per_client(tail), "threefry2x32"),
        "ldpsim laplace bits (default)": (per_client(lap_bits), "threefry2x32"),
        "jax.random.laplace threefry": (per_client(lap_ref), "threefry2x32"),
        "ldpsim mechanisms.gaussian_noise (pytree, default)": (
            per_client(tree_noise), "threefry2x32"),
        "jax.random.normal threefry, summed over clients": (summed(ref), "threefry2x32"),
        "ldpsim fast normal, summed over clients": (summed(fast), "threefry2x32"),
        "jax.random.normal threefry, one client at a time (scan + running sum)": (
            scanned(ref), "threefry2x32"),
        "ldpsim fast normal, one client at a time (scan + running sum)": (
            scanned(fast), "threefry2x32"),
        "jax.random.normal threefry [ldpsim compile options]": (per_client(ref), "threefry2x32"),
        "ldpsim fast normal [plain jax.jit]": (per_client(fast), "threefry2x32"),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=61706)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--round", type=int, default=3)
    parser.add_argument("--set", choices=("all", "samplers"), default="all")
    args = parser.parse_args(argv)

    n = args.clients * args.dim
    methods = _methods(args.clients, args.dim, args.set)
    compiled = {}
    for name, (fn, impl) in methods.items():
        root = jax.random.key(0, impl=impl)
        plain = (name.startswith("jax.random") and "[ldpsim" not in name) or "[plain" in name
        jitted = jax.jit(fn) if plain else _xla.jit(fn)
        jax.block_until_ready(jitted(root, args.round))  # compile + warm-up
        compiled[name] = (jitted, root)

    times: dict[str, list[float]] = {name: [] for name in compiled}
    cpu: dict[str, list[float]] = {name: [] for name in compiled}
    for rep in range(args.repeats):
        for name, (jitted, root) in compiled.items():
            # let the previous call's worker threads go idle first (XLA's pool spins briefly
            # after a call; that CPU time would otherwise be charged to the next method)
            time.sleep(0.05)
            c0, t0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(jitted(root, args.round + 1 + rep))
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)

    base = statistics.median(times["jax.random.normal threefry"])
    fast = statistics.median(times["ldpsim fast normal (default)"])
    fast_cpu = statistics.median(cpu["ldpsim fast normal (default)"])
    print(
        f"\nper-client noise: {args.clients} clients x {args.dim} coordinates, "
        f"median of {args.repeats} round-robin repeats after warm-up, "
        f"jax {jax.__version__}, {jax.devices()[0].platform}\n"
    )
    print("| method | M samples/s | speed vs threefry normal | time / ldpsim fast "
          "| CPU time / ldpsim fast | median s | median CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, ts in times.items():
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        print(f"| {name} | {n / med / 1e6:.1f} | {base / med:.2f} | {med / fast:.2f} "
              f"| {med_cpu / fast_cpu:.2f} | {med:.3f} | {med_cpu:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
