"""ldpsim vs pfl-research on one workload, measured in the same run.

What a user choosing a simulator for a large local-DP federated simulation wants to know:
how many client-updates per second each one does on *this* machine, for the *same* work.
The frameworks run in alternating fresh worker processes (interleaved, so that the other
load on a shared machine hits both alike); each worker times several rounds after a warm-up
and reports its median; the table gives, per configuration and cohort size ``m``, the
median over the interleaved repeats, and the ratio to the fastest pfl-research
configuration within each repeat (median, min and max over repeats).  The 1-minute load average is read before and after
every measurement and printed with the table, with the CPU model.

Workload identity (the same in every framework)
------------------------------------------------
* Model: LeNet-5, 28×28×1 inputs, 10 classes.  conv 6@5×5 'SAME' (zero-padding 2) → ReLU →
  max-pool 2×2 → conv 16@5×5 'VALID' → ReLU → max-pool 2×2 → flatten 400 → dense 120 →
  ReLU → dense 84 → ReLU → dense 10; every layer has a bias.  **61,706 parameters** in both:
  ldpsim ``get_model("lenet5")`` (flax; conv1 156, conv2 2,416, fc1 48,120, fc2 10,164,
  fc3 850) and the ``torch.nn`` module :class:`TorchLeNet5` below (``Conv2d(1, 6, 5,
  padding=2)``, ``Conv2d(6, 16, 5)``, ``Linear(400, 120)``, ``Linear(120, 84)``,
  ``Linear(84, 10)``); each worker counts its own parameters and prints them.
  Initialisation differs (flax LeCun-normal vs torch's default), which does not change
  the cost.  Float32 everywhere.
* Data: a base pool of 4,096 random 28×28 uint8 images (scaled to [0, 1]) with random
  labels in 0..9 (``numpy.random.default_rng(0)``); a population of ``max(m, 10,000)``
  clients, each holding **32 examples** drawn from the pool; a round samples ``m``
  distinct clients.  ldpsim: :class:`ldpsim.data.SampledPopulation` (class-balanced IID,
  generated inside the round); pfl: ``pfl.data.FederatedDataset`` whose
  ``make_dataset_fn(user_id)`` indexes the user's 32 rows out of the pool (a torch
  gather, inside the round).
* Local training: plain SGD, **learning rate 0.05**, **batch 16**, **2 local steps** (one
  epoch over the 32 examples; ldpsim permutes the examples, pfl takes them in order),
  mean softmax cross-entropy over the batch.  ldpsim: ``local_steps=2, batch_size=16``;
  pfl: ``NNTrainHyperParams(local_num_epochs=1, local_batch_size=16,
  local_learning_rate=0.05)``.  Each worker prints the local steps per client it
  actually ran (pfl: calls of the module's ``loss`` / m; ldpsim: the engine's
  ``num_local_steps``).
* Privacy: each client's update Δ = W_local − W_global is clipped to **L2 norm C = 1**
  (global norm over all tensors) and **Gaussian noise N(0, σ²), σ = 0.25** is added to
  every coordinate, per client (local DP).  ldpsim: ``make_round_fn(mechanism=
  "gaussian")`` with ``RoundHyper.create(sigma=0.25, clip=1.0)``; pfl:
  ``GaussianMechanism(clipping_bound=1.0, relative_noise_stddev=0.25)`` (std =
  bound × relative std = 0.25) as the local postprocessor of its ``SimulatedBackend``.
* Aggregation: sum of the noisy updates, averaged (every client has 32 examples, so
  example weighting = uniform), server SGD step with learning rate 1 (FedAvg).

What is timed: one whole training round, wall clock.  ldpsim: one call of the jitted
``make_round_fn`` round (client data generation, local training, clip, noise, aggregate,
server update), blocked until ready, state fed forward.  pfl: ``backend.gather_results``
(cohort sampling, user datasets, local training, model difference, clip, noise, sum,
metrics bookkeeping) plus ``FederatedAveraging.process_aggregated_statistics`` (average,
central optimizer step).  Not timed: process start, imports, building the data, and the
warm-up rounds (ldpsim's compilation happens there; the warm-up is the same number of
rounds for every framework); no evaluation in any round.

Threads and devices (each framework may use every core of the machine; configurations):
* ``pfl-1thr``: one process, ``torch.set_num_threads(1)`` (and ``OMP_NUM_THREADS=1``).
* ``pfl-2thr``: one process, 2 intra-op threads, ``OMP_WAIT_POLICY=PASSIVE``.  (torch's
  default OpenMP spin-waiting collapses when the cores are shared with other work: on
  this machine at load ~18, m = 10, a round took 15 s with the default policy, 4 s with
  ``ACTIVE``, 0.6 s with ``PASSIVE`` and 0.3 s with one thread.  Not in the default set:
  one thread is faster here.)
* ``pfl-2proc``: pfl's own multi-process simulation, ``torchrun --standalone
  --nproc_per_node 2`` (gloo all-reduce of the sums), one thread per process; each process
  trains its share of the cohort.  pfl's way of using two cores.
* ``fedjax``: FedJAX's ``for_each_client`` (its default backend: one jitted call per
  batch, a Python loop over clients) on one JAX CPU device, FedAvg written with
  ``jax.tree_util`` and the clip + noise added in ``client_final`` (FedJAX has no DP
  mechanism; see :func:`fedjax_worker`).  FedJAX 0.0.17 (2023, the last release) still
  imports with JAX 0.10, but its ``tree_util`` helpers, and so its own ``fed_avg``, call
  the removed ``jax.tree_map``.
* ``flower-2actor``: Flower's Ray simulation with two one-CPU actors, its legacy
  ``FedAvg`` strategy and its ``LocalDpMod`` (clip + Gaussian noise, ε chosen so that
  σ = 0.25); see :func:`flower_worker`.  Not in the default set: its start-up (Ray, 10,000
  virtual clients) takes minutes per worker.
* ``ldpsim-1thr``: one JAX CPU device, one thread (``XLA_FLAGS=
  --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``), the analogue of
  ``pfl-1thr``.
* ``ldpsim-1dev``: one JAX CPU device (XLA's CPU runtime runs its intra-op pool over
  every core).
* ``ldpsim-2dev``: ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` and
  ``make_round_fn(devices=2)``: the cohort is split over two host devices.
The ratio column compares with the *fastest* pfl configuration of the same repeat, so
pfl is always credited with its best use of the cores.  Nothing pins threads to cores;
the machine's other load is recorded (1-minute load average before and after each
worker and each timed round), not controlled.

Install (a separate environment; CI never installs the ``peers`` extra)::

    python3 -m venv /tmp/peers-venv && . /tmp/peers-venv/bin/activate
    pip install torch==2.13.0          # the CPU build (plain `torch` pulls a CUDA build)
    pip install -e '.[peers]'

Usage::

    python benchmarks/peers/run.py                     # m = 100, 1,000; 3 repeats
    python benchmarks/peers/run.py --ms 10 --configs pfl-1thr pfl-2thr pfl-2proc \\
        ldpsim-1dev ldpsim-2dev --output /tmp/m10.md
    python benchmarks/peers/run.py --ms 100 --repeats 1 --configs pfl-1thr ldpsim-1dev
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
POOL, EXAMPLES, BATCH, STEPS, SIGMA, CLIP, LR, SERVER_LR = 4096, 32, 16, 2, 0.25, 1.0, 0.05, 1.0
MIN_POPULATION = 10_000
LENET5_PARAMS = 61_706
CONFIGS = ("pfl-1thr", "pfl-2thr", "pfl-2proc", "fedjax", "flower-2actor", "ldpsim-1thr",
           "ldpsim-1dev", "ldpsim-2dev")
DEFAULT_CONFIGS = ("pfl-1thr", "pfl-2proc", "ldpsim-1thr", "ldpsim-1dev", "ldpsim-2dev")


def _pool():
    """The base images (uint8, NHWC) and labels every framework draws its clients from."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(POOL, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, size=POOL)
    return x, y


