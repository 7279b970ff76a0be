"""Integer noise samplers: the table sampler against the reference samplers, in one run.

Workload: ``--clients`` clients' integer noise at LeNet-5 size (``--dim`` = 65,536 = 2^16 draws
each, d = 61,706 padded to a power of two), vmapped in one jit, for

* the discrete Gaussian at each ``--sigma``: the table sampler
  (:func:`ldpsim._src.privacy.discrete.samplers.table_sample`, what the ``discrete`` mode runs)
  against the Canonne–Kamath–Steinke rejection sampler (``discrete_gaussian``; with ``--ref
  COMMIT`` the one of that commit's ``samplers.py``, loaded from git, instead of this tree's);
* the Skellam law at each ``--mu``: the table sampler against the float32 Poisson differences
  (``skellam``).

Each method is compiled and run once (the first call: compilation + one run, CPU seconds; the
table's host-side build, cached afterwards, is reported apart), then timed ``--repeats`` times
round-robin with the other (so machine load hits both alike); the table shows medians of
process CPU time (all threads; steadier than wall time on a shared machine) per coordinate,
and old/new ratios.

    PYTHONPATH=$PWD python benchmarks/discrete_samplers.py --repeats 3
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
from ldpsim._src.privacy.discrete import table as T
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
    ap.add_argument("--ref", default=None, help="take the rejection sampler from this commit")
    ap.add_argument("--dim", type=int, default=65_536)
    ap.add_argument("--sigma", type=float, nargs="*", default=[3.8, 280.0, 1500.0])
    ap.add_argument("--mu", type=float, nargs="*", default=[15.0, 1.5e5, 1.3e6])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    ref = _load_ref(args.ref) if args.ref else new
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, reference "
          f"{args.ref or 'this tree'}, dim {args.dim}, clients {args.clients}, "
          f"repeats {args.repeats}")
    print("| workload | table build (CPU s) | first call old / new (CPU s) | "
          "old CPU ns/coord | table CPU ns/coord | old/new CPU |")
    print("|---|---|---|---|---|---|")
    shape = (args.dim,)
    keys = jax.random.split(jax.random.key(7), args.clients)
    coords = args.clients * args.dim
    work = [("ddg", s) for s in args.sigma] + [("skellam", m) for m in args.mu]
    for law, param in work:
        c0 = time.process_time()
        tb = T.noise_table(law, param)
        build = time.process_time() - c0
        if law == "ddg":
            spec = discrete_gaussian_spec(param)
            old = jax.jit(jax.vmap(lambda k: ref.discrete_gaussian(k, spec, shape)))
            label = f"DDG sigma {param:g} (L = {tb.half})"
        else:
            old = jax.jit(jax.vmap(lambda k: new.skellam(k, param, shape)))
            label = f"Skellam mu {param:g} (L = {tb.half})"
        fns = {"old": old, "new": jax.jit(jax.vmap(lambda k: new.table_sample(k, tb, shape)))}
        first = {n: _time(f, keys)[0] for n, f in fns.items()}
        times = {"old": [], "new": []}
        for r in range(args.repeats):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            kr = jax.vmap(lambda kk: jax.random.fold_in(kk, r + 1))(keys)
            for name in order:
                times[name].append(_time(fns[name], kr)[0])
        med = {n: statistics.median(t) for n, t in times.items()}
        print(f"| {label} | {build:.2f} | {first['old']:.2f} / {first['new']:.2f} | "
              f"{med['old'] / coords * 1e9:.0f} | {med['new'] / coords * 1e9:.1f} | "
              f"{med['old'] / med['new']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
