"""Exact discrete Gaussian sampler: this tree against a reference commit, in one run.

Workload: one client's integer noise at LeNet-5 size, ``--dim`` draws (default 65,536 = 2^16,
d = 61,706 padded to a power of two), from :func:`ldpsim._src.privacy.discrete.samplers.
discrete_gaussian` at each ``--sigma``; and ``--clients`` clients of it vmapped in one jit.
The reference implementation is the file ``ldpsim/_src/privacy/discrete/samplers.py`` of
``--ref`` (loaded from git into its own module, with the rest of ldpsim from this tree).

Each method is compiled and run once (the first call: compilation + one run, CPU and wall
seconds), then timed ``--repeats`` times round-robin with the other (so machine load hits
both alike); the table shows medians of process CPU time (all threads; steadier than wall
time on a shared machine) and of wall time, and old/new ratios.

    PYTHONPATH=$PWD python benchmarks/discrete_samplers.py --ref 7f55849 --repeats 5
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time

import jax

from ldpsim._src.privacy.discrete import samplers as new
from ldpsim._src.privacy.discrete.spec import discrete_gaussian_spec


def _load_ref(commit: str):
    src = subprocess.run(["git", "show", f"{commit}:ldpsim/_src/privacy/discrete/samplers.py"],
                         check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("_ref_samplers", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, f"{commit}:samplers.py", "exec"), mod.__dict__)
    return mod


def _time(fn, key):
    c0, w0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(fn(key))
    return time.process_time() - c0, time.perf_counter() - w0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="7f55849")
    ap.add_argument("--dim", type=int, default=65_536)
    ap.add_argument("--sigma", type=float, nargs="+", default=[40.0, 3000.0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    ref = _load_ref(args.ref)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, ref {args.ref}, "
          f"dim {args.dim}, repeats {args.repeats}")
    print("| workload | first call old / new (CPU s) | median old (CPU s, wall s) | "
          "median new (CPU s, wall s) | old/new CPU | old/new wall |")
    print("|---|---|---|---|---|---|")
    for sigma in args.sigma:
        spec = discrete_gaussian_spec(sigma)
        shape = (args.dim,)
        keys = jax.random.split(jax.random.key(7), args.clients)
        for label, make in [
            (f"1 client, sigma {sigma:g}",
             lambda m: jax.jit(lambda k: m.discrete_gaussian(k, spec, shape))),
            (f"{args.clients} clients vmapped, sigma {sigma:g}",
             lambda m: jax.jit(jax.vmap(lambda k: m.discrete_gaussian(k, spec, shape)))),
        ]:
            fns = {"old": make(ref), "new": make(new)}
            first = {}
            for name in ("old", "new"):
                first[name] = _time(fns[name], keys[0] if "1 client" in label else keys)[0]
            times = {"old": [], "new": []}
            for r in range(args.repeats):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for name in order:
                    k = jax.random.fold_in(keys[0], r + 1) if "1 client" in label else \
                        jax.vmap(lambda kk: jax.random.fold_in(kk, r + 1))(keys)
                    times[name].append(_time(fns[name], k))
            med = {n: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t))
                   for n, t in times.items()}
            print(f"| {label} | {first['old']:.2f} / {first['new']:.2f} | "
                  f"{med['old'][0]:.3f}, {med['old'][1]:.3f} | {med['new'][0]:.4f}, "
                  f"{med['new'][1]:.4f} | {med['old'][0] / med['new'][0]:.1f} | "
                  f"{med['old'][1] / med['new'][1]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