def _population(m: int) -> int:
    return max(m, MIN_POPULATION)


def _load() -> float:
    return os.getloadavg()[0]


def _time_rounds(step, warmup: int, rounds: int, barrier=None) -> dict:
    """``warmup`` untimed calls of ``step(r)``, then ``rounds`` timed ones."""
    for r in range(warmup):
        step(r)
    times, loads = [], []
    for r in range(warmup, warmup + rounds):
        if barrier is not None:
            barrier()
        before = _load()
        t0 = time.perf_counter()
        step(r)
        times.append(time.perf_counter() - t0)
        loads.append((before, _load()))
    return {"times": times, "loads": loads}


# ----------------------------------------------------------------------------- ldpsim


def ldpsim_setup(m: int, devices: int = 1):
    """The ldpsim side of the workload: ``(round_fn, state, pop, ids, mask, hyper, info)``.

    ``round_fn(state, pop, round_idx, ids, mask, hyper) -> (state, metrics)`` is the
    engine's round, not yet jitted; ``info`` holds the parameter count and the local
    steps each client runs (what the docstring states)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ldpsim._src.fl import client as client_lib
    from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
    from ldpsim.data import SampledPopulation
    from ldpsim.models import get_model, num_params

    x, y = _pool()
    pop = SampledPopulation.create(x, y, num_clients=_population(m),
                                   examples_per_client=EXAMPLES, seed=0)
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    rng = np.random.default_rng(1)
    ids = jnp.asarray(np.sort(rng.choice(pop.num_clients, size=m, replace=False)), jnp.int32)
    mask = jnp.ones(m, bool)
    hyper = RoundHyper.create(sigma=SIGMA, clip=CLIP, client_lr=LR, server_lr=SERVER_LR)
    state = init_state(params, jax.random.key(1))
    round_fn = make_round_fn(apply_fn=model.apply, mechanism="gaussian", client_optimizer="sgd",
                             server_optimizer="fedavg", local_steps=STEPS, batch_size=BATCH,
                             devices=devices)
    info = {"params": num_params(params),
            "local_steps": client_lib.num_local_steps(max_examples=EXAMPLES, batch_size=BATCH,
                                                      local_steps=STEPS, local_epochs=None),
            "examples_per_client": pop.max_examples, "sigma": float(hyper.privacy.scale),
            "clip": float(hyper.clip), "client_lr": float(hyper.client_lr)}
    return round_fn, state, pop, ids, mask, hyper, info


def ldpsim_worker(m: int, devices: int, warmup: int, rounds: int) -> dict:
    import jax
    import jax.numpy as jnp

    from ldpsim._src import _xla
    from ldpsim._src.fl import sharding

    round_fn, state, pop, ids, mask, hyper, info = ldpsim_setup(m, devices)
    fn = _xla.jit(round_fn)
    state, pop = sharding.replicate((state, pop), devices)   # as simulate() does
    box = [state]

    def step(r):
        new_state, metrics = fn(box[0], pop, jnp.int32(r), ids, mask, hyper)
        box[0] = jax.block_until_ready(new_state)

    t0 = time.perf_counter()
    step(0)
    first = time.perf_counter() - t0     # compile + one round
    out = _time_rounds(lambda r: step(r + 1), warmup - 1, rounds)
    return {**out, **info, "first_round_s": first, "devices": jax.device_count(),
            "versions": {"jax": jax.__version__}}


# ----------------------------------------------------------------------------- pfl


def _torch_lenet5():
    import torch
    from torch import nn

    class TorchLeNet5(nn.Module):
        """LeNet-5 as ldpsim's (61,706 parameters), with pfl's ``loss``/``metrics``."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(400, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)
            self.loss_calls = 0

        def forward(self, x):
            f = nn.functional
            x = f.max_pool2d(f.relu(self.conv1(x)), 2)
            x = f.max_pool2d(f.relu(self.conv2(x)), 2)
            x = torch.flatten(x, 1)
            return self.fc3(f.relu(self.fc2(f.relu(self.fc1(x)))))

        def loss(self, x, y, eval=False):  # noqa: A002 (pfl's signature)
            self.eval() if eval else self.train()
            self.loss_calls += 1
            return nn.functional.cross_entropy(self(x), y)

        @torch.no_grad()
        def metrics(self, x, y, eval=True):  # noqa: A002
            from pfl.metrics import Weighted

            self.eval()
            loss = nn.functional.cross_entropy(self(x), y, reduction="sum").item()
            return {"loss": Weighted(loss, len(y))}

    return TorchLeNet5()


