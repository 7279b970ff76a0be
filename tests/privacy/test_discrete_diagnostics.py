"""Diagnostics of the distributed discrete mechanisms: exact values on hand-made inputs."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src.privacy.discrete import accounting as A
from ldpsim._src.privacy.discrete import diagnostics as G


def test_rounding_stats_exact():
    x = jnp.asarray([[0.5, -1.25, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]], jnp.float32)
    v = jnp.asarray([[1, -1, 3, 0], [0, 0, 0, 0]], jnp.int32)
    bias, infl = jax.jit(G.rounding_stats)(x, v)
    np.testing.assert_allclose(np.asarray(bias), [(0.5 + 0.25) / 4, 0.0], rtol=1e-7)
    np.testing.assert_allclose(np.asarray(infl)[0], math.sqrt(11) / math.sqrt(0.25 + 1.5625 + 9),
                               rtol=1e-6)
    assert float(infl[1]) == 1.0


def test_wrapped_fraction_and_decoded_error():
    s = jnp.asarray([-129, -128, 0, 127, 128, 5], jnp.int32)
    assert float(jax.jit(lambda t: G.wrapped_fraction(t, 8))(s)) == pytest.approx(2 / 6)
    assert float(G.decoded_error_std(jnp.asarray([1.0, 3.0]), jnp.asarray([0.0, 0.0]))) == \
        pytest.approx(math.sqrt(5))


def test_noise_std_ratio_formula():
    m = A.DiscreteMechanism("skellam", clip=1.0, granularity=0.01, noise=400.0, clients=100,
                            dim=1000)
    assert G.noise_std_ratio(m, 2.0) == pytest.approx(0.01 * math.sqrt(100 * 400 + 25) / 2.0)
    assert G.noise_std_ratio(m, 2.0, survivors=50) == pytest.approx(
        0.01 * math.sqrt(50 * 400 + 12.5) / 2.0)
