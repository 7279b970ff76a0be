"""The FedProx synthetic(alpha, beta) benchmark: federated data that needs no download.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020 (arXiv:1812.06127), Section 5.1 and its
reference generator ``data/synthetic_*/generate_niid.py``.  For device ``k``:

* ``u_k ~ N(0, alpha^2)``, ``B_k ~ N(0, beta^2)`` (the reference code draws with
  standard deviation alpha and beta);
* ``W_k ~ N(u_k, 1)`` of shape 60x10, ``b_k ~ N(u_k, 1)`` of shape 10;
* ``v_k ~ N(B_k, 1)`` in R^60 and ``x ~ N(v_k, Sigma)``, ``Sigma = diag(j^-1.2)``;
* ``y = argmax(x W_k + b_k)`` (argmax of the softmax), 10 classes;
* ``n_k = floor(LogNormal(4, 2)) + 50`` samples (a power law, as in the code).

``alpha`` controls how much local models differ, ``beta`` how much local inputs
differ; ``synthetic(0, 0)`` still has per-device models, and ``iid=True`` gives
the paper's ``synthetic_iid`` (one shared ``W, b ~ N(0, 1)``, all ``v_k = 0``).

Deviations, both optional: ``max_samples_per_client`` (default 1000) truncates the
heavy LogNormal tail so padded client arrays stay small (``None`` = as in the
paper); ``samples_per_client`` fixes every ``n_k``.  Each device's data is drawn
from its own generator ``default_rng([seed, k])`` (shared ones for
``iid``), so device ``k``'s data does not depend on ``num_clients``.  Every
device's first ``train_fraction`` (0.9, as in the reference code) of samples are
train, the rest test.  ``Dataset.info["max_train_per_device"]`` is the largest number
of train samples any device can get under these settings, whatever the seed (from the
cap), so that padded client arrays can be shaped without looking at the draw.
"""

from __future__ import annotations

import functools

import numpy as np

from ldpsim._src._checks import LdpsimError, check_nonnegative, check_open_unit, check_positive_int
from ldpsim._src.data.dataset import Dataset

__all__ = ["load_synthetic", "synthetic_client"]

DIM = 60
NUM_CLASSES = 10
_SIGMA_SQRT = np.power(np.arange(1, DIM + 1, dtype=np.float64), -1.2) ** 0.5


def synthetic_client(
    k: int,
    *,
    alpha: float,
    beta: float,
    seed: int,
    iid: bool = False,
    samples_per_client: int | None = None,
    max_samples_per_client: int | None = 1000,
) -> tuple[np.ndarray, np.ndarray]:
    """All samples of device ``k``: ``(x float32[n_k, 60], y int32[n_k])``."""
    rng = np.random.default_rng([seed, k])
    if samples_per_client is None:
        n = int(rng.lognormal(4, 2)) + 50
    else:
        n = samples_per_client
    if max_samples_per_client is not None:
        n = min(n, max_samples_per_client)
    if iid:
        shared = np.random.default_rng([seed, 2**31])
        w = shared.normal(0.0, 1.0, (DIM, NUM_CLASSES))
        b = shared.normal(0.0, 1.0, NUM_CLASSES)
        v = np.zeros(DIM)
    else:
        u = rng.normal(0.0, alpha)
        big_b = rng.normal(0.0, beta)
        w = rng.normal(u, 1.0, (DIM, NUM_CLASSES))
        b = rng.normal(u, 1.0, NUM_CLASSES)
        v = rng.normal(big_b, 1.0, DIM)
    x = v + rng.standard_normal((n, DIM)) * _SIGMA_SQRT
    y = np.argmax(x @ w + b, axis=1)
    return x.astype(np.float32), y.astype(np.int32)


@functools.lru_cache(maxsize=8)
def _load(num_clients, alpha, beta, seed, iid, samples_per_client, max_samples, train_fraction):
    parts = [
        synthetic_client(
            k, alpha=alpha, beta=beta, seed=seed, iid=iid,
            samples_per_client=samples_per_client, max_samples_per_client=max_samples,
        )
        for k in range(num_clients)
    ]
    splits = {"train": ([], [], []), "test": ([], [], [])}
    for k, (x, y) in enumerate(parts):
        n_train = max(1, int(train_fraction * len(y)))
        for name, sl in (("train", slice(None, n_train)), ("test", slice(n_train, None))):
            xs, ys, cs = splits[name]
            xs.append(x[sl])
            ys.append(y[sl])
            cs.append(np.full(len(y[sl]), k, np.int32))
    (xtr, ytr, ctr), (xte, yte, cte) = (
        tuple(np.concatenate(a) for a in splits[s]) for s in ("train", "test")
    )
    name = "synthetic_iid" if iid else f"synthetic({alpha:g},{beta:g})"
    bound = samples_per_client if samples_per_client is not None else max_samples
    return Dataset(
        name=name,
        x_train=xtr,
        y_train=ytr,
        x_test=xte,
        y_test=yte,
        num_classes=NUM_CLASSES,
        train_client_ids=ctr,
        test_client_ids=cte,
        client_names=tuple(f"device_{k}" for k in range(num_clients)),
        info={"source": "synthetic", "alpha": alpha, "beta": beta, "seed": seed, "iid": iid,
              # Seed-independent bound on any device's train samples (None: uncapped), so
              # padded client arrays can have a shape that depends on the settings only.
              "max_train_per_device": None if bound is None else max(1, int(train_fraction * bound))},
    )


def load_synthetic(
    num_clients: int = 30,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    seed: int = 0,
    iid: bool = False,
    samples_per_client: int | None = None,
    max_samples_per_client: int | None = 1000,
    train_fraction: float = 0.9,
) -> Dataset:
    """Generate FedProx synthetic(alpha, beta) for ``num_clients`` devices (module docstring).

    Args:
      num_clients: number of devices (natural clients); the paper uses 30.
      alpha, beta: heterogeneity of models and of inputs, >= 0.
      seed: generator seed; the result is a deterministic function of the arguments.
      iid: generate ``synthetic_iid`` instead (alpha, beta ignored).
      samples_per_client: fixed ``n_k`` instead of the LogNormal draw.
      max_samples_per_client: cap on ``n_k`` (``None``: uncapped, as in the paper).
      train_fraction: share of each device's samples used for training, in (0, 1).

    Returns:
      A :class:`Dataset` with x float32 ``[n, 60]``, y int32 in 0..9 and natural
      client ids (one per device).
    """
    num_clients = check_positive_int("num_clients", num_clients)
    alpha = check_nonnegative("alpha", alpha)
    beta = check_nonnegative("beta", beta)
    train_fraction = check_open_unit("train_fraction", train_fraction)
    if samples_per_client is not None:
        samples_per_client = check_positive_int("samples_per_client", samples_per_client)
        if samples_per_client < 2:
            raise LdpsimError("samples_per_client must be >= 2 (one train and one test sample)")
    if max_samples_per_client is not None:
        max_samples_per_client = check_positive_int("max_samples_per_client", max_samples_per_client)
    return _load(
        num_clients, alpha, beta, int(seed), bool(iid), samples_per_client,
        max_samples_per_client, train_fraction,
    )
