"""Partitioners and make_population."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim.data import (
    PaddedPopulation,
    SampledPopulation,
    dirichlet_partition,
    iid_partition,
    load_dataset,
    load_femnist,
    make_population,
    natural_partition,
    shard_partition,
    to_population,
)


def _labels(n=6000, k=10, seed=0):
    return np.random.default_rng(seed).integers(0, k, n)


def _assert_exact_cover(parts, n):
    allidx = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(allidx), np.arange(n))


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards"])
def test_disjoint_partitions_assign_every_example_once(scheme):
    y = _labels(6001)
    if scheme == "iid":
        parts = iid_partition(len(y), 37, seed=1)
    elif scheme == "dirichlet":
        parts = dirichlet_partition(y, 37, 0.1, seed=1)
    else:
        parts = shard_partition(y, 37, seed=1)
    assert len(parts) == 37
    _assert_exact_cover(parts, len(y))
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() - sizes.min() <= (1 if scheme != "shards" else 2)
    again = {"iid": lambda: iid_partition(len(y), 37, seed=1),
             "dirichlet": lambda: dirichlet_partition(y, 37, 0.1, seed=1),
             "shards": lambda: shard_partition(y, 37, seed=1)}[scheme]()
    for a, b in zip(parts, again):
        np.testing.assert_array_equal(a, b)


def test_shards_give_few_classes_per_client():
    y = _labels(6000)
    parts = shard_partition(y, 100, seed=0)
    classes = np.array([len(np.unique(y[p])) for p in parts])
    # Two shards of 30 sorted labels: each spans at most 2 classes, so <= 4 per client.
    assert classes.max() <= 4 and np.mean(classes) < 3


def _mean_tv(y, parts, k):
    pool = np.bincount(y, minlength=k) / len(y)
    return np.mean([0.5 * np.abs(np.bincount(y[p], minlength=k) / len(p) - pool).sum() for p in parts])


def _mean_dominant(y, parts, k):
    return np.mean([np.bincount(y[p], minlength=k).max() / len(p) for p in parts])


def test_dirichlet_extremes_measured_on_mnist(data_root):
    y = load_dataset("mnist", data_root, source="idx").y_train
    iid = iid_partition(len(y), 100, seed=0)
    big = dirichlet_partition(y, 100, 1e4, seed=0)
    small = dirichlet_partition(y, 100, 0.01, seed=0)
    tv_iid, tv_big, tv_small = _mean_tv(y, iid, 10), _mean_tv(y, big, 10), _mean_tv(y, small, 10)
    # Large alpha approaches IID: its label histograms are as close to the pool as an
    # IID split's are (sampling noise only; the IID value is ~0.05 with 600 per client).
    assert tv_big < 1.5 * tv_iid, (tv_big, tv_iid)
    # Small alpha: nearly one class per client.  The dominant class holds > 90% of a
    # client's data on average (IID: ~12%), and most clients are > 95% one class.
    dom = [np.bincount(y[p], minlength=10).max() / len(p) for p in small]
    assert np.mean(dom) > 0.9 and np.mean(np.array(dom) > 0.95) > 0.75, np.mean(dom)
    assert _mean_dominant(y, iid, 10) < 0.15 and tv_small > 0.8


def test_to_population_rows_match_partition():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 3)).astype(np.float32)
    y = rng.integers(0, 4, 500)
    parts = dirichlet_partition(y, 9, 0.3, seed=2)
    pop = to_population(x, y, parts)
    assert isinstance(pop, PaddedPopulation) and pop.num_clients == 9
    gx, gy, gc = jax.jit(lambda p, i: p.gather(i))(pop, jnp.arange(9))
    for c, p in enumerate(parts):
        assert int(gc[c]) == len(p)
        np.testing.assert_array_equal(np.asarray(gx[c, : len(p)]), x[p])
        np.testing.assert_array_equal(np.asarray(gy[c, : len(p)]), y[p])
    capped = to_population(x, y, parts, max_examples=20)
    assert capped.max_examples == 20 and capped.client_counts().max() == 20


def test_natural_partition_on_femnist(data_root):
    ds = load_femnist(data_root)
    parts = natural_partition(ds.train_client_ids)
    assert len(parts) == 105
    _assert_exact_cover(parts, ds.num_train)
    pop = make_population(ds, "natural", max_examples=64)
    assert pop.num_clients == 105 and pop.input_shape == (28, 28, 1) and pop.num_classes == 62
    some = natural_partition(ds.train_client_ids, 10, seed=1)
    assert len(some) == 10 and all(len(np.unique(ds.train_client_ids[p])) == 1 for p in some)


def test_make_population_schemes_and_errors():
    ds = load_dataset("synthetic", num_clients=10, samples_per_client=20)  # 180 train examples
    pop = make_population(ds, "iid", 30, seed=0)
    assert pop.num_clients == 30 and pop.client_counts().sum() == ds.num_train
    sampled = make_population(ds, "sampled", 10**6, alpha=0.5, examples_per_client=8)
    assert isinstance(sampled, SampledPopulation) and sampled.num_clients == 10**6
    with pytest.raises(LdpsimError, match="num_clients=181.*180.*partition='sampled'"):
        make_population(ds, "iid", 181)
    with pytest.raises(LdpsimError, match="partition='sampled'"):
        make_population(ds, "shards", 91)  # 182 shards > 180 examples
    for bad in (0, -0.5):
        with pytest.raises(LdpsimError, match="alpha must be > 0"):
            make_population(ds, "dirichlet", 5, alpha=bad)
        with pytest.raises(LdpsimError, match="alpha must be > 0"):
            dirichlet_partition(ds.y_train, 5, bad)
    with pytest.raises(LdpsimError, match="partition must be one of"):
        make_population(ds, "random", 5)
    with pytest.raises(LdpsimError, match="exceeds the 10 natural clients"):
        make_population(ds, "natural", 11)
    mnist_like = ds.__class__(name="plain", x_train=ds.x_train, y_train=ds.y_train,
                              x_test=ds.x_test, y_test=ds.y_test, num_classes=10)
    with pytest.raises(LdpsimError, match="no natural clients"):
        make_population(mnist_like, "natural")
