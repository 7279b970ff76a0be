"""Sweep ε axis: one vmapped program vs the cells one by one (same data, cohorts, keys).

Prints a table: median wall time of R repeats after a warm-up (compilation excluded for both),
and the ratio. Usage: python benchmarks/sweep_vmap_epsilon.py [--model mlp] [--clients 100]
[--rounds 5] [--epsilons 1,3,10,30] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.simulate import build_data, simulate
from ldpsim._src.sweep.engine import simulate_epsilon_axis


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="synthetic")
    p.add_argument("--model", default="mlp")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--population", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--epsilons", default="1,3,10,30")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    base = SimulationConfig(dataset=a.dataset, model=a.model, population=a.population, clients_per_round=a.clients,
                            rounds=a.rounds, epsilon=1.0, delta=1e-5)
    configs = [dataclasses.replace(base, epsilon=float(e)) for e in a.epsilons.split(",")]
    data = build_data(base)

    def one_by_one():
        return [simulate(c, data=data) for c in configs]

    def vmapped():
        return simulate_epsilon_axis(configs, data=data)

    times = {}
    for name, fn in (("one by one", one_by_one), ("vmapped", vmapped)):
        fn()  # warm-up: compile
        runs = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t)
        times[name] = statistics.median(runs)
    print(f"{len(configs)} epsilons x {a.rounds} rounds, {a.model}/{a.dataset}, m = {a.clients}, "
          f"median of {a.repeats} after warm-up")
    print(f"{'formulation':<12} {'seconds':>9} {'speed-up':>9}")
    for name, t in times.items():
        print(f"{name:<12} {t:>9.3f} {times['one by one'] / t:>9.2f}")


if __name__ == "__main__":
    main()