def pfl_worker(m: int, threads: int, warmup: int, rounds: int) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    import pfl
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNTrainHyperParams
    from pfl.internal.ops.selector import get_default_framework_module as get_ops
    from pfl.model.pytorch import PyTorchModel
    from pfl.privacy import GaussianMechanism

    x, y = _pool()
    base_x = torch.from_numpy(x.transpose(0, 3, 1, 2).astype(np.float32) / 255.0)  # NCHW
    base_y = torch.from_numpy(y.astype(np.int64))
    n_users = _population(m)
    rows = torch.from_numpy(np.random.default_rng(2).integers(0, POOL, (n_users, EXAMPLES)))

    def make_dataset(user_id):
        idx = rows[user_id]
        return Dataset(raw_data=[base_x[idx], base_y[idx]], user_id=user_id)

    train_data = FederatedDataset(make_dataset, get_user_sampler("minimize_reuse",
                                                                 list(range(n_users))))
    torch.manual_seed(0)
    module = _torch_lenet5()
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=SERVER_LR))
    mechanism = GaussianMechanism(clipping_bound=CLIP, relative_noise_stddev=SIGMA)
    backend = SimulatedBackend(training_data=train_data, val_data=train_data,
                               postprocessors=[mechanism])
    algorithm = FederatedAveraging()
    algo_params = NNAlgorithmParams(central_num_iterations=10**9, evaluation_frequency=10**9,
                                    train_cohort_size=m, val_cohort_size=None)
    train_params = NNTrainHyperParams(local_num_epochs=1, local_learning_rate=LR,
                                      local_batch_size=BATCH)
    dist = get_ops().distributed
    users = []

    def step(r):
        # iteration r + 1: evaluation happens only at iterations divisible by 10**9.
        contexts, _, _ = algorithm.get_next_central_contexts(model, r + 1, algo_params,
                                                             train_params, None)
        ctx = contexts[0]
        assert not ctx.do_evaluation and ctx.cohort_size == m
        stats, metrics = backend.gather_results(model, algorithm, central_context=ctx)
        algorithm.process_aggregated_statistics(ctx, metrics, model, stats)
        users.append(next(v for k, v in metrics if "number of devices" in str(k)))

    barrier = None
    if dist.world_size > 1:
        barrier = torch.distributed.barrier
    calls0 = module.loss_calls
    out = _time_rounds(step, warmup, rounds, barrier)
    n_params = sum(p.numel() for p in module.parameters())
    users_per_round = float(users[-1].overall_value if hasattr(users[-1], "overall_value")
                            else users[-1])
    local_calls = (module.loss_calls - calls0) / (warmup + rounds)   # this process's
    return {**out, "params": n_params, "rank": dist.global_rank, "world": dist.world_size,
            "users_per_round": users_per_round,
            "local_steps": local_calls * dist.world_size / users_per_round,
            "threads": torch.get_num_threads(), "sigma": mechanism.relative_noise_stddev * CLIP,
            "clip": CLIP, "client_lr": LR,
            "versions": {"pfl": getattr(pfl, "__version__", _version("pfl")),
                         "torch": torch.__version__}}


