"""A small federated logistic-regression problem shared by tests (and their child processes)."""

from __future__ import annotations

import numpy as np

from ldpsim.data import PaddedPopulation


def toy_logreg_problem(n_clients: int = 24, n_test: int = 100, seed: int = 0):
    """``(population, x_test, y_test)``: 6 features, 3 classes, labels from a random linear
    map; each client holds 3..10 of 10 padded examples."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(6, 3))
    x = rng.normal(size=(n_clients, 10, 6)).astype(np.float32)
    y = np.argmax(x @ w, -1)
    counts = rng.integers(3, 11, size=n_clients)
    xt = rng.normal(size=(n_test, 6)).astype(np.float32)
    pop = PaddedPopulation.from_arrays(x, y, counts, num_classes=3, compact=False)
    return pop, xt, np.argmax(xt @ w, -1)
