"""Pipeline audit with canary clients: claimed ε (the accountant) against ε_lb, in ONE run each.

Runs :func:`ldpsim.audit.audit_pipeline` on a small LDP-FedAvg problem (logistic regression,
24 real clients of which 8 are sampled per round, every canary in every round, Gaussian
randomizer, clip 1, replace-one, δ = 1e-5), and prints the tables:

1. ε_total ∈ {1, 4, 16} (the accountant's ε after the rounds) × canaries: the one-run bound
   (Steinke et al. 2023), its cap for the guesses made, and the GDP route (Nasr et al. 2023).
2. the same claim spread over 1, 4 or 16 rounds.
3. what only the aggregate shows, and the planted bugs.
4. with ``--seeds N``: mean ± sd over seeds of the rows the tests rely on.

Usage::

    python benchmarks/audit_pipeline.py             # a few minutes on 2 cores
    python benchmarks/audit_pipeline.py --seeds 5   # adds the spread over seeds
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np

from ldpsim.audit import audit_pipeline, per_round_epsilon
from ldpsim.data import PaddedPopulation
from ldpsim.fl import SimulationConfig

DELTA = 1e-5


def toy_population(n_clients: int = 24, seed: int = 0):
    """6 features, 3 classes, labels from a random linear map, 3..10 examples per client."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(6, 3))
    x = rng.normal(size=(n_clients, 10, 6)).astype(np.float32)
    counts = rng.integers(3, 11, size=n_clients)
    pop = PaddedPopulation.from_arrays(x, np.argmax(x @ w, -1), counts, num_classes=3,
                                       compact=False)
    return pop, None, None


def config(total: float, rounds: int, seed: int = 0) -> SimulationConfig:
    return SimulationConfig(dataset="toy", model="logreg", population=24, clients_per_round=8,
                            rounds=rounds, epsilon=per_round_epsilon(total, DELTA, rounds),
                            delta=DELTA, clip=1.0, seed=seed)


def fmt(x: float) -> str:
    return "nan" if math.isnan(x) else "inf" if math.isinf(x) else f"{x:.2f}"


HEADER = (f"{'eps claim':>9} {'rounds':>6} {'canaries':>8} {'view':>9} {'bug':>20} "
          f"{'eps_lb 1run':>11} {'cap':>5} {'r':>5} {'v':>5} {'eps_lb GDP':>10} "
          f"{'mu_lb':>6} {'mu_hat':>6} {'mu_claim':>8} {'s':>5}")


def row(a) -> str:
    return (f"{fmt(a.epsilon_claimed):>9} {a.rounds:>6} {a.canaries:>8} {a.observe:>9} "
            f"{str(a.planted_bug or '-'):>20} {fmt(a.epsilon_lb):>11} {fmt(a.epsilon_cap):>5} "
            f"{a.guesses:>5} {a.correct:>5} {fmt(a.epsilon_lb_gdp):>10} {fmt(a.mu_lb):>6} "
            f"{fmt(a.mu_hat):>6} {fmt(a.mu_claimed):>8} {a.seconds:>5.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epsilons", default="1,4,16")
    p.add_argument("--canaries", default="1000,4000,16000")
    p.add_argument("--rounds", default="1,4,16")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--seeds", type=int, default=0, help="repeat the test rows over N seeds")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    data = toy_population()
    eps_list = [float(e) for e in args.epsilons.split(",")]
    m_list = [int(m) for m in args.canaries.split(",")]
    t_list = [int(t) for t in args.rounds.split(",")]
    conf = args.confidence
    start = time.perf_counter()

    def run(total, rounds, m, seed=0, **kw):
        return audit_pipeline(config(total, rounds, seed), canaries=m, confidence=conf,
                              data=data, **kw)

    print(f"# 1. claimed eps_total x canaries (4 rounds, reports, {conf:g} confidence)")
    print(HEADER)
    for eps in eps_list:
        for m in m_list:
            print(row(run(eps, 4, m)), flush=True)
    print(f"\n# 2. the same claim over more rounds (canaries {m_list[len(m_list) // 2]})")
    print(HEADER)
    m_mid = m_list[len(m_list) // 2]
    for eps in eps_list:
        for t in t_list:
            print(row(run(eps, t, m_mid)), flush=True)
    print("\n# 3. aggregate only, and planted bugs")
    print(HEADER)
    for eps in eps_list[:2]:
        print(row(run(eps, 4, m_mid, observe="aggregate")), flush=True)
    for bug in ("sensitivity-c", "half-clip"):
        for m in m_list:
            print(row(run(2.0, 4, m, planted_bug=bug)), flush=True)
    for m in m_list:
        print(row(run(4.0, 16, m, planted_bug="one-round-accounting")), flush=True)
    if args.seeds:
        print(f"\n# 4. spread over seeds 0..{args.seeds - 1} (canaries {m_mid})")
        cases = [("correct eps 2, 4 rounds", dict(total=2.0, rounds=4)),
                 ("correct eps 4, 16 rounds", dict(total=4.0, rounds=16)),
                 ("sensitivity-c eps 2", dict(total=2.0, rounds=4, planted_bug="sensitivity-c")),
                 ("one-round-accounting", dict(total=4.0, rounds=16,
                                               planted_bug="one-round-accounting"))]
        for name, kw in cases:
            total, rounds = kw.pop("total"), kw.pop("rounds")
            res = [run(total, rounds, m_mid, seed=s, **kw) for s in range(args.seeds)]
            one = np.array([a.epsilon_lb for a in res])
            gdp = np.array([a.epsilon_lb_gdp for a in res])
            mu = np.array([a.mu_lb for a in res])
            print(f"{name:>26}: claim {fmt(res[0].epsilon_claimed)}  one-run {one.mean():.2f} ± "
                  f"{one.std(ddof=1):.2f} (min {one.min():.2f})  GDP {gdp.mean():.2f} ± "
                  f"{gdp.std(ddof=1):.2f} (min {gdp.min():.2f})  mu_lb {mu.mean():.3f} ± "
                  f"{mu.std(ddof=1):.3f}", flush=True)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