# ----------------------------------------------------------------------------- FedJAX


def fedjax_worker(m: int, warmup: int, rounds: int) -> dict:
    """FedJAX FedAvg with the local randomizer added in ``client_final`` (FedJAX has no DP
    mechanism of its own): clip the update to global L2 norm C, add N(0, σ²) per coordinate
    with the client's own PRNG key.  Clients come from FedJAX's
    ``UniformGetClientSampler`` over an ``InMemoryFederatedData`` of the population;
    ``for_each_client`` runs its default backend (one jitted step per batch, a Python loop
    over clients)."""
    import fedjax
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import numpy as np

    x, y = _pool()
    x = x.astype(np.float32) / 255.0
    n_users = _population(m)
    rows = np.random.default_rng(2).integers(0, POOL, (n_users, EXAMPLES))
    data = fedjax.InMemoryFederatedData(
        {f"{u:06d}".encode(): {"x": x[rows[u]], "y": y[rows[u]].astype(np.int32)}
         for u in range(n_users)})

    def forward(batch):
        h = jax.nn.relu(hk.Conv2D(6, 5, padding="SAME", name="conv1")(batch["x"]))
        h = hk.max_pool(h, window_shape=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="VALID")
        h = jax.nn.relu(hk.Conv2D(16, 5, padding="VALID", name="conv2")(h))
        h = hk.max_pool(h, window_shape=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="VALID")
        h = hk.Flatten()(h)
        h = jax.nn.relu(hk.Linear(120, name="fc1")(h))
        h = jax.nn.relu(hk.Linear(84, name="fc2")(h))
        return hk.Linear(10, name="fc3")(h)

    model = fedjax.create_model_from_haiku(
        transformed_forward_pass=hk.transform(forward),
        sample_batch={"x": np.zeros((1, 28, 28, 1), np.float32), "y": np.zeros(1, np.int32)},
        train_loss=lambda b, logits: fedjax.metrics.unreduced_cross_entropy_loss(b["y"], logits))
    grad_fn = fedjax.model_grad(model)
    client_opt = fedjax.optimizers.sgd(LR)
    server_opt = fedjax.optimizers.sgd(SERVER_LR)
    steps = []

    def client_init(server_params, rng):
        return {"params": server_params, "opt": client_opt.init(server_params), "rng": rng,
                "steps": 0}

    def client_step(state, batch):
        rng, use = jax.random.split(state["rng"])
        grads = grad_fn(state["params"], batch, use)
        opt, params = client_opt.apply(grads, state["opt"], state["params"])
        return {"params": params, "opt": opt, "rng": rng, "steps": state["steps"] + 1}

    def client_final(server_params, state):
        delta = jax.tree_util.tree_map(lambda a, b: a - b, server_params, state["params"])
        norm = fedjax.tree_util.tree_l2_norm(delta)
        scale = jnp.minimum(1.0, CLIP / jnp.maximum(norm, 1e-12))
        leaves, tdef = jax.tree_util.tree_flatten(delta)
        keys = jax.random.split(state["rng"], len(leaves))
        noisy = [leaf * scale + SIGMA * jax.random.normal(k, leaf.shape, leaf.dtype)
                 for leaf, k in zip(leaves, keys)]
        return jax.tree_util.tree_unflatten(tdef, noisy), state["steps"]

    train = fedjax.for_each_client(client_init, client_step, client_final)
    params = model.init(jax.random.key(0))
    box = {"params": params, "opt": server_opt.init(params)}
    sampler = fedjax.client_samplers.UniformGetClientSampler(data, num_clients=m, seed=0)

    def step(r):
        sampler.set_round_num(r)
        clients = [(cid, cds.shuffle_repeat_batch(batch_size=BATCH, num_epochs=1, seed=r), rng)
                   for cid, cds, rng in sampler.sample()]
        # jax.tree_util, not fedjax.tree_util: FedJAX 0.0.17's tree_zeros_like and
        # tree_weight call jax.tree_map, which JAX has removed (so does its fed_avg).
        tmap = jax.tree_util.tree_map
        total = tmap(jnp.zeros_like, box["params"])
        weight = 0.0
        for _, (noisy, n_steps) in train(box["params"], clients):
            total = tmap(lambda a, b: a + EXAMPLES * b, total, noisy)
            weight += EXAMPLES
            steps.append(int(n_steps))
        mean = tmap(lambda a: a / weight, total)
        box["opt"], box["params"] = server_opt.apply(mean, box["opt"], box["params"])
        jax.block_until_ready(box["params"])

    t0 = time.perf_counter()
    step(0)
    first = time.perf_counter() - t0
    out = _time_rounds(lambda r: step(r + 1), warmup - 1, rounds)
    return {**out, "params": sum(int(np.prod(a.shape))
                                 for a in jax.tree_util.tree_leaves(box["params"])),
            "local_steps": float(np.mean(steps)), "first_round_s": first,
            "versions": {"fedjax": _version("fedjax"), "dm-haiku": _version("dm-haiku"),
                         "jax": jax.__version__}}


