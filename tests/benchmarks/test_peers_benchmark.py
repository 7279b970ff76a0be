"""benchmarks/peers/run.py: its ldpsim side builds the workload its docstring states, and its
table's ratios are to the fastest pfl configuration of the same repeat.

No peer framework is imported (the ``peers`` extra is never installed in CI); the round
function is built but not compiled, so the test stays cheap.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from pathlib import Path

import jax
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_runner():
    spec = importlib.util.spec_from_file_location("peers_run",
                                                  REPO / "benchmarks" / "peers" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = _load_runner()


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_ldpsim_side_is_the_stated_workload():
    round_fn, state, pop, ids, mask, hyper, info = run.ldpsim_setup(5)
    # LeNet-5 with biases, layer by layer as the docstring lists them.
    sizes = {name: sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(layer))
             for name, layer in state.params.items()}
    assert sizes == {"conv1": 156, "conv2": 2416, "fc1": 48120, "fc2": 10164, "fc3": 850}
    assert info["params"] == sum(sizes.values()) == run.LENET5_PARAMS == 61_706
    assert state.params["conv1"]["kernel"].shape == (5, 5, 1, 6)
    assert state.params["fc1"]["kernel"].shape == (400, 120)
    # 32 examples, batch 16, 2 local steps; C = 1, sigma = 0.25, client lr 0.05.
    assert info["local_steps"] == 2 and info["examples_per_client"] == 32
    assert math.isclose(info["sigma"], 0.25) and math.isclose(info["clip"], 1.0)
    assert math.isclose(info["client_lr"], 0.05, rel_tol=1e-6)
    assert pop.num_clients == run.MIN_POPULATION and pop.max_examples == run.EXAMPLES
    x, y, counts = pop.gather(ids[:2])
    assert x.shape == (2, 32, 28, 28, 1) and x.dtype == np.float32
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert np.all(np.asarray(counts) == 32)
    # m distinct clients, every slot real.
    ids = np.asarray(ids)
    assert ids.shape == (5,) and len(set(ids.tolist())) == 5 and ids.max() < pop.num_clients
    assert bool(np.all(np.asarray(mask)))
    assert callable(round_fn)


def _row(config, m, repeat, rate):
    return {"config": config, "m": m, "repeat": repeat, "rate": rate, "seconds": m / rate,
            "params": 61_706, "local_steps": 2, "load_before": 1.0, "load_after": 2.0}


def test_ratios_are_to_the_fastest_pfl_configuration_of_the_same_repeat():
    rows = [_row("pfl-1thr", 100, 0, 50.0), _row("pfl-2proc", 100, 0, 80.0),
            _row("ldpsim-1dev", 100, 0, 400.0),
            _row("pfl-1thr", 100, 1, 100.0), _row("pfl-2proc", 100, 1, 40.0),
            _row("ldpsim-1dev", 100, 1, 300.0),
            _row("pfl-1thr", 100, 2, 60.0), _row("pfl-2proc", 100, 2, 60.0),
            _row("ldpsim-1dev", 100, 2, 330.0)]
    args = argparse.Namespace(ms=[100], configs=["pfl-1thr", "pfl-2proc", "ldpsim-1dev"],
                              warmup=2, rounds=3, min_updates=300, repeats=3)
    table = run.report(rows, args, "now")
    line = next(li for li in table.splitlines() if li.startswith("| ldpsim-1dev"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # Per-repeat ratios 400/80 = 5.00, 300/100 = 3.00, 330/60 = 5.50: median 5.00.
    assert cells[2] == "330"            # median rate over repeats
    assert cells[3] == "300–400"
    assert cells[4] == "5.00" and cells[5] == "3.00–5.50"
    assert cells[7] == "61,706" and cells[8] == "2"
    pfl = next(li for li in table.splitlines() if li.startswith("| pfl-2proc"))
    # 80/80, 40/100, 60/60.
    assert [c.strip() for c in pfl.strip("|").split("|")][4:6] == ["1.00", "0.40–1.00"]
