"""The seed-000 client shape: many clients with 3 examples each, this tree against another
commit and pfl-research, measured in the same run.

Workload (``experiments/seed000_converged.toml``'s clients): LeNet-5 (61,706 parameters),
28x28x1 inputs, 10 classes; a population of 20,000 clients holding **3 examples** each
(random uint8 images, random labels, a :class:`~ldpsim.data.PaddedPopulation` as the
MNIST split of that experiment is); every sampled client runs **3 local SGD steps of
batch 3** (lr 0.1) from the global model, clips its update to L2 norm C = 1 and
privatizes it per client: ``gaussian`` (N(0, 0.25^2) on every coordinate) or
``privunitg`` (PrivUnitG, Asi, Feldman & Talwar 2022, calibrated to eps = 10 for
d = 61,706, decoded by the server), or only clips it: ``aggregate`` (the server draws the
clients' Gaussian noise sum once, ``noise_mode = "aggregate"``, the converged grid's
setting); FedAvg with server lr 2, m = 1,000 and 10,000 clients
per round, one host device. ``--shape 32`` runs instead the workload of
``benchmarks/throughput.py`` (32 examples, 2 steps of batch 16, lr 0.05, server lr 1).

Rows:

* ``new``: the engine of this tree (``make_round_fn``, jitted with ldpsim's XLA options,
  the backend's default chunk), one round per call, state fed forward.
* ``old``: the same worker code run against the tree of ``--ref`` (a temporary
  ``git worktree``), i.e. that commit's engine.
* ``pfl``: pfl-research (``pfl[pytorch]``, its ``SimulatedBackend`` with its
  ``GaussianMechanism`` as the local postprocessor, one process and one thread, the
  LeNet-5 of ``benchmarks/peers/run.py``; 3 examples, batch 3, 3 local epochs = 3 steps),
  run by the interpreter given with ``--pfl-python`` (a separate environment, see
  ``benchmarks/peers/README.md``). pfl has no PrivUnitG, so it has Gaussian rows only.

How it is timed: every configuration lives in a long-lived worker process per tree
(compiled once; a fresh process per tree, so two versions of ldpsim never share one);
the driver asks the workers in turn, order alternating, ``--pairs`` times; each request
runs one untimed round, then ``--rounds`` timed rounds and reports their median CPU
time (``time.process_time``: every thread of the worker) and wall time per client
update.  The table gives the median over requests, and ``new/old`` and ``x pfl`` as the
median of the ratios of the requests made back to back (same minutes, same load), CPU
time first (the figure to read on a shared machine), then the wall-clock rate.

Speed of light: one client's training FLOPs (XLA's cost analysis of ``local_update``) at
the float32 matmul peak measured in the same run (a 2048^2 ``jnp.dot``), plus d
per-client Gaussian samples at the measured rate of ldpsim's default sampler (PrivUnitG
draws a d-dimensional Gaussian direction too; its few scalar draws are left out).

Usage::

    python benchmarks/small_clients.py --ref 09b1de0 --pfl-python /tmp/peers-venv/bin/python
    python benchmarks/small_clients.py --ref 09b1de0 --ms 1000 --mechanisms gaussian \\
        --pairs 5 --rounds 3
    python benchmarks/small_clients.py --ref 09b1de0 --shape 32 --ms 1000 --mechanisms gaussian
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POPULATION, POOL = 20_000, 4096
SHAPES = {  # examples per client, batch, local steps, client lr, server lr
    "small": dict(examples=3, batch=3, steps=3, lr=0.1, server_lr=2.0),
    "32": dict(examples=32, batch=16, steps=2, lr=0.05, server_lr=1.0),
}
SIGMA, CLIP, PRIVUNIT_EPS = 0.25, 1.0, 10.0


# ----------------------------------------------------------------------------- ldpsim


def _ldpsim_data(shape: dict):
    import numpy as np

    rng = np.random.default_rng(0)
    e = shape["examples"]
    x = rng.integers(0, 256, size=(POPULATION, e, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, size=(POPULATION, e))
    return x, y


class _Ldpsim:
    """One tree's engine: builds and runs (mechanism, m) configurations."""

    def __init__(self, shape: dict):
        import jax
        import jax.numpy as jnp
        import numpy as np

        from ldpsim.data import PaddedPopulation
        from ldpsim.models import get_model

        self.shape = shape
        x, y = _ldpsim_data(shape)
        # uint8 / 255 as floats: from_arrays stores them compactly (uint8) again.
        self.pop = PaddedPopulation.from_arrays(x.astype(np.float32) / 255.0, y,
                                                np.full(POPULATION, shape["examples"]),
                                                num_classes=10)
        self.model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
        self.params = self.model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
        self.built: dict = {}

    def build(self, mech: str, m: int):
        import jax
        import jax.numpy as jnp
        import numpy as np

        from ldpsim._src import _xla
        from ldpsim._src.fl import modes
        from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
        from ldpsim.models import num_params

        key = (mech, m)
        if key in self.built:
            return self.built[key]
        s = self.shape
        mode = mech
        if mech in ("gaussian", "aggregate"):
            hyper = RoundHyper.create(sigma=SIGMA, clip=CLIP, client_lr=s["lr"],
                                      server_lr=s["server_lr"])
            if mech == "aggregate":   # the clients clip; the server draws the noise sum
                mode = modes.aggregated(modes.local("gaussian"))
        else:
            import ldpsim.mechanism as mechanism_lib   # public: the same in older trees

            lm = mechanism_lib.make(mech, epsilon=PRIVUNIT_EPS, dim=num_params(self.params),
                                    clip=CLIP)
            hyper = RoundHyper.create(clip=CLIP, client_lr=s["lr"], server_lr=s["server_lr"],
                                      privacy=modes.ReportHyper(lm.params))
        fn = _xla.jit(make_round_fn(apply_fn=self.model.apply, mechanism=mode,
                                   local_steps=s["steps"], batch_size=s["batch"]))
        rng = np.random.default_rng(m)
        ids = jnp.asarray(np.sort(rng.choice(POPULATION, m, replace=False)), jnp.int32)
        mask = jnp.ones(m, bool)
        state = init_state(self.params, jax.random.key(1))
        t0, c0 = time.perf_counter(), time.process_time()
        state = jax.block_until_ready(fn(state, self.pop, jnp.int32(0), ids, mask, hyper)[0])
        entry = {"fn": fn, "state": state, "ids": ids, "mask": mask, "hyper": hyper,
                 "round": 1, "first_wall_s": time.perf_counter() - t0,
                 "first_cpu_s": time.process_time() - c0}
        self.built[key] = entry
        return entry

    def run(self, mech: str, m: int, rounds: int) -> dict:
        import jax
        import jax.numpy as jnp

        e = self.build(mech, m)
        walls, cpus = [], []
        for i in range(rounds + 1):   # one untimed round first (caches, thread pool)
            r = jnp.int32(e["round"])
            t0, c0 = time.perf_counter(), time.process_time()
            e["state"] = jax.block_until_ready(
                e["fn"](e["state"], self.pop, r, e["ids"], e["mask"], e["hyper"])[0])
            if i:
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
            e["round"] += 1
        return {"wall_ms": 1e3 * statistics.median(walls) / m,
                "cpu_ms": 1e3 * statistics.median(cpus) / m,
                "first_wall_s": e["first_wall_s"], "first_cpu_s": e["first_cpu_s"]}

    def profile(self, mech: str, m: int, rounds: int) -> dict:
        """One round's XLA CPU thunks under ``jax.profiler``: time per client by layer."""
        import jax
        import jax.numpy as jnp

        e = self.build(mech, m)
        args = (e["state"], self.pop, jnp.int32(e["round"]), e["ids"], e["mask"], e["hyper"])
        hlo = e["fn"].lower(*args).compile().as_text()
        with tempfile.TemporaryDirectory() as d:
            c0 = time.process_time()
            with jax.profiler.trace(d, create_perfetto_trace=True):
                for _ in range(rounds):
                    r = jnp.int32(e["round"])
                    e["state"] = jax.block_until_ready(
                        e["fn"](e["state"], self.pop, r, e["ids"], e["mask"], e["hyper"])[0])
                    e["round"] += 1
            cpu = time.process_time() - c0
            events = _trace_events(d)
        return _thunk_profile(events, hlo, m * rounds) | {"profiled_cpu_ms": 1e3 * cpu / (m * rounds)}


