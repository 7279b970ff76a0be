"""Empirical ε lower bounds (``ldpsim.audit``): how close the audit gets to a claim, and what it costs.

Part 1 -- ε_lb against the claimed ε for ldpsim's Gaussian randomizer (analytic calibration,
replace-one, C = 1, δ = 1e-5; 1-D sufficient-statistic game with the default sampler) and
k-ary randomized response (k = 2), ε ∈ {1, 4}, at 95 % confidence, with the threshold
chosen on half the trials and the bound taken on the other half. Target: ε_lb within a
factor 2 of the claim and never above it. The Gaussian needs far more trials than RR: its
privacy loss is unbounded, and the bound only approaches the claim through rare events
(FPR ~ 1e-6 for ε = 4 at δ = 1e-5), whose Clopper–Pearson bounds are wide.

Part 2 -- the full-mechanism path: ``--full-trials`` runs (default 10⁶, half under each
input) of the real :func:`ldpsim._src.privacy.noise.mechanisms.gaussian_randomizer` on a LeNet-5-shaped
update (10 leaves, d = 61,706), each projected on ``x1 − x0`` inside the kernel; wall time
and noise throughput.

Part 3 -- a subtle bug: the classic σ = Δ√(2 ln(1.25/δ))/ε at ε = 10, δ = 1e-5 delivers
ε = 10.39 (4 % above its claim). The trials an audit needs to refute it (threshold fixed in
advance from the ideal analysis, so no selection split) come from the Clopper–Pearson widths
(:func:`ldpsim.audit.gaussian_trials_needed`), and the time from the throughput of the 1-D
counting kernel measured here. It is not run.

Measured (jax 0.10.2, 2 CPU cores shared with other jobs, load average about 4;
``PYTHONPATH=. python benchmarks/audit.py``, about 12 minutes in all)::

    mechanism                           claim  trials/input epsilon_lb lb/claim  seconds
    gaussian (analytic, replace, C=1,       1         1e+09     0.9929    0.993     71.3
    gaussian (analytic, replace, C=1,       4         1e+09     3.9457    0.986     74.7
    rr (k=2)                                1         1e+08     0.9994    0.999      6.0
    rr (k=2)                                4         1e+08     3.9987    1.000      7.6

    full path: 1000000 randomizer runs (500000 per input), d = 61,706: 487.1 s (2053 runs/s,
    1.27e+08 noise draws/s); epsilon_lb = 3.2310 for a claim of 4

    classic sigma at epsilon 10 (true 10.39): scalar counting kernel 8.24e+07 trials/s;
    95 % confidence: 3.93e+10 trials per input for power 50 % (0.27 h), 7.84e+10 for 90 %
    (0.53 h); 99 %: 6.12e+10 (0.41 h) and 1.08e+11 (0.73 h)

Expected values, from the exact rates at the best threshold, for 5·10⁸ evaluation trials:
0.982 for a claim of 1 and 3.90 for a claim of 4. The measured values are 1.7 and 1
standard deviations above these. ``--quick`` (10⁷ / 10⁶ / 2·10⁴) gives 0.85, 3.27, 0.999
and 3.99 in about 40 s.

Usage::

    PYTHONPATH=. python benchmarks/audit.py [--trials 1e9] [--rr-trials 1e8] [--full-trials 1e6]
    PYTHONPATH=. python benchmarks/audit.py --quick      # small budgets, about a minute
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import jax
import numpy as np

from ldpsim import audit as A
from ldpsim._src.privacy.noise.calibration import analytic_gaussian_epsilon, classic_gaussian_sigma

LENET5 = [(5, 5, 1, 6), (6,), (5, 5, 6, 16), (16,), (400, 120), (120,), (120, 84), (84,), (84, 10), (10,)]
DELTA = 1e-5


def table(gaussian_trials: int, rr_trials: int, confidence: float) -> None:
    print(f"\n== epsilon_lb vs claim ({confidence:.0%} confidence, half the trials select, half bound) ==")
    print(f"{'mechanism':<34} {'claim':>6} {'trials/input':>13} {'epsilon_lb':>10} {'lb/claim':>8} {'seconds':>8}")
    for name, trials in (("gaussian", gaussian_trials), ("rr", rr_trials)):
        for eps in (1.0, 4.0):
            kw = dict(delta=DELTA) if name == "gaussian" else dict(k=2)
            rep = A.audit_randomizer(name, epsilon=eps, trials=trials, confidence=confidence, **kw)
            label = ("gaussian (analytic, replace, C=1, d=1e-5)" if name == "gaussian" else "rr (k=2)")[:34]
            r = rep.result
            print(f"{label:<34} {eps:>6g} {trials:>13.3g} {r.epsilon_lb:>10.4f} {r.epsilon_lb / eps:>8.3f} "
                  f"{rep.seconds:>8.1f}", flush=True)


def full_path(runs: int, confidence: float) -> None:
    template = [np.zeros(s, np.float32) for s in LENET5]
    d = sum(x.size for x in template)
    trials = runs // 2
    print(f"\n== full-mechanism path: gaussian_randomizer on a LeNet-5 pytree, d = {d} ==")
    rep = A.audit_randomizer("gaussian", epsilon=4.0, delta=DELTA, trials=trials, confidence=confidence,
                             dim=template)
    r = rep.result
    print(f"{2 * trials} randomizer runs ({trials} per input): {rep.seconds:.1f} s "
          f"({2 * trials / rep.seconds:.0f} runs/s, {2 * trials * d / rep.seconds:.3g} noise draws/s); "
          f"epsilon_lb = {r.epsilon_lb:.4f} for a claim of 4 (black-box maximum {r.epsilon_cap:.2f})", flush=True)


def scalar_throughput(trials: int) -> float:
    """Scalar Gaussian trials per second (both inputs) of the counting kernel, one fixed threshold."""
    mech = A.scalar_gaussian(clip=1.0, stddev=1.0)
    game = A.Game(mech, np.float32(-1), np.float32(1), A.identity_score, key=jax.random.key(0))
    t = np.array([5.0], np.float32)
    game.count_above(t, trials=A.MAX_CHUNK)  # compile
    start = time.perf_counter()
    game.count_above(t, trials=trials)
    return 2 * trials / (time.perf_counter() - start)


def subtle_bug(rate: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sigma = classic_gaussian_sigma(10.0, DELTA, 2.0)
    true_eps = analytic_gaussian_epsilon(sigma, DELTA, 2.0)
    print(f"\n== the classic formula at epsilon = 10, delta = 1e-5: sigma = {sigma:.6f} (Delta = 2), "
          f"true epsilon {true_eps:.4f} ==")
    print(f"scalar counting kernel: {rate:.3g} trials/s on this machine")
    for confidence in (0.95, 0.99):
        for power in (0.5, 0.9):
            plan = A.gaussian_trials_needed(sigma=sigma, sensitivity=2.0, epsilon=10.0, delta=DELTA,
                                            confidence=confidence, power=power, grid=2001)
            hours = 2 * plan.trials / rate / 3600
            print(f"confidence {confidence:.0%}, power {power:.0%}: {plan.trials:.3g} trials per input "
                  f"(threshold {plan.threshold:.3f} sigma above x0: FPR {plan.fpr:.3g}, FNR {plan.fnr:.6f}, "
                  f"exact-rate epsilon {plan.true_epsilon:.3f}); {hours:.2g} h here, "
                  f"{math.ceil(plan.trials / A.MAX_TRIALS)} root keys of 2^32 positions", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=float, default=1e9, help="Gaussian trials per input (part 1)")
    p.add_argument("--rr-trials", type=float, default=1e8, help="RR trials per input (part 1)")
    p.add_argument("--full-trials", type=float, default=1e6, help="randomizer runs on the full path (part 2)")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--quick", action="store_true", help="1e7 / 1e6 / 2e4: a smoke run")
    p.add_argument("--skip-full", action="store_true", help="skip part 2")
    args = p.parse_args()
    if args.quick:
        args.trials, args.rr_trials, args.full_trials = 1e7, 1e6, 2e4
    print(f"jax {jax.__version__}, devices {jax.devices()}")
    table(int(args.trials), int(args.rr_trials), args.confidence)
    if not args.skip_full:
        full_path(int(args.full_trials), args.confidence)
    subtle_bug(scalar_throughput(2**26))


if __name__ == "__main__":
    main()
