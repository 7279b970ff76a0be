"""The cohort split over devices (ldpsim._src.fl.sharding): same results as one device.

The multi-device checks run in a subprocess whose host platform exposes 4 CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``, set before jax is imported); in
that process the same simulation runs with ``devices=1`` and ``devices=4`` and the
histories must agree to float rounding (client keys come from client ids, not from the
device layout; only the order of the final cross-device sum differs).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim._src.fl import _policy, sharding
from ldpsim._src.fl import round as rnd
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig

REPO = Path(__file__).resolve().parents[2]


def _with_host_devices(n: int) -> str:
    """The suite's XLA options (tests/conftest.py) plus ``n`` host devices, for a child
    process: both sides of a comparison compile with the same options, as cheaply as the
    suite's own programs."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}".strip()

# Run in the 4-device child. m = 10 clients on 4 devices with chunk 2: 3 slots per device,
# 2 chunks of 2 each, so the cohort is padded from 10 to 16 slots (and 10 is not a
# multiple of 4); on one device the same cohort is 5 chunks of 2, no padding.
_CHILD = r"""
import json, math, sys
import jax, jax.numpy as jnp, numpy as np
from ldpsim._src.fl import _policy, round as rnd, sharding, simulate as sim
from ldpsim._src.fl.config import SimulationConfig
from ldpsim.models import get_model

from toy_data import toy_logreg_problem

N = 24
data = toy_logreg_problem(N, n_test=200)
pop = data[0]
cases = {"gaussian": {"epsilon": 20.0, "delta": 1e-3},
         "laplace": {"mechanism": "laplace", "epsilon": 20.0},
         "mindspore": {"privacy_mode": "mindspore"},
         "distributed": {"privacy_mode": "distributed", "noise_multiplier": 0.8,
                         "dropout_rate": 0.25}}
out = {"device_count": jax.device_count(), "histories": {}}
for name, kw in cases.items():
    base = dict(dataset="toy", model="logreg", population=N, clients_per_round=10, rounds=2,
                clip=1.0, local_steps=2, batch_size=4,
                client_lr=0.5, chunk_size=2, seed=3, **kw)
    out["histories"][name] = [
        [{k: v for k, v in row.items() if k != "wall_time"}
         for row in sim.simulate(SimulationConfig(devices=d, **base), data=data)]
        for d in (1, 4)]

# The building block on its own: final parameters, and where the 4-device round ran.
model = get_model("logreg", input_shape=(6,), num_classes=3)
state = rnd.init_state(model.init(jax.random.key(0), jnp.zeros((1, 6))), jax.random.key(1))
hyper = rnd.RoundHyper.create(sigma=0.3, clip=1.0, client_lr=0.5, server_lr=1.0)
ids, mask = sim.sample_cohort(0, 0, N, 10)
params = {}
for d in (1, 4):
    fn = jax.jit(rnd.make_round_fn(apply_fn=model.apply, batch_size=4, chunk_size=2,
                                   local_steps=2, devices=d))
    new, _ = fn(state, pop, jnp.int32(0), ids, mask, hyper)
    params[d] = [np.asarray(leaf).tolist() for leaf in jax.tree_util.tree_leaves(new.params)]
    if d == 4:
        hlo = fn.lower(state, pop, jnp.int32(0), ids, mask, hyper).compile().as_text()
        out["all_reduce"] = "all-reduce" in hlo
        out["out_devices"] = len(jax.tree_util.tree_leaves(new.params)[0].sharding.device_set)
        out["num_partitions"] = int(hlo.split("num_partitions=")[1].split(",")[0].split()[0])
out["params"] = params

# devices=None: all 4 devices, except on CPU above CPU_MULTI_DEVICE_MAX_CLIENTS (one device).
seen = []
orig = sim._compiled
sim._compiled = lambda *a, **k: (seen.append(k.get("devices", 1)), orig(*a, **k))[1]
base = dict(dataset="toy", model="logreg", population=N, clients_per_round=10, rounds=1,
            epsilon=20.0, delta=1e-3, clip=1.0, local_steps=2, batch_size=4, chunk_size=2)
for limit in (10, 9):
    _policy.CPU_MULTI_DEVICE_MAX_CLIENTS = limit
    sim.simulate(SimulationConfig(devices=None, **base), data=data)
sim.simulate(SimulationConfig(devices=4, **base), data=data)   # explicit: always honoured
out["auto_devices"] = seen
print(json.dumps(out))
"""