#: Layer tags read from an HLO instruction's op_name (first match wins).
_TAGS = (("cohort sum (noise, clip fused in)", ("while/body/closed_call/add",)),
         ("noise", ("threefry", "random_", "sampling", "normal", "privunit", "box_muller", "erf")),
         ("conv1", ("conv1",)), ("conv2", ("conv2",)), ("fc1", ("fc1",)), ("fc2", ("fc2",)),
         ("fc3", ("fc3",)), ("relu/pool", ("reduce_max", "relu", "max", "pool", "_relu")),
         ("loss", ("softmax", "log_softmax", "logsumexp", "cross_entropy", "exp")),
         ("step/update", ("_where", "select_n", "sub", "add", "mul")))


def _trace_events(d: str) -> list:
    import glob
    import gzip

    path = glob.glob(os.path.join(d, "**", "*perfetto_trace.json.gz"), recursive=True)[0]
    data = json.load(gzip.open(path))
    return data["traceEvents"] if isinstance(data, dict) else data


def _thunk_profile(events: list, hlo: str, updates: int) -> dict:
    """Sum the thunks' durations by layer tag and by instruction (us per client update)."""
    import re
    from collections import Counter

    info, comp_ops, current = {}, {}, None
    for line in hlo.splitlines():   # a fusion without op_name: its computation's op_names
        head = re.match(r"%([\w.-]+) ", line)
        if head:
            current = head.group(1)
        op = re.search(r'op_name="([^"]+)"', line)
        if current and op:
            comp_ops.setdefault(current, op.group(1))
        mt = re.match(r"\s*(?:ROOT )?%([\w.-]+) = (\S+) ([\w-]+)\(", line)
        if mt:
            called = re.search(r"calls=%([\w.-]+)", line)
            name = op.group(1) if op else comp_ops.get(called.group(1), "") if called else ""
            info[mt.group(1)] = (mt.group(2), name)
    by_tag, by_name, count = Counter(), Counter(), Counter()
    for ev in events:
        name = ev.get("name", "")
        if ev.get("ph") != "X" or "dur" not in ev or name not in info:
            continue
        shape, op = info[name]
        tag = next((t for t, keys in _TAGS
                    if any(op.endswith(k) if k.endswith("/add") else k in op for k in keys)),
                   "other")
        by_tag[tag] += ev["dur"]
        by_name[name] += ev["dur"]
        count[tag] += 1
    total = sum(by_tag.values())
    return {"thunk_us": total / updates,
            "tags": [(t, v / updates, count[t] / updates) for t, v in by_tag.most_common()],
            "top": [(n, v / updates, info[n][0], info[n][1][-70:])
                    for n, v in by_name.most_common(25)]}


