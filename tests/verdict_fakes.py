"""A small hand-made sweep table for the verdict tests (tests/sweep, tests/plots, tests/e2e).

Two rounds per run (5 and 10; the verdict must use round 10), three settings, a case of each
kind of gap (paired, Welch without common seeds, one seed). Values are chosen so that the
t-intervals can be worked by hand (see tests/sweep/test_verdict.py).
"""

from __future__ import annotations

import math

import pandas as pd

INF = math.inf
# final accuracy (round 10) per (neighbours, epsilon, m): {seed: accuracy}
FINAL = {
    ("add-remove", INF, 10): {0: 0.90, 1: 0.92, 2: 0.94},
    ("add-remove", INF, 100): {0: 0.95, 1: 0.95, 2: 0.96},
    ("add-remove", INF, 1000): {0: 0.97, 1: 0.97, 2: 0.98},
    ("add-remove", 10.0, 10): {0: 0.80, 1: 0.83, 2: 0.83},    # gaps -10, -9, -11 points
    ("add-remove", 10.0, 100): {0: 0.94, 1: 0.955, 2: 0.955},  # mean within 1 point, CI not
    ("add-remove", 10.0, 1000): {0: 0.969, 1: 0.971, 2: 0.978},  # within by mean and CI
    ("replace", 10.0, 10): {3: 0.85, 4: 0.87},                  # no common seed: Welch
    ("replace", 10.0, 100): {0: 0.95},                           # one seed: no interval
}
SIGMA = {("add-remove", 10.0): 2.0, ("replace", 10.0): 4.0}
SENS = {"add-remove": 1.0, "replace": 2.0}


def verdict_table() -> pd.DataFrame:
    """Rows as `ldpsim sweep` writes them (a subset of its columns), two rounds per run."""
    rows = []
    for (nb, eps, m), accs in FINAL.items():
        for seed, acc in accs.items():
            for rnd, a in ((5, acc - 0.3), (10, acc)):  # the earlier round must be ignored
                private = math.isfinite(eps)
                rows.append(dict(neighbours=nb, epsilon=eps, clients_per_round=m, seed=seed, round=rnd,
                                 accuracy=a, sigma=SIGMA[(nb, eps)] if private else 0.0,
                                 sensitivity=SENS[nb] if private else math.nan,
                                 delta=1e-5 if private else math.nan, max_participation=rnd // 5,
                                 epsilon_spent=(3.0 + m / 1000 if nb == "add-remove" else INF) if private else math.nan,
                                 noise_norm=SIGMA[(nb, eps)] * 10 / math.sqrt(m) if private else 0.0,
                                 theory_noise_norm=SIGMA[(nb, eps)] * 10 / math.sqrt(m) if private else 0.0,
                                 signal_norm=0.2,
                                 cell=f"clients_per_round={m};epsilon={eps:g};seed={seed}"))
    return pd.DataFrame(rows)