# One child process runs every multi-device check (a fresh JAX, one compilation per mode):
# the tests reading it are marked slow and run in CI; the fast tier keeps the layout checks.
@pytest.fixture(scope="module")
def four_devices() -> dict:
    env = dict(os.environ, XLA_FLAGS=_with_host_devices(4),
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"),
                                           os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Float rounding: the 4 per-device partial sums are added in another order than one scan
# adds the chunks; float32 sums of ~10 terms differ by a few ulps (observed <= 3e-7
# relative), propagated through 2 rounds. rtol 1e-5 leaves two orders of margin.
RTOL, ATOL = 1e-5, 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("case", ["gaussian", "laplace", "mindspore", "distributed"])
def test_four_devices_give_the_one_device_history(four_devices, case):
    assert four_devices["device_count"] == 4
    one, four = four_devices["histories"][case]
    assert len(one) == len(four) == 2
    for r1, r4 in zip(one, four):
        assert r1.keys() == r4.keys()
        for key, v1 in r1.items():
            v4 = r4[key]
            if isinstance(v1, float) and isinstance(v4, float):
                if math.isnan(v1):
                    assert math.isnan(v4), key
                elif key == "accuracy":   # a test prediction may flip at a tie: 1 example
                    assert abs(v1 - v4) <= 1 / 200 + 1e-9, (key, v1, v4)
                else:
                    assert v4 == pytest.approx(v1, rel=RTOL, abs=ATOL), (key, v1, v4)
            else:  # counts, names, rounds: exact
                assert v1 == v4, (key, v1, v4)
        assert r1["clients"] == 10


@pytest.mark.slow
def test_four_device_round_really_runs_on_four_devices(four_devices):
    assert four_devices["num_partitions"] == 4     # one SPMD program over 4 devices
    assert four_devices["all_reduce"]              # the cross-device psum of the sums
    assert four_devices["out_devices"] == 4        # new params replicated on all 4


@pytest.mark.slow
def test_auto_devices_on_cpu_fall_back_to_one_device_for_large_cohorts(four_devices):
    # m = 10 <= limit 10: all 4 devices; limit 9: one device; devices=4 given: 4.
    assert four_devices["auto_devices"] == [4, 1, 4]


@pytest.mark.slow
def test_four_device_round_params_equal_one_device(four_devices):
    p1, p4 = four_devices["params"]["1"], four_devices["params"]["4"]
    for a, b in zip(p1, p4):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=RTOL, atol=ATOL)
    # And the round did move the parameters (the comparison is not between two zeros).
    assert max(np.max(np.abs(np.asarray(a))) for a in p1) > 1e-3