def machine_limits(shape: dict) -> dict:
    """Measured matmul peak and sampling rate, one client's training FLOPs, d."""
    import jax
    import jax.numpy as jnp

    from ldpsim._src import _xla
    from ldpsim._src.fl import client as client_lib
    from ldpsim._src.privacy.noise import sampling
    from ldpsim.models import get_model, num_params

    def best(fn, n):
        fn()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    a = jnp.ones((2048, 2048), jnp.float32)
    mm = jax.jit(lambda a: a @ a)
    peak = 2 * 2048 ** 3 / best(lambda: mm(a).block_until_ready(), 7)
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    d = num_params(params)
    normal = _xla.jit(lambda k: sampling.normal(k, (100, d)))
    rate = 100 * d / best(lambda: normal(jax.random.key(0)).block_until_ready(), 5)
    e = shape["examples"]
    x = jnp.zeros((e, 28, 28, 1))
    y = jnp.zeros((e,), jnp.int32)
    one = jax.jit(lambda p, x, y, k: client_lib.local_update(
        p, x, y, jnp.int32(e), apply_fn=model.apply,
        optimizer=client_lib.client_optimizer("sgd", shape["lr"]),
        batch_size=shape["batch"], key=k, local_steps=shape["steps"])[0])
    cost = one.lower(params, x, y, jax.random.key(0)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    flops = float(cost.get("flops", float("nan")))
    return {"matmul_gflops": peak / 1e9, "normal_msamples": rate / 1e6,
            "train_mflops": flops / 1e6, "d": d,
            "sol_rate": 1.0 / (flops / peak + d / rate)}


# ----------------------------------------------------------------------------- pfl


def _peers_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("peers_run", ROOT / "benchmarks" / "peers"
                                                  / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Pfl:
    """pfl-research on the same workload (one process, one thread, Gaussian only)."""

    def __init__(self, shape: dict):
        import numpy as np
        import torch

        torch.set_num_threads(1)
        self.shape = shape
        x, y = _ldpsim_data(shape)
        e = shape["examples"]
        self.x = torch.from_numpy(x.reshape(POPULATION * e, 28, 28, 1).transpose(0, 3, 1, 2)
                                  .astype(np.float32) / 255.0)
        self.y = torch.from_numpy(y.reshape(-1).astype(np.int64))
        self.built: dict = {}

    def build(self, m: int):
        if m in self.built:
            return self.built[m]
        import torch
        from pfl.aggregate.simulate import SimulatedBackend
        from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
        from pfl.data.dataset import Dataset
        from pfl.data.federated_dataset import FederatedDataset
        from pfl.data.sampling import get_user_sampler
        from pfl.hyperparam import NNTrainHyperParams
        from pfl.model.pytorch import PyTorchModel
        from pfl.privacy import GaussianMechanism

        s, e = self.shape, self.shape["examples"]

        def make_dataset(uid):
            sl = slice(uid * e, (uid + 1) * e)
            return Dataset(raw_data=[self.x[sl], self.y[sl]], user_id=uid)

        data = FederatedDataset(make_dataset, get_user_sampler("minimize_reuse",
                                                               list(range(POPULATION))))
        torch.manual_seed(0)
        module = _peers_module()._torch_lenet5()
        model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                             central_optimizer=torch.optim.SGD(module.parameters(),
                                                               lr=s["server_lr"]))
        backend = SimulatedBackend(training_data=data, val_data=data, postprocessors=[
            GaussianMechanism(clipping_bound=CLIP, relative_noise_stddev=SIGMA)])
        # One epoch is ceil(examples / batch) steps: local epochs give the step count.
        epochs = s["steps"] // -(-e // s["batch"])
        entry = dict(model=model, module=module, backend=backend,
                     algorithm=FederatedAveraging(),
                     algo=NNAlgorithmParams(central_num_iterations=10 ** 9,
                                            evaluation_frequency=10 ** 9,
                                            train_cohort_size=m, val_cohort_size=None),
                     train=NNTrainHyperParams(local_num_epochs=epochs,
                                              local_learning_rate=s["lr"],
                                              local_batch_size=s["batch"]),
                     round=1)
        self.built[m] = entry
        return entry

    def _round(self, e):
        ctxs, _, _ = e["algorithm"].get_next_central_contexts(
            e["model"], e["round"], e["algo"], e["train"], None)
        stats, metrics = e["backend"].gather_results(e["model"], e["algorithm"],
                                                     central_context=ctxs[0])
        e["algorithm"].process_aggregated_statistics(ctxs[0], metrics, e["model"], stats)
        e["round"] += 1

    def run(self, mech: str, m: int, rounds: int) -> dict:
        e = self.build(m)
        calls0 = e["module"].loss_calls
        walls, cpus = [], []
        for i in range(rounds + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            self._round(e)
            if i:
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
        steps = (e["module"].loss_calls - calls0) / ((rounds + 1) * m)
        return {"wall_ms": 1e3 * statistics.median(walls) / m,
                "cpu_ms": 1e3 * statistics.median(cpus) / m, "local_steps": steps}


def serve(kind: str, shape: dict) -> int:
    """Answer JSON requests on stdin, one per line, with one JSON line on stdout."""
    engine = _Pfl(shape) if kind == "pfl" else _Ldpsim(shape)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("limits"):
            out = machine_limits(shape)
        elif req.get("profile"):
            out = engine.profile(req["mech"], req["m"], req["rounds"])
        else:
            out = engine.run(req["mech"], req["m"], req["rounds"])
        print(json.dumps(out), flush=True)
    return 0


# ----------------------------------------------------------------------------- driver


def _print_profile(args, shape: dict) -> int:
    mech, m = args.mechanisms[0], args.ms[0]
    w = _Worker("new", [sys.executable, str(Path(__file__).resolve()), "--serve", "ldpsim",
                        "--shape", args.shape], dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        plain = w.ask(mech=mech, m=m, rounds=args.rounds)
        prof = w.ask(profile=True, mech=mech, m=m, rounds=args.rounds)
    finally:
        w.close()
    print(f"{mech}, m = {m:,}, {args.rounds} rounds, load {_load():.1f}: {plain['cpu_ms']:.3f} "
          f"CPU-ms per update unprofiled, {prof['profiled_cpu_ms']:.3f} profiled; thunks "
          f"{prof['thunk_us']:.0f} us per update (profiled: read the shares)")
    print("\n| layer (op_name) | thunk us / update | share | thunks / update |\n|---|---:|---:|---:|")
    for tag, us, n in prof["tags"]:
        print(f"| {tag} | {us:.1f} | {us / prof['thunk_us']:.1%} | {n:.1f} |")
    print("\n| thunk | us / update | shape | op_name (tail) |\n|---|---:|---|---|")
    for name, us, shp, op in prof["top"]:
        print(f"| {name} | {us:.1f} | `{shp}` | {op} |")
    return 0


class _Worker:
    def __init__(self, name: str, cmd: list[str], env: dict):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=ROOT)
        self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited ({self.proc.wait()})")
        return json.loads(line)

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def _load() -> float:
    return os.getloadavg()[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--ref", default=None, help="older commit to compare against")
    p.add_argument("--ms", type=int, nargs="+", default=[1000, 10_000])
    p.add_argument("--mechanisms", nargs="+", default=["gaussian", "privunitg"],
                   choices=["gaussian", "aggregate", "privunitg"])
    p.add_argument("--shape", default="small", choices=sorted(SHAPES))
    p.add_argument("--pairs", type=int, default=5, help="interleaved requests per config")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per request")
    p.add_argument("--pfl-python", default=None,
                   help="interpreter of an environment with pfl[pytorch] (else no pfl rows)")
    p.add_argument("--pfl-max-m", type=int, default=1000, help="largest m for pfl")
    p.add_argument("--profile", action="store_true",
                   help="instead: this tree's round under jax.profiler, thunk time per client "
                        "update by layer (first --ms, first --mechanisms, --rounds rounds)")
    p.add_argument("--serve", choices=["ldpsim", "pfl"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shape = SHAPES[args.shape]
    if args.serve:
        return serve(args.serve, shape)
    if args.profile:
        return _print_profile(args, shape)

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    loads = [_load()]
    script = str(Path(__file__).resolve())
    base = [script, "--serve", "ldpsim", "--shape", args.shape]
    workers: dict[str, _Worker] = {}
    tmp = tempfile.TemporaryDirectory()
    old_tree = None
    try:
        workers["new"] = _Worker("new", [sys.executable, *base],
                                 dict(os.environ, PYTHONPATH=str(ROOT)))
        if args.ref:
            old_tree = Path(tmp.name) / "old"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach",
                            str(old_tree), args.ref], check=True, capture_output=True)
            workers["old"] = _Worker("old", [sys.executable, *base],
                                     dict(os.environ, PYTHONPATH=str(old_tree)))
        if args.pfl_python:
            try:
                workers["pfl"] = _Worker("pfl", [args.pfl_python, script, "--serve", "pfl",
                                                 "--shape", args.shape],
                                         dict(os.environ, OMP_NUM_THREADS="1"))
            except RuntimeError as err:
                print(f"pfl not run: {err}", file=sys.stderr)
        limits = workers["new"].ask(limits=True)
        results: dict = {}
        for mech in args.mechanisms:
            for m in args.ms:
                names = [n for n in ("old", "new", "pfl") if n in workers
                         and not (n == "pfl" and (mech != "gaussian" or m > args.pfl_max_m))]
                for i in range(args.pairs):
                    order = names if i % 2 == 0 else names[::-1]
                    for n in order:
                        r = workers[n].ask(mech=mech, m=m, rounds=args.rounds)
                        r["pair"], r["load"] = i, _load()
                        loads.append(r["load"])
                        results.setdefault((mech, m, n), []).append(r)
                        print(f"{mech} m={m} pair {i + 1} {n}: {r['cpu_ms']:.3f} CPU-ms, "
                              f"{r['wall_ms']:.3f} wall-ms per update, load {r['load']:.1f}",
                              file=sys.stderr, flush=True)
    finally:
        for w in workers.values():
            w.close()
        if old_tree is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(old_tree)], check=False, capture_output=True)
        tmp.cleanup()

    s = shape
    print(f"\nLeNet-5 (d = {limits['d']:,}), {s['examples']} examples/client, {s['steps']} "
          f"local steps of batch {s['batch']}; started {started}; old = {args.ref}")
    print(f"machine: matmul {limits['matmul_gflops']:.0f} GFLOP/s, noise "
          f"{limits['normal_msamples']:.0f} M samples/s, training {limits['train_mflops']:.1f} "
          f"MFLOP/client -> speed of light {limits['sol_rate']:.0f} client-updates/s; "
          f"1-minute load {min(loads):.1f}-{max(loads):.1f} (median "
          f"{statistics.median(loads):.1f}); {args.pairs} requests x {args.rounds} rounds\n")
    print("| mechanism | m | engine | CPU-ms/update | updates/s (wall) | of SOL | new/old CPU "
          "| new/old wall | new x pfl CPU | new x pfl wall | first round s (CPU) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def paired(a, b, key):
        ra = {r["pair"]: r[key] for r in results.get(a, [])}
        rb = {r["pair"]: r[key] for r in results.get(b, [])}
        ratios = [rb[i] / ra[i] for i in ra if i in rb]
        if not ratios:
            return ""
        return (f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")

    for mech in args.mechanisms:
        for m in args.ms:
            for n in ("old", "new", "pfl"):
                rs = results.get((mech, m, n))
                if not rs:
                    continue
                cpu = statistics.median(r["cpu_ms"] for r in rs)
                wall = statistics.median(r["wall_ms"] for r in rs)
                extra = [""] * 4
                if n == "new":
                    extra = [paired((mech, m, "new"), (mech, m, "old"), "cpu_ms"),
                             paired((mech, m, "new"), (mech, m, "old"), "wall_ms"),
                             paired((mech, m, "new"), (mech, m, "pfl"), "cpu_ms"),
                             paired((mech, m, "new"), (mech, m, "pfl"), "wall_ms")]
                first = (f"{rs[0]['first_cpu_s']:.0f}" if "first_cpu_s" in rs[0] else "")
                print(f"| {mech} | {m:,} | {n} | {cpu:.3f} | {1e3 / wall:.0f} | "
                      f"{1e3 / wall / limits['sol_rate']:.1%} | " + " | ".join(extra)
                      + f" | {first} |")
    print("\nnew/old and x pfl: the other engine's time per update over the new one's "
          "(> 1: the new engine is faster), median (range) over the back-to-back requests; "
          "CPU: process time of all threads per update; wall: wall-clock time per update.")
    if "pfl" in workers:
        steps = {r.get("local_steps") for k, rs in results.items() if k[2] == "pfl" for r in rs}
        print(f"pfl local steps per client (counted): {sorted(steps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
