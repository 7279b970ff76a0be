"""Populations: the engine's view of client data (PaddedPopulation, SampledPopulation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim.data import PaddedPopulation, SampledPopulation, decode_inputs


def _indexed_base(n=3000, num_classes=10, seed=0):
    """Base data whose input encodes its own index: x[i] = (i % 256, i // 256) / 255."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, n)
    idx = np.arange(n)
    x = np.stack([idx % 256, idx // 256], axis=1).astype(np.float32) / np.float32(255)
    return x, y


def _recover_index(x):
    x = np.rint(np.asarray(x) * 255).astype(np.int64)
    return x[..., 0] + 256 * x[..., 1]


def test_decode_inputs_matches_numpy_exactly():
    k = np.arange(256, dtype=np.uint8)
    got = np.asarray(jax.jit(decode_inputs)(jnp.asarray(k)))
    np.testing.assert_array_equal(got, k.astype(np.float32) / np.float32(255))
    assert decode_inputs(jnp.zeros(3, jnp.int8)).dtype == jnp.int32


def test_padded_population_gather_is_take():
    rng = np.random.default_rng(1)
    x = (rng.integers(0, 256, (7, 5, 4, 4, 1)) / 255).astype(np.float32)
    y = rng.integers(0, 3, (7, 5))
    counts = np.array([5, 1, 0, 3, 5, 2, 4])
    pop = PaddedPopulation.from_arrays(x, y, counts)
    assert pop.x.dtype == jnp.uint8  # stored compactly, losslessly
    assert (pop.num_clients, pop.max_examples, pop.input_shape, pop.num_classes) == (7, 5, (4, 4, 1), 3)
    np.testing.assert_array_equal(pop.client_counts(), counts)
    ids = jnp.array([6, 0, 3, 3], jnp.int32)
    gx, gy, gc = jax.jit(lambda p, i: p.gather(i))(pop, ids)
    assert gx.dtype == jnp.float32 and gy.dtype == jnp.int32 and gc.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(gx), x[[6, 0, 3, 3]])
    np.testing.assert_array_equal(np.asarray(gy), y[[6, 0, 3, 3]])
    np.testing.assert_array_equal(np.asarray(gc), counts[[6, 0, 3, 3]])


def test_padded_population_rejects_bad_shapes():
    with pytest.raises(LdpsimError, match="counts must lie in"):
        PaddedPopulation.from_arrays(np.zeros((2, 3, 1)), np.zeros((2, 3)), [1, 4])
    with pytest.raises(LdpsimError, match="disagree"):
        PaddedPopulation.from_arrays(np.zeros((2, 3, 1)), np.zeros((2, 4)), [1, 1])


# One jitted gather shared by the tests below: populations with the same static
# fields and array shapes reuse one compilation (as the engine does across rounds).
_gather = jax.jit(lambda pop, ids: pop.gather(ids))
_log_probs = jax.jit(lambda pop, ids: pop.label_log_probs(ids))
_BASE = _indexed_base()


def _pop(alpha, seed, base=_BASE):
    x, y = base
    return SampledPopulation.create(
        x, y, num_clients=10**6, examples_per_client=16, alpha=alpha, seed=seed
    )


def test_sampled_population_deterministic_and_cohort_independent():
    pop = _pop(0.3, 7)
    ids = jnp.arange(256, dtype=jnp.int32)
    big = _gather(pop, ids)
    again = _gather(_pop(0.3, 7), ids)
    for a, b in zip(big, again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The same client in another cohort (other size, other neighbours, other order).
    small = _gather(pop, jnp.array([999_999, 5, 255, 0], jnp.int32))
    for row, cid in ((1, 5), (2, 255), (3, 0)):
        np.testing.assert_array_equal(np.asarray(small[0][row]), np.asarray(big[0][cid]))
        np.testing.assert_array_equal(np.asarray(small[1][row]), np.asarray(big[1][cid]))
    # Another seed gives other data; different clients differ.
    other = _gather(_pop(0.3, 8), ids)
    assert not np.array_equal(np.asarray(other[1]), np.asarray(big[1]))
    assert not np.array_equal(np.asarray(big[1][0]), np.asarray(big[1][1]))
    np.testing.assert_array_equal(np.asarray(big[2]), np.full(256, 16))
    assert big[0].shape == (256, 16, 2) and pop.client_counts().shape == (10**6,)
    # Examples come from their label's class pool, with replacement, spread over the pool.
    idx = _recover_index(big[0])
    np.testing.assert_array_equal(_BASE[1][idx], np.asarray(big[1]))
    assert len(np.unique(idx)) > 1500


def test_sampled_population_iid_labels_are_uniform():
    _, gy, _ = _gather(_pop(np.inf, 3), jnp.arange(256, dtype=jnp.int32) * 3907)
    counts = np.bincount(np.asarray(gy).ravel(), minlength=10)
    # Chi-square goodness of fit to uniform, 9 dof: the 1e-4 critical value is 33.7
    # (false-failure rate 1e-4 for a correct sampler).
    expected = counts.sum() / 10
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 33.7, (counts, chi2)


def test_sampled_population_label_skew_matches_dirichlet():
    k, n = 10, 4000
    ids = jnp.arange(n, dtype=jnp.int32)
    p = np.exp(np.asarray(_log_probs(_pop(1.0, 5), ids)))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)
    # Dirichlet(alpha 1_K) marginal: mean 1/K, variance (1/K)(1-1/K)/(K alpha + 1).
    # Relative s.e. of the sample variance of Beta(1, 9) with n=4000 is ~3.5%;
    # 15% is > 4 s.e. (false failure < 1e-4).  Means: s.e. 0.0014, tolerance 0.007.
    np.testing.assert_allclose(p.mean(axis=0), 1 / k, atol=0.007)
    np.testing.assert_allclose(p.var(axis=0), (1 / k) * (1 - 1 / k) / (k * 1.0 + 1), rtol=0.15)
    # Small alpha: E[sum_k p_k^2] = (alpha + 1) / (K alpha + 1) = 0.918 for alpha = 0.01
    # (s.d. of sum p^2 <= 0.3, s.e. with n=4000 <= 0.005; tolerance 0.025 > 5 s.e.).
    skew = _pop(0.01, 5)
    p = np.exp(np.asarray(_log_probs(skew, ids)))
    np.testing.assert_allclose((p**2).sum(axis=1).mean(), 1.01 / 1.1, atol=0.025)
    # ... so the drawn labels are (nearly) one class per client: the dominant class
    # holds > 90% of a client's examples on average (theory ~0.94; IID ~0.3 for 16 draws).
    _, gy, _ = _gather(skew, jnp.arange(256, dtype=jnp.int32))
    dominant = np.array([np.bincount(r, minlength=10).max() / 16 for r in np.asarray(gy)])
    assert dominant.mean() > 0.9, dominant.mean()


def test_sampled_population_alpha_is_traced_no_recompile():
    x, y = _indexed_base(n=500)
    traces = []

    @jax.jit
    def f(pop, ids):
        traces.append(1)
        return pop.gather(ids)[1]

    ids = jnp.arange(8, dtype=jnp.int32)
    a = f(SampledPopulation.create(x, y, num_clients=100, examples_per_client=4, alpha=0.1), ids)
    b = f(SampledPopulation.create(x, y, num_clients=100, examples_per_client=4, alpha=np.inf), ids)
    assert len(traces) == 1
    assert a.shape == b.shape == (8, 4)


def test_sampled_population_skips_empty_classes_and_validates():
    x, y = _BASE
    y = np.where(y == 3, 4, y)  # class 3 empty
    _, gy, _ = _gather(_pop(0.05, 1, base=(x, y)), jnp.arange(256, dtype=jnp.int32))
    assert not np.any(np.asarray(gy) == 3)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(LdpsimError, match="alpha"):
            SampledPopulation.create(x, y, num_clients=5, examples_per_client=2, alpha=bad)
    with pytest.raises(LdpsimError, match="num_clients"):
        SampledPopulation.create(x, y, num_clients=0, examples_per_client=2)