def test_more_devices_than_available_is_a_clear_error():
    n = jax.device_count()
    with pytest.raises(LdpsimError, match=rf"devices must be <= {n}.*got {n + 1}"):
        sharding.resolve_devices(n + 1)
    cfg = SimulationConfig(dataset="synthetic", model="logreg", population=20,
                           clients_per_round=5, rounds=1, devices=n + 1)
    with pytest.raises(LdpsimError, match="devices must be <="):
        sim.simulate(cfg)
    with pytest.raises(LdpsimError, match="devices"):
        rnd.make_round_fn(apply_fn=lambda p, x: x, devices=n + 1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_config_rejects_bad_devices(bad):
    with pytest.raises(LdpsimError, match="devices must be an integer >= 1"):
        SimulationConfig(devices=bad)


def test_chunks_in_flight_default_and_validation(monkeypatch):
    big = _policy.CPU_CHUNKS_IN_FLIGHT_MIN_CHUNKS
    k = _policy.CPU_ONE_DEVICE_CHUNKS_IN_FLIGHT
    monkeypatch.setattr(_policy, "usable_cores", lambda: 1)
    assert _policy.resolve_chunks_in_flight(None, 1, big, "cpu") == 1   # one core: no overlap
    assert _policy.resolve_chunks_in_flight(3, 1, big, "cpu") == 3      # unless asked
    monkeypatch.setattr(_policy, "usable_cores", lambda: 2)
    assert _policy.resolve_chunks_in_flight(None, 1, big, "cpu") == k
    assert _policy.resolve_chunks_in_flight(None, 1, big - 1, "cpu") == 1  # small cohort
    assert _policy.resolve_chunks_in_flight(None, 2, big, "cpu") == 1   # one device per core
    assert _policy.resolve_chunks_in_flight(None, 1, big, "gpu") == 1
    assert _policy.resolve_chunks_in_flight(5, 2, 10, "cpu") == 5
    assert _policy.resolve_chunks_in_flight(5, 2, 2, "cpu") == 2     # at most n_chunks
    with pytest.raises(LdpsimError, match="chunks_in_flight"):
        _policy.resolve_chunks_in_flight(0, 1, 10, "cpu")


def test_layout_pads_every_device_to_the_same_chunks():
    # One device: exactly chunk_layout; D devices: ceil(m / D) slots each.
    assert sharding.cohort_layout(10, 2, 1) == _policy.chunk_layout(10, 2) == (5, 2)
    assert sharding.cohort_layout(10, 2, 4) == (2, 2)      # 4 x 2 x 2 = 16 slots >= 10
    assert sharding.cohort_layout(1000, 64, 2) == _policy.chunk_layout(500, 64)
    assert sharding.resolve_devices(None) == jax.device_count()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_with_jax_distributed_give_the_one_device_history(tmp_path):
    """``ldpsim run --distributed``: 2 processes x 2 host devices share the cohort (gloo
    collectives on CPU); process 0 alone writes the CSV, equal to one device's history."""
    import pandas as pd

    settings = dict(dataset="synthetic", model="logreg", population=40, clients_per_round=10,
                    rounds=2, epsilon=10.0, delta=1e-3, batch_size=7, local_steps=1,
                    chunk_size=2)
    flags = ["--dataset", "synthetic", "--model", "logreg", "--population", "40",
             "--clients-per-round", "10", "--rounds", "2", "--epsilon", "10", "--delta",
             "1e-3", "--batch-size", "7", "--local-steps", "1", "--chunk-size", "2",
             "--no-progress", "--distributed", "--coordinator-address",
             f"localhost:{_free_port()}", "--num-processes", "2"]
    env = dict(os.environ, XLA_FLAGS=_with_host_devices(2),
               JAX_PLATFORMS="cpu",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-m", "ldpsim", "run", *flags, "--process-id",
                               str(i), "--out", str(tmp_path / f"p{i}.csv")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in (0, 1)]
    one = sim.simulate(SimulationConfig(devices=1, **settings))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert not (tmp_path / "p1.csv").exists()     # only process 0 writes
    four = pd.read_csv(tmp_path / "p0.csv")
    assert len(four) == len(one) == 2
    for r1, (_, r4) in zip(one, four.iterrows()):
        assert r4["clients"] == r1["clients"] == 10
        for key in ("loss", "noise_norm", "signal_norm", "train_loss", "model_change_norm"):
            assert r4[key] == pytest.approx(r1[key], rel=RTOL, abs=ATOL), key


def test_poisson_capacity_with_the_default_chunk_size():
    # chunk_size=None (the backend default) used to fail with a TypeError here.
    from scipy import stats

    cfg = SimulationConfig(sampling="poisson", population=1000, clients_per_round=100)
    cap = sim._poisson_capacity(cfg)
    assert cap >= stats.binom.ppf(1 - 1e-9, 1000, 0.1)
    chunk = _policy.resolve_chunk_size(None)
    assert cap <= chunk or cap % chunk == 0   # whole chunks when above one chunk


def test_chunks_in_flight_follow_the_process_affinity(monkeypatch):
    # The real chain, os.sched_getaffinity -> usable_cores -> the policy: a process pinned to
    # one core (taskset) keeps one chunk in flight; two usable cores get the default.
    import os

    from ldpsim._src import _devices

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    big = _policy.CPU_CHUNKS_IN_FLIGHT_MIN_CHUNKS
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert _devices.usable_cores() == 1
    assert _policy.resolve_chunks_in_flight(None, 1, big, "cpu") == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert _devices.usable_cores() == 2
    assert _policy.resolve_chunks_in_flight(None, 1, big, "cpu") == _policy.CPU_ONE_DEVICE_CHUNKS_IN_FLIGHT