# ----------------------------------------------------------------------------- Flower


def flower_worker(m: int, warmup: int, rounds: int, actors: int) -> dict:
    """Flower's simulation engine (Ray): ``run_simulation`` over ``max(m, 10,000)`` virtual
    clients, the legacy ``FedAvg`` strategy sampling ``m`` of them per round, a
    ``NumPyClient`` training the torch LeNet-5 (one thread; one module kept per Ray actor),
    and Flower's ``LocalDpMod`` clipping the update to C and adding N(0, σ²) per coordinate
    (its σ = sensitivity·sqrt(2 ln(1.25/δ))/ε, with ε chosen so that σ = 0.25).  ``actors``
    Ray actors of one CPU each train clients in parallel.  A round is timed from the
    strategy's ``configure_fit`` to the end of its ``aggregate_fit``."""
    import logging
    import math

    import numpy as np
    import torch

    torch.set_num_threads(1)
    import flwr
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import LocalDpMod
    from flwr.common import logger as flwr_logger
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    flwr_logger.FLOWER_LOGGER.setLevel(logging.WARNING)
    x, y = _pool()
    base_x = torch.from_numpy(x.transpose(0, 3, 1, 2).astype(np.float32) / 255.0)
    base_y = torch.from_numpy(y.astype(np.int64))
    n_users = _population(m)
    rows = torch.from_numpy(np.random.default_rng(2).integers(0, POOL, (n_users, EXAMPLES)))
    torch.manual_seed(0)
    init = [p.detach().numpy().copy() for p in _torch_lenet5().state_dict().values()]
    n_params = sum(a.size for a in init)
    cache = {}

    class Client(NumPyClient):
        def __init__(self, pid):
            self.pid = pid

        def fit(self, parameters, config):
            torch.set_num_threads(1)
            module = cache.get("module")
            if module is None:
                module = cache["module"] = _torch_lenet5()
            with torch.no_grad():
                for p, a in zip(module.state_dict().values(), parameters):
                    p.copy_(torch.from_numpy(a))
            opt = torch.optim.SGD(module.parameters(), lr=LR)
            idx = rows[self.pid]
            xs, ys = base_x[idx], base_y[idx]
            steps = 0
            for start in range(0, EXAMPLES, BATCH):
                opt.zero_grad()
                module.loss(xs[start:start + BATCH], ys[start:start + BATCH]).backward()
                opt.step()
                steps += 1
            out = [p.detach().numpy().copy() for p in module.state_dict().values()]
            return out, EXAMPLES, {"steps": steps}

    def client_fn(context):
        flwr_logger.FLOWER_LOGGER.setLevel(logging.WARNING)   # in the Ray actor too
        return Client(int(context.node_config["partition-id"])).to_client()

    delta = 1e-5
    epsilon = math.sqrt(2 * math.log(1.25 / delta)) * CLIP / SIGMA   # σ = 0.25 for C = 1
    client_app = ClientApp(client_fn=client_fn,
                           mods=[LocalDpMod(clipping_norm=CLIP, sensitivity=CLIP,
                                            epsilon=epsilon, delta=delta)])
    marks = {"start": [], "end": [], "loads": [], "steps": []}

    class TimedFedAvg(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            marks["loads"].append(_load())
            marks["start"].append(time.perf_counter())
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            if failures:
                raise RuntimeError(f"{len(failures)} Flower clients failed: {failures[:1]}")
            out = super().aggregate_fit(server_round, results, failures)
            marks["end"].append(time.perf_counter())
            marks["steps"].extend(r.metrics["steps"] for _, r in results)
            marks["users"] = len(results)
            return out

    strategy = TimedFedAvg(fraction_fit=m / n_users, fraction_evaluate=0.0,
                           min_fit_clients=m, min_evaluate_clients=0,
                           min_available_clients=n_users,
                           initial_parameters=ndarrays_to_parameters(init))

    def server_fn(context):
        return ServerAppComponents(strategy=strategy,
                                   config=ServerConfig(num_rounds=warmup + rounds))

    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=client_app,
                   num_supernodes=n_users,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": actors,
                                                 "include_dashboard": False}})
    times = [e - s for s, e in zip(marks["start"], marks["end"])][warmup:]
    if len(times) != rounds or marks.get("users") != m:
        raise RuntimeError(f"Flower ran {len(marks['end'])} rounds, {marks.get('users')} "
                           f"clients in the last: expected {warmup + rounds} and {m}")
    loads = [(a, b) for a, b in zip(marks["loads"][warmup:], marks["loads"][warmup + 1:]
                                   + [_load()])]
    return {"times": times, "loads": loads, "params": n_params,
            "local_steps": float(np.mean(marks["steps"])), "actors": actors,
            "sigma": CLIP * math.sqrt(2 * math.log(1.25 / delta)) / epsilon,
            "versions": {"flwr": _version("flwr"), "ray": _version("ray"),
                         "torch": torch.__version__}}


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


# ----------------------------------------------------------------------------- driver


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _spawn(config: str, m: int, warmup: int, rounds: int, timeout: float) -> dict | None:
    """Run one measurement in fresh worker process(es); the worker's spec travels in the
    environment (``LDPSIM_PEERS_WORKER``), so torchrun's own options never clash with it."""
    ncores = os.cpu_count() or 1
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for var in ("XLA_FLAGS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY"):
        env.pop(var, None)
    spec = {"m": m, "warmup": warmup, "rounds": rounds}
    script = str(Path(__file__).resolve())
    cmd = [sys.executable, script]
    if config.startswith("pfl-") and config.endswith("thr"):      # pfl-1thr, pfl-2thr
        spec.update(kind="pfl", threads=int(config[4:-3]))
        env["OMP_NUM_THREADS"] = str(spec["threads"])
        if spec["threads"] > 1:
            env["OMP_WAIT_POLICY"] = "PASSIVE"   # see the docstring
    elif config.startswith("pfl-"):                                # pfl-2proc
        procs = int(config[4:].removesuffix("proc"))
        spec.update(kind="pfl", threads=max(1, ncores // procs))
        env["OMP_NUM_THREADS"] = str(spec["threads"])
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={procs}", script]
    elif config == "fedjax":
        spec.update(kind="fedjax")
    elif config.startswith("flower-"):                             # flower-2actor
        spec.update(kind="flower", actors=int(config[7:].removesuffix("actor")))
    elif config == "ldpsim-1thr":
        spec.update(kind="ldpsim", devices=1)
        env["XLA_FLAGS"] = ("--xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1")
    else:                                                          # ldpsim-Kdev
        devices = int(config.split("-")[1].removesuffix("dev"))
        spec.update(kind="ldpsim", devices=devices)
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["LDPSIM_PEERS_WORKER"] = json.dumps(spec)
    before = _load()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                             check=True, cwd=REPO)
    except subprocess.TimeoutExpired:
        print(f"  timed out: {config} m={m}", file=sys.stderr)
        return None
    except subprocess.CalledProcessError as err:
        print(f"  failed: {config} m={m}\n{err.stderr[-3000:]}", file=sys.stderr)
        return None
    rows = []
    for line in out.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    row = next((r for r in rows if isinstance(r, dict) and r.get("rank", 0) == 0), None)
    if row is None:
        print(f"  no result: {config} m={m}\n{out.stderr[-3000:]}", file=sys.stderr)
        return None
    row.update(config=config, m=m, load_before=before, load_after=_load(),
               seconds=statistics.median(row["times"]))
    row["rate"] = m / row["seconds"]
    return row


def _fmt_range(values: list[float], fmt: str = ".2f") -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{format(min(values), fmt)}–{format(max(values), fmt)}"


def report(rows: list[dict], args, started: str) -> str:
    """The markdown table (and its header lines) for the measured ``rows``."""
    lines = []
    versions = {}
    for r in rows:
        versions.update(r.get("versions", {}))
    versions["ldpsim"] = _version("ldpsim")
    versions["python"] = platform.python_version()
    loads = [v for r in rows for v in (r["load_before"], r["load_after"])] or [_load()]
    lines.append(f"Started {started}; CPU: {cpu_model()}, {os.cpu_count()} cores visible; "
                 + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".")
    lines.append(f"1-minute load average over the run: {min(loads):.1f}–{max(loads):.1f} "
                 f"(median {statistics.median(loads):.1f}); per worker {args.warmup} warm-up "
                 f"round(s) then max({args.rounds}, ⌈{args.min_updates}/m⌉) timed rounds "
                 f"(median); {args.repeats} interleaved repeats, fresh processes.")
    lines.append("")
    lines.append("| config | m | client-updates/s | range over repeats | x best pfl | "
                 "range | s/round | params | local steps | load before→after |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by: dict = {}
    for r in rows:
        by.setdefault((r["config"], r["m"]), []).append(r)
    for m in args.ms:
        best_pfl: dict = {}     # repeat -> fastest pfl configuration's rate
        for r in rows:
            if r["m"] == m and r["config"].startswith("pfl"):
                best_pfl[r["repeat"]] = max(best_pfl.get(r["repeat"], 0.0), r["rate"])
        for config in args.configs:
            rs = by.get((config, m))
            if not rs:
                lines.append(f"| {config} | {m:,} | failed | | | | | | | |")
                continue
            rates = [r["rate"] for r in rs]
            ratios = [r["rate"] / best_pfl[r["repeat"]] for r in rs if r["repeat"] in best_pfl]
            ratio = f"{statistics.median(ratios):.2f}" if ratios else "n/a"
            lb = statistics.median(r["load_before"] for r in rs)
            la = statistics.median(r["load_after"] for r in rs)
            lines.append(
                f"| {config} | {m:,} | {statistics.median(rates):.0f} "
                f"| {_fmt_range(rates, '.0f')} | {ratio} "
                f"| {_fmt_range(ratios) if ratios else ''} "
                f"| {statistics.median(r['seconds'] for r in rs):.3f} | {rs[0]['params']:,} "
                f"| {rs[0]['local_steps']:g} | {lb:.1f}→{la:.1f} |")
    lines.append("")
    lines.append("client-updates/s: m / (median seconds per round of one worker), then the "
                 "median over repeats; x best pfl: the rate over the fastest pfl "
                 "configuration's in the same repeat and m, median (and range) over repeats; "
                 "load: the 1-minute load average, median over repeats.")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ms", type=int, nargs="+", default=[100, 1000], help="cohort sizes")
    p.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS), choices=CONFIGS,
                   help="what to run (default: %(default)s); ratios are to the fastest pfl "
                        "configuration of the same repeat")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats (fresh workers)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds per worker (>= 1)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per worker (median)")
    p.add_argument("--min-updates", type=int, default=300,
                   help="time at least this many client updates per worker (more rounds "
                        "at small m)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker")
    p.add_argument("--output", type=Path, default=None, help="also write the table here")
    args = p.parse_args(argv)
    if args.warmup < 1:
        p.error("--warmup must be >= 1 (ldpsim compiles in the first round)")

    spec = os.environ.get("LDPSIM_PEERS_WORKER")
    if spec:
        spec = json.loads(spec)
        if spec["kind"] == "ldpsim":
            row = ldpsim_worker(spec["m"], spec["devices"], spec["warmup"], spec["rounds"])
        elif spec["kind"] == "fedjax":
            row = fedjax_worker(spec["m"], spec["warmup"], spec["rounds"])
        elif spec["kind"] == "flower":
            row = flower_worker(spec["m"], spec["warmup"], spec["rounds"], spec["actors"])
        else:
            row = pfl_worker(spec["m"], spec["threads"], spec["warmup"], spec["rounds"])
        if row.get("rank", 0) == 0:   # under torchrun, one line from rank 0 only
            print(json.dumps(row), flush=True)
        return 0

    if any(c.startswith("pfl") for c in args.configs) and _version("pfl") == "not installed":
        p.error("pfl is not installed: see the Install section of this script's docstring")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    for rep in range(args.repeats):
        for m in args.ms:
            # Alternate the order every repeat so neither framework always goes first.
            order = args.configs if rep % 2 == 0 else args.configs[::-1]
            for config in order:
                rounds = max(args.rounds, -(-args.min_updates // m))
                row = _spawn(config, m, args.warmup, rounds, args.timeout)
                if row is None:
                    continue
                row["repeat"] = rep
                rows.append(row)
                if args.output:
                    with open(args.output.with_suffix(".jsonl"), "a") as log:
                        log.write(json.dumps(row) + "\n")
                print(f"repeat {rep + 1} m={m:>5} {config:<12} {row['rate']:8.1f} "
                      f"client-updates/s  load {row['load_before']:.1f}→"
                      f"{row['load_after']:.1f}", file=sys.stderr, flush=True)
    table = report(rows, args, started)
    cmd = "python benchmarks/peers/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"\n`{cmd.strip()}`\n\n{table}")
    if args.output:
        args.output.write_text(f"`{cmd.strip()}`\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
